//! The one router builder of every dgem HTTP listener (`dgem serve`, `dgem
//! gateway`): whatever routes a listener has, [`surface`] wraps them in the
//! same stack, outermost first:
//!
//! 1. the panic catcher (a handler panic is a 500 JSON error, not a dropped
//!    connection);
//! 2. telemetry (a span per request, `dgem_http_requests_total` and
//!    `dgem_http_request_duration_seconds` by route and status);
//! 3. the request timeout ([`Guard::request_timeout`], then 504 JSON);
//! 4. the key check ([`Guard`] keys: every POST needs `Authorization: Bearer
//!    <key>` or `X-DGem-Key: <key>`; GETs stay open);
//! 5. JSON error bodies for errors made outside the handlers (the 413 of the
//!    body limit, an extractor's rejection);
//! 6. the body limit ([`Guard::max_body_bytes`]);
//!
//! plus `GET /metrics` (Prometheus text over the process-wide recorder) and the
//! JSON 404 for an unknown route. Connection-level limits (header-read
//! timeout, connection cap, shutdown deadline) are [`crate::conn`]'s.

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::{middleware, Router};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;

pub use crate::layers::Guard;
use crate::{health, layers as mw};

/// `layers` of routes, in priority order, with `GET /metrics`, the JSON 404
/// and the whole layer stack of the module docs. A request the first router
/// does not route falls through to the next (so `dgem serve --studio` puts the
/// Studio page at `/` in front of the server's own `/`); one no router takes
/// reaches `/metrics` or the 404. No router may have its own fallback.
///
/// The stack is put on each router's matched routes (`route_layer`) and, on
/// the last router, on its 404 too: a request passes through it exactly once,
/// inside routing, so every layer sees the route template it matched (the
/// `route` label of the request metrics, an auth refusal included).
pub fn surface(layers: impl IntoIterator<Item = Router>, guard: &Guard) -> Router {
    // Install the process-wide recorder now: a counter incremented before it
    // exists goes nowhere (the gateway counts attempts before any `/metrics`).
    let _ = crate::telemetry::handle();
    let last = stacked(
        Router::new()
            .route(
                "/metrics",
                get(health::metrics).fallback(health::get_only_fallback),
            )
            .fallback(health::fallback),
        guard,
        false,
    );
    let layers: Vec<Router> = layers
        .into_iter()
        .map(|r| {
            if r.has_routes() {
                stacked(r, guard, true)
            } else {
                r
            }
        })
        .collect();
    layers
        .into_iter()
        .rev()
        .fold(last, |next, r| r.fallback_service(next))
}

/// `r` under the layer stack: on its matched routes only (`routes_only`), or
/// on its routes and its fallback.
fn stacked(r: Router, guard: &Guard, routes_only: bool) -> Router {
    macro_rules! put {
        ($r:expr, $layer:expr) => {
            if routes_only {
                $r.route_layer($layer)
            } else {
                $r.layer($layer)
            }
        };
    }
    // Innermost first; auth runs before the body limit reads anything.
    let r = put!(r, DefaultBodyLimit::disable());
    let r = put!(r, RequestBodyLimitLayer::new(guard.max_body_bytes));
    let r = put!(r, middleware::from_fn(mw::json_errors));
    let r = put!(r, middleware::from_fn_with_state(guard.clone(), mw::auth));
    let r = put!(
        r,
        middleware::from_fn_with_state(guard.clone(), mw::timeout)
    );
    let r = put!(r, middleware::from_fn(crate::telemetry::track));
    put!(r, CatchPanicLayer::custom(mw::panic_response))
}
