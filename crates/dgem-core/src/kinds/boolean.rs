//! `boolean` (also `bool`, `noul`): a yes/no question. Its alternatives are
//! always `yes` and `no`; `criteria` `{"true": …, "false": …}` describes them.

use serde_json::{json, Map, Value};

use super::{AdhocAt, Kind, Names};
use crate::envelope::AnswerOut;
use crate::error::AdhocError;
use crate::error::SchemaError;
use crate::json::shown;
use crate::schema::validate::text::{shown as shown_short, text_of};
use crate::schema::{Alternative, Question};

/// The yes/no type.
pub(crate) struct Boolean;

impl Kind for Boolean {
    fn names(&self) -> Names {
        Names {
            canonical: "boolean",
            wire: "noul",
            aliases: &["boolean", "bool", "noul"],
            summary: "yes/no",
        }
    }

    fn alternatives(
        &self,
        q: &Map<String, Value>,
        name: &str,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(Vec<Alternative>, &'static str), SchemaError> {
        let (yes, no) = match q.get("criteria") {
            None | Some(Value::Null) => (None, None),
            Some(Value::Object(c)) => (
                c.get("true").and_then(text_of),
                c.get("false").and_then(text_of),
            ),
            Some(other) => {
                let msg = format!(
                    "question {name}: criteria must be an object {{\"true\": …, \"false\": …}} (got {})",
                    shown_short(other)
                );
                return Err(SchemaError::new(at(".criteria"), msg));
            }
        };
        let alts = vec![
            Alternative {
                name: "yes".into(),
                description: yes,
            },
            Alternative {
                name: "no".into(),
                description: no,
            },
        ];
        Ok((alts, ".type"))
    }

    fn wire(&self, q: &Question, m: &mut Map<String, Value>) {
        let yes = q.alternatives.first().and_then(|a| a.description.clone());
        let no = q.alternatives.get(1).and_then(|a| a.description.clone());
        if yes.is_some() || no.is_some() {
            m.insert("criteria".into(), json!({"true": yes, "false": no}));
        }
    }

    fn adhoc_alternative_keys(&self) -> &'static [&'static str] {
        &["criteria"]
    }

    fn adhoc(
        &self,
        at: &AdhocAt<'_>,
        _q: &Map<String, Value>,
        criteria: Option<&Value>,
        out: &mut Map<String, Value>,
    ) -> Result<(), AdhocError> {
        match criteria {
            None => {}
            Some(Value::Object(c)) if c.is_empty() => {}
            Some(c @ Value::Object(_)) => {
                out.insert("criteria".into(), c.clone());
            }
            Some(other) => {
                return Err(AdhocError {
                    field: format!("{}.criteria", at.field),
                    message: format!(
                        "question '{}': noul criteria must be an object with true and false descriptions. Given: {}",
                        at.id,
                        shown(other)
                    ),
                })
            }
        }
        Ok(())
    }

    fn chat_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>) {
        // A Stage-2 answer states p(yes) through its confidence.
        let agg = &a.aggregate;
        let noul = match &a.resolved {
            Some(r) if agg.top == 0 => r.confidence,
            Some(r) => 1.0 - r.confidence,
            None => agg.mean.first().copied().unwrap_or(0.0),
        };
        m.insert("noul".into(), json!(noul));
    }

    /// `yes` may be keyed `true` and `no` `false` in a reply, as
    /// `/v1/systemone` writes them.
    fn reply_alias(&self, index: usize) -> Option<&'static str> {
        match index {
            0 => Some("true"),
            1 => Some("false"),
            _ => None,
        }
    }

    fn jev_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>) {
        let agg = &a.aggregate;
        let p = agg.mean.first().copied().unwrap_or(0.0);
        m.insert("noul".into(), json!(p));
        m.insert(
            "probabilities".into(),
            json!({"true": p, "false": agg.mean.get(1).copied().unwrap_or(1.0 - p)}),
        );
    }
}
