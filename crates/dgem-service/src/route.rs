//! [`Route`]: the one seam between the decision service and whatever reads a
//! prepared decision, so that [`crate::Service::decide_on`] is the one call
//! that reaches a model from every surface.
//!
//! A route is one in-process decider ([`Direct`]: `dgem decide`, `dgem
//! batch`, MCP over stdio), a server's decider behind its admission gate
//! (the chat and `/v1/systemone` routes of `dgem serve`), or a router over
//! many backends with failover (the `/api` routes of `dgem serve --studio`
//! and `dgem gateway`). Each says how the read went in [`RouteFacts`], which
//! come back on [`crate::Decided`]. Its failure is its own type
//! ([`Route::Error`]): each surface renders errors in its own words (an HTTP
//! error table, MCP tool errors, exit codes), and the service passes them
//! through untouched.

use std::time::Instant;

use async_trait::async_trait;
use dgem_engine::{DecideError, DecideRequest, Decider, Decision};

/// Name of the backend of a decision read in process ([`Direct`]).
pub const LOCAL_BACKEND: &str = "local";

/// Where a read in process happened, as [`RouteFacts::upstream_url`] says it.
pub const IN_PROCESS: &str = "in-process";

/// How a routed read went.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteFacts {
    /// Name of the backend that answered ([`LOCAL_BACKEND`] in process).
    pub backend: String,
    /// URL of the replica that answered ([`IN_PROCESS`] in process).
    pub upstream_url: String,
    /// Model id the backend reports; empty when unknown.
    pub model: String,
    /// Attempts made, the successful one included (≥ 1).
    pub attempts: u32,
    /// Wall time of the successful attempt, in ms.
    pub forward_ms: f64,
    /// Wall time of the whole routed call (waits, failed attempts and
    /// cold-start holds included), in ms.
    pub total_ms: f64,
    /// Of which, in ms: the wait for an admission slot before the read
    /// (0 where the route has no gate).
    pub gate_ms: f64,
}

impl RouteFacts {
    /// One successful attempt in process: `model`, `ms` of wall time.
    pub fn in_process(model: String, ms: f64) -> Self {
        Self {
            backend: LOCAL_BACKEND.to_string(),
            upstream_url: IN_PROCESS.to_string(),
            model,
            attempts: 1,
            forward_ms: ms,
            total_ms: ms,
            gate_ms: 0.0,
        }
    }

    /// These facts with `gate_ms` of the total spent waiting for an
    /// admission slot before the read (the forward time is the rest).
    #[must_use]
    pub fn with_gate_wait(mut self, gate_ms: f64) -> Self {
        self.gate_ms = gate_ms;
        self.forward_ms = (self.total_ms - gate_ms).max(0.0);
        self
    }
}

/// A decision read by a [`Route`], and how the read went.
#[derive(Debug, Clone)]
pub struct Routed {
    /// The decision as read, before the post-read.
    pub decision: Decision,
    /// How the read went.
    pub facts: RouteFacts,
}

/// What reads a prepared decision (see the module docs).
#[async_trait]
pub trait Route: Send + Sync {
    /// Why a read failed, in the words of the surface that composed the
    /// route.
    type Error: Send;

    /// Read `request` on `backend` (a name the request or a header gave;
    /// `None` = the route's default). A route with one backend may refuse
    /// any other name.
    ///
    /// # Errors
    /// The route's failure: a backend it does not serve, no admission slot
    /// in time, or the read's own failure.
    async fn read(
        &self,
        backend: Option<&str>,
        request: DecideRequest,
    ) -> Result<Routed, Self::Error>;
}

/// One decider read directly, in process: backend [`LOCAL_BACKEND`], one
/// attempt. A backend name in the request is not looked at (the surfaces
/// that read this way serve one model).
#[derive(Debug, Clone, Copy)]
pub struct Direct<'a>(pub &'a dyn Decider);

#[async_trait]
impl Route for Direct<'_> {
    type Error = DecideError;

    async fn read(
        &self,
        _backend: Option<&str>,
        request: DecideRequest,
    ) -> Result<Routed, DecideError> {
        let started = Instant::now();
        let decision = self.0.decide(request).await?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(Routed {
            decision,
            facts: RouteFacts::in_process(self.0.info().model_id, ms),
        })
    }
}
