//! Backend selection, failover, circuit breakers, retry budget and cold-start
//! holds: the one piece every route goes through.
//!
//! A request names a **mode** (`X-DGem-Backend` header, else body `backend`,
//! else the default). A mode is a backend name (`vertex`, `cloudrun`, `local`,
//! or a remote's name) or `vertex_first` (Vertex, then every other backend in
//! configuration order). A backend may have several replicas (URLs); the chain
//! of a request is every replica of every backend of its mode.
//!
//! For each request the chain is walked in order. A replica whose breaker is
//! open is skipped. A retryable failure (connection refused or reset — before
//! or during the request —, timeout, 429, 502/503/504) moves on to the next
//! replica (a reply that stalls or is cut after its headers counts, and
//! fails over without a health probe: see `RemoteConfig::idle_timeout`);
//! unlike the original gateway (reference.md §4.4) a Vertex request
//! that fails mid-way fails over too. A non-retryable answer (a 4xx) is returned
//! at once. When every replica failed but one of them reports a warming phase
//! on `/health` (not a failed phase such as `warmup_failed`: see
//! [`Health::is_failed`](dgem_backend::Health::is_failed)), the request
//! is held: health is polled with exponential backoff until it is ready
//! (then the chain is walked again) or the wake-up timeout passes. Attempts
//! are capped per request and by a shared retry budget. A request's first
//! failover never draws on the budget: when a replica dies, every request in
//! flight on it fails at once, and a shared budget of 20 spent by the first 20
//! of them failed the others with 502 although another replica could take
//! them (12 of 2,014 requests under 32 clients, issue 38). One free failover
//! per request at most doubles the load a failing chain sees; the budget
//! still caps every attempt after it.

use std::sync::Mutex;
use std::time::Duration;

use dgem_backend::BackendError;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use crate::breaker::{Breaker, BreakerConfig};
use crate::error::GatewayError;
use crate::replica::{status_fails_over, Kind, Replica};
use dgem_backend::Health;

mod status;

pub use status::BackendStatus;
/// The mode that tries Vertex first and fails over to the other backends.
pub const VERTEX_FIRST: &str = "vertex_first";

/// Timing and retry settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouteConfig {
    /// How long a request is held while a backend wakes up (default 10 min).
    pub wakeup_timeout: Duration,
    /// Limit of one attempt on one replica (default 90 s).
    pub attempt_timeout: Duration,
    /// First pause of a cold-start hold (default 1 s); doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Longest pause between health polls during a hold (default 15 s).
    pub backoff_max: Duration,
    /// Attempts per request, all replicas together (default 8).
    pub max_attempts: u32,
    /// Per-replica circuit breaker.
    pub breaker: BreakerConfig,
    /// Retry budget: each request deposits this fraction of a retry (default 0.2).
    pub retry_ratio: f64,
    /// Retry budget: the most retries saved up (default 20; also the start value).
    pub retry_reserve: f64,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            wakeup_timeout: Duration::from_secs(600),
            attempt_timeout: Duration::from_secs(90),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(15),
            max_attempts: 8,
            breaker: BreakerConfig::default(),
            retry_ratio: 0.2,
            retry_reserve: 20.0,
        }
    }
}

/// One configured backend: a name, a kind and its replicas.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// Name used in modes, headers and `X-DGem-Backend-Used`.
    pub name: String,
    /// Where it runs.
    pub kind: Kind,
    /// Its replicas, tried in order.
    pub replicas: Vec<Replica>,
}

/// Everything a [`Gateway`] is built from.
#[derive(Debug, Clone, Default)]
pub struct GatewayConfig {
    /// Backends in configuration order.
    pub backends: Vec<BackendSpec>,
    /// Default mode; `None` = `vertex_first` when Vertex is configured, else the first backend.
    pub default: Option<String>,
    /// Allow-list of modes; `None` = every backend plus `vertex_first` when Vertex is configured.
    pub allowed: Option<Vec<String>>,
    /// Timing and retries.
    pub route: RouteConfig,
}

#[derive(Debug)]
struct Slot {
    backend: usize,
    replica: Replica,
    breaker: Breaker,
}

/// A successful routed call and how it went.
#[derive(Debug, Clone)]
pub struct Routed<T> {
    /// The result.
    pub value: T,
    /// Name of the backend that answered (`X-DGem-Backend-Used`).
    pub backend: String,
    /// Its kind.
    pub kind: Kind,
    /// URL of the replica that answered.
    pub upstream_url: String,
    /// Model id it reports, if known.
    pub model: String,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// Wall time of the successful attempt (ms).
    pub forward_ms: f64,
    /// Wall time of the whole routed call (ms).
    pub total_ms: f64,
}

