//! The embedded [`Engine`] behind the decision-level seam [`Decider`] (which
//! lives in `dgem-backend`).

use async_trait::async_trait;
use dgem_backend::{BackendInfo, Decider, Health};

use crate::{DecideError, DecideRequest, Decision, Engine};

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

    async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError> {
        Engine::decide(self, req).await
    }
}
