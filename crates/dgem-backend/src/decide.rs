//! The decision-level seam: a whole policy and state in, a [`Decision`] out.
//!
//! [`Backend`](crate::Backend) is the token-level seam the embedded engine
//! drives. Some models cannot be driven token by token from here: vLLM serving
//! DiffusionGemma takes chat messages plus a seeded canvas, and a remote dgem
//! takes the schema itself. Everything that makes whole decisions — the embedded
//! engine (`dgem-engine`), the vLLM reader (`dgem-backend-vllm`), a remote dgem
//! client — implements [`Decider`], and the server, MCP and gateway see only
//! `Arc<dyn Decider>`. The seam lives here, below every implementation, so no
//! reader depends on another.

use async_trait::async_trait;
use dgem_core::envelope::{AnswerOut, Diagnostics};
use dgem_core::schema::ValidSchema;
use dgem_core::{CoreError, SchemaError};
use indexmap::IndexMap;
use serde_json::Value;
use thiserror::Error;

use crate::{BackendError, BackendInfo, Health};

/// One decision to make.
#[derive(Debug, Clone)]
pub struct DecideRequest {
    /// The validated policy.
    pub schema: ValidSchema,
    /// The state: a string, or any JSON value (written Python-style into the prompt).
    pub state: Value,
    /// Base seed (serving default 42); read `r` uses `seed + 7919·r`.
    pub seed: i64,
}

/// A finished decision.
#[derive(Debug, Clone)]
pub struct Decision {
    /// One entry per asked question in schema order; `None` = skipped by `ask_if`.
    pub answers: IndexMap<String, Option<AnswerOut>>,
    /// Decision-level diagnostics.
    pub diagnostics: Diagnostics,
}

/// Relative slack under which a stated answer still counts as the most
/// probable one (ties, and rounding in the sender's JSON).
const STATED_ANSWER_SLACK: f64 = 1e-6;

/// A reply entry that names its answer (`label`, `choice` or `level`) must name
/// the most probable alternative of its own `probabilities` (`dist`, in the
/// question's order): a reply whose stated answer contradicts its numbers is
/// malformed, not passed on (issue 38). A yes/no answer may be named `true` /
/// `false`.
fn check_stated_answer(
    q: &dgem_core::schema::Question,
    entry: &Value,
    dist: &[f64],
    path: &str,
) -> Result<(), EngineError> {
    // A Stage-2 answer (`resolved_by`) is the bigger model's choice over the
    // Stage-1 distribution it keeps; an abstention is not read as an answer.
    let resolved = entry.get("resolved_by").is_some_and(|v| !v.is_null());
    let abstained = entry.get("abstained").and_then(Value::as_bool) == Some(true);
    if resolved || abstained || entry.get("refusal").is_some_and(|v| !v.is_null()) {
        return Ok(());
    }
    let top = dist.iter().copied().fold(0.0_f64, f64::max);
    for key in ["label", "choice", "level"] {
        let Some(stated) = entry.get(key).and_then(Value::as_str) else {
            continue;
        };
        let boolean = q.kind == dgem_core::schema::QuestionKind::Boolean;
        let index =
            q.alternatives
                .iter()
                .position(|a| a.name == stated)
                .or(match (boolean, stated) {
                    (true, "true") => Some(0),
                    (true, "false") => Some(1),
                    _ => None,
                });
        let Some(i) = index else {
            return Err(malformed(
                &format!("{path}.{key}"),
                format!(
                    "names no alternative of the question (allowed: {}). Given: {stated}",
                    q.alternatives
                        .iter()
                        .map(|a| a.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        if dist.get(i).copied().unwrap_or(0.0) < top * (1.0 - STATED_ANSWER_SLACK) {
            return Err(malformed(
                &format!("{path}.{key}"),
                format!(
                    "states `{stated}` (probability {:.4}) but its own probabilities make another alternative more probable ({top:.4})",
                    dist.get(i).copied().unwrap_or(0.0)
                ),
            ));
        }
    }
    Ok(())
}

impl Decision {
    /// The `{answers, diagnostics}` envelope JSON (serving.md §8.1–8.2).
    pub fn envelope(&self) -> Value {
        dgem_core::envelope::envelope(&self.answers, &self.diagnostics)
    }

    /// The envelope's `answers` object, written from the typed answers.
    pub fn answers_json(&self) -> Value {
        dgem_core::envelope::answers_json(&self.answers)
    }

    /// The envelope's `diagnostics` object.
    pub fn diagnostics_json(&self) -> Value {
        serde_json::to_value(&self.diagnostics).unwrap_or(Value::Null)
    }

    /// The largest answer entropy, in nats: the maximum over the answers
    /// (skipped questions aside) of the entropy of each one's restricted
    /// softmax over its allowed labels; 0 when there is none. The
    /// diagnostics' whole-vocabulary entropy of the first token is never
    /// used: it is on another scale and would dwarf the answers'.
    pub fn max_entropy(&self) -> f64 {
        self.answers
            .values()
            .flatten()
            .map(|a| a.aggregate.entropy)
            .filter(|h| h.is_finite())
            .fold(0.0, f64::max)
    }
}

/// Why a decision could not be made.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum EngineError {
    /// The schema or state cannot be read by this model (user error).
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Tokenization or another core step failed.
    #[error(transparent)]
    Core(CoreError),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The backend cannot be driven by this engine path.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl From<CoreError> for EngineError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Schema(s) => Self::Schema(s),
            other => Self::Core(other),
        }
    }
}

impl EngineError {
    /// Whether the caller's input is at fault (exit code 1, HTTP 4xx) rather than
    /// the engine or model (exit code 2, HTTP 5xx).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Self::Schema(_) | Self::Backend(BackendError::InvalidRequest(_))
        )
    }
}

