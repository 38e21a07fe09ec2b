//! Errors of the cascade.
//!
//! Two kinds: [`CascadeError`] is a caller mistake found before anything is
//! sent (a bad request key, an unknown provider spec); [`Stage2Error`] is a
//! failure of one Stage-2 call. [`crate::cascade`] never returns the latter:
//! it lands in [`crate::CascadeSummary::error`] and the Stage-1 answers stay.
//! Every message names the field, what is allowed and what was received, and
//! none carries an API key or a bearer token.

use thiserror::Error;

/// A cascade setting that cannot be used, found before any call is made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CascadeError {
    /// A request key or configuration value outside its allowed values.
    #[error("`{field}` must be {allowed}. Given: {got}")]
    Invalid {
        /// The key or setting, e.g. `cascade_mode`.
        field: String,
        /// What is accepted, in words (`one of [off, entropy, on_miss]`).
        allowed: String,
        /// The value received, as written (JSON for request keys).
        got: String,
    },
}

impl CascadeError {
    /// A [`CascadeError::Invalid`] from its three parts.
    pub fn invalid(
        field: impl Into<String>,
        allowed: impl Into<String>,
        got: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            field: field.into(),
            allowed: allowed.into(),
            got: got.into(),
        }
    }
}

/// One Stage-2 call that failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Stage2Error {
    /// The provider is not usable as configured (no model, no project, no token).
    #[error("{provider}: `{field}` must be {allowed}; got {got}")]
    Config {
        /// Provider name (`openai`, `vertex`).
        provider: String,
        /// The setting at fault.
        field: String,
        /// What it must be.
        allowed: String,
        /// What it was.
        got: String,
    },
    /// The request never got an HTTP answer (connect, TLS, timeout).
    #[error("{provider}: request to {url} failed: {message}")]
    Transport {
        /// Provider name.
        provider: String,
        /// The URL posted to (never holds a key).
        url: String,
        /// The client's description of the failure.
        message: String,
    },
    /// The server answered with a non-2xx status.
    #[error("{provider}: model {model} answered HTTP {status}: {body}")]
    Status {
        /// Provider name.
        provider: String,
        /// The model asked.
        model: String,
        /// HTTP status code.
        status: u16,
        /// The start of the response body (at most [`crate::provider::BODY_EXCERPT_CHARS`] characters).
        body: String,
    },
    /// The server answered 2xx but not with the expected JSON.
    #[error("{provider}: `{field}` of the reply must be {allowed}; got {got}")]
    Reply {
        /// Provider name.
        provider: String,
        /// Where in the reply (`choices[0].message.content`).
        field: String,
        /// What was expected there.
        allowed: String,
        /// What came (bounded excerpt).
        got: String,
    },
}

impl Stage2Error {
    /// Whether trying another model may help: HTTP 404 (model not served
    /// here), 429 (quota) or any 5xx. Rule of the original cascade's Vertex
    /// fallback.
    pub fn is_model_retryable(&self) -> bool {
        matches!(self, Self::Status { status, .. } if *status == 404 || *status == 429 || *status >= 500)
    }
}
