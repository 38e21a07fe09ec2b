//! [`RemoteDecider`]: a [`Decider`] over the gateway's routed backends, so the
//! MCP server (and anything else that takes `Arc<dyn Decider>`) can run over the
//! gateway. The validated schema is written back to its wire form, routed like
//! any decision, and the reply's probabilities become a [`Decision`] again.

use std::sync::Arc;

use async_trait::async_trait;
use dgem_backend::{Attention, BackendError, BackendInfo, Health};
use dgem_core::envelope::{AnswerOut, Diagnostics, SamplesDiagnostics, Timing};
use dgem_core::labels::LabelMode;
use dgem_core::readout::aggregate;
use dgem_core::schema::{QuestionKind, SamplePolicy, ValidSchema};
use dgem_engine::{DecideRequest, Decider, Decision, EngineError};
use futures_util::FutureExt as _;
use indexmap::IndexMap;
use serde_json::{json, Map, Value};

use crate::error::GatewayError;
use crate::routing::Gateway;
use crate::target::DecideCall;

/// A decider that routes every decision through a [`Gateway`].
#[derive(Debug, Clone)]
pub struct RemoteDecider {
    gateway: Arc<Gateway>,
}

impl RemoteDecider {
    /// Decide through `gateway` with its default mode.
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self { gateway }
    }
}

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
                    m.insert("type".into(), json!("boolean"));
                    let yes = q.alternatives.first().and_then(|a| a.description.clone());
                    let no = q.alternatives.get(1).and_then(|a| a.description.clone());
                    if yes.is_some() || no.is_some() {
                        m.insert("criteria".into(), json!({"true": yes, "false": no}));
                    }
                }
                QuestionKind::Choice => {
                    m.insert("type".into(), json!("choice"));
                    let opts: Vec<Value> = q
                        .alternatives
                        .iter()
                        .map(|a| json!({"name": a.name, "description": a.description}))
                        .collect();
                    m.insert("options".into(), Value::Array(opts));
                }
                QuestionKind::Score => {
                    m.insert("type".into(), json!("score"));
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

/// Rebuild a [`Decision`] from an envelope, in the schema's question order.
fn decision(schema: &ValidSchema, envelope: &Value) -> Decision {
    let answers_in = envelope.get("answers").and_then(Value::as_object);
    let mut answers = IndexMap::new();
    for q in schema.asked() {
        let a = answers_in
            .and_then(|m| m.get(&q.id))
            .filter(|a| !a.is_null());
        let out = a.map(|a| {
            let probs = a.get("probabilities").and_then(Value::as_object);
            let dist: Vec<f64> = q
                .alternatives
                .iter()
                .map(|alt| {
                    probs
                        .and_then(|p| p.get(&alt.name))
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0)
                })
                .collect();
            AnswerOut {
                question: q.clone(),
                labels: q.alternatives.iter().map(|alt| alt.name.clone()).collect(),
                aggregate: aggregate(&[dist]),
            }
        });
        answers.insert(q.id.clone(), out);
    }
    let d = envelope.get("diagnostics").cloned().unwrap_or_default();
    let num = |k: &str| d.pointer(k).and_then(Value::as_f64).unwrap_or(0.0);
    let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let diagnostics = Diagnostics {
        steps: schema.steps,
        layout: schema.layout.as_str().into(),
        isolated: Vec::new(),
        stages: Vec::new(),
        skipped: IndexMap::new(),
        chunks: Vec::new(),
        chunk_prompt: text("chunk_prompt"),
        sequential: schema.sequential,
        conditioning: None,
        thought: None,
        samples: SamplesDiagnostics {
            n: d.pointer("/samples/n")
                .and_then(Value::as_u64)
                .map_or(1, |n| n as u32),
            tops: Vec::new(),
            policy: d.pointer("/samples/policy").cloned().unwrap_or(Value::Null),
        },
        timing: Timing {
            total_ms: num("/timing/total_ms"),
            reads: d
                .pointer("/timing/reads")
                .and_then(Value::as_u64)
                .map_or(0, |n| n as u32),
            queue_ms: num("/timing/queue_ms"),
            forward_ms: num("/timing/forward_ms"),
            calibration_ms: num("/timing/calibration_ms"),
        },
        prompt_tokens: d
            .get("prompt_tokens")
            .and_then(Value::as_u64)
            .map(|n| n as usize),
        cached_tokens: 0,
        state_tokens: 0,
        questions: IndexMap::new(),
        engine: text("engine"),
        constrained: d
            .get("constrained")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        model: text("model"),
        model_sha256: d
            .get("model_sha256")
            .and_then(Value::as_str)
            .map(str::to_string),
        label_mode: text("label_mode"),
        slot_reading: text("slot_reading"),
        calibration: None,
        note: d.get("note").and_then(Value::as_str).map(str::to_string),
        brackets: Default::default(),
    };
    Decision {
        answers,
        diagnostics,
    }
}

#[async_trait]
impl Decider for RemoteDecider {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            engine: "dgem-gateway".into(),
            model_id: format!("gateway:{}", self.gateway.default_backend()),
            model_sha256: None,
            attention: Attention::Causal,
            label_mode: LabelMode::Words,
            max_tokens: 0,
            supports_images: false,
        }
    }

    async fn health(&self) -> Health {
        let rows = self.gateway.health().await;
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
            .gateway
            .route(None, |t| {
                let call = call.clone();
                async move { t.decide(&call).await }.boxed()
            })
            .await
            .map_err(to_engine_error)?;
        Ok(decision(&req.schema, &routed.value))
    }
}
