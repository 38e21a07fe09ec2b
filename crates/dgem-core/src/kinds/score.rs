//! `score`: ordered levels, lowest first; the answer carries the expected
//! position (and value, for numeric levels).

use serde_json::{json, Map, Value};

use super::{AdhocAt, Kind, Names};
use crate::envelope::AnswerOut;
use crate::error::AdhocError;
use crate::error::SchemaError;
use crate::json::shown;
use crate::readout::score_expectation;
use crate::schema::validate::list_field;
use crate::schema::validate::text::text_of;
use crate::schema::{Alternative, Question};

/// The ordered-levels type.
pub(crate) struct Score;

impl Kind for Score {
    fn names(&self) -> Names {
        Names {
            canonical: "score",
            wire: "score",
            aliases: &["score"],
            summary: "one of `levels`, lowest first",
        }
    }

    fn alternatives(
        &self,
        q: &Map<String, Value>,
        name: &str,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(Vec<Alternative>, &'static str), SchemaError> {
        let items = list_field(q, "levels", name, at)?;
        let alts = items
            .iter()
            .map(|l| Alternative {
                name: text_of(l).unwrap_or_else(|| "None".into()),
                description: None,
            })
            .collect();
        Ok((alts, ".levels"))
    }

    fn wire(&self, q: &Question, m: &mut Map<String, Value>) {
        let levels: Vec<&str> = q.alternatives.iter().map(|a| a.name.as_str()).collect();
        m.insert("levels".into(), json!(levels));
    }

    fn adhoc_alternative_keys(&self) -> &'static [&'static str] {
        &["levels", "criteria", "options"]
    }

    fn adhoc(
        &self,
        at: &AdhocAt<'_>,
        q: &Map<String, Value>,
        criteria: Option<&Value>,
        out: &mut Map<String, Value>,
    ) -> Result<(), AdhocError> {
        let source = q
            .get("levels")
            .filter(|v| !v.is_null())
            .or(criteria)
            .or_else(|| q.get("options").filter(|v| !v.is_null()));
        let Some(Value::Array(levels)) = source else {
            return Err(AdhocError {
                field: format!("{}.levels", at.field),
                message: format!(
                    "question '{}': score criteria must be an ordered list of levels (`levels`, lowest first). Given: {}",
                    at.id,
                    shown(source.unwrap_or(&Value::Null))
                ),
            });
        };
        out.insert("levels".into(), Value::Array(levels.clone()));
        Ok(())
    }

    fn chat_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>) {
        // A Stage-2 level is one level, not a distribution: its score is
        // that level's 1-based position (and value), not Stage 1's
        // expectation, which would point at another level.
        let agg = &a.aggregate;
        let score = if a.resolved.is_some() {
            (agg.top + 1) as f64
        } else {
            score_expectation(&agg.mean)
        };
        m.insert("score".into(), json!(score));
        m.insert("level".into(), json!(a.answer_name()));
        if let Some(value) = a.level_value() {
            m.insert("value".into(), json!(value));
        }
    }

    fn answer_key(&self) -> Option<&'static str> {
        Some("level")
    }

    /// `/v1/systemone` keys a score's probabilities by 0-based level index.
    fn jev_keys_by_index(&self) -> bool {
        true
    }

    fn jev_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>) {
        let agg = &a.aggregate;
        m.insert("score".into(), json!(score_expectation(&agg.mean) - 1.0));
        // The expected level value, as the chat route writes it (numeric levels only).
        if let Some(value) = a.level_value() {
            m.insert("value".into(), json!(value));
        }
        let legend: Map<String, Value> = a
            .question
            .alternatives
            .iter()
            .enumerate()
            .map(|(i, x)| (i.to_string(), json!(x.name)))
            .collect();
        m.insert("legend".into(), Value::Object(legend));
        let probs: Map<String, Value> = agg
            .mean
            .iter()
            .enumerate()
            .map(|(i, p)| (i.to_string(), json!(p)))
            .collect();
        m.insert("probabilities".into(), Value::Object(probs));
    }
}
