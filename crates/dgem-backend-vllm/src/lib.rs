//! # dgem-backend-vllm
//!
//! The production reader: vLLM serving DiffusionGemma, driven over HTTP exactly
//! as serving.md §4–7 describe. [`VllmDecider`] implements the decision-level
//! seam [`dgem_backend::Decider`], so `dgem serve`, MCP and the gateway use it
//! like the embedded engine.
//!
//! Place in the dependency graph: `dgem-core` (prompts, slots, seeded canvas,
//! readout, the shared stage walker) and `dgem-backend` (the `Decider` seam,
//! errors, health) ← **this crate** ← `dgem-cli`; it does not depend on the
//! embedded engine. No llama.cpp here: the tokenizer is any
//! [`dgem_core::tokenizer::Tokenizer`] — [`HfTokenizer`] over a `tokenizer.json`,
//! or the CLI's GGUF vocabulary (the same 262,144-token Gemma vocabulary).
//!
//! Per read: the answer template is resolved (§4.6), a canvas of width
//! `ceil((len+1)/16)·16` is seeded with Python-exact random slot tokens (§4.7),
//! and one request carries it in `vllm_xargs` with the label ids in
//! `logprob_token_ids` (§5). The returned top logprobs become one restricted
//! softmax per slot, a missing label getting `min(top) − 5` (§6.1); reads are
//! averaged with the fixed or `"auto"` policy (§6.3–6.4).
//!
//! ```no_run
//! # async fn demo(tok: std::sync::Arc<dyn dgem_core::tokenizer::Tokenizer>) -> Result<(), Box<dyn std::error::Error>> {
//! use dgem_backend_vllm::{VllmConfig, VllmDecider};
//! let decider = VllmDecider::new(VllmConfig::new("http://127.0.0.1:8000"), tok)?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod client;
mod config;
mod decide;
mod group;
mod listing;
mod tokenizer;
pub mod wire;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use dgem_backend::{Attention, BackendInfo, Health};
use dgem_backend::{DecideError, DecideRequest, Decider, Decision};
use dgem_core::labels::LabelMode;
use dgem_core::tokenizer::{TokenId, Tokenizer};

pub use config::{
    CanvasProfile, DiffusionTokens, VllmConfig, VllmError, DEFAULT_CANVAS_STEP, GROUP_SEED_STRIDE,
    LOGPROB_TOKEN_IDS_MAX, MAX_PARALLEL, READ_SEED_STRIDE, TOP_LOGPROBS,
};
pub use tokenizer::HfTokenizer;

/// The thought scaffold, tokenized once (serving.md §4.5).
#[derive(Debug, Clone)]
struct Scaffold {
    open: Vec<TokenId>,
    close: Vec<TokenId>,
    /// `enc(open_text + close_text)`: the empty thought a plain read starts with.
    full: Vec<TokenId>,
}

/// Decisions read from vLLM serving DiffusionGemma. Cheap to share behind an `Arc`.
pub struct VllmDecider {
    cfg: VllmConfig,
    client: client::VllmClient,
    tok: Arc<dyn Tokenizer>,
    scaffold: Scaffold,
    mode: LabelMode,
    info: BackendInfo,
}

impl std::fmt::Debug for VllmDecider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VllmDecider")
            .field("base_url", &self.cfg.base_url)
            .field("served_model", &self.cfg.served_model)
            .finish_non_exhaustive()
    }
}

impl VllmDecider {
    /// A decider for vLLM at `cfg.base_url`, tokenizing with `tok` (which must
    /// be the served model's vocabulary). Nothing is sent until the first decision.
    ///
    /// # Errors
    /// [`VllmError::Config`] for a setting out of range, [`VllmError::Tokenizer`]
    /// when the thought scaffold cannot be tokenized.
    pub fn new(cfg: VllmConfig, tok: Arc<dyn Tokenizer>) -> Result<Self, VllmError> {
        cfg.validate()?;
        let enc = |text: &str| {
            tok.encode(text).map_err(|e| VllmError::Tokenizer {
                path: "(scaffold)".into(),
                reason: e.to_string(),
            })
        };
        let t = &cfg.tokens;
        let scaffold = Scaffold {
            open: enc(&t.thought_open)?,
            close: enc(&t.thought_close)?,
            full: enc(&format!("{}{}", t.thought_open, t.thought_close))?,
        };
        if [scaffold.open.as_slice(), &scaffold.close].concat() != scaffold.full {
            // The original server asserts this; a vocabulary without the channel
            // tokens merges across the seam. Reads still work; thoughts may shift.
            tracing::warn!("thought open + close do not tokenize to the scaffold");
        }
        let info = BackendInfo {
            runtime: "vllm".into(),
            model_id: cfg.served_model.clone(),
            model_sha256: None,
            attention: Attention::Bidirectional,
            label_mode: LabelMode::Letters,
            max_tokens: cfg.canvas_len,
            // Image parts go to vLLM as chat content parts (serving.md §7.5).
            supports_images: true,
            canvas: Some(dgem_backend::CanvasInfo {
                length: cfg.canvas_len,
                step: cfg.canvas_step,
                profile: cfg.profile.map(|p| p.name().to_owned()),
            }),
            chat_turns: dgem_core::prompt::ChatTurns::gemma(),
        };
        Ok(Self {
            client: client::VllmClient::new(&cfg)?,
            cfg,
            tok,
            scaffold,
            mode: LabelMode::Letters,
            info,
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &VllmConfig {
        &self.cfg
    }
}

#[async_trait]
impl Decider for VllmDecider {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    async fn health(&self) -> Health {
        self.client.health().await
    }

    #[tracing::instrument(skip_all, fields(engine = "vllm", questions = req.schema.questions.len(), total_ms))]
    async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError> {
        // A policy that reads an image is refused without one, before any read.
        dgem_core::images::check_required(&req.schema, &req.state)?;
        let started = Instant::now();
        let out = if dgem_backend::shape::shapes(&req.schema) {
            // Multi questions go upstream as yes/no questions; rules apply
            // to the answers that come back.
            dgem_backend::shape::decide(self, req).await
        } else if dgem_backend::brackets::routes(&req.schema) {
            // Wider choices are answered in bracket rounds of ordinary decisions.
            dgem_backend::brackets::decide(self, req).await
        } else {
            decide::decide(self, req).await
        };
        let ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::Span::current().record("total_ms", ms);
        match &out {
            Ok(d) => tracing::info!(
                total_ms = ms,
                reads = d.diagnostics.timing.reads,
                "decision done"
            ),
            Err(e) => tracing::warn!(total_ms = ms, error = %e, "decision failed"),
        }
        out
    }
}
