//! One answer read back from a decision reply: what a remote dgem, the
//! original server or a gateway upstream sends in `answers.<id>`.
//!
//! It is the inverse of an answer's chat-route shape, so each question type
//! owns its part through the crate-private `Kind` trait: the other names its
//! alternatives may be keyed by (`true` / `false` for yes/no), the key that
//! states its answer (`choice`, `level`), and, for a type whose answer is
//! not one pick (`multi`), how its probabilities become its answer. The
//! checks common to every type live here, so a new type needs none of its
//! own to be read from a reply.

use serde_json::{Map, Value};

use super::of;
use crate::envelope::AnswerOut;
use crate::schema::{Question, QuestionKind};

/// How far an upstream answer's probabilities may sum from 1 before the
/// reply is refused. Within it they are renormalized (an upstream that
/// rounds to two decimals sums 0.99 or 1.01), and a sum further from 1 than
/// [`RENORMALIZED_RECORD_ABOVE`] is recorded in `diagnostics.renormalized`.
pub const PROBABILITY_SUM_TOLERANCE: f64 = 0.02;

/// Distance of a sum from 1 above which a renormalized answer is recorded in
/// `diagnostics.renormalized` (below it the difference is float rounding).
pub const RENORMALIZED_RECORD_ABOVE: f64 = 1e-6;

/// Relative slack under which a stated answer still counts as the most
/// probable one (ties, and rounding in the sender's JSON).
const STATED_ANSWER_SLACK: f64 = 1e-6;

/// What is wrong with one answer of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyFault {
    /// The field under the answer's own path: empty for the entry itself,
    /// else `.probabilities`, `.probabilities.<name>`, `.label`, `.multi`, ….
    pub field: String,
    /// What is wrong, with the value given.
    pub message: String,
}

impl ReplyFault {
    /// A fault at `field` (under the answer's path).
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// One answer read from a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyAnswer {
    /// The answer; `None` when the question was skipped (`null`, allowed
    /// only for a question with `ask_if`).
    pub answer: Option<AnswerOut>,
    /// The sum of the answer's probabilities when they were renormalized
    /// from further than [`RENORMALIZED_RECORD_ABOVE`] off 1.
    pub renormalized: Option<f64>,
}

/// Read the answer of `q` from its reply entry.
///
/// The entry's `probabilities` must name exactly the question's
/// alternatives (or the other names its type allows), each a finite number
/// in [0, 1]. For a type that picks one alternative they must sum to 1
/// within [`PROBABILITY_SUM_TOLERANCE`] (then renormalized), a stated
/// answer (`label`, or any type's answer key: `choice`, `level`) must be the
/// most probable alternative, and `stderr` and `agreement` are kept when
/// present; a `multi` answer's are each option's own probability, read by
/// its type. An entry with `refusal` (the upstream declined) is an
/// abstention with that reason, over its probabilities when it gives them,
/// else every alternative at even odds. `constraint_mass_removed` is kept
/// when present.
///
/// # Errors
/// [`ReplyFault`] naming the field, what it must be and the value given.
pub fn answer_from_reply(q: &Question, entry: &Value) -> Result<ReplyAnswer, ReplyFault> {
    let kind = of(q.kind);
    let refusal = entry.get("refusal").filter(|r| !r.is_null()).map(|r| {
        format!(
            "the upstream refused: {}",
            r.as_str().map_or_else(|| r.to_string(), str::to_string)
        )
    });
    if refusal.is_some() && entry.get("probabilities").is_none_or(Value::is_null) {
        let mut out = kind.even_odds(q);
        out.abstained = refusal;
        return Ok(ReplyAnswer {
            answer: Some(out),
            renormalized: None,
        });
    }
    if entry.is_null() {
        // Only a question with `ask_if` can be skipped: a `null` for any
        // other is a reply that left the question unanswered.
        if q.ask_if.is_empty() {
            return Err(ReplyFault::new(
                "",
                "null (skipped), but this question has no `ask_if` and cannot be skipped",
            ));
        }
        return Ok(ReplyAnswer {
            answer: None,
            renormalized: None,
        });
    }
    let mut dist = probabilities(q, entry)?;
    if !kind.picks_one() {
        // Each option's own probability of applying: no sum to check.
        let mut out = kind.own_reply_answer(q, entry, &dist)?;
        out.abstained = refusal;
        out.constrained = constrained_of(entry);
        return Ok(ReplyAnswer {
            answer: Some(out),
            renormalized: None,
        });
    }
    let sum: f64 = dist.iter().sum();
    if (sum - 1.0).abs() > PROBABILITY_SUM_TOLERANCE {
        return Err(ReplyFault::new(
            ".probabilities",
            format!("must sum to 1 (within {PROBABILITY_SUM_TOLERANCE}). Given: a sum of {sum}"),
        ));
    }
    let renormalized = ((sum - 1.0).abs() > RENORMALIZED_RECORD_ABOVE).then_some(sum);
    dist.iter_mut().for_each(|p| *p /= sum);
    check_stated_answer(q, entry, &dist)?;
    let mut aggregate = crate::readout::aggregate(&[dist]);
    aggregate.stderr = entry.get("stderr").and_then(Value::as_f64);
    aggregate.agreement = entry.get("agreement").and_then(Value::as_f64);
    let mut out = AnswerOut::new(
        q.clone(),
        q.alternatives.iter().map(|alt| alt.name.clone()).collect(),
        aggregate,
    );
    out.abstained = refusal;
    out.constrained = constrained_of(entry);
    Ok(ReplyAnswer {
        answer: Some(out),
        renormalized,
    })
}

