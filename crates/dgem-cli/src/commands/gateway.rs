//! `dgem gateway`: one HTTP gateway in front of decision backends (Vertex AI,
//! Cloud Run, local `dgem serve` replicas, the embedded engine, named remotes)
//! with per-request routing, failover, cold-start holds and Google auth.
//! Settings: flags > env > `--config` JSON file > defaults.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use dgem_engine::templates::TemplateDir;
use dgem_gateway::auth::{
    audience_of, AuthConfig, BearerSource, StaticToken, TokenKind, TokenProvider,
};
use dgem_gateway::{
    BackendSpec, Gateway, GatewayConfig, GatewayState, Kind, RemoteConfig, RemoteDgem, Replica,
    RouteConfig,
};
use serde::Deserialize;

use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

/// Arguments of `dgem gateway`.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Address to listen on.
    #[arg(long, env = "DGEM_GATEWAY_HOST")]
    pub host: Option<String>,
    /// Port to listen on (default 8090).
    #[arg(long, short = 'p', env = "PORT")]
    pub port: Option<u16>,
    /// JSON file with any of: vertex_url, region, project_number, cloudrun_url,
    /// local_url (string or list), remotes ({name: url}), default_backend,
    /// backends (list), wakeup_timeout_s, templates. Flags and env win over it.
    #[arg(long, env = "DGEM_GATEWAY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Folder of `.json.tmpl` policy templates, searched before the built-in
    /// policies (default `templates`; a missing folder leaves the built-ins).
    #[arg(long, env = "DGEM_TEMPLATES")]
    pub templates: Option<PathBuf>,
    /// Vertex AI dedicated endpoint: endpoint id, `projects/<p>/locations/<r>/endpoints/<id>`, or the `/invoke` URL.
    #[arg(long, env = "DGEM_VERTEX_URL")]
    pub vertex_url: Option<String>,
    /// Region of a bare Vertex endpoint id (default us-central1).
    #[arg(long, env = "GCP_REGION")]
    pub region: Option<String>,
    /// Project number of a bare Vertex endpoint id.
    #[arg(long, env = "GCP_PROJECT_NUMBER")]
    pub project_number: Option<String>,
    /// Cloud Run service URL (gets an OIDC identity token, audience = the service URL).
    #[arg(long, env = "DGEM_CLOUDRUN_URL")]
    pub cloudrun_url: Option<String>,
    /// `dgem serve` URLs of the `local` backend, comma separated (replicas; failover between them).
    #[arg(long, env = "DGEM_LOCAL_URL", value_delimiter = ',')]
    pub local_url: Vec<String>,
    /// Also run the embedded engine in this process as a `local` replica.
    #[arg(long, env = "DGEM_GATEWAY_EMBEDDED")]
    pub embedded: bool,
    /// A named dgem-compatible backend, `NAME=URL` (repeatable).
    #[arg(long = "remote", env = "DGEM_REMOTES", value_delimiter = ',')]
    pub remotes: Vec<String>,
    /// Bearer token for local and remote backends.
    #[arg(long, env = "DGEM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Default mode: vertex_first (default with Vertex), vertex, cloudrun, local or a remote's name.
    #[arg(long, env = "DGEM_DEFAULT_BACKEND")]
    pub default_backend: Option<String>,
    /// Allow-list of modes a request may pick, comma or semicolon separated.
    #[arg(long, env = "DGEM_BACKENDS", value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Seconds a request is held while a backend wakes up (default 600).
    #[arg(long, env = "DGEM_WAKEUP_TIMEOUT_S")]
    pub wakeup_timeout: Option<u64>,
    /// Seconds one attempt on one backend may take (default 90).
    #[arg(long, env = "DGEM_ATTEMPT_TIMEOUT_S", default_value_t = 90)]
    pub attempt_timeout: u64,
    /// Seconds from sending a request to a backend to its reply's headers (default: the attempt timeout).
    #[arg(long, env = "DGEM_FIRST_BYTE_TIMEOUT_S")]
    pub first_byte_timeout: Option<u64>,
    /// Seconds a reply body may go silent after its headers before the attempt fails over (default 5).
    #[arg(long, env = "DGEM_IDLE_TIMEOUT_S", default_value_t = 5)]
    pub idle_timeout: u64,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub after: crate::commands::after::SetupArgs,
}

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    host: Option<String>,
    port: Option<u16>,
    templates: Option<PathBuf>,
    vertex_url: Option<String>,
    region: Option<String>,
    project_number: Option<String>,
    cloudrun_url: Option<String>,
    #[serde(default)]
    local_url: OneOrMany,
    #[serde(default)]
    remotes: indexmap::IndexMap<String, String>,
    default_backend: Option<String>,
    #[serde(default)]
    backends: Vec<String>,
    wakeup_timeout_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::None => Vec::new(),
            Self::One(s) => s.split(',').map(str::to_string).collect(),
            Self::Many(v) => v,
        }
    }
}

