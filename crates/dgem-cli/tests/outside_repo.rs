//! Issue 29: `dgem` started as a new user (or an MCP desktop client) starts
//! it, from a folder with no `templates/` and `DGEM_TEMPLATES` unset. Every
//! surface serves the one policy catalogue (a missing folder is an empty one,
//! then the built-in policies), lists names and no server path, and refuses
//! a decision without the policy's state as `/api` and MCP do.
//!
//! Model-free: the listing, `render`, the refusal for missing variables
//! (before any model is loaded), and `dgem serve --studio` on the fake vLLM.
//! `dgem mcp` over stdio loads the embedded model first, so that test needs
//! `DGEM_TEST_MODEL` (skipped locally without it).
#![allow(clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgem_engine::builtin::builtin_names;
use serde_json::{json, Value};

use common::stderr;

/// `dgem ARGS` run in `cwd` with no templates folder named and no model: the
/// model cache is a folder that does not exist (a fresh one per run, so no
/// earlier pull can have filled it).
fn dgem_in(cwd: &Path, args: &[&str]) -> Output {
    let cache = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(cwd)
        .args(args)
        .env_remove("DGEM_TEMPLATES")
        .env_remove("DGEM_MODEL_PATH")
        .env("DGEM_MODEL_DIR", cache.path().join("no-models-here"))
        .output()
        .expect("run dgem")
}

/// The repository root as an absolute path (no listing may show it).
fn repo() -> String {
    common::root()
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn templates_list_shows_the_built_ins_from_a_temp_folder_and_from_root() {
    let tmp = tempfile::tempdir().unwrap();
    for cwd in [tmp.path(), Path::new("/")] {
        let o = dgem_in(cwd, &["templates", "list", "--json"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}: {}",
            cwd.display(),
            stderr(&o)
        );
        let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
        let rows = rows.as_array().unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
        for n in builtin_names() {
            assert!(names.contains(&n), "{n} in {names:?}");
        }
        assert_eq!(rows.len(), builtin_names().len(), "{names:?}");
        assert!(rows.iter().all(|r| r["origin"] == "built-in"), "{rows:?}");
    }
}

#[test]
fn render_works_from_a_temp_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let o = dgem_in(
        tmp.path(),
        &["render", "-t", "support_triage", "-v", "ticket=x"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["state"]["ticket"], "x");
    assert_eq!(out["schema"]["questions"][0]["id"], "urgent");
}

/// `decide` without the state: exit 1 naming the variable, in the words
/// `/api/decide` and MCP use, before any model is loaded (there is none:
/// `DGEM_MODEL_DIR` does not exist, and a load would try to pull one).
#[test]
fn decide_without_the_state_exits_1_naming_it_before_any_model() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("empty.json"), "{}").unwrap();
    let cases: [&[&str]; 5] = [
        &["decide", "-t", "support_triage"],
        &["decide", "-t", "support_triage", "-v", "ticket="],
        &["decide", "-t", "support_triage", "-v", "samples=2"],
        &["decide", "-t", "support_triage", "-d", "empty.json"],
        &["decide", "-t", "support_triage", "--plan"],
    ];
    for args in cases {
        let started = Instant::now();
        let o = dgem_in(tmp.path(), args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(
                "`--var`: template `support_triage` needs its state: give at least one of [ticket]"
            ),
            "{args:?}: {err}"
        );
        assert!(!err.to_lowercase().contains("model"), "{args:?}: {err}");
        assert!(started.elapsed() < Duration::from_secs(30), "{args:?}");
    }
    // A policy that reads no variable needs none: it gets past the check to
    // the model settings (`--context` is checked before any load).
    let own = common::policy(
        &tmp,
        "fixed",
        &json!({"schema": {"questions": [{"id": "ok", "type": "noul"}]}, "state": {"t": "x"}}),
    );
    let o = dgem_in(tmp.path(), &["decide", "-t", &own, "--context", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`--context` must be between"),
        "{}",
        stderr(&o)
    );
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One JSON-RPC request to a stdio MCP server; its `result` (skipping
/// notifications and other ids), within `within`.
fn rpc(
    stdin: &mut std::process::ChildStdin,
    lines: &mpsc::Receiver<String>,
    id: u64,
    method: &str,
    params: Value,
    within: Duration,
) -> Value {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    writeln!(stdin, "{msg}").unwrap();
    stdin.flush().unwrap();
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no answer to {method} within {within:?}: {e}"));
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC: {e}: {line}"));
        if v["id"] == id {
            assert!(v.get("error").is_none(), "{method}: {v}");
            return v["result"].clone();
        }
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

/// `dgem mcp` as a desktop client starts it (in a folder with no
/// `templates/`): every template tool works on the built-in policies.
#[test]
fn mcp_over_stdio_from_a_temp_folder_lists_and_decides_the_built_ins() {
    let Some(m) = common::model() else { return };
    let _one = common::one_model_run();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(tmp.path())
        .arg("mcp")
        .env_remove("DGEM_TEMPLATES")
        .env("DGEM_MODEL_PATH", common::SMALL_MODEL)
        .env("DGEM_MODEL_DIR", Path::new(&m).parent().unwrap())
        .env("DGEM_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn dgem mcp");
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let _guard = Killed(child);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let long = Duration::from_secs(300);
    let init = rpc(
        &mut stdin,
        &lines,
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "issue-29", "version": "0"}}),
        long,
    );
    assert!(init["serverInfo"]["name"].is_string(), "{init}");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let call = |stdin: &mut std::process::ChildStdin, id: u64, tool: &str, args: Value| {
        rpc(
            stdin,
            &lines,
            id,
            "tools/call",
            json!({"name": tool, "arguments": args}),
            long,
        )
    };
    let list = call(&mut stdin, 2, "list_policy_templates", json!({}));
    assert_eq!(list["isError"], false, "{list}");
    let names: Vec<&str> = list["structuredContent"]["templates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for n in builtin_names() {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let shown = format!("{list}");
    assert!(!shown.contains(&*tmp.path().to_string_lossy()), "{shown}");
    assert!(!shown.contains(&repo()), "{shown}");
    let decided = call(
        &mut stdin,
        3,
        "decide_policy",
        json!({"template": "support_triage", "variables": {"ticket": "I was charged twice"}}),
    );
    assert_eq!(decided["isError"], false, "{}", text_of(&decided));
    assert!(
        decided["structuredContent"]["answers"]["team"].is_object(),
        "{decided}"
    );
    let refused = call(
        &mut stdin,
        4,
        "decide_policy",
        json!({"template": "support_triage"}),
    );
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        text_of(&refused).contains("needs its state: give at least one of [ticket]"),
        "{}",
        text_of(&refused)
    );
}

