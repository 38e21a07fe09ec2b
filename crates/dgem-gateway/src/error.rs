//! Gateway errors and the one error → HTTP table (house style rule 9). Bodies
//! are `{"error": "<message>"}` (reference.md §4.3).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use dgem_backend::BackendError;
use serde_json::json;
use thiserror::Error;

/// Why a gateway request failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The request itself is wrong (bad JSON, unknown template, render failure).
    #[error("{0}")]
    BadRequest(String),
    /// A backend name the gateway does not know or does not allow.
    #[error("backend `{given}` is not available on this {scope}; allowed: [{}]", allowed.join(", "))]
    UnknownBackend {
        /// The name received.
        given: String,
        /// What refused it: `gateway` (`dgem gateway`) or `server` (`dgem serve --studio`).
        scope: &'static str,
        /// The allow-list.
        allowed: Vec<String>,
    },
    /// The backend refused the request as invalid (a 4xx, never failed over).
    #[error("backend `{backend}` rejected the request: {error}")]
    Rejected {
        /// Backend name.
        backend: String,
        /// The upstream error.
        error: BackendError,
    },
    /// Every attempt failed with a retryable error.
    #[error("upstream ({backend}) decision failed after {attempts} attempt(s): {error}")]
    Upstream {
        /// The last backend tried.
        backend: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        error: BackendError,
    },
    /// A warming backend did not become ready within the wake-up timeout.
    #[error(
        "backend `{backend}` was still `{phase}` after waiting {waited_s:.0} s for it to wake up"
    )]
    WakeupTimeout {
        /// Backend name.
        backend: String,
        /// Its last phase.
        phase: String,
        /// Seconds waited.
        waited_s: f64,
    },
    /// Every backend tried failed, and the last one reports a failed phase on
    /// `/health` (e.g. `warmup_failed`): nothing to wait for.
    #[error(
        "backend `{backend}` is `{phase}` (failed, not warming up; nothing to wait for): {error}"
    )]
    BackendDown {
        /// Backend name.
        backend: String,
        /// The phase its `/health` reports.
        phase: String,
        /// The error of the last attempt.
        error: BackendError,
    },
    /// The server itself is misconfigured (e.g. the templates folder is missing).
    #[error("server misconfiguration: {0}")]
    Internal(String),
    /// Nothing could be tried (all breakers open, retry budget spent).
    #[error("no backend available: {0}")]
    Unavailable(String),
    /// The gateway configuration is invalid (startup only).
    #[error("gateway configuration: {0}")]
    Config(String),
}

impl GatewayError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) | Self::UnknownBackend { .. } => StatusCode::BAD_REQUEST,
            Self::Rejected { error, .. } => match error {
                BackendError::Upstream { status, .. } => {
                    StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST)
                }
                _ => StatusCode::BAD_REQUEST,
            },
            Self::Upstream { error, .. } => match error {
                BackendError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
                BackendError::NotReady(_) | BackendError::Overloaded(_) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::BAD_GATEWAY,
            },
            Self::WakeupTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Unavailable(_) | Self::BackendDown { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Config(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A stable snake_case name for metrics labels.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad_request",
            Self::UnknownBackend { .. } => "unknown_backend",
            Self::Rejected { .. } => "rejected",
            Self::Upstream { .. } => "upstream",
            Self::WakeupTimeout { .. } => "wakeup_timeout",
            Self::Unavailable(_) => "unavailable",
            Self::BackendDown { .. } => "backend_down",
            Self::Internal(_) => "internal",
            Self::Config(_) => "config",
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let status = self.status();
        metrics::counter!("dgem_gateway_errors_total", "type" => self.error_type()).increment(1);
        (status, Json(json!({"error": self.to_string()}))).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table() {
        let up = |error| GatewayError::Upstream {
            backend: "local".into(),
            attempts: 2,
            error,
        };
        assert_eq!(up(BackendError::Timeout(5)).status(), 504);
        assert_eq!(up(BackendError::NotReady("x".into())).status(), 503);
        assert_eq!(up(BackendError::Connection("x".into())).status(), 502);
        let rejected = GatewayError::Rejected {
            backend: "local".into(),
            error: BackendError::Upstream {
                status: 422,
                body: "bad".into(),
            },
        };
        assert_eq!(rejected.status(), 422);
        let unknown = GatewayError::UnknownBackend {
            given: "gpu".into(),
            scope: "gateway",
            allowed: vec!["local".into(), "cloudrun".into()],
        };
        assert_eq!(unknown.status(), 400);
        assert_eq!(
            unknown.to_string(),
            "backend `gpu` is not available on this gateway; allowed: [local, cloudrun]"
        );
    }
}
