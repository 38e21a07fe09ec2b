//! # dgem-gateway
//!
//! One gateway in front of several decision backends (reference.md §2.7–2.8,
//! §4): a Vertex AI dedicated endpoint, a Cloud Run service, a local
//! `dgem serve` or the embedded engine, any dgem-compatible URL. It picks a
//! backend per request (modes `vertex_first`, `vertex`, `cloudrun`, `local`,
//! `X-DGem-Backend` within an allow-list), holds requests while a scaled-to-zero
//! backend wakes up, fails over on retryable errors (also mid-request), keeps a
//! circuit breaker per replica and a retry budget, and signs requests for
//! Google Cloud ([`auth`]).
//!
//! Place in the graph: `dgem-core`, `dgem-backend`, `dgem-engine`, `dgem-mcp`
//! ← `dgem-gateway` ← `dgem-cli`. Routing sees only [`Replica`]s: a
//! [`Decider`](dgem_engine::Decider) (a [`RemoteDgem`] over reqwest, or the
//! embedded engine in process) plus, when it can, a raw [`Forward`] of the
//! OpenAI-shaped routes. The [`Gateway`] is itself a `Decider` (a composite).
//!
//! ```no_run
//! # fn demo(engine: std::sync::Arc<dyn dgem_engine::Decider>) {
//! let templates = dgem_engine::templates::TemplateDir::new("templates");
//! let defaults = dgem_core::schema::SchemaDefaults::default();
//! let app = dgem_gateway::local_api(engine, templates, defaults);
//! // `app` serves /api/templates, /api/decide[/{template}], /api/health, /api/backends.
//! # let _ = app;
//! # }
//! ```
#![deny(missing_docs)]

pub mod api;
pub mod auth;
pub mod breaker;
pub mod catalog;
pub mod composite;
pub mod envelope;
pub mod error;
pub mod remote;
pub mod replica;
pub mod request;
pub mod routing;
pub mod server;
pub mod vertex;

use std::sync::Arc;

use axum::Router;
use dgem_core::schema::SchemaDefaults;
use dgem_engine::templates::TemplateDir;
use dgem_engine::Decider;

pub use api::{ApiState, BACKEND_HEADER, BACKEND_USED_HEADER};
pub use breaker::{Breaker, BreakerConfig, BreakerState};
pub use error::GatewayError;
pub use remote::{RemoteConfig, RemoteDgem};
pub use replica::{Forward, Forwarded, Kind, Replica};
pub use routing::{
    BackendSpec, BackendStatus, Gateway, GatewayConfig, RouteConfig, Routed, VERTEX_FIRST,
};
pub use server::{router, GatewayState};

/// Largest upstream reply body read (bytes).
pub const MAX_UPSTREAM_BODY: usize = 16 * 1024 * 1024;

/// The `/api/*` routes over one in-process decider (backend name `local`), for
/// `dgem serve --studio`: `GET /api/templates`, `POST /api/decide[/{template}]`,
/// `GET /api/health`, `GET /api/backends`. Policies are validated under
/// `defaults`, the deployment's schema defaults.
pub fn local_api(
    decider: Arc<dyn Decider>,
    templates: TemplateDir,
    defaults: SchemaDefaults,
) -> Router {
    let gateway = Arc::new(Gateway::single(
        "local",
        Kind::Local,
        Replica::in_process(decider),
    ));
    api::routes(ApiState {
        gateway,
        templates,
        defaults,
    })
}
