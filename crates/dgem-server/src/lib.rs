//! # dgem-server
//!
//! The HTTP face of dgem (`dgem serve`), wire-compatible with the original
//! structured server (serving.md §2–3, §8–9):
//!
//! * `POST /v1/chat/completions`, `/predict`, `/rawPredict` (and the same under
//!   `/invoke`): system message = schema JSON, user message = state; the reply is
//!   an OpenAI `chat.completion` whose content is the `{answers, diagnostics}` envelope.
//! * `POST /v1/systemone` (and `/invoke/v1/systemone`): the Jev shape, JSON or multipart.
//! * `POST /v1/raw/chat/completions`: 410 `route_removed`.
//! * `GET /v1/models`: the served model, in OpenAI's list shape.
//! * `GET /openapi.json`: the OpenAPI 3.1 document of every route ([`openapi`]).
//! * `GET /health`, `/invoke/health`, `/`: always 200; `GET /ready`: 200 after a
//!   real warm-up decision; `GET /metrics`: Prometheus text.
//! * [`api`]: the `/api/*` routes of the Decision Studio, shared with
//!   `dgem gateway` through the [`api::Backends`] seam.
//!
//! Every listener (this server, `dgem gateway`) is built by
//! [`surface::surface`]: one layer stack (auth, body limit, timeout,
//! telemetry, panic catcher), `/metrics` and one error shape
//! ([`ApiError`]) on every route.
//!
//! Place in the graph: `dgem-core`, `dgem-backend`, `dgem-engine` ← `dgem-server`
//! ← `dgem-gateway`, `dgem-cli`. The server sees only `Arc<dyn Decider>` (it
//! never knows which model runs) and the deployment's decision service
//! (`dgem-service`), through which every route decides.
//!
//! ```no_run
//! # async fn demo(engine: dgem_engine::Engine) -> Result<(), dgem_server::ServeError> {
//! use std::sync::Arc;
//! use dgem_server::{AppState, ServeConfig};
//! let config = ServeConfig::from_env().expect("valid environment");
//! let listener = dgem_server::bind(config.addr()).await?;
//! let state = AppState::new(Arc::new(engine), config);
//! dgem_server::serve(listener, state, dgem_server::shutdown_signal()).await
//! # }
//! ```
#![deny(missing_docs)]

pub mod api;
pub mod body;
pub mod chat;
pub mod config;
pub mod config_file;
pub mod conn;
pub mod cors;
pub mod decide;
pub mod error;
pub mod gate;
pub mod health;
pub mod layers;
pub mod loading;
pub mod openapi;
pub mod priors;
pub mod staging;
pub mod state;
pub mod structured;
pub mod surface;
pub mod systemone;
pub mod telemetry;
pub mod warmup;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::{get, post, MethodRouter};
use axum::Router;
use thiserror::Error;
use tokio::net::{TcpListener, TcpSocket};

pub use config::{ConfigError, ServeConfig};
pub use error::{ApiError, ErrorKind, Flavor};
pub use state::{AppState, Readiness};

/// Listen backlog (serving.md §9.1: the default of a few reset connections under load).
pub const LISTEN_BACKLOG: u32 = 256;

/// Paths of the chat route and its Vertex aliases (each also under `/invoke`).
pub const CHAT_PATHS: &[&str] = &["/v1/chat/completions", "/predict", "/rawPredict"];

