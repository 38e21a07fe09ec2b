//! Abstention: withhold an answer the model is not sure enough of.
//!
//! A rule has two optional thresholds: `abstain_below` (abstain when the
//! answer's confidence is below it, a probability in [0, 1]) and
//! `abstain_above` (abstain when its hesitation — normalized entropy H / ln K —
//! is at or above it, in [0, 1]). An abstained answer keeps its whole
//! distribution and is marked with the reason; it is never replaced by a
//! default label. Rules come from the policy (schema level, or on a question)
//! and from the request (a number for every question, or an object keyed by
//! question id, `"*"` for the rest). For a question the first value set wins,
//! in this order: the request's for that question, the policy's for that
//! question, the request's global one, the policy's global one.

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::by_key::{self, Checks, OneOrByKey};

use crate::envelope::AnswerOut;
use crate::error::SchemaError;

/// Thresholds of one abstention rule; `None` = not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct AbstainRule {
    /// Abstain when confidence < this (a probability in [0, 1]).
    pub below: Option<f64>,
    /// Abstain when hesitation ≥ this (normalized entropy in [0, 1]).
    pub above: Option<f64>,
}

impl AbstainRule {
    /// These thresholds where set, else `base`'s.
    pub fn over(self, base: AbstainRule) -> AbstainRule {
        AbstainRule {
            below: self.below.or(base.below),
            above: self.above.or(base.above),
        }
    }

    /// Whether neither threshold is set.
    pub fn is_empty(&self) -> bool {
        self.below.is_none() && self.above.is_none()
    }

    /// The reason `answer` is withheld under this rule, or `None`.
    ///
    /// A Stage-2 answer is judged by its Stage-2 confidence only: its Stage-1
    /// hesitation is why it was escalated, not a reason to drop the answer.
    pub fn reason(&self, answer: &AnswerOut) -> Option<String> {
        let a = &answer.aggregate;
        if let Some(h) = self.above.filter(|_| answer.resolved.is_none()) {
            if a.normalized_entropy >= h {
                return Some(format!("hesitation {:.2} ≥ {h:.2}", a.normalized_entropy));
            }
        }
        if let Some(c) = self.below {
            if a.confidence < c {
                return Some(format!("confidence {:.2} < {c:.2}", a.confidence));
            }
        }
        None
    }
}

/// Every abstention rule of a policy or request.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AbstainRules {
    /// The rule for questions without their own.
    pub global: AbstainRule,
    /// Rules of single questions, by question id.
    pub per_question: IndexMap<String, AbstainRule>,
}

/// Which threshold a key sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threshold {
    /// `abstain_below` (confidence).
    Below,
    /// `abstain_above` (hesitation).
    Above,
}

impl Threshold {
    /// The key's name.
    pub fn key(self) -> &'static str {
        match self {
            Threshold::Below => "abstain_below",
            Threshold::Above => "abstain_above",
        }
    }
}

/// A threshold value in [0, 1]; `what` says which rule it sets.
fn unit(v: &Value, what: &str) -> Result<f64, String> {
    v.as_f64()
        .filter(|x| (0.0..=1.0).contains(x))
        .ok_or_else(|| format!("must be a number from 0 to 1 ({what}). Given: {v}"))
}

/// `abstain_below` or `abstain_above` as written: one threshold in [0, 1]
/// for every question, or thresholds by question id (`"*"` for every other
/// question), in the order given. The ids are checked against the policy
/// when the rule is set ([`AbstainRules::apply`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum AbstainLimit {
    /// One threshold for every question.
    All(f64),
    /// Thresholds by question id or `"*"`, in the order given.
    ById(Vec<(String, f64)>),
    /// Nothing set (`null`).
    #[default]
    Unset,
}

