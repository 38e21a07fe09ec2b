//! `--backend vllm=URL`: decisions read from vLLM serving DiffusionGemma
//! (`dgem-backend-vllm`) instead of the embedded model.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
#[cfg(feature = "vllm")]
use dgem_backend_vllm::{HfTokenizer, VllmConfig, VllmDecider};
use dgem_core::tokenizer::Tokenizer;

use crate::failure::{internal, user, Failure};

/// Request canvas widths are rounded up to a multiple of this by default.
#[cfg(feature = "vllm")]
const DEFAULT_CANVAS_STEP: usize = dgem_backend_vllm::DEFAULT_CANVAS_STEP;
/// Unused in a build without the vLLM reader (`--backend` is refused there).
#[cfg(not(feature = "vllm"))]
const DEFAULT_CANVAS_STEP: usize = 1;

/// Options of the vLLM reader (used with `--backend vllm=URL`).
#[derive(Debug, Clone, Args)]
pub struct VllmArgs {
    /// Where decisions are read: `vllm=URL` sends every read to vLLM serving
    /// DiffusionGemma at URL (e.g. `vllm=http://127.0.0.1:8000`), as serving.md
    /// §5 specifies. Without it the embedded model is used.
    #[arg(long, env = "DGEM_BACKEND", value_name = "vllm=URL")]
    pub backend: Option<String>,
    /// The served model's tokenizer: a `tokenizer.json` or a `.gguf` (its
    /// vocabulary metadata only). Default: the small embedded model's GGUF
    /// (`gemma3-270m`, Gemma 3) from the model cache, which has the same
    /// 262,144-token Gemma vocabulary as DiffusionGemma; pass DiffusionGemma's own `tokenizer.json` when you have it.
    #[arg(long, env = "DGEM_TOKENIZER", value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// `model` sent to vLLM (its `--served-model-name`).
    #[arg(long = "vllm-model", env = "DGEM_VLLM_MODEL", default_value = "dgemma")]
    pub vllm_model: String,
    /// Served canvas length in tokens (vLLM `--diffusion-config canvas_length`).
    /// Overrides `--canvas-profile`. It must match vLLM's, since it decides
    /// where wide schemas are split into several reads.
    #[arg(long, env = "CANVAS")]
    pub canvas: Option<usize>,
    /// Deployment profile giving the canvas when `--canvas` is not set:
    /// `plain` 64 tokens (the original server's default), `l4` 32 (Cloud Run
    /// L4), `rtxpro6000` 128 (Cloud Run RTX PRO 6000, the container's default).
    #[arg(
        long = "canvas-profile",
        env = "DGEM_CANVAS_PROFILE",
        default_value = "plain",
        value_name = "plain|l4|rtxpro6000"
    )]
    pub canvas_profile: String,
    /// Request canvas widths are rounded up to a multiple of this.
    #[arg(long = "canvas-step", env = "CANVAS_STEP", default_value_t = DEFAULT_CANVAS_STEP)]
    pub canvas_step: usize,
    /// A JSON file replacing the question block's fixed sentences (`lead`,
    /// `format_lines` with a `{label}` placeholder, `format_indexed`, `chunk`;
    /// see docs/engine-vllm.md). Checked at start-up; its hash is echoed as
    /// `diagnostics.prompt_wording` on every decision.
    #[arg(long = "prompt-file", env = "DGEM_PROMPT_FILE", value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    /// Do not send `diffusion_constrained` (logprobs over the full vocabulary).
    #[arg(long = "no-constrained", env = "DGEM_NO_CONSTRAINED")]
    pub no_constrained: bool,
    /// Seconds a request waits for vLLM's `/health` before 503.
    #[arg(
        long = "vllm-ready-wait",
        env = "DGEM_VLLM_READY_WAIT_S",
        default_value_t = 180.0
    )]
    pub ready_wait_s: f64,
    /// Option-order debiasing on the vLLM reader: `off` (default) sends the
    /// original reader's requests, one read per group in the policy's own
    /// option order; `cyclic` reads each group in its options' canonical
    /// order and cyclic rotations (up to 6 listings, so up to 6× the vLLM
    /// requests) and pools them, so the answer does not depend on the order
    /// the policy lists its options in; a number 1..=26 caps the listings (1 is `off`).
    /// The embedded model's setting is `--order-debias`.
    #[arg(long = "vllm-order-debias", env = "DGEM_VLLM_ORDER_DEBIAS", default_value = "off", value_parser = parse_vllm_order_debias, value_name = "off|cyclic|N")]
    pub vllm_order_debias: dgem_core::order::OrderDebias,
}

