//! `dgem model pull | list | verify`.

use std::path::PathBuf;

use clap::Subcommand;

use crate::failure::{internal, user, Failure};
use crate::progress::Bar;

/// Model management subcommands.
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Download and verify a model: a catalogued model by name (from its
    /// pinned part packages through pip; resumable; checked against its
    /// pinned sha256), or a GGUF from a Hugging Face Hub
    /// (`hf:OWNER/REPO[/FILE.gguf]`; resumable, checked against the hub's
    /// sha256; `HF_TOKEN` for gated repos, `HF_ENDPOINT` for a mirror).
    #[command(
        after_help = "Examples:\n  dgem model pull\n  dgem model pull qwen2.5-coder-1.5b\n  dgem model pull qwen2.5-coder-1.5b --from-hub\n  dgem model pull hf:ggml-org/gemma-3-1b-it-GGUF\n  dgem model pull hf:ggml-org/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf\n  HF_TOKEN=hf_... dgem model pull hf:google/gemma-3-1b-it-qat-q4_0-gguf"
    )]
    Pull {
        /// What to pull: a catalogued model's name (`dgem model list`) or
        /// `hf:OWNER/REPO[/FILE.gguf]`; default: the default embedded model,
        /// qwen2.5-coder-1.5b.
        reference: Option<String>,
        /// Fetch a catalogued model from its upstream hub release instead of
        /// the package index; the file must hash to the same pinned sha256.
        #[arg(long = "from-hub")]
        from_hub: bool,
        /// Download again even if the file is cached.
        #[arg(long)]
        force: bool,
        /// Seconds a catalogued model's download (through pip) may take in
        /// all, waits for a rate-limited package index included; past it pip
        /// is stopped, the part in progress removed and the complete parts
        /// kept for the next pull to resume from; 0 = no limit.
        #[arg(long = "pull-timeout", env = "DGEM_PULL_TIMEOUT_S", default_value_t = dgem_model::DEFAULT_PULL_TIMEOUT_S as f64, value_name = "SECONDS", value_parser = crate::setup::parse_seconds)]
        pull_timeout: f64,
    },
    /// List known and cached models; `--available` lists Gemma 3 instruction-tuned
    /// GGUFs on the Hugging Face Hub with their sizes and the memory they need;
    /// `--local` lists the GGUF models dgem, the Hugging Face caches, ollama and
    /// LM Studio hold, with what `--model` to pass for each.
    #[command(
        after_help = "Examples:\n  dgem model list\n  dgem model list --local\n  dgem model list --available"
    )]
    List {
        /// Show the curated list of models `dgem model pull hf:…` can fetch.
        #[arg(long, conflicts_with = "local")]
        available: bool,
        /// List what each local store holds (size, architecture, quantization,
        /// context length, whether dgem loads it), read from GGUF headers only.
        /// Stores: `$DGEM_MODEL_DIR`, the Hugging Face caches, ollama
        /// (`$DGEM_OLLAMA_DIR`, `$OLLAMA_MODELS`, `~/.ollama/models`) and LM Studio
        /// (`$DGEM_LMSTUDIO_DIR`, `~/.lmstudio/models`).
        #[arg(long)]
        local: bool,
    },
    /// Print where a catalogued model (default: the default embedded model,
    /// qwen2.5-coder-1.5b) is, or will be, cached.
    Path {
        /// A catalogued model's name (`dgem model list`).
        name: Option<String>,
    },
    /// Check a model file's size and sha256 (default: the cached default
    /// model): a catalogued model's name, or a file (checked against the
    /// catalogued model of its size).
    Verify {
        /// A catalogued model's name, or a file to check.
        path: Option<PathBuf>,
    },
}

/// The catalogued model `name` names (default: the embedded one).
///
/// # Errors
/// A user [`Failure`] listing the catalogue's names.
fn catalogued(name: Option<&str>) -> Result<dgem_model::ModelSpec, Failure> {
    let Some(name) = name else {
        return Ok(dgem_model::default_model());
    };
    dgem_model::find_model(name).ok_or_else(|| {
        let names: Vec<String> = dgem_model::known_models()
            .into_iter()
            .map(|m| m.card.name)
            .collect();
        user(anyhow::anyhow!(
            "`{name}` is not a catalogued model: it must be one of [{}], or `hf:OWNER/REPO[/FILE.gguf]` (see `dgem model list`)",
            names.join(", ")
        ))
    })
}

/// `dgem_model::hub::pull` of `reference` with the environment's hub
/// settings and a progress bar; the user's mistakes (a bad reference, a
/// gated repository) exit 1, the rest 2.
fn hub_pull(reference: &str, force: bool) -> Result<PathBuf, Failure> {
    let cfg = dgem_model::hub::HubConfig::from_env();
    dgem_model::hub::pull(reference, &cfg, force, &Bar::new()).map_err(|e| {
        if e.is_user_error() {
            user(e)
        } else {
            internal(e)
        }
    })
}

