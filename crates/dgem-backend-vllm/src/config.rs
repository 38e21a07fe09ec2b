//! Settings of the vLLM reader and its errors.

use std::time::Duration;

/// Canvas and seed constants shared with every joint reader (`dgem_core::slots`).
pub use dgem_core::slots::{DEFAULT_CANVAS_STEP, GROUP_SEED_STRIDE, READ_SEED_STRIDE};
use dgem_core::tokenizer::TokenId;
use thiserror::Error;

/// `top_logprobs` of every read (serving.md §3.6 `TOPK`).
pub const TOP_LOGPROBS: u32 = 20;
/// vLLM's cap on `logprob_token_ids` per request (serving.md §3.6).
pub const LOGPROB_TOKEN_IDS_MAX: usize = 128;
/// Groups read at once in a stage (serving.md §3.6 `MAX_PARALLEL`).
pub const MAX_PARALLEL: usize = 16;

/// Token ids and texts that frame a DiffusionGemma canvas (serving.md §4.5, §4.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffusionTokens {
    /// End-of-turn id written after the template (`TURN_CLOSE`, 106).
    pub turn_close: TokenId,
    /// Padding id (`PAD`, 0).
    pub pad: TokenId,
    /// Random slot tokens are drawn from `[0, vocab)` (`VOCAB`, 262,144).
    pub vocab: u32,
    /// Text that opens a thought block (`<|channel>thought\n`).
    pub thought_open: String,
    /// Text that closes a thought block (`<channel|>`).
    pub thought_close: String,
}

impl Default for DiffusionTokens {
    fn default() -> Self {
        Self {
            turn_close: 106,
            pad: 0,
            vocab: 262_144,
            thought_open: "<|channel>thought\n".into(),
            thought_close: "<channel|>".into(),
        }
    }
}

/// A deployment profile: which served canvas length to assume when none is
/// given (`--canvas` / `CANVAS` always win). The length decides where a wide
/// schema is chunked into several reads, so it must match vLLM's
/// `--diffusion-config canvas_length`, or chunks differ from the deployment's.
///
/// | profile | canvas | where |
/// | :--- | ---: | :--- |
/// | `plain` (default) | 64 | the original structured server's own default |
/// | `l4` | 32 | the Cloud Run L4 tier |
/// | `rtxpro6000` | 128 | the Cloud Run RTX PRO 6000 tier and the serving container's default |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CanvasProfile {
    /// The original server's default canvas of 64 tokens.
    #[default]
    Plain,
    /// Cloud Run with an NVIDIA L4: a 32-token canvas.
    L4,
    /// Cloud Run with an NVIDIA RTX PRO 6000: a 128-token canvas.
    RtxPro6000,
}

impl CanvasProfile {
    /// Every profile, in the order help texts list them.
    pub const ALL: [Self; 3] = [Self::Plain, Self::L4, Self::RtxPro6000];

    /// The profile's name (`plain`, `l4`, `rtxpro6000`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::L4 => "l4",
            Self::RtxPro6000 => "rtxpro6000",
        }
    }

    /// The served canvas length the profile implies, in tokens.
    pub fn canvas_len(self) -> usize {
        match self {
            Self::Plain => 64,
            Self::L4 => 32,
            Self::RtxPro6000 => 128,
        }
    }

    /// The profile named `name` (case-insensitive).
    ///
    /// # Errors
    /// [`VllmError::Config`] naming the allowed values and the value received.
    pub fn parse(name: &str) -> Result<Self, VllmError> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| VllmError::Config {
                field: "canvas_profile",
                message: format!("must be one of [plain, l4, rtxpro6000]. Given: `{name}`"),
            })
    }
}

