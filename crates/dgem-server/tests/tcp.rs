//! The server over real TCP on port 0: a decision through reqwest, keep-alive
//! after a 401, and graceful shutdown that lets an in-flight decision finish.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{chat, config, envelope, state, triage};
use dgem_server::ServeConfig;
use serde_json::{json, Value};
use tokio::sync::oneshot;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_over_tcp_and_drains_on_shutdown() -> anyhow::Result<()> {
    let backend = common::backend();
    let cfg = ServeConfig {
        api_keys: vec!["k".into()],
        warmup: true,
        ..config()
    };
    let st = state(backend.clone(), cfg);
    let listener = dgem_server::bind("127.0.0.1:0".parse()?).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(dgem_server::serve(listener, st.clone(), async move {
        let _ = stopped.await;
    }));
    let base = format!("http://{addr}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()?;

    // The warm-up task flips readiness.
    let mut ready = false;
    for _ in 0..1000 {
        if client.get(format!("{base}/ready")).send().await?.status() == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ready, "warm-up made the server ready");

    let body = chat(&triage(), &json!({"ticket": "want_engineering"}));
    // 401 and then, on the same pooled client, health and a decision.
    let r = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 401);
    let h: Value = client
        .get(format!("{base}/health"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(h["ready"], true);
    let r = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth("k")
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("server-timing"));
    assert!(r.headers().contains_key("content-length"));
    let reply: Value = r.json().await?;
    assert_eq!(envelope(&reply)["answers"]["team"]["choice"], "engineering");

    // A slow decision in flight survives the shutdown signal.
    backend.set_delay(Duration::from_millis(300));
    let slow = {
        let client = client.clone();
        let url = format!("{base}/v1/systemone");
        tokio::spawn(async move {
            client
                .post(url)
                .header("x-dgem-key", "k")
                .json(&json!({"state": "want_yes", "questions": {"a": {"type": "noul"}}}))
                .send()
                .await
        })
    };
    // Bounded: a request that failed before reaching the backend (a pooled
    // connection closed under it) must fail the test, not spin it for ever.
    let calls = backend.calls();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while backend.calls() == calls && !slow.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow decision never reached the backend"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop.send(());
    let r = slow.await??;
    assert_eq!(
        r.status(),
        200,
        "in-flight decision finished during shutdown"
    );
    let v: Value = r.json().await?;
    assert_eq!(
        v["answers"]["a"]["noul"].as_f64().map(|p| p > 0.5),
        Some(true)
    );
    tokio::time::timeout(Duration::from_secs(10), server).await???;
    // Stopped: new connections are refused.
    assert!(reqwest::get(format!("{base}/health")).await.is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_warm_up_ready_follows_the_backend_and_no_decision_runs() -> anyhow::Result<()> {
    let backend = common::backend();
    let st = state(backend.clone(), config()); // `warmup: false`
    let listener = dgem_server::bind("127.0.0.1:0".parse()?).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(dgem_server::serve(listener, st, async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let r = client.get(format!("http://{addr}/ready")).send().await?;
    assert_eq!(r.status(), 200, "ready at once: the backend is up");
    let h: Value = client
        .get(format!("http://{addr}/health"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        (h["ready"].clone(), h["phase"].clone()),
        (json!(true), json!("ready"))
    );
    assert!(h.get("warmed").is_none(), "no warm-up ran: {h}");
    assert_eq!(backend.calls(), 0, "no decision was sent at boot");
    let _ = stop.send(());
    server.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_slot_get_503_at_shutdown() -> anyhow::Result<()> {
    // Issue 38: at SIGTERM, requests queued for a decision slot were dropped
    // with no status once the drain deadline passed.
    let backend = common::backend();
    let cfg = ServeConfig {
        max_inflight: 1,
        inflight_wait: Duration::from_secs(30),
        ..config()
    };
    let st = state(backend.clone(), cfg);
    let listener = dgem_server::bind("127.0.0.1:0".parse()?).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(dgem_server::serve(listener, st, async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()?;
    backend.set_delay(Duration::from_millis(800));
    let send = |state: &'static str| {
        let client = client.clone();
        let url = format!("http://{addr}/v1/systemone");
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({"state": state, "questions": {"a": {"type": "noul"}}}))
                .send()
                .await
        })
    };
    let holder = send("want_yes");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while backend.calls() == 0 {
        assert!(std::time::Instant::now() < deadline, "no decision started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // 31 clients wait for the one slot (32 in all).
    let waiters: Vec<_> = (0..31).map(|_| send("want_no")).collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let signalled = std::time::Instant::now();
    let _ = stop.send(());
    for w in waiters {
        let r = w.await??;
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            Some("1")
        );
        let body: Value = r.json().await?;
        assert!(body.to_string().contains("shutting down"), "{body}");
    }
    assert!(
        signalled.elapsed() < Duration::from_millis(700),
        "the waiting requests were answered at once, not after the decision in flight"
    );
    assert_eq!(
        holder.await??.status(),
        200,
        "the decision in flight finished"
    );
    tokio::time::timeout(Duration::from_secs(10), server).await???;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_gets_408_at_the_body_deadline_and_health_stays_up() -> anyhow::Result<()> {
    // Issue 38: a body trickled one byte at a time held its connection until
    // the 300 s request limit, then got 504.
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut cfg = config();
    cfg.conn.body_read_timeout = Duration::from_millis(1500);
    let st = state(common::backend(), cfg);
    let listener = dgem_server::bind("127.0.0.1:0".parse()?).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(dgem_server::serve(listener, st, async move {
        let _ = stopped.await;
    }));
    let trickle = || async move {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"POST /v1/systemone HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{")
            .await?;
        let t0 = std::time::Instant::now();
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            tokio::select! {
                n = s.read(&mut buf) => match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        out.extend_from_slice(&buf[..n]);
                        if out.windows(4).any(|w| w == b"\r\n\r\n") { break; }
                    }
                },
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    if t0.elapsed() > Duration::from_secs(10) { break; }
                    let _ = s.write_all(b" ").await;
                }
            }
        }
        anyhow::Ok((String::from_utf8_lossy(&out).to_string(), t0.elapsed()))
    };
    let slow: Vec<_> = (0..20).map(|_| tokio::spawn(trickle())).collect();
    // And 100 slow-loris connections: half a request head each, then nothing.
    let mut loris = Vec::new();
    for _ in 0..100 {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"POST /v1/systemone HTTP/1.1\r\nhost: t\r\n")
            .await?;
        loris.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = reqwest::Client::new();
    let mut took = Vec::new();
    for _ in 0..9 {
        let t = std::time::Instant::now();
        let r = client.get(format!("http://{addr}/health")).send().await?;
        assert_eq!(r.status(), 200);
        took.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    took.sort();
    // The bar is 100 ms; the worst of 9 gets room for a busy CI box.
    assert!(
        took[4] <= Duration::from_millis(100) && took[8] < Duration::from_millis(500),
        "/health beside 20 slow bodies and 100 slow-loris connections: {took:?}"
    );
    drop(loris);
    for s in slow {
        let (head, took) = s.await??;
        assert!(head.starts_with("HTTP/1.1 408"), "{head}");
        assert!(took < Duration::from_secs(4), "answered after {took:?}");
    }
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server).await???;
    Ok(())
}