/// The router over configured backends. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Gateway {
    names: Vec<(String, Kind)>,
    replicas: Vec<Slot>,
    allowed: Vec<String>,
    default: String,
    config: RouteConfig,
    budget: Mutex<f64>,
    scope: &'static str,
}

impl Gateway {
    /// Build and validate a gateway.
    ///
    /// # Errors
    /// [`GatewayError::Config`] for no backends, a duplicate name, a backend
    /// without replicas, an allow-list entry that is not a mode, or a default
    /// outside the allow-list.
    pub fn new(config: GatewayConfig) -> Result<Self, GatewayError> {
        if config.backends.is_empty() {
            return Err(GatewayError::Config(
                "no backends: configure at least one of --vertex-url, --cloudrun-url, --local-url, --embedded, --remote".into(),
            ));
        }
        let mut names: Vec<(String, Kind)> = Vec::new();
        let mut replicas = Vec::new();
        for (i, b) in config.backends.iter().enumerate() {
            if names.iter().any(|(n, _)| n == &b.name) || b.name == VERTEX_FIRST {
                return Err(GatewayError::Config(format!(
                    "backend name `{}` is used twice or reserved",
                    b.name
                )));
            }
            if b.replicas.is_empty() {
                return Err(GatewayError::Config(format!(
                    "backend `{}` has no URL",
                    b.name
                )));
            }
            names.push((b.name.clone(), b.kind));
            replicas.extend(b.replicas.iter().map(|r| Slot {
                backend: i,
                replica: r.clone(),
                breaker: Breaker::new(config.route.breaker),
            }));
        }
        let has_vertex = names.iter().any(|(n, _)| n == "vertex");
        let modes: Vec<String> = has_vertex
            .then(|| VERTEX_FIRST.to_string())
            .into_iter()
            .chain(names.iter().map(|(n, _)| n.clone()))
            .collect();
        let allowed = match config.allowed {
            Some(list) => {
                for m in &list {
                    if !modes.contains(m) {
                        return Err(GatewayError::Config(format!(
                            "`--backends` entry `{m}` is not a configured backend; configured: [{}]",
                            modes.join(", ")
                        )));
                    }
                }
                list
            }
            None => modes,
        };
        let default = match config.default {
            Some(d) if allowed.contains(&d) => d,
            Some(d) => {
                return Err(GatewayError::Config(format!(
                    "`--default-backend` must be one of [{}]. Given: `{d}`",
                    allowed.join(", ")
                )))
            }
            None => allowed.first().cloned().unwrap_or_default(),
        };
        Ok(Self {
            names,
            replicas,
            allowed,
            default,
            budget: Mutex::new(config.route.retry_reserve),
            config: config.route,
            scope: "gateway",
        })
    }

    /// A gateway over one backend named `name`, default settings (a remote
    /// dgem as a `Decider` of its own). Errors speak of "this server", not of
    /// `dgem gateway`.
    pub fn single(name: &str, kind: Kind, replica: Replica) -> Self {
        let config = RouteConfig::default();
        Self {
            names: vec![(name.to_string(), kind)],
            replicas: vec![Slot {
                backend: 0,
                replica,
                breaker: Breaker::new(config.breaker),
            }],
            allowed: vec![name.to_string()],
            default: name.to_string(),
            budget: Mutex::new(config.retry_reserve),
            config,
            scope: "server",
        }
    }

    /// The default mode.
    pub fn default_backend(&self) -> &str {
        &self.default
    }

    /// The allow-list of modes.
    pub fn available(&self) -> &[String] {
        &self.allowed
    }

    /// The route settings.
    pub fn config(&self) -> &RouteConfig {
        &self.config
    }

    /// Replica indices of the chain for `requested` (or the default). Mode
    /// names are compared case-insensitively (`LOCAL` = `local`).
    ///
    /// # Errors
    /// [`GatewayError::UnknownBackend`] when `requested` is not allowed.
    fn chain(&self, requested: Option<&str>) -> Result<Vec<usize>, GatewayError> {
        let given = requested.map(str::trim).filter(|m| !m.is_empty());
        let given = given.unwrap_or(&self.default);
        let Some(mode) = self
            .allowed
            .iter()
            .find(|a| a.eq_ignore_ascii_case(given))
            .map(String::as_str)
        else {
            return Err(GatewayError::UnknownBackend {
                given: given.to_string(),
                scope: self.scope,
                allowed: self.allowed.clone(),
            });
        };
        let order: Vec<usize> = if mode == VERTEX_FIRST {
            let vertex = self.names.iter().position(|(n, _)| n == "vertex");
            vertex
                .into_iter()
                .chain((0..self.names.len()).filter(|i| Some(*i) != vertex))
                .collect()
        } else {
            self.names
                .iter()
                .position(|(n, _)| n == mode)
                .into_iter()
                .collect()
        };
        Ok(order
            .into_iter()
            .flat_map(|b| {
                self.replicas
                    .iter()
                    .enumerate()
                    .filter(move |(_, r)| r.backend == b)
                    .map(|(i, _)| i)
            })
            .collect())
    }

