//! The in-flight gate as a wrapper around the decider, so every surface of
//! `dgem serve` shares one `MAX_INFLIGHT` budget: the server's own routes take
//! the gate in their handler, and `/mcp` and the Studio's `/api` get
//! [`AppState::gated_decider`], which takes the same semaphore, waits at most
//! `INFLIGHT_WAIT_S` and counts the same in-flight gauge.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use dgem_backend::{BackendError, BackendInfo, Health};
use dgem_engine::{DecideRequest, Decider, Decision, EngineError};

use crate::state::AppState;
use crate::telemetry;

/// The server's decider behind the server's gate (see the module docs).
#[derive(Debug, Clone)]
pub struct GatedDecider {
    state: AppState,
}

impl AppState {
    /// The decider behind this server's `MAX_INFLIGHT` gate, for surfaces the
    /// server does not route itself (`/mcp`, `/api`).
    pub fn gated_decider(&self) -> Arc<dyn Decider> {
        Arc::new(GatedDecider {
            state: self.clone(),
        })
    }
}

#[async_trait]
impl Decider for GatedDecider {
    fn info(&self) -> BackendInfo {
        self.state.engine().info()
    }

    fn calibrates(&self) -> bool {
        self.state.engine().calibrates()
    }

    async fn health(&self) -> Health {
        self.state.live_health().await
    }

    /// # Errors
    /// [`BackendError::Overloaded`] (retryable, 503) when no slot frees up within
    /// `INFLIGHT_WAIT_S`; otherwise what the decider returns.
    async fn decide(&self, req: DecideRequest) -> Result<Decision, EngineError> {
        let waited = Instant::now();
        let _permit = match self.state.gate() {
            Some(gate) => {
                let wait = self.state.config().inflight_wait;
                match tokio::time::timeout(wait, gate.clone().acquire_owned()).await {
                    Ok(Ok(permit)) => Some(permit),
                    Ok(Err(_closed)) => {
                        return Err(BackendError::Unavailable("decision gate closed".into()).into())
                    }
                    Err(_elapsed) => {
                        telemetry::record_gate_wait(waited.elapsed().as_secs_f64());
                        return Err(BackendError::Overloaded(format!(
                            "server busy: {} decisions in flight",
                            self.state.config().max_inflight
                        ))
                        .into());
                    }
                }
            }
            None => None,
        };
        telemetry::record_gate_wait(waited.elapsed().as_secs_f64());
        let _inflight = self.state.enter();
        self.state.engine().decide(req).await
    }
}
