//! [`AnswerOut`], one answered question, and its cascade write-back
//! ([`Resolution`]), in a file of their own: every question kind writes an
//! answer's shape (`crate::kinds`), and the envelope writes the answers
//! through the kinds, so the answer type depends on neither.

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::multi::MultiRead;
use crate::order::OrderSensitivity;
use crate::readout::{level_values, score_value, Aggregate};
use crate::schema::{Question, QuestionKind};

/// One answered question, ready to be written out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerOut {
    /// The question.
    pub question: Question,
    /// Labels in alternative order (letters or words).
    pub labels: Vec<String>,
    /// The averaged (and, if enabled, calibrated) distribution.
    pub aggregate: Aggregate,
    /// Post-hoc temperature applied to `aggregate` after the read, if any
    /// (see [`crate::after::temperature`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Set when a Stage-2 model answered this question (the cascade); the
    /// Stage-1 probabilities stay in `aggregate.mean`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Resolution>,
    /// Set when the answer is withheld: the reason, e.g. `"hesitation 0.93 ≥
    /// 0.50"`. The distribution is kept; no default label replaces it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abstained: Option<String>,
    /// How much the answer depended on the order the options were listed
    /// in ([`OrderSensitivity`]); `None` when the reader does not measure it
    /// (a canvas read lists each option at one position).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderSensitivity>,
    /// A `multi` question's per-option reads and selection
    /// ([`crate::multi`]); `None` for other types. For a `multi` answer,
    /// `aggregate.mean[i]` is option `i`'s probability of applying (they need
    /// not sum to 1) and `aggregate.confidence` the probability of the
    /// selected set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi: Option<MultiRead>,
    /// Set when the policy's rules changed this answer ([`crate::rules`]):
    /// the probability mass, in [0, 1], that the rules removed from the
    /// joint distribution of the questions they tie.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constrained: Option<f64>,
}

/// A Stage-2 answer written over a Stage-1 one (the cascade's write-back).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolution {
    /// The Stage-2 model that answered.
    pub model: String,
    /// Stage-2 confidence in (0, 1].
    pub confidence: f64,
    /// Stage-2's one-line reason.
    pub explanation: String,
    /// Index of the Stage-1 answer it replaced.
    pub stage1_top: usize,
    /// Stage-1 confidence of that answer, in [0, 1].
    pub stage1_confidence: f64,
}

impl AnswerOut {
    /// An answer read from `aggregate`, with no temperature, cascade or abstention.
    pub fn new(question: Question, labels: Vec<String>, aggregate: Aggregate) -> Self {
        Self {
            question,
            labels,
            aggregate,
            temperature: None,
            resolved: None,
            abstained: None,
            order: None,
            multi: None,
            constrained: None,
        }
    }

    /// Write a Stage-2 answer over this one: `top` (index into the
    /// alternatives) becomes the answer and `confidence` its confidence; the
    /// Stage-1 distribution, entropy and hesitation are kept as read.
    pub fn resolve(&mut self, top: usize, confidence: f64, model: &str, explanation: &str) {
        self.resolved = Some(Resolution {
            model: model.to_string(),
            confidence,
            explanation: explanation.to_string(),
            stage1_top: self.aggregate.top,
            stage1_confidence: self.aggregate.confidence,
        });
        self.aggregate.top = top;
        self.aggregate.confidence = confidence;
    }

    /// Names of the options a `multi` answer selected, in option order;
    /// for other types the one chosen alternative's name.
    pub fn selected_names(&self) -> Vec<&str> {
        match &self.multi {
            Some(m) => m
                .selected
                .iter()
                .filter_map(|i| self.question.alternatives.get(*i))
                .map(|a| a.name.as_str())
                .collect(),
            None => vec![self.answer_name()],
        }
    }

    /// Whether the answer is the question's "none of these" option (for a
    /// `multi`, whether it selected it).
    pub fn is_none_of_these(&self) -> bool {
        let Some(n) = self.question.none_option else {
            return false;
        };
        match &self.multi {
            Some(m) => m.selected.contains(&n),
            None => self.aggregate.top == n,
        }
    }

    /// Name of the chosen alternative (`yes`/`no`, option or level name; for
    /// a `multi`, its most probable option).
    pub fn answer_name(&self) -> &str {
        self.question
            .alternatives
            .get(self.aggregate.top)
            .map_or("", |a| a.name.as_str())
    }

    /// A score answer's `value`: the expected level value `Σ v_i·p_i` when
    /// every level name parses as a number (levels `"20".."24"` read near 22),
    /// the chosen level's value for a Stage-2 answer; `None` for word levels
    /// and for other question types. Every route that writes a score answer
    /// (chat, `/v1/systemone`) writes this same number.
    pub fn level_value(&self) -> Option<f64> {
        if self.question.kind != QuestionKind::Score {
            return None;
        }
        let names = self
            .question
            .alternatives
            .iter()
            .map(|alt| alt.name.as_str());
        let values = level_values(names)?;
        let a = &self.aggregate;
        Some(if self.resolved.is_some() {
            values.get(a.top).copied().unwrap_or_default()
        } else {
            score_value(&a.mean, &values)
        })
    }

    /// The chat-route answer object around a type's own keys (`kind_keys`):
    /// `type, label, [slot_label], confidence, probabilities`, the type's
    /// keys, then `[stderr, agreement], entropy, normalized_entropy` and the
    /// post-read keys.
    pub(crate) fn chat_shape(&self, kind_keys: &dyn Fn(&mut Map<String, Value>)) -> Value {
        let a = &self.aggregate;
        let q = &self.question;
        let mut m = Map::new();
        m.insert("type".into(), json!(q.kind.wire_name()));
        // `label` is the answer's own name; the token the model read for it
        // (a letter, a digit) goes in `slot_label` when it differs.
        m.insert("label".into(), json!(self.answer_name()));
        if let Some(slot) = self
            .labels
            .get(a.top)
            .filter(|l| !l.trim().eq_ignore_ascii_case(self.answer_name().trim()))
        {
            m.insert("slot_label".into(), json!(slot));
        }
        m.insert("confidence".into(), json!(a.confidence));
        let probs: Map<String, Value> = q
            .alternatives
            .iter()
            .zip(&a.mean)
            .map(|(alt, p)| (alt.name.clone(), json!(p)))
            .collect();
        m.insert("probabilities".into(), Value::Object(probs));
        kind_keys(&mut m);
        if let (Some(se), Some(ag)) = (a.stderr, a.agreement) {
            m.insert("stderr".into(), json!(se));
            m.insert("agreement".into(), json!(ag));
        }
        m.insert("entropy".into(), json!(a.entropy));
        m.insert("normalized_entropy".into(), json!(a.normalized_entropy));
        if let Some(t) = self.temperature {
            m.insert("temperature".into(), json!(t));
        }
        if let Some(r) = &self.resolved {
            m.insert("resolved_by".into(), json!(r.model));
            m.insert("explanation".into(), json!(r.explanation));
        }
        if let Some(reason) = &self.abstained {
            m.insert("abstained".into(), json!(true));
            m.insert("abstain_reason".into(), json!(reason));
        }
        if let Some(order) = &self.order {
            m.insert("order_sensitivity".into(), json!(order));
        }
        self.constrained_json(&mut m);
        Value::Object(m)
    }

    /// `constrained` and `constraint_mass_removed`, when rules changed the answer.
    pub(crate) fn constrained_json(&self, m: &mut Map<String, Value>) {
        if let Some(removed) = self.constrained {
            m.insert("constrained".into(), json!(true));
            m.insert("constraint_mass_removed".into(), json!(removed));
        }
    }
}
