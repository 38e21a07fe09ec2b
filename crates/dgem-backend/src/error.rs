//! Backend errors, each of which says whether a retry may help (house style rule 10).

use thiserror::Error;

/// Why a backend call failed.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum BackendError {
    /// The request cannot be served as sent (too long, slot out of range…). Not retryable.
    #[error("invalid read: {0}")]
    InvalidRequest(String),
    /// The backend's bounded queue is full. Retryable after a pause.
    #[error("backend overloaded: {0}")]
    Overloaded(String),
    /// The call did not finish in time. Retryable.
    #[error("backend timed out after {0} ms")]
    Timeout(u64),
    /// The backend is not ready yet (loading, staging). Retryable.
    #[error("backend not ready: {0}")]
    NotReady(String),
    /// A remote backend answered with an HTTP error status.
    #[error("upstream {status}: {body}")]
    Upstream {
        /// HTTP status code.
        status: u16,
        /// First bytes of the body.
        body: String,
    },
    /// A remote backend could not be reached. Retryable.
    #[error("connection failed: {0}")]
    Connection(String),
    /// The model or its runtime failed. Not retryable.
    #[error("model failure: {0}")]
    Model(String),
    /// The backend's worker is gone (thread died, shut down). Not retryable.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// A remote answered with a success status but its reply is not a valid
    /// decision for the request (not JSON, answers for other ids, labels that
    /// are not the question's, probabilities out of range or not summing to 1).
    /// Retryable: another replica may answer correctly.
    #[error("malformed reply: {0}")]
    BadReply(String),
}

impl BackendError {
    /// Whether the same call may succeed if tried again (timeouts, overload,
    /// not-ready, connection loss, HTTP 429 and 5xx).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Overloaded(_)
            | Self::Timeout(_)
            | Self::NotReady(_)
            | Self::Connection(_)
            | Self::BadReply(_) => true,
            Self::Upstream { status, .. } => *status == 429 || *status >= 500,
            Self::InvalidRequest(_) | Self::Model(_) | Self::Unavailable(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_classification_follows_status() {
        assert!(BackendError::Timeout(5).is_retryable());
        assert!(BackendError::Upstream {
            status: 503,
            body: String::new()
        }
        .is_retryable());
        assert!(BackendError::Upstream {
            status: 429,
            body: String::new()
        }
        .is_retryable());
        assert!(!BackendError::Upstream {
            status: 400,
            body: String::new()
        }
        .is_retryable());
        assert!(!BackendError::Model("x".into()).is_retryable());
        assert!(BackendError::BadReply("x".into()).is_retryable());
    }
}
