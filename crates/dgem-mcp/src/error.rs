//! Errors: [`ToolError`] becomes a tool result with `is_error: true` (the
//! caller sees the message); [`McpError`] ends the server.

/// Why one tool call failed. The message names the argument to fix; it is sent
/// back to the client as a tool error result, except [`ToolError::UnknownTool`],
/// which is the JSON-RPC error -32602 (invalid params) the MCP spec asks for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The tool name is not one this server has.
    #[error("unknown tool `{0}`; call tools/list for the tools this server has")]
    UnknownTool(String),
    /// The arguments do not match the tool's input schema.
    #[error("invalid arguments for `{tool}`: {detail}")]
    Arguments {
        /// The tool called.
        tool: &'static str,
        /// What is wrong, naming the field.
        detail: String,
    },
    /// The `template` argument names no usable template.
    #[error("template: {0}")]
    Template(String),
    /// The template or the questions make an invalid policy.
    #[error("{field}: {detail}")]
    Schema {
        /// The argument at fault (`template`, `variables`, `questions`).
        field: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The engine failed to decide.
    #[error("decision failed: {0}")]
    Engine(#[from] dgem_engine::DecideError),
}

/// Why the MCP server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The MCP handshake with the client failed.
    #[error("MCP initialization failed: {0}")]
    Initialize(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The server task ended abnormally.
    #[error("MCP server task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl ToolError {
    /// A decision service refusal as `tool`'s error: a malformed argument
    /// names it; a template that does not resolve or render, a bad variable
    /// and an invalid policy keep the shapes this server has always given.
    pub fn from_service(tool: &'static str, e: dgem_service::ServiceError) -> Self {
        use dgem_service::ServiceError as S;
        match e {
            S::Field { message, .. } => Self::Arguments {
                tool,
                detail: message,
            },
            S::Variables(detail) | S::NoState(detail) => Self::Schema {
                field: "variables",
                detail,
            },
            S::Template(failure) => failure.error.into(),
            S::Schema { policy, detail } => Self::Schema {
                field: if policy == dgem_service::CUSTOM_LABEL {
                    "questions"
                } else {
                    "template"
                },
                detail: format!("policy `{policy}` is not a valid schema: {detail}"),
            },
            other => Self::Arguments {
                tool,
                detail: other.to_string(),
            },
        }
    }
}

impl From<dgem_engine::templates::TemplateError> for ToolError {
    /// Folder messages get the MCP hint for listing the templates.
    fn from(e: dgem_engine::templates::TemplateError) -> Self {
        use dgem_engine::templates::TemplateError as T;
        match &e {
            T::Name { .. } => {
                let text = e.with_list_hint("call list_policy_templates for the names");
                Self::Template(text.strip_prefix("template: ").unwrap_or(&text).to_string())
            }
            T::Variables(detail) => Self::Schema {
                field: "variables",
                detail: detail.clone(),
            },
            T::Unset { detail, .. } => Self::Schema {
                field: "variables",
                detail: format!(
                    "{detail}; give it in `variables`, or set `allow_missing_vars: true` to decide on the placeholder"
                ),
            },
            T::Schema { .. } => Self::Schema {
                field: "template",
                detail: e.to_string(),
            },
            _ => Self::Schema {
                field: "template",
                detail: e.to_string(),
            },
        }
    }
}
