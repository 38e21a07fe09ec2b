//! The decision-level seam: a whole policy and state in, a [`Decision`] out.
//!
//! [`Backend`](crate::Backend) is the token-level seam the embedded engine
//! drives. Some models cannot be driven token by token from here: vLLM serving
//! DiffusionGemma takes chat messages plus a seeded canvas, and a remote dgem
//! takes the schema itself. Everything that makes whole decisions — the embedded
//! engine (`dgem-engine`), the vLLM reader (`dgem-backend-vllm`), a remote dgem
//! client — implements [`Decider`], and the server, MCP and gateway see only
//! `Arc<dyn Decider>`. The seam lives here, below every implementation, so no
//! reader depends on another.

use async_trait::async_trait;
use dgem_core::envelope::{AnswerOut, Diagnostics};
use dgem_core::schema::ValidSchema;
use dgem_core::{CoreError, SchemaError};
use indexmap::IndexMap;
use serde_json::Value;
use thiserror::Error;

use crate::{BackendError, BackendInfo, Health};

/// One decision to make.
#[derive(Debug, Clone)]
pub struct DecideRequest {
    /// The validated policy.
    pub schema: ValidSchema,
    /// The state: a string, or any JSON value (written Python-style into the prompt).
    pub state: Value,
    /// Base seed (serving default 42); read `r` uses `seed + 7919·r`.
    pub seed: i64,
}

/// A finished decision.
#[derive(Debug, Clone)]
pub struct Decision {
    /// One entry per asked question in schema order; `None` = skipped by `ask_if`.
    pub answers: IndexMap<String, Option<AnswerOut>>,
    /// Decision-level diagnostics.
    pub diagnostics: Diagnostics,
}

impl Decision {
    /// The `{answers, diagnostics}` envelope JSON (serving.md §8.1–8.2).
    pub fn envelope(&self) -> Value {
        dgem_core::envelope::envelope(&self.answers, &self.diagnostics)
    }
}

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

/// Something that makes whole decisions.
///
/// Implementations must be cheap to share behind an `Arc`, bounded (a full
/// queue is an error, not an unbounded wait) and must not block an async worker.
#[async_trait]
pub trait Decider: Send + Sync + std::fmt::Debug {
    /// Facts about the model behind this decider. `label_mode` is the mode in
    /// effect for decisions, not only the backend's default.
    fn info(&self) -> BackendInfo;

    /// Whether contextual calibration is applied to reads (Zhao et al. 2021).
    fn calibrates(&self) -> bool {
        false
    }

    /// Current health of the model behind this decider.
    async fn health(&self) -> Health {
        Health::Ready
    }

    /// Make one decision.
    ///
    /// # Errors
    /// [`EngineError`]: `Schema` for input the caller must fix, `Backend` when
    /// the model or upstream fails (see `BackendError::is_retryable`).
    async fn decide(&self, req: DecideRequest) -> Result<Decision, EngineError>;
}
