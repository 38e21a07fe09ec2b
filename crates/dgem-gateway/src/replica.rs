//! What the router drives: a [`Replica`] is a [`Decider`] (the embedded engine
//! in process, a remote dgem over HTTP, a test double) plus, when it can, a raw
//! pass-through of the OpenAI-shaped routes ([`Forward`]). There is no second
//! "make a decision" trait: a decision through the gateway is a
//! [`DecideRequest`] with a validated schema in and a [`Decision`] out, and
//! whether a failure may fail over is decided by [`BackendError`] alone
//! (`crate::routing::fails_over`).
//!
//! [`DecideRequest`]: dgem_engine::DecideRequest
//! [`Decision`]: dgem_engine::Decision

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Bytes;
use dgem_backend::{BackendError, Health};
use dgem_engine::{DecideError, Decider};
use serde::Serialize;

pub use crate::forward::{phase, status_fails_over, Forward, Forwarded, PASSED_HEADERS};
use crate::remote::RemoteDgem;

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

/// One replica of a backend: a decider, where it runs (`url`, `in-process` for
/// one in this process) and, when it can, a raw pass-through. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Replica {
    /// Makes the decisions and reports health.
    pub decider: Arc<dyn Decider>,
    /// Takes pass-through routes, when the replica can.
    pub forward: Option<Arc<dyn Forward>>,
    /// Shown in `/api/health` and as `upstream_url`.
    pub url: String,
}

impl Replica {
    /// A replica over an in-process decider; pass-through routes answer 501
    /// unless [`with_routes`](Self::with_routes) supplies a router for them.
    pub fn in_process(decider: Arc<dyn Decider>) -> Self {
        Self {
            decider,
            forward: None,
            url: "in-process".into(),
        }
    }

    /// A replica over a dgem-compatible server: it decides and forwards.
    pub fn remote(remote: RemoteDgem) -> Self {
        let url = remote.base().to_string();
        let remote = Arc::new(remote);
        Self {
            decider: remote.clone(),
            forward: Some(remote),
            url,
        }
    }

    /// Serve pass-through routes with `router` (e.g. `dgem_server::router(state)`).
    #[must_use]
    pub fn with_routes(mut self, router: axum::Router) -> Self {
        self.forward = Some(Arc::new(RouterForward(router)));
        self
    }

    /// The model id the replica reports.
    pub fn model(&self) -> String {
        self.decider.info().model_id
    }

    /// One health probe.
    pub async fn health(&self) -> Health {
        self.decider.health().await
    }

    /// Forward a raw `POST`; a replica without the capability answers 501.
    ///
    /// # Errors
    /// As [`Forward::forward`].
    pub async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, BackendError> {
        match &self.forward {
            Some(f) => f.forward(path, body).await,
            None => Ok(Forwarded {
                headers: Vec::new(),
                status: 501,
                content_type: Some("application/json".into()),
                body: Bytes::from(
                    serde_json::json!({"error": {
                        "message": format!("`{path}` is not served by the in-process backend"),
                        "type": "not_implemented"
                    }})
                    .to_string(),
                ),
            }),
        }
    }
}

/// Map a decider failure onto the backend error the router classifies: a
/// schema error is the caller's (not retried), a backend error keeps its class.
pub fn decide_error(e: DecideError) -> BackendError {
    match e {
        DecideError::Backend(b) => b,
        DecideError::Schema(s) => BackendError::InvalidRequest(s.to_string()),
        other => BackendError::Model(other.to_string()),
    }
}

/// Pass-through into an in-process axum router.
#[derive(Debug)]
struct RouterForward(axum::Router);

#[async_trait]
impl Forward for RouterForward {
    async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, BackendError> {
        use tower::ServiceExt as _;
        let req = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body))
            .map_err(|e| BackendError::InvalidRequest(format!("path `{path}`: {e}")))?;
        let resp = self
            .0
            .clone()
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
            headers: Vec::new(),
            status,
            content_type,
            body,
        })
    }
}
