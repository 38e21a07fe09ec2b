//! `dgem gateway` (the real binary) in front of fake upstream replicas that
//! fail the ways a real one does: a reply that is not JSON, an envelope that
//! answers other questions, and a replica that accepts the request and never
//! answers. A bad reply is that replica's failure and fails over to the next;
//! with none left the caller gets a JSON 502/504 in bounded time, never a 200
//! carrying someone else's answers. Needs no model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
#[path = "common/server.rs"]
mod server;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// How a fake replica answers `POST /v1/chat/completions`.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// A valid envelope for the asked questions (yes 0.7 / no 0.3).
    Good,
    /// 200 with a body that is not JSON.
    NotJson,
    /// 200 with an envelope for a question nobody asked.
    OtherIds,
    /// Read the request, never answer.
    Hang,
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The chat reply a fake replica sends for `request` in `mode`.
fn reply(mode: Mode, request: &Value) -> (u16, String) {
    let schema: Value = request["messages"][0]["content"]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    let ids: Vec<String> = schema["questions"]
        .as_array()
        .map(|qs| {
            qs.iter()
                .filter_map(|q| q["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let answer = json!({"type": "noul", "label": "yes", "probabilities": {"yes": 0.7, "no": 0.3}});
    let answers: serde_json::Map<String, Value> = match mode {
        Mode::OtherIds => [("someone_else".to_string(), answer)].into_iter().collect(),
        _ => ids.into_iter().map(|id| (id, answer.clone())).collect(),
    };
    match mode {
        Mode::NotJson => (200, "<html>upstream error page</html>".into()),
        _ => {
            let content = json!({"answers": answers, "diagnostics": {}}).to_string();
            let body = json!({
                "object": "chat.completion",
                "model": "fake",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            });
            (200, body.to_string())
        }
    }
}

/// A fake replica on a free port: `GET /health` is ready; the chat route
/// answers per `mode`. One request per connection.
async fn fake(mode: Mode) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let (status, body) = if head.starts_with("get /health") {
                    (
                        200,
                        json!({"status": "ok", "ready": true, "phase": "ready"}).to_string(),
                    )
                } else {
                    if matches!(mode, Mode::Hang) {
                        tokio::time::sleep(Duration::from_secs(600)).await;
                        return;
                    }
                    let request: Value =
                        serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
                    reply(mode, &request)
                };
                let out = format!(
                    "HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(out.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    base
}

/// `dgem gateway` over the comma-separated `local` replicas, ready to serve.
async fn gateway(local: &str, extra: &[&str]) -> (Proc, String) {
    let port = server::free_port();
    let child = Command::new(server::dgem_bin())
        .current_dir(common::root())
        .args([
            "gateway",
            "--port",
            &port.to_string(),
            "--templates",
            "templates",
        ])
        .args(["--local-url", local])
        .args(extra)
        .env("DGEM_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dgem gateway");
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while reqwest::get(format!("{base}/health")).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "gateway did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (Proc(child), base)
}

fn decide_body(i: usize) -> Value {
    json!({"state": format!("ticket {i}: the printer is on fire"),
           "questions": [{"id": "urgent", "type": "boolean", "question": "Is it urgent?"}]})
}

/// Regression (issue 12, defect 5): a replica answering 200 with a non-JSON
/// body, or with answers for other ids, was taken as success. Each is now that
/// replica's failure: every request fails over to the healthy replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_replies_fail_over_to_the_healthy_replica() {
    let bad_json = fake(Mode::NotJson).await;
    let other_ids = fake(Mode::OtherIds).await;
    let good = fake(Mode::Good).await;
    let (_g, base) = gateway(&format!("{bad_json},{other_ids},{good}"), &[]).await;
    let client = reqwest::Client::new();
    for i in 0..6 {
        let r = client
            .post(format!("{base}/api/decide"))
            .json(&decide_body(i))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "request {i}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["upstream_url"], good.as_str(), "request {i}: {v}");
        assert_eq!(v["answers"]["urgent"]["label"], "yes", "{v}");
        let p = v["answers"]["urgent"]["probabilities"]["yes"]
            .as_f64()
            .unwrap();
        assert!((p - 0.7).abs() < 1e-9, "{v}");
    }
}

/// With only bad replicas left the caller gets a JSON 5xx (502 after the
/// attempts, or 503 once their breakers are open), not a 200 and not the
/// upstream's body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_malformed_replicas_is_a_json_5xx() {
    let bad_json = fake(Mode::NotJson).await;
    let other_ids = fake(Mode::OtherIds).await;
    let (_g, base) = gateway(
        &format!("{bad_json},{other_ids}"),
        &["--wakeup-timeout", "3"],
    )
    .await;
    let r = reqwest::Client::new()
        .post(format!("{base}/api/decide"))
        .json(&decide_body(0))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        (status == 502 && v["error"]["type"] == "server_error")
            || (status == 503 && v["error"]["type"] == "unavailable_error"),
        "{status}: {v}"
    );
    assert!(!msg.contains("<html>"), "the upstream body leaked: {msg}");
}

/// A replica that accepts the request and never answers costs one attempt
/// timeout, then the caller gets a JSON error: bounded, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_replica_is_cut_off_by_the_attempt_timeout() {
    let hang = fake(Mode::Hang).await;
    let (_g, base) = gateway(&hang, &["--attempt-timeout", "1", "--wakeup-timeout", "2"]).await;
    let started = Instant::now();
    let r = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .post(format!("{base}/api/decide"))
        .json(&decide_body(0))
        .send()
        .await
        .expect("an answer, not a client timeout");
    let took = started.elapsed();
    assert!(r.status().is_server_error(), "status {}", r.status());
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].is_string(), "{v}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    eprintln!(
        "hanging replica answered {} after {took:?}",
        v["error"]["type"]
    );
}