    fn withdraw_retry(&self) -> bool {
        let mut b = self
            .budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *b >= 1.0 {
            *b -= 1.0;
            true
        } else {
            false
        }
    }

    fn deposit(&self) {
        let mut b = self
            .budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *b = (*b + self.config.retry_ratio).min(self.config.retry_reserve);
    }

    /// Health of every replica, with its breaker state.
    pub async fn health(&self) -> Vec<BackendStatus> {
        let probes = self.replicas.iter().map(|r| async move {
            let (name, kind) = self.names[r.backend].clone();
            BackendStatus {
                name,
                kind,
                url: r.replica.url.clone(),
                health: r.replica.health().await,
                breaker: r.breaker.state(),
            }
        });
        futures_util::future::join_all(probes).await
    }

    /// Run `op` on the chain of `requested` with failover, breakers, the retry
    /// budget and cold-start holds (see the module docs).
    ///
    /// # Errors
    /// [`GatewayError`]: `UnknownBackend`, `Rejected` (a 4xx, not failed over),
    /// `Upstream` (every attempt failed), `WakeupTimeout`, `Unavailable`.
    #[tracing::instrument(skip_all, fields(otel.name = "dgem.gateway.decide", mode = requested.unwrap_or(self.default.as_str()), backend, attempts))]
    pub async fn route<T, F>(
        &self,
        requested: Option<&str>,
        op: F,
    ) -> Result<Routed<T>, GatewayError>
    where
        F: Fn(Replica) -> BoxFuture<'static, Result<T, BackendError>>,
    {
        let chain = self.chain(requested)?;
        let started = Instant::now();
        let deadline = started + self.config.wakeup_timeout;
        self.deposit();
        let mut attempts: u32 = 0;
        let mut last: Option<(String, BackendError)> = None;
        // Phase of the last failed replica when its health names a failure.
        let mut last_failed_phase: Option<String> = None;
        let mut backoff = self.config.backoff_initial;
        // Once per request: when every breaker of the chain is open, replicas
        // whose health probe answers ready get a trial at once.
        let mut probed_open = false;
        loop {
            let mut warming: Vec<usize> = Vec::new();
            for &i in &chain {
                let rep = &self.replicas[i];
                let name = &self.names[rep.backend].0;
                if !rep.breaker.try_acquire() {
                    tracing::debug!(backend = %name, url = %rep.replica.url, "breaker open: skipped");
                    continue;
                }
                // The first failover is free (module docs); later ones draw
                // on the shared budget.
                if attempts >= self.config.max_attempts || (attempts > 1 && !self.withdraw_retry())
                {
                    rep.breaker.release();
                    let why = if attempts >= self.config.max_attempts {
                        "attempt limit reached"
                    } else {
                        "retry budget spent"
                    };
                    return Err(self.exhausted(last, attempts, why));
                }
                attempts += 1;
                let t0 = Instant::now();
                let limit = self.config.attempt_timeout;
                let res = match tokio::time::timeout(limit, op(rep.replica.clone())).await {
                    Ok(r) => r,
                    Err(_) => Err(BackendError::Timeout(limit.as_millis() as u64)),
                };
                let forward_ms = t0.elapsed().as_secs_f64() * 1e3;
                match res {
                    Ok(value) => {
                        rep.breaker.on_success();
                        metrics::counter!("dgem_gateway_attempts_total", "backend" => name.clone(), "outcome" => "ok").increment(1);
                        let span = tracing::Span::current();
                        span.record("backend", name.as_str());
                        span.record("attempts", attempts);
                        return Ok(Routed {
                            value,
                            backend: name.clone(),
                            kind: self.names[rep.backend].1,
                            upstream_url: rep.replica.url.clone(),
                            model: rep.replica.model(),
                            attempts,
                            forward_ms,
                            total_ms: started.elapsed().as_secs_f64() * 1e3,
                        });
                    }
                    Err(error) if !fails_over(&error) => {
                        rep.breaker.on_success();
                        metrics::counter!("dgem_gateway_attempts_total", "backend" => name.clone(), "outcome" => "rejected").increment(1);
                        return Err(GatewayError::Rejected {
                            backend: name.clone(),
                            error,
                        });
                    }
                    Err(error) => {
                        // A replica that answered (its reply did not answer
                        // the request, stalled or was cut after the headers)
                        // is up, not warming: no health probe, so a stall
                        // fails over within the idle budget.
                        let health = if matches!(error, BackendError::BadReply(_)) {
                            Health::Ready
                        } else {
                            rep.replica.health().await
                        };
                        let outcome = if health.is_warming() {
                            rep.breaker.release();
                            warming.push(i);
                            last_failed_phase = None;
                            "warming"
                        } else {
                            last_failed_phase = (health.is_failed()
                                && health.phase() != crate::replica::phase::UNREACHABLE)
                                .then(|| health.phase().to_string());
                            rep.breaker.on_failure();
                            "failover"
                        };
                        metrics::counter!("dgem_gateway_attempts_total", "backend" => name.clone(), "outcome" => outcome).increment(1);
                        tracing::warn!(backend = %name, url = %rep.replica.url, %error, phase = %health.phase(), attempt = attempts, outcome, "hop failed");
                        last = Some((name.clone(), error));
                    }
                }
            }
            if warming.is_empty() {
                if last.is_none() && !probed_open {
                    // Nothing was tried: every breaker is open. A replica whose
                    // health answers ready again gets its trial now.
                    probed_open = true;
                    if self.reopen_ready(&chain).await {
                        continue;
                    }
                }
                return Err(match (last, last_failed_phase) {
                    (Some((backend, error)), Some(phase)) => GatewayError::BackendDown {
                        backend,
                        phase,
                        error,
                    },
                    (last @ Some(_), None) => {
                        self.exhausted(last, attempts, "every backend failed")
                    }
                    (None, _) => {
                        let wait = chain
                            .iter()
                            .filter_map(|&i| self.replicas[i].breaker.retry_in())
                            .min()
                            .unwrap_or(Duration::from_secs(1));
                        GatewayError::BreakersOpen {
                            retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64,
                        }
                    }
                });
            }
            self.hold(&warming, &mut backoff, deadline, started).await?;
        }
    }

