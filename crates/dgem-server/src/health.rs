//! `GET /health` (always 200), `GET /ready` (200 only after a real warm-up
//! decision), `GET /metrics`, the 410 raw route and the 404 fallback
//! (serving.md §2, §9.5).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::body;
use crate::error::{ApiError, ErrorKind};
use crate::state::{unix_now, AppState};

/// The `server` name reported by `/health` (kept from the original server).
pub const SERVER_NAME: &str = "dgem-structured-server";

/// The readiness JSON: the warm-up's record combined with a live probe of the
/// backend ([`AppState::current_readiness`]), so `ready`/`vllm_ready` turn
/// false and `phase` names the backend's phase as soon as it stops serving.
pub async fn health_body(state: &AppState) -> Value {
    let (r, live) = state.current_readiness().await;
    let info = state.decider().info();
    let cfg = state.config();
    let mut m = Map::new();
    m.insert("status".into(), json!("ok"));
    m.insert("server".into(), json!(SERVER_NAME));
    m.insert("version".into(), json!(cfg.version));
    m.insert("revision".into(), json!(cfg.revision));
    m.insert("vllm_commit".into(), json!(""));
    m.insert("engine".into(), json!(info.runtime));
    m.insert("model".into(), json!(info.model_id));
    m.insert("supports_images".into(), json!(info.supports_images));
    if let Some(c) = &info.canvas {
        // The served canvas decides where wide schemas are chunked.
        m.insert("canvas".into(), json!(c));
    }
    m.insert("phase".into(), json!(r.phase));
    if live.is_warming() {
        // What a start-up phase is doing, in words (a first start's download).
        if let Some(d) = state.decider().starting_detail() {
            m.insert("detail".into(), json!(d));
        }
    }
    m.insert("ready".into(), json!(r.ready));
    m.insert("vllm_ready".into(), json!(r.ready));
    m.insert("bytes_staged_gb".into(), json!(0.0));
    m.insert("inflight".into(), json!(state.inflight()));
    m.insert("max_inflight".into(), json!(cfg.max_inflight));
    m.insert("boot_ts".into(), json!(state.boot_ts()));
    m.insert("now_ts".into(), json!(unix_now()));
    if let Some(s) = r.warmup_s {
        m.insert("warmed".into(), json!(r.ready));
        m.insert("warmup_s".into(), json!(s));
    }
    if let Some(n) = r.priors_warmed {
        m.insert("priors_warmed".into(), json!(n));
    }
    if let Some(ts) = r.ready_ts {
        m.insert("ready_ts".into(), json!(ts));
    }
    if let Some(e) = r.error {
        m.insert("warmup_error".into(), json!(e));
    }
    if let dgem_backend::Health::Failed { reason, .. } = &live {
        m.insert("backend_error".into(), json!(reason));
    }
    if let Some(dir) = &cfg.staging_dir {
        crate::staging::merge(dir, &mut m);
    }
    Value::Object(m)
}

/// `GET /health`, `/invoke/health`, `/`: always 200.
pub async fn health(State(state): State<AppState>) -> Json<Value> {
    Json(health_body(&state).await)
}

/// `GET /ready`: 200 once warmed while the backend serves, 503 otherwise.
pub async fn ready(State(state): State<AppState>) -> Response {
    let (r, _) = state.current_readiness().await;
    let body = json!({"ready": r.ready, "phase": r.phase});
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// `GET /metrics`: Prometheus text.
pub async fn metrics() -> Response {
    let text = crate::telemetry::handle().render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// `POST /v1/raw/chat/completions`: 410, after the body was read.
pub async fn raw_removed(_body: Result<Bytes, BytesRejection>) -> ApiError {
    ApiError::new(
        ErrorKind::RouteRemoved,
        "free-form generation is not served: use /v1/systemone or /v1/chat/completions (decisions)",
    )
}

/// A POST-only route asked with another method: 405 with `Allow: POST`.
pub async fn post_only_fallback(method: Method) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), "POST")
}

/// A GET-only route asked with another method: 405 with `Allow: GET, HEAD`.
pub async fn get_only_fallback(method: Method) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), "GET, HEAD")
}

/// Everything else: 404, except that a POST whose body does not parse is 400 first.
pub async fn fallback(
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiError {
    if method == Method::POST {
        let parsed = match bytes {
            Ok(b) => body::parse(&headers, b).await.map(|_| ()),
            Err(r) => Err(body::rejection(&r)),
        };
        if let Err(e) = parsed {
            return e;
        }
    }
    ApiError::no_route(method.as_str(), uri.path())
}
