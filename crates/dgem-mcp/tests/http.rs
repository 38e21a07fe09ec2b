//! MCP over Streamable HTTP on a real socket (axum on `127.0.0.1:0`), driven by
//! plain JSON-RPC over reqwest as a client that knows nothing of rmcp would:
//! initialize → tools/list → tools/call, lenient `Accept`, tool errors for bad
//! arguments, and the `backend` enum listing only the configured backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use dgem_mcp::{has_null_union, TemplateDir, SERVER_NAME};
use dgem_testkit::{scripts, ScriptedBackend};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{json, Value};

const PROTOCOL: &str = "2025-06-18";

struct Server {
    base: String,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn start() -> Server {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let engine = Arc::new(dgem_testkit::engine(backend));
    let templates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let app = dgem_mcp::http_router(engine, TemplateDir::new(templates));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Server {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        stop: Some(stop),
    }
}

impl Server {
    /// POST one JSON-RPC message to `path` with `accept` (None: no header).
    async fn post(&self, path: &str, accept: Option<&str>, msg: Value) -> reqwest::Response {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header(CONTENT_TYPE, "application/json")
            .header("MCP-Protocol-Version", PROTOCOL)
            .json(&msg);
        if let Some(a) = accept {
            req = req.header(ACCEPT, a);
        }
        req.send().await.expect("request sent")
    }

    /// A JSON-RPC request answered 200 with a JSON body; returns `result`.
    async fn rpc(&self, accept: Option<&str>, id: u64, method: &str, params: Value) -> Value {
        let resp = self
            .post(
                "/mcp",
                accept,
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            )
            .await;
        assert_eq!(resp.status(), 200, "{method}");
        let ct = resp.headers()[CONTENT_TYPE].to_str().unwrap().to_string();
        assert!(ct.starts_with("application/json"), "{method}: {ct}");
        let body: Value = resp.json().await.expect("JSON body");
        assert_eq!(body["id"], id, "{body}");
        assert!(body.get("error").is_none(), "{method}: {body}");
        body["result"].clone()
    }

    async fn call(&self, id: u64, tool: &str, args: Value) -> Value {
        self.rpc(
            Some("application/json, text/event-stream"),
            id,
            "tools/call",
            json!({"name": tool, "arguments": args}),
        )
        .await
    }
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_list_and_call_over_http() {
    let s = start().await;
    let init = s
        .post(
            "/mcp",
            Some("application/json, text/event-stream"),
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": PROTOCOL, "capabilities": {},
                "clientInfo": {"name": "plain-http", "version": "0"}}}),
        )
        .await;
    assert_eq!(init.status(), 200);
    assert!(
        init.headers().get("mcp-session-id").is_none(),
        "stateless: no session id"
    );
    let body: Value = init.json().await.unwrap();
    assert_eq!(body["result"]["serverInfo"]["name"], SERVER_NAME);
    assert!(
        body["result"]["capabilities"]["tools"].is_object(),
        "{body}"
    );

    let note = s
        .post(
            "/mcp",
            Some("application/json, text/event-stream"),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
    assert_eq!(note.status(), 202);

    // `Accept: application/json` alone, as many clients send it.
    let list = s
        .rpc(Some("application/json"), 2, "tools/list", json!({}))
        .await;
    let tools = list["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "decide_custom_questions",
            "decide_policy",
            "get_health_and_gpu_status",
            "list_policy_templates",
            "warmup_gpu"
        ]
    );
    for t in tools {
        assert!(!has_null_union(&t["inputSchema"]), "{t}");
    }
    for name in ["decide_policy", "decide_custom_questions"] {
        let t = tools.iter().find(|t| t["name"] == name).unwrap();
        let backend = &t["inputSchema"]["properties"]["backend"];
        assert_eq!(backend["enum"], json!(["local"]), "{name}: {backend}");
        assert_eq!(backend["default"], "local");
    }
    let health = tools
        .iter()
        .find(|t| t["name"] == "get_health_and_gpu_status")
        .unwrap();
    assert!(health["inputSchema"]["properties"]["backend"].is_null());

    let r = s
        .call(
            3,
            "decide_policy",
            json!({"template": "support_triage", "backend": "local",
                   "variables": {"ticket": "charged twice want_billing want_yes"}}),
        )
        .await;
    assert_eq!(r["isError"], false, "{}", text_of(&r));
    let answers = &r["structuredContent"]["answers"];
    assert_eq!(answers["team"]["choice"], "billing");
    let p = answers["team"]["probabilities"]["billing"]
        .as_f64()
        .unwrap();
    assert!((p - 0.8).abs() < 1e-6, "{p}");
    let max = r["structuredContent"]["max_normalized_entropy"]
        .as_f64()
        .unwrap();
    let expected = answers
        .as_object()
        .unwrap()
        .values()
        .map(|a| a["normalized_entropy"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!((max - expected).abs() < 1e-12);
    assert!(text_of(&r).contains("team: billing"), "{}", text_of(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_tool_errors_over_http() {
    let s = start().await;
    let cases = [
        (
            "decide_policy",
            json!({"template": 5}),
            // The decision service's wording (the same as /api/decide's):
            // what the field must be and the value given.
            vec!["`template` must be a template id", "Given: 5"],
        ),
        (
            "decide_policy",
            json!({"template": "support_triage", "backend": "vertex"}),
            vec!["`backend`", "[local]", "`vertex`"],
        ),
        (
            "decide_custom_questions",
            json!({"state": "x", "questions": {"q": {"type": "maybe"}}}),
            vec!["questions.q.type", "maybe"],
        ),
        (
            "decide_policy",
            json!({"template": "../etc/passwd"}),
            vec!["template"],
        ),
    ];
    for (i, (tool, args, needles)) in cases.into_iter().enumerate() {
        let r = s.call(10 + i as u64, tool, args.clone()).await;
        assert_eq!(r["isError"], true, "{tool} {args}: {r}");
        let text = text_of(&r);
        for n in needles {
            assert!(text.contains(n), "{tool} {args}: `{n}` not in {text}");
        }
    }
    // The server still answers after the errors.
    let ok = s.call(20, "get_health_and_gpu_status", json!({})).await;
    assert_eq!(ok["isError"], false);
    assert_eq!(ok["structuredContent"]["healthy"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lenient_accept_and_trailing_slash() {
    let s = start().await;
    for accept in [None, Some("*/*"), Some("application/json")] {
        let r = s
            .rpc(
                accept,
                1,
                "tools/call",
                json!({"name": "list_policy_templates", "arguments": {}}),
            )
            .await;
        assert_eq!(r["isError"], false, "{accept:?}");
        let count = r["structuredContent"]["count"].as_u64().unwrap();
        assert!(count >= 1, "{accept:?}: {r}");
    }
    let slash = s
        .post(
            "/mcp/",
            Some("application/json, text/event-stream"),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}),
        )
        .await;
    assert_eq!(slash.status(), 200);
    let body: Value = slash.json().await.unwrap();
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 5);
    // Not JSON-RPC at all: an HTTP error, not a crash; the next call works.
    let junk = s
        .http
        .post(format!("{}/mcp", s.base))
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json, text/event-stream")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert!(junk.status().is_client_error(), "{}", junk.status());
    let again = s.rpc(None, 8, "tools/list", json!({})).await;
    assert_eq!(again["tools"].as_array().unwrap().len(), 5);
}
