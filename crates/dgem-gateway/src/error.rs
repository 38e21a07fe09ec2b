//! Gateway errors, mapped onto the server's one error → HTTP table
//! ([`dgem_server::ApiError`]): every route answers `{"error": {"message",
//! "type", "param"?}}`. (The original gateway's `/api` routes answered a bare
//! `{"error": "<message>"}`; one shape on every route replaced it.)

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dgem_backend::BackendError;
use dgem_server::{ApiError, ErrorKind};
use thiserror::Error;

/// Why a gateway request failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The request itself is wrong (bad JSON, unknown template, render failure).
    #[error("{0}")]
    BadRequest(String),
    /// The body is JSON but cannot be accepted as sent (a duplicate key): 422.
    #[error("{0}")]
    Validation(String),
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
    /// The server itself is misconfigured (e.g. a template file it cannot read).
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
    /// The kind of this error in the server's one table, which decides the
    /// status and the `type`. A `Rejected` request keeps the class of the
    /// upstream's 4xx (422 stays 422, 401 stays 401).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::BadRequest(_) => ErrorKind::InvalidRequest,
            Self::Validation(_) => ErrorKind::Validation,
            Self::UnknownBackend { .. } => ErrorKind::UnknownBackend,
            Self::Rejected { error, .. } => match error {
                BackendError::Upstream { status, .. } => match status {
                    401 | 403 => ErrorKind::Authentication,
                    404 => ErrorKind::NotFound,
                    413 => ErrorKind::PayloadTooLarge,
                    422 => ErrorKind::Validation,
                    // A 5xx that does not fail over (a 500: a bug upstream)
                    // is the upstream's failure, never the caller's 400.
                    500.. => ErrorKind::Upstream,
                    _ => ErrorKind::InvalidRequest,
                },
                // The backend failed (its model, its runtime, its size
                // limit), not the request.
                BackendError::Model(_) => ErrorKind::Upstream,
                BackendError::Unavailable(_) => ErrorKind::Unavailable,
                _ => ErrorKind::InvalidRequest,
            },
            Self::Upstream { error, .. } => match error {
                BackendError::Timeout(_) => ErrorKind::Timeout,
                BackendError::NotReady(_) | BackendError::Overloaded(_) => ErrorKind::Overloaded,
                _ => ErrorKind::Upstream,
            },
            Self::WakeupTimeout { .. } => ErrorKind::Timeout,
            Self::Unavailable(_) | Self::BackendDown { .. } | Self::BreakersOpen { .. } => {
                ErrorKind::Unavailable
            }
            Self::Config(_) | Self::Internal(_) => ErrorKind::Internal,
            Self::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
        }
    }

    /// The HTTP status of this error (from [`GatewayError::kind`]).
    pub fn status(&self) -> StatusCode {
        self.kind().status()
    }

    /// The error as the server's [`ApiError`]: kind, public message, the
    /// field at fault (`backend`), `Retry-After` and `Allow`.
    pub fn to_api(&self) -> ApiError {
        let mut e = match self {
            // Request messages open with the field at fault: "`samples` must be …".
            Self::BadRequest(m) => ApiError::invalid_field(m.clone()),
            Self::UnknownBackend { .. } => {
                ApiError::new(self.kind(), self.public_message()).with_param("backend")
            }
            _ => ApiError::new(self.kind(), self.public_message()),
        };
        if let Self::MethodNotAllowed { allow, .. } = self {
            e.allow = Some(allow);
        }
        e.retry_after = self.retry_after_s();
        e
    }

    /// A stable snake_case name for metrics labels.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad_request",
            Self::Validation(_) => "validation",
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

/// Most characters of an upstream's words quoted to a caller.
const UPSTREAM_WORDS_CHARS: usize = 300;

