//! The raw pass-through of the OpenAI-shaped routes (`/v1/chat/completions`,
//! `/v1/systemone`) that a replica may offer beside its decisions: the
//! [`Forward`] capability, its reply ([`Forwarded`]), which upstream statuses
//! fail over, which reply headers pass back, and the phase names the gateway
//! gives a replica's health. Kept apart from [`crate::replica`] so that the
//! remote client, which implements [`Forward`], and the replica, which holds
//! one, each depend on this module and not on each other.

use std::fmt;

use async_trait::async_trait;
use axum::body::Bytes;
use dgem_backend::BackendError;

/// Phase names the gateway itself gives a replica's [`Health`](dgem_backend::Health); anything else is
/// passed on as the upstream wrote it (`mounting_gcs`, `staging_tmpfs`, …).
pub mod phase {
    /// Serving.
    pub const READY: &str = dgem_backend::Health::READY;
    /// Starting; requests are held.
    pub const WARMING_UP: &str = "warming_up";
    /// No instance runs; the first request wakes one (429/503 from the front end).
    pub const SCALED_TO_ZERO: &str = "scaled_to_zero";
    /// The health probe could not connect or timed out: nothing to wait for.
    pub const UNREACHABLE: &str = "unreachable";
    /// The backend reports itself broken.
    pub const FAILED: &str = dgem_backend::Health::FAILED;
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
    /// Reply headers passed back to the caller as they are
    /// ([`PASSED_HEADERS`]): timing, the ignored-fields list, `Retry-After`.
    pub headers: Vec<(String, String)>,
}

/// Upstream reply headers the pass-through routes hand back to the caller:
/// `Server-Timing`, `X-Inference-Time-Ms`, `X-DGem-Ignored-Fields`,
/// `Cache-Control` and `Retry-After` (the rest are hop-by-hop or the
/// gateway's own).
pub const PASSED_HEADERS: &[&str] = &[
    "server-timing",
    "x-inference-time-ms",
    "x-dgem-ignored-fields",
    "cache-control",
    "retry-after",
];

/// The optional capability of a replica to take a raw `POST` of an
/// OpenAI-shaped route (`/v1/chat/completions`, `/v1/systemone`) as it is.
#[async_trait]
pub trait Forward: Send + Sync + fmt::Debug {
    /// Forward `body` to `path`. A 429/502/503/504 reply is returned as
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
