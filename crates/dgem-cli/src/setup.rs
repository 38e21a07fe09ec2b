//! Building the backend and engine from command-line options.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use dgem_backend::Backend;
use dgem_backend_llama::{LlamaBackend, LlamaConfig};
use dgem_core::labels::LabelMode;
use dgem_engine::{CalibrationMode, Engine, EngineConfig};

use crate::failure::{internal, user, Failure};
use crate::progress::Bar;

/// Plain words on what the default model can and cannot do (engine-notes.md §2).
pub const SMALL_MODEL_NOTE: &str = "embedded Gemma 3 270M base on CPU: it proves the pipeline on real weights but is near chance on real decisions, so expect low confidence; for real decisions use DiffusionGemma (vLLM) or pass --model with a larger Gemma 3 instruction-tuned GGUF";

/// Options that choose and configure the embedded model.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// A Gemma-3-family GGUF file to use instead of the default Gemma 3 270M.
    #[arg(long = "model", env = "DGEM_MODEL_PATH", value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// CPU threads for the model (default: all cores).
    #[arg(long, env = "DGEM_THREADS")]
    pub threads: Option<usize>,
    /// Context size in tokens (the longest prompt one read may hold).
    #[arg(long, env = "DGEM_CONTEXT", default_value_t = 4096)]
    pub context: usize,
    /// Labels read at each slot: `words` (option names; default for the embedded
    /// causal model) or `letters` (A–Z as DiffusionGemma reads them).
    #[arg(long, env = "DGEM_LABELS", value_parser = parse_label_mode)]
    pub labels: Option<LabelMode>,
    /// Contextual calibration against content-free states: auto, on or off.
    #[arg(long, env = "DGEM_CALIBRATION", default_value = "auto")]
    pub calibration: CalibrationMode,
    /// Seconds one model call may wait in the model's queue before it starts
    /// (past it: 503 `overloaded`, the call is dropped unrun); 0 = no limit.
    /// Queue time is not model time: see `--model-timeout`.
    #[arg(long, env = "DGEM_QUEUE_TIMEOUT_S", default_value_t = 300.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub queue_timeout: f64,
    /// Seconds one model call may run once started (past it: 504, and the model
    /// thread stops at its next read); 0 = no limit.
    #[arg(long, env = "DGEM_MODEL_TIMEOUT_S", default_value_t = 120.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub model_timeout: f64,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "must be a number of seconds from 0 (no limit) to 86400. Given: `{s}`"
        )),
    }
}

/// `Some(limit)` for a positive number of seconds, `None` (no limit) for 0.
fn limit(seconds: f64) -> Option<std::time::Duration> {
    (seconds > 0.0).then(|| std::time::Duration::from_secs_f64(seconds))
}

fn parse_label_mode(s: &str) -> Result<LabelMode, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "words" => Ok(LabelMode::Words),
        "letters" => Ok(LabelMode::Letters),
        other => Err(format!(
            "`labels` must be one of [words, letters]. Given: `{other}`"
        )),
    }
}

/// The checks of [`engine`] that are the user's to fix and cost no model load
/// (the `--model` file exists and is a Gemma 3 GGUF, `--context`, `--threads`),
/// and the model id the engine will report: for `dgem serve`, which binds its
/// port before it loads the model.
///
/// # Errors
/// A user [`Failure`] naming the flag, as [`engine`] gives.
pub fn precheck(args: &ModelArgs) -> Result<String, Failure> {
    if args.context < 64 || args.context > 131_072 {
        return Err(user(anyhow::anyhow!(
            "`--context` must be between 64 and 131072 tokens. Given: `{}`",
            args.context
        )));
    }
    if args.threads == Some(0) {
        return Err(user(anyhow::anyhow!(
            "`--threads` must be at least 1. Given: `0`"
        )));
    }
    let spec = dgem_model::default_model();
    match &args.model {
        None => Ok(spec.id),
        Some(p) => {
            if !p.is_file() {
                return Err(user(anyhow::anyhow!(
                    "`--model` must be an existing GGUF file. Given: `{}`",
                    p.display()
                )));
            }
            dgem_model::validate_gemma3(p).map_err(user)?;
            // The default file passed by path keeps its id (`engine` confirms it
            // by sha256; the size is enough for the id shown while loading).
            if std::fs::metadata(p).is_ok_and(|m| m.len() == spec.size) {
                return Ok(spec.id);
            }
            Ok(p.file_stem()
                .map_or_else(|| "custom".to_owned(), |s| s.to_string_lossy().into_owned()))
        }
    }
}