impl AbstainLimit {
    /// The one serde read of either key, `which` naming the rule in messages.
    fn read<'de, D: Deserializer<'de>>(d: D, which: Threshold) -> Result<Self, D::Error> {
        let value = |v: &Value| unit(v, meaning(which));
        let any_key = |_: &str| Ok(());
        let read = by_key::read(
            d,
            &Checks {
                one: &value,
                key: &any_key,
                each: &value,
            },
        )?;
        Ok(match read {
            OneOrByKey::Null => Self::Unset,
            OneOrByKey::One(x) => Self::All(x),
            OneOrByKey::ByKey(list) => Self::ById(list),
        })
    }
}

/// The form it was read from: a number, an object, or `null`.
impl Serialize for AbstainLimit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Self::All(x) => s.serialize_f64(*x),
            Self::Unset => s.serialize_unit(),
            Self::ById(list) => {
                let mut m = s.serialize_map(Some(list.len()))?;
                for (id, x) in list {
                    m.serialize_entry(id, x)?;
                }
                m.end()
            }
        }
    }
}

/// `abstain_below` as written (see [`AbstainLimit`]): abstain when an
/// answer's confidence is below the threshold.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct AbstainBelow(pub AbstainLimit);

/// `abstain_above` as written (see [`AbstainLimit`]): abstain when an
/// answer's hesitation, H / ln K, is at or above the threshold.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct AbstainAbove(pub AbstainLimit);

impl<'de> Deserialize<'de> for AbstainBelow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        AbstainLimit::read(d, Threshold::Below).map(Self)
    }
}

impl<'de> Deserialize<'de> for AbstainAbove {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        AbstainLimit::read(d, Threshold::Above).map(Self)
    }
}

fn meaning(which: Threshold) -> &'static str {
    match which {
        Threshold::Below => "abstain when the answer's confidence is below it",
        Threshold::Above => "abstain when the answer's hesitation, H / ln K, is at or above it",
    }
}

impl AbstainRules {
    /// Set `which` from `v`: a number (every question), an object keyed by
    /// question id (`"*"` = every other question), or null (nothing).
    ///
    /// # Errors
    /// [`SchemaError`] naming the field when a value is not in [0, 1] or a key
    /// is not one of `question_ids`.
    pub fn set(
        &mut self,
        which: Threshold,
        field: &str,
        v: &Value,
        question_ids: &[&str],
    ) -> Result<(), SchemaError> {
        let limit = match which {
            Threshold::Below => crate::json::from_value_at::<AbstainBelow>(field, v)?.0,
            Threshold::Above => crate::json::from_value_at::<AbstainAbove>(field, v)?.0,
        };
        self.apply(which, field, &limit, question_ids)
    }

