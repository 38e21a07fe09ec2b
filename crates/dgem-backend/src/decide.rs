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
pub enum DecideError {
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

impl From<CoreError> for DecideError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Schema(s) => Self::Schema(s),
            other => Self::Core(other),
        }
    }
}

impl DecideError {
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
    /// [`DecideError`]: `Schema` for input the caller must fix, `Backend` when
    /// the model or upstream fails (see `BackendError::is_retryable`).
    async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError>;
}

fn malformed(path: &str, what: String) -> DecideError {
    DecideError::Backend(BackendError::BadReply(format!(
        "decision reply at `{path}`: {what}"
    )))
}

impl Decision {
    /// Read a decision back from its `{answers, diagnostics}` envelope (what
    /// [`Decision::envelope`] writes, and what a remote dgem or the original
    /// server answers), checked against the request's `schema`.
    ///
    /// Every asked question must have an entry, read by its type
    /// ([`dgem_core::kinds::reply::answer_from_reply`]: `null` = skipped, only
    /// for a question with `ask_if`; probabilities naming exactly the
    /// question's alternatives, summing to 1 within
    /// [`dgem_core::kinds::reply::PROBABILITY_SUM_TOLERANCE`] for a type that
    /// picks one, then
    /// renormalized, a sum that was not 1 being recorded in
    /// `diagnostics.renormalized`; `refusal` read as an abstention).
    /// Diagnostics keys the sender left out take their defaults.
    ///
    /// # Errors
    /// [`DecideError::Backend`] ([`BackendError::BadReply`], retryable on
    /// another replica) naming the path of the first value that breaks a rule.
    pub fn from_envelope(schema: &ValidSchema, envelope: &Value) -> Result<Decision, DecideError> {
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
            let read = dgem_core::kinds::reply::answer_from_reply(q, a)
                .map_err(|f| malformed(&format!("{path}{}", f.field), f.message))?;
            if let Some(sum) = read.renormalized {
                renormalized.insert(q.id.clone(), sum);
            }
            answers.insert(q.id.clone(), read.answer);
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
