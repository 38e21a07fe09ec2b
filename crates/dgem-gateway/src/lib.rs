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
//! Place in the graph: `dgem-core`, `dgem-backend`, `dgem-engine`,
//! `dgem-server` ← `dgem-gateway` ← `dgem-cli`. Routing sees only
//! [`Replica`]s: a [`Decider`](dgem_engine::Decider) (a [`RemoteDgem`] over
//! reqwest, or the embedded engine in process) plus, when it can, a raw
//! [`Forward`] of the OpenAI-shaped routes. The [`Gateway`] is itself a
//! `Decider` (a composite), and the [`Backends`](dgem_server::api::Backends)
//! of the server's `/api/*` routes ([`api`]), which `dgem gateway` serves
//! through the server's one router builder (`dgem_server::surface`).
//!
//! ```no_run
//! # fn demo(gateway: std::sync::Arc<dgem_gateway::Gateway>) {
//! let templates = dgem_engine::templates::TemplateDir::new("templates");
//! let after = std::sync::Arc::default(); // no cascade provider, no calibration file
//! let app = dgem_gateway::router(dgem_gateway::GatewayState { gateway, templates, after });
//! // `app` serves /api/*, /v1/chat/completions, /v1/systemone and /health.
//! # let _ = app;
//! # }
//! ```
#![deny(missing_docs)]

pub mod api;
pub mod auth;
pub mod breaker;
pub mod composite;
pub mod envelope;
pub mod error;
pub mod forward;
pub mod remote;
pub mod replica;
pub mod reply;
pub mod rewrite;
pub mod routing;
pub mod server;
pub mod vertex;

pub use breaker::{Breaker, BreakerConfig, BreakerState};
pub use error::GatewayError;
pub use forward::{Forward, Forwarded};
pub use remote::{RemoteConfig, RemoteDgem};
pub use replica::{Kind, Replica};
pub use routing::{
    BackendSpec, BackendStatus, Gateway, GatewayConfig, RouteConfig, Routed, VERTEX_FIRST,
};
pub use server::{router, GatewayState};

/// Largest upstream reply body read (bytes).
pub const MAX_UPSTREAM_BODY: usize = 16 * 1024 * 1024;
