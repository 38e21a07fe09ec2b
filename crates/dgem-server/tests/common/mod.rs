//! Shared helpers of the server tests: state over the scripted backend, request
//! builders, and JSON normalization for snapshots (floats rounded, timings redacted).
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use dgem_server::{AppState, ServeConfig};
use dgem_testkit::{scripts, ScriptedBackend};
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};
use tower::ServiceExt;

/// A config for tests: no warm-up task, short waits.
pub fn config() -> ServeConfig {
    ServeConfig {
        warmup: false,
        inflight_wait: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        ..ServeConfig::default()
    }
}

/// A backend that answers the `want_<label>` marker in the state with p = 0.8.
pub fn backend() -> Arc<ScriptedBackend> {
    ScriptedBackend::new(scripts::want_marker(0.8))
}

/// State over `backend` with `config`.
pub fn state(backend: Arc<ScriptedBackend>, config: ServeConfig) -> AppState {
    AppState::new(Arc::new(dgem_testkit::engine(backend)), config)
}

/// The router over a fresh marker backend and the test config.
pub fn app() -> (Router, Arc<ScriptedBackend>) {
    let b = backend();
    (dgem_server::router(state(b.clone(), config())), b)
}

/// A response, parsed.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

/// Send `req` through the router.
pub async fn call(app: &Router, req: Request<Body>) -> Reply {
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        text,
    }
}

/// A JSON POST.
pub fn post(path: &str, body: &Value) -> Request<Body> {
    post_raw(path, "application/json", body.to_string())
}

/// A POST with any content type and body.
pub fn post_raw(path: &str, ctype: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, ctype)
        .body(body.into())
        .unwrap()
}

/// A GET.
pub fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

/// The triage schema used across tests.
pub fn triage() -> Value {
    json!({"questions": [
        {"id": "urgent", "type": "noul", "instructions": "Is it urgent?"},
        {"id": "team", "type": "choice", "instructions": "Which team?",
         "options": [{"name": "billing", "description": "money"}, "support", "engineering"]},
        {"id": "tone", "type": "score", "levels": ["calm", "annoyed", "furious"]}
    ]})
}

/// A chat body with `schema` as the system message and `state` as user JSON.
pub fn chat(schema: &Value, state: &Value) -> Value {
    json!({
        "model": "test-model",
        "messages": [
            {"role": "system", "content": schema.to_string()},
            {"role": "user", "content": state.to_string()}
        ]
    })
}

/// The envelope inside a chat reply's `content`.
pub fn envelope(reply: &Value) -> Value {
    let content = reply["choices"][0]["message"]["content"]
        .as_str()
        .expect("content string");
    serde_json::from_str(content).expect("content is JSON")
}

/// Round every float to 4 digits and redact timings, ids and clocks, for snapshots.
pub fn normalize(v: &Value) -> Value {
    match v {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap();
            json!((f * 1e4).round() / 1e4)
        }
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        Value::Object(m) => {
            let out: Map<String, Value> = m
                .iter()
                .map(|(k, v)| {
                    let redacted = k.ends_with("_ms")
                        || k.ends_with("_ts")
                        || k == "created"
                        || (k == "id" && v.as_str().is_some_and(|s| s.starts_with("chatcmpl-")));
                    let v = if redacted {
                        json!("[redacted]")
                    } else {
                        normalize(v)
                    };
                    (k.clone(), v)
                })
                .collect();
            Value::Object(out)
        }
        other => other.clone(),
    }
}
