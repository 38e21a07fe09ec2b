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
    /// Nothing could be tried (retry budget spent, a task failed).
    #[error("no backend available: {0}")]
    Unavailable(String),
    /// Every replica of the chain has an open circuit breaker and none answers
    /// ready: 503 with `Retry-After` (seconds until the first half-open trial).
    #[error(
        "no backend available: every backend's circuit breaker is open; retry in {retry_after_s} s"
    )]
    BreakersOpen {
        /// Seconds until the first breaker lets a trial through (at least 1).
        retry_after_s: u64,
    },
    /// The gateway configuration is invalid (startup only).
    #[error("gateway configuration: {0}")]
    Config(String),
    /// A known route asked with a method it does not take: 405 with `Allow`.
    #[error("method {method} is not allowed on this route; use {allow}")]
    MethodNotAllowed {
        /// The method received.
        method: String,
        /// The methods the route takes (the `Allow` header).
        allow: &'static str,
    },
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
            Self::Unavailable(_) | Self::BackendDown { .. } | Self::BreakersOpen { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Config(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
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
            Self::BreakersOpen { .. } => "breakers_open",
            Self::BackendDown { .. } => "backend_down",
            Self::Internal(_) => "internal",
            Self::Config(_) => "config",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
        }
    }
}

/// What a caller is told of a backend failure: its class and status, never the
/// upstream's body or its internal URL (those go to the log).
fn public(e: &BackendError) -> String {
    match e {
        BackendError::Upstream { status, .. } => format!("upstream answered HTTP {status}"),
        BackendError::Connection(_) => {
            "could not reach the backend (connection refused, reset or closed)".into()
        }
        BackendError::NotReady(_) => "backend not ready".into(),
        BackendError::Overloaded(_) => "backend overloaded".into(),
        other => other.to_string(),
    }
}

impl GatewayError {
    /// The message a caller sees: as [`Display`](std::fmt::Display), except
    /// that a failed backend's reply body and URLs are left out (`Upstream`,
    /// `BackendDown`); [`IntoResponse`] logs the full error. A `Rejected`
    /// request keeps the upstream's words: they say what to fix.
    pub fn public_message(&self) -> String {
        match self {
            Self::Upstream {
                backend,
                attempts,
                error,
            } => format!(
                "upstream ({backend}) decision failed after {attempts} attempt(s): {}",
                public(error)
            ),
            Self::BackendDown {
                backend,
                phase,
                error,
            } => format!(
                "backend `{backend}` is `{phase}` (failed, not warming up; nothing to wait for): {}",
                public(error)
            ),
            other => other.to_string(),
        }
    }

    /// `Retry-After` seconds, for the errors that know them.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            Self::BreakersOpen { retry_after_s } => Some(*retry_after_s),
            _ => None,
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let status = self.status();
        metrics::counter!("dgem_gateway_errors_total", "type" => self.error_type()).increment(1);
        if status.is_server_error() {
            tracing::warn!(error = %self, status = status.as_u16(), "gateway request failed");
        }
        let mut resp = (status, Json(json!({"error": self.public_message()}))).into_response();
        if let Some(s) = self.retry_after_s() {
            if let Ok(v) = axum::http::HeaderValue::from_str(&s.to_string()) {
                resp.headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, v);
            }
        }
        if let Self::MethodNotAllowed { allow, .. } = &self {
            resp.headers_mut().insert(
                axum::http::header::ALLOW,
                axum::http::HeaderValue::from_static(allow),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12, defect 10: 502 bodies carried the upstream's body and its
    /// internal URL to the caller.
    #[test]
    fn failed_backend_messages_leave_out_upstream_bodies_and_urls() {
        let up = |error| GatewayError::Upstream {
            backend: "cloudrun".into(),
            attempts: 2,
            error,
        };
        let e = up(BackendError::Upstream {
            status: 502,
            body: "Traceback at http://10.1.2.3:8080/internal".into(),
        });
        assert_eq!(
            e.public_message(),
            "upstream (cloudrun) decision failed after 2 attempt(s): upstream answered HTTP 502"
        );
        assert!(e.to_string().contains("10.1.2.3"), "the log keeps it");
        let e = up(BackendError::Connection(
            "error sending request for url (http://10.1.2.3:8080/v1/chat/completions)".into(),
        ));
        assert!(
            !e.public_message().contains("10.1.2.3"),
            "{}",
            e.public_message()
        );
        let e = GatewayError::BackendDown {
            backend: "local".into(),
            phase: "warmup_failed".into(),
            error: BackendError::Upstream {
                status: 503,
                body: "secret".into(),
            },
        };
        assert!(!e.public_message().contains("secret"));
        // A malformed reply keeps the path that names what was wrong.
        let e = up(BackendError::BadReply(
            "decision reply at `answers.u.probabilities`: sum 0.5".into(),
        ));
        assert!(e.public_message().contains("answers.u.probabilities"));
    }

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