/// A WordLevel `tokenizer.json` for the vLLM backend (as in `tests/vllm.rs`).
const TINY_TOKENIZER: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null, "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "yes": 1, "no": 2}, "unk_token": "[UNK]"}
}"#;

/// `dgem serve --studio` started in a folder with no `templates/` (on the
/// fake vLLM, so no model is needed): it starts, `/api/templates` lists the
/// built-ins with no path of the server's, the Studio page is served, and
/// `/api/decide` and `/mcp` refuse a request without the state alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_studio_from_a_temp_folder_serves_the_built_ins() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = tmp.path().join("tokenizer.json");
    std::fs::write(&tok, TINY_TOKENIZER).unwrap();
    let script = dgem_fake_vllm::scripts::weights(|_, _, id| if id == 1 { 3.0 } else { 1.0 });
    let fake = dgem_fake_vllm::FakeVllm::start(dgem_fake_vllm::FakeConfig {
        script: Arc::new(script),
        ..dgem_fake_vllm::FakeConfig::default()
    })
    .await
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let backend = format!("vllm={}", fake.url());
    let child = Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(tmp.path())
        .args(["serve", "--studio", "--no-warmup", "--host", "127.0.0.1"])
        .args(["--port", &port, "--backend", &backend, "--tokenizer"])
        .arg(&tok)
        .env_remove("DGEM_TEMPLATES")
        .env_remove("DGEM_CONFIG")
        .env_remove("DGEM_MODEL_PATH")
        .env_remove("API_KEY")
        .env_remove("DGEM_SERVER_KEY")
        .env("DGEM_MODEL_DIR", "/nonexistent/dgem-test-cache")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn dgem serve");
    let mut served = Killed(child);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/health")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        if let Ok(Some(status)) = served.0.try_wait() {
            panic!("dgem serve --studio exited at start-up: {status}");
        }
        assert!(started.elapsed() < Duration::from_secs(60), "not up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let r = http
        .get(format!("{base}/api/templates"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    assert!(!body.contains(&*tmp.path().to_string_lossy()), "{body}");
    assert!(!body.contains(&repo()), "{body}");
    let cat: Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<&str> = cat["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    for n in builtin_names() {
        assert!(ids.contains(&n), "{n} in {ids:?}");
    }

    let page = http.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let ctype = page.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ctype.starts_with("text/html"), "{ctype}");

    let r = http
        .post(format!("{base}/api/decide/support_triage"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("needs its state: give at least one of [ticket]"),
        "{msg}"
    );

    let mcp = |id: u64, tool: &str, args: Value| {
        let (http, base) = (http.clone(), base.clone());
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": tool, "arguments": args}});
        async move {
            let r = http
                .post(format!("{base}/mcp"))
                .header("accept", "application/json, text/event-stream")
                .header("MCP-Protocol-Version", "2025-06-18")
                .json(&msg)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            v["result"].clone()
        }
    };
    let list = mcp(1, "list_policy_templates", json!({})).await;
    assert_eq!(list["isError"], false, "{list}");
    let shown = list.to_string();
    assert!(!shown.contains(&*tmp.path().to_string_lossy()), "{shown}");
    assert!(!shown.contains(&repo()), "{shown}");
    assert_eq!(
        list["structuredContent"]["count"].as_u64(),
        Some(builtin_names().len() as u64)
    );
    let refused = mcp(2, "decide_policy", json!({"template": "support_triage"})).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        text_of(&refused).contains("needs its state: give at least one of [ticket]"),
        "{refused}"
    );
    assert!(fake.requests().is_empty(), "nothing was decided");
}
