//! JevBench rows (one question per item) and their conversion to a schema.
//!
//! A JevBench line holds `id`, `tier`, `family`, `topic`, `state`, a `question`
//! (`type` `choice` | `noul` | `score`, `instructions`, optional `criteria`),
//! the allowed `labels` and the `expected` label. [`JevRow::schema`] turns it into
//! the one-question schema dgem decides: a choice's labels become its options
//! (described by `criteria[label]` when given), a yes/no question keeps its
//! `criteria` `{true, false}` descriptions, a score question's labels become its
//! ordered levels. The decision slot is named `decision`.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::dataset::Row;

/// Id of the decision slot in the converted schema.
pub const JEV_SLOT_ID: &str = "decision";

/// The question of a JevBench row.
#[derive(Debug, Clone, Deserialize)]
pub struct JevQuestion {
    /// `choice`, `noul` (aliases `boolean`, `bool`) or `score`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The question text.
    #[serde(default)]
    pub instructions: String,
    /// Choice: `{label: description}`; yes/no: `{"true": …, "false": …}`.
    #[serde(default)]
    pub criteria: Option<Value>,
}

/// One JevBench line.
#[derive(Debug, Clone, Deserialize)]
pub struct JevRow {
    /// Unique id.
    pub id: String,
    /// `easy`, `standard` or `hard`.
    #[serde(default)]
    pub tier: String,
    /// Item family (e.g. `intent`, `trap`).
    #[serde(default)]
    pub family: String,
    /// Topic.
    #[serde(default)]
    pub topic: String,
    /// The text the question is about.
    pub state: String,
    /// The question.
    pub question: JevQuestion,
    /// Allowed answers, in order.
    pub labels: Vec<String>,
    /// The correct label.
    pub expected: String,
}

impl Row for JevRow {
    fn id(&self) -> &str {
        &self.id
    }

    fn check(&self) -> Result<(), String> {
        if !matches!(
            self.question.kind.as_str(),
            "choice" | "noul" | "boolean" | "bool" | "score"
        ) {
            return Err(format!(
                "`question.type` must be one of [choice, noul, score]. Given: `{}`",
                self.question.kind
            ));
        }
        if !self.labels.contains(&self.expected) {
            return Err(format!(
                "`expected` must be one of `labels` {:?}. Given: `{}`",
                self.labels, self.expected
            ));
        }
        Ok(())
    }
}

impl JevRow {
    /// The one-question schema this row is decided with (see the module docs).
    pub fn schema(&self) -> Value {
        let q = &self.question;
        let mut question = Map::new();
        question.insert("id".into(), json!(JEV_SLOT_ID));
        question.insert("instructions".into(), json!(q.instructions));
        match q.kind.as_str() {
            "choice" => {
                let described = |label: &str| {
                    q.criteria
                        .as_ref()
                        .and_then(|c| c.get(label))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                let options: Vec<Value> = self
                    .labels
                    .iter()
                    .map(|l| match described(l) {
                        Some(d) => json!({"name": l, "description": d}),
                        None => json!(l),
                    })
                    .collect();
                question.insert("type".into(), json!("choice"));
                question.insert("options".into(), Value::Array(options));
            }
            "score" => {
                question.insert("type".into(), json!("score"));
                question.insert("levels".into(), json!(self.labels));
            }
            _ => {
                question.insert("type".into(), json!("noul"));
                if let Some(c) = q.criteria.as_ref().filter(|c| c.is_object()) {
                    question.insert("criteria".into(), c.clone());
                }
            }
        }
        json!({"questions": [Value::Object(question)]})
    }

    /// The state as a JSON string.
    pub fn state_value(&self) -> Value {
        json!(self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgem_core::schema::{QuestionKind, SchemaDefaults, ValidSchema};

    fn row(v: Value) -> JevRow {
        serde_json::from_value(v).expect("row")
    }

    #[test]
    fn every_type_converts_to_a_valid_schema() {
        let choice = row(
            json!({"id": "1", "state": "s", "labels": ["approve_all", "approve_some"],
            "expected": "approve_some",
            "question": {"type": "choice", "instructions": "Which?", "criteria": {"approve_all": "all of it"}}}),
        );
        let s =
            ValidSchema::from_value(&choice.schema(), &SchemaDefaults::default()).expect("valid");
        assert_eq!(s.questions[0].id, "decision");
        assert_eq!(s.questions[0].kind, QuestionKind::Choice);
        assert_eq!(
            s.questions[0].alternatives[0].description.as_deref(),
            Some("all of it")
        );
        assert_eq!(s.questions[0].alternatives[1].description, None);
        let noul = row(
            json!({"id": "2", "state": "s", "labels": ["yes", "no"], "expected": "no",
            "question": {"type": "noul", "criteria": {"true": "t", "false": "f"}}}),
        );
        let s = ValidSchema::from_value(&noul.schema(), &SchemaDefaults::default()).expect("valid");
        assert_eq!(s.questions[0].kind, QuestionKind::Boolean);
        assert_eq!(
            s.questions[0].alternatives[1].description.as_deref(),
            Some("f")
        );
        let score = row(
            json!({"id": "3", "state": "s", "labels": ["20", "21", "22"], "expected": "21",
            "question": {"type": "score", "criteria": null}}),
        );
        let s =
            ValidSchema::from_value(&score.schema(), &SchemaDefaults::default()).expect("valid");
        assert_eq!(s.questions[0].kind, QuestionKind::Score);
        assert_eq!(s.questions[0].alternatives.len(), 3);
        assert!(score.check().is_ok());
    }

    #[test]
    fn check_names_the_field() {
        let bad = row(
            json!({"id": "1", "state": "s", "labels": ["a", "b"], "expected": "c",
            "question": {"type": "choice"}}),
        );
        assert!(bad
            .check()
            .expect_err("bad")
            .contains("`expected` must be one of"));
        let bad = row(
            json!({"id": "1", "state": "s", "labels": ["a", "b"], "expected": "a",
            "question": {"type": "banana"}}),
        );
        assert!(bad.check().expect_err("bad").contains("Given: `banana`"));
    }
}