/// The message inside an upstream's error body: `error.message` of the
/// `{"error": {"message", …}}` shape, or `error` when it is a string (so a
/// caller reads words, not escaped JSON), at most [`UPSTREAM_WORDS_CHARS`]
/// characters. A body without that shape (an HTML error page, a stack trace)
/// is quoted only when `raw_ok` (a 4xx, whose text says what to fix), and
/// never for a 5xx: its body goes to the log, the caller gets the status
/// (issue 38: the gateway's `/api` 502s quoted upstream bodies).
fn upstream_words(body: &str, raw_ok: bool) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(serde_json::Value::as_str)
            .or_else(|| e.as_str())
            .map(str::to_string)
    });
    let words = match from_json {
        Some(w) => w,
        None if raw_ok => body.trim().to_string(),
        None => return "no error message in its reply (the reply is in the gateway's log)".into(),
    };
    let mut cut: String = words.chars().take(UPSTREAM_WORDS_CHARS).collect();
    if cut.len() < words.len() {
        cut.push('…');
    }
    cut
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
            Self::Rejected {
                backend,
                error: BackendError::Upstream { status, body },
            } if *status >= 500 => format!(
                "backend `{backend}` failed (HTTP {status}, not retried elsewhere: an error of the backend itself): {}",
                upstream_words(body, false)
            ),
            Self::Rejected {
                backend,
                error: BackendError::Upstream { status, body },
            } => format!(
                "backend `{backend}` rejected the request (HTTP {status}): {}",
                upstream_words(body, true)
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

impl GatewayError {
    /// Count and log this error (the full text, upstream bodies included, goes
    /// to the log only), then give it as the server's [`ApiError`].
    pub fn into_api(self) -> ApiError {
        metrics::counter!("dgem_gateway_errors_total", "type" => self.error_type()).increment(1);
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(error = %self, status = status.as_u16(), "gateway request failed");
        }
        self.to_api()
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        self.into_api().into_response()
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
        // Regression (issue 27 hostile run): an upstream 500 on `/api/decide`
        // was a 400 `invalid_request_error` blaming the caller.
        let failed = GatewayError::Rejected {
            backend: "local".into(),
            error: BackendError::Upstream {
                status: 500,
                body: r#"{"error":{"message":"boom"}}"#.into(),
            },
        };
        assert_eq!(failed.status(), 502);
        assert!(
            failed.public_message().contains("failed (HTTP 500"),
            "{}",
            failed.public_message()
        );
        let model = GatewayError::Rejected {
            backend: "local".into(),
            error: BackendError::Model("reply exceeds 16 bytes".into()),
        };
        assert_eq!(model.status(), 502);
        // Regression (bad-input suite): the upstream's JSON error body was
        // pasted escaped into the message.
        let rejected = GatewayError::Rejected {
            backend: "local".into(),
            error: BackendError::Upstream {
                status: 400,
                body: r#"{"error":{"message":"question 'a': unknown type 'maybe'","type":"invalid_request_error"}}"#.into(),
            },
        };
        assert_eq!(
            rejected.public_message(),
            "backend `local` rejected the request (HTTP 400): question 'a': unknown type 'maybe'"
        );
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

    /// Issue 38: a 5xx the gateway did not retry quoted the upstream's body
    /// (an HTML page, a trace) in the `/api` 502.
    #[test]
    fn an_unretried_5xx_quotes_no_upstream_body() {
        let rejected = |status, body: &str| GatewayError::Rejected {
            backend: "cloudrun".into(),
            error: BackendError::Upstream {
                status,
                body: body.into(),
            },
        };
        let page = "<html>Traceback at http://10.1.2.3:8080/internal</html>";
        let msg = rejected(500, page).public_message();
        assert!(
            !msg.contains("10.1.2.3") && !msg.contains("<html>"),
            "{msg}"
        );
        assert!(
            msg.contains("HTTP 500") && msg.contains("no error message"),
            "{msg}"
        );
        // A structured message is still the upstream's words, cut short.
        let long = format!(r#"{{"error": {{"message": "{}"}}}}"#, "m".repeat(1000));
        let msg = rejected(500, &long).public_message();
        assert!(msg.ends_with('…') && msg.len() < 500, "{msg}");
        // A 4xx keeps its text: it says what to fix.
        let msg = rejected(422, "state: required").public_message();
        assert!(msg.ends_with("state: required"), "{msg}");
    }
}