    /// Probe the chain's replicas; give each one that answers ready a trial now.
    /// Returns whether any did.
    async fn reopen_ready(&self, chain: &[usize]) -> bool {
        let probes = chain.iter().map(|&i| async move {
            let r = &self.replicas[i];
            let ready = r.replica.health().await.is_ready();
            if ready {
                r.breaker.allow_trial();
            }
            ready
        });
        futures_util::future::join_all(probes)
            .await
            .into_iter()
            .any(|ready| ready)
    }

    /// Poll the warming replicas' health with backoff until one is ready.
    #[tracing::instrument(skip_all, fields(otel.name = "dgem.gateway.cold_start_backoff", replicas = warming.len()))]
    async fn hold(
        &self,
        warming: &[usize],
        backoff: &mut Duration,
        deadline: Instant,
        started: Instant,
    ) -> Result<(), GatewayError> {
        loop {
            let mut phase = String::new();
            let mut name = String::new();
            if Instant::now() + *backoff > deadline {
                for &i in warming {
                    name.clone_from(&self.names[self.replicas[i].backend].0);
                    phase = self.replicas[i].replica.health().await.phase().to_string();
                }
                return Err(GatewayError::WakeupTimeout {
                    backend: name,
                    phase,
                    waited_s: started.elapsed().as_secs_f64(),
                });
            }
            tokio::time::sleep(*backoff).await;
            *backoff = (*backoff * 2).min(self.config.backoff_max);
            for &i in warming {
                let h = self.replicas[i].replica.health().await;
                tracing::info!(backend = %self.names[self.replicas[i].backend].0, phase = %h.phase(), "holding for cold start");
                if !h.is_warming() {
                    return Ok(());
                }
            }
        }
    }

    fn exhausted(
        &self,
        last: Option<(String, BackendError)>,
        attempts: u32,
        why: &str,
    ) -> GatewayError {
        match last {
            Some((backend, error)) => GatewayError::Upstream {
                backend,
                attempts,
                error,
            },
            None => GatewayError::Unavailable(why.to_string()),
        }
    }
}

/// Whether `e` may fail over: connection loss, timeouts, overload, not-ready,
/// and upstream 429/502/503/504 (a 500 is a bug upstream, not a reason to
/// repeat the request elsewhere).
pub fn fails_over(e: &BackendError) -> bool {
    match e {
        BackendError::Upstream { status, .. } => status_fails_over(*status),
        other => other.is_retryable(),
    }
}
