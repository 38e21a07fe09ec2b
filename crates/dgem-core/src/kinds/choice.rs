//! `choice`: one of 2 to 300 named options (over 26 through brackets,
//! [`crate::brackets`]). Its options' parsing, wire form and ad-hoc forms are
//! shared with `multi`.

use serde_json::{json, Map, Value};

use super::{by_name, AdhocAt, Kind, Names};
use crate::brackets::MAX_BRACKET_OPTIONS;
use crate::envelope::AnswerOut;
use crate::error::AdhocError;
use crate::error::SchemaError;
use crate::json::shown;
use crate::schema::validate::list_field;
use crate::schema::validate::text::{shown as shown_short, text_of};
use crate::schema::{Alternative, Question, QuestionKind};

/// The single-choice type.
pub(crate) struct Choice;

impl Kind for Choice {
    fn names(&self) -> Names {
        Names {
            canonical: "choice",
            wire: "choice",
            aliases: &["choice"],
            summary: "one option of `criteria`, or of `options`",
        }
    }

    fn max_alternatives(&self) -> usize {
        MAX_BRACKET_OPTIONS
    }

    fn alternatives(
        &self,
        q: &Map<String, Value>,
        name: &str,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(Vec<Alternative>, &'static str), SchemaError> {
        Ok((options_of(q, name, at)?, ".options"))
    }

    fn wire(&self, q: &Question, m: &mut Map<String, Value>) {
        options_wire(q, m);
    }

    fn adhoc_alternative_keys(&self) -> &'static [&'static str] {
        &["options", "criteria", "choices"]
    }

    fn adhoc(
        &self,
        at: &AdhocAt<'_>,
        q: &Map<String, Value>,
        criteria: Option<&Value>,
        out: &mut Map<String, Value>,
    ) -> Result<(), AdhocError> {
        options_adhoc(QuestionKind::Choice, at, q, criteria, out)
    }

    fn chat_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>) {
        m.insert("choice".into(), json!(a.answer_name()));
        if a.is_none_of_these() {
            m.insert("none_of_these".into(), json!(true));
        }
    }

    fn answer_key(&self) -> Option<&'static str> {
        Some("choice")
    }

    /// The chat route's `choice` (and `none_of_these`), then `probabilities`.
    fn jev_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>) {
        self.chat_keys(a, m);
        m.insert("probabilities".into(), by_name(a));
    }
}

/// The `options` of a `choice` or `multi` question: names, or `{name,
/// description}` objects.
pub(super) fn options_of(
    q: &Map<String, Value>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Vec<Alternative>, SchemaError> {
    let items = list_field(q, "options", name, at)?;
    let mut alts = Vec::with_capacity(items.len());
    for (j, o) in items.iter().enumerate() {
        alts.push(match o {
            Value::Object(m) => {
                let Some(n) = m.get("name").filter(|n| !n.is_null()) else {
                    let msg = format!(
                        "question {name}: options[{j}] needs a `name` (got {})",
                        shown_short(o)
                    );
                    return Err(SchemaError::new(at(&format!(".options[{j}].name")), msg));
                };
                Alternative {
                    name: text_of(n).unwrap_or_default(),
                    description: m.get("description").and_then(text_of),
                }
            }
            other => Alternative {
                name: text_of(other).unwrap_or_else(|| "None".into()),
                description: None,
            },
        });
    }
    Ok(alts)
}

/// The options of `q` in the wire form, with a `multi`'s selection fields.
pub(super) fn options_wire(q: &Question, m: &mut Map<String, Value>) {
    let options: Vec<Value> = q
        .alternatives
        .iter()
        .map(|a| match &a.description {
            Some(d) => json!({"name": a.name, "description": d}),
            None => json!({"name": a.name}),
        })
        .collect();
    m.insert("options".into(), Value::Array(options));
    if let Some(sel) = &q.select {
        m.insert("min".into(), json!(sel.min));
        m.insert("max".into(), json!(sel.max));
        m.insert("threshold".into(), json!(sel.threshold));
    }
}

/// The options of an ad-hoc `choice` or `multi` question: `options`, else
/// `criteria`, else `choices`; a map name → description or a list.
pub(super) fn options_adhoc(
    kind: QuestionKind,
    at: &AdhocAt<'_>,
    q: &Map<String, Value>,
    criteria: Option<&Value>,
    out: &mut Map<String, Value>,
) -> Result<(), AdhocError> {
    let source = q
        .get("options")
        .filter(|v| !v.is_null())
        .or(criteria)
        .or_else(|| q.get("choices").filter(|v| !v.is_null()));
    let options = match source {
        Some(Value::Object(m)) if !m.is_empty() => m
            .iter()
            .map(|(name, d)| json!({"name": name, "description": d}))
            .collect(),
        Some(Value::Array(l)) if !l.is_empty() => l.clone(),
        other => {
            return Err(AdhocError {
                field: format!("{}.criteria", at.field),
                message: format!(
                    "question '{}': {} criteria must map option names to descriptions (or give `options`: a list of names or {{name, description}}). Given: {}",
                    at.id,
                    kind.as_str(),
                    shown(other.unwrap_or(&Value::Null))
                ),
            })
        }
    };
    out.insert("options".into(), Value::Array(options));
    Ok(())
}
