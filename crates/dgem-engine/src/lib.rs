//! # dgem-engine
//!
//! Orchestration of one decision: a [`ValidSchema`] and a state go in; every
//! asked question comes out with a probability per allowed answer, its entropy
//! (nats) and hesitation (normalized entropy), plus the diagnostics of serving.md §8.2.
//!
//! The engine sees only `Arc<dyn Backend>`. For a **causal** backend (the
//! embedded Gemma 3) each question is read as a cloze after its group's prompt
//! (`slot_reading = "cloze"`): one sequence per question (or, when its options
//! share a first token, one per option, scored by the log-likelihood of the whole
//! option), all sharing the prompt prefix, sent together so the backend reuses
//! the prefix KV cache. Questions marked `alone` (by the schema or by `isolate`)
//! get a prompt of their own; under `isolate: "auto"` with `document_first`
//! (the built-in layout; a model's catalogue entry may choose another), and
//! under `"all"`, every question of a schema that is not
//! chained does, its prompt going on from the KV prefix of the state and the
//! question block's head
//! ([`dgem_core::schema::ValidSchema::with_questions_apart`]), so that an
//! answer does not depend on which other questions were asked. Later stages
//! (`depends_on`) see earlier answers
//! prefilled in the model's turn. [`Engine::plan`] resolves all of this without
//! running the model. Because a
//! causal read is deterministic, extra samples permute the order in which
//! alternatives are listed (seeded), so `agreement` and `stderr` measure
//! option-order sensitivity rather than repeating one number. Contextual
//! calibration (Zhao et al. 2021) divides each read by the distribution the same
//! read gives on content-free states; those priors are cached by token sequence.
//!
//! ```no_run
//! # async fn demo(backend: std::sync::Arc<dyn dgem_backend::Backend>, schema: dgem_core::schema::ValidSchema) {
//! use dgem_engine::{Engine, EngineConfig, DecideRequest};
//! let engine = Engine::new(backend, EngineConfig::default());
//! let decision = engine.decide(DecideRequest { schema, state: serde_json::json!({"ticket": "help"}), seed: 42 }).await;
//! # }
//! ```
#![deny(missing_docs)]

pub mod builtin;
mod calibration;
mod cloze;
mod decider;
mod joint;
mod plan;
pub mod policy_prior;
mod temperature;
pub mod templates;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use dgem_backend::{Attention, Backend};
use dgem_core::labels::LabelMode;
use dgem_core::schema::ValidSchema;
use dgem_core::tokenizer::{TokenId, Tokenizer};

pub use calibration::{CalibrationMode, CONTENT_FREE_STATES};
pub use dgem_backend::{DecideError, DecideRequest, Decider, Decision};
pub use plan::{Plan, PlannedBrackets, PlannedGroup, PlannedSlot};
pub use temperature::ModelTemperature;

