//! # dgem-testkit
//!
//! Dev-only helpers (`publish = false`, used from `[dev-dependencies]` only): a
//! deterministic [`ScriptedBackend`] over a whitespace/punctuation
//! [`ToyTokenizer`], so the engine and the server can be tested end to end
//! without a model. It is causal by default; [`ScriptedBackend::bidirectional`]
//! makes a scripted masked LM that the engine reads jointly. The label probabilities of every slot come from a closure
//! that sees the text before the slot and the label words, so a test can make
//! the answer depend on the state. The backend can fail the next N calls, sleep
//! to simulate a slow read, and counts its calls.
//!
//! [`gguf`] writes GGUF files: headers for store and header-reader tests, and
//! [`gguf::tiny`] models of several architectures that llama.cpp loads and runs.
//!
//! ```
//! use dgem_testkit::{ScriptedBackend, scripts};
//! let backend = ScriptedBackend::new(scripts::want_marker(0.8));
//! let engine = dgem_testkit::engine(backend.clone());
//! assert_eq!(backend.calls(), 0);
//! # drop(engine);
//! ```
#![allow(clippy::missing_panics_doc)]

pub mod gguf;
mod tokenizer;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dgem_backend::{
    Attention, Backend, BackendError, BackendInfo, ForwardOutput, ForwardStats, LabelMode,
    SequenceRead, SlotLogits, VocabRead,
};
use dgem_core::tokenizer::Tokenizer;
use dgem_engine::{CalibrationMode, Engine, EngineConfig};

pub use tokenizer::ToyTokenizer;

/// What a script sees for one slot.
#[derive(Debug, Clone)]
pub struct SlotContext {
    /// The decoded text before the slot (prompt, state and question block).
    pub prefix: String,
    /// The label words of the slot, in alternative order (`yes`, `billing`, …):
    /// the text of each label's first token id.
    pub labels: Vec<String>,
}

/// A script: the probability of each label of a slot (need not sum to 1; the
/// rest is the vocabulary mass outside the labels).
pub type Script = dyn Fn(&SlotContext) -> Vec<f64> + Send + Sync;

/// A causal backend whose label probabilities come from a [`Script`].
pub struct ScriptedBackend {
    tok: Arc<ToyTokenizer>,
    info: BackendInfo,
    script: Box<Script>,
    calls: AtomicUsize,
    fail_next: AtomicUsize,
    delay_ms: AtomicU64,
}

impl std::fmt::Debug for ScriptedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedBackend")
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

impl ScriptedBackend {
    /// A backend with a 4096-token context running `script`.
    pub fn new(script: impl Fn(&SlotContext) -> Vec<f64> + Send + Sync + 'static) -> Arc<Self> {
        Self::with_context(4096, script)
    }

    /// A backend with a context of `max_tokens` running `script`.
    pub fn with_context(
        max_tokens: usize,
        script: impl Fn(&SlotContext) -> Vec<f64> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Self::build("scripted", "toy", Attention::Causal, max_tokens, script)
    }

    /// A **bidirectional** backend (a scripted masked LM) with a 4096-token
    /// context: the engine reads it jointly, every slot of a group from one
    /// canvas, and the script sees the text before each slot position.
    pub fn bidirectional(
        script: impl Fn(&SlotContext) -> Vec<f64> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Self::build(
            "scripted-bidirectional",
            "toy-mlm",
            Attention::Bidirectional,
            4096,
            script,
        )
    }

