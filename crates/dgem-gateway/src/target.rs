//! The seam the router drives: a [`Target`] makes decisions, reports health and
//! forwards raw requests. Errors are [`BackendError`]s, so whether a failure may
//! fail over is decided by `BackendError::is_retryable` alone (house style rule 10).
//!
//! Two kinds ship here: [`DeciderTarget`] (an in-process
//! `Arc<dyn Decider>`, e.g. the embedded engine) and
//! [`HttpTarget`](crate::http::HttpTarget) (any dgem-compatible URL).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Bytes;
use dgem_backend::{BackendError, Health};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideRequest, Decider, EngineError};
use serde::Serialize;
use serde_json::Value;

/// Where a backend runs (`kind` in `/api/health`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A Vertex AI dedicated endpoint (`…/invoke/…`, OAuth2 access token).
    Vertex,
    /// A Cloud Run service (OIDC identity token, audience = service URL).
    Cloudrun,
    /// A local `dgem serve` or the embedded engine in this process.
    Local,
    /// Any other dgem-compatible URL.
    Remote,
}

impl Kind {
    /// The wire name (`vertex`, `cloudrun`, `local`, `remote`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vertex => "vertex",
            Self::Cloudrun => "cloudrun",
            Self::Local => "local",
            Self::Remote => "remote",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Phase names a target reports; anything not listed is passed on as the
/// upstream wrote it (serving.md §9.5: `mounting_gcs`, `staging_tmpfs`, …).
pub mod phase {
    /// Serving.
    pub const READY: &str = "ready";
    /// Starting; requests are held.
    pub const WARMING_UP: &str = "warming_up";
    /// No instance runs; the first request wakes one (429/503 from the front end).
    pub const SCALED_TO_ZERO: &str = "scaled_to_zero";
    /// The health probe could not connect or timed out: nothing to wait for.
    pub const UNREACHABLE: &str = "unreachable";
    /// The backend reports itself broken.
    pub const FAILED: &str = "failed";
}

/// One health probe of a target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetHealth {
    /// Phase (see [`phase`]).
    pub phase: String,
    /// Whether it serves decisions now.
    pub ready: bool,
    /// Weights staged so far during a cold start (GB), when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_staged_gb: Option<f64>,
    /// Why the probe failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl TargetHealth {
    /// A ready target.
    pub fn ready() -> Self {
        Self {
            phase: phase::READY.into(),
            ready: true,
            bytes_staged_gb: None,
            detail: None,
        }
    }

    /// A target that is not ready, in `phase`.
    pub fn not_ready(phase: impl Into<String>, detail: Option<String>) -> Self {
        Self {
            phase: phase.into(),
            ready: false,
            bytes_staged_gb: None,
            detail,
        }
    }

    /// Whether the target is reachable and on its way to ready, so a request is
    /// worth holding for it (a cold start), rather than failing over at once.
    ///
    /// A phase that names a failure (`failed`, `warmup_failed`, `unreachable`,
    /// anything containing `fail`, `error`, `crash`, `unhealthy`, `dead`,
    /// `stopped`) is not warming: see [`TargetHealth::is_failed`].
    pub fn is_warming(&self) -> bool {
        !self.ready && !self.is_failed()
    }

    /// Whether the phase names a failure (compared case-insensitively):
    /// [`phase::UNREACHABLE`], [`phase::FAILED`], or any phase containing
    /// `fail`, `error`, `crash`, `unhealthy`, `dead` or `stopped`
    /// (`warmup_failed` of a `dgem serve` whose vLLM upstream is down).
    pub fn is_failed(&self) -> bool {
        let p = self.phase.to_ascii_lowercase();
        p == phase::UNREACHABLE
            || p == phase::FAILED
            || ["fail", "error", "crash", "unhealthy", "dead", "stopped"]
                .iter()
                .any(|m| p.contains(m))
    }
}

impl From<Health> for TargetHealth {
    fn from(h: Health) -> Self {
        match h {
            Health::Ready => Self::ready(),
            Health::Starting { phase } => Self::not_ready(phase, None),
            Health::Failed { reason } => Self::not_ready(phase::FAILED, Some(reason)),
        }
    }
}

/// One decision to send: the rendered, validated schema JSON and the state.
#[derive(Debug, Clone)]
pub struct DecideCall {
    /// The schema (serving.md §3.1), already validated by the gateway.
    pub schema: Value,
    /// The state: a string or any JSON value.
    pub state: Value,
    /// Base seed (default 42).
    pub seed: i64,
}

