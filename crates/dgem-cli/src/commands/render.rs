//! `dgem render`: show what a policy renders to, without a model.

use std::path::PathBuf;

use clap::Args;

use crate::commands::decide::{load_payload, VarArgs};
use crate::failure::{internal, Failure};

/// Arguments of `dgem render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Policy template (`.json.tmpl` path, or a name under `templates/`).
    #[arg(short = 't', long = "template")]
    pub template: PathBuf,
    #[command(flatten)]
    pub vars: VarArgs,
}

/// Print `{"schema", "state"}` after rendering and normalization.
pub fn run(args: RenderArgs) -> Result<(), Failure> {
    let (payload, _) = load_payload(&args.template, &args.vars)?;
    let out = serde_json::json!({"schema": payload.schema, "state": payload.state});
    let text = serde_json::to_string_pretty(&out).map_err(internal)?;
    println!("{text}");
    Ok(())
}
