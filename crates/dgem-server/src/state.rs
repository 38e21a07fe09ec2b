//! Shared application state: the engine, the settings, the concurrency gate and
//! readiness. Cheap to clone (one `Arc`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dgem_backend::Health;
use dgem_engine::Decider;
use metrics_exporter_prometheus::PrometheusHandle;
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, Semaphore};

use crate::config::ServeConfig;
use crate::telemetry;

/// Readiness as `/health` and `/ready` report it.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    /// `warming_up`, `warming_priors`, `ready` or `warmup_failed`.
    pub phase: String,
    /// Whether a real warm-up decision succeeded.
    pub ready: bool,
    /// Seconds the warm-up took, once it finished.
    pub warmup_s: Option<f64>,
    /// Unix time at which the server became ready.
    pub ready_ts: Option<f64>,
    /// Why the warm-up failed, if it did.
    pub error: Option<String>,
    /// Templates whose calibration priors were cached at start-up
    /// (`--warm-priors`), once that finished; `None` when it is off.
    pub priors_warmed: Option<usize>,
}

/// How long one live probe of the decider's health is reused by `/health` and
/// `/ready`: short enough that a backend that died shows within a second, long
/// enough that a probe storm does not reach vLLM.
pub const HEALTH_CACHE: Duration = Duration::from_secs(1);

/// How long `/health` waits for a probe it started before it answers with
/// the last known health (50 ms): a probe of the embedded engine or a
/// healthy vLLM is in by then, and `/health` stays within 100 ms however
/// slow the backend's own health check is (Cloud Run's probe timeout in the
/// deploy files is 2 s; a hung vLLM health check took 1.5 s).
pub const HEALTH_WAIT: Duration = Duration::from_millis(50);

/// The longest one background probe may run (5 s); past it the backend is
/// reported [`UNHEALTHY_PHASE`], a failed phase (a gateway fails over rather
/// than waiting for it).
pub const HEALTH_PROBE_LIMIT: Duration = Duration::from_secs(5);

/// Phase reported before the first probe of the backend has answered.
pub const CHECKING_PHASE: &str = "checking_backend";

/// Phase reported when the backend's health check ran past
/// [`HEALTH_PROBE_LIMIT`].
pub const UNHEALTHY_PHASE: &str = "backend_unhealthy";

/// The state every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    decider: Arc<dyn Decider>,
    config: ServeConfig,
    gate: Option<Arc<Semaphore>>,
    readiness: Mutex<Readiness>,
    live: Mutex<Option<(Instant, Health)>>,
    /// A background probe is running (one at a time).
    probing: AtomicBool,
    /// Woken when a background probe stores its result.
    probed: Notify,
    inflight: AtomicUsize,
    boot_ts: f64,
    metrics: PrometheusHandle,
    /// The deployment's decision service (its catalogue, schema defaults,
    /// Stage-2 provider and calibration file), through which every route
    /// decides.
    service: dgem_service::Service,
}

/// Seconds since the Unix epoch, as a float.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// sha256 of a key: keys are compared as digests, in constant time, so neither
/// their bytes nor their lengths leak through timing.
pub(crate) fn key_digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

impl AppState {
    /// State over the decider `engine` with `config`. Installs the Prometheus recorder on
    /// first use (process-wide).
    pub fn new(decider: Arc<dyn Decider>, config: ServeConfig) -> Self {
        Self::with_after(decider, config, Arc::default())
    }

    /// [`AppState::new`] with the deployment's Stage-2 provider and
    /// calibration file, used by the chat route's post-read extension keys;
    /// its decision service's catalogue is the working folder's
    /// `templates/`, then the built-in policies ([`AppState::with_service`]
    /// names another).
    pub fn with_after(
        decider: Arc<dyn Decider>,
        config: ServeConfig,
        after: Arc<dgem_cascade::AfterSetup>,
    ) -> Self {
        let service = dgem_service::Service::new(dgem_service::Catalogue::new(
            dgem_engine::templates::TemplateDir::new("templates"),
        ))
        .with_defaults(config.schema_defaults)
        .with_after(after);
        Self::with_service(decider, config, service)
    }

    /// [`AppState::new`] deciding through the deployment's decision
    /// `service` (its catalogue, schema defaults and post-read setup), the
    /// one its MCP tools and Studio API use too.
    pub fn with_service(
        decider: Arc<dyn Decider>,
        config: ServeConfig,
        service: dgem_service::Service,
    ) -> Self {
        let gate = (config.max_inflight > 0).then(|| Arc::new(Semaphore::new(config.max_inflight)));
        Self {
            inner: Arc::new(Inner {
                decider,
                gate,
                readiness: Mutex::new(Readiness {
                    phase: "warming_up".into(),
                    ready: false,
                    warmup_s: None,
                    ready_ts: None,
                    error: None,
                    priors_warmed: None,
                }),
                live: Mutex::new(None),
                probing: AtomicBool::new(false),
                probed: Notify::new(),
                inflight: AtomicUsize::new(0),
                boot_ts: unix_now(),
                metrics: telemetry::handle(),
                service,
                config,
            }),
        }
    }