/// A `/v1/systemone` answer's `probabilities` keyed as every other reply
/// keys them, by alternative name: a type that keys them there by
/// alternative index (`score`: `"0"`, `"1"`, …, beside its `legend`) has
/// them renamed. A key that is no index in range is kept as it is (the
/// reply check then refuses it as a key that names no alternative).
pub fn jev_probabilities_by_name(q: &Question, probs: Map<String, Value>) -> Map<String, Value> {
    if !of(q.kind).jev_keys_by_index() {
        return probs;
    }
    probs
        .into_iter()
        .map(|(k, p)| {
            let name = k
                .parse::<usize>()
                .ok()
                .and_then(|i| q.alternatives.get(i))
                .map_or(k, |alt| alt.name.clone());
            (name, p)
        })
        .collect()
}

/// The entry's `probabilities`, in the question's alternative order.
fn probabilities(q: &Question, entry: &Value) -> Result<Vec<f64>, ReplyFault> {
    let kind = of(q.kind);
    let probs = entry
        .get("probabilities")
        .and_then(Value::as_object)
        .ok_or_else(|| ReplyFault::new(".probabilities", "missing or not an object"))?;
    let mut dist = Vec::with_capacity(q.alternatives.len());
    for (i, alt) in q.alternatives.iter().enumerate() {
        let v = probs
            .get(&alt.name)
            .or_else(|| kind.reply_alias(i).and_then(|k| probs.get(k)))
            .ok_or_else(|| {
                ReplyFault::new(
                    ".probabilities",
                    format!(
                        "no probability for '{}' (allowed keys: {})",
                        alt.name,
                        names(q)
                    ),
                )
            })?;
        let p = v
            .as_f64()
            .filter(|p| p.is_finite() && (0.0..=1.0).contains(p))
            .ok_or_else(|| {
                ReplyFault::new(
                    format!(".probabilities.{}", alt.name),
                    format!("must be a number in [0, 1]. Given: {v}"),
                )
            })?;
        dist.push(p);
    }
    if probs.len() != dist.len() {
        return Err(ReplyFault::new(
            ".probabilities",
            format!(
                "{} keys for {} alternatives",
                probs.len(),
                q.alternatives.len()
            ),
        ));
    }
    Ok(dist)
}

/// The question's alternative names, comma-separated.
fn names(q: &Question) -> String {
    q.alternatives
        .iter()
        .map(|a| a.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A reply entry that names its answer (`label`, or any type's answer key:
/// `choice`, `level`, whatever the question's type) must name the most
/// probable alternative of its own
/// `probabilities` (`dist`, in the question's order): a reply whose stated
/// answer contradicts its numbers is malformed, not passed on. An
/// alternative may be named by its type's other name (`true` / `false`).
fn check_stated_answer(q: &Question, entry: &Value, dist: &[f64]) -> Result<(), ReplyFault> {
    // A Stage-2 answer (`resolved_by`) is the bigger model's choice over the
    // Stage-1 distribution it keeps; an abstention is not read as an answer.
    let resolved = entry.get("resolved_by").is_some_and(|v| !v.is_null());
    let abstained = entry.get("abstained").and_then(Value::as_bool) == Some(true);
    if resolved || abstained || entry.get("refusal").is_some_and(|v| !v.is_null()) {
        return Ok(());
    }
    let kind = of(q.kind);
    let top = dist.iter().copied().fold(0.0_f64, f64::max);
    let keys = std::iter::once("label")
        .chain(QuestionKind::ALL.iter().filter_map(|k| of(*k).answer_key()));
    for key in keys {
        let Some(stated) = entry.get(key).and_then(Value::as_str) else {
            continue;
        };
        let index = q
            .alternatives
            .iter()
            .position(|a| a.name == stated)
            .or_else(|| (0..q.alternatives.len()).find(|i| kind.reply_alias(*i) == Some(stated)));
        let Some(i) = index else {
            return Err(ReplyFault::new(
                format!(".{key}"),
                format!(
                    "names no alternative of the question (allowed: {}). Given: {stated}",
                    names(q)
                ),
            ));
        };
        let p = dist.get(i).copied().unwrap_or(0.0);
        if p < top * (1.0 - STATED_ANSWER_SLACK) {
            return Err(ReplyFault::new(
                format!(".{key}"),
                format!(
                    "states `{stated}` (probability {p:.4}) but its own probabilities make another alternative more probable ({top:.4})"
                ),
            ));
        }
    }
    Ok(())
}

/// The removed mass of a reply entry the policy's rules changed
/// (`constraint_mass_removed`), when it gives one in [0, 1].
pub(super) fn constrained_of(entry: &Value) -> Option<f64> {
    entry
        .get("constraint_mass_removed")
        .and_then(Value::as_f64)
        .filter(|x| (0.0..=1.0).contains(x))
}
