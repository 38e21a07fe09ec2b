//! The in-flight gate as a wrapper around the decider, so every surface of
//! `dgem serve` shares one `MAX_INFLIGHT` budget: the server's own routes take
//! the gate in their handler, and `/mcp` and the Studio's `/api` get
//! [`AppState::gated_decider`], which takes the same semaphore, waits at most
//! `INFLIGHT_WAIT_S` and counts the same in-flight gauge.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use async_trait::async_trait;
use dgem_backend::{BackendError, BackendInfo, Health};
use dgem_engine::{DecideRequest, Decider, Decision, EngineError};

use crate::state::AppState;
use crate::telemetry;

/// The server's decider behind the server's gate (see the module docs).
#[derive(Debug, Clone)]
pub struct GatedDecider {
    state: AppState,
    /// The `route` label its decisions are counted under (`mcp`, `api`).
    route: &'static str,
}

/// Why no decision slot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateError {
    /// No slot freed up within `INFLIGHT_WAIT_S` (the gate wait is recorded).
    Busy,
    /// The gate was closed (the server is going away).
    Closed,
}

impl AppState {
    /// Take one of the `MAX_INFLIGHT` decision slots, waiting at most
    /// `INFLIGHT_WAIT_S`; `None` when the gate is off. The wait is recorded in
    /// `dgem_queue_wait_seconds{stage="gate"}`. Shared by the server's routes
    /// and [`GatedDecider`], so every surface counts against one budget.
    ///
    /// # Errors
    /// [`GateError`] when no slot was taken.
    pub async fn acquire_slot(&self) -> Result<Option<OwnedSemaphorePermit>, GateError> {
        let Some(gate) = self.gate() else {
            telemetry::record_gate_wait(0.0);
            return Ok(None);
        };
        let waited = Instant::now();
        let taken =
            tokio::time::timeout(self.config().inflight_wait, gate.clone().acquire_owned()).await;
        telemetry::record_gate_wait(waited.elapsed().as_secs_f64());
        match taken {
            Ok(Ok(permit)) => Ok(Some(permit)),
            Ok(Err(_closed)) => Err(GateError::Closed),
            Err(_elapsed) => Err(GateError::Busy),
        }
    }

    /// The decider behind this server's `MAX_INFLIGHT` gate, for surfaces the
    /// server does not route itself (`/mcp`, `/api`). Its decisions are
    /// counted in `dgem_decisions_total` and `dgem_hesitation` under
    /// `route="gated"`; [`AppState::gated_decider_for`] names the route.
    pub fn gated_decider(&self) -> Arc<dyn Decider> {
        self.gated_decider_for("gated")
    }

    /// [`AppState::gated_decider`] with its decisions counted under `route`.
    pub fn gated_decider_for(&self, route: &'static str) -> Arc<dyn Decider> {
        Arc::new(GatedDecider {
            state: self.clone(),
            route,
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
        let policy = telemetry::policy_label(&req.schema);
        let _permit = self.state.acquire_slot().await.map_err(|e| {
            telemetry::record_failed_decision(self.route, &policy, "overloaded");
            match e {
                GateError::Closed => BackendError::Unavailable("decision gate closed".into()),
                GateError::Busy => BackendError::Overloaded(format!(
                    "server busy: {} decisions in flight",
                    self.state.config().max_inflight
                )),
            }
        })?;
        let _inflight = self.state.enter();
        let out = self.state.engine().decide(req).await;
        match &out {
            Ok(d) => telemetry::record_decision(self.route, &policy, d),
            Err(e) => {
                let kind = crate::error::ApiError::from_engine(e, crate::error::Flavor::Chat).kind;
                telemetry::record_failed_decision(self.route, &policy, kind.error_type());
            }
        }
        out
    }
}