/// Settings of a [`crate::VllmDecider`].
#[derive(Debug, Clone)]
pub struct VllmConfig {
    /// Base URL of vLLM, e.g. `http://127.0.0.1:8000` (no trailing `/v1`).
    pub base_url: String,
    /// `model` sent in every request (vLLM `--served-model-name`, default `dgemma`).
    pub served_model: String,
    /// Served canvas length in tokens (`--diffusion-config canvas_length`).
    pub canvas_len: usize,
    /// The deployment profile `canvas_len` came from, or `None` when it was
    /// given explicitly. Reported in `/health`.
    pub profile: Option<CanvasProfile>,
    /// Request widths are rounded up to a multiple of this many tokens.
    pub canvas_step: usize,
    /// Send `diffusion_constrained` (logprobs normalized over the label ids; PR #58216).
    pub constrained: bool,
    /// Time limit of one vLLM call (serving.md §3.6: 600 s).
    pub request_timeout: Duration,
    /// TCP connect limit of one vLLM call.
    pub connect_timeout: Duration,
    /// Longest silence of a reply body after its headers (default 5 s,
    /// [`dgem_backend::body::DEFAULT_IDLE_TIMEOUT`]): vLLM writes a
    /// non-streamed reply in one go, so a pause mid-body is a broken upstream.
    pub idle_timeout: Duration,
    /// Most vLLM calls in flight at once, over all decisions (a semaphore).
    pub max_concurrent: usize,
    /// How long a request waits for vLLM's `/health` before 503 (serving.md §9.6: 180 s).
    pub ready_wait: Duration,
    /// Timeout of one `/health` probe (1.5 s).
    pub probe_timeout: Duration,
    /// Pause between failed probes (1 s).
    pub probe_interval: Duration,
    /// Canvas framing tokens.
    pub tokens: DiffusionTokens,
    /// The question block's fixed sentences (`--prompt-file`; dgem's own by
    /// default). Its hash is echoed as `diagnostics.prompt_wording`.
    pub wording: dgem_core::prompt::Wording,
    /// Option-order debiasing (`--vllm-order-debias`). `Off` (the default)
    /// sends exactly the original reader's requests: one listing, the
    /// policy's own order. `Cyclic` lists each question's options in a
    /// canonical order (choices sorted by name) and its cyclic rotations, up
    /// to `max_orders` listings per group, reads every listing with the same
    /// seeds, and pools them by geometric mean ([`dgem_core::order`]), so the
    /// answer does not depend on the order the policy lists its options in.
    /// Cost: a group of questions with up to K options is read K times (at
    /// most `max_orders`), so K times the vLLM requests.
    pub order_debias: dgem_core::order::OrderDebias,
}

impl VllmConfig {
    /// The original server's defaults for vLLM at `base_url`, with the
    /// [`CanvasProfile::Plain`] canvas of 64 tokens.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            served_model: "dgemma".into(),
            canvas_len: CanvasProfile::Plain.canvas_len(),
            profile: Some(CanvasProfile::Plain),
            canvas_step: DEFAULT_CANVAS_STEP,
            constrained: true,
            request_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(5),
            idle_timeout: dgem_backend::body::DEFAULT_IDLE_TIMEOUT,
            max_concurrent: 64,
            ready_wait: Duration::from_secs(180),
            probe_timeout: Duration::from_millis(1500),
            probe_interval: Duration::from_secs(1),
            tokens: DiffusionTokens::default(),
            wording: dgem_core::prompt::Wording::default(),
            order_debias: dgem_core::order::OrderDebias::Off,
        }
    }
}

/// Why the vLLM reader could not be set up.
#[derive(Debug, Error)]
pub enum VllmError {
    /// A setting is out of range.
    #[error("`{field}` {message}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is wrong, with the value received.
        message: String,
    },
    /// The tokenizer file could not be loaded.
    #[error("could not load the tokenizer {path}: {reason}")]
    Tokenizer {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Client(String),
}

impl VllmConfig {
    /// Check the settings.
    ///
    /// # Errors
    /// [`VllmError::Config`] naming the field, its allowed range and the value.
    pub fn validate(&self) -> Result<(), VllmError> {
        let bad = |field, message: String| Err(VllmError::Config { field, message });
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return bad(
                "base_url",
                format!(
                    "must start with http:// or https://. Given: `{}`",
                    self.base_url
                ),
            );
        }
        if !(8..=4096).contains(&self.canvas_len) {
            return bad(
                "canvas_len",
                format!(
                    "must be between 8 and 4096 tokens. Given: `{}`",
                    self.canvas_len
                ),
            );
        }
        if self.canvas_step == 0 || self.canvas_step > self.canvas_len {
            return bad(
                "canvas_step",
                format!(
                    "must be between 1 and the canvas length {}. Given: `{}`",
                    self.canvas_len, self.canvas_step
                ),
            );
        }
        if self.max_concurrent == 0 {
            return bad("max_concurrent", "must be at least 1. Given: `0`".into());
        }
        if self.served_model.trim().is_empty() {
            return bad("served_model", "must not be empty. Given: ``".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_give_the_canvas_of_their_deployment() {
        let lens: Vec<(&str, usize)> = CanvasProfile::ALL
            .iter()
            .map(|p| (p.name(), p.canvas_len()))
            .collect();
        assert_eq!(lens, [("plain", 64), ("l4", 32), ("rtxpro6000", 128)]);
        assert_eq!(CanvasProfile::parse(" L4 ").ok(), Some(CanvasProfile::L4));
        assert_eq!(VllmConfig::new("http://x").canvas_len, 64);
        let err = CanvasProfile::parse("a100").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("`canvas_profile` must be one of [plain, l4, rtxpro6000]. Given: `a100`")
        );
    }
}
