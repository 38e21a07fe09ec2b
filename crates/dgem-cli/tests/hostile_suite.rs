//! Issue 38 item 2: a hostile suite across every surface — `dgem serve`'s
//! routes (chat, `/v1/systemone`, `/api`, `/mcp`), the gateway's `/api`, MCP
//! over stdio, the policy folder and the CLI — sends well over 400 inputs
//! that must each be refused (or, for the policy folder, reported) and prints
//! a table: surface × right / crash / hang / own 5xx / silent wrong. Every
//! column but "right" must be 0.
//!
//! - right: a 4xx (a JSON-RPC error on MCP, exit 1 on the CLI) whose message
//!   is not empty;
//! - crash: the handler panicked or the process died of a signal;
//! - hang: no answer within 10 s;
//! - own 5xx: a 5xx (dgem's own failure, never the right answer to bad input);
//! - silent wrong: a 2xx, a JSON-RPC result or exit 0 for an input that must
//!   be refused.
//!
//! The decisions read from the testkit's scripted backend; nothing needs a
//! model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request};
use axum::Router;
use dgem_engine::templates::TemplateDir;
use dgem_testkit::{scripts, ScriptedBackend};
use http_body_util::BodyExt as _;
use serde_json::{json, Value};
use tower::ServiceExt as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Right,
    Crash,
    Hang,
    Own5xx,
    SilentWrong,
}

#[derive(Default)]
struct Table {
    rows: BTreeMap<&'static str, [usize; 5]>,
    failures: Vec<String>,
}

impl Table {
    fn record(&mut self, surface: &'static str, what: &str, outcome: Outcome, detail: &str) {
        self.rows.entry(surface).or_default()[outcome as usize] += 1;
        if outcome != Outcome::Right {
            let cut: String = detail.chars().take(200).collect();
            self.failures
                .push(format!("{surface}: {outcome:?}: {what}: {cut}"));
        }
    }

    fn total(&self) -> usize {
        self.rows.values().flatten().sum()
    }

    fn print(&self) {
        println!("| surface | right | crash | hang | own 5xx | silent wrong |");
        println!("|---|---|---|---|---|---|");
        for (s, c) in &self.rows {
            println!(
                "| {s} | {} | {} | {} | {} | {} |",
                c[0], c[1], c[2], c[3], c[4]
            );
        }
        println!("inputs: {}", self.total());
    }
}

fn templates() -> TemplateDir {
    TemplateDir::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates"))
}

fn engine() -> Arc<dgem_engine::Engine> {
    Arc::new(dgem_testkit::engine(ScriptedBackend::new(
        scripts::want_marker(0.8),
    )))
}

/// `dgem serve`'s app as `dgem serve --studio` composes it: its own routes,
/// `/mcp` and `/api`.
fn serve_app() -> Router {
    let state = dgem_server::AppState::new(
        engine(),
        dgem_server::ServeConfig {
            warmup: false,
            ..dgem_server::ServeConfig::default()
        },
    );
    let service = dgem_service::Service::new(dgem_service::Catalogue::new(templates()));
    let mcp =
        dgem_mcp::DecisionServer::from_service(state.gated_decider_for("mcp"), service.clone());
    let extra =
        Router::new()
            .merge(dgem_mcp::http_router_for(mcp))
            .merge(dgem_server::api::local_routes(
                state.gated_decider_for("api"),
                service,
            ));
    dgem_server::router_with(state, extra)
}

fn gateway_app() -> Router {
    let replica = dgem_gateway::Replica {
        decider: engine(),
        forward: None,
        url: "scripted://local".into(),
    };
    let gateway = dgem_gateway::Gateway::new(dgem_gateway::GatewayConfig {
        backends: vec![dgem_gateway::BackendSpec {
            name: "local".into(),
            kind: dgem_gateway::Kind::Local,
            replicas: vec![replica],
        }],
        default: None,
        allowed: None,
        route: dgem_gateway::RouteConfig::default(),
    })
    .unwrap();
    dgem_gateway::router(dgem_gateway::GatewayState {
        gateway: Arc::new(gateway),
        templates: templates(),
        after: Arc::default(),
    })
}

