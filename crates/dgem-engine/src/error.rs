//! Engine errors.

use dgem_backend::BackendError;
use dgem_core::{CoreError, SchemaError};
use thiserror::Error;

/// Why a decision could not be made.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum EngineError {
    /// The schema or state cannot be read by this model (user error).
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Tokenization or another core step failed.
    #[error(transparent)]
    Core(CoreError),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The backend cannot be driven by this engine path.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl From<CoreError> for EngineError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Schema(s) => Self::Schema(s),
            other => Self::Core(other),
        }
    }
}

impl EngineError {
    /// Whether the caller's input is at fault (exit code 1, HTTP 4xx) rather than
    /// the engine or model (exit code 2, HTTP 5xx).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Self::Schema(_) | Self::Backend(BackendError::InvalidRequest(_))
        )
    }
}