    /// Set `which` from `limit`, read from `field`, for a policy whose
    /// questions have ids `question_ids`.
    ///
    /// # Errors
    /// [`SchemaError`] naming the field when a key is neither `"*"` nor one
    /// of `question_ids`.
    pub fn apply(
        &mut self,
        which: Threshold,
        field: &str,
        limit: &AbstainLimit,
        question_ids: &[&str],
    ) -> Result<(), SchemaError> {
        let put = |rule: &mut AbstainRule, x: f64| match which {
            Threshold::Below => rule.below = Some(x),
            Threshold::Above => rule.above = Some(x),
        };
        match limit {
            AbstainLimit::Unset => {}
            AbstainLimit::All(x) => put(&mut self.global, *x),
            AbstainLimit::ById(list) => {
                for (id, x) in list {
                    if id == "*" {
                        put(&mut self.global, *x);
                    } else if question_ids.contains(&id.as_str()) {
                        put(self.per_question.entry(id.clone()).or_default(), *x);
                    } else {
                        return Err(SchemaError::new(
                            field,
                            format!(
                                "`{field}` keys are question ids or \"*\"; the questions are [{}]. Given: `{id}`",
                                question_ids.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The rule in force for question `id`.
    pub fn rule_for(&self, id: &str) -> AbstainRule {
        self.per_question
            .get(id)
            .copied()
            .unwrap_or_default()
            .over(self.global)
    }

    /// These rules over `base` (a request over its policy): per question, then
    /// globally, the first value set wins (see the module docs for the order).
    pub fn over(&self, base: &AbstainRules) -> AbstainRules {
        let mut per_question = base.per_question.clone();
        for (id, rule) in &self.per_question {
            let merged = rule.over(base.per_question.get(id).copied().unwrap_or_default());
            per_question.insert(id.clone(), merged);
        }
        AbstainRules {
            global: self.global.over(base.global),
            per_question,
        }
    }

    /// Whether no rule is set anywhere.
    pub fn is_empty(&self) -> bool {
        self.global.is_empty() && self.per_question.values().all(AbstainRule::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readout::aggregate;
    use crate::schema::{SchemaDefaults, ValidSchema};
    use serde_json::json;

    fn answer(p: Vec<f64>) -> AnswerOut {
        let s = ValidSchema::from_value(
            &json!({"questions": [{"id": "team", "type": "choice", "options": ["a", "b", "c"]}]}),
            &SchemaDefaults::default(),
        )
        .expect("valid");
        let q = s.questions[0].clone();
        AnswerOut::new(q, vec!["A".into(), "B".into(), "C".into()], aggregate(&[p]))
    }

    #[test]
    fn reasons_quote_the_value_and_the_threshold() {
        let a = answer(vec![0.4, 0.35, 0.25]);
        let rule = AbstainRule {
            below: None,
            above: Some(0.5),
        };
        let r = rule.reason(&a).expect("hesitant");
        assert!(
            r.starts_with("hesitation 0.9") && r.ends_with("≥ 0.50"),
            "{r}"
        );
        let rule = AbstainRule {
            below: Some(0.6),
            above: None,
        };
        assert_eq!(rule.reason(&a).as_deref(), Some("confidence 0.40 < 0.60"));
        let sure = answer(vec![0.98, 0.01, 0.01]);
        assert_eq!(rule.reason(&sure), None);
        assert_eq!(AbstainRule::default().reason(&a), None);
    }

    #[test]
    fn a_stage2_answer_is_judged_by_its_own_confidence() {
        let mut a = answer(vec![0.4, 0.35, 0.25]);
        a.resolve(1, 0.9, "m", "because");
        let rule = AbstainRule {
            below: Some(0.6),
            above: Some(0.5),
        };
        assert_eq!(rule.reason(&a), None);
        a.resolve(1, 0.3, "m", "unsure too");
        assert_eq!(rule.reason(&a).as_deref(), Some("confidence 0.30 < 0.60"));
    }

    #[test]
    fn request_over_policy_per_question_then_global() {
        let ids = ["team", "urgent"];
        let mut policy = AbstainRules::default();
        policy
            .set(Threshold::Above, "abstain_above", &json!(0.8), &ids)
            .expect("global");
        policy
            .set(
                Threshold::Above,
                "abstain_above",
                &json!({"team": 0.3}),
                &ids,
            )
            .expect("per question");
        let mut request = AbstainRules::default();
        request
            .set(Threshold::Above, "abstain_above", &json!(0.6), &ids)
            .expect("request global");
        let m = request.over(&policy);
        // The policy's per-question value beats the request's global one.
        assert_eq!(m.rule_for("team").above, Some(0.3));
        assert_eq!(m.rule_for("urgent").above, Some(0.6));
        assert!(!m.is_empty() && AbstainRules::default().is_empty());
    }

    #[test]
    fn bad_thresholds_name_the_field() {
        let mut r = AbstainRules::default();
        let e = r
            .set(Threshold::Below, "abstain_below", &json!(1.5), &["a"])
            .expect_err("range");
        assert!(
            e.message.contains("0 to 1") && e.message.contains("1.5"),
            "{e}"
        );
        let e = r
            .set(
                Threshold::Below,
                "abstain_below",
                &json!({"nope": 0.5}),
                &["a"],
            )
            .expect_err("id");
        assert!(
            e.message.contains("`nope`") && e.message.contains("[a]"),
            "{e}"
        );
        let e = r
            .set(
                Threshold::Above,
                "abstain_above",
                &json!({"a": "x"}),
                &["a"],
            )
            .expect_err("type");
        assert_eq!(e.field, "abstain_above.a");
    }
}
