//! The `/api/*` routes of `dgem serve --studio` and `dgem gateway` (the
//! original's decision API): the templates catalog, decisions from a template
//! or from ad-hoc questions, backend health and the backend list. They decide
//! through the [`Backends`] seam, so the single-model server and the gateway
//! serve the same code: one in-process decider ([`Local`]) or the gateway's
//! router over many backends.

mod backends;
pub mod catalog;
pub mod request;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use dgem_engine::Decider;
use dgem_service::Service;
use serde_json::{json, Value};

pub use backends::{Backends, Local, LOCAL_BACKEND};
pub use catalog::{catalog, CatalogEntry, CatalogQuestion, CORE_CATEGORY};
pub use dgem_service::{RouteFacts, Routed};
pub use request::{ApiDecide, CUSTOM_LABEL, DEFAULT_TEMPLATE};

use crate::error::{ApiError, ErrorKind};

/// Request header that picks a backend (overrides the body's `backend`).
pub const BACKEND_HEADER: &str = "x-dgem-backend";
/// Reply header naming the backend that answered.
pub const BACKEND_USED_HEADER: &str = "x-dgem-backend-used";
/// Reply header naming the Stage-2 model when the cascade wrote an answer.
pub const CASCADE_USED_HEADER: &str = "x-dgem-cascade-used";
/// Reply header counting the taxonomy-expansion suggestions, when asked for.
pub const SUGGESTED_EXPANSIONS_HEADER: &str = "x-dgem-suggested-expansions";

/// Shared state of the `/api` routes.
#[derive(Debug, Clone)]
pub struct ApiState {
    /// What decides: [`Local`] or the gateway.
    pub backends: Arc<dyn Backends>,
    /// The decision service: the policy catalogue (the templates folder, then
    /// the built-ins), the schema defaults a policy is validated under (the
    /// deployment's for `dgem serve --studio`; the built-in ones for `dgem
    /// gateway`, whose replicas receive every field explicitly) and the
    /// deployment's Stage-2 provider and calibration file.
    pub service: Service,
}

/// The `/api/*` routes over one in-process decider (backend `local`), with
/// the deployment's decision `service` (the one its MCP tools use too).
pub fn local_routes(decider: Arc<dyn Decider>, service: Service) -> Router {
    routes(ApiState {
        backends: Arc::new(Local::new(decider)),
        service,
    })
}

/// The `/api/*` routes over `state`: `GET /api/templates`,
/// `POST /api/decide[/{template}]`, `GET /api/health`, `GET /api/backends`.
pub fn routes(state: ApiState) -> Router {
    Router::new()
        .route("/api/templates", get(templates).fallback(get_only))
        .route("/api/decide", post(decide_default).fallback(post_only))
        .route(
            "/api/decide/{*template}",
            post(decide_named).fallback(post_only),
        )
        .route("/api/health", get(health).fallback(get_only))
        .route("/api/backends", get(backend_list).fallback(get_only))
        .with_state(state)
}

/// A POST route asked with another method: 405 with `Allow: POST`.
async fn post_only(method: axum::http::Method) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), "POST")
}

/// A GET route asked with another method: 405 with `Allow: GET, HEAD`.
async fn get_only(method: axum::http::Method) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), "GET, HEAD")
}

/// The backend named by the `X-DGem-Backend` header, if any.
pub fn header_backend(headers: &HeaderMap) -> Option<String> {
    headers
        .get(BACKEND_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Attach `X-DGem-Backend-Used: name` to `resp`.
pub fn with_backend_used(mut resp: Response, name: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(name) {
        resp.headers_mut()
            .insert(HeaderName::from_static(BACKEND_USED_HEADER), v);
    }
    resp
}

async fn templates(State(s): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let dir = s.service.catalogue().dir().clone();
    let list = tokio::task::spawn_blocking(move || catalog(&dir))
        .await
        .map_err(|e| ApiError::new(ErrorKind::Internal, format!("catalog task failed: {e}")))?;
    Ok(Json(json!({"count": list.len(), "templates": list})))
}

async fn decide_default(
    State(s): State<ApiState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => decide(s, None, headers, body).await,
        // 413 over the limit, 408 past the body deadline, 400 otherwise.
        Err(r) => crate::body::rejection(&r).into_response(),
    }
}

async fn decide_named(
    State(s): State<ApiState>,
    Path(template): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => decide(s, Some(template), headers, body).await,
        Err(r) => crate::body::rejection(&r).into_response(),
    }
}