/// Engine settings.
///
/// For a **bidirectional** backend every group of questions is read jointly
/// from one canvas (`slot_reading = "joint"`, see the `joint` module); for a
/// causal one each question is read as a cloze.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Label mode; `None` uses the backend's default.
    pub label_mode: Option<LabelMode>,
    /// Contextual calibration; `Auto` turns it on for a causal backend (word or letter labels).
    pub calibration: CalibrationMode,
    /// A plain-words note copied into every decision's diagnostics (e.g. that the
    /// embedded model is near chance).
    pub note: Option<String>,
    /// Calibration priors kept in the cache (entries).
    pub calibration_cache_entries: usize,
    /// JSON file that keeps calibration priors between runs (one per model), if any.
    pub calibration_store: Option<std::path::PathBuf>,
    /// Canvas rows of a joint read on a bidirectional backend: the answer
    /// template plus the end-of-turn token must fit (default 128; a group that
    /// does not fit is split, as `chunk_rows` does).
    pub canvas_len: usize,
    /// Ask the backend for the full-vocabulary reading of every slot, so the
    /// diagnostics carry `label_mass`, `argmax_is_label` and the vocabulary
    /// entropy. Off by default: the embedded backend then computes the logits
    /// of the label tokens only (the final hidden state times their rows of
    /// the output matrix) instead of the whole 262,144-row output head. It
    /// never changes an answer's probabilities.
    pub vocab_diagnostics: bool,
    /// Option-order debiasing of a cloze read ([`dgem_core::order`]): by
    /// default each question is read with its options in a canonical order
    /// and its cyclic rotations (at most
    /// [`dgem_core::order::DEFAULT_MAX_ORDERS`]), pooled by geometric mean,
    /// so the answer does not depend on the order a policy lists them in.
    /// Costs one prompt per listing (the state's tokens are shared).
    pub order_debias: dgem_core::order::OrderDebias,
    /// Temperatures shipped for this model, applied to every decision after
    /// the read ([`ModelTemperature`]); `None` applies none.
    pub model_temperature: Option<ModelTemperature>,
    /// The layout this model reads best, used for a policy whose layout no
    /// one stated ([`dgem_core::schema::ValidSchema::layout_stated`]: not
    /// the policy, the request or the deployment); `None` keeps the built-in
    /// default. From the model's catalogue entry (docs/models.md).
    pub model_layout: Option<dgem_core::schema::Layout>,
    /// The question block's fixed sentences on a cloze read; `None` is
    /// dgem's own ([`dgem_core::prompt::Wording::default`]). From the model's
    /// catalogue entry or `--wording`: [`dgem_core::prompt::Wording::compact`]
    /// shortens what every option listing repeats. A decision read with
    /// another wording echoes its hash as `diagnostics.prompt_wording`.
    pub wording: Option<dgem_core::prompt::Wording>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            label_mode: None,
            calibration: CalibrationMode::Auto,
            note: None,
            calibration_cache_entries: 512,
            calibration_store: None,
            canvas_len: dgem_core::slots::DEFAULT_CANVAS_LEN,
            vocab_diagnostics: false,
            order_debias: dgem_core::order::OrderDebias::default(),
            model_temperature: None,
            model_layout: None,
            wording: None,
        }
    }
}

/// The decision engine: a backend plus caches. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Engine {
    backend: Arc<dyn Backend>,
    config: EngineConfig,
    priors: Mutex<calibration::PriorCache>,
    /// Priors learned from the first decisions of each question under
    /// `--order-debias prior` ([`policy_prior`]); stored beside the
    /// calibration priors (`<store>.policy.json`).
    policy_priors: Mutex<policy_prior::PolicyPriors>,
    /// Tokens of recent policy prefixes ([`dgem_core::prompt::policy_prefix_len`],
    /// and with a JSON state's head, [`dgem_core::prompt::state_head_len`]),
    /// so a decision of a cached policy does not tokenize its prefix twice.
    prefixes: Mutex<lru::LruCache<String, Arc<Vec<TokenId>>>>,
}

/// Policy prefixes whose tokens are kept (one per recently used policy and
/// sample permutation, and one per state shape after it).
const PREFIX_CACHE_ENTRIES: usize = 64;

impl Engine {
    /// Build an engine over `backend`.
    pub fn new(backend: Arc<dyn Backend>, config: EngineConfig) -> Self {
        let priors = Mutex::new(calibration::PriorCache::new(
            config.calibration_cache_entries,
            config.calibration_store.clone(),
        ));
        let policy_priors = Mutex::new(policy_prior::PolicyPriors::new(
            config
                .calibration_store
                .as_ref()
                .map(|p| p.with_extension("policy.json")),
        ));
        let entries = std::num::NonZeroUsize::new(PREFIX_CACHE_ENTRIES)
            .unwrap_or(std::num::NonZeroUsize::MIN);
        Self {
            backend,
            config,
            priors,
            policy_priors,
            prefixes: Mutex::new(lru::LruCache::new(entries)),
        }
    }

