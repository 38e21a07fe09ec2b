//! The decision-level seam: a whole policy and state in, a [`Decision`] out.
//!
//! [`Backend`](dgem_backend::Backend) is the token-level seam the embedded
//! engine drives. Some models cannot be driven token by token from here: vLLM
//! serving DiffusionGemma takes chat messages plus a seeded canvas (serving.md
//! §5) and a remote dgem takes the schema itself. Everything that makes whole
//! decisions — the embedded [`Engine`], the vLLM reader, a remote dgem client —
//! implements [`Decider`], and the server, MCP and gateway see only
//! `Arc<dyn Decider>`.

use async_trait::async_trait;
use dgem_backend::{BackendInfo, Health};

use crate::{DecideRequest, Decision, Engine, EngineError};

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

#[async_trait]
impl Decider for Engine {
    fn info(&self) -> BackendInfo {
        let mut info = self.backend().info().clone();
        info.label_mode = self.label_mode();
        info
    }

    fn calibrates(&self) -> bool {
        Engine::calibrates(self)
    }

    async fn health(&self) -> Health {
        self.backend().health().await
    }

    async fn decide(&self, req: DecideRequest) -> Result<Decision, EngineError> {
        Engine::decide(self, req).await
    }
}