/// Run a model subcommand.
pub fn run(cmd: ModelCommand) -> Result<(), Failure> {
    match cmd {
        ModelCommand::Pull {
            reference: Some(r),
            force,
            from_hub: false,
            ..
        } if r.starts_with("hf:") => {
            let path = hub_pull(&r, force)?;
            println!("{r} ready at {}", path.display());
            println!(
                "use it with: --model {}   (or DGEM_MODEL_PATH)",
                path.display()
            );
        }
        ModelCommand::Pull {
            reference,
            force,
            from_hub: true,
            ..
        } => {
            let spec = catalogued(reference.as_deref())?;
            let Some(hub) = spec.card.hub.clone() else {
                return Err(user(anyhow::anyhow!(
                    "`--from-hub`: the model `{}` has no known upstream hub release with its sha256; pull it from the package index (without `--from-hub`)",
                    spec.card.name
                )));
            };
            let path = hub_pull(&hub, force)?;
            // The hub's own sha256 was checked by the pull; the pinned one
            // must be the same file.
            dgem_model::verify(&path, &spec, &Bar::new()).map_err(internal)?;
            println!(
                "{} ready at {} (from {hub})",
                spec.card.name,
                path.display()
            );
            println!("use it with: --model {}", path.display());
        }
        ModelCommand::Pull {
            reference,
            force,
            pull_timeout,
            from_hub: false,
        } => {
            let spec = catalogued(reference.as_deref())?;
            let mut cfg = crate::pull::config(pull_timeout);
            cfg.force = force;
            let fetched = crate::pull::fetch(&spec, cfg, crate::pull::Fetch::OneShot);
            let path = fetched.map_err(|e| {
                let offline = matches!(&e, dgem_model::ModelError::DownloadFailed { stderr, .. }
                    if stderr.contains("No matching distribution") || stderr.contains("NewConnectionError") || stderr.contains("Network is unreachable") || stderr.contains("Temporary failure in name resolution"));
                if offline {
                    internal(anyhow::anyhow!(
                        "{e}\n\nThe model is fetched from the Python package index with pip and the index could not be reached (or has no such package). Check the network or proxy (pip reads PIP_INDEX_URL for a mirror), or put a GGUF file you already have in place with `--model PATH` / DGEM_MODEL_PATH"
                    ))
                } else {
                    internal(e)
                }
            })?;
            println!(
                "{} ({}) ready at {}",
                spec.card.name,
                spec.id,
                path.display()
            );
        }
        ModelCommand::List { local: true, .. } => local_list(),
        ModelCommand::List {
            available: true, ..
        } => {
            println!(
                "{:<58} {:>9} {:>9}  note",
                "pull with `dgem model pull …`", "size", "RAM"
            );
            for m in AVAILABLE {
                println!("{:<58} {:>9} {:>9}  {}", m.reference, m.size, m.ram, m.note);
            }
            println!(
                "\nSizes are approximate (the pull checks the hub's exact size and sha256). RAM is the\nmodel plus a 4k-token context on CPU. The small embedded model is Gemma 3 270M base; these are\ninstruction-tuned and larger, so better at real decisions and slower."
            );
        }
        ModelCommand::List {
            available: false,
            local: false,
        } => catalogue_list(),
        ModelCommand::Path { name } => {
            let spec = catalogued(name.as_deref())?;
            println!("{}", dgem_model::cached_path(&spec).display());
        }
        ModelCommand::Verify { path } => {
            let named = path
                .as_deref()
                .filter(|p| !p.is_file())
                .and_then(|p| p.to_str())
                .and_then(dgem_model::find_model);
            let (spec, path, explicit) = match (named, path) {
                (Some(spec), _) => {
                    let p = dgem_model::cached_path(&spec);
                    (spec, p, false)
                }
                (None, Some(p)) => {
                    let size = std::fs::metadata(&p).map_or(0, |m| m.len());
                    let spec =
                        dgem_model::model_with_size(size).unwrap_or_else(dgem_model::default_model);
                    (spec, p, true)
                }
                (None, None) => {
                    let spec = dgem_model::default_model();
                    let p = dgem_model::cached_path(&spec);
                    (spec, p, false)
                }
            };
            if !path.is_file() {
                let hint = if explicit {
                    String::new()
                } else {
                    format!("; run `dgem model pull {}` first", spec.card.name)
                };
                return Err(user(anyhow::anyhow!(
                    "no model file at {}{hint}",
                    path.display()
                )));
            }
            dgem_model::verify(&path, &spec, &Bar::new()).map_err(user)?;
            println!("{}: size and sha256 match {}", path.display(), spec.id);
        }
    }
    Ok(())
}

