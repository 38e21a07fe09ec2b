//! The [`Gateway`] is itself a [`Decider`]: a composite over its routed
//! backends, so the MCP server (and anything else that takes `Arc<dyn Decider>`)
//! runs over the gateway like over one model. The validated schema is written
//! back to its wire form, routed like any decision (modes, failover, breakers,
//! cold-start holds), and the reply becomes a [`Decision`] again through
//! [`Decision::from_envelope`] (every diagnostics key kept, the answers checked
//! against the request).

use std::sync::Arc;

use async_trait::async_trait;
use dgem_backend::{Attention, BackendError, BackendInfo, Health};
use dgem_core::labels::LabelMode;
use dgem_core::schema::{QuestionKind, SamplePolicy, ValidSchema};
use dgem_engine::{DecideRequest, Decider, Decision, EngineError};
use futures_util::FutureExt as _;
use serde_json::{json, Map, Value};

use crate::error::GatewayError;
use crate::routing::Gateway;
use crate::target::DecideCall;

/// The wire form (serving.md §3.1) of a validated schema.
pub fn wire_schema(s: &ValidSchema) -> Value {
    let questions: Vec<Value> = s
        .questions
        .iter()
        .map(|q| {
            let mut m = Map::new();
            m.insert("id".into(), json!(q.id));
            m.insert("instructions".into(), json!(q.instructions));
            match q.kind {
                QuestionKind::Boolean => {
                    m.insert("type".into(), json!(q.kind.as_str()));
                    let yes = q.alternatives.first().and_then(|a| a.description.clone());
                    let no = q.alternatives.get(1).and_then(|a| a.description.clone());
                    if yes.is_some() || no.is_some() {
                        m.insert("criteria".into(), json!({"true": yes, "false": no}));
                    }
                }
                QuestionKind::Choice => {
                    m.insert("type".into(), json!(q.kind.as_str()));
                    let opts: Vec<Value> = q
                        .alternatives
                        .iter()
                        .map(|a| json!({"name": a.name, "description": a.description}))
                        .collect();
                    m.insert("options".into(), Value::Array(opts));
                }
                QuestionKind::Score => {
                    m.insert("type".into(), json!(q.kind.as_str()));
                    let levels: Vec<&str> =
                        q.alternatives.iter().map(|a| a.name.as_str()).collect();
                    m.insert("levels".into(), json!(levels));
                }
            }
            if !q.depends_on.is_empty() {
                m.insert("depends_on".into(), json!(q.depends_on));
            }
            if !q.ask_if.is_empty() {
                m.insert("ask_if".into(), json!(q.ask_if));
            }
            if let Some(a) = q.alone {
                m.insert("alone".into(), json!(a));
            }
            Value::Object(m)
        })
        .collect();
    let mut out = Map::new();
    if let Some(i) = &s.instructions {
        out.insert("instructions".into(), json!(i));
    }
    out.insert("questions".into(), Value::Array(questions));
    match s.samples {
        SamplePolicy::Fixed { n } => out.insert("samples".into(), json!(n)),
        SamplePolicy::Auto { max, threshold } => {
            out.insert("auto_max".into(), json!(max));
            out.insert("auto_threshold".into(), json!(threshold));
            out.insert("samples".into(), json!("auto"))
        }
    };
    out.insert("steps".into(), json!(s.steps));
    out.insert("think".into(), json!(s.think));
    if let Some(ask) = &s.ask {
        out.insert("ask".into(), json!(ask));
    }
    if let Some(rows) = s.chunk_rows {
        out.insert("chunk_rows".into(), json!(rows));
    }
    out.insert("chunk_prompt".into(), json!(s.chunk_prompt));
    out.insert("sequential".into(), json!(s.sequential));
    out.insert("layout".into(), json!(s.layout.as_str()));
    Value::Object(out)
}

fn to_engine_error(e: GatewayError) -> EngineError {
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
            engine: "dgem-gateway".into(),
            model_id: format!("gateway:{}", self.default_backend()),
            model_sha256: None,
            attention: Attention::Causal,
            label_mode: LabelMode::Words,
            max_tokens: 0,
            supports_images: false,
        }
    }

    async fn health(&self) -> Health {
        let rows = Gateway::health(self).await;
        if rows.iter().any(|r| r.health.ready) {
            Health::Ready
        } else if let Some(w) = rows.iter().find(|r| r.health.is_warming()) {
            Health::Starting {
                phase: w.health.phase.clone(),
            }
        } else {
            Health::Failed {
                reason: "no backend is reachable".into(),
            }
        }
    }

    async fn decide(&self, req: DecideRequest) -> Result<Decision, EngineError> {
        let call = Arc::new(DecideCall {
            schema: wire_schema(&req.schema),
            state: req.state,
            seed: req.seed,
        });
        let routed = self
            .route(None, |t| {
                let call = call.clone();
                async move { t.decide(&call).await }.boxed()
            })
            .await
            .map_err(to_engine_error)?;
        // The reply is read back through the seam's one envelope reader, which
        // checks it against the request (ids, alternatives, ranges, sums).
        Decision::from_envelope(&req.schema, &routed.value)
    }
}
