//! # dgem-backend
//!
//! The two seams between dgem and a model. [`Backend`] is token level: a backend
//! is handed token sequences with answer **slots** and returns, for each slot,
//! the log-probability of every allowed label (the engine then applies the
//! restricted softmax over a question's labels). [`Decider`] is decision level:
//! a validated policy and a state in, a [`Decision`] out; the embedded engine,
//! the vLLM reader and remote dgem clients all implement it.
//!
//! Depends on `dgem-core` only. Implementations: `dgem-backend-llama` (embedded
//! GGUF models on CPU through llama.cpp), vLLM/DiffusionGemma and remote dgem.
//!
//! ```
//! use dgem_backend::{SlotQuery, SequenceRead};
//! let read = SequenceRead { tokens: vec![2, 100, 200], slots: vec![SlotQuery { pos: 2, labels: vec![vec![7], vec![9]], vocab: false }], reuse_points: Vec::new(), policy_point: None };
//! assert_eq!(read.slots[0].labels.len(), 2);
//! ```
#![deny(missing_docs)]

pub mod body;
pub mod brackets;
mod decide;
mod error;
pub mod shape;
pub mod walker;

use std::sync::Arc;

use async_trait::async_trait;
use dgem_core::prompt::ChatTurns;
use dgem_core::tokenizer::{TokenId, Tokenizer};
use serde::Serialize;

pub use dgem_core::labels::LabelMode;

pub use decide::{DecideError, DecideRequest, Decider, Decision};
pub use error::BackendError;

/// How the model sees a sequence, which decides how the engine lays slots out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Attention {
    /// Every position sees every other (DiffusionGemma, masked LMs): all slots of
    /// a canvas are read jointly in one pass.
    Bidirectional,
    /// Position `p` sees only `< p` (Gemma 3 base): a slot's distribution is the
    /// next-token prediction from the position before it.
    Causal,
}

/// Static facts about a backend.
#[derive(Debug, Clone, Serialize)]
pub struct BackendInfo {
    /// The runtime that runs the model, e.g. `llama.cpp` or `vllm`: written
    /// `engine` on the wire (`/health`, the original server's name for it).
    #[serde(rename = "engine")]
    pub runtime: String,
    /// Model id, e.g. `gemma-3-270m-q4_k_m`.
    pub model_id: String,
    /// sha256 of the model file, hex, when known.
    pub model_sha256: Option<String>,
    /// Attention pattern of the model.
    pub attention: Attention,
    /// Default label mode for this backend.
    pub label_mode: LabelMode,
    /// Longest sequence (tokens) one read may hold.
    pub max_tokens: usize,
    /// Whether image parts in a state can be read.
    pub supports_images: bool,
    /// The served canvas of a backend that reads on a fixed-width canvas
    /// (vLLM); `None` for the others. `/health` reports it.
    pub canvas: Option<CanvasInfo>,
    /// The model's chat seams around the prompt's user text: the engine
    /// builds every prompt with them ([`dgem_core::prompt::chat_prompt`]).
    /// Gemma's for DiffusionGemma and the small embedded model (Gemma 3
    /// 270M); the embedded backend derives them from the GGUF's chat
    /// template. Not serialized.
    #[serde(skip)]
    pub chat_turns: ChatTurns,
}

/// The canvas a backend reads on: its length decides where a wide schema is
/// split into several reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CanvasInfo {
    /// Served canvas length, tokens.
    pub length: usize,
    /// Request widths are rounded up to a multiple of this, tokens.
    pub step: usize,
    /// The deployment profile the length came from (`plain`, `l4`,
    /// `rtxpro6000`), or `None` when the length was given explicitly.
    pub profile: Option<String>,
}

/// One slot to read: the position whose token distribution we want, and the
/// token ids that stand for each label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotQuery {
    /// Position in the sequence (0-based) of the answer token. For a causal model
    /// the distribution comes from the logits at `pos - 1`; `pos` may equal the
    /// sequence length (the token to be written next).
    pub pos: usize,
    /// For each label (in alternative order), one or more token ids whose
    /// probabilities are pooled (summed) — e.g. `▁billing` and `billing`.
    pub labels: Vec<Vec<TokenId>>,
    /// Also read the full-vocabulary distribution at this slot
    /// ([`SlotLogits::vocab`]): each label's share of the whole vocabulary,
    /// its entropy and argmax. Needed by sequence scoring (which sums
    /// normalized log-probabilities over an option's tokens) and by the
    /// `label_mass` / vocabulary-entropy diagnostics; without it a backend may
    /// compute the logits of the label tokens only, which is much cheaper on a
    /// 262,144-token vocabulary. It never changes
    /// [`SlotLogits::label_logprobs`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vocab: bool,
}

/// One sequence to run through the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SequenceRead {
    /// Full token sequence, BOS included when the model uses one.
    pub tokens: Vec<TokenId>,
    /// Slots to read in this sequence.
    pub slots: Vec<SlotQuery>,
    /// Prefix lengths (token counts, sorted) that later reads are expected to
    /// share with this one — where a policy's shared prompt ends, where the
    /// head of a JSON state after it ends (`{"ticket": "`), where the
    /// state ends and where the question block's head after it ends (the
    /// questions of one decision read apart share both), where the model's
    /// turn starts when later stages of a chained policy prefill it. A hint
    /// for a backend with a prefix cache: it may end a decode exactly there,
    /// so a later read with the same tokens up to that point reuses the
    /// whole prefix (the embedded backend also decodes from the last point
    /// to the slots in one batch). The embedded backend's bits depend
    /// on how a prompt is split into decodes, so the same read with the same
    /// points always gives the same bits, and points must be a function of the
    /// request alone. Empty: no hint.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reuse_points: Vec<usize>,
    /// The last of `reuse_points` that every decision of the policy on a
    /// state of the same shape shares (a token count), under `schema_first`:
    /// the end of the policy's own text, or, when the state is a JSON object,
    /// the end of the state's head after it (its brace, first key and the
    /// quote that opens a string value where the tokenizer writes it apart,
    /// `{"ticket": "`). A backend may keep the prefixes up to it between
    /// processes (the embedded backend writes the KV state at each reuse
    /// point up to it to disk). `None`
    /// when the read begins with nothing a policy alone fixes, e.g. under
    /// `document_first`, whose state comes first; its other reuse points (the
    /// state's end, the head's end, the model's turn) are then kept in memory
    /// only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_point: Option<usize>,
}

