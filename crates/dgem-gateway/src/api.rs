//! The gateway as the [`Backends`] of the server's `/api/*` routes: a
//! decision is routed with failover, breakers and cold-start holds
//! ([`Gateway::route`]), and its failure is the gateway's error in the
//! server's one table ([`GatewayError::to_api`]).

use async_trait::async_trait;
use dgem_engine::DecideRequest;
use dgem_server::api::{Backends, RouteFacts, Routed};
use dgem_server::ApiError;
use futures_util::FutureExt as _;
use serde_json::Value;

use crate::replica::decide_error;
use crate::routing::Gateway;

#[async_trait]
impl Backends for Gateway {
    fn default_backend(&self) -> String {
        Gateway::default_backend(self).to_string()
    }

    fn available(&self) -> Vec<String> {
        Gateway::available(self).to_vec()
    }

    async fn health(&self) -> Vec<Value> {
        Gateway::health(self)
            .await
            .iter()
            .map(|row| serde_json::to_value(row).unwrap_or(Value::Null))
            .collect()
    }

    async fn decide_on(
        &self,
        requested: Option<&str>,
        request: DecideRequest,
    ) -> Result<Routed, ApiError> {
        let routed = self
            .route(requested, |replica| {
                let request = request.clone();
                async move { replica.decider.decide(request).await.map_err(decide_error) }.boxed()
            })
            .await
            .map_err(|e| e.into_api())?;
        Ok(Routed {
            decision: routed.value,
            facts: RouteFacts {
                backend: routed.backend,
                upstream_url: routed.upstream_url,
                model: routed.model,
                attempts: routed.attempts,
                forward_ms: routed.forward_ms,
                total_ms: routed.total_ms,
                gate_ms: 0.0,
            },
        })
    }
}
