//! Fixtures shared by the unit tests.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use dgem_backend::Decision;
use dgem_core::envelope::AnswerOut;
use dgem_core::readout::aggregate;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use indexmap::IndexMap;
use serde_json::{json, Map, Value};

use crate::error::Stage2Error;
use crate::provider::{Stage2, Stage2Reply, Stage2Request};

/// A policy with one question of each type.
pub(crate) fn schema() -> ValidSchema {
    ValidSchema::from_value(
        &json!({
            "instructions": "Route support tickets.",
            "questions": [
                {"id": "urgent", "type": "noul", "instructions": "Is it urgent?",
                 "criteria": {"true": "an outage", "false": "anything else"}},
                {"id": "team", "type": "choice", "instructions": "Which team?",
                 "options": [{"name": "billing", "description": "money"}, "engineering", "sales"]},
                {"id": "sev", "type": "score", "instructions": "How severe?",
                 "levels": ["low", "mid", "high"]}
            ]
        }),
        &SchemaDefaults::default(),
    )
    .expect("valid schema")
}

/// The answer to `id` read as `dist`.
pub(crate) fn answer(s: &ValidSchema, id: &str, dist: Vec<f64>) -> AnswerOut {
    let q = s.question(id).expect("question").clone();
    let labels = q.alternatives.iter().map(|a| a.name.clone()).collect();
    AnswerOut::new(q, labels, aggregate(&[dist]))
}

/// A decision over `s` with these answers (`None` = skipped).
pub(crate) fn decision(s: &ValidSchema, answers: Vec<(&str, Option<Vec<f64>>)>) -> Decision {
    let answers: IndexMap<String, Option<AnswerOut>> = answers
        .into_iter()
        .map(|(id, d)| (id.to_string(), d.map(|d| answer(s, id, d))))
        .collect();
    Decision {
        answers,
        diagnostics: Default::default(),
    }
}

/// A provider that answers with a fixed reply after an optional delay and
/// records what it was asked.
#[derive(Debug)]
pub(crate) struct Canned {
    pub reply: Result<Stage2Reply, Stage2Error>,
    pub delay: Duration,
    pub seen: Mutex<Vec<Stage2Request>>,
}

impl Canned {
    pub(crate) fn answering(model: &str, slots: Value) -> Self {
        let slots: Map<String, Value> = slots.as_object().expect("object").clone();
        Self {
            reply: Ok(Stage2Reply {
                model: model.into(),
                slots,
            }),
            delay: Duration::ZERO,
            seen: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl Stage2 for Canned {
    fn name(&self) -> &str {
        "canned"
    }

    async fn resolve(&self, req: &Stage2Request) -> Result<Stage2Reply, Stage2Error> {
        self.seen.lock().expect("lock").push(req.clone());
        tokio::time::sleep(self.delay).await;
        self.reply.clone()
    }
}