    /// Tokens of a policy prefix text, from the cache or `tok` (not BOS).
    ///
    /// # Errors
    /// The tokenizer's error.
    pub(crate) fn prefix_tokens(
        &self,
        tok: &dyn Tokenizer,
        prefix: &str,
    ) -> Result<Arc<Vec<TokenId>>, DecideError> {
        if let Some(ids) = self
            .prefixes
            .lock()
            .ok()
            .and_then(|mut c| c.get(prefix).cloned())
        {
            return Ok(ids);
        }
        let ids = Arc::new(tok.encode(prefix).map_err(dgem_core::CoreError::from)?);
        if let Ok(mut c) = self.prefixes.lock() {
            c.put(prefix.to_owned(), Arc::clone(&ids));
        }
        Ok(ids)
    }

    /// The backend this engine reads.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Label mode in effect.
    pub fn label_mode(&self) -> LabelMode {
        self.config
            .label_mode
            .unwrap_or(self.backend.info().label_mode)
    }

    /// Hash of the question block's sentences a cloze read uses when they are
    /// not dgem's own ([`EngineConfig::wording`],
    /// [`dgem_core::prompt::Wording::hash`]); `None` for dgem's own.
    pub fn wording_hash(&self) -> Option<String> {
        self.config
            .wording
            .as_ref()
            .map(dgem_core::prompt::Wording::hash)
    }

    /// Whether contextual calibration is applied.
    pub fn calibrates(&self) -> bool {
        match self.config.calibration {
            CalibrationMode::On => true,
            CalibrationMode::Off => false,
            // Letters are calibrated like words: a letter read is mostly
            // position prior, which is what calibration measures.
            CalibrationMode::Auto => self.backend.info().attention == Attention::Causal,
        }
    }

    /// Make one decision.
    ///
    /// # Errors
    /// [`DecideError::Schema`] for problems the user must fix (a label that is not
    /// one token, a state longer than the model's context), [`DecideError::Backend`]
    /// when the model fails, [`DecideError::Unsupported`] for a backend this engine
    /// cannot drive.
    ///
    /// A choice question with more than 26 options is answered through bracket
    /// routing (`dgem_backend::brackets`), which asks this engine smaller schemas;
    /// `multi` questions and rules between answers go through
    /// `dgem_backend::shape`, which asks it the plain schema.
    #[tracing::instrument(skip_all, fields(otel.name = "dgem.orchestrate", questions = req.schema.questions.len(), engine = %self.backend.info().runtime))]
    pub async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError> {
        let mut req = self.with_model_layout(req);
        let info = self.backend.info();
        if info.attention == Attention::Causal {
            // Before `multi` shaping and bracket routing, so that their parts
            // and their `diagnostics.isolated` agree with the read.
            req = cloze::apart(req);
        }
        if !info.supports_images && dgem_core::images::has_images(&req.state) {
            // Reading the parts' JSON as text would be a silently wrong answer.
            return Err(dgem_core::images::no_vision(&info.runtime, &info.model_id).into());
        }
        dgem_core::images::check_required(&req.schema, &req.state)?;
        check_state_size(&req.state, info.max_tokens)?;
        let think_warning = check_think(&req.schema)?;
        if dgem_backend::shape::shapes(&req.schema) {
            // Multi questions are read as yes/no slots and rules applied to
            // the answers; the plain read comes back through this function.
            return dgem_backend::shape::decide(self, req).await;
        }
        if dgem_backend::brackets::routes(&req.schema) {
            let mut decision = dgem_backend::brackets::decide(self, req).await?;
            decision.diagnostics.note = self.config.note.clone();
            warn(&mut decision, think_warning);
            return Ok(decision);
        }
        let started = Instant::now();
        let out = match self.backend.info().attention {
            Attention::Causal => cloze::decide(self, &req).await?,
            Attention::Bidirectional => joint::decide(self, &req).await?,
        };
        let mut decision = out;
        if let Some(t) = &self.config.model_temperature {
            t.apply(&mut decision);
        }
        decision.diagnostics.timing.total_ms = started.elapsed().as_secs_f64() * 1e3;
        decision.diagnostics.note = self.config.note.clone();
        warn(&mut decision, think_warning);
        tracing::info!(
            total_ms = decision.diagnostics.timing.total_ms,
            reads = decision.diagnostics.timing.reads,
            "decision done"
        );
        Ok(decision)
    }
}