/// Send one request; classify its answer.
async fn probe(app: &Router, req: Request<Body>) -> (Outcome, String) {
    let call = tokio::spawn(app.clone().oneshot(req));
    let reply = match tokio::time::timeout(Duration::from_secs(10), call).await {
        Err(_) => return (Outcome::Hang, "no answer in 10 s".into()),
        Ok(Err(e)) => return (Outcome::Crash, format!("the handler panicked: {e}")),
        Ok(Ok(Err(e))) => return (Outcome::Crash, format!("{e}")),
        Ok(Ok(Ok(r))) => r,
    };
    let status = reply.status();
    let body = reply
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).to_string();
    let outcome = if status.is_server_error() {
        Outcome::Own5xx
    } else if status.is_success() {
        // MCP answers a bad request with a JSON-RPC error over HTTP 200.
        let rpc_error = serde_json::from_slice::<Value>(&body)
            .ok()
            .is_some_and(|v| {
                v.get("error").is_some_and(|e| !e.is_null())
                    || v["result"]["isError"] == json!(true)
            });
        if rpc_error {
            Outcome::Right
        } else {
            Outcome::SilentWrong
        }
    } else if text.trim().is_empty() && status.as_u16() != 405 {
        Outcome::SilentWrong
    } else {
        Outcome::Right
    };
    (outcome, format!("HTTP {status}: {text}"))
}

fn post(path: &str, ctype: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, ctype)
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(body.into())
        .unwrap()
}

