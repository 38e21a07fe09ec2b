//! JevBench rows (one question per item) and their conversion to a schema.
//!
//! A JevBench line holds `id`, `tier`, `family`, `topic`, `state`, a `question`
//! (`type` `choice` | `noul` | `score`, `instructions`, optional `criteria`),
//! the allowed `labels` and the `expected` label. [`JevRow::schema`] turns it into
//! the one-question schema dgem decides: a choice's labels become its options
//! (described by `criteria[label]` when given), a yes/no question keeps its
//! `criteria` `{true, false}` descriptions, a score question's labels become its
//! ordered levels. The decision slot is named `decision`.
//!
//! Forms other than JevBench's own are mapped, not dropped: a `state` that is a
//! JSON object is the state the engine receives (as with `dgem decide`), a
//! score row's integer `expected` is a level ([`crate::mapping::score_level`]:
//! a level value when every level is a number, else a 1-based position), and a
//! yes/no row's boolean `expected` is its `yes`/`no` label. Anything else is
//! refused with a reason ([`crate::dataset::Refused`]).

use dgem_core::schema::{SchemaDefaults, ValidSchema};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::normalize_answer;
use crate::dataset::Row;
use crate::mapping::{self, shown};

/// Id of the decision slot in the converted schema.
pub const JEV_SLOT_ID: &str = "decision";

/// The question types a JevBench row may have (and aliases of `noul`).
const KINDS: [&str; 5] = ["choice", "noul", "boolean", "bool", "score"];

fn check_kind(kind: &str) -> Result<(), String> {
    if KINDS.contains(&kind) {
        return Ok(());
    }
    Err(format!(
        "`question.type` must be one of [choice, noul, score]. Given: `{kind}`"
    ))
}

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
#[serde(try_from = "RawJevRow")]
pub struct JevRow {
    /// Unique id.
    pub id: String,
    /// `easy`, `standard` or `hard`.
    pub tier: String,
    /// Item family (e.g. `intent`, `trap`).
    pub family: String,
    /// Topic.
    pub topic: String,
    /// What the question is about, as the engine receives it: text, or a JSON
    /// object (see [`crate::mapping::state`]).
    pub state: Value,
    /// The question.
    pub question: JevQuestion,
    /// Allowed answers, in order.
    pub labels: Vec<String>,
    /// The correct label (mapped from an integer or boolean as the module docs say).
    pub expected: String,
}

/// A JevBench line as written, before `expected` is mapped to a label.
#[derive(Deserialize)]
struct RawJevRow {
    id: String,
    #[serde(default)]
    tier: String,
    #[serde(default)]
    family: String,
    #[serde(default)]
    topic: String,
    #[serde(deserialize_with = "mapping::de_state")]
    state: Value,
    question: JevQuestion,
    labels: Vec<String>,
    expected: Value,
}

/// The label `expected` names: a string as is (checked against `labels` by
/// [`Row::check`]), a score row's integer as its level, a yes/no row's boolean
/// as its `yes`/`no` label.
fn expected_label(kind: &str, labels: &[String], expected: Value) -> Result<String, String> {
    match expected {
        Value::String(s) => Ok(s),
        Value::Number(_) if kind == "score" => mapping::score_level(labels, &expected),
        Value::Bool(b) if matches!(kind, "noul" | "boolean" | "bool") => {
            let want = normalize_answer(if b { "true" } else { "false" });
            labels
                .iter()
                .find(|l| normalize_answer(l) == want)
                .cloned()
                .ok_or_else(|| {
                    format!("`expected` must be one of `labels` {labels:?}. Given: `{b}`")
                })
        }
        other => {
            check_kind(kind)?;
            let also = match kind {
                "score" => ", or an integer level",
                "choice" => "",
                _ => ", or a boolean",
            };
            Err(format!(
                "`expected` must be one of `labels` {labels:?}{also}. Given: `{}`",
                shown(&other)
            ))
        }
    }
}

impl TryFrom<RawJevRow> for JevRow {
    type Error = String;

