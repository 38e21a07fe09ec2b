//! Issue 38, class 4: MCP over stdio answers every line and every call in
//! flight before the session ends (`printf 'initialize…\ninitialized…\n
//! tools/call…\n' | dgem mcp` lost the call's answer; unparseable lines got no
//! reply). Raw lines through [`dgem_mcp::stdio::LineTransport`] on the
//! testkit's scripted backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dgem_mcp::stdio::LineTransport;
use dgem_mcp::{DecisionServer, TemplateDir};
use dgem_testkit::{scripts, ScriptedBackend};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn templates() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// Send `input` (then end the input) to a stdio session whose backend takes
/// `delay` per model call; every output line, parsed, once the session ended.
async fn session(input: String, delay: Duration) -> Vec<Value> {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    backend.set_delay(delay);
    let engine = Arc::new(dgem_testkit::engine(backend));
    let server = DecisionServer::new(engine, TemplateDir::new(templates()));
    let (mut client_in, server_in) = tokio::io::duplex(4 * 1024 * 1024);
    let (server_out, mut client_out) = tokio::io::duplex(4 * 1024 * 1024);
    let served = tokio::spawn(async move {
        dgem_mcp::serve_transport(server, LineTransport::new(server_in, server_out)).await
    });
    client_in.write_all(input.as_bytes()).await.unwrap();
    drop(client_in);
    tokio::time::timeout(Duration::from_secs(60), served)
        .await
        .expect("the session ends")
        .expect("no panic")
        .expect("served");
    let mut text = String::new();
    client_out.read_to_string(&mut text).await.unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).expect("every output line is JSON"))
        .collect()
}

fn by_id(lines: &[Value], id: Value) -> &Value {
    lines
        .iter()
        .find(|l| l["id"] == id)
        .unwrap_or_else(|| panic!("no reply with id {id}: {lines:?}"))
}

#[tokio::test]
async fn a_call_in_flight_when_input_ends_is_answered() {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "decide_policy",
        "arguments": {"template": "support_triage", "variables": {"ticket": "I was charged twice"}}}});
    let input = format!("{INITIALIZE}\n{INITIALIZED}\n{call}\n");
    // Each model call takes 300 ms: the input has long ended when it answers.
    let lines = session(input, Duration::from_millis(300)).await;
    assert!(by_id(&lines, json!(0))["result"]["serverInfo"].is_object());
    let answer = by_id(&lines, json!(1));
    assert!(answer["result"]["content"].is_array(), "{answer}");
    assert_ne!(answer["result"]["isError"], json!(true), "{answer}");
}

#[tokio::test]
async fn every_unparseable_line_gets_a_json_rpc_error() {
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(dgem_mcp::stdio::MAX_LINE_BYTES)
    );
    let bad = [
        (r#"{"jsonrpc":"2.0","id":2,"method":"ping",}"#, -32700),
        (r#"{"jsonrpc":"2.0","id":NaN,"method":"ping"}"#, -32700),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":3,\u{0}\"method\":\"ping\"}",
            -32700,
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"ping"}{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
            -32700,
        ),
        (r#"[{"jsonrpc":"2.0","id":6,"method":"ping"}]"#, -32600),
        (r#"{"jsonrpc":"2.0","id":7,"method":"ping","id":8}"#, -32700),
        (long.as_str(), -32600),
        (
            r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"decide_policy","arguments":{"template":"a","template":"b"}}}"#,
            -32700,
        ),
    ];
    let mut input = format!("{INITIALIZE}\n{INITIALIZED}\n");
    for (line, _) in &bad {
        input.push_str(line);
        input.push('\n');
    }
    input.push_str("\n   \n");
    input.push_str(r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#);
    input.push('\n');
    let lines = session(input, Duration::ZERO).await;
    let errors: Vec<i64> = lines
        .iter()
        .filter_map(|l| l["error"]["code"].as_i64())
        .collect();
    let want: Vec<i64> = bad.iter().map(|(_, code)| *code).collect();
    assert_eq!(errors, want, "{lines:?}");
    // After the bad lines the session still answers.
    assert!(by_id(&lines, json!(11))["result"].is_object());
    // initialize + 8 errors + the ping: nothing more, nothing less.
    assert_eq!(lines.len(), 10, "{lines:?}");
}