#[tracing::instrument(skip_all, fields(template, backend))]
async fn decide(
    s: ApiState,
    path_template: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match decide_inner(&s, path_template.as_deref(), &headers, &body).await {
        Ok(r) => r,
        Err(e) => {
            if e.kind.status().is_server_error() {
                tracing::warn!(error = %e, "decide failed");
            } else {
                tracing::info!(error = %e, "decide refused");
            }
            e.into_response()
        }
    }
}

async fn decide_inner(
    s: &ApiState,
    path_template: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        dgem_core::json::parse_strict_slice(body).map_err(|e| match e.duplicate {
            // As on every route: a repeated key is 422 naming it.
            Some(_) => ApiError::new(ErrorKind::Validation, format!("body: {e}")),
            None => ApiError::new(ErrorKind::InvalidRequest, format!("body must be JSON: {e}")),
        })?
    };
    let service = s.service.clone();
    let path = path_template.map(str::to_string);
    let mut parsed =
        tokio::task::spawn_blocking(move || request::prepare(&service, path.as_deref(), &value))
            .await
            .map_err(|e| {
                ApiError::new(ErrorKind::Internal, format!("render task failed: {e}"))
            })??;
    tracing::Span::current().record("template", parsed.label.as_str());
    // The header names the backend over the body's `backend`.
    parsed.backend = header_backend(headers).or(parsed.backend.take());
    // The service reads through the backend router and applies the
    // post-read once.
    let decided = s.service.decide_on(s.backends.as_ref(), parsed).await?;
    let route = &decided.route;
    // Written from the typed decision, never read back out of its JSON.
    let decision = &decided.decision;
    let answers = decision.answers_json();
    let diagnostics = decision.diagnostics_json();
    let model = if route.model.is_empty() {
        &decision.diagnostics.model
    } else {
        &route.model
    };
    let mut body = json!({
        "template": decided.label,
        "answers": answers,
        "diagnostics": diagnostics,
        "decision": {"answers": answers, "diagnostics": diagnostics},
        "max_entropy": decision.max_entropy(),
        "wall_time_ms": route.total_ms,
        "gpu_forward_ms": decision.diagnostics.timing.total_ms,
        "cold_start_wait_ms": (route.total_ms - route.forward_ms).max(0.0),
        "warmup_attempts": route.attempts,
        "model": model,
        "backend_target": route.backend,
        "upstream_url": route.upstream_url,
    });
    let cascade_used = decided.after.cascade_model();
    let suggested = decided.after.suggestions.as_ref().map(Vec::len);
    if let (Some(extra), Some(m)) = (decided.after.to_json(), body.as_object_mut()) {
        m.extend(extra);
    }
    let mut resp = with_backend_used(Json(body).into_response(), &route.backend);
    // A model name comes from the request: bounded before it becomes a header.
    let cascade_used = cascade_used.filter(|m| m.len() <= 256);
    if let Some(model) = cascade_used.and_then(|m| HeaderValue::from_str(&m).ok()) {
        resp.headers_mut()
            .insert(HeaderName::from_static(CASCADE_USED_HEADER), model);
    }
    if let Some(n) = suggested {
        resp.headers_mut().insert(
            HeaderName::from_static(SUGGESTED_EXPANSIONS_HEADER),
            HeaderValue::from(n),
        );
    }
    Ok(resp)
}

async fn health(State(s): State<ApiState>) -> Json<Value> {
    let rows = s.backends.health().await;
    Json(json!({
        "status": "ok",
        "default_backend": s.backends.default_backend(),
        "backends": rows,
    }))
}

async fn backend_list(State(s): State<ApiState>) -> Json<Value> {
    Json(json!({
        "default": s.backends.default_backend(),
        "available": s.backends.available(),
    }))
}
