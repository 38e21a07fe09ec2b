//! # dgem-mcp
//!
//! dgem as a Model Context Protocol server (rmcp): agents call decision tools
//! over stdio ([`serve_stdio`]) or Streamable HTTP at `/mcp` ([`http_router`],
//! stateless, JSON responses; reference.md §5). Tools: `decide_policy` (a policy template + variables),
//! `decide_custom_questions` (a state + ad-hoc questions in the `/v1/systemone`
//! shape), `list_policy_templates`, `get_health_and_gpu_status` and
//! `warmup_gpu`. Decision results carry structured content (answers,
//! probabilities, normalized entropy, the maximum hesitation) and the same as
//! text. Bad arguments give a tool error (`is_error: true`) naming the field.
//!
//! Stdio writes only protocol bytes to stdout; log to stderr.

mod decision;
mod error;
mod http;
pub mod jsonrpc;
mod server;
pub mod stdio;
mod tools;

use std::sync::Arc;

use dgem_engine::Decider;
use rmcp::ServiceExt as _;

pub use decision::{report, DecisionReport};
pub use dgem_engine::templates::{
    leading_comment, template_variables, QuestionSummary, TemplateDir, TemplateError,
    TemplateSource, TemplateSummary, TEMPLATE_SUFFIX,
};
pub use error::{McpError, ToolError};
pub use http::{
    http_router, http_router_for, normalize_accept, MCP_MAX_BODY_BYTES, MCP_PATH, MCP_TIMEOUT,
};
pub use server::{DecisionServer, NO_GPU_NOTE, SERVER_NAME};
pub use tools::{
    check_backend, decision_schema, has_null_union, input_schema, parse_args, parse_request,
    plain_schema, schema_lint, tool_list, tool_list_for, with_backend_enum, NoArgs, DECIDE_CUSTOM,
    DECIDE_POLICY, HEALTH, LIST_TEMPLATES, LOCAL_BACKEND, WARMUP,
};

/// Serve `server` over any async byte stream pair until the client disconnects.
///
/// # Errors
/// [`McpError::Initialize`] when the handshake fails, [`McpError::Join`] when
/// the server task panics.
pub async fn serve_transport<T, E, A>(server: DecisionServer, transport: T) -> Result<(), McpError>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let running = server
        .serve(transport)
        .await
        .map_err(|e| McpError::Initialize(Box::new(e)))?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "MCP session ended");
    Ok(())
}

/// Serve decisions with `engine` over stdin/stdout until the client
/// disconnects, one message per line ([`stdio::LineTransport`]: every bad
/// line answered, every request answered before the session ends).
///
/// # Errors
/// See [`serve_transport`].
pub async fn serve_stdio(engine: Arc<dyn Decider>, templates: TemplateDir) -> Result<(), McpError> {
    serve_transport(
        DecisionServer::new(engine, templates),
        stdio::LineTransport::new(tokio::io::stdin(), tokio::io::stdout()),
    )
    .await
}
