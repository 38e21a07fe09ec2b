//! `dgem mcp`: the decision tools as a Model Context Protocol server over
//! stdio. Stdout carries only protocol bytes; logs go to stderr.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use dgem_engine::templates::TemplateDir;

use crate::failure::{internal, Failure};
use crate::setup::{self, ModelArgs};

/// Arguments of `dgem mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Folder of `.json.tmpl` policy templates, searched before the built-in
    /// policies; names resolve only inside it or among the built-ins (a
    /// missing folder leaves the built-ins).
    #[arg(long, env = "DGEM_TEMPLATES", default_value = "templates")]
    pub templates: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Load the model and serve MCP over stdin/stdout until the client disconnects.
pub fn run(args: McpArgs) -> Result<(), Failure> {
    let engine = Arc::new(setup::engine(&args.model)?);
    let rt = setup::runtime()?;
    tracing::info!(templates = %args.templates.display(), "dgem mcp: serving over stdio");
    rt.block_on(dgem_mcp::serve_stdio(
        engine,
        TemplateDir::new(args.templates),
    ))
    .map_err(internal)
}
