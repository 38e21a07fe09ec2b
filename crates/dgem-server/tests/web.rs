//! Web integration of `dgem serve`: CORS (issue 16, item 6) and structured
//! output through `response_format` (item 1) over the router.
#![allow(clippy::unwrap_used)]

mod common;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use common::{call, config, post, state};
use dgem_server::ServeConfig;
use serde_json::{json, Value};

fn app_with(cfg: ServeConfig) -> axum::Router {
    dgem_server::router(state(common::backend(), cfg))
}

fn preflight(path: &str, origin: &str) -> Request<Body> {
    Request::options(path)
        .header(header::ORIGIN, origin)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            "content-type, authorization",
        )
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_passes_before_the_key_check() {
    let app = app_with(ServeConfig {
        api_keys: vec!["k".into()],
        cors_origins: vec!["https://app.example.com".into()],
        ..config()
    });
    let r = call(
        &app,
        preflight("/v1/chat/completions", "https://app.example.com"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://app.example.com"
    );
    let methods = r.headers[header::ACCESS_CONTROL_ALLOW_METHODS]
        .to_str()
        .unwrap();
    assert!(methods.contains("POST"), "{methods}");
    assert_eq!(r.headers[header::ACCESS_CONTROL_MAX_AGE], "600");
    // The real request still needs its key, and carries the CORS headers.
    let body = common::chat(&common::triage(), &json!({"ticket": "want_billing"}));
    let mut req = post("/v1/chat/completions", &body);
    req.headers_mut()
        .insert(header::ORIGIN, "https://app.example.com".parse().unwrap());
    let r = call(&app, req).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://app.example.com"
    );
    let mut req = post("/v1/chat/completions", &body);
    req.headers_mut()
        .insert(header::ORIGIN, "https://app.example.com".parse().unwrap());
    req.headers_mut()
        .insert(header::AUTHORIZATION, "Bearer k".parse().unwrap());
    let r = call(&app, req).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let exposed = r.headers[header::ACCESS_CONTROL_EXPOSE_HEADERS]
        .to_str()
        .unwrap()
        .to_string();
    assert!(exposed.contains("server-timing"), "{exposed}");
}

#[tokio::test]
async fn another_origin_or_no_configuration_gets_no_cors_headers() {
    let app = app_with(ServeConfig {
        cors_origins: vec!["https://app.example.com".into()],
        ..config()
    });
    let r = call(
        &app,
        preflight("/v1/chat/completions", "https://evil.example"),
    )
    .await;
    assert!(
        !r.headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN),
        "{:?}",
        r.headers
    );
    let off = app_with(config());
    let mut req = common::get("/health");
    req.headers_mut()
        .insert(header::ORIGIN, "https://app.example.com".parse().unwrap());
    let r = call(&off, req).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    // `*` allows any origin.
    let any = app_with(ServeConfig {
        cors_origins: vec!["*".into()],
        ..config()
    });
    let r = call(&any, preflight("/api/decide", "https://anywhere.example")).await;
    assert_eq!(r.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
}

#[test]
fn a_bad_origin_in_the_environment_is_refused_naming_it() {
    let e = ServeConfig::from_lookup(|k| {
        (k == "DGEM_CORS_ORIGINS").then(|| "https://ok.example, app.example.com".to_string())
    })
    .unwrap_err();
    assert_eq!(e.var, "DGEM_CORS_ORIGINS");
    assert_eq!(e.given, "app.example.com");
    let c = ServeConfig::from_lookup(|k| {
        (k == "DGEM_CORS_ORIGINS").then(|| "https://a.example, http://localhost:3000".to_string())
    })
    .unwrap();
    assert_eq!(
        c.cors_origins,
        ["https://a.example", "http://localhost:3000"]
    );
}

fn structured(state_text: &str) -> Value {
    json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "Sort the ticket."},
            {"role": "user", "content": state_text}
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "Ticket", "schema": {
            "type": "object",
            "properties": {
                "urgent": {"type": "boolean", "description": "Is it urgent?"},
                "team": {"enum": ["billing", "support", "engineering"]},
                "priority": {"type": "integer", "minimum": 1, "maximum": 3}
            },
            "required": ["urgent", "team", "priority"], "additionalProperties": false
        }}}
    })
}

#[tokio::test]
async fn a_json_schema_response_format_is_answered_in_its_shape() {
    let app = app_with(config());
    let r = call(
        &app,
        post(
            "/v1/chat/completions",
            &structured("charged twice want_billing want_yes want_2"),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let content: Value =
        serde_json::from_str(r.body["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        content,
        json!({"urgent": true, "team": "billing", "priority": 2})
    );
    // The property order of the schema is kept in the reply.
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        r#"{"urgent":true,"team":"billing","priority":2}"#
    );
    let answers = &r.body["dgem"]["answers"];
    assert!(
        (answers["team"]["probabilities"]["billing"]
            .as_f64()
            .unwrap()
            - 0.8)
            .abs()
            < 1e-9
    );
    let p: f64 = answers["priority"]["probabilities"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!((p - 1.0).abs() < 1e-9);
    assert!(r.body["dgem"]["diagnostics"].is_object());
    assert_eq!(r.body["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn a_streamed_structured_reply_carries_the_object_and_the_envelope() {
    let app = app_with(config());
    let mut body = structured("charged twice want_support want_no want_3");
    body["stream"] = json!(true);
    let r = call(&app, post("/v1/chat/completions", &body)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let first = r
        .text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    let chunk: Value = serde_json::from_str(first).unwrap();
    assert_eq!(
        chunk["choices"][0]["delta"]["content"],
        r#"{"urgent":false,"team":"support","priority":3}"#
    );
    assert!(chunk["dgem"]["answers"]["team"].is_object());
}
