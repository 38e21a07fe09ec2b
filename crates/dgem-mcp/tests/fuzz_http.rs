//! Property tests ("fuzzing" on stable Rust, with proptest) over MCP's
//! Streamable HTTP transport at `/mcp`: random JSON-RPC messages (real and
//! unknown methods, wrong `jsonrpc`, ids of every JSON type, params of the
//! wrong shape, tool calls with random arguments), random `Accept`
//! (`text/event-stream` alone, none, `*/*`) and `Content-Type`, and random
//! bytes. Whatever arrives, the answer is never a 5xx, and every refusal is a
//! JSON-RPC error object with a standard code.
//!
//! CI runs the default counts below; `scripts/fuzz` sets
//! `PROPTEST_CASES=1000000`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use dgem_mcp::TemplateDir;
use dgem_testkit::{scripts, ScriptedBackend};
use http_body_util::BodyExt as _;
use proptest::prelude::*;
use serde_json::{json, Value};
use tower::ServiceExt as _;

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(n)
}

fn app() -> axum::Router {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let engine = Arc::new(dgem_testkit::engine(backend));
    let templates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    dgem_mcp::http_router(engine, TemplateDir::new(templates))
}

/// Codes a refusal may carry: JSON-RPC 2.0 §5.1 and the implementation range
/// rmcp uses for server errors.
fn standard(code: i64) -> bool {
    matches!(code, -32700 | -32600 | -32601 | -32602 | -32603) || (-32099..=-32000).contains(&code)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z_/]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn message() -> impl Strategy<Value = Value> {
    let method = prop::sample::select(vec![
        "initialize",
        "tools/list",
        "tools/call",
        "ping",
        "notifications/initialized",
        "resources/list",
        "no/such/method",
        "",
    ]);
    let tool = prop::sample::select(vec![
        "decide_policy",
        "decide_custom_questions",
        "list_policy_templates",
        "get_health_and_gpu_status",
        "warmup",
        "no_such_tool",
    ]);
    (
        prop::option::of(prop::sample::select(vec!["2.0", "1.0", ""])),
        prop::option::of(json_value()),
        method,
        tool,
        json_value(),
        any::<bool>(),
    )
        .prop_map(|(version, id, method, tool, args, as_tool_call)| {
            let mut m = serde_json::Map::new();
            if let Some(v) = version {
                m.insert("jsonrpc".into(), json!(v));
            }
            if let Some(id) = id {
                m.insert("id".into(), id);
            }
            m.insert("method".into(), json!(method));
            let params = if as_tool_call && method == "tools/call" {
                json!({"name": tool, "arguments": args})
            } else if method == "initialize" {
                json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "0"}})
            } else {
                args
            };
            m.insert("params".into(), params);
            Value::Object(m)
        })
}

/// POST `body` and check the answer: never 5xx; a JSON body is a JSON-RPC
/// message, and an error in it carries a standard code.
async fn post_and_check(app: axum::Router, body: Vec<u8>, ctype: &str, accept: Option<&str>) {
    let mut req = Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", ctype);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = app
        .oneshot(req.body(Body::from(body.clone())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let shown = String::from_utf8_lossy(&bytes);
    assert!(
        !status.is_server_error(),
        "{status} for {}: {shown}",
        String::from_utf8_lossy(&body)
    );
    if bytes.is_empty() {
        // 202 Accepted for a notification or a client reply.
        return;
    }
    let v: Value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {shown}"));
    if let Some(err) = v.get("error") {
        let code = err["code"].as_i64().unwrap_or(0);
        assert!(standard(code), "{status}: code {code}: {shown}");
        assert!(
            err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{shown}"
        );
    } else {
        assert!(
            v.get("result").is_some(),
            "{status}: neither result nor error: {shown}"
        );
    }
}

proptest! {
    #![proptest_config(cases(128))]

    #[test]
    fn random_jsonrpc_messages_are_answered_cleanly(
        msg in message(),
        accept in prop::option::of(prop::sample::select(vec![
            "application/json",
            "text/event-stream",
            "application/json, text/event-stream",
            "*/*",
        ])),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(post_and_check(app(), msg.to_string().into_bytes(), "application/json", accept));
    }

    #[test]
    fn random_bytes_and_content_types_are_answered_cleanly(
        body in prop::collection::vec(any::<u8>(), 0..256),
        ctype in prop::sample::select(vec!["application/json", "text/plain", "", "application/json; charset=utf-8"]),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(post_and_check(app(), body, ctype, Some("application/json, text/event-stream")));
    }
}