/// `dgem model list`: the catalogue (name, size, licence, whether it is
/// cached, its upstream hub release and measured figures), then other GGUF
/// files in the cache.
fn catalogue_list() {
    println!("cache: {}", dgem_model::model_dir().display());
    println!(
        "{:<20} {:>9} {:<20} {:<11} title",
        "--model NAME", "size", "licence", "state"
    );
    let known = dgem_model::known_models();
    for spec in &known {
        let present = dgem_model::cached_path(spec).is_file();
        println!(
            "{:<20} {:>9} {:<20} {:<11} {}",
            spec.card.name,
            human_size(spec.size),
            spec.card.licence,
            if present { "present" } else { "not pulled" },
            spec.card.title
        );
        let parts = spec.parts.len();
        let first = spec.parts.first().map(dgem_model::PartSpec::requirement);
        println!(
            "{:<20} sha256 {}; {parts} part package(s) from {}",
            "",
            spec.sha256,
            first.unwrap_or_default()
        );
        if let Some(hub) = &spec.card.hub {
            println!("{:<20} also at {hub} (`--from-hub`)", "");
        }
        for figure in &spec.card.figures {
            println!("{:<20} measured: {figure}", "");
        }
    }
    let others: Vec<_> = dgem_model::list()
        .into_iter()
        .filter(|e| !e.known)
        .collect();
    if !others.is_empty() {
        println!("\nother files in the cache (use with --model PATH):");
        for e in others {
            println!(
                "  {:<28} {:>9}  {}",
                e.id,
                human_size(e.size),
                e.path.display()
            );
        }
    }
}

/// `dgem model list --local`: one row per GGUF file in every store.
fn local_list() {
    let stores = dgem_model::Stores::from_env();
    for (store, dir) in stores.roots() {
        let state = if dir.is_dir() { "" } else { "  (not found)" };
        println!("{:<9} {}{state}", format!("{store}:"), dir.display());
    }
    let models = stores.list_local();
    println!();
    if models.is_empty() {
        println!("no GGUF model in any store");
        return;
    }
    println!(
        "{:<9} {:<56} {:>9} {:<12} {:<9} {:>8}  loads",
        "store", "--model", "size", "arch", "quant", "context"
    );
    for m in &models {
        let dash = || "-".to_owned();
        let loads = m
            .refusal()
            .map_or_else(|| "yes".to_owned(), |why| format!("no: {why}"));
        println!(
            "{:<9} {:<56} {:>9} {:<12} {:<9} {:>8}  {loads}",
            m.store.name(),
            m.reference,
            human_size(m.size),
            m.architecture().map_or_else(dash, str::to_owned),
            m.quantization().unwrap_or_else(dash),
            m.context_length().map_or_else(dash, |c| c.to_string()),
        );
    }
}

/// `1.2 GB`, `340 MB`, `12 KB`, `512 B` (decimal units).
fn human_size(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)] // display only
    let b = bytes as f64;
    match bytes {
        0..=999 => format!("{bytes} B"),
        1_000..=999_999 => format!("{:.0} KB", b / 1e3),
        1_000_000..=999_999_999 => format!("{:.0} MB", b / 1e6),
        _ => format!("{:.1} GB", b / 1e9),
    }
}

/// A model on the Hugging Face Hub that `dgem model pull hf:…` can fetch.
struct Available {
    reference: &'static str,
    size: &'static str,
    ram: &'static str,
    note: &'static str,
}

/// Gemma 3 instruction-tuned GGUFs, smallest first (approximate sizes of the
/// Q4 files; the pull checks the hub's exact size and sha256).
const AVAILABLE: &[Available] = &[
    Available {
        reference: "hf:ggml-org/gemma-3-270m-it-GGUF",
        size: "≈0.3 GB",
        ram: "≈0.6 GB",
        note: "the small embedded model's size, instruction-tuned",
    },
    Available {
        reference: "hf:ggml-org/gemma-3-1b-it-GGUF",
        size: "≈0.8 GB",
        ram: "≈1.5 GB",
        note: "fast on a laptop CPU",
    },
    Available {
        reference: "hf:ggml-org/gemma-3-4b-it-GGUF",
        size: "≈2.5 GB",
        ram: "≈4 GB",
        note: "a good CPU default; the repo also holds the vision projector",
    },
    Available {
        reference: "hf:ggml-org/gemma-3-12b-it-GGUF",
        size: "≈7.3 GB",
        ram: "≈10 GB",
        note: "slow on CPU; for batch runs",
    },
    Available {
        reference: "hf:ggml-org/gemma-3-27b-it-GGUF",
        size: "≈16.5 GB",
        ram: "≈20 GB",
        note: "a large CPU or GPU host",
    },
    Available {
        reference: "hf:google/gemma-3-4b-it-qat-q4_0-gguf",
        size: "≈3.2 GB",
        ram: "≈5 GB",
        note: "Google's quantization-aware Q4_0; gated: accept the licence, set HF_TOKEN",
    },
];