/// Something that makes whole decisions.
///
/// Implementations must be cheap to share behind an `Arc`, bounded (a full
/// queue is an error, not an unbounded wait) and must not block an async worker.
#[async_trait]
pub trait Decider: Send + Sync + std::fmt::Debug {
    /// Facts about the model behind this decider. `label_mode` is the mode in
    /// effect for decisions, not only the backend's default.
    fn info(&self) -> BackendInfo;

    /// Whether contextual calibration is applied to reads (Zhao et al. 2021).
    fn calibrates(&self) -> bool {
        false
    }

    /// Current health of the model behind this decider.
    async fn health(&self) -> Health {
        Health::Ready
    }

    /// While [`health`](Self::health) is [`Health::Starting`]: what it is
    /// doing now, in words (e.g. `waiting 253 s: the package index asked to
    /// retry later`), which `/health` shows as `detail`. `None` by default.
    fn starting_detail(&self) -> Option<String> {
        None
    }

    /// Make one decision.
    ///
    /// # Errors
    /// [`EngineError`]: `Schema` for input the caller must fix, `Backend` when
    /// the model or upstream fails (see `BackendError::is_retryable`).
    async fn decide(&self, req: DecideRequest) -> Result<Decision, EngineError>;
}

/// How far an upstream answer's probabilities may sum from 1 before the reply is
/// refused. Within it they are renormalized here (an upstream that rounds to
/// two decimals sums 0.99 or 1.01), and a sum further from 1 than
/// [`RENORMALIZED_RECORD_ABOVE`] is recorded in `diagnostics.renormalized`.
pub const PROBABILITY_SUM_TOLERANCE: f64 = 0.02;

/// Distance of a sum from 1 above which a renormalized answer is recorded in
/// `diagnostics.renormalized` (below it the difference is float rounding).
pub const RENORMALIZED_RECORD_ABOVE: f64 = 1e-6;

fn malformed(path: &str, what: String) -> EngineError {
    EngineError::Backend(BackendError::BadReply(format!(
        "decision reply at `{path}`: {what}"
    )))
}