/// Resolve the model file (pulling the default on first use) and load the engine.
pub fn engine(args: &ModelArgs) -> Result<Engine, Failure> {
    // The user's mistakes first, before any pull or load.
    precheck(args)?;
    let (path, id, sha, note) = match &args.model {
        Some(p) => {
            let spec = dgem_model::default_model();
            // The default 270M file passed by path is still the 270M model: it
            // keeps its id, sha256 and plain-words note (checked by size, then
            // by sha256, so other files cost one `stat`).
            let is_default = std::fs::metadata(p).is_ok_and(|m| m.len() == spec.size)
                && dgem_model::verify(p, &spec, &dgem_model::NoProgress).is_ok();
            if is_default {
                (
                    p.clone(),
                    spec.id,
                    Some(spec.sha256),
                    Some(SMALL_MODEL_NOTE.to_owned()),
                )
            } else {
                let id = p
                    .file_stem()
                    .map_or_else(|| "custom".to_owned(), |s| s.to_string_lossy().into_owned());
                (p.clone(), id, None, None)
            }
        }
        None => {
            let spec = dgem_model::default_model();
            let path = dgem_model::ensure(&spec, &Bar::new()).map_err(|e| {
                internal(anyhow::Error::new(e).context("could not fetch the embedded model"))
            })?;
            verify_once(&path, &spec)?;
            (
                path,
                spec.id,
                Some(spec.sha256),
                Some(SMALL_MODEL_NOTE.to_owned()),
            )
        }
    };
    // Priors belong to one model's weights: key them by the verified sha256 of the
    // default model, or by name, size and modification time of any other file.
    let key = match &sha {
        Some(h) => format!("{id}-{}", &h[..h.len().min(16)]),
        None => {
            let meta = std::fs::metadata(&path).ok();
            let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
            let mtime = meta
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            format!("{id}-{size}-{mtime}")
        }
    };
    let store = dgem_model::model_dir()
        .join("priors")
        .join(format!("{key}.json"));
    let mut cfg = LlamaConfig::new(&path, id);
    cfg.sha256 = sha;
    cfg.context_size = args.context;
    if let Some(t) = args.threads {
        cfg.n_threads = t;
    }
    cfg.queue_timeout = limit(args.queue_timeout);
    cfg.model_timeout = limit(args.model_timeout);
    let backend = LlamaBackend::load(cfg)
        .with_context(|| format!("could not load the model {}", path.display()))
        .map_err(internal)?;
    let backend: Arc<dyn Backend> = Arc::new(backend);
    Ok(Engine::new(
        backend,
        EngineConfig {
            label_mode: args.labels,
            calibration: args.calibration,
            note,
            calibration_store: Some(store),
            ..EngineConfig::default()
        },
    ))
}

/// Check the cached default model's sha256 once; a stamp file beside it records
/// the size and modification time that were verified, so later runs skip the hash
/// unless the file changed. A corrupted cache is an error, never used silently.
fn verify_once(path: &std::path::Path, spec: &dgem_model::ModelSpec) -> Result<(), Failure> {
    let meta = std::fs::metadata(path).map_err(internal)?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let stamp_text = format!("{} {} {mtime}\n", spec.sha256, meta.len());
    let stamp = path.with_extension("gguf.verified");
    if std::fs::read_to_string(&stamp).is_ok_and(|t| t == stamp_text) {
        return Ok(());
    }
    dgem_model::verify(path, spec, &Bar::new()).map_err(|e| {
        internal(anyhow::Error::new(e).context(format!(
            "the cached model {} is damaged; run `dgem model pull --force`",
            path.display()
        )))
    })?;
    // The stamp is only a cache: failing to write it costs a re-hash next time.
    let _ = std::fs::write(&stamp, stamp_text);
    Ok(())
}

/// A current-thread tokio runtime for one command.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(internal)
}
