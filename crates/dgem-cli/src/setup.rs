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

/// Resolve the model file (pulling the default on first use) and load the engine.
pub fn engine(args: &ModelArgs) -> Result<Engine, Failure> {
    let (path, id, sha, note) = match &args.model {
        Some(p) => {
            if !p.is_file() {
                return Err(user(anyhow::anyhow!(
                    "`--model` must be an existing GGUF file. Given: `{}`",
                    p.display()
                )));
            }
            dgem_model::validate_gemma3(p).map_err(user)?;
            let id = p
                .file_stem()
                .map_or_else(|| "custom".to_owned(), |s| s.to_string_lossy().into_owned());
            (p.clone(), id, None, None)
        }
        None => {
            let spec = dgem_model::default_model();
            let path = dgem_model::ensure(&spec, &Bar::new()).map_err(|e| {
                internal(anyhow::Error::new(e).context("could not fetch the embedded model"))
            })?;
            (
                path,
                spec.id,
                Some(spec.sha256),
                Some(SMALL_MODEL_NOTE.to_owned()),
            )
        }
    };
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    let store = dgem_model::model_dir()
        .join("priors")
        .join(format!("{id}-{size}.json"));
    let mut cfg = LlamaConfig::new(&path, id);
    cfg.sha256 = sha;
    cfg.context_size = args.context;
    if let Some(t) = args.threads {
        cfg.n_threads = t;
    }
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

/// A current-thread tokio runtime for one command.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(internal)
}