/// The removed mass of a reply entry the policy's rules changed
/// (`constraint_mass_removed`), when it gives one in [0, 1].
fn constrained_of(entry: &Value) -> Option<f64> {
    entry
        .get("constraint_mass_removed")
        .and_then(Value::as_f64)
        .filter(|x| (0.0..=1.0).contains(x))
}

/// A `multi` reply entry: `p` holds each option's probability of applying,
/// in option order. The entry's `multi` list must be the selection those
/// probabilities give ([`dgem_core::multi::select`]).
///
/// # Errors
/// [`BackendError::BadReply`] at `<path>.multi` when the list is missing or
/// names another set.
fn multi_from_reply(
    q: &dgem_core::schema::Question,
    entry: &Value,
    p: &[f64],
    path: &str,
) -> Result<AnswerOut, EngineError> {
    let mut out = dgem_core::multi::collapse_probabilities(q, p);
    let stated: Option<Vec<&str>> = entry
        .get("multi")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect());
    let want = out.selected_names();
    if stated.as_ref() != Some(&want) {
        return Err(malformed(
            &format!("{path}.multi"),
            format!(
                "must list the options its probabilities select ({want:?}). Given: {}",
                entry
                    .get("multi")
                    .map_or_else(|| "nothing".into(), Value::to_string)
            ),
        ));
    }
    out.constrained = constrained_of(entry);
    Ok(out)
}

