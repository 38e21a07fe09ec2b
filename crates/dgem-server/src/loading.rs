//! Bind first, load behind it: a [`LoadingDecider`] stands in for the model
//! while it loads (or is pulled on first use), so `dgem serve` answers
//! `/health` within milliseconds of starting, as deployment start-up probes
//! expect, instead of after the load. Until the model is in place it reports
//! `Health::Starting { phase: "loading_model" }` (so `/health` says
//! `phase: loading_model`, `ready: false`) and refuses decisions with
//! `BackendError::NotReady` (503, retryable); a failed load reports
//! `Health::Failed { phase: "load_failed" }`.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use dgem_backend::{Attention, BackendError, BackendInfo, Health, LabelMode};
use dgem_engine::{DecideRequest, Decider, Decision, EngineError};

/// Phase reported while the model loads.
pub const LOADING_MODEL: &str = "loading_model";
/// Phase reported after the load failed.
pub const LOAD_FAILED: &str = "load_failed";
/// `engine` of the placeholder info while nothing is loaded, so callers (the
/// warm-up) can tell "loading" from a backend that is warming up on its own.
pub const PLACEHOLDER_ENGINE: &str = "loading";

/// A decider that becomes the real one once it is loaded (see the module docs).
#[derive(Debug)]
pub struct LoadingDecider {
    placeholder: BackendInfo,
    loaded: OnceLock<Arc<dyn Decider>>,
    failed: Mutex<Option<String>>,
}

impl LoadingDecider {
    /// A stand-in for the model `model_id` (engine [`PLACEHOLDER_ENGINE`])
    /// until [`set`](Self::set).
    pub fn new(model_id: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            placeholder: BackendInfo {
                engine: PLACEHOLDER_ENGINE.into(),
                model_id: model_id.into(),
                model_sha256: None,
                attention: Attention::Causal,
                label_mode: LabelMode::Words,
                max_tokens: 0,
                supports_images: false,
                canvas: None,
            },
            loaded: OnceLock::new(),
            failed: Mutex::new(None),
        })
    }

    /// The model is loaded: every call goes to `decider` from now on. A second
    /// call is ignored.
    pub fn set(&self, decider: Arc<dyn Decider>) {
        let _ = self.loaded.set(decider);
    }

    /// The load failed for `reason`.
    pub fn fail(&self, reason: impl Into<String>) {
        *self.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.into());
    }

    fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl Decider for LoadingDecider {
    fn info(&self) -> BackendInfo {
        self.loaded
            .get()
            .map_or_else(|| self.placeholder.clone(), |d| d.info())
    }

    fn calibrates(&self) -> bool {
        self.loaded.get().is_some_and(|d| d.calibrates())
    }

    async fn health(&self) -> Health {
        if let Some(d) = self.loaded.get() {
            return d.health().await;
        }
        match self.failure() {
            Some(reason) => Health::Failed {
                phase: LOAD_FAILED.into(),
                reason,
            },
            None => Health::starting(LOADING_MODEL),
        }
    }

    /// # Errors
    /// [`BackendError::NotReady`] while the model loads, [`BackendError::Unavailable`]
    /// after a failed load; otherwise what the loaded decider returns.
    async fn decide(&self, req: DecideRequest) -> Result<Decision, EngineError> {
        match self.loaded.get() {
            Some(d) => d.decide(req).await,
            None => Err(match self.failure() {
                Some(reason) => {
                    BackendError::Unavailable(format!("the model failed to load: {reason}"))
                }
                None => BackendError::NotReady("the model is still loading".into()),
            }
            .into()),
        }
    }
}
