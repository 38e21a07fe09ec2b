//! Bind first, load behind it: a [`LoadingDecider`] stands in for the model
//! while it loads (or is pulled on first use), so `dgem serve` answers
//! `/health` within milliseconds of starting, as deployment start-up probes
//! expect, instead of after the load. Until the model is in place it reports
//! `Health::Starting { phase: "loading_model" }` (so `/health` says
//! `phase: loading_model`, `ready: false`) and refuses decisions with
//! `BackendError::NotReady` (503, retryable); a failed load reports
//! `Health::Failed { phase: "load_failed" }`.
//!
//! While the default model is downloaded on a first start the loader
//! [reports](LoadingDecider::report) phase `pulling_model`, with what it is
//! doing in words (`downloading part 2 of 4 (…)`, `waiting 253 s: the
//! package index asked to retry later`) as the decider's
//! [`starting_detail`](Decider::starting_detail), which `/health` shows as
//! `detail`.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use dgem_backend::{Attention, BackendError, BackendInfo, Health, LabelMode};
use dgem_engine::{DecideError, DecideRequest, Decider, Decision};

/// Phase reported while the model loads.
pub const LOADING_MODEL: &str = "loading_model";
/// Phase reported while the default model is downloaded (first start).
pub const PULLING_MODEL: &str = "pulling_model";
/// Phase reported after the load failed.
pub const LOAD_FAILED: &str = "load_failed";
/// `runtime` of the placeholder info while nothing is loaded, so callers (the
/// warm-up) can tell "loading" from a backend that is warming up on its own.
pub const PLACEHOLDER_RUNTIME: &str = "loading";

/// A decider that becomes the real one once it is loaded (see the module docs).
#[derive(Debug)]
pub struct LoadingDecider {
    placeholder: BackendInfo,
    loaded: OnceLock<Arc<dyn Decider>>,
    failed: Mutex<Option<String>>,
    /// The phase reported and what it is doing, in words.
    step: Mutex<(String, Option<String>)>,
}

impl LoadingDecider {
    /// A stand-in for the model `model_id` (runtime [`PLACEHOLDER_RUNTIME`])
    /// until [`set`](Self::set).
    pub fn new(model_id: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            placeholder: BackendInfo {
                runtime: PLACEHOLDER_RUNTIME.into(),
                model_id: model_id.into(),
                model_sha256: None,
                attention: Attention::Causal,
                label_mode: LabelMode::Words,
                max_tokens: 0,
                supports_images: false,
                canvas: None,
                chat_turns: dgem_core::prompt::ChatTurns::gemma(),
            },
            loaded: OnceLock::new(),
            failed: Mutex::new(None),
            step: Mutex::new((LOADING_MODEL.to_owned(), None)),
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

    /// What the start-up is doing now: `phase` ([`PULLING_MODEL`],
    /// [`LOADING_MODEL`]) and `detail` in words; `/health` reports both until
    /// the model is in place (or failed).
    pub fn report(&self, phase: &str, detail: Option<String>) {
        *self.step.lock().unwrap_or_else(PoisonError::into_inner) = (phase.to_owned(), detail);
    }

    fn step(&self) -> (String, Option<String>) {
        self.step
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
            None => Health::starting(self.step().0),
        }
    }

    fn starting_detail(&self) -> Option<String> {
        if let Some(d) = self.loaded.get() {
            return d.starting_detail();
        }
        match self.failure() {
            Some(_) => None,
            None => self.step().1,
        }
    }

    /// # Errors
    /// [`BackendError::NotReady`] while the model loads, [`BackendError::Unavailable`]
    /// after a failed load; otherwise what the loaded decider returns.
    async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pull_reports_its_phase_and_detail_until_the_load_fails() {
        let d = LoadingDecider::new("gemma-3-270m-q4_k_m");
        assert_eq!(d.health().await, Health::starting(LOADING_MODEL));
        assert_eq!(d.starting_detail(), None);
        let wait = "waiting 253 s: the package index asked to retry later";
        d.report(PULLING_MODEL, Some(wait.into()));
        assert_eq!(d.health().await, Health::starting(PULLING_MODEL));
        assert_eq!(d.starting_detail().as_deref(), Some(wait));
        d.report(LOADING_MODEL, None);
        assert_eq!(d.health().await.phase(), LOADING_MODEL);
        assert_eq!(d.starting_detail(), None);
        d.report(PULLING_MODEL, Some("downloading part 2 of 4".into()));
        d.fail("the model pull was cancelled");
        assert_eq!(d.health().await.phase(), LOAD_FAILED);
        assert_eq!(d.starting_detail(), None);
    }
}