impl Decision {
    /// Read a decision back from its `{answers, diagnostics}` envelope (what
    /// [`Decision::envelope`] writes, and what a remote dgem or the original
    /// server answers), checked against the request's `schema`.
    ///
    /// Every asked question must have an entry (`null` = skipped, only for a
    /// question with `ask_if`);
    /// its `probabilities` must name exactly the question's alternatives (a
    /// yes/no answer may key them `true`/`false`), each a finite number in
    /// [0, 1], summing to 1 within [`PROBABILITY_SUM_TOLERANCE`] (then
    /// renormalized; a sum that was not 1 is recorded in
    /// `diagnostics.renormalized`); a `multi` answer's are each option's own
    /// probability, and its `multi` list must be the set they select. An entry with `refusal` (the upstream
    /// declined) is an abstention with that reason (`abstained`), over its
    /// probabilities when it gives them, else a uniform distribution.
    /// `stderr` and `agreement` are kept when present.
    /// Diagnostics keys the sender left out take their defaults.
    ///
    /// # Errors
    /// [`EngineError::Backend`] ([`BackendError::BadReply`], retryable on
    /// another replica) naming the path of the first value that breaks a rule.
    pub fn from_envelope(schema: &ValidSchema, envelope: &Value) -> Result<Decision, EngineError> {
        let answers_in = envelope
            .get("answers")
            .and_then(Value::as_object)
            .ok_or_else(|| malformed("answers", "missing or not an object".into()))?;
        let mut answers = IndexMap::new();
        let mut renormalized = IndexMap::new();
        for q in schema.asked() {
            let path = format!("answers.{}", q.id);
            let a = answers_in
                .get(&q.id)
                .ok_or_else(|| malformed(&path, "no answer for this question".into()))?;
            // An upstream that declines to answer (`refusal`: its reason) gives
            // an abstention with that reason, not a malformed reply; with no
            // probabilities the distribution is uniform.
            let refusal = a.get("refusal").filter(|r| !r.is_null()).map(|r| {
                format!(
                    "the upstream refused: {}",
                    r.as_str().map_or_else(|| r.to_string(), str::to_string)
                )
            });
            if refusal.is_some() && a.get("probabilities").is_none_or(Value::is_null) {
                let k = q.alternatives.len().max(1);
                let mut out = if q.kind == dgem_core::schema::QuestionKind::Multi {
                    // Every option at even odds, and nothing selected.
                    let mut out = dgem_core::multi::collapse_probabilities(q, &vec![0.5; k]);
                    if let Some(m) = out.multi.as_mut() {
                        m.selected.clear();
                    }
                    out
                } else {
                    AnswerOut::new(
                        q.clone(),
                        q.alternatives.iter().map(|alt| alt.name.clone()).collect(),
                        dgem_core::readout::aggregate(&[vec![1.0 / k as f64; k]]),
                    )
                };
                out.abstained = refusal;
                answers.insert(q.id.clone(), Some(out));
                continue;
            }
            if a.is_null() {
                // Only a question with `ask_if` can be skipped: a `null` for any
                // other is a reply that left the question unanswered.
                if q.ask_if.is_empty() {
                    return Err(malformed(
                        &path,
                        "null (skipped), but this question has no `ask_if` and cannot be skipped"
                            .into(),
                    ));
                }
                answers.insert(q.id.clone(), None);
                continue;
            }
            let probs = a
                .get("probabilities")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    malformed(
                        &format!("{path}.probabilities"),
                        "missing or not an object".into(),
                    )
                })?;
            let boolean = q.kind == dgem_core::schema::QuestionKind::Boolean;
            let mut dist = Vec::with_capacity(q.alternatives.len());
            for (i, alt) in q.alternatives.iter().enumerate() {
                let alias = if boolean {
                    Some(if i == 0 { "true" } else { "false" })
                } else {
                    None
                };
                let v = probs
                    .get(&alt.name)
                    .or_else(|| alias.and_then(|k| probs.get(k)))
                    .ok_or_else(|| {
                        malformed(
                            &format!("{path}.probabilities"),
                            format!(
                                "no probability for '{}' (allowed keys: {})",
                                alt.name,
                                q.alternatives
                                    .iter()
                                    .map(|a| a.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?;
                let p = v
                    .as_f64()
                    .filter(|p| p.is_finite() && (0.0..=1.0).contains(p));
                let p = p.ok_or_else(|| {
                    malformed(
                        &format!("{path}.probabilities.{}", alt.name),
                        format!("must be a number in [0, 1]. Given: {v}"),
                    )
                })?;
                dist.push(p);
            }
            if probs.len() != dist.len() {
                return Err(malformed(
                    &format!("{path}.probabilities"),
                    format!(
                        "{} keys for {} alternatives",
                        probs.len(),
                        q.alternatives.len()
                    ),
                ));
            }
            if q.kind == dgem_core::schema::QuestionKind::Multi {
                // Each option's own probability of applying: no sum to check.
                let mut out = multi_from_reply(q, a, &dist, &path)?;
                out.abstained = refusal;
                answers.insert(q.id.clone(), Some(out));
                continue;
            }
            let sum: f64 = dist.iter().sum();
            if (sum - 1.0).abs() > PROBABILITY_SUM_TOLERANCE {
                return Err(malformed(
                    &format!("{path}.probabilities"),
                    format!(
                        "must sum to 1 (within {PROBABILITY_SUM_TOLERANCE}). Given: a sum of {sum}"
                    ),
                ));
            }
            if (sum - 1.0).abs() > RENORMALIZED_RECORD_ABOVE {
                renormalized.insert(q.id.clone(), sum);
            }
            dist.iter_mut().for_each(|p| *p /= sum);
            check_stated_answer(q, a, &dist, &path)?;
            let mut aggregate = dgem_core::readout::aggregate(&[dist]);
            aggregate.stderr = a.get("stderr").and_then(Value::as_f64);
            aggregate.agreement = a.get("agreement").and_then(Value::as_f64);
            let mut out = AnswerOut::new(
                q.clone(),
                q.alternatives.iter().map(|alt| alt.name.clone()).collect(),
                aggregate,
            );
            out.abstained = refusal;
            out.constrained = constrained_of(a);
            answers.insert(q.id.clone(), Some(out));
        }
        let mut diagnostics: Diagnostics = match envelope.get("diagnostics") {
            None | Some(Value::Null) => Diagnostics::default(),
            Some(d) => serde_json::from_value(d.clone())
                .map_err(|e| malformed("diagnostics", e.to_string()))?,
        };
        diagnostics.renormalized.extend(renormalized);
        Ok(Decision {
            answers,
            diagnostics,
        })
    }
}
