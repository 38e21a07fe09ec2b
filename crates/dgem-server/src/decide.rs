//! The server's own routes' read behind the concurrency gate: validate →
//! acquire a slot (at most `INFLIGHT_WAIT_S`) → decide → record, the gate
//! being [`AppState::read_gated`] (the one every surface of `dgem serve`
//! shares), with the route's span fields, log line and error words around
//! it; and [`Gated`], that read as the decision service's route.

use std::time::Instant;

use async_trait::async_trait;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use dgem_engine::{DecideRequest, Decision};
use dgem_service::{Route, RouteFacts, Routed};
use serde_json::Value;

use crate::error::{ApiError, ErrorKind, Flavor};
use crate::gate::{GateError, GatedError};
use crate::state::AppState;

/// A finished decision and the time it waited for a slot.
#[derive(Debug)]
pub struct Timed {
    /// The decision.
    pub decision: Decision,
    /// Milliseconds spent waiting for a `MAX_INFLIGHT` slot.
    pub gate_ms: f64,
}

impl Timed {
    /// The decision and gate wait of a decision the service made through
    /// [`Gated`].
    pub fn of(decided: dgem_service::Decided) -> Self {
        Self {
            gate_ms: decided.route.gate_ms,
            decision: decided.decision,
        }
    }
}

/// This server's decider behind its admission gate ([`run`]) as the
/// decision service's route: how the chat and `/v1/systemone` routes read,
/// their failures in the route's `flavor`. A backend name is not looked at
/// (the server decides with one model).
#[derive(Debug, Clone, Copy)]
pub struct Gated<'a> {
    /// The server.
    pub state: &'a AppState,
    /// The route whose words a failure is given in.
    pub flavor: Flavor,
}

#[async_trait]
impl Route for Gated<'_> {
    type Error = ApiError;

    async fn read(
        &self,
        _backend: Option<&str>,
        request: DecideRequest,
    ) -> Result<Routed, ApiError> {
        let started = Instant::now();
        let timed = run(self.state, request, self.flavor).await?;
        let total_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(Routed {
            facts: RouteFacts::in_process(self.state.decider().info().model_id, total_ms)
                .with_gate_wait(timed.gate_ms),
            decision: timed.decision,
        })
    }
}

/// Refuse image states on a backend that cannot read images, with 422 on
/// every route naming the backend (rather than silently dropping the images).
/// On one that can, [`check_state_images`] checks each image.
///
/// # Errors
/// 422 `validation_error` for a backend without vision.
pub fn check_images(state: &AppState, images: bool) -> Result<(), ApiError> {
    let info = state.decider().info();
    if images && !info.supports_images {
        let e = dgem_core::images::no_vision(&info.runtime, &info.model_id);
        return Err(ApiError::new(ErrorKind::Validation, e.message).with_param(e.field));
    }
    Ok(())
}

/// Check the images of a decision's `state` ([`dgem_core::images::check_images`]).
///
/// # Errors
/// A user error of the route's flavor naming the part and the rule.
pub fn check_state_images(flavor: Flavor, state: &Value) -> Result<(), ApiError> {
    dgem_core::images::check_images(state)
        .map(|_| ())
        .map_err(|e| ApiError::user(flavor, e.message).with_param(e.field))
}

/// Run `req` behind the gate.
///
/// # Errors
/// 503 `overloaded` (with `Retry-After`) when no slot frees up in time; the
/// engine's failures classified by [`ApiError::from_engine`].
pub async fn run(state: &AppState, req: DecideRequest, flavor: Flavor) -> Result<Timed, ApiError> {
    let span = tracing::Span::current();
    span.record("questions", req.schema.asked().len());
    match state
        .read_gated(flavor.name(), flavor, "shutting_down", req)
        .await
    {
        Ok((decision, gate_ms)) => {
            let t = &decision.diagnostics.timing;
            span.record("queue_ms", gate_ms + t.queue_ms);
            span.record("forward_ms", t.forward_ms);
            span.record("decide_ms", t.total_ms);
            span.record("reads", t.reads);
            tracing::info!(
                route = flavor.name(),
                answers = %summary(&decision),
                reads = t.reads,
                ms = t.total_ms,
                "decision"
            );
            Ok(Timed { decision, gate_ms })
        }
        Err(GatedError::Gate(GateError::Closed)) => Err(ApiError::new(
            ErrorKind::Overloaded,
            "server shutting down: retry on another replica",
        )
        .with_retry_after(1)),
        Err(GatedError::Gate(GateError::Busy)) => {
            let secs = state.config().inflight_wait.as_secs().clamp(1, 60);
            Err(ApiError::new(
                ErrorKind::Overloaded,
                format!(
                    "server busy: {} decisions in flight",
                    state.config().max_inflight
                ),
            )
            .with_retry_after(secs))
        }
        Err(GatedError::Engine(e)) => {
            let err = ApiError::from_engine(&e, flavor);
            // A refused request (an empty state, a state over the context) is
            // the caller's to fix: info, not a warning an operator must read.
            if err.kind.status().is_server_error() {
                tracing::warn!(route = flavor.name(), error = %e, "decision failed");
            } else {
                tracing::info!(route = flavor.name(), error = %e, "decision refused");
            }
            Err(err)
        }
    }
}

/// `id=label id=skipped …`, the per-decision log line of serving.md §8.5.
fn summary(d: &Decision) -> String {
    d.answers
        .iter()
        .map(|(id, a)| match a {
            Some(a) => format!("{id}={}", a.answer_name()),
            None => format!("{id}=skipped"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Output rows of the decision ([`dgem_core::envelope::Diagnostics::rows`]: the
/// answer templates + 1 per part, plus thought tokens), as the original server
/// counts them: `completion_tokens` on chat, `output_tokens` on systemone.
pub fn output_tokens(d: &Decision) -> usize {
    d.diagnostics.rows
}

/// `Server-Timing` (decide, queue, forward; ms with 2 decimals) and
/// `X-Inference-Time-Ms` headers of a success (serving.md §8.5).
pub fn timing_headers(t: &Timed) -> HeaderMap {
    let timing = &t.decision.diagnostics.timing;
    let mut h = HeaderMap::new();
    let server_timing = format!(
        "decide;dur={:.2}, queue;dur={:.2}, forward;dur={:.2}",
        timing.total_ms,
        t.gate_ms + timing.queue_ms,
        timing.forward_ms
    );
    if let Ok(v) = HeaderValue::from_str(&server_timing) {
        h.insert(HeaderName::from_static("server-timing"), v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{:.2}", timing.total_ms)) {
        h.insert(HeaderName::from_static("x-inference-time-ms"), v);
    }
    h
}
