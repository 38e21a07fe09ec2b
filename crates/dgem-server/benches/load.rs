//! Load benchmark of `dgem serve` on loopback over the testkit's fast scripted
//! backend, so the server itself (HTTP, parsing, validation, the engine's
//! orchestration, JSON) is what is measured.
//!
//! For 1, 8 and 64 concurrent keep-alive clients it runs at most
//! `DGEM_BENCH_REQUESTS` requests (default 2000) or `DGEM_BENCH_SECONDS` (default
//! 10 s) per level, whichever ends first, and prints requests/s, p50/p99 latency
//! and p50 of the time outside the decision (latency − `X-Inference-Time-Ms`).
//! With `DGEM_BENCH_OUT=FILE` it also writes them as a JSON receipt (format
//! `dgem.bench.serve_http/v1`, with the build's commit), as `scripts/receipts`
//! runs it.
//! Run: `cargo bench -p dgem-server --bench load`.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use dgem_server::{AppState, ServeConfig};
use dgem_testkit::{scripts, ScriptedBackend};
use serde_json::{json, Value};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn body(i: usize) -> Value {
    let schema = json!({"questions": [
        {"id": "urgent", "type": "noul", "instructions": "Is it urgent?"},
        {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "support", "engineering"]},
        {"id": "tone", "type": "score", "levels": ["calm", "annoyed", "furious"]}
    ]});
    let team = ["billing", "support", "engineering"][i % 3];
    json!({"model": "bench", "messages": [
        {"role": "system", "content": schema.to_string()},
        {"role": "user", "content": json!({"ticket": format!("ticket {i} want_{team}")}).to_string()}
    ]})
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Level {
    clients: usize,
    done: usize,
    errors: usize,
    secs: f64,
    lat_ms: Vec<f64>,
    overhead_ms: Vec<f64>,
}

async fn run_level(
    url: Arc<String>,
    clients: usize,
    max_requests: usize,
    max_time: Duration,
) -> Level {
    let started = Instant::now();
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let url = url.clone();
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .unwrap();
            let mut lat = Vec::new();
            let mut over = Vec::new();
            let mut errors = 0;
            loop {
                let i = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= max_requests || started.elapsed() > max_time {
                    break;
                }
                let t = Instant::now();
                let r = client.post(url.as_str()).json(&body(i)).send().await;
                match r {
                    Ok(r) if r.status() == 200 => {
                        let inference: f64 = r
                            .headers()
                            .get("x-inference-time-ms")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0.0);
                        let _ = r.bytes().await;
                        let ms = t.elapsed().as_secs_f64() * 1e3;
                        lat.push(ms);
                        over.push((ms - inference).max(0.0));
                    }
                    _ => errors += 1,
                }
            }
            (lat, over, errors)
        }));
    }
    let mut level = Level {
        clients,
        done: 0,
        errors: 0,
        secs: 0.0,
        lat_ms: Vec::new(),
        overhead_ms: Vec::new(),
    };
    for t in tasks {
        let (lat, over, errors) = t.await.unwrap();
        level.lat_ms.extend(lat);
        level.overhead_ms.extend(over);
        level.errors += errors;
    }
    level.secs = started.elapsed().as_secs_f64();
    level.done = level.lat_ms.len();
    level.lat_ms.sort_by(f64::total_cmp);
    level.overhead_ms.sort_by(f64::total_cmp);
    level
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let max_requests = env_num("DGEM_BENCH_REQUESTS", 2000) as usize;
        let max_time = Duration::from_secs(env_num("DGEM_BENCH_SECONDS", 10));
        let backend = ScriptedBackend::new(scripts::want_marker(0.8));
        let cfg = ServeConfig { warmup: false, max_inflight: 64, ..ServeConfig::default() };
        let state = AppState::new(Arc::new(dgem_testkit::engine(backend)), cfg);
        let listener = dgem_server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(dgem_server::serve(listener, state, async move {
            let _ = stopped.await;
        }));
        let url = Arc::new(format!("http://{addr}/v1/chat/completions"));
        // Warm the connection pool, tokenizer table and allocator.
        let _ = run_level(url.clone(), 4, 100, Duration::from_secs(5)).await;
        println!("dgem serve load benchmark: POST /v1/chat/completions, 3 questions, scripted backend, loopback");
        println!("cores: {}", std::thread::available_parallelism().map_or(0, |n| n.get()));
        println!("{:>8} | {:>8} | {:>6} | {:>10} | {:>9} | {:>9} | {:>14}", "clients", "requests", "errors", "req/s", "p50 ms", "p99 ms", "p50 outside ms");
        println!("{}", "-".repeat(84));
        let mut levels = Vec::new();
        for clients in [1, 8, 64] {
            let l = run_level(url.clone(), clients, max_requests, max_time).await;
            levels.push(json!({
                "clients": l.clients,
                "requests": l.done,
                "errors": l.errors,
                "requests_per_s": l.done as f64 / l.secs,
                "p50_ms": pct(&l.lat_ms, 0.5),
                "p99_ms": pct(&l.lat_ms, 0.99),
                "p50_outside_ms": pct(&l.overhead_ms, 0.5),
            }));
            println!(
                "{:>8} | {:>8} | {:>6} | {:>10.1} | {:>9.2} | {:>9.2} | {:>14.2}",
                l.clients,
                l.done,
                l.errors,
                l.done as f64 / l.secs,
                pct(&l.lat_ms, 0.5),
                pct(&l.lat_ms, 0.99),
                pct(&l.overhead_ms, 0.5)
            );
        }
        let _ = stop.send(());
        let _ = server.await;
        if let Ok(out) = std::env::var("DGEM_BENCH_OUT") {
            let receipt = json!({
                "format": "dgem.bench.serve_http/v1",
                "created_unix": std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                "dgem": dgem_bench::receipt::VersionInfo::current(),
                "build": if cfg!(debug_assertions) { "debug" } else { "release" },
                "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "backend": "testkit scripted backend (no model)",
                "max_inflight": 64,
                "max_requests": max_requests,
                "max_seconds": max_time.as_secs(),
                "levels": levels,
            });
            std::fs::write(&out, serde_json::to_string_pretty(&receipt).unwrap() + "\n").unwrap();
            println!("receipt written to {out}");
        }
    });
}
