//! `dgem serve`: the structured decision HTTP server over the embedded model
//! or, with `--backend vllm=URL`, over vLLM serving DiffusionGemma (docs/engine-vllm.md)
//! (routes and settings: `docs/serve.md`, `dgem_server::config::env`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use dgem_server::{AppState, ServeConfig};

use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

/// The templates folder when none is named: `templates/` in the working
/// directory (missing is fine: the catalogue then holds the built-ins).
pub const DEFAULT_TEMPLATES: &str = "templates";

/// How long shutdown waits for a model load that was told to stop (a
/// cancelled pull kills pip and removes its files within 0.1 s).
const LOAD_STOP_GRACE: Duration = Duration::from_secs(2);

/// Arguments of `dgem serve`. Limits, keys and defaults come from the
/// environment: `API_KEY`, `DGEM_SERVER_KEY`, `MAX_INFLIGHT`, `INFLIGHT_WAIT_S`,
/// `REQUEST_TIMEOUT_S`, `MAX_BODY_BYTES`, `DEFAULT_SAMPLES`, `DEFAULT_LAYOUT`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A TOML file of settings (keys: the snake_case names of the settings,
    /// e.g. `port`, `max_inflight`, `api_keys`, `cors_origins`, `studio`,
    /// `model`). Environment variables and flags win over it (docs/serve.md).
    #[arg(long, env = "DGEM_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
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
    /// Weight-staging directory (`dgem stage` DEST) whose progress `/health` reports
    /// as `bytes_staged_gb` and `staging_phase`.
    #[arg(long, env = "DGEM_STAGING_DIR")]
    pub staging_dir: Option<std::path::PathBuf>,
    /// Skip the warm-up decision at start-up (the original server sends
    /// none). Without it `/ready` follows the backend's live health alone;
    /// with it (the default) `/ready` also waits for one real decision, so the
    /// first user request does not pay for cold caches.
    #[arg(long = "no-warmup", env = "DGEM_NO_WARMUP")]
    pub no_warmup: bool,
    /// After the warm-up decision, read the calibration priors of every
    /// template in `--templates` whose policy text does not depend on its
    /// variables, so the first request of each does not pay for them (about
    /// 4× a later decision under the default `document_first` layout: 3.8× in
    /// `tools/serve_load.py --startup`, 4.3× in `dgem bench-speed`).
    /// `/ready` waits for it (`phase: warming_priors`); the priors persist per
    /// model, so a restart finds them on disk. Embedded model only.
    #[arg(long = "warm-priors", env = "DGEM_WARM_PRIORS")]
    pub warm_priors: bool,
    /// Also serve Decision Studio at `/` and its `/api/*` routes (backend
    /// `local`); `/` then shows the page instead of the health JSON (docs/studio.md).
    #[arg(long, env = "DGEM_STUDIO")]
    pub studio: bool,
    /// Let browser pages on this origin call the server (CORS; repeatable or
    /// comma-separated; `*` for any origin). Default: `DGEM_CORS_ORIGINS`, else
    /// no CORS headers.
    #[arg(long = "cors-origin", value_name = "ORIGIN", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// Folder of `.json.tmpl` policy templates for `/mcp` and the Studio,
    /// searched before the built-in policies (default `templates`; a missing
    /// default folder leaves the built-ins, a folder named here or in
    /// `DGEM_TEMPLATES` must exist with `--studio`).
    #[arg(long, env = "DGEM_TEMPLATES")]
    pub templates: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub after: crate::commands::after::SetupArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub vllm: crate::vllm::VllmArgs,
}

