//! The seam under `/api/*`: what the routes need from whatever decides, one
//! in-process decider (`dgem serve --studio`, [`Local`]) or the gateway's
//! router over many backends (`dgem gateway`, which implements
//! [`Backends`] in its own crate).

use std::sync::Arc;

use async_trait::async_trait;
use dgem_engine::{DecideRequest, Decider};
use dgem_service::{Direct, Route, Routed};
use serde_json::{json, Value};

use crate::error::{ApiError, ErrorKind, Flavor};

/// What the `/api/*` routes decide through.
#[async_trait]
pub trait Backends: Send + Sync + std::fmt::Debug {
    /// The backend used when a request names none.
    fn default_backend(&self) -> String;

    /// The backends a request may name.
    fn available(&self) -> Vec<String>;

    /// One row per replica for `GET /api/health`: `name`, `kind`, `url`,
    /// `phase`, `ready`, and what else the backend knows (`breaker`,
    /// `bytes_staged_gb`, `detail`).
    async fn health(&self) -> Vec<Value>;

    /// Decide `request` on `requested` (case-insensitive; `None` = the
    /// default).
    ///
    /// # Errors
    /// An [`ApiError`] in the one table: `backend_unavailable` for a name not
    /// routed to, the decision's own user errors, 502/503/504 when the backend
    /// failed.
    async fn decide_on(
        &self,
        requested: Option<&str>,
        request: DecideRequest,
    ) -> Result<Routed, ApiError>;
}

/// The `/api/*` routes' backends as the decision service's route: a
/// decision of `/api/decide` is read by [`Backends::decide_on`] through
/// [`dgem_service::Service::decide_on`], which applies its post-read.
#[async_trait]
impl<'a> Route for dyn Backends + 'a {
    type Error = ApiError;

    async fn read(
        &self,
        backend: Option<&str>,
        request: DecideRequest,
    ) -> Result<Routed, ApiError> {
        let routed = self.decide_on(backend, request).await?;
        // Before the post-read, so that its events carry the backend.
        tracing::Span::current().record("backend", routed.facts.backend.as_str());
        Ok(routed)
    }
}

/// Name of the one backend of [`Local`].
pub use dgem_service::LOCAL_BACKEND;

/// One in-process decider as the backend `local` (`dgem serve --studio`).
#[derive(Debug, Clone)]
pub struct Local {
    decider: Arc<dyn Decider>,
}

impl Local {
    /// `decider` (the server's gated decider) as the backend `local`.
    pub fn new(decider: Arc<dyn Decider>) -> Self {
        Self { decider }
    }
}

#[async_trait]
impl Backends for Local {
    fn default_backend(&self) -> String {
        LOCAL_BACKEND.to_string()
    }

    fn available(&self) -> Vec<String> {
        vec![LOCAL_BACKEND.to_string()]
    }

    async fn health(&self) -> Vec<Value> {
        let h = self.decider.health().await;
        let mut row = json!({
            "name": LOCAL_BACKEND,
            "kind": LOCAL_BACKEND,
            "url": "in-process",
            "phase": h.phase(),
            "ready": h.is_ready(),
        });
        if let (dgem_backend::Health::Failed { reason, .. }, Some(m)) = (&h, row.as_object_mut()) {
            m.insert("detail".into(), json!(reason));
        }
        vec![row]
    }

    async fn decide_on(
        &self,
        requested: Option<&str>,
        request: DecideRequest,
    ) -> Result<Routed, ApiError> {
        let given = requested.map(str::trim).filter(|m| !m.is_empty());
        if let Some(g) = given.filter(|g| !g.eq_ignore_ascii_case(LOCAL_BACKEND)) {
            return Err(ApiError::new(
                ErrorKind::UnknownBackend,
                format!(
                    "backend `{g}` is not available on this server; allowed: [{LOCAL_BACKEND}]"
                ),
            )
            .with_param("backend"));
        }
        Direct(self.decider.as_ref())
            .read(None, request)
            .await
            .map_err(|e| ApiError::from_engine(&e, Flavor::Chat))
    }
}
