//! [`Surface`]: how a surface names itself in the service's messages.

/// How a surface names itself in the messages the service writes.
#[derive(Debug, Clone, Copy)]
pub struct Surface {
    /// Where the template ids are listed, e.g. `GET /api/templates`.
    pub templates_from: &'static str,
}

impl Surface {
    /// The Studio HTTP API (`/api/decide`).
    pub const API: Self = Self {
        templates_from: "GET /api/templates",
    };
    /// The MCP tools.
    pub const MCP: Self = Self {
        templates_from: "list_policy_templates",
    };
    /// For tests.
    #[cfg(test)]
    pub(crate) const TEST: Self = Self::API;
}
