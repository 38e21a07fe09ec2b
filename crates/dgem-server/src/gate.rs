//! The in-flight gate, written once: [`AppState::read_gated`] takes one of the
//! `MAX_INFLIGHT` slots (waiting at most `INFLIGHT_WAIT_S`), counts the
//! in-flight gauge, reads on the server's decider and records the decision
//! or its failure. Every surface of `dgem serve` reads through it, so they
//! share one budget: the server's own routes through
//! [`crate::decide::run`] (their errors in the route's words), and `/mcp`
//! and the Studio's `/api` through [`AppState::gated_decider`], a decider
//! whose errors are the engine's.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use async_trait::async_trait;
use dgem_backend::{BackendError, BackendInfo, Health};
use dgem_engine::{DecideError, DecideRequest, Decider, Decision};

use crate::state::AppState;
use crate::telemetry;

/// The server's decider behind the server's gate (see the module docs).
#[derive(Debug, Clone)]
pub struct GatedDecider {
    state: AppState,
    /// The `route` label its decisions are counted under (`mcp`, `api`).
    route: &'static str,
}

/// Why a gated read failed.
#[derive(Debug, Clone)]
pub enum GatedError {
    /// No slot was taken.
    Gate(GateError),
    /// The decider failed.
    Engine(DecideError),
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

    /// Read `req` on the server's decider behind the gate: take a slot, count
    /// the read in flight, decide, and record the decision (or why it
    /// failed, `flavor` naming the error type) under `route`. Returns the
    /// decision and the wait for the slot, in ms.
    ///
    /// # Errors
    /// [`GatedError::Gate`] when no slot was taken (recorded as
    /// `overloaded`, or as `closed` when the gate closed: the server's
    /// routes say `shutting_down`, the gated decider `overloaded`);
    /// [`GatedError::Engine`] when the decider failed.
    pub async fn read_gated(
        &self,
        route: &'static str,
        flavor: crate::error::Flavor,
        closed: &'static str,
        req: DecideRequest,
    ) -> Result<(Decision, f64), GatedError> {
        let policy = telemetry::policy_label(&req.schema);
        let waited = Instant::now();
        let _permit = self.acquire_slot().await.map_err(|e| {
            let outcome = match e {
                GateError::Closed => closed,
                GateError::Busy => "overloaded",
            };
            telemetry::record_failed_decision(route, &policy, outcome);
            GatedError::Gate(e)
        })?;
        let gate_ms = waited.elapsed().as_secs_f64() * 1e3;
        let _inflight = self.enter();
        match self.decider().decide(req).await {
            Ok(d) => {
                telemetry::record_decision(route, &policy, &d);
                Ok((d, gate_ms))
            }
            Err(e) => {
                let kind = crate::error::ApiError::from_engine(&e, flavor).kind;
                telemetry::record_failed_decision(route, &policy, kind.error_type());
                Err(GatedError::Engine(e))
            }
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
        self.state.decider().info()
    }

    fn calibrates(&self) -> bool {
        self.state.decider().calibrates()
    }

    async fn health(&self) -> Health {
        self.state.live_health().await
    }

    /// # Errors
    /// [`BackendError::Overloaded`] (retryable, 503) when no slot frees up within
    /// `INFLIGHT_WAIT_S`; otherwise what the decider returns.
    async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError> {
        let read = self
            .state
            .read_gated(self.route, crate::error::Flavor::Chat, "overloaded", req)
            .await;
        match read {
            Ok((d, _)) => Ok(d),
            Err(GatedError::Engine(e)) => Err(e),
            Err(GatedError::Gate(GateError::Closed)) => {
                Err(BackendError::Unavailable("decision gate closed".into()).into())
            }
            Err(GatedError::Gate(GateError::Busy)) => Err(BackendError::Overloaded(format!(
                "server busy: {} decisions in flight",
                self.state.config().max_inflight
            ))
            .into()),
        }
    }
}
