//! The official MCP Python SDK (`mcp` package) lists and calls the tools of the
//! real binary on the embedded model, over stdio (`dgem mcp`) and over
//! Streamable HTTP (`dgem serve` … `/mcp`); the checks are in
//! `tests/mcp_client.py`. Skips, saying why, without `DGEM_TEST_MODEL` or the
//! package (under `CI` both are required: `scripts/test` installs them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
#[path = "common/server.rs"]
mod server;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use tokio::process::Command;

/// One client run may load the model and decide a few times on the CPU.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(600);

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py")
}

async fn sdk_importable() -> bool {
    Command::new("python3")
        .args(["-c", "import mcp.client.stdio, mcp.client.streamable_http"])
        .output()
        .await
        .is_ok_and(|o| o.status.success())
}

/// The model, or `None` (with a note) when the test cannot run here.
async fn prerequisites(test: &str) -> Option<String> {
    let model = common::model()?;
    if !sdk_importable().await {
        assert!(
            !server::ci(),
            "CI is set but python3 cannot import the MCP SDK: python3 -m pip install mcp"
        );
        eprintln!("SKIP {test}: python3 cannot import `mcp` (python3 -m pip install mcp)");
        return None;
    }
    Some(model)
}

fn check(out: &Output, transport: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "MCP Python client ({transport}) failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("mcp client ok ({transport})")),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_stdio() {
    let Some(model) = prerequisites("python_sdk_over_stdio").await else {
        return;
    };
    let out = tokio::time::timeout(
        CLIENT_TIMEOUT,
        Command::new("python3")
            .arg(script())
            .arg("stdio")
            .arg(server::dgem_bin())
            .arg(&model)
            .arg(common::root().join("templates"))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the stdio client finishes in time")
    .expect("python3 runs");
    check(&out, "stdio");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_http() {
    let Some(model) = prerequisites("python_sdk_over_http").await else {
        return;
    };
    let served = server::serve(&model, &[], Duration::from_secs(300)).await;
    let out = tokio::time::timeout(
        CLIENT_TIMEOUT,
        Command::new("python3")
            .arg(script())
            .arg("http")
            .arg(format!("{}/mcp", served.base))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the HTTP client finishes in time")
    .expect("python3 runs");
    check(&out, "http");
    drop(served);
}

/// `dgem mcp` writes only JSON-RPC to stdout, one message per line (logs go
/// to stderr), also when the model loads and a decision runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_stdout_carries_only_protocol_lines() {
    use tokio::io::AsyncWriteExt as _;
    let Some(model) = common::model() else {
        return;
    };
    let mut child = Command::new(server::dgem_bin())
        .current_dir(common::root())
        .args(["mcp", "--templates", "templates"])
        .env("DGEM_MODEL_PATH", &model)
        .env("DGEM_LOG", "debug")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn dgem mcp");
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"decide_custom_questions","arguments":{"state":"The site is down.","questions":{"urgent":{"type":"noul","instructions":"Urgent?"}}}}}"#,
    ];
    // Drain stderr all along, or debug logs fill the pipe and block the child.
    let mut err_pipe = child.stderr.take().expect("stderr");
    let stderr_task = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut err_pipe, &mut text).await;
        text
    });
    let mut stdin = child.stdin.take().expect("stdin");
    for l in lines {
        stdin.write_all(format!("{l}\n").as_bytes()).await.unwrap();
    }
    // Wait for both answers before closing stdin (the server ends on EOF).
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    let read = async {
        use tokio::io::AsyncBufReadExt as _;
        let mut line = String::new();
        while seen.len() < 2 {
            line.clear();
            if stdout.read_line(&mut line).await.unwrap() == 0 {
                break;
            }
            let msg: serde_json::Value = serde_json::from_str(line.trim_end())
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
            assert_eq!(msg["jsonrpc"], "2.0", "{line}");
            seen.push(msg);
        }
    };
    tokio::time::timeout(Duration::from_secs(240), read)
        .await
        .expect("answers in time");
    drop(stdin);
    let mut rest = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut rest)
        .await
        .unwrap();
    let status = child.wait().await.expect("dgem mcp exits");
    let stderr = stderr_task.await.expect("stderr reader");
    assert!(status.success(), "dgem mcp failed: {stderr}");
    assert_eq!(seen.len(), 2, "stderr: {stderr}");
    assert_eq!(seen[0]["id"], 1);
    assert_eq!(seen[1]["id"], 2);
    assert_eq!(seen[1]["result"]["isError"], false, "{}", seen[1]);
    assert!(
        rest.trim().is_empty(),
        "stray stdout after the answers: {rest}"
    );
    // The logs went to stderr (DGEM_LOG=debug).
    assert!(!stderr.trim().is_empty(), "no logs on stderr");
}