impl Engine {
    /// `req` with [`EngineConfig::model_layout`] applied when no one stated
    /// its layout.
    pub(crate) fn with_model_layout(&self, mut req: DecideRequest) -> DecideRequest {
        if let Some(layout) = self.config.model_layout {
            if !req.schema.layout_stated {
                req.schema.layout = layout;
            }
        }
        req
    }
}

/// Bytes of state text one token of context can hold at most, for the cheap
/// check before tokenizing. No Gemma token spells more than a few dozen bytes,
/// so a state over `max_tokens × 64` bytes cannot fit and is refused at once,
/// instead of after tokenizing all of it (a 7 MiB state took 11.9 s of CPU
/// before the context check refused it).
pub const MAX_STATE_BYTES_PER_TOKEN: usize = 64;

/// Refuse a thought budget: this engine reads answers straight from the
/// prompt and has no thinking pass, so a `think` it silently ignored would be
/// an answer the caller believes was thought about. `think` (0..=4096 tokens)
/// is read by DiffusionGemma through the vLLM backend (`--backend vllm=URL`).
/// With `think_optional` the decision is made without the thought instead,
/// and the returned warning ([`think_skipped`]) goes into
/// `diagnostics.warnings`.
/// The words every refusal or warning of a `think` budget this engine cannot
/// spend carries; a server maps a `think` error holding them to 422 (the
/// request is well formed, this backend cannot do it), as it maps a state
/// with images on a backend without vision.
pub const CANNOT_THINK: &str = "cannot think before answering";

fn check_think(schema: &ValidSchema) -> Result<Option<String>, DecideError> {
    let think = schema.think;
    if think == 0 {
        return Ok(None);
    }
    if schema.think_optional {
        return Ok(Some(think_skipped(think)));
    }
    Err(DecideError::Schema(dgem_core::SchemaError::new(
        "think",
        format!(
            "must be 0 on this engine, which {CANNOT_THINK} (it reads the answer slots straight from the prompt); a thought budget is read by DiffusionGemma through `--backend vllm=URL`, or set `think_optional: true` to answer without the thought. Given: `{think}`"
        ),
    )))
}

/// The warning of a decision made without the `think` budget of `think`
/// tokens it asked for, under `think_optional`.
pub fn think_skipped(think: u32) -> String {
    format!(
        "think: this engine {CANNOT_THINK}, so the thought budget of {think} tokens was not used (`think_optional` is set); the answers were read straight from the prompt"
    )
}

/// Add `warning`, if any, to the decision's `diagnostics.warnings` once.
fn warn(decision: &mut Decision, warning: Option<String>) {
    if let Some(w) = warning {
        if !decision.diagnostics.warnings.contains(&w) {
            decision.diagnostics.warnings.push(w);
        }
    }
}

/// Refuse a state whose text cannot fit the context (see
/// [`MAX_STATE_BYTES_PER_TOKEN`]); `max_tokens` 0 means unknown (no check).
fn check_state_size(state: &serde_json::Value, max_tokens: usize) -> Result<(), DecideError> {
    if max_tokens == 0 {
        return Ok(());
    }
    let bytes = match state {
        serde_json::Value::String(s) => s.len(),
        other => other.to_string().len(),
    };
    let limit = max_tokens.saturating_mul(MAX_STATE_BYTES_PER_TOKEN);
    if bytes > limit {
        return Err(DecideError::Schema(dgem_core::SchemaError::new(
            "state",
            format!(
                "the state is {bytes} bytes; a context of {max_tokens} tokens holds at most about {limit} (shorten the state, raise the context size with `--context` / `DGEM_CONTEXT`, or use a model with a longer context)"
            ),
        )));
    }
    Ok(())
}
