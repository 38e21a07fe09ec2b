//! `dgem render`: show what a policy renders to, without a model.

use std::path::PathBuf;

use clap::Args;

use crate::commands::decide::{load_payload, VarArgs};
use crate::failure::{internal, Failure};

/// Arguments of `dgem render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Policy template: a `.json.tmpl` path, or a name looked up in
    /// `DGEM_TEMPLATES` or `templates/`, then among the built-in policies.
    #[arg(short = 't', long = "template")]
    pub template: PathBuf,
    #[command(flatten)]
    pub vars: VarArgs,
}

/// Print `{"schema", "state"}` after rendering and normalization.
pub fn run(args: RenderArgs) -> Result<(), Failure> {
    // No state check here: rendering the placeholder text is how a user sees
    // what a policy does; `decide` refuses it. A variable with no `default`
    // that is not given is refused unless `--allow-missing-vars`.
    let payload = load_payload(&args.template, &args.vars)?;
    let out = serde_json::json!({"schema": payload.schema, "state": payload.state});
    let text = serde_json::to_string_pretty(&out).map_err(internal)?;
    println!("{text}");
    Ok(())
}
