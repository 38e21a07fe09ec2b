//! The gateway's decision routes as the route tests drive them: one
//! two-question request per route, answers in each route's wire form, the
//! envelope read back from a reply, and a gateway over a primary (`vertex`)
//! and a secondary (`cloudrun`) remote. Shared by `passthrough.rs`,
//! `stalls.rs` and `hostile.rs`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::Router;
use dgem_gateway::{BackendSpec, Gateway, GatewayConfig, GatewayState, Kind, Replica};
use dgem_gateway::{RemoteConfig, RemoteDgem, RouteConfig};
use http_body_util::BodyExt as _;
use serde_json::{json, Map, Value};
use tower::ServiceExt as _;

/// A decision route of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Chat,
    ChatStream,
    SystemOne,
    ApiDecide,
}

/// Every route.
pub const ROUTES: [Route; 4] = [
    Route::Chat,
    Route::ChatStream,
    Route::SystemOne,
    Route::ApiDecide,
];

impl Route {
    /// The upstream route a request reaches: `/api/decide` decides through
    /// the upstream's chat route.
    pub fn upstream(path: &str, stream: bool) -> Self {
        if path.ends_with("/systemone") {
            Self::SystemOne
        } else if stream {
            Self::ChatStream
        } else {
            Self::Chat
        }
    }
}

/// The questions of every request: `u` yes/no, `c` one of three colours.
pub fn questions() -> Value {
    json!([
        {"id": "u", "type": "boolean", "question": "urgent?"},
        {"id": "c", "type": "choice", "question": "colour?", "options": ["red", "green", "blue"]},
    ])
}

/// (path, body) of one request on `route`.
pub fn request(route: Route) -> (&'static str, Value) {
    let schema = json!({"questions": questions()}).to_string();
    let chat = |stream: bool| {
        json!({"messages": [
            {"role": "system", "content": schema},
            {"role": "user", "content": "{\"ticket\": \"the printer is on fire\"}"},
        ], "stream": stream})
    };
    match route {
        Route::Chat => ("/v1/chat/completions", chat(false)),
        Route::ChatStream => ("/v1/chat/completions", chat(true)),
        Route::SystemOne => (
            "/v1/systemone",
            json!({"state": "the printer is on fire", "questions": {
                "u": {"type": "noul", "instructions": "urgent?"},
                "c": {"type": "choice", "instructions": "colour?",
                      "criteria": {"red": null, "green": null, "blue": null}}}}),
        ),
        Route::ApiDecide => (
            "/api/decide",
            json!({"state": "the printer is on fire", "questions": questions()}),
        ),
    }
}

/// Answers keyed as the chat envelope keys them: `u` yes `u_yes`, `c` over
/// red, green, blue.
pub fn answers(u_yes: f64, c: [f64; 3]) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "u".into(),
        json!({"probabilities": {"yes": u_yes, "no": 1.0 - u_yes}}),
    );
    m.insert(
        "c".into(),
        json!({"probabilities": {"red": c[0], "green": c[1], "blue": c[2]}}),
    );
    m
}

/// `answers` in the wire form of an upstream's reply on `route`
/// (content-type, body); `/api/decide` is answered by the chat route.
pub fn wire(route: Route, answers: &Map<String, Value>) -> (&'static str, String) {
    if route == Route::SystemOne {
        // Jev keys yes/no probabilities `true`/`false`.
        let mut jev = answers.clone();
        if let Some(p) = jev
            .get_mut("u")
            .and_then(|u| u.get_mut("probabilities"))
            .and_then(Value::as_object_mut)
        {
            if let Some(v) = p.remove("yes") {
                p.insert("true".into(), v);
            }
            if let Some(v) = p.remove("no") {
                p.insert("false".into(), v);
            }
        }
        return wire_envelope(route, &json!({"answers": jev, "diagnostics": {}}));
    }
    wire_envelope(route, &json!({"answers": answers, "diagnostics": {}}))
}

/// Any `envelope` (well formed or not) in the wire form of a reply on
/// `route`: the chat completion's message content, two SSE chunks of it, or
/// the Jev body itself (with `model`).
pub fn wire_envelope(route: Route, envelope: &Value) -> (&'static str, String) {
    let text = envelope.to_string();
    match route {
        Route::Chat | Route::ApiDecide => (
            "application/json",
            json!({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).to_string(),
        ),
        Route::ChatStream => {
            let (a, b) = text.split_at(text.len() / 2);
            let chunk = |c: &str| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": c}}]});
            (
                "text/event-stream",
                format!("data: {}\n\ndata: {}\n\ndata: [DONE]\n\n", chunk(a), chunk(b)),
            )
        }
        Route::SystemOne => {
            let mut body = envelope.clone();
            if let Some(m) = body.as_object_mut() {
                m.insert("model".into(), json!("fake"));
            }
            ("application/json", body.to_string())
        }
    }
}

/// The `{answers, diagnostics}` of a reply body of `route` (`None` when it
/// is not one).
pub fn envelope_of(route: Route, body: &[u8]) -> Option<Value> {
    match route {
        Route::ChatStream => {
            let text = String::from_utf8_lossy(body);
            let content: String = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter(|d| *d != "[DONE]")
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .filter_map(|c| {
                    c["choices"][0]["delta"]["content"]
                        .as_str()
                        .map(str::to_string)
                })
                .collect();
            serde_json::from_str(&content).ok()
        }
        Route::Chat => {
            let v: Value = serde_json::from_slice(body).ok()?;
            serde_json::from_str(v["choices"][0]["message"]["content"].as_str()?).ok()
        }
        Route::SystemOne | Route::ApiDecide => serde_json::from_slice(body).ok(),
    }
}

/// `u`'s probability of yes in a reply body of `route`.
pub fn u_yes(route: Route, body: &[u8]) -> Option<f64> {
    let env = envelope_of(route, body)?;
    let p = &env["answers"]["u"]["probabilities"];
    p.get("yes").or_else(|| p.get("true"))?.as_f64()
}

/// A fresh gateway (fresh breakers and retry budget) over `primary`
/// (`vertex`) then `secondary` (`cloudrun`), default mode `vertex_first`,
/// each remote set up by `remote` from its base URL.
pub fn two_backends(
    primary: &str,
    secondary: &str,
    remote: impl Fn(&str) -> RemoteConfig,
    route: RouteConfig,
) -> (Arc<Gateway>, Router) {
    let spec = |name: &str, kind, base: &str| BackendSpec {
        name: name.into(),
        kind,
        replicas: vec![Replica::remote(RemoteDgem::new(remote(base)).unwrap())],
    };
    let gateway = Arc::new(
        Gateway::new(GatewayConfig {
            backends: vec![
                spec("vertex", Kind::Vertex, primary),
                spec("cloudrun", Kind::Cloudrun, secondary),
            ],
            default: Some("vertex_first".into()),
            allowed: None,
            route,
        })
        .unwrap(),
    );
    let router = dgem_gateway::router(GatewayState {
        gateway: gateway.clone(),
        templates: dgem_engine::templates::TemplateDir::new("/nonexistent/templates"),
        after: Arc::default(),
    });
    (gateway, router)
}

/// One request on `route` in `mode` (`X-DGem-Backend`): (status, backend
/// used, body).
pub async fn send(app: &Router, route: Route, mode: &str) -> (u16, String, Bytes) {
    let (path, body) = request(route);
    let req = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .header("x-dgem-backend", mode)
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let used = resp
        .headers()
        .get("x-dgem-backend-used")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (
        status,
        used,
        resp.into_body().collect().await.unwrap().to_bytes(),
    )
}
