//! The [`Gateway`] is itself a [`Decider`]: a composite over its routed
//! replicas, so the MCP server (and anything else that takes
//! `Arc<dyn Decider>`) runs over the gateway like over one model. A decision is
//! routed like any other (modes, failover, breakers, cold-start holds) and comes
//! back from whichever replica answered, as that replica's [`Decision`]: the
//! embedded engine's own, or a remote's reply checked by
//! [`Decision::from_envelope`].

use async_trait::async_trait;
use dgem_backend::{Attention, BackendError, BackendInfo, Health};
use dgem_core::labels::LabelMode;
use dgem_engine::{DecideError, DecideRequest, Decider, Decision};
use futures_util::FutureExt as _;

use crate::error::GatewayError;
use crate::replica::decide_error;
use crate::routing::Gateway;

fn to_decide_error(e: GatewayError) -> DecideError {
    match e {
        GatewayError::Rejected { error, .. } | GatewayError::Upstream { error, .. } => error.into(),
        GatewayError::WakeupTimeout { .. } => BackendError::NotReady(e.to_string()).into(),
        other => BackendError::Unavailable(other.to_string()).into(),
    }
}

#[async_trait]
impl Decider for Gateway {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            runtime: "dgem-gateway".into(),
            model_id: format!("gateway:{}", self.default_backend()),
            model_sha256: None,
            attention: Attention::Causal,
            label_mode: LabelMode::Words,
            max_tokens: 0,
            supports_images: false,
            canvas: None,
            chat_turns: dgem_core::prompt::ChatTurns::gemma(),
        }
    }

    /// Ready when any replica is; else starting when one is warming; else failed.
    async fn health(&self) -> Health {
        let rows = Gateway::health(self).await;
        if rows.iter().any(|r| r.health.is_ready()) {
            Health::Ready
        } else if let Some(w) = rows.iter().find(|r| r.health.is_warming()) {
            w.health.clone()
        } else {
            Health::failed("no backend is reachable")
        }
    }

    async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError> {
        let routed = self
            .route(None, |replica| {
                let req = req.clone();
                async move { replica.decider.decide(req).await.map_err(decide_error) }.boxed()
            })
            .await
            .map_err(to_decide_error)?;
        Ok(routed.value)
    }
}