/// Load the model, bind, serve until Ctrl-C or SIGTERM, then drain.
pub fn run(args: ServeArgs) -> Result<(), Failure> {
    let file = args
        .config
        .as_deref()
        .map(dgem_server::config_file::ConfigFile::read)
        .transpose()
        .map_err(user)?;
    let mut config = match &file {
        Some(f) => f.serve_config(|k| std::env::var(k).ok()).map_err(user)?,
        None => ServeConfig::from_env().map_err(user)?,
    };
    let args = match &file {
        Some(f) => with_file(args, f)?,
        None => args,
    };
    if let Some(p) = args.port {
        config.port = p;
    }
    if let Some(h) = args.host {
        config.host = h;
    }
    if let Some(d) = args.staging_dir {
        config.staging_dir = Some(d);
    }
    if args.no_warmup {
        config.warmup = false;
    }
    let templates_dir = args
        .templates
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(DEFAULT_TEMPLATES));
    if args.warm_priors {
        if args.no_warmup {
            return Err(user(anyhow::anyhow!(
                "`--warm-priors` runs after the warm-up decision: drop `--no-warmup` to use it"
            )));
        }
        if crate::vllm::backend_url(&args.vllm)?.is_some() {
            return Err(user(anyhow::anyhow!(
                "`--warm-priors` is for the embedded model: the vLLM backend reads no calibration priors"
            )));
        }
        if args.model.calibration == dgem_engine::CalibrationMode::Off {
            return Err(user(anyhow::anyhow!(
                "`--warm-priors` caches calibration priors, but `--calibration off` reads none: drop one of them"
            )));
        }
        if !templates_dir.is_dir() {
            return Err(user(anyhow::anyhow!(
                "`--warm-priors` reads the policies of `--templates`, which must be a folder of `.json.tmpl` files. Given: `{}` (not a directory)",
                templates_dir.display()
            )));
        }
        config.warm_priors = Some(dgem_engine::templates::TemplateDir::new(&templates_dir));
    }
    if !args.cors_origins.is_empty() {
        for o in &args.cors_origins {
            dgem_server::config::check_origin("--cors-origin", o).map_err(user)?;
        }
        config.cors_origins = args.cors_origins.clone();
    }
    // A folder the user named (flag, `DGEM_TEMPLATES`, config file) that is
    // not there is theirs to fix now, not a catalogue without their policies
    // later; the default `templates/` may be missing (the built-ins remain).
    if args.studio && !cfg!(feature = "studio") {
        return Err(user(anyhow::anyhow!(
            "`--studio`: this dgem was built without the Decision Studio (Cargo feature `studio`); use a default build"
        )));
    }
    if args.studio {
        if let Some(named) = args.templates.as_deref().filter(|t| !t.is_dir()) {
            return Err(user(anyhow::anyhow!(
                "`--templates` must be a folder of `.json.tmpl` policies (the Studio reads them). Given: `{}` (not a directory)",
                named.display()
            )));
        }
    }
    // The embedded model loads behind the bound port (`dgem_server::loading`):
    // `/health` answers at once with `phase: loading_model`. What the user must
    // fix (a missing `--model`, a bad `--context`) still fails here, before
    // binding; a load that fails later stops the server with exit 2 (an
    // internal failure), or 1 when the failure is the user's to fix.
    let (engine, pending): (Arc<dyn dgem_engine::Decider>, _) =
        match crate::vllm::backend_url(&args.vllm)? {
            Some(url) => (
                crate::vllm::shared_decider(
                    &url,
                    &args.vllm,
                    &args.model,
                    crate::pull::Fetch::BeforeServing,
                )?,
                None,
            ),
            None => {
                crate::vllm::check_embedded(&args.vllm)?;
                let id = setup::precheck(&args.model)?;
                let loading = dgem_server::loading::LoadingDecider::new(id);
                // A first start downloads the default (or a catalogued)
                // model: `/health` says so from the first probe on.
                let pulled = match &args.model.model {
                    None => Some(dgem_model::default_model()),
                    Some(given) => setup::catalogued(given),
                };
                let pulls = pulled.as_ref().is_some_and(|spec| {
                    crate::pull::config(args.model.pull_timeout)
                        .cached(spec)
                        .is_none()
                });
                if let (true, Some(spec)) = (pulls, &pulled) {
                    loading.report(
                        dgem_server::loading::PULLING_MODEL,
                        Some(format!(
                            "starting the download of the model `{}`",
                            spec.card.name
                        )),
                    );
                }
                (
                    loading.clone() as Arc<dyn dgem_engine::Decider>,
                    Some(loading),
                )
            }
        };
    config.model_name = args.served_model.unwrap_or_else(|| engine.info().model_id);
    let model_args = args.model.clone();
    let templates = dgem_engine::templates::TemplateDir::new(templates_dir);
    let studio = args.studio;
    let after = args.after.setup()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(internal)?;
    let result = rt.block_on(async move {
        let addr = config.addr();
        let listener = dgem_server::bind(addr)
            .await
            .with_context(|| format!("could not listen on {addr}"))
            .map_err(user)?;
        // One decision service for the deployment: every route decides
        // through it (MCP and the Studio API share its catalogue).
        let service = dgem_service::Service::new(dgem_service::Catalogue::new(templates))
            .with_defaults(config.schema_defaults)
            .with_after(after.clone());
        let state = AppState::with_service(engine, config, service);
        let extra = extra_routes(&state, studio, addr);
        let mcp_note = if cfg!(feature = "mcp") {
            ", MCP at /mcp"
        } else {
            ""
        };
        eprintln!("dgem serve: listening on http://{addr}{mcp_note} (Ctrl-C to stop)");
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<Failure>();
        // Cancelled on Ctrl-C / SIGTERM: a first start's download stops at
        // once (pip killed, partial files removed) instead of holding the
        // process after its port closed.
        let stop_pull = dgem_model::CancelToken::new();
        let mut load_task = None;
        if let Some(loading) = pending {
            let cancel = stop_pull.clone();
            load_task = Some(tokio::spawn(async move {
                let reporter = loading.clone();
                let loaded = tokio::task::spawn_blocking(move || {
                    let progress = crate::progress::ServeProgress::new(reporter);
                    let fetch = crate::pull::Fetch::Reported {
                        progress: &progress,
                        cancel,
                    };
                    setup::engine_with(&model_args, fetch)
                })
                .await;
                match loaded {
                    Ok(Ok(engine)) => loading.set(Arc::new(engine)),
                    Ok(Err(failure)) => {
                        loading.fail(failure.message());
                        let _ = failed_tx.send(failure);
                    }
                    Err(join) => {
                        loading.fail(join.to_string());
                        let _ =
                            failed_tx.send(internal(anyhow::anyhow!("model load task: {join}")));
                    }
                }
            }));
        }
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<Failure>();
        let shutdown = async move {
            // A load that succeeded drops its sender: that is not a reason to stop.
            let load_failed = async {
                match failed_rx.await {
                    Ok(f) => f,
                    Err(_) => std::future::pending().await,
                }
            };
            tokio::select! {
                () = dgem_server::shutdown_signal() => stop_pull.cancel(),
                f = load_failed => {
                    let _ = stop_tx.send(f);
                }
            }
        };
        let served = dgem_server::serve_with(listener, state, extra, shutdown).await;
        if let Some(task) = load_task {
            // A cancelled pull ends within a poll; a GGUF load cannot be
            // stopped and is left to the runtime's shutdown below.
            let _ = tokio::time::timeout(LOAD_STOP_GRACE, task).await;
        }
        served.map_err(internal)?;
        match stop_rx.await {
            Ok(load_failure) => Err(load_failure),
            Err(_) => Ok(()),
        }
    });
    // Dropping the runtime would wait for a model load still running on its
    // blocking pool (seen: > 33 s after SIGTERM); the process exits instead.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