/// `--vllm-order-debias`: [`dgem_core::order::OrderDebias::parse`] without
/// `prior`, which needs the embedded reader's learned per-question priors.
fn parse_vllm_order_debias(s: &str) -> Result<dgem_core::order::OrderDebias, String> {
    match dgem_core::order::OrderDebias::parse(s) {
        Ok(dgem_core::order::OrderDebias::Prior { .. }) | Err(_) => Err(format!(
            "`order_debias` must be one of [off, cyclic] or a number of orders 1..=26 (`prior` is the embedded model's: `--order-debias prior`). Given: `{s}`"
        )),
        Ok(other) => Ok(other),
    }
}

/// The refusal of `--backend SPEC` in a build without the vLLM reader.
fn no_vllm_reader(spec: &str) -> Failure {
    user(anyhow::anyhow!(
        "`--backend {spec}`: this dgem was built without the vLLM reader (Cargo feature `vllm`); use a default build"
    ))
}

/// The vLLM base URL when `--backend` asks for vLLM, `None` without `--backend`.
///
/// # Errors
/// A user error naming `--backend`, the allowed form and the value received.
pub fn backend_url(args: &VllmArgs) -> Result<Option<String>, Failure> {
    let Some(spec) = args.backend.as_deref() else {
        return Ok(None);
    };
    if !cfg!(feature = "vllm") {
        return Err(no_vllm_reader(spec));
    }
    match spec.split_once('=') {
        Some(("vllm", url)) if url.starts_with("http://") || url.starts_with("https://") => {
            Ok(Some(url.to_owned()))
        }
        _ => Err(user(anyhow::anyhow!(
            "`--backend` must be `vllm=<http(s) URL>`. Given: `{spec}`"
        ))),
    }
}

#[cfg(feature = "vllm")]
fn load_tokenizer(path: &Path) -> Result<Arc<dyn Tokenizer>, Failure> {
    if !path.is_file() {
        return Err(user(anyhow::anyhow!(
            "`--tokenizer` must be an existing tokenizer.json or .gguf file. Given: `{}`",
            path.display()
        )));
    }
    if path.extension().is_some_and(|e| e == "gguf") {
        return gguf_tokenizer(path);
    }
    let tok = HfTokenizer::load(path).map_err(user)?;
    Ok(Arc::new(tok))
}

/// The vocabulary of a GGUF, read through llama.cpp (feature `embedded`).
#[cfg(all(feature = "vllm", feature = "embedded"))]
fn gguf_tokenizer(path: &Path) -> Result<Arc<dyn Tokenizer>, Failure> {
    let tok = dgem_backend_llama::LlamaTokenizer::load(path)
        .with_context(|| format!("could not read the vocabulary of {}", path.display()))
        .map_err(user)?;
    Ok(Arc::new(tok))
}

/// A build without llama.cpp reads no GGUF vocabulary: the served model's
/// `tokenizer.json` is needed.
#[cfg(all(feature = "vllm", not(feature = "embedded")))]
fn gguf_tokenizer(path: &Path) -> Result<Arc<dyn Tokenizer>, Failure> {
    Err(user(anyhow::anyhow!(
        "`--tokenizer {}`: this dgem was built without llama.cpp (Cargo feature `embedded`), which reads a GGUF's vocabulary; pass the served model's `tokenizer.json`",
        path.display()
    )))
}

/// Refuse the embedded model's flags that the vLLM reader would ignore in
/// silence: `--wording` other than `auto` (the vLLM reader's sentences are
/// dgem's own or `--prompt-file`'s).
///
/// # Errors
/// A user error naming the flag, the value given and the vLLM reader's own
/// flag.
fn check_reader_flags(model: &crate::setup::ModelArgs) -> Result<(), Failure> {
    if model.wording != crate::setup::WordingArg::Auto {
        return Err(user(anyhow::anyhow!(
            "`--wording` sets the embedded model's question block; with `--backend vllm=URL` the sentences are dgem's own or those of `--prompt-file FILE`. Given: `--wording {}`",
            format!("{:?}", model.wording).to_lowercase()
        )));
    }
    Ok(())
}

/// [`decider`] behind the [`dgem_engine::Decider`] trait, after
/// [`check_reader_flags`] of the embedded model's flags `model` (whose
/// `--pull-timeout` bounds the tokenizer's first pull); in a build without
/// the vLLM reader, the refusal [`backend_url`] gives first.
///
/// # Errors
/// What [`check_reader_flags`] and [`decider`] return.
pub fn shared_decider(
    url: &str,
    args: &VllmArgs,
    model: &crate::setup::ModelArgs,
    fetch: crate::pull::Fetch<'_>,
) -> Result<Arc<dyn dgem_engine::Decider>, Failure> {
    check_reader_flags(model)?;
    #[cfg(feature = "vllm")]
    {
        Ok(Arc::new(decider(url, args, model.pull_timeout, fetch)?))
    }
    #[cfg(not(feature = "vllm"))]
    {
        let _ = fetch;
        Err(no_vllm_reader(args.backend.as_deref().unwrap_or(url)))
    }
}