/// Bodies no route may accept.
fn raw_bodies() -> Vec<(String, Vec<u8>)> {
    vec![
        ("empty".into(), Vec::new()),
        ("not JSON".into(), b"hello".to_vec()),
        ("trailing comma".into(), br#"{"state": "x",}"#.to_vec()),
        ("NaN".into(), br#"{"seed": NaN}"#.to_vec()),
        ("two objects".into(), br#"{"a": 1}{"b": 2}"#.to_vec()),
        ("a list".into(), b"[1, 2]".to_vec()),
        ("a string".into(), br#""state""#.to_vec()),
        ("null".into(), b"null".to_vec()),
        (
            "invalid UTF-8".into(),
            vec![b'{', b'"', 0xff, 0xfe, b'"', b':', b'1', b'}'],
        ),
        ("NUL inside".into(), b"{\"state\": \"a\0b\"\x00}".to_vec()),
        (
            "duplicate key".into(),
            br#"{"state": "a", "state": "b"}"#.to_vec(),
        ),
        (
            "deep nesting".into(),
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
        ),
        ("huge number".into(), br#"{"seed": 1e999999}"#.to_vec()),
        ("unterminated".into(), br#"{"state": "#.to_vec()),
        ("BOM then JSON".into(), b"\xef\xbb\xbf{}".to_vec()),
    ]
}

/// A valid chat body with its system schema replaced by `schema`.
fn chat_with(schema: &Value, state: &Value) -> Value {
    json!({"model": "m", "messages": [
        {"role": "system", "content": schema.to_string()},
        {"role": "user", "content": state.to_string()}]})
}

/// Schemas the validator must refuse.
fn bad_schemas() -> Vec<(String, Value)> {
    let q = |extra: Value| {
        let mut base = json!({"id": "team", "type": "choice", "options": ["billing", "support"]});
        if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
            b.extend(e);
        }
        json!({"questions": [base]})
    };
    vec![
        ("no questions".into(), json!({"questions": []})),
        ("questions a string".into(), json!({"questions": "x"})),
        ("unknown type".into(), q(json!({"type": "yes_no"}))),
        ("one option".into(), q(json!({"options": ["only"]}))),
        (
            "duplicate options".into(),
            q(json!({"options": ["a", "a"]})),
        ),
        (
            "trailing space twin".into(),
            q(json!({"options": ["a", "a "]})),
        ),
        (
            "NFD twin".into(),
            q(json!({"options": ["caf\u{e9}", "cafe\u{301}"]})),
        ),
        (
            "NBSP twin".into(),
            q(json!({"options": ["new york", "new\u{a0}york"]})),
        ),
        (
            "zero-width option".into(),
            q(json!({"options": ["a", "\u{200b}"]})),
        ),
        (
            "RTL override".into(),
            q(json!({"options": ["a", "\u{202e}b"]})),
        ),
        ("NUL option".into(), q(json!({"options": ["a", "b\u{0}"]}))),
        ("blank option".into(), q(json!({"options": ["a", "  "]}))),
        (
            "multiline option".into(),
            q(json!({"options": ["a", "b\nc"]})),
        ),
        ("padded id".into(), q(json!({"id": " x "}))),
        ("id with colon".into(), q(json!({"id": "a:b"}))),
        ("id a list".into(), q(json!({"id": ["x"]}))),
        ("empty id".into(), q(json!({"id": ""}))),
        ("options an object".into(), q(json!({"options": {"a": 1}}))),
        (
            "samples a word".into(),
            json!({"questions": [{"id": "u", "type": "boolean"}], "samples": "many"}),
        ),
        (
            "samples negative".into(),
            json!({"questions": [{"id": "u", "type": "boolean"}], "samples": -3}),
        ),
        (
            "layout unknown".into(),
            json!({"questions": [{"id": "u", "type": "boolean"}], "layout": "sideways"}),
        ),
        (
            "isolate unknown".into(),
            json!({"questions": [{"id": "u", "type": "boolean"}], "isolate": "some"}),
        ),
        (
            "depends on unknown".into(),
            json!({"questions": [{"id": "u", "type": "boolean", "depends_on": ["nope"]}]}),
        ),
        (
            "depends on itself".into(),
            json!({"questions": [{"id": "u", "type": "boolean", "depends_on": ["u"]}]}),
        ),
        (
            "duplicate ids".into(),
            json!({"questions": [{"id": "u", "type": "boolean"}, {"id": "u", "type": "boolean"}]}),
        ),
        (
            "score one level".into(),
            json!({"questions": [{"id": "s", "type": "score", "levels": ["x"]}]}),
        ),
        (
            "temperature huge".into(),
            json!({"questions": [{"id": "u", "type": "boolean"}], "temperature": 1e9}),
        ),
    ]
}

/// Keys of a request body with values of the wrong type.
fn wrong_values() -> Vec<Value> {
    vec![
        json!(true),
        json!("x"),
        json!([1]),
        json!({"a": 1}),
        json!(-1.5),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_are_refused_on_every_surface() {
    let mut table = Table::default();
    let serve = serve_app();
    let gateway = gateway_app();
    // 1. Raw bodies on every POST route of both servers.
    for (app, surface, paths) in [
        (
            &serve,
            "serve",
            &[
                "/v1/chat/completions",
                "/v1/systemone",
                "/api/decide",
                "/api/decide/support_triage",
                "/mcp",
            ][..],
        ),
        (
            &gateway,
            "gateway",
            &["/api/decide", "/api/decide/support_triage"][..],
        ),
    ] {
        for path in paths {
            for (what, body) in raw_bodies() {
                let (o, d) = probe(app, post(path, "application/json", body)).await;
                table.record(surface, &format!("{path} {what}"), o, &d);
            }
        }
    }
    // 2. Bad schemas through chat, systemone (as its questions) and /api.
    for (what, schema) in bad_schemas() {
        let body = chat_with(&schema, &json!({"ticket": "x"}));
        let (o, d) = probe(
            &serve,
            post("/v1/chat/completions", "application/json", body.to_string()),
        )
        .await;
        table.record("serve chat", &what, o, &d);
        // `/api` takes the schema's keys at the top of its body.
        let mut body = schema.clone();
        body["state"] = json!("x");
        let (o, d) = probe(
            &serve,
            post("/api/decide", "application/json", body.to_string()),
        )
        .await;
        table.record("serve /api", &what, o, &d);
        let (o, d) = probe(
            &gateway,
            post("/api/decide", "application/json", body.to_string()),
        )
        .await;
        table.record("gateway /api", &what, o, &d);
    }
    // 3. Every option key with values of the wrong type.
    let chat_keys = [
        "seed",
        "stream",
        "cascade_threshold",
        "cascade_mode",
        "samples",
        "layout",
        "isolate",
        "temperature",
        "abstain_below",
        "messages",
        "response_format",
    ];
    let api_keys = [
        "seed",
        "samples",
        "layout",
        "isolate",
        "template",
        "variables",
        "questions",
        "backend",
        "cascade_threshold",
        "abstain_below",
        "temperature",
        "images",
        "instructions",
    ];
    // Any JSON value is a state, so `state` is not probed here.
    let systemone_keys = ["seed", "questions", "samples", "layout"];
    for v in wrong_values() {
        for key in chat_keys {
            // Values these keys accept: `stream: true`, `cascade_mode: true`
            // (on), and a threshold ≤ 0 (the mode's default, documented).
            let accepted = matches!((key, &v), ("stream" | "cascade_mode", Value::Bool(true)))
                || (key == "cascade_threshold" && v.is_number());
            if accepted {
                continue;
            }
            let mut body = chat_with(
                &json!({"questions": [{"id": "u", "type": "boolean"}]}),
                &json!({"ticket": "x"}),
            );
            body[key] = v.clone();
            let (o, d) = probe(
                &serve,
                post("/v1/chat/completions", "application/json", body.to_string()),
            )
            .await;
            table.record("serve chat", &format!("{key}={v}"), o, &d);
        }
        for key in api_keys {
            if (key == "instructions" && v.is_string())
                || (key == "cascade_threshold" && v.is_number())
            {
                continue;
            }
            let mut body = json!({"template": "support_triage", "variables": {"ticket": "refund"}});
            body[key] = v.clone();
            for (app, surface) in [(&serve, "serve /api"), (&gateway, "gateway /api")] {
                let (o, d) = probe(
                    app,
                    post("/api/decide", "application/json", body.to_string()),
                )
                .await;
                table.record(surface, &format!("{key}={v}"), o, &d);
            }
        }
        for key in systemone_keys {
            let mut body = json!({"state": "x", "questions": {"u": {"type": "noul"}}});
            body[key] = v.clone();
            let (o, d) = probe(
                &serve,
                post("/v1/systemone", "application/json", body.to_string()),
            )
            .await;
            table.record("serve systemone", &format!("{key}={v}"), o, &d);
        }
    }
    // 4. MCP tools/call over HTTP with bad arguments.
    for (tool, args) in [
        ("decide_policy", json!({})),
        ("decide_policy", json!({"template": 5})),
        ("decide_policy", json!({"template": "nope_not_here"})),
        (
            "decide_policy",
            json!({"template": "support_triage", "variables": "x"}),
        ),
        (
            "decide_policy",
            json!({"template": "support_triage", "variables": {"ticket": "x"}, "backend": "gpu"}),
        ),
        ("decide_custom_questions", json!({"questions": "x"})),
        (
            "decide_custom_questions",
            json!({"questions": [], "state": "x"}),
        ),
        (
            "decide_custom_questions",
            json!({"questions": [{"id": "u", "type": "maybe"}], "state": "x"}),
        ),
        ("no_such_tool", json!({})),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        let (o, d) = probe(&serve, post("/mcp", "application/json", body.to_string())).await;
        table.record("serve /mcp", &format!("{tool} {args}"), o, &d);
    }
    mcp_stdio(&mut table).await;
    policy_folder(&mut table).await;
    cli(&mut table);
    table.print();
    assert!(table.failures.is_empty(), "{}", table.failures.join("\n"));
    assert!(table.total() >= 400, "only {} inputs", table.total());
}

/// MCP over stdio: every bad line must get a JSON-RPC error line.
async fn mcp_stdio(table: &mut Table) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let mut lines: Vec<(String, String)> = raw_bodies()
        .into_iter()
        .filter(|(what, _)| what != "empty" && what != "deep nesting")
        .map(|(what, b)| (what, String::from_utf8_lossy(&b).replace('\n', " ")))
        .collect();
    for (i, (tool, args)) in [
        ("decide_policy", json!({"template": 5})),
        (
            "decide_policy",
            json!({"template": "support_triage", "variables": "x"}),
        ),
        ("decide_custom_questions", json!({"questions": "x"})),
        ("no_such_tool", json!({})),
    ]
    .into_iter()
    .enumerate()
    {
        let call = json!({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        lines.push((format!("tools/call {tool} {args}"), call.to_string()));
    }
    lines.push((
        "duplicate key in arguments".into(),
        r#"{"jsonrpc":"2.0","id":200,"method":"tools/call","params":{"name":"decide_policy","arguments":{"template":"a","template":"b"}}}"#.into(),
    ));
    let server = dgem_mcp::DecisionServer::new(engine(), templates());
    let (mut client_in, server_in) = tokio::io::duplex(1 << 22);
    let (server_out, mut client_out) = tokio::io::duplex(1 << 22);
    let served = tokio::spawn(dgem_mcp::serve_transport(
        server,
        dgem_mcp::stdio::LineTransport::new(server_in, server_out),
    ));
    let mut input = format!(
        "{init}\n{}\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
    );
    for (_, line) in &lines {
        input.push_str(line);
        input.push('\n');
    }
    client_in.write_all(input.as_bytes()).await.unwrap();
    drop(client_in);
    let ended = tokio::time::timeout(Duration::from_secs(30), served).await;
    let mut text = String::new();
    client_out.read_to_string(&mut text).await.unwrap();
    let replies: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // Bad lines answer in order with errors; each call answers by its id.
    let errors = replies
        .iter()
        .filter(|r| r.get("error").is_some() || r["result"]["isError"] == json!(true))
        .count();
    for (i, (what, _)) in lines.iter().enumerate() {
        let outcome = match &ended {
            Err(_) => Outcome::Hang,
            Ok(Err(_)) => Outcome::Crash,
            Ok(Ok(_)) if i < errors => Outcome::Right,
            Ok(Ok(_)) => Outcome::SilentWrong,
        };
        table.record("mcp stdio", what, outcome, &text);
    }
}

/// The policy folder: a bad template file is reported in `GET /api/templates`
/// (200, an `error` on its entry), never fatal; the rest still list.
async fn policy_folder(table: &mut Table) {
    let dir = tempfile::tempdir().unwrap();
    let bad = [
        (
            "nested",
            format!(
                "{}{{}}{}",
                "{{ if true }}".repeat(1000),
                "{{ end }}".repeat(1000)
            ),
        ),
        (
            "parens",
            format!("{{{{ {}1{} }}}}", "(".repeat(1000), ")".repeat(1000)),
        ),
        (
            "recursive",
            r#"{{ define "a" }}{{ template "a" . }}{{ end }}{{ template "a" . }}"#.to_string(),
        ),
        (
            "huge",
            r#"{{ range .items }}{{ indent 10000 "x" }}{{ end }}{"questions": []}"#.to_string(),
        ),
        ("not_json", "this is not a policy".to_string()),
        ("unclosed", "{{ if".to_string()),
        ("helper_error", r#"{{ printf "%100000s" "x" }}"#.to_string()),
    ];
    for (name, text) in &bad {
        std::fs::write(dir.path().join(format!("{name}.json.tmpl")), text).unwrap();
    }
    let state = dgem_server::AppState::new(engine(), dgem_server::ServeConfig::default());
    let service =
        dgem_service::Service::new(dgem_service::Catalogue::new(TemplateDir::new(dir.path())));
    let app = dgem_server::api::local_routes(state.gated_decider_for("api"), service);
    let req = Request::get("/api/templates").body(Body::empty()).unwrap();
    let call = tokio::spawn(app.oneshot(req));
    let listed: Option<Value> = match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(Ok(Ok(r))) if r.status().is_success() => {
            let b = r.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice(&b).ok()
        }
        _ => None,
    };
    for (name, _) in &bad {
        let entry = listed.as_ref().and_then(|v| {
            let list = v.get("templates").unwrap_or(v).as_array()?.clone();
            list.into_iter().find(|e| e["name"] == json!(name))
        });
        let (outcome, detail) = match entry {
            Some(e) if e["error"].as_str().is_some_and(|s| !s.is_empty()) => {
                (Outcome::Right, e.to_string())
            }
            Some(e) => (Outcome::SilentWrong, e.to_string()),
            None => (Outcome::Own5xx, format!("{listed:?}")),
        };
        table.record("policy folder", name, outcome, &detail);
    }
}

/// The CLI: bad variables and templates exit 1 with a message.
fn cli(table: &mut Table) {
    let dir = tempfile::tempdir().unwrap();
    let dup = dir.path().join("dup.json");
    std::fs::write(&dup, r#"{"ticket": "a", "ticket": "b"}"#).unwrap();
    let nested = dir.path().join("nested.json.tmpl");
    std::fs::write(
        &nested,
        format!(
            "{}x{}",
            "{{ if true }}".repeat(1000),
            "{{ end }}".repeat(1000)
        ),
    )
    .unwrap();
    let missing = dir.path().join("gone.json.tmpl");
    let cases: Vec<(&str, Vec<String>, Option<&str>)> = vec![
        (
            "duplicate key in -d",
            vec![
                "render".into(),
                "-t".into(),
                "support_triage".into(),
                "-d".into(),
                dup.display().to_string(),
            ],
            None,
        ),
        (
            "1000 nested ifs",
            vec!["render".into(), "-t".into(), nested.display().to_string()],
            None,
        ),
        (
            "missing template path",
            vec!["render".into(), "-t".into(), missing.display().to_string()],
            None,
        ),
        (
            "DGEM_TEMPLATES nowhere",
            vec!["templates".into(), "list".into()],
            Some("/nonexistent/dgem/folder"),
        ),
        (
            "unknown template",
            vec!["render".into(), "-t".into(), "suport_triage".into()],
            None,
        ),
        (
            "malformed -v",
            vec![
                "render".into(),
                "-t".into(),
                "support_triage".into(),
                "-v".into(),
                "no_equals_sign".into(),
            ],
            None,
        ),
        (
            "bad seed",
            vec![
                "decide".into(),
                "-t".into(),
                "support_triage".into(),
                "--seed".into(),
                "x".into(),
            ],
            None,
        ),
        (
            "bad order debias",
            vec![
                "decide".into(),
                "-t".into(),
                "support_triage".into(),
                "--order-debias".into(),
                "sideways".into(),
            ],
            None,
        ),
        (
            "bad follow-load",
            vec![
                "decide".into(),
                "-t".into(),
                "support_triage".into(),
                "--follow-load".into(),
                "maybe".into(),
            ],
            None,
        ),
    ];
    for (what, args, templates_env) in cases {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dgem"));
        cmd.args(&args)
            .current_dir(dir.path())
            .env_remove("DGEM_TEMPLATES");
        if let Some(t) = templates_env {
            cmd.env("DGEM_TEMPLATES", t);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let outcome = match out.status.code() {
            None => Outcome::Crash,
            Some(0) => Outcome::SilentWrong,
            Some(_) if stderr.trim().is_empty() => Outcome::SilentWrong,
            Some(1 | 2) => Outcome::Right,
            Some(_) => Outcome::Own5xx,
        };
        table.record("cli", what, outcome, &stderr);
    }
}
