//! Every vLLM failure mode maps to the right `BackendError`, retry flag and
//! HTTP status; readiness holds early requests (serving.md §3.5, §9.6).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use axum::http::StatusCode;
use common::{config, decide, decider, fake_with, ids};
use dgem_backend::{BackendError, Health};
use dgem_backend::{DecideError, Decider};
use dgem_fake_vllm::Failure;
use serde_json::json;

fn one() -> serde_json::Value {
    json!({"questions": [{"id": "u", "type": "noul"}]})
}

fn backend_err(e: DecideError) -> BackendError {
    match e {
        DecideError::Backend(b) => b,
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn upstream_4xx_is_a_user_error_with_the_vllm_text() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    fake.fail_next(Failure::Status(400, "exactly 16 ids, got 15".into()), 1);
    let e = decide(&d, one()).await.unwrap_err();
    assert!(e.is_user_error());
    let b = backend_err(e);
    assert!(!b.is_retryable());
    assert!(
        b.to_string()
            .contains("upstream 400: exactly 16 ids, got 15"),
        "{b}"
    );
}

#[tokio::test]
async fn upstream_5xx_and_429_are_retryable_upstream_errors() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    for code in [500u16, 503, 429] {
        fake.fail_next(Failure::Status(code, "engine dead".into()), 1);
        let e = decide(&d, one()).await.unwrap_err();
        assert!(!e.is_user_error());
        let b = backend_err(e);
        assert_eq!(
            b,
            BackendError::Upstream {
                status: code,
                body: "engine dead".into()
            }
        );
        assert!(b.is_retryable());
    }
}

#[tokio::test]
async fn a_slow_reply_times_out_retryably() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let mut cfg = config(&fake);
    cfg.request_timeout = Duration::from_millis(200);
    let d = decider(&ids, cfg);
    // Readiness first, so the timeout below is the read's.
    assert_eq!(d.health().await, Health::Ready);
    fake.fail_next(Failure::Slow(Duration::from_secs(3)), 1);
    let b = backend_err(decide(&d, one()).await.unwrap_err());
    assert_eq!(b, BackendError::Timeout(200));
    assert!(b.is_retryable());
}

#[tokio::test]
async fn a_dropped_connection_is_a_retryable_connection_error() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    fake.fail_next(Failure::DropConnection, 1);
    let b = backend_err(decide(&d, one()).await.unwrap_err());
    assert!(matches!(b, BackendError::Connection(_)), "{b:?}");
    assert!(b.is_retryable());
}

/// Issue 27 item 3: a reply that sends its headers and then stalls fails
/// in the idle budget, not the call's limit (5 s here, 600 s by default).
#[tokio::test]
async fn a_reply_that_stalls_after_its_headers_fails_in_the_idle_budget() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let mut cfg = config(&fake);
    cfg.idle_timeout = Duration::from_millis(300);
    let d = decider(&ids, cfg);
    assert_eq!(d.health().await, Health::Ready);
    fake.fail_next(Failure::StallBody(Duration::from_secs(30)), 1);
    let t0 = std::time::Instant::now();
    let b = backend_err(decide(&d, one()).await.unwrap_err());
    let took = t0.elapsed();
    assert!(
        matches!(&b, BackendError::Connection(m) if m.contains("the reply stalled: no byte for 300 ms")),
        "{b:?}"
    );
    assert!(b.is_retryable());
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test]
async fn malformed_replies_are_errors_not_defaults() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    fake.fail_next(Failure::MalformedJson, 1);
    let b = backend_err(decide(&d, one()).await.unwrap_err());
    assert!(
        b.to_string().contains("malformed vLLM reply: not JSON"),
        "{b}"
    );
    assert!(!b.is_retryable());
    fake.fail_next(Failure::MissingLogprobs, 1);
    let b = backend_err(decide(&d, one()).await.unwrap_err());
    assert!(
        b.to_string().contains("`choices[0].logprobs` is missing"),
        "{b}"
    );
}

