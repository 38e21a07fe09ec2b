//! The load of `dgem bench-proxy`: N keep-alive clients sending a fixed list
//! of work items round-robin until a request count or a deadline, each item
//! timed from its first byte sent to its last byte read.
//!
//! An item is one or more HTTP calls: a dgem decision is one chat request; its
//! baseline is the vLLM requests dgem sent for that decision, sent together
//! (dgem sends a decision's groups in parallel). The same code drives both,
//! so the client's own cost is the same on both sides and cancels out of the
//! difference.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One HTTP POST of a work item.
#[derive(Debug, Clone)]
pub struct Call {
    /// Full URL.
    pub url: String,
    /// JSON body, sent as is.
    pub body: String,
}

/// What one phase measured.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    /// Latency of every item that succeeded, ms.
    pub latencies_ms: Vec<f64>,
    /// Items that failed (a status other than 200, or a transport error).
    pub failed: usize,
    /// The first failure, to print.
    pub first_failure: Option<String>,
    /// Wall time of the phase, seconds.
    pub elapsed_s: f64,
}

impl Phase {
    /// Items done (succeeded or failed).
    pub fn items(&self) -> usize {
        self.latencies_ms.len() + self.failed
    }

    /// Items that succeeded per second of wall time.
    pub fn per_s(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.latencies_ms.len() as f64 / self.elapsed_s
        } else {
            0.0
        }
    }
}

/// A keep-alive client for `clients` concurrent callers (one pooled
/// connection each).
///
/// # Errors
/// reqwest's, when the client cannot be built.
pub fn client(clients: usize) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(60))
        .build()
}

/// Send `items` round-robin from `clients` concurrent callers sharing `http`
/// until `requests` items were started or `max` has passed.
pub async fn run(
    http: &reqwest::Client,
    items: &Arc<Vec<Vec<Call>>>,
    clients: usize,
    requests: usize,
    max: Duration,
) -> Phase {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, items, next) = (http.clone(), Arc::clone(items), Arc::clone(&next));
            tokio::spawn(async move { caller(&http, &items, &next, requests, started + max).await })
        })
        .collect();
    let mut phase = Phase::default();
    for t in futures_util::future::join_all(tasks).await {
        match t {
            Ok(p) => {
                phase.latencies_ms.extend(p.latencies_ms);
                phase.failed += p.failed;
                phase.first_failure = phase.first_failure.or(p.first_failure);
            }
            Err(join) => {
                phase.failed += 1;
                phase.first_failure = Some(format!("client task: {join}"));
            }
        }
    }
    phase.elapsed_s = started.elapsed().as_secs_f64();
    phase
}

/// One client: take the next item number, send that item, time it, repeat.
async fn caller(
    http: &reqwest::Client,
    items: &[Vec<Call>],
    next: &AtomicUsize,
    requests: usize,
    deadline: Instant,
) -> Phase {
    let mut p = Phase::default();
    loop {
        let n = next.fetch_add(1, Ordering::Relaxed);
        if n >= requests || Instant::now() >= deadline || items.is_empty() {
            return p;
        }
        let item = &items[n % items.len()];
        let t = Instant::now();
        let sent = futures_util::future::join_all(item.iter().map(|c| send(http, c))).await;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match sent.into_iter().find_map(Result::err) {
            None => p.latencies_ms.push(ms),
            Some(e) => {
                p.failed += 1;
                p.first_failure.get_or_insert(e);
            }
        }
    }
}

/// POST one call and read the whole reply; an error unless the status is 200.
async fn send(http: &reqwest::Client, call: &Call) -> Result<(), String> {
    let resp = http
        .post(&call.url)
        .header("content-type", "application/json")
        .body(call.body.clone())
        .send()
        .await
        .map_err(|e| format!("{}: {e}", call.url))?;
    let status = resp.status().as_u16();
    let body = resp
        .bytes()
        .await
        .map_err(|e| format!("{}: {e}", call.url))?;
    if status == 200 {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&body);
    Err(format!(
        "{}: status {status}: {}",
        call.url,
        text.chars().take(300).collect::<String>()
    ))
}