    fn build(
        runtime: &str,
        model_id: &str,
        attention: Attention,
        max_tokens: usize,
        script: impl Fn(&SlotContext) -> Vec<f64> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            tok: Arc::new(ToyTokenizer::default()),
            info: BackendInfo {
                runtime: runtime.into(),
                model_id: model_id.into(),
                model_sha256: None,
                attention,
                label_mode: LabelMode::Words,
                max_tokens,
                supports_images: false,
                canvas: None,
                chat_turns: dgem_core::prompt::ChatTurns::gemma(),
            },
            script: Box::new(script),
            calls: AtomicUsize::new(0),
            fail_next: AtomicUsize::new(0),
            delay_ms: AtomicU64::new(0),
        })
    }

    /// Number of `forward` calls so far (failed ones included).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Make the next `n` calls fail with [`BackendError::Model`].
    pub fn fail_next(&self, n: usize) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    /// Sleep this long inside every `forward` call (a slow read).
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// The toy tokenizer this backend reads with.
    pub fn toy_tokenizer(&self) -> &ToyTokenizer {
        &self.tok
    }

    /// The script's probabilities are shares of the whole vocabulary: their
    /// logs are the labels' log-probabilities up to a constant (what
    /// [`SlotLogits::label_logprobs`] allows) and, when asked, the full ones.
    fn read_slot(
        &self,
        tokens: &[u32],
        pos: usize,
        labels: &[Vec<u32>],
        vocab: bool,
    ) -> SlotLogits {
        let ctx = SlotContext {
            prefix: self.tok.decode(&tokens[..pos.min(tokens.len())]),
            labels: labels
                .iter()
                .map(|l| self.tok.decode(&l[..l.len().min(1)]).trim().to_string())
                .collect(),
        };
        let probs = (self.script)(&ctx);
        let label_logprobs: Vec<f64> = (0..labels.len())
            .map(|i| probs.get(i).copied().unwrap_or(1e-6).max(1e-12).ln())
            .collect();
        SlotLogits {
            vocab: vocab.then(|| VocabRead {
                label_logprobs: label_logprobs.clone(),
                entropy: 3.0,
                argmax_token: labels.first().and_then(|l| l.first()).copied().unwrap_or(0),
            }),
            label_logprobs,
        }
    }
}

#[async_trait]
impl Backend for ScriptedBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        self.tok.clone()
    }

    async fn forward(&self, reads: Vec<SequenceRead>) -> Result<ForwardOutput, BackendError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let failing = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(BackendError::Model("scripted failure".into()));
        }
        let prompt_tokens = reads.iter().map(|r| r.tokens.len()).sum();
        let sequences = reads
            .iter()
            .map(|r| {
                r.slots
                    .iter()
                    .map(|s| self.read_slot(&r.tokens, s.pos, &s.labels, s.vocab))
                    .collect()
            })
            .collect();
        Ok(ForwardOutput {
            sequences,
            stats: ForwardStats {
                queue_ms: 0.0,
                forward_ms: 1.0,
                prompt_tokens,
                cached_tokens: 0,
            },
        })
    }
}

/// An engine over `backend` with calibration and option-order debiasing
/// off, so answers are the script's, read once in the policy's own order.
pub fn engine(backend: Arc<ScriptedBackend>) -> Engine {
    Engine::new(
        backend,
        EngineConfig {
            calibration: CalibrationMode::Off,
            order_debias: dgem_core::order::OrderDebias::Off,
            ..EngineConfig::default()
        },
    )
}

/// Ready-made scripts.
pub mod scripts {
    use super::SlotContext;

    /// Puts `p` on the label named `word` and spreads `1 - p` over the others.
    pub fn favour(word: &'static str, p: f64) -> impl Fn(&SlotContext) -> Vec<f64> + Send + Sync {
        move |ctx| spread(ctx, |l| l == word, p)
    }

    /// Looks for a marker `want_<label>` in the text before the slot (the state)
    /// and puts `p` on that label; with no marker for this slot's labels, uniform.
    /// Every request thereby has its own, predictable answer.
    pub fn want_marker(p: f64) -> impl Fn(&SlotContext) -> Vec<f64> + Send + Sync {
        move |ctx| {
            let wanted = ctx
                .labels
                .iter()
                .find(|l| ctx.prefix.contains(&format!("want_{l}")))
                .cloned();
            match wanted {
                Some(w) => spread(ctx, |l| l == w, p),
                None => vec![1.0 / ctx.labels.len().max(1) as f64; ctx.labels.len()],
            }
        }
    }

    fn spread(ctx: &SlotContext, is_target: impl Fn(&str) -> bool, p: f64) -> Vec<f64> {
        let k = ctx.labels.len().max(2) as f64;
        ctx.labels
            .iter()
            .map(|l| {
                if is_target(l) {
                    p
                } else {
                    (1.0 - p) / (k - 1.0)
                }
            })
            .collect()
    }
}