/// The time budgets of one attempt on a remote backend (seconds on the
/// command line): the whole attempt, until the reply's headers, and the
/// longest silence of its body.
#[derive(Debug, Clone, Copy)]
struct Budgets {
    attempt: Duration,
    first_byte: Duration,
    idle: Duration,
}

fn remote(
    url: &str,
    auth: Option<Arc<dyn BearerSource>>,
    budgets: Budgets,
) -> Result<Replica, Failure> {
    let mut cfg = RemoteConfig::new(url);
    cfg.auth = auth;
    cfg.timeout = budgets.attempt;
    cfg.first_byte_timeout = budgets.first_byte;
    cfg.idle_timeout = budgets.idle;
    Ok(Replica::remote(RemoteDgem::new(cfg).map_err(internal)?))
}

fn build(args: GatewayArgs) -> Result<(GatewayConfig, TemplateDir, String, u16), Failure> {
    let file: FileConfig = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("`--config` {} is not readable", p.display()))
                .map_err(user)?;
            serde_json::from_str(&text)
                .with_context(|| {
                    format!("`--config` {} is not a valid gateway config", p.display())
                })
                .map_err(user)?
        }
        None => FileConfig::default(),
    };
    let pick = |a: Option<String>, f: Option<String>| a.or(f).filter(|s| !s.trim().is_empty());
    let attempt = Duration::from_secs(args.attempt_timeout.max(1));
    let budgets = Budgets {
        attempt,
        first_byte: args
            .first_byte_timeout
            .map_or(attempt, |s| Duration::from_secs(s.max(1)).min(attempt)),
        idle: Duration::from_secs(args.idle_timeout.max(1)),
    };
    let static_auth: Option<Arc<dyn BearerSource>> = args
        .token
        .clone()
        .map(|t| Arc::new(StaticToken(t)) as Arc<dyn BearerSource>);
    let mut backends = Vec::new();
    if let Some(spec) = pick(args.vertex_url, file.vertex_url) {
        let region = pick(args.region, file.region)
            .unwrap_or_else(|| dgem_gateway::vertex::DEFAULT_REGION.into());
        let project = pick(args.project_number, file.project_number);
        let base =
            dgem_gateway::vertex::resolve(&spec, &region, project.as_deref()).map_err(user)?;
        let auth: Arc<dyn BearerSource> = Arc::new(TokenProvider::new(
            TokenKind::Access,
            AuthConfig::from_env(&TokenKind::Access),
        ));
        backends.push(BackendSpec {
            name: "vertex".into(),
            kind: Kind::Vertex,
            replicas: vec![remote(&base, Some(auth), budgets)?],
        });
    }
    if let Some(url) = pick(args.cloudrun_url, file.cloudrun_url) {
        let kind = TokenKind::Identity {
            audience: audience_of(&url),
        };
        let auth: Arc<dyn BearerSource> = match &static_auth {
            Some(s) => s.clone(),
            None => Arc::new(TokenProvider::new(
                kind.clone(),
                AuthConfig::from_env(&kind),
            )),
        };
        backends.push(BackendSpec {
            name: "cloudrun".into(),
            kind: Kind::Cloudrun,
            replicas: vec![remote(&url, Some(auth), budgets)?],
        });
    }
    let local_urls: Vec<String> = if args.local_url.is_empty() {
        file.local_url.into_vec()
    } else {
        args.local_url
    };
    let mut local: Vec<Replica> = Vec::new();
    for url in local_urls
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
    {
        local.push(remote(url, static_auth.clone(), budgets)?);
    }
    if args.embedded {
        let engine = Arc::new(setup::engine(&args.model)?);
        local.push(Replica::in_process(engine));
    }
    if !local.is_empty() {
        backends.push(BackendSpec {
            name: "local".into(),
            kind: Kind::Local,
            replicas: local,
        });
    }
    let remotes: Vec<(String, String)> = if args.remotes.is_empty() {
        file.remotes.into_iter().collect()
    } else {
        let mut out = Vec::new();
        for r in &args.remotes {
            let Some((name, url)) = r.split_once('=') else {
                return Err(user(anyhow::anyhow!(
                    "`--remote` must be NAME=URL. Given: `{r}`"
                )));
            };
            out.push((name.trim().to_string(), url.trim().to_string()));
        }
        out
    };
    for (name, url) in remotes {
        backends.push(BackendSpec {
            name,
            kind: Kind::Remote,
            replicas: vec![remote(&url, static_auth.clone(), budgets)?],
        });
    }
    let allowed: Vec<String> = if args.backends.is_empty() {
        file.backends
    } else {
        args.backends
    }
    .iter()
    .flat_map(|b| b.split(';'))
    .map(|b| b.trim().to_string())
    .filter(|b| !b.is_empty())
    .collect();
    let route = RouteConfig {
        wakeup_timeout: Duration::from_secs(
            args.wakeup_timeout.or(file.wakeup_timeout_s).unwrap_or(600),
        ),
        attempt_timeout: attempt,
        ..RouteConfig::default()
    };
    let config = GatewayConfig {
        backends,
        default: pick(args.default_backend, file.default_backend),
        allowed: (!allowed.is_empty()).then_some(allowed),
        route,
    };
    let templates = TemplateDir::new(
        args.templates
            .or(file.templates)
            .unwrap_or_else(|| "templates".into()),
    );
    let host = pick(args.host, file.host).unwrap_or_else(|| "127.0.0.1".into());
    let port = args.port.or(file.port).unwrap_or(8090);
    Ok((config, templates, host, port))
}