/// Why serving stopped with an error.
#[derive(Debug, Error)]
pub enum ServeError {
    /// Binding or accepting failed.
    #[error("server i/o: {0}")]
    Io(#[from] std::io::Error),
}

fn post_only(r: MethodRouter<AppState>) -> MethodRouter<AppState> {
    r.fallback(health::post_only_fallback)
}

/// The server's own routes over `state` (chat, systemone, health, ready),
/// without the layer stack: [`router`] and [`router_with`] add it.
fn own_routes(state: AppState) -> Router {
    let mut r: Router<AppState> = Router::new();
    for prefix in ["", "/invoke"] {
        for path in CHAT_PATHS {
            r = r.route(&format!("{prefix}{path}"), post_only(post(chat::handle)));
        }
        r = r
            .route(
                &format!("{prefix}/v1/systemone"),
                post_only(post(systemone::handle)),
            )
            .route(
                &format!("{prefix}/v1/raw/chat/completions"),
                post_only(post(health::raw_removed)),
            );
    }
    for path in ["/v1/models", "/invoke/v1/models"] {
        r = r.route(path, get(chat::models).fallback(health::get_only_fallback));
    }
    r.route("/", get(health::health).fallback(health::get_only_fallback))
        .route(
            "/health",
            get(health::health).fallback(health::get_only_fallback),
        )
        .route(
            "/invoke/health",
            get(health::health).fallback(health::get_only_fallback),
        )
        .route(
            "/ready",
            get(health::ready).fallback(health::get_only_fallback),
        )
        .route(
            "/openapi.json",
            get(openapi::handler).fallback(health::get_only_fallback),
        )
        .with_state(state)
}

/// The full router over `state`: routes, `/metrics`, and the one layer stack
/// of [`surface::surface`] (auth, body limit, timeout, telemetry, panic catcher).
pub fn router(state: AppState) -> Router {
    router_with(state, Router::new())
}

/// [`router`] with `extra` routes in front (MCP at `/mcp`, the Studio and its
/// `/api`): a request `extra` does not route falls through to the server's
/// own. Both get the same layer stack ([`surface::surface`]): with keys
/// configured, a POST to `/mcp` or `/api/decide` needs a key too.
///
/// With CORS origins configured ([`ServeConfig::cors_origins`]), the CORS
/// layer wraps the whole stack ([`cors`]).
pub fn router_with(state: AppState, extra: Router) -> Router {
    let guard = surface::Guard::from_config(state.config());
    let cors = cors::layer(&state.config().cors_origins);
    let app = surface::surface([extra, own_routes(state)], &guard);
    match cors {
        Some(c) => app.layer(c),
        None => app,
    }
}

/// Bind `addr` with `SO_REUSEADDR` and a backlog of [`LISTEN_BACKLOG`].
///
/// # Errors
/// The socket error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serve `state` on `listener` until `shutdown` resolves, then stop accepting
/// and let in-flight requests finish. Starts the warm-up decision (when
/// `config.warmup`) and the metrics upkeep.
///
/// # Errors
/// [`ServeError::Io`] when the listener fails.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_with(listener, state, Router::new(), shutdown).await
}

/// Like [`serve`], with `extra` routes in front of the server's own: a request
/// `extra` does not route falls through to [`router`]. `dgem serve` uses it to
/// mount MCP at `/mcp` and, with `--studio`, the Studio page and `/api`
/// (which then own `/`). The server's key check (`API_KEY`), body limit and
/// request timeout wrap `extra` too.
///
/// # Errors
/// [`ServeError::Io`] when the listener fails.
pub async fn serve_with(
    listener: TcpListener,
    state: AppState,
    extra: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, config = ?state.config(), "dgem serve listening");
    }
    let mut tasks = Vec::new();
    if state.config().warmup {
        let s = state.clone();
        tasks.push(tokio::spawn(async move {
            // Readiness records the failure; nothing else to do with it here.
            let _ = warmup::run(&s).await;
        }));
    } else {
        // No warm-up decision (`--no-warmup`; the original server sends
        // none): readiness is the backend's live health alone.
        state.set_readiness(state::Readiness {
            phase: "ready".into(),
            ready: true,
            warmup_s: None,
            ready_ts: None,
            error: None,
            priors_warmed: None,
        });
    }
    let upkeep = state.metrics().clone();
    let info_state = state.clone();
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        let mut info_set = false;
        loop {
            tick.tick().await;
            // dgem_build_info names the model once it is in place (an embedded
            // model loads behind the bound port).
            let info = info_state.decider().info();
            if !info_set && info.runtime != loading::PLACEHOLDER_RUNTIME {
                let cfg = info_state.config();
                telemetry::set_build_info(&cfg.version, &cfg.revision, &info);
                info_set = true;
            }
            upkeep.run_upkeep();
        }
    }));
    let limits = state.config().conn;
    // At the shutdown signal the decision gate closes: requests waiting for a
    // slot are answered 503 with `Retry-After` at once (they were dropped
    // with no status when the drain deadline passed: 24 of 32 under load,
    // issue 38), and decisions holding a slot finish during the drain.
    let gate = state.gate().cloned();
    let shutdown = async move {
        shutdown.await;
        if let Some(gate) = gate {
            gate.close();
            tracing::info!("decision gate closed: waiting requests get 503");
        }
    };
    let app = router_with(state, extra);
    let result = conn::serve_app(listener, app, limits, shutdown).await;
    for t in tasks {
        t.abort();
    }
    tracing::info!("dgem serve stopped");
    result.map_err(ServeError::from)
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("ctrl-c: shutting down"),
        () = term => tracing::info!("SIGTERM: shutting down"),
    }
}
