//! The decision service between every dgem surface and the model.
//!
//! `/api/decide`, the MCP tools and `dgem decide` each used to hand-build
//! parse → policy → options → decide → post-read over untyped JSON, with the
//! request's keys declared in several lists that drifted apart. Here they are
//! declared once:
//! - [`DecisionRequest`] (with [`ReadOptions`] and [`AfterOptions`]
//!   flattened in it) is the one typed request; its derives give the OpenAPI
//!   schema (utoipa), the MCP tool schemas (schemars, [`tool_schema`]), the
//!   list of keys an unknown key is refused against
//!   ([`DecisionRequest::keys`]) and, for the read and post-read options, the
//!   command-line flags (clap).
//! - [`Catalogue`] is the one policy catalogue (a folder, then the built-in
//!   policies) with the one set of variable rules (aliases, unknown names,
//!   missing state).
//! - [`Service`] prepares a request once ([`prepare`]), reads it through a
//!   [`Route`] and applies the post-read once: [`Service::decide_on`] is the
//!   one call that reaches a model, from `dgem decide` and `dgem batch`, the
//!   MCP tools, `/api/decide`, the chat route and `/v1/systemone` (the last
//!   two decode their bodies into a [`DecisionRequest`] with the policy
//!   inline, [`InlinePolicy`]). [`Decided`] is the typed answer each surface
//!   renders, with how the read was routed ([`RouteFacts`]).

#![deny(missing_docs)]

mod catalogue;
mod error;
pub mod keys;
mod prepare;
pub mod read;
mod request;
pub mod route;
mod service;
mod surface;

pub use catalogue::{alias_variables, check_unknown_variables, Catalogue, Rendered};
pub use dgem_cascade::AfterOptions;
pub use error::{ServiceError, TemplateFailure};
pub use prepare::{prepare, Prepared};
pub use read::ReadOptions;
pub use request::{
    gives_images, shown, tool_schema, CustomQuestion, DecisionRequest, InlinePolicy, ToolKind,
    CUSTOM_LABEL, DEFAULT_SEED, DEFAULT_TEMPLATE,
};
pub use route::{Direct, Route, RouteFacts, Routed, IN_PROCESS, LOCAL_BACKEND};
pub use service::{Decided, Service};
pub use surface::Surface;