/// Build the gateway and serve it until Ctrl-C or SIGTERM.
pub fn run(args: GatewayArgs) -> Result<(), Failure> {
    let after = args.after.setup()?;
    let (config, templates, host, port) = build(args)?;
    let gateway = Arc::new(Gateway::new(config).map_err(user)?);
    let rt = setup::runtime()?;
    rt.block_on(async move {
        let addr: std::net::SocketAddr = format!("{host}:{port}")
            .parse()
            .with_context(|| format!("`--host`/`--port` must form an address. Given: `{host}:{port}`"))
            .map_err(user)?;
        let listener = dgem_server::bind(addr)
            .await
            .with_context(|| format!("could not listen on {addr}"))
            .map_err(user)?;
        // One surface, as `dgem serve` has: the gateway's routes and MCP at
        // /mcp, then the Studio page at /, under the same key check
        // (API_KEY / DGEM_SERVER_KEY), body limit (MAX_BODY_BYTES), request
        // timeout, telemetry, panic catcher and /metrics.
        let serve_config = dgem_server::ServeConfig::from_env().map_err(user)?;
        let mut guard = dgem_server::surface::Guard::from_config(&serve_config);
        // A routed call may hold for a replica's cold start and then run one
        // attempt: the request limit covers both unless set higher.
        let route = gateway.config();
        guard.request_timeout = guard
            .request_timeout
            .max(route.wakeup_timeout + route.attempt_timeout);
        let mcp = dgem_mcp::http_router_for(
            dgem_mcp::DecisionServer::new(gateway.clone(), templates.clone())
                .with_after(after.clone()),
        );
        let own = dgem_gateway::router(GatewayState {
            gateway: gateway.clone(),
            templates,
            after,
        })
        .merge(mcp);
        let app = dgem_server::surface::surface([own, dgem_studio::router()], &guard);
        tracing::info!(%addr, default = gateway.default_backend(), available = ?gateway.available(), "dgem gateway listening");
        eprintln!(
            "dgem gateway: listening on http://{addr}; default backend `{}`; allowed [{}]",
            gateway.default_backend(),
            gateway.available().join(", ")
        );
        // The same connection limits as `dgem serve` (HEADER_READ_TIMEOUT_S,
        // MAX_CONNECTIONS, SHUTDOWN_TIMEOUT_S).
        dgem_server::conn::serve_app(listener, app, serve_config.conn, dgem_server::shutdown_signal())
            .await
            .map_err(internal)
    })
}
