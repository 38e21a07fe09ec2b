//! `dgem gateway` end to end over real TCP: the gateway in front of two
//! `dgem serve` processes on the real embedded model; one is killed while
//! requests are in flight, and no client request fails. Needs
//! `DGEM_TEST_MODEL` (set by `scripts/test`); skipped without it locally.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Kills the child when dropped, so a failing test leaves no process behind.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(args: &[&str]) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(common::root())
        .args(args)
        .env("DGEM_THREADS", "1")
        .env("DGEM_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dgem");
    Proc(child)
}

async fn wait_ok(client: &reqwest::Client, url: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        if let Ok(r) = client.get(url).send().await {
            if r.status().is_success() {
                return;
            }
        }
        assert!(
            start.elapsed() < limit,
            "{url} did not come up within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_replica_mid_run_loses_no_request() {
    let Some(model) = common::model() else { return };
    let (pa, pb, pg) = (free_port(), free_port(), free_port());
    let serve = |port: u16| {
        let port = port.to_string();
        spawn(&[
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--model",
            &model,
        ])
    };
    let mut a = serve(pa);
    let _b = serve(pb);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    for p in [pa, pb] {
        wait_ok(
            &client,
            // Ready, not only bound: the model loads behind the port.
            &format!("http://127.0.0.1:{p}/ready"),
            Duration::from_secs(180),
        )
        .await;
    }
    let urls = format!("http://127.0.0.1:{pa},http://127.0.0.1:{pb}");
    let g_port = pg.to_string();
    let _g = spawn(&[
        "gateway",
        "--port",
        &g_port,
        "--local-url",
        &urls,
        "--templates",
        "templates",
    ]);
    let base = format!("http://127.0.0.1:{pg}");
    wait_ok(
        &client,
        &format!("{base}/api/backends"),
        Duration::from_secs(30),
    )
    .await;

    let done = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let (client, base, done) = (client.clone(), base.clone(), done.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..4 {
                    let body = json!({"variables": {"ticket": format!("worker {w} request {i}: I was charged twice")}});
                    let r = client
                        .post(format!("{base}/api/decide/support_triage"))
                        .json(&body)
                        .send()
                        .await
                        .expect("the gateway answers");
                    let status = r.status().as_u16();
                    let used = r.headers().get("x-dgem-backend-used").map(|v| v.to_str().unwrap().to_string());
                    let v: Value = r.json().await.expect("JSON reply");
                    done.fetch_add(1, Ordering::SeqCst);
                    out.push((status, used, v));
                }
                out
            })
        })
        .collect();
    // Kill replica A once the run is under way (requests are in flight on it).
    while done.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    let killed_at = done.load(Ordering::SeqCst);

    let mut replies = Vec::new();
    for w in workers {
        replies.extend(w.await.unwrap());
    }
    assert_eq!(replies.len(), 12);
    let mut on_b = 0;
    for (status, used, v) in &replies {
        assert_eq!(*status, 200, "a client request failed: {v}");
        assert_eq!(used.as_deref(), Some("local"));
        let p = &v["answers"]["urgent"]["probabilities"];
        let sum = p["yes"].as_f64().unwrap() + p["no"].as_f64().unwrap();
        assert!((sum - 1.0).abs() < 1e-6, "{v}");
        if v["upstream_url"] == format!("http://127.0.0.1:{pb}") {
            on_b += 1;
        }
    }
    eprintln!("killed replica A after {killed_at} replies; {on_b} of 12 answered by B");
    assert!(
        on_b >= 12usize.saturating_sub(killed_at as usize + 3),
        "after the kill, B answers"
    );
    let h: Value = client
        .get(format!("{base}/api/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = h["backends"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["phase"], "unreachable", "{h}");
    assert_eq!(rows[1]["ready"], true, "{h}");
    // Issue 12: `dgem gateway` never exported `/metrics`; the failovers above
    // are counted there.
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("dgem_gateway_attempts_total{backend=\"local\",outcome=\"failover\"}"),
        "{text}"
    );
}

/// Regression (issue 12, "one surface"): `dgem gateway` had CORS alone — no
/// key check, no body limit, no `/metrics`, no JSON 404 — and its router
/// carried the Studio page. Now it is served through the same layer stack as
/// `dgem serve`. Needs no model: every request here is refused or is a GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_shares_the_servers_surface() {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(common::root())
        .args([
            "gateway",
            "--port",
            &port.to_string(),
            "--templates",
            "templates",
        ])
        .args(["--local-url", "http://127.0.0.1:9"])
        .env("API_KEY", "k-gateway")
        .env("MAX_BODY_BYTES", "1000")
        .env("DGEM_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dgem gateway");
    let _g = Proc(child);
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    wait_ok(&client, &format!("{base}/health"), Duration::from_secs(30)).await;

    // The Studio page is at `/`, from the CLI's layer list.
    let r = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let ctype = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ctype.contains("text/html"), "{ctype}");

    // A POST without the key is 401 in the one error shape.
    let r = client
        .post(format!("{base}/api/decide"))
        .json(&json!({"variables": {"ticket": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");

    // Over the body limit: 413 JSON, before any routing work.
    let r = client
        .post(format!("{base}/api/decide"))
        .header("authorization", "Bearer k-gateway")
        .body(vec![b' '; 5000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("size limit"),
        "{v}"
    );

    // The server's chat aliases and the removed free-form route exist on the
    // gateway too (found by a hostile run: all were 404 there).
    let r = client
        .post(format!("{base}/v1/raw/chat/completions"))
        .header("authorization", "Bearer k-gateway")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410);
    for alias in ["/predict", "/rawPredict", "/invoke/v1/chat/completions"] {
        let r = client
            .post(format!("{base}{alias}"))
            .header("authorization", "Bearer k-gateway")
            .json(&json!({"messages": []}))
            .send()
            .await
            .unwrap();
        // Routed (the one replica is down: a JSON 502), not an unknown route.
        assert_ne!(r.status(), 404, "{alias}");
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].is_string(), "{alias}: {v}");
    }

    // An unknown route is a JSON 404 in the same shape.
    let r = client.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].is_string(), "{v}");

    // `/metrics` is there and counts the requests above by route template.
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("dgem_http_requests_total{route=\"/api/decide\",status=\"401\"}"),
        "{text}"
    );
}
