//! CORS for `dgem serve`, so a web page on another origin can call the
//! decision routes from the browser. Off unless origins are configured
//! (`DGEM_CORS_ORIGINS` or `--cors-origin`): without it a browser keeps
//! cross-origin pages away from the server, which is the safe default for a
//! server that may hold an `API_KEY`.
//!
//! The layer sits outside every other one, so a preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) is answered before the key check: a
//! browser never sends credentials on a preflight. The real request still
//! needs its key. Allowed: `GET`, `POST`, `OPTIONS`; the headers dgem clients
//! send (`Content-Type`, `Authorization`, `X-DGem-Key`, `X-DGem-Backend`,
//! `Mcp-Session-Id`, `Accept`); the reply headers a page may read are the
//! `X-DGem-*` ones, `Server-Timing`, `X-Inference-Time-Ms` and
//! `Mcp-Session-Id`. Preflights are cached for 10 minutes (`Access-Control-Max-Age: 600`).

use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Kept here too, where it was: `check_origin` now lives with the other
/// settings checks in [`crate::config`].
pub use crate::config::check_origin;

/// How long a browser may cache a preflight answer.
pub const MAX_AGE: Duration = Duration::from_secs(600);

/// The CORS layer for `origins` (already checked by
/// [`crate::config::check_origin`]);
/// `None` when there are none (CORS off). `*` anywhere allows any origin.
pub fn layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    let h = HeaderName::from_static;
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers([
                header::CONTENT_TYPE,
                header::AUTHORIZATION,
                header::ACCEPT,
                h("x-dgem-key"),
                h("x-dgem-backend"),
                h("mcp-session-id"),
            ])
            .expose_headers([
                h("x-dgem-ignored-fields"),
                h("x-dgem-backend-used"),
                h("x-dgem-cascade-used"),
                h("server-timing"),
                h("x-inference-time-ms"),
                h("mcp-session-id"),
            ])
            .max_age(MAX_AGE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_and_host_only() {
        for ok in ["*", "https://app.example.com", "http://localhost:3000"] {
            assert!(check_origin("DGEM_CORS_ORIGINS", ok).is_ok(), "{ok}");
        }
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://",
            "ftp://x",
            "https://a b",
        ] {
            let e = check_origin("DGEM_CORS_ORIGINS", bad).expect_err(bad);
            assert_eq!(e.given, bad);
            assert!(e.to_string().contains("`DGEM_CORS_ORIGINS`"), "{e}");
        }
        assert!(layer(&[]).is_none());
        assert!(layer(&["*".into()]).is_some());
    }
}