#[tokio::test]
async fn unreachable_vllm_fails_not_ready_after_the_wait() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let mut cfg = config(&fake);
    // A port nothing listens on: bind one, then free it.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    cfg.base_url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    cfg.ready_wait = Duration::from_millis(50);
    let d = decider(&ids, cfg);
    let b = backend_err(decide(&d, one()).await.unwrap_err());
    assert!(matches!(b, BackendError::NotReady(_)), "{b:?}");
    assert!(b.is_retryable());
}

#[tokio::test]
async fn early_requests_wait_for_health_then_proceed() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    fake.set_not_ready_polls(3);
    let d = decider(&ids, config(&fake));
    let dec = decide(&d, one()).await.unwrap();
    assert_eq!(fake.health_polls(), 4, "three 503s, then 200");
    assert_eq!(dec.diagnostics.timing.reads, 1);
    // Readiness is remembered: no more polls.
    decide(&d, one()).await.unwrap();
    assert_eq!(fake.health_polls(), 4);
}

#[tokio::test]
async fn never_ready_gives_up_with_not_ready_and_health_says_starting() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    fake.set_not_ready_polls(10_000);
    let mut cfg = config(&fake);
    cfg.ready_wait = Duration::from_millis(100);
    let d = decider(&ids, cfg);
    assert!(matches!(d.health().await, Health::Starting { .. }));
    let b = backend_err(decide(&d, one()).await.unwrap_err());
    assert!(matches!(b, BackendError::NotReady(_)), "{b:?}");
    assert!(fake.requests().is_empty(), "no read was sent");
}

#[tokio::test]
async fn server_maps_upstream_failures_to_http_statuses() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let cfg = dgem_server::ServeConfig {
        warmup: false,
        ..dgem_server::ServeConfig::default()
    };
    let app = dgem_server::router(dgem_server::AppState::new(d, cfg));
    let body = json!({"model": "dgemma", "messages": [
        {"role": "system", "content": one().to_string()},
        {"role": "user", "content": json!({"ticket": "x"}).to_string()}]});
    let send = |app: axum::Router| {
        let body = body.clone();
        async move {
            use http_body_util::BodyExt as _;
            use tower::ServiceExt as _;
            let req = axum::http::Request::post("/v1/chat/completions")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.to_string()))
                .unwrap();
            let resp = app.oneshot(req).await.unwrap();
            let status = resp.status();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            )
        }
    };
    let (status, reply) = send(app.clone()).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let content = reply["choices"][0]["message"]["content"].as_str().unwrap();
    let env: serde_json::Value = serde_json::from_str(content).unwrap();
    assert!(common::close(
        env["answers"]["u"]["noul"].as_f64().unwrap(),
        0.75
    ));
    assert_eq!(env["diagnostics"]["engine"], "vllm");
    for (failure, want) in [
        (Failure::Status(400, "bad".into()), StatusCode::BAD_REQUEST),
        (Failure::Status(500, "boom".into()), StatusCode::BAD_GATEWAY),
        (Failure::DropConnection, StatusCode::BAD_GATEWAY),
        (Failure::MissingLogprobs, StatusCode::BAD_GATEWAY),
    ] {
        fake.fail_next(failure.clone(), 1);
        let (status, reply) = send(app.clone()).await;
        assert_eq!(status, want, "{failure:?}: {reply}");
    }
}

/// Regression: `--vllm-ready-wait 3` gave up after about 2 s (one probe
/// interval early) while the message said 3 s. The whole wait is now waited,
/// with a last probe at the deadline.
#[tokio::test]
async fn ready_wait_is_waited_in_full_before_giving_up() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    fake.set_not_ready_polls(10_000);
    let mut cfg = config(&fake);
    cfg.ready_wait = Duration::from_millis(300);
    cfg.probe_interval = Duration::from_millis(100);
    let d = decider(&ids, cfg);
    let started = std::time::Instant::now();
    let b = backend_err(decide(&d, one()).await.unwrap_err());
    assert!(matches!(b, BackendError::NotReady(_)), "{b:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "gave up early: {:?}",
        started.elapsed()
    );
    assert!(b.to_string().contains("within 0.3 s"), "{b}");
    assert!(fake.health_polls() >= 2, "{}", fake.health_polls());
}
