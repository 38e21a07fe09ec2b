//! Cross-cutting middleware: auth, the per-request timeout, JSON for errors
//! produced outside our handlers, and the panic fallback; and [`Guard`], the
//! keys and limits they read (built once per listener by `crate::surface`).

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::config::ServeConfig;
use crate::error::{ApiError, ErrorKind};
use crate::state::key_digest;

/// What every route of a listener shares: accepted keys (as sha256 digests),
/// the whole-request time limit and the body size limit.
#[derive(Clone)]
pub struct Guard {
    key_digests: Arc<Vec<[u8; 32]>>,
    /// Limit on one whole request (queue and model time included).
    pub request_timeout: Duration,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field(
                "keys",
                &format_args!("[{} redacted]", self.key_digests.len()),
            )
            .field("request_timeout", &self.request_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

impl Guard {
    /// A guard accepting `keys` (none = an open server) with the given limits.
    pub fn new(keys: &[String], request_timeout: Duration, max_body_bytes: usize) -> Self {
        Self {
            key_digests: Arc::new(keys.iter().map(|k| key_digest(k.as_bytes())).collect()),
            request_timeout,
            max_body_bytes,
        }
    }

    /// The guard of `config`: `API_KEY`/`DGEM_SERVER_KEY`, `REQUEST_TIMEOUT_S`,
    /// `MAX_BODY_BYTES`.
    pub fn from_config(config: &ServeConfig) -> Self {
        Self::new(
            &config.api_keys,
            config.request_timeout,
            config.max_body_bytes,
        )
    }

    /// Digests of the accepted keys; empty = open.
    pub(crate) fn key_digests(&self) -> &[[u8; 32]] {
        &self.key_digests
    }
}

/// The header that carries the key when `Authorization` holds a platform token.
pub const KEY_HEADER: &str = "x-dgem-key";

/// Middleware: with keys configured, every POST needs `Authorization: Bearer
/// <key>` or `X-DGem-Key: <key>` (serving.md §9.3). Keys are compared as
/// sha256 digests in constant time and never logged. GETs stay open.
pub async fn auth(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST || guard.key_digests().is_empty() {
        return next.run(req).await;
    }
    if presented_keys(req.headers()).any(|k| accepted(&guard, k.as_bytes())) {
        return next.run(req).await;
    }
    tracing::info!(path = %req.uri().path(), "rejected: missing or wrong key");
    ApiError::new(ErrorKind::Authentication, "missing or wrong bearer token").into_response()
}

/// The token of an `Authorization: Bearer <token>` value; the scheme name is
/// case-insensitive (RFC 7235 §2.1), so `bearer` and `BEARER` work too.
fn bearer_token(v: &str) -> Option<&str> {
    let (scheme, token) = v.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

fn presented_keys(h: &HeaderMap) -> impl Iterator<Item = &str> {
    let bearer = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .map(str::trim);
    let own = h
        .get(KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    bearer.into_iter().chain(own).filter(|k| !k.is_empty())
}

fn accepted(guard: &Guard, key: &[u8]) -> bool {
    let d = key_digest(key);
    // Check every configured key so the time does not depend on which one matched.
    guard
        .key_digests()
        .iter()
        .fold(subtle::Choice::from(0), |acc, k| acc | k.ct_eq(&d))
        .into()
}

/// Middleware: a whole request gets `request_timeout`, then 504 JSON.
pub async fn timeout(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let limit = guard.request_timeout;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            ErrorKind::Timeout,
            format!("request timed out after {:.1} s", limit.as_secs_f64()),
        )
        .into_response(),
    }
}

/// Middleware: an error response that is not our JSON (the body-limit layer's
/// 413, an extractor rejection) is rewritten into `{"error": {…}}`.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error())
        || is_json
        || resp.extensions().get::<ErrorKind>().is_some()
    {
        return resp;
    }
    if status.as_u16() == 405 {
        // A route that answers other methods only (the Studio's `/`, a GET on
        // stateless `/mcp`): say so, keeping the router's `Allow`.
        let allow = resp.headers().get(header::ALLOW).cloned();
        let shown = allow
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("another method")
            .to_string();
        let mut fixed = ApiError::new(
            ErrorKind::MethodNotAllowed,
            format!("method {method} is not allowed on this route; use {shown}"),
        )
        .into_response();
        if let Some(v) = allow {
            fixed.headers_mut().insert(header::ALLOW, v);
        }
        return fixed;
    }
    let kind = match status.as_u16() {
        413 => ErrorKind::PayloadTooLarge,
        404 => ErrorKind::NotFound,
        401 => ErrorKind::Authentication,
        504 => ErrorKind::Timeout,
        408 => ErrorKind::RequestTimeout,
        503 => ErrorKind::Overloaded,
        s if s < 500 => ErrorKind::InvalidRequest,
        _ => ErrorKind::Internal,
    };
    let reason = status
        .canonical_reason()
        .unwrap_or("request failed")
        .to_lowercase();
    let message = match kind {
        ErrorKind::PayloadTooLarge => "request body is over the size limit".to_string(),
        ErrorKind::NotFound => format!(
            "unknown route: {method} {}",
            path.chars().take(200).collect::<String>()
        ),
        // Keep what the layer that answered said (an extractor's "failed to
        // buffer the request body: …", a library's "missing Host header"):
        // it names the fault; a bare status reason does not.
        ErrorKind::InvalidRequest => match plain_text(resp.into_body()).await {
            Some(text) => format!("{reason}: {text}"),
            None => reason,
        },
        _ => reason,
    };
    let mut fixed = ApiError::new(kind, message).into_response();
    *fixed.status_mut() = status;
    fixed
}

/// Most bytes of a plain-text error body kept in the JSON message.
const MAX_PLAIN_ERROR_BYTES: usize = 512;

/// The first [`MAX_PLAIN_ERROR_BYTES`] of a plain-text error body, trimmed;
/// `None` when it is empty, longer, or not UTF-8.
async fn plain_text(body: axum::body::Body) -> Option<String> {
    let bytes = axum::body::to_bytes(body, MAX_PLAIN_ERROR_BYTES)
        .await
        .ok()?;
    let text = std::str::from_utf8(&bytes).ok()?.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The last resort: a handler panic becomes 500 JSON instead of a dropped connection.
pub fn panic_response(err: Box<dyn Any + Send + 'static>) -> Response {
    let detail = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = detail, "handler panicked");
    ApiError::new(
        ErrorKind::Internal,
        "internal error: the request handler failed",
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowercase_bearer_scheme_is_accepted() {
        assert_eq!(bearer_token("Bearer k1"), Some("k1"));
        assert_eq!(bearer_token("bearer k1"), Some("k1"));
        assert_eq!(bearer_token("BEARER k1"), Some("k1"));
        assert_eq!(bearer_token("Basic k1"), None);
        assert_eq!(bearer_token("Bearer"), None);
    }
}