    /// The decider (the embedded model, the vLLM reader, …). Named for
    /// what it is to this server: whatever decides, not an engine.
    pub fn decider(&self) -> &Arc<dyn Decider> {
        &self.inner.decider
    }

    /// The deployment's decision service.
    pub fn service(&self) -> &dgem_service::Service {
        &self.inner.service
    }

    /// The settings.
    pub fn config(&self) -> &ServeConfig {
        &self.inner.config
    }

    /// The decision gate, when `MAX_INFLIGHT > 0`.
    pub(crate) fn gate(&self) -> Option<&Arc<Semaphore>> {
        self.inner.gate.as_ref()
    }

    /// A snapshot of readiness.
    pub fn readiness(&self) -> Readiness {
        self.inner
            .readiness
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The decider's health, answered within [`HEALTH_WAIT`] whatever the
    /// backend does: a probe younger than [`HEALTH_CACHE`] is reused;
    /// otherwise one probe starts in the background (one at a time, bounded
    /// by [`HEALTH_PROBE_LIMIT`]) and its result is used if it is in within
    /// [`HEALTH_WAIT`], else the last known health, else [`CHECKING_PHASE`].
    /// Must be called inside a tokio runtime.
    pub async fn live_health(&self) -> Health {
        let notified = self.inner.probed.notified();
        tokio::pin!(notified);
        // Registered before the probe can finish, so its wake-up is not missed.
        notified.as_mut().enable();
        if let Some((at, h)) = self.cached_health() {
            if at.elapsed() < HEALTH_CACHE {
                return h;
            }
        }
        if !self.inner.probing.swap(true, Ordering::SeqCst) {
            let state = self.clone();
            tokio::spawn(async move {
                let decider = state.inner.decider.clone();
                let h = match tokio::time::timeout(HEALTH_PROBE_LIMIT, decider.health()).await {
                    Ok(h) => h,
                    Err(_) => Health::Failed {
                        phase: UNHEALTHY_PHASE.into(),
                        reason: format!(
                            "the backend's health check did not answer within {} ms",
                            HEALTH_PROBE_LIMIT.as_millis()
                        ),
                    },
                };
                *state
                    .inner
                    .live
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), h));
                state.inner.probing.store(false, Ordering::SeqCst);
                state.inner.probed.notify_waiters();
            });
        }
        let _ = tokio::time::timeout(HEALTH_WAIT, notified).await;
        self.cached_health()
            .map_or_else(|| Health::starting(CHECKING_PHASE), |(_, h)| h)
    }

    fn cached_health(&self) -> Option<(Instant, Health)> {
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Readiness now: the warm-up's record, and not ready (in the backend's own
    /// phase) while the live probe says the backend is not serving, however the
    /// warm-up went.
    pub async fn current_readiness(&self) -> (Readiness, Health) {
        let mut r = self.readiness();
        let live = self.live_health().await;
        if !live.is_ready() {
            r.ready = false;
            r.phase = live.phase().to_string();
        }
        (r, live)
    }

    /// Whether a warm-up decision has succeeded.
    pub fn is_ready(&self) -> bool {
        self.readiness().ready
    }

    /// Replace readiness.
    pub(crate) fn set_readiness(&self, r: Readiness) {
        *self
            .inner
            .readiness
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = r;
    }

    /// Decisions running now.
    pub fn inflight(&self) -> usize {
        self.inner.inflight.load(Ordering::SeqCst)
    }

    /// Count one decision in flight until the guard drops (also on cancellation).
    pub(crate) fn enter(&self) -> InflightGuard {
        let n = self.inner.inflight.fetch_add(1, Ordering::SeqCst) + 1;
        telemetry::set_inflight(n);
        InflightGuard {
            state: self.clone(),
        }
    }

    /// Unix time the state was created.
    pub fn boot_ts(&self) -> f64 {
        self.inner.boot_ts
    }

    /// The Prometheus handle for `/metrics`.
    pub(crate) fn metrics(&self) -> &PrometheusHandle {
        &self.inner.metrics
    }
}

/// Decrements the in-flight count when dropped.
#[derive(Debug)]
pub(crate) struct InflightGuard {
    state: AppState,
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let n = self
            .state
            .inner
            .inflight
            .fetch_sub(1, Ordering::SeqCst)
            .saturating_sub(1);
        telemetry::set_inflight(n);
    }
}