/// Fill the command's own settings that neither a flag nor the environment
/// set from the config file (`host`, `studio`, `served_model`, `templates`,
/// `warmup`, `warm_priors`, `model`, `threads`, `context`). A flag left at its default (`--context
/// 4096`) or not given (`--templates`) counts as unset.
fn with_file(
    mut args: ServeArgs,
    f: &dgem_server::config_file::ConfigFile,
) -> Result<ServeArgs, Failure> {
    let bad = |key: &str, expected: &str, given: &str| {
        user(anyhow::anyhow!(
            "`--config` {}: `{key}` must be {expected}. Given: `{given}`",
            f.path.display()
        ))
    };
    let boolean = |key: &str| -> Result<Option<bool>, Failure> {
        f.get(key)
            .map(|v| match v {
                "true" => Ok(true),
                "false" => Ok(false),
                other => Err(bad(key, "true or false", other)),
            })
            .transpose()
    };
    if args.host.is_none() {
        if let Some(h) = f.get("host") {
            args.host = Some(
                h.parse()
                    .map_err(|_| bad("host", "an IP address such as 0.0.0.0 or 127.0.0.1", h))?,
            );
        }
    }
    if !args.studio {
        args.studio = boolean("studio")?.unwrap_or(false);
    }
    if args.served_model.is_none() {
        args.served_model = f.get("served_model").map(str::to_string);
    }
    if !args.no_warmup && boolean("warmup")? == Some(false) {
        args.no_warmup = true;
    }
    if !args.warm_priors {
        args.warm_priors = boolean("warm_priors")?.unwrap_or(false);
    }
    if args.templates.is_none() {
        args.templates = f.get("templates").map(Into::into);
    }
    if args.model.model.is_none() {
        args.model.model = f.get("model").map(Into::into);
    }
    if args.model.threads.is_none() {
        if let Some(t) = f.get("threads") {
            args.model.threads = Some(
                t.parse()
                    .map_err(|_| bad("threads", "a whole number of threads", t))?,
            );
        }
    }
    if args.model.context == 4096 {
        if let Some(c) = f.get("context") {
            args.model.context = c
                .parse()
                .map_err(|_| bad("context", "a whole number of tokens", c))?;
        }
    }
    Ok(args)
}

/// The routes in front of the server's own: MCP over Streamable HTTP at
/// `/mcp` (feature `mcp`) and, with `--studio`, the Decision Studio and its
/// `/api` (feature `studio`). Merged here so dgem-server needs neither
/// crate; they decide through the server's `MAX_INFLIGHT` gate, as its
/// routes do.
#[allow(unused_variables, unused_mut)]
fn extra_routes(state: &AppState, studio: bool, addr: std::net::SocketAddr) -> axum::Router {
    // The deployment's one decision service: MCP and the Studio API share
    // its catalogue, schema defaults and post-read setup with the server's
    // own routes.
    let service = state.service().clone();
    let mut extra = axum::Router::new();
    #[cfg(feature = "mcp")]
    {
        let mcp =
            dgem_mcp::DecisionServer::from_service(state.gated_decider_for("mcp"), service.clone());
        extra = extra.merge(dgem_mcp::http_router_for(mcp));
    }
    #[cfg(feature = "studio")]
    if studio {
        extra = extra
            .merge(dgem_studio::router())
            .merge(dgem_server::api::local_routes(
                state.gated_decider_for("api"),
                service,
            ));
        eprintln!("dgem serve: Decision Studio at http://{addr}/");
    }
    extra
}
