//! MCP over Streamable HTTP at `/mcp` (reference.md §5, §4.2): rmcp's
//! [`StreamableHttpService`] in stateless mode with plain JSON responses, the
//! same [`DecisionServer`] tools as stdio.
//!
//! Three things differ from rmcp's defaults, on purpose:
//! * stateless (no `Mcp-Session-Id`): every POST is answered on its own, so the
//!   route works behind load balancers and needs no session store;
//! * `Host` checks are off, as in the original gateway: `dgem serve` binds
//!   `0.0.0.0` and is reached by its public name;
//! * a body that is not one JSON-RPC request is answered with a JSON-RPC error
//!   object and its standard code before rmcp sees it ([`crate::jsonrpc`]);
//! * the `Accept` header is made lenient ([`normalize_accept`]): rmcp answers
//!   406 unless a POST accepts both `application/json` and
//!   `text/event-stream`, but real clients send `application/json` alone, `*/*`
//!   or nothing. The answer is plain JSON either way.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header::{HeaderValue, ACCEPT};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use dgem_engine::Decider;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tracing::Instrument as _;

pub use crate::jsonrpc::MCP_MAX_BODY_BYTES;
use crate::server::DecisionServer;
use dgem_engine::templates::TemplateDir;

/// The route MCP is served at (also with a trailing slash).
pub const MCP_PATH: &str = "/mcp";

/// Longest one `/mcp` request may take before it is answered 504 (a decision on
/// the embedded CPU model takes seconds; this bounds a stuck one).
pub const MCP_TIMEOUT: Duration = Duration::from_secs(300);

/// What a POST must accept for rmcp, and what [`normalize_accept`] sets.
const FULL_ACCEPT: &str = "application/json, text/event-stream";

/// Streamable HTTP MCP at [`MCP_PATH`] over `decider` and the `templates`
/// folder: stateless, JSON responses, lenient `Accept`, bounded body size and
/// time ([`MCP_MAX_BODY_BYTES`], [`MCP_TIMEOUT`]). Merge it into any axum app.
///
/// ```no_run
/// # fn demo(decider: std::sync::Arc<dyn dgem_engine::Decider>) {
/// let app = axum::Router::new()
///     .merge(dgem_mcp::http_router(decider, dgem_mcp::TemplateDir::new("templates")));
/// # let _ = app;
/// # }
/// ```
pub fn http_router(decider: Arc<dyn Decider>, templates: TemplateDir) -> Router {
    http_router_for(DecisionServer::new(decider, templates))
}

/// [`http_router`] over a configured `server` (e.g. one with the deployment's
/// schema defaults, [`DecisionServer::with_defaults`]).
pub fn http_router_for(server: DecisionServer) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MCP_MAX_BODY_BYTES)
        .disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(MCP_PATH, service.clone())
        .route_service(&format!("{MCP_PATH}/"), service)
        .layer(middleware::from_fn(crate::jsonrpc::guard))
        .layer(middleware::from_fn(bounded))
        .layer(middleware::map_request(normalize_accept))
}

/// Make a request's `Accept` one rmcp takes: when it does not already name
/// both `application/json` and `text/event-stream`, it becomes
/// `application/json, text/event-stream` (the server then answers JSON).
/// Only POSTs are touched: a GET asks for an event stream on purpose.
pub async fn normalize_accept(mut req: Request) -> Request {
    if req.method() != axum::http::Method::POST {
        return req;
    }
    let accept = req
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
        .to_ascii_lowercase();
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        req.headers_mut()
            .insert(ACCEPT, HeaderValue::from_static(FULL_ACCEPT));
    }
    req
}

/// Answer 504 with a JSON-RPC-shaped error when a request outlives [`MCP_TIMEOUT`].
async fn bounded(req: Request, next: Next) -> Response {
    let span = tracing::info_span!("mcp_http", method = %req.method(), path = %req.uri().path());
    match tokio::time::timeout(MCP_TIMEOUT, next.run(req).instrument(span)).await {
        Ok(resp) => resp,
        Err(_) => {
            tracing::warn!(timeout_s = MCP_TIMEOUT.as_secs(), "MCP request timed out");
            let body = serde_json::json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32000, "message": format!("request took longer than {} s", MCP_TIMEOUT.as_secs())},
            });
            (StatusCode::GATEWAY_TIMEOUT, axum::Json(body)).into_response()
        }
    }
}
