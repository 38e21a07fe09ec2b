//! [`HttpTarget`] over real TCP on port 0: a tolerant decision reply, a
//! connection dropped mid-reply (retryable, so it fails over), a 4xx kept as
//! is, and health phases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::routing::{get, post};
use axum::{Json, Router};
use dgem_backend::BackendError;
use dgem_gateway::routing::fails_over;
use dgem_gateway::{DecideCall, HttpTarget, HttpTargetConfig, Target};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn target(base: &str) -> HttpTarget {
    HttpTarget::new(HttpTargetConfig::new(&format!("{base}/v1"))).unwrap()
}

fn call() -> DecideCall {
    DecideCall {
        schema: json!({"questions": [{"id": "u", "type": "boolean"}]}),
        state: json!("x"),
        seed: 42,
    }
}

#[tokio::test]
async fn decides_through_the_chat_route() {
    async fn chat(Json(b): Json<Value>) -> Json<Value> {
        assert_eq!(b["messages"][0]["role"], "system");
        assert_eq!(b["messages"][1]["content"], "\"x\"");
        let content = json!({"answers": {"u": {"type": "noul", "label": "yes", "probabilities": {"yes": 0.9, "no": 0.1}}}, "diagnostics": {"timing": {"total_ms": 3.0}}});
        Json(
            json!({"choices": [{"message": {"role": "assistant", "content": content.to_string()}}]}),
        )
    }
    async fn health() -> Json<Value> {
        Json(
            json!({"status": "ok", "phase": "loading_model", "ready": false, "bytes_staged_gb": 1.5}),
        )
    }
    let base = serve(
        Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/health", get(health)),
    )
    .await;
    let t = target(&base);
    let env = t.decide(&call()).await.unwrap();
    assert!(
        (env["answers"]["u"]["entropy"].as_f64().unwrap() - 0.325_082_973_391_448_2).abs() < 1e-9
    );
    let h = t.health().await;
    assert_eq!(
        (h.phase.as_str(), h.ready, h.bytes_staged_gb),
        ("loading_model", false, Some(1.5))
    );
    assert!(h.is_warming());
}

#[tokio::test]
async fn connection_dropped_mid_reply_is_retryable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let _ = sock.read(&mut buf).await.unwrap();
        // Promise 1000 bytes, send 10, then drop the connection.
        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"choices\"").await.unwrap();
        drop(sock);
    });
    let err = target(&format!("http://{addr}"))
        .decide(&call())
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Connection(_)), "{err}");
    assert!(fails_over(&err));
}

#[tokio::test]
async fn refused_and_client_errors() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = target(&format!("http://127.0.0.1:{port}"));
    let err = t.decide(&call()).await.unwrap_err();
    assert!(
        matches!(err, BackendError::Connection(_)) && fails_over(&err),
        "{err}"
    );
    assert_eq!(t.health().await.phase, "unreachable");
    async fn reject() -> (axum::http::StatusCode, Json<Value>) {
        (
            axum::http::StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "questions[0].type must be one of …"}})),
        )
    }
    async fn cold() -> axum::http::StatusCode {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    }
    let base = serve(
        Router::new()
            .route("/v1/chat/completions", post(reject))
            .route("/health", get(cold)),
    )
    .await;
    let t: Arc<dyn Target> = Arc::new(target(&base));
    let err = t.decide(&call()).await.unwrap_err();
    assert_eq!(
        err,
        BackendError::Upstream {
            status: 400,
            body: "{\"error\":{\"message\":\"questions[0].type must be one of …\"}}".into()
        }
    );
    assert!(!fails_over(&err));
    assert_eq!(t.health().await.phase, "scaled_to_zero");
}
