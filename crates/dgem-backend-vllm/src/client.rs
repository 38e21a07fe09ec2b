//! HTTP to vLLM: timeouts, bounded concurrency, readiness wait (serving.md
//! §9.6) and the mapping of every failure to a [`BackendError`].
//!
//! | vLLM outcome | error | HTTP from dgem | retryable |
//! | :-- | :-- | :-- | :-- |
//! | 4xx (not 429) | `InvalidRequest("upstream <code>: <body>")` | 400 chat / 422 systemone | no |
//! | 429, 5xx | `Upstream { status, body }` | 502 | yes |
//! | timeout | `Timeout(ms)` | 504 | yes |
//! | connect error, dropped connection | `Connection` | 502 | yes |
//! | reply body silent for `idle_timeout` (5 s) after the headers, or cut | `Connection("vLLM at … : the reply stalled …")` | 502 | yes |
//! | `/health` not 200 within `ready_wait` | `NotReady` | 503 | yes |
//! | reply not JSON / fields missing | `Model("malformed vLLM reply: …")` | 502 | no |

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dgem_backend::{BackendError, Health};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::config::{VllmConfig, VllmError};

/// Bytes of an error body kept in messages (the original server keeps 300).
const BODY_PREFIX: usize = 300;

/// Largest vLLM reply read (64 MiB): a read of 128 label ids over a canvas
/// of a few thousand tokens is well under a megabyte.
const MAX_REPLY_BYTES: usize = 64 << 20;

/// A vLLM endpoint.
#[derive(Debug)]
pub(crate) struct VllmClient {
    http: reqwest::Client,
    base: String,
    ready: AtomicBool,
    permits: Semaphore,
    request_timeout: Duration,
    idle_timeout: Duration,
    ready_wait: Duration,
    probe_timeout: Duration,
    probe_interval: Duration,
}

fn prefix(body: &str) -> String {
    let mut end = body.len().min(BODY_PREFIX);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    body[..end].to_owned()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl VllmClient {
    pub(crate) fn new(cfg: &VllmConfig) -> Result<Self, VllmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .build()
            .map_err(|e| VllmError::Client(e.to_string()))?;
        Ok(Self {
            http,
            base: cfg.base_url.clone(),
            ready: AtomicBool::new(false),
            permits: Semaphore::new(cfg.max_concurrent),
            request_timeout: cfg.request_timeout,
            idle_timeout: cfg.idle_timeout,
            ready_wait: cfg.ready_wait,
            probe_timeout: cfg.probe_timeout,
            probe_interval: cfg.probe_interval,
        })
    }

    async fn probe(&self) -> bool {
        let url = format!("{}/health", self.base);
        let sent = self.http.get(url).timeout(self.probe_timeout).send().await;
        sent.is_ok_and(|r| r.status().is_success())
    }

    /// Current health: one `/health` probe.
    pub(crate) async fn health(&self) -> Health {
        if self.probe().await {
            self.ready.store(true, Ordering::SeqCst);
            Health::Ready
        } else {
            Health::starting("waiting_for_vllm")
        }
    }

    /// Hold the caller until vLLM's `/health` answers 200 (serving.md §9.6). The
    /// first success is remembered for the life of the process.
    #[tracing::instrument(skip_all)]
    pub(crate) async fn wait_ready(&self) -> Result<(), BackendError> {
        if self.ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        let started = Instant::now();
        loop {
            if self.probe().await {
                self.ready.store(true, Ordering::SeqCst);
                tracing::info!(
                    waited_ms = started.elapsed().as_millis() as u64,
                    "vLLM is ready"
                );
                return Ok(());
            }
            // The last probe lands on the deadline itself, so the whole
            // `ready_wait` is waited (it used to stop one interval early).
            let waited = started.elapsed();
            if waited >= self.ready_wait {
                return Err(BackendError::NotReady(format!(
                    "vLLM at {} did not answer /health with 200 within {} s",
                    self.base,
                    self.ready_wait.as_secs_f64()
                )));
            }
            tokio::time::sleep(self.probe_interval.min(self.ready_wait - waited)).await;
        }
    }

    /// POST `body` to `path` and return the JSON reply.
    ///
    /// # Errors
    /// See the module table.
    #[tracing::instrument(skip_all, fields(path, status, ms))]
    pub(crate) async fn post(&self, path: &str, body: &Value) -> Result<Value, BackendError> {
        self.wait_ready().await?;
        let started = Instant::now();
        let _permit = tokio::time::timeout(self.request_timeout, self.permits.acquire())
            .await
            .map_err(|_| {
                BackendError::Overloaded(format!(
                    "no vLLM call slot free within {} s",
                    self.request_timeout.as_secs_f64()
                ))
            })?
            .map_err(|_| BackendError::Unavailable("vLLM client closed".into()))?;
        let left = self.request_timeout.saturating_sub(started.elapsed());
        let span = tracing::Span::current();
        span.record("path", path);
        let url = format!("{}{path}", self.base);
        let resp = self
            .http
            .post(url)
            .json(body)
            .timeout(left)
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = resp.status().as_u16();
        span.record("status", status);
        let bytes =
            dgem_backend::body::read_idle(resp.bytes_stream(), self.idle_timeout, MAX_REPLY_BYTES)
                .await
                .map_err(|e| BackendError::Connection(format!("vLLM at {}: {e}", self.base)))?;
        span.record("ms", started.elapsed().as_millis() as u64);
        let text = String::from_utf8_lossy(&bytes);
        if status == 429 || status >= 500 {
            return Err(BackendError::Upstream {
                status,
                body: prefix(&text),
            });
        }
        if status >= 400 {
            return Err(BackendError::InvalidRequest(format!(
                "upstream {status}: {}",
                prefix(&text)
            )));
        }
        if !(200..300).contains(&status) {
            return Err(BackendError::Model(format!(
                "malformed vLLM reply: unexpected status {status}"
            )));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            BackendError::Model(format!(
                "malformed vLLM reply: not JSON ({e}): {}",
                prefix(&text)
            ))
        })
    }

    fn transport(&self, e: &reqwest::Error) -> BackendError {
        if e.is_timeout() {
            BackendError::Timeout(millis(self.request_timeout))
        } else if e.is_connect() {
            BackendError::Connection(format!("could not reach vLLM at {}: {e}", self.base))
        } else {
            BackendError::Connection(format!("connection to vLLM at {} lost: {e}", self.base))
        }
    }
}
