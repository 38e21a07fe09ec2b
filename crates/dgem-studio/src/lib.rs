//! # dgem-studio
//!
//! Decision Studio (issue 7, reference.md §6): a static web page, embedded in
//! the binary with `include_str!`, that runs decisions through the shared
//! `/api` routes (`GET /api/templates`, `/api/backends`, `/api/health`,
//! `POST /api/decide[/{template}]`). Plain ES module, HTML and CSS: no build
//! step, no CDN, nothing fetched at run time but the `/api` routes.
//!
//! Place in the graph: depends on axum only. `dgem serve --studio` (in
//! `dgem-cli`) and the gateway merge [`router`] with the `/api` routes.
//!
//! ```
//! let app: axum::Router = axum::Router::new().merge(dgem_studio::router());
//! # let _ = app;
//! ```
#![deny(missing_docs)]

use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The page (`/`, `/index.html`, `/studio/`).
pub const INDEX_HTML: &str = include_str!("../assets/index.html");
/// The app module (`/studio/app.js`).
pub const APP_JS: &str = include_str!("../assets/app.js");
/// The style sheet (`/studio/style.css`).
pub const STYLE_CSS: &str = include_str!("../assets/style.css");
/// The question types' widgets (`/studio/kinds.js`), imported by the app.
pub const KINDS_JS: &str = include_str!("../assets/kinds.js");

/// Everything the page loads comes from this origin; no inline script.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                   script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

/// One embedded asset with its media type.
#[derive(Debug, Clone, Copy)]
struct Asset {
    body: &'static str,
    content_type: &'static str,
}

impl IntoResponse for Asset {
    fn into_response(self) -> Response {
        let mut resp = self.body.into_response();
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        // Assets change with the binary; a cached copy must be revalidated.
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
        resp
    }
}

const INDEX: Asset = Asset {
    body: INDEX_HTML,
    content_type: "text/html; charset=utf-8",
};
const APP: Asset = Asset {
    body: APP_JS,
    content_type: "text/javascript; charset=utf-8",
};
const KINDS: Asset = Asset {
    body: KINDS_JS,
    content_type: "text/javascript; charset=utf-8",
};
const STYLE: Asset = Asset {
    body: STYLE_CSS,
    content_type: "text/css; charset=utf-8",
};

/// The Studio routes: the page at `/`, `/index.html` and `/studio/`, its
/// assets under `/studio/`. Merge with the `/api` routes it calls.
pub fn router() -> Router {
    Router::new()
        .route("/", get(|| async { INDEX }))
        .route("/index.html", get(|| async { INDEX }))
        .route("/studio", get(|| async { INDEX }))
        .route("/studio/", get(|| async { INDEX }))
        .route("/studio/app.js", get(|| async { APP }))
        .route("/studio/style.css", get(|| async { STYLE }))
        .route("/studio/kinds.js", get(|| async { KINDS }))
}
