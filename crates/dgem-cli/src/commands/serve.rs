//! `dgem serve`: the structured decision HTTP server over the embedded model
//! (routes and settings: `docs/serve.md`, `dgem_server::config::env`).

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use dgem_server::{AppState, ServeConfig};

use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

/// Arguments of `dgem serve`. Limits, keys and defaults come from the
/// environment: `API_KEY`, `DGEM_SERVER_KEY`, `MAX_INFLIGHT`, `INFLIGHT_WAIT_S`,
/// `REQUEST_TIMEOUT_S`, `MAX_BODY_BYTES`, `DEFAULT_SAMPLES`, `DEFAULT_LAYOUT`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Port to listen on (falls back to `AIP_HTTP_PORT`, then 8080).
    #[arg(long, env = "PORT")]
    pub port: Option<u16>,
    /// Address to bind (default 0.0.0.0).
    #[arg(long, env = "DGEM_HOST")]
    pub host: Option<IpAddr>,
    /// Model name echoed on `/v1/systemone` (default: the loaded model's id, so a
    /// client never mistakes the embedded model for DiffusionGemma).
    #[arg(long = "served-model", env = "DGEM_SERVED_MODEL")]
    pub served_model: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Load the model, bind, serve until Ctrl-C or SIGTERM, then drain.
pub fn run(args: ServeArgs) -> Result<(), Failure> {
    let mut config = ServeConfig::from_env().map_err(user)?;
    if let Some(p) = args.port {
        config.port = p;
    }
    if let Some(h) = args.host {
        config.host = h;
    }
    let engine = setup::engine(&args.model)?;
    config.model_name = args
        .served_model
        .unwrap_or_else(|| engine.backend().info().model_id.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(internal)?;
    rt.block_on(async move {
        let addr = config.addr();
        let listener = dgem_server::bind(addr)
            .await
            .with_context(|| format!("could not listen on {addr}"))
            .map_err(user)?;
        eprintln!("dgem serve: listening on http://{addr} (Ctrl-C to stop)");
        let state = AppState::new(Arc::new(engine), config);
        dgem_server::serve(listener, state, dgem_server::shutdown_signal())
            .await
            .map_err(internal)
    })
}