/// The model's reading of one slot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotLogits {
    /// Per label: natural log of its probability **among the slot's labels**,
    /// up to one additive constant per slot (the engine takes their restricted
    /// softmax). The embedded backend returns the restricted log-softmax: a
    /// label's logit is the log-sum-exp of its token ids' logits, minus the
    /// log-sum-exp over all labels (≤ 0, the `exp`s sum to 1). `-inf` is not
    /// allowed: a backend clamps to a finite floor.
    pub label_logprobs: Vec<f64>,
    /// The full-vocabulary reading, when the query asked for it
    /// ([`SlotQuery::vocab`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vocab: Option<VocabRead>,
}

/// A slot read over the whole vocabulary (the full softmax of the output head).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VocabRead {
    /// Per label: natural log of the pooled full-vocabulary softmax
    /// probability (≤ 0; the `exp`s sum to the label mass, at most 1),
    /// clamped to a finite floor.
    pub label_logprobs: Vec<f64>,
    /// Entropy of the full-vocabulary distribution at the slot, in nats.
    pub entropy: f64,
    /// The most probable token id over the full vocabulary.
    pub argmax_token: TokenId,
}

/// Timing and token accounting of one [`Backend::forward`] call.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ForwardStats {
    /// Time spent waiting in the backend's queue, ms.
    pub queue_ms: f64,
    /// Time spent in the model, ms.
    pub forward_ms: f64,
    /// Tokens in all sequences of the call.
    pub prompt_tokens: usize,
    /// Tokens whose KV state was reused from a cache instead of recomputed.
    pub cached_tokens: usize,
}

/// The result of one [`Backend::forward`] call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForwardOutput {
    /// One entry per input sequence, each with one [`SlotLogits`] per slot, in order.
    pub sequences: Vec<Vec<SlotLogits>>,
    /// Timing and token accounting.
    pub stats: ForwardStats,
}

/// Health of a backend or a decider, for `/health`, readiness probes and the
/// gateway's cold-start holds.
///
/// `Starting` means "on its way to ready: worth waiting for" (a request may be
/// held); `Failed` means "broken: nothing to wait for" (fail over at once).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Loaded and serving.
    Ready,
    /// Still starting; the phase says what it is doing.
    Starting {
        /// Phase name, e.g. `loading_model`, `staging_tmpfs`, `scaled_to_zero`.
        phase: String,
        /// Weights staged so far during a cold start (GB), when reported.
        #[serde(skip_serializing_if = "Option::is_none")]
        bytes_staged_gb: Option<f64>,
    },
    /// Broken; the reason says why.
    Failed {
        /// Phase name: [`Health::FAILED`], `unreachable`, or the one a remote
        /// server reported (`warmup_failed`).
        phase: String,
        /// Human-readable reason.
        reason: String,
    },
}

impl Health {
    /// The phase of a ready backend.
    pub const READY: &'static str = "ready";
    /// The phase of a backend that failed without naming a phase of its own.
    pub const FAILED: &'static str = "failed";

    /// Starting in `phase`, with no staging progress.
    pub fn starting(phase: impl Into<String>) -> Self {
        Self::Starting {
            phase: phase.into(),
            bytes_staged_gb: None,
        }
    }

    /// Failed in phase [`Health::FAILED`] for `reason`.
    pub fn failed(reason: impl Into<String>) -> Self {
        Self::Failed {
            phase: Self::FAILED.into(),
            reason: reason.into(),
        }
    }

    /// The phase name (`ready` when ready).
    pub fn phase(&self) -> &str {
        match self {
            Self::Ready => Self::READY,
            Self::Starting { phase, .. } | Self::Failed { phase, .. } => phase,
        }
    }

    /// Whether it serves now.
    pub fn is_ready(&self) -> bool {
        matches!(self, Self::Ready)
    }

    /// Whether it is on its way to ready (a request is worth holding for it).
    pub fn is_warming(&self) -> bool {
        matches!(self, Self::Starting { .. })
    }

    /// Whether it is broken (nothing to wait for).
    pub fn is_failed(&self) -> bool {
        matches!(self, Self::Failed { .. })
    }
}

/// A model that reads label probabilities at answer slots.
///
/// Implementations must be cheap to share (`Arc<dyn Backend>`), bounded (a full
/// queue is [`BackendError::Overloaded`], not an unbounded wait) and must never
/// run the model on an async worker thread.
#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Static facts about this backend.
    fn info(&self) -> &BackendInfo;

    /// The tokenizer of the model's vocabulary (for prompt building and slot resolution).
    fn tokenizer(&self) -> Arc<dyn Tokenizer>;

    /// Read every slot of every sequence.
    ///
    /// # Errors
    /// [`BackendError`] when the model fails, the queue is full, the sequence is
    /// too long or a slot position is out of range.
    async fn forward(&self, reads: Vec<SequenceRead>) -> Result<ForwardOutput, BackendError>;

    /// Current health. Defaults to [`Health::Ready`].
    async fn health(&self) -> Health {
        Health::Ready
    }
}