/// A raw reply of a pass-through route.
#[derive(Debug, Clone)]
pub struct Forwarded {
    /// Upstream HTTP status.
    pub status: u16,
    /// Upstream `content-type`, if any.
    pub content_type: Option<String>,
    /// Upstream body, verbatim.
    pub body: Bytes,
}

/// Something the gateway can route decisions to.
#[async_trait]
pub trait Target: Send + Sync + fmt::Debug {
    /// The URL shown in `/api/health` and `upstream_url` (`in-process` for a local decider).
    fn url(&self) -> String;

    /// The model id the target serves, when known.
    fn model(&self) -> String {
        String::new()
    }

    /// Probe health. Never fails: an unreachable target reports [`phase::UNREACHABLE`].
    async fn health(&self) -> TargetHealth;

    /// Make one decision; returns the `{answers, diagnostics}` envelope.
    ///
    /// # Errors
    /// [`BackendError`]; retryable ones may fail over.
    async fn decide(&self, call: &DecideCall) -> Result<Value, BackendError>;

    /// Forward a raw `POST` of `body` to `path` (`/v1/chat/completions`,
    /// `/v1/systemone`). A 429/502/503/504 reply is returned as
    /// [`BackendError::Upstream`] so it can fail over; others come back verbatim.
    ///
    /// # Errors
    /// [`BackendError`] for transport failures and retryable statuses.
    async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, BackendError>;
}

/// Whether an upstream HTTP status may fail over (429, 502, 503, 504).
pub fn status_fails_over(status: u16) -> bool {
    matches!(status, 429 | 502 | 503 | 504)
}

/// A target over an in-process [`Decider`] (the embedded engine, a test double).
#[derive(Clone)]
pub struct DeciderTarget {
    decider: Arc<dyn Decider>,
    raw: Option<axum::Router>,
}

impl fmt::Debug for DeciderTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeciderTarget")
            .field("decider", &self.decider)
            .field("raw_routes", &self.raw.is_some())
            .finish()
    }
}

impl DeciderTarget {
    /// A target over `decider`; pass-through routes answer 501 unless
    /// [`with_routes`](Self::with_routes) supplies a router for them.
    pub fn new(decider: Arc<dyn Decider>) -> Self {
        Self { decider, raw: None }
    }

    /// Serve pass-through routes with `router` (e.g. `dgem_server::router(state)`).
    #[must_use]
    pub fn with_routes(mut self, router: axum::Router) -> Self {
        self.raw = Some(router);
        self
    }
}

/// Map an engine failure onto the backend error the router classifies.
pub fn engine_error(e: EngineError) -> BackendError {
    match e {
        EngineError::Backend(b) => b,
        EngineError::Schema(s) => BackendError::InvalidRequest(s.to_string()),
        other => BackendError::Model(other.to_string()),
    }
}

#[async_trait]
impl Target for DeciderTarget {
    fn url(&self) -> String {
        "in-process".into()
    }

    fn model(&self) -> String {
        self.decider.info().model_id.clone()
    }

    async fn health(&self) -> TargetHealth {
        self.decider.health().await.into()
    }

    async fn decide(&self, call: &DecideCall) -> Result<Value, BackendError> {
        let schema = ValidSchema::from_value(&call.schema, &SchemaDefaults::default())
            .map_err(|e| BackendError::InvalidRequest(e.to_string()))?;
        let decision = self
            .decider
            .decide(DecideRequest {
                schema,
                state: call.state.clone(),
                seed: call.seed,
            })
            .await
            .map_err(engine_error)?;
        Ok(decision.envelope())
    }

    async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, BackendError> {
        use tower::ServiceExt as _;
        let Some(router) = self.raw.clone() else {
            return Ok(Forwarded {
                status: 501,
                content_type: Some("application/json".into()),
                body: Bytes::from(
                    serde_json::json!({"error": {"message": format!("`{path}` is not served by the in-process backend"), "type": "not_implemented"}})
                        .to_string(),
                ),
            });
        };
        let req = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body))
            .map_err(|e| BackendError::InvalidRequest(format!("path `{path}`: {e}")))?;
        let resp = router
            .oneshot(req)
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = axum::body::to_bytes(resp.into_body(), crate::MAX_UPSTREAM_BODY)
            .await
            .map_err(|e| BackendError::Connection(e.to_string()))?;
        if status_fails_over(status) {
            return Err(BackendError::Upstream {
                status,
                body: String::from_utf8_lossy(&body).chars().take(300).collect(),
            });
        }
        Ok(Forwarded {
            status,
            content_type,
            body,
        })
    }
}
