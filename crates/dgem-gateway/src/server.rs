//! The full gateway router: the `/api/*` routes over every configured backend,
//! the pass-through routes `POST /v1/chat/completions` and `POST /v1/systemone`
//! (reference.md §4.6: same selection and failover; the upstream status and
//! body come back verbatim once a 2xx reply is checked against the request,
//! [`crate::reply`]), `GET /health`, and CORS on everything (§4.2).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use dgem_engine::templates::TemplateDir;
use futures_util::FutureExt as _;
use serde_json::{json, Value};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::reply::Expectation;
use crate::routing::Gateway;
use dgem_core::schema::SchemaDefaults;
use dgem_server::api::{header_backend, with_backend_used, ApiState};

/// Service name in `GET /health`.
pub const SERVICE_NAME: &str = "dgem-gateway";

/// State of the full gateway router.
#[derive(Debug, Clone)]
pub struct GatewayState {
    /// The router over the backends.
    pub gateway: Arc<Gateway>,
    /// The policy templates folder.
    pub templates: TemplateDir,
    /// Stage-2 provider and calibration file of `/api/decide`.
    pub after: Arc<dgem_cascade::AfterSetup>,
}

/// CORS of reference.md §4.2: any origin; `GET, POST, PUT, DELETE, OPTIONS`;
/// the headers the Studio and MCP clients send; `Mcp-Session-Id` exposed.
pub fn cors() -> CorsLayer {
    let h = |s: &'static str| HeaderName::from_static(s);
    CorsLayer::new()
        .allow_origin(AllowOrigin::any())
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            h("x-requested-with"),
            header::ACCEPT,
            h("mcp-session-id"),
            h("x-dgem-backend"),
        ])
        .expose_headers([h("mcp-session-id"), h("x-dgem-backend-used")])
}

/// The gateway's own routes: `/api/*`, the pass-through routes and
/// `/health`, with CORS. The CLI adds `/mcp` and the Studio page and serves
/// the whole through `dgem_server::surface` (auth, limits, timeout, panic
/// catcher, telemetry, `/metrics`).
pub fn router(state: GatewayState) -> Router {
    let api = dgem_server::api::routes(ApiState {
        backends: state.gateway.clone(),
        service: dgem_service::Service::new(dgem_service::Catalogue::new(state.templates.clone()))
            .with_after(state.after.clone()),
    });
    // The chat route and its Vertex aliases, as `dgem serve` has them (each
    // also under `/invoke`); every one forwards to the replica's
    // `/v1/chat/completions`. The removed free-form route is 410 here too.
    let mut passthrough = Router::new();
    for prefix in ["", "/invoke"] {
        for path in dgem_server::CHAT_PATHS {
            passthrough = passthrough.route(
                &format!("{prefix}{path}"),
                post(chat).fallback(dgem_server::health::post_only_fallback),
            );
        }
        passthrough = passthrough
            .route(
                &format!("{prefix}/v1/systemone"),
                post(systemone).fallback(dgem_server::health::post_only_fallback),
            )
            .route(
                &format!("{prefix}/v1/raw/chat/completions"),
                post(dgem_server::health::raw_removed)
                    .fallback(dgem_server::health::post_only_fallback),
            );
    }
    let passthrough = passthrough
        .route(
            "/health",
            get(health).fallback(dgem_server::health::get_only_fallback),
        )
        .with_state(state);
    api.merge(passthrough).layer(cors())
}

async fn health(State(s): State<GatewayState>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "service": SERVICE_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "default_backend": s.gateway.default_backend(),
        "available": s.gateway.available(),
    }))
}

async fn chat(State(s): State<GatewayState>, headers: HeaderMap, body: Bytes) -> Response {
    forward(&s, crate::reply::CHAT_PATH, &headers, body).await
}

async fn systemone(State(s): State<GatewayState>, headers: HeaderMap, body: Bytes) -> Response {
    forward(&s, crate::reply::SYSTEMONE_PATH, &headers, body).await
}

