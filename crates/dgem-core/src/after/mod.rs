//! What happens to answers after the read: post-hoc temperature, then
//! abstention.
//!
//! The order is the original client's: Stage 1 reads the slots, the cascade
//! (crate `dgem-cascade`) may write Stage-2 answers over hesitant ones, then
//! [`apply`] scales every Stage-1 answer by its type's temperature (answers a
//! Stage-2 model gave are left as it gave them) and withholds the answers an
//! abstention rule catches. The cascade gates on the raw, unscaled entropy.
//!
//! Settings come from the rendered policy (`temperature`, `abstain_below`,
//! `abstain_above` at the schema level, and `abstain_below`/`abstain_above` on a
//! question) and from the request; [`AfterRead::over`] merges the two.

pub mod abstain;
pub mod by_key;
pub mod calibration;
pub mod temperature;

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Map, Value};

pub use abstain::{AbstainAbove, AbstainBelow, AbstainLimit, AbstainRule, AbstainRules, Threshold};
pub use temperature::{Temperature, TemperatureValue};

use crate::envelope::AnswerOut;
use crate::error::SchemaError;

/// Reason given for every answer of a state with too little to read.
pub const LOW_INFORMATION: &str = "low_information state";

/// Fewer letters or digits than this in the state text makes it "low
/// information": there is nothing to decide on (e.g. `"?"`, `"..."`, `"ok"`).
pub const MIN_INFORMATIVE_CHARS: usize = 3;

/// Post-read settings of a policy or a request.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AfterRead {
    /// Temperature per question type.
    pub temperature: Temperature,
    /// Abstention rules.
    pub abstain: AbstainRules,
}

impl AfterRead {
    /// Read the post-read keys of a policy or request object `obj` whose
    /// questions have ids `question_ids`: `temperature`, `abstain_below`,
    /// `abstain_above` (number or object by question id). When `questions` is
    /// given, each question object's own `abstain_below` / `abstain_above` is
    /// read too.
    ///
    /// # Errors
    /// [`SchemaError`] naming the key at fault, its allowed values and the value given.
    pub fn from_object(
        obj: &Map<String, Value>,
        question_ids: &[&str],
        questions: Option<&[Value]>,
    ) -> Result<Self, SchemaError> {
        let temperature = match obj.get("temperature") {
            Some(v) => Temperature::parse("temperature", v)?,
            None => Temperature::default(),
        };
        let mut abstain = AbstainRules::default();
        for which in [Threshold::Below, Threshold::Above] {
            if let Some(v) = obj.get(which.key()) {
                abstain.set(which, which.key(), v, question_ids)?;
            }
        }
        for (i, q) in questions.unwrap_or_default().iter().enumerate() {
            let (Some(q), Some(id)) = (q.as_object(), question_ids.get(i)) else {
                continue;
            };
            for which in [Threshold::Below, Threshold::Above] {
                if let Some(v) = q.get(which.key()) {
                    let field = format!("questions[{i}].{}", which.key());
                    let mut one = Map::new();
                    one.insert((*id).to_string(), v.clone());
                    abstain.set(which, &field, &Value::Object(one), question_ids)?;
                }
            }
        }
        Ok(Self {
            temperature,
            abstain,
        })
    }

    /// A request's post-read settings from its typed keys, for a policy
    /// whose questions have ids `question_ids`: `temperature`, then
    /// `abstain_below` and `abstain_above` (their ids checked here).
    ///
    /// # Errors
    /// [`SchemaError`] on `abstain_below` or `abstain_above` when a key is
    /// neither `"*"` nor a question id.
    pub fn for_request(
        temperature: Option<&TemperatureValue>,
        below: Option<&AbstainBelow>,
        above: Option<&AbstainAbove>,
        question_ids: &[&str],
    ) -> Result<Self, SchemaError> {
        let mut abstain = AbstainRules::default();
        for (which, limit) in [
            (Threshold::Below, below.map(|b| &b.0)),
            (Threshold::Above, above.map(|a| &a.0)),
        ] {
            if let Some(limit) = limit {
                abstain.apply(which, which.key(), limit, question_ids)?;
            }
        }
        Ok(Self {
            temperature: temperature.map(|t| t.0).unwrap_or_default(),
            abstain,
        })
    }

    /// These settings (a request's) over `base` (its policy's).
    pub fn over(&self, base: &AfterRead) -> AfterRead {
        AfterRead {
            temperature: self.temperature.over(base.temperature),
            abstain: self.abstain.over(&base.abstain),
        }
    }

    /// Whether applying these settings changes nothing.
    pub fn is_identity(&self) -> bool {
        self.temperature.is_identity() && self.abstain.is_empty()
    }
}

/// Whether `state` has too little to decide on: fewer than
/// [`MIN_INFORMATIVE_CHARS`] letters or digits in its string values (object
/// keys do not count: `{"ticket": "?"}` says nothing). A number or a boolean
/// anywhere is information; so is an image part.
pub fn is_low_information(state: &Value) -> bool {
    fn count(v: &Value) -> usize {
        match v {
            Value::Null => 0,
            Value::Bool(_) | Value::Number(_) => MIN_INFORMATIVE_CHARS,
            // A state sent as JSON text (the chat route's user message) is
            // judged by what it holds.
            Value::String(s) if s.trim_start().starts_with(['{', '[']) => {
                match serde_json::from_str::<Value>(s) {
                    Ok(inner @ (Value::Object(_) | Value::Array(_))) => count(&inner),
                    _ => s.chars().filter(|c| c.is_alphanumeric()).count(),
                }
            }
            Value::String(s) => s.chars().filter(|c| c.is_alphanumeric()).count(),
            Value::Array(items) => items.iter().map(count).sum(),
            Value::Object(m)
                if m.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.starts_with("image")) =>
            {
                MIN_INFORMATIVE_CHARS
            }
            Value::Object(m) => m.values().map(count).sum(),
        }
    }
    count(state) < MIN_INFORMATIVE_CHARS
}

/// Apply `after` to `answers` (skipped questions are `None`) of a decision on
/// `state`: temperature first (Stage-1 answers only), then abstention. When a
/// rule is set and the state is low-information, every answer it covers is
/// withheld with [`LOW_INFORMATION`]. Returns how many answers were withheld.
pub fn apply(
    answers: &mut IndexMap<String, Option<AnswerOut>>,
    after: &AfterRead,
    state: &Value,
) -> usize {
    let low_information = !after.abstain.is_empty() && is_low_information(state);
    let mut withheld = 0;
    for (id, answer) in answers.iter_mut() {
        let Some(answer) = answer else { continue };
        if answer.resolved.is_none() {
            if let Some(t) = after.temperature.for_kind(answer.question.kind) {
                temperature::apply(answer, t);
            }
        }
        if answer.abstained.is_some() {
            withheld += 1;
            continue;
        }
        let rule = after.abstain.rule_for(id);
        if rule.is_empty() {
            continue;
        }
        let reason = if low_information {
            Some(LOW_INFORMATION.to_string())
        } else {
            rule.reason(answer)
        };
        if let Some(reason) = reason {
            answer.abstained = Some(reason);
            withheld += 1;
        }
    }
    withheld
}

#[cfg(test)]
mod tests;