#[cfg(feature = "vllm")]
/// Build the vLLM decider for `url`; the default tokenizer (the small embedded
/// GGUF) is pulled on first use within `pull_timeout_s` (`--pull-timeout`),
/// as `fetch` says.
///
/// # Errors
/// User errors for a bad tokenizer path or setting; internal ones when the
/// default tokenizer cannot be fetched.
pub fn decider(
    url: &str,
    args: &VllmArgs,
    pull_timeout_s: f64,
    fetch: crate::pull::Fetch<'_>,
) -> Result<VllmDecider, Failure> {
    let path = match &args.tokenizer {
        Some(p) => p.clone(),
        // The small model's tokenizer: Gemma 3's, the family of
        // DiffusionGemma's vocabulary (the default embedded model is Qwen).
        None => crate::pull::fetch(
            &dgem_model::gemma3_270m(),
            crate::pull::config(pull_timeout_s),
            fetch,
        )
        .map_err(|e| {
            internal(
                anyhow::Error::new(e)
                    .context("could not fetch the default tokenizer (the small embedded model's GGUF, gemma3-270m)"),
            )
        })?,
    };
    let tok = load_tokenizer(&path)?;
    if !(args.ready_wait_s.is_finite() && args.ready_wait_s >= 0.0) {
        return Err(user(anyhow::anyhow!(
            "`--vllm-ready-wait` must be a number of seconds ≥ 0. Given: `{}`",
            args.ready_wait_s
        )));
    }
    let mut cfg = VllmConfig::new(url);
    if let Some(n) = args.canvas {
        if !(8..=4096).contains(&n) {
            return Err(user(anyhow::anyhow!(
                "`--canvas` must be a canvas length from 8 to 4096 tokens. Given: `{n}`"
            )));
        }
    }
    cfg.served_model = args.vllm_model.clone();
    let profile = dgem_backend_vllm::CanvasProfile::parse(&args.canvas_profile).map_err(|e| {
        user(anyhow::anyhow!(
            "`--canvas-profile` {}",
            e.to_string().trim_start_matches("`canvas_profile` ")
        ))
    })?;
    match args.canvas {
        Some(n) => {
            cfg.canvas_len = n;
            cfg.profile = None;
        }
        None => {
            cfg.canvas_len = profile.canvas_len();
            cfg.profile = Some(profile);
        }
    }
    cfg.canvas_step = args.canvas_step;
    cfg.constrained = !args.no_constrained;
    if let Some(p) = &args.prompt_file {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("`--prompt-file` could not read `{}`", p.display()))
            .map_err(user)?;
        cfg.wording = dgem_core::prompt::Wording::from_json(&text).map_err(|e| {
            user(anyhow::anyhow!(
                "`--prompt-file` `{}`: {}",
                p.display(),
                e.message
            ))
        })?;
        tracing::info!(hash = %cfg.wording.hash(), file = %p.display(), "question-block wording from a file");
    }
    cfg.ready_wait = std::time::Duration::from_secs_f64(args.ready_wait_s);
    cfg.order_debias = args.vllm_order_debias;
    if args.canvas_step == 0 || args.canvas_step > cfg.canvas_len {
        return Err(user(anyhow::anyhow!(
            "`--canvas-step` must be from 1 to the canvas length {} (`--canvas` or the profile). Given: `{}`",
            cfg.canvas_len,
            args.canvas_step
        )));
    }
    VllmDecider::new(cfg, tok).map_err(user)
}

/// Refuse vLLM-only settings when decisions run on the embedded model, so a
/// `--prompt-file` is never silently ignored.
///
/// # Errors
/// A user error naming the flag.
pub fn check_embedded(args: &VllmArgs) -> Result<(), Failure> {
    if let Some(p) = &args.prompt_file {
        return Err(user(anyhow::anyhow!(
            "`--prompt-file` `{}` sets the wording of the vLLM reader; add `--backend vllm=URL`, or drop it (the embedded model's wording is chosen by `--wording`)",
            p.display()
        )));
    }
    if args.vllm_order_debias != dgem_core::order::OrderDebias::Off {
        return Err(user(anyhow::anyhow!(
            "`--vllm-order-debias` sets the vLLM reader; add `--backend vllm=URL`, or use `--order-debias` for the embedded model"
        )));
    }
    Ok(())
}