/// Body field `backend` of a JSON body, if any (the header wins).
fn body_backend(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("backend")?
        .as_str()
        .map(str::to_string)
}

#[tracing::instrument(skip_all, fields(path, backend))]
async fn forward(
    s: &GatewayState,
    path: &'static str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    tracing::Span::current().record("path", path);
    let requested = header_backend(headers).or_else(|| body_backend(&body));
    // Issue 27: a 2xx reply must answer the request (`crate::reply`); one that
    // does not is the replica's failure and fails over, as on `/api/*`.
    let expectation =
        Expectation::of_request(path, &body, &SchemaDefaults::default()).map(Arc::new);
    let routed = s
        .gateway
        .route(requested.as_deref(), |t| {
            let body = body.clone();
            let expectation = expectation.clone();
            async move {
                let mut f = t.forward(path, body).await?;
                if let Some(e) = expectation.filter(|_| (200..300).contains(&f.status)) {
                    if let Some(rewritten) = e.check(f.content_type.as_deref(), &f.body)? {
                        f.body = Bytes::from(rewritten);
                    }
                }
                Ok(f)
            }
            .boxed()
        })
        .await;
    let routed = match routed {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    tracing::Span::current().record("backend", routed.backend.as_str());
    let f = routed.value;
    let status = StatusCode::from_u16(f.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let ctype = f.content_type.unwrap_or_else(|| "application/json".into());
    let mut resp = (status, [(header::CONTENT_TYPE, ctype)], f.body).into_response();
    for (name, value) in &f.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            axum::http::HeaderValue::from_str(value),
        ) {
            resp.headers_mut().insert(n, v);
        }
    }
    with_backend_used(resp, &routed.backend)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::{BackendSpec, GatewayConfig, Kind, Replica, RouteConfig};
    use axum::body::Body;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    /// A gateway over one in-process scripted replica, with the policy
    /// catalogue of `templates`.
    fn app(templates: &str) -> Router {
        let backend = dgem_testkit::ScriptedBackend::new(dgem_testkit::scripts::want_marker(0.8));
        let engine = Arc::new(dgem_testkit::engine(backend));
        let gateway = Gateway::new(GatewayConfig {
            backends: vec![BackendSpec {
                name: "local".into(),
                kind: Kind::Local,
                replicas: vec![Replica::in_process(engine)],
            }],
            default: None,
            allowed: None,
            route: RouteConfig::default(),
        })
        .unwrap();
        router(GatewayState {
            gateway: Arc::new(gateway),
            templates: TemplateDir::new(templates),
            after: Arc::default(),
        })
    }

    async fn send(app: &Router, method: &str, uri: &str, body: Option<Value>) -> (u16, Value) {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Issue 29: a gateway started where there is no templates folder (was a
    /// 500 naming the folder) lists and decides the built-in policies from
    /// the one catalogue, names no path of its own, and refuses a request
    /// without the policy's state naming the variable.
    #[tokio::test]
    async fn api_templates_serves_the_built_ins_without_a_folder() {
        let app = app("/nonexistent/dgem-gateway/templates");
        let (status, r) = send(&app, "GET", "/api/templates", None).await;
        assert_eq!(status, 200, "{r}");
        let ids: Vec<&str> = r["templates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), dgem_engine::builtin::builtin_names().len());
        for id in ["support_triage", "pr_risk", "bench/rerank_listwise"] {
            assert!(ids.contains(&id), "{id} in {ids:?}");
        }
        assert!(!r.to_string().contains("/nonexistent"), "{r}");
        let body = json!({"variables": {"ticket": "refund me"}});
        let (status, r) = send(&app, "POST", "/api/decide/support_triage", Some(body)).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["template"], "support_triage");
        let (status, r) = send(&app, "POST", "/api/decide/support_triage", Some(json!({}))).await;
        assert_eq!(status, 400, "{r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains("give at least one of [ticket]"), "{msg}");
    }
}
