//! Issue 27 item 3: an attempt has separate budgets for the reply's headers
//! and for silence in its body. Over real TCP, a primary that sends its
//! headers and then stalls fails over to a healthy secondary within the idle
//! budget (default 5 s: ≤ 6 s in all), one that cuts its body mid-way fails
//! over in ≤ 1 s, and stalls count against the primary's breaker, so after
//! three of them the primary is skipped and requests go straight to the
//! secondary. The primary answers `/health` ready at once, so nothing but the
//! stall itself can delay the failover.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

#[path = "common/routes.rs"]
mod routes;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::{get, post};
use axum::Router;
use dgem_gateway::{Gateway, RemoteConfig, RouteConfig};
use http_body_util::BodyExt as _;
use routes::two_backends;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tower::ServiceExt as _;

/// How the faulty primary breaks a decision's reply.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Headers (content-length 4000) and 20 bytes, then silence for a minute.
    Stall,
    /// Headers (content-length 4000) and 20 bytes, then the connection closes.
    Cut,
}

/// The faulty primary: `/health` answers ready; any other request gets the
/// broken reply of `fault`.
async fn faulty(fault: Fault) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                if head.starts_with("GET /health") {
                    let body = r#"{"status":"ok","phase":"ready","ready":true}"#;
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(reply.as_bytes()).await;
                    return;
                }
                let _ = sock
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4000\r\n\r\n{\"choices\": [{\"ind")
                    .await;
                let _ = sock.flush().await;
                if let Fault::Stall = fault {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                drop(sock);
            });
        }
    });
    format!("http://{addr}")
}

/// The healthy secondary: a valid decision for the request's one question.
async fn healthy() -> String {
    let envelope =
        json!({"answers": {"u": {"probabilities": {"yes": 0.2, "no": 0.8}}}, "diagnostics": {}})
            .to_string();
    let reply = json!({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": envelope}, "finish_reason": "stop"}]}).to_string();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(move || {
                let reply = reply.clone();
                async move { ([("content-type", "application/json")], reply) }
            }),
        )
        .route(
            "/health",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A gateway over `primary` (`vertex`) then `secondary` (`cloudrun`), with
/// every budget at its default.
fn gateway(primary: &str, secondary: &str) -> (Arc<Gateway>, Router) {
    two_backends(
        primary,
        secondary,
        RemoteConfig::new,
        RouteConfig::default(),
    )
}

/// One `/api/decide`: (status, backend used, body, wall time).
async fn decide(app: &Router) -> (u16, String, Value, Duration) {
    let body = json!({"state": "the printer is on fire", "questions": [
        {"id": "u", "type": "boolean", "question": "urgent?"}]});
    let req = axum::http::Request::post("/api/decide")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let t0 = Instant::now();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let used = resp
        .headers()
        .get("x-dgem-backend-used")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let took = t0.elapsed();
    (
        status,
        used,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        took,
    )
}

fn probability_of_yes(body: &Value) -> f64 {
    body["answers"]["u"]["probabilities"]["yes"]
        .as_f64()
        .unwrap_or_else(|| panic!("no probability of yes in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_after_the_headers_fails_over_within_six_seconds() {
    let (primary, secondary) = (faulty(Fault::Stall).await, healthy().await);
    let (_, app) = gateway(&primary, &secondary);
    let (status, used, body, took) = decide(&app).await;
    eprintln!("stalled primary: failed over in {took:?}");
    assert_eq!((status, used.as_str()), (200, "cloudrun"), "{body}");
    assert!((probability_of_yes(&body) - 0.2).abs() < 1e-9, "{body}");
    assert!(took < Duration::from_secs(6), "took {took:?}");
    assert!(
        took >= Duration::from_secs(4),
        "the idle budget is 5 s: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_cut_after_the_headers_fails_over_within_one_second() {
    let (primary, secondary) = (faulty(Fault::Cut).await, healthy().await);
    let (_, app) = gateway(&primary, &secondary);
    let (status, used, body, took) = decide(&app).await;
    eprintln!("cut primary: failed over in {took:?}");
    assert_eq!((status, used.as_str()), (200, "cloudrun"), "{body}");
    assert!((probability_of_yes(&body) - 0.2).abs() < 1e-9, "{body}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// The breaker counts stalls: three cut or stalled replies open it (the
/// default threshold), and the next request skips the primary at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_replies_open_the_primary_breaker() {
    let (primary, secondary) = (faulty(Fault::Cut).await, healthy().await);
    let (gateway, app) = gateway(&primary, &secondary);
    for _ in 0..3 {
        let (status, used, _, _) = decide(&app).await;
        assert_eq!((status, used.as_str()), (200, "cloudrun"));
    }
    let states: Vec<String> = gateway
        .health()
        .await
        .iter()
        .map(|s| format!("{}={}", s.name, s.breaker.as_str()))
        .collect();
    assert_eq!(states, ["vertex=open", "cloudrun=closed"], "{states:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalls_open_the_primary_breaker_and_it_is_then_skipped() {
    let (primary, secondary) = (faulty(Fault::Stall).await, healthy().await);
    let (gateway, app) = gateway(&primary, &secondary);
    for _ in 0..3 {
        let (status, used, _, _) = decide(&app).await;
        assert_eq!((status, used.as_str()), (200, "cloudrun"));
    }
    let open = gateway
        .health()
        .await
        .iter()
        .find(|s| s.name == "vertex")
        .map(|s| s.breaker.as_str())
        .unwrap();
    assert_eq!(open, "open");
    let (status, used, _, took) = decide(&app).await;
    assert_eq!((status, used.as_str()), (200, "cloudrun"));
    assert!(
        took < Duration::from_secs(1),
        "the open primary was tried: {took:?}"
    );
}