    fn try_from(raw: RawJevRow) -> Result<Self, Self::Error> {
        let expected = expected_label(&raw.question.kind, &raw.labels, raw.expected)?;
        Ok(Self {
            id: raw.id,
            tier: raw.tier,
            family: raw.family,
            topic: raw.topic,
            state: raw.state,
            question: raw.question,
            labels: raw.labels,
            expected,
        })
    }
}

impl Row for JevRow {
    fn id(&self) -> &str {
        &self.id
    }

    /// The question type, `expected` among `labels`, and a valid one-question
    /// schema (so a row the engine would reject is refused before the run).
    fn check(&self) -> Result<(), String> {
        check_kind(&self.question.kind)?;
        if !self.labels.contains(&self.expected) {
            return Err(format!(
                "`expected` must be one of `labels` {:?}. Given: `{}`",
                self.labels, self.expected
            ));
        }
        ValidSchema::from_value(&self.schema(), &SchemaDefaults::default())
            .map(|_| ())
            .map_err(|e| format!("`question` and `labels` do not make a valid question: {e}"))
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

    /// The state the engine receives: the row's text, or its JSON object.
    pub fn state_value(&self) -> Value {
        self.state.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::map_row;
    use dgem_core::schema::QuestionKind;

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

    fn score(labels: Value, expected: Value) -> Value {
        json!({"id": "s1", "state": "s", "labels": labels, "expected": expected,
               "question": {"type": "score", "instructions": "How much?"}})
    }

    /// Regression: a score row whose `expected` was an integer was skipped
    /// (`invalid type: integer`); it is now its level.
    #[test]
    fn integer_score_expected_is_mapped_to_its_level() {
        let ages = map_row::<JevRow>(score(json!(["20", "21", "22", "23", "24"]), json!(22)))
            .expect("a level value");
        assert_eq!(ages.expected, "22");
        let sev = map_row::<JevRow>(score(
            json!(["none", "low", "medium", "high", "critical"]),
            json!(2),
        ))
        .expect("a 1-based position");
        assert_eq!(sev.expected, "low");
        let e = map_row::<JevRow>(score(json!(["20", "21", "22"]), json!(3)))
            .expect_err("3 is no level value");
        assert_eq!(
            e,
            "`expected` must be one of the levels [\"20\", \"21\", \"22\"] (an integer is a level value, since every level is a number). Given: `3`"
        );
        // An integer is no choice label.
        let choice = json!({"id": "c1", "state": "s", "labels": ["a", "b"], "expected": 1,
                            "question": {"type": "choice"}});
        let e = map_row::<JevRow>(choice).expect_err("refused");
        assert_eq!(
            e,
            "`expected` must be one of `labels` [\"a\", \"b\"]. Given: `1`"
        );
    }

    /// Regression: a row whose `state` was a JSON object was skipped
    /// (`invalid type: map, expected a string`); the engine now receives the object.
    #[test]
    fn object_state_is_the_state_the_engine_receives() {
        let r = map_row::<JevRow>(
            json!({"id": "o1", "state": {"ticket": "refund", "plan": "pro"},
            "labels": ["yes", "no"], "expected": true, "question": {"type": "noul"}}),
        )
        .expect("mapped");
        assert_eq!(r.state_value(), json!({"ticket": "refund", "plan": "pro"}));
        assert_eq!(
            dgem_core::prompt::state_text(&r.state_value()),
            "{\"ticket\": \"refund\", \"plan\": \"pro\"}"
        );
        assert_eq!(r.expected, "yes", "a boolean names the yes/no label");
        let e = map_row::<JevRow>(json!({"id": "o2", "state": [1, 2],
            "labels": ["yes", "no"], "expected": "no", "question": {"type": "noul"}}))
        .expect_err("a list is no state");
        assert_eq!(
            e,
            "`state`: must be a string or a JSON object. Given: `[1,2]`"
        );
    }

    #[test]
    fn a_row_that_makes_no_valid_question_is_refused() {
        let e = map_row::<JevRow>(score(json!(["a", "a"]), json!("a"))).expect_err("refused");
        assert!(
            e.starts_with("`question` and `labels` do not make a valid question:"),
            "{e}"
        );
    }
}
