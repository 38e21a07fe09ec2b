//! The one error → HTTP table (house style rule 9).
//!
//! Every failure of a request becomes an [`ApiError`]: an [`ErrorKind`] (which
//! alone decides the status code and the error `type`), a message and, where
//! one field is at fault, its path as `param`. Every route of every dgem
//! listener (`/v1/*`, `/api/*`, the gateway's pass-through routes) answers an
//! error with the one body shape `{"error": {"message": …, "type": …,
//! "param"?: …}}`: the OpenAI error object, which the original structured
//! server also used for its `/v1` routes.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use dgem_backend::BackendError;
use dgem_engine::DecideError;
use serde_json::{json, Map, Value};
use thiserror::Error;

/// What went wrong, as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Unreadable body or a malformed chat request (400 `invalid_request_error`).
    InvalidRequest,
    /// A systemone schema or state the server cannot accept (422 `validation_error`).
    Validation,
    /// Missing or wrong key (401 `authentication_error`).
    Authentication,
    /// No such route (404 `invalid_request_error`, as OpenAI answers one).
    NotFound,
    /// A request named a backend this listener does not route to (400
    /// `backend_unavailable`, the original gateway's type).
    UnknownBackend,
    /// The route exists but not for this method (405 `invalid_request_error`,
    /// with an `Allow` header).
    MethodNotAllowed,
    /// The free-form generation route (410 `route_removed`).
    RouteRemoved,
    /// Body over the size limit (413 `invalid_request_error`).
    PayloadTooLarge,
    /// The body did not arrive in full within the body deadline (408
    /// `timeout_error`).
    RequestTimeout,
    /// No decision slot in time, or the backend queue is full (503 `overloaded`).
    Overloaded,
    /// Nothing can take the request now: every backend's breaker is open or
    /// the one left reports a failed phase (503 `unavailable_error`).
    Unavailable,
    /// The request ran past its time limit (504 `timeout_error`).
    Timeout,
    /// The backend failed (502 `server_error`).
    Upstream,
    /// Anything else (500 `server_error`).
    Internal,
}

impl ErrorKind {
    /// The HTTP status of this kind: the single mapping table.
    pub fn status(self) -> StatusCode {
        match self {
            Self::InvalidRequest | Self::UnknownBackend => StatusCode::BAD_REQUEST,
            Self::Validation => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Authentication => StatusCode::UNAUTHORIZED,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RouteRemoved => StatusCode::GONE,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::Overloaded | Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Self::Upstream => StatusCode::BAD_GATEWAY,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error `type` string (also the stable metrics label).
    pub fn error_type(self) -> &'static str {
        match self {
            Self::InvalidRequest
            | Self::PayloadTooLarge
            | Self::MethodNotAllowed
            | Self::NotFound => "invalid_request_error",
            Self::UnknownBackend => "backend_unavailable",
            Self::Validation => "validation_error",
            Self::Authentication => "authentication_error",
            Self::RouteRemoved => "route_removed",
            Self::Overloaded => "overloaded",
            Self::Unavailable => "unavailable_error",
            Self::Timeout | Self::RequestTimeout => "timeout_error",
            Self::Upstream | Self::Internal => "server_error",
        }
    }
}

/// Which route's conventions apply to user errors: 400 on chat, 422 on systemone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `/v1/chat/completions` and its aliases.
    Chat,
    /// `/v1/systemone`.
    SystemOne,
}

impl Flavor {
    /// The kind of a user (validation) error on this route.
    pub fn user_kind(self) -> ErrorKind {
        match self {
            Self::Chat => ErrorKind::InvalidRequest,
            Self::SystemOne => ErrorKind::Validation,
        }
    }

    /// Short name for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::SystemOne => "systemone",
        }
    }
}

/// A failed request: kind, message and, for `overloaded`, a `Retry-After`.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{message}")]
pub struct ApiError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Human-readable message (the serving.md wording where it has one).
    pub message: String,
    /// Seconds for the `Retry-After` header.
    pub retry_after: Option<u64>,
    /// Methods for the `Allow` header of a 405.
    pub allow: Option<&'static str>,
    /// Path of the request field at fault (`questions[2].options`,
    /// `variables`), when one is.
    pub param: Option<String>,
}

impl ApiError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after: None,
            allow: None,
            param: None,
        }
    }

    /// Name the request field at fault (`param` in the body).
    #[must_use]
    pub fn with_param(mut self, field: impl Into<String>) -> Self {
        let field = field.into();
        self.param = (!field.is_empty()).then_some(field);
        self
    }

    /// A user error on `flavor`'s route (400 chat, 422 systemone).
    pub fn user(flavor: Flavor, message: impl Into<String>) -> Self {
        Self::new(flavor.user_kind(), message)
    }

    /// The 405 of a known route asked with another method; `allow` lists the
    /// methods it takes (`POST`, `GET, HEAD`).
    pub fn method_not_allowed(method: &str, allow: &'static str) -> Self {
        Self {
            allow: Some(allow),
            ..Self::new(
                ErrorKind::MethodNotAllowed,
                format!("method {method} is not allowed on this route; use {allow}"),
            )
        }
    }

    /// A 400 whose message opens with the field at fault in backticks
    /// ("`samples` must be …"): that field becomes `param`.
    pub fn invalid_field(message: impl Into<String>) -> Self {
        let message = message.into();
        let field = message
            .strip_prefix('`')
            .and_then(|rest| rest.split_once('`'))
            .map(|(f, _)| f.to_string())
            .filter(|f| !f.is_empty() && !f.contains(' '));
        let e = Self::new(ErrorKind::InvalidRequest, message);
        match field {
            Some(f) => e.with_param(f),
            None => e,
        }
    }

    /// A 500 for a misconfigured server (a template file of its folder it
    /// cannot read), naming what is wrong.
    pub fn misconfigured(detail: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorKind::Internal,
            format!("server misconfiguration: {detail}"),
        )
    }

    /// The 404 of an unknown route.
    pub fn not_found() -> Self {
        Self::new(ErrorKind::NotFound, "unknown route")
    }

    /// The 404 of an unknown route, naming the method and path asked.
    pub fn no_route(method: &str, path: &str) -> Self {
        let shown: String = path.chars().take(200).collect();
        Self::new(
            ErrorKind::NotFound,
            format!("unknown route: {method} {shown}"),
        )
    }

    /// Add a `Retry-After` (seconds).
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Classify an engine failure: user errors follow the route's flavor, a full
    /// backend queue is `overloaded`, other backend failures are 502.
    pub fn from_engine(e: &DecideError, flavor: Flavor) -> Self {
        if let DecideError::Schema(s) = e {
            // A backend without vision: the request is well formed, this
            // server cannot read it (422 on every route).
            // Likewise a `think` budget on a backend that cannot think.
            if s.field == dgem_core::images::NO_VISION_FIELD
                || (s.field == "think" && s.message.contains(dgem_engine::CANNOT_THINK))
            {
                return Self::new(ErrorKind::Validation, e.to_string()).with_param(s.field.clone());
            }
        }
        if e.is_user_error() {
            let err = Self::user(flavor, e.to_string());
            return match e {
                DecideError::Schema(s) => err.with_param(s.field.clone()),
                _ => err,
            };
        }
        match e {
            DecideError::Backend(BackendError::Overloaded(_) | BackendError::NotReady(_)) => {
                Self::new(ErrorKind::Overloaded, e.to_string()).with_retry_after(1)
            }
            DecideError::Backend(BackendError::Timeout(_)) => {
                Self::new(ErrorKind::Timeout, e.to_string())
            }
            DecideError::Backend(_) => Self::new(ErrorKind::Upstream, e.to_string()),
            _ => Self::new(ErrorKind::Internal, e.to_string()),
        }
    }

    /// The JSON body, `{"error": {message, type, param}}`, its message and
    /// param bounded ([`dgem_core::json::bounded_message`]: a 100 KB value
    /// quoted by a check comes back cut to 80 characters).
    pub fn body(&self) -> Value {
        let mut inner = Map::new();
        // Bounded: a check may quote a huge value or key whole.
        let bounded = dgem_core::json::bounded_message;
        inner.insert("message".into(), json!(bounded(&self.message)));
        inner.insert("type".into(), json!(self.kind.error_type()));
        if let Some(p) = &self.param {
            inner.insert("param".into(), json!(bounded(p)));
        }
        json!({ "error": Value::Object(inner) })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.kind.status(), Json(self.body())).into_response();
        if let Some(allow) = self.allow {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.kind == ErrorKind::Authentication {
            // The body was left unread: close rather than risk a desynced keep-alive.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp.extensions_mut().insert(self.kind);
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let all = [
            (ErrorKind::InvalidRequest, 400),
            (ErrorKind::Validation, 422),
            (ErrorKind::Authentication, 401),
            (ErrorKind::NotFound, 404),
            (ErrorKind::MethodNotAllowed, 405),
            (ErrorKind::RouteRemoved, 410),
            (ErrorKind::PayloadTooLarge, 413),
            (ErrorKind::RequestTimeout, 408),
            (ErrorKind::Overloaded, 503),
            (ErrorKind::Unavailable, 503),
            (ErrorKind::UnknownBackend, 400),
            (ErrorKind::Timeout, 504),
            (ErrorKind::Upstream, 502),
            (ErrorKind::Internal, 500),
        ];
        for (k, code) in all {
            assert_eq!(k.status().as_u16(), code, "{k:?}");
        }
        assert_eq!(
            ApiError::not_found().body(),
            json!({"error": {"message": "unknown route", "type": "invalid_request_error"}})
        );
    }

    /// Regression: a 100 KB value quoted in a message (a `temperature`, a
    /// question `type`, a rules id) came back whole in the error body.
    #[test]
    fn an_error_body_quoting_a_huge_value_is_bounded() {
        let huge = "t".repeat(100_000);
        let e = ApiError::new(
            ErrorKind::InvalidRequest,
            format!("`temperature` must be a number. Given: \"{huge}\""),
        )
        .with_param(format!("rules[0].if.{huge}"));
        let body = e.body().to_string();
        assert!(body.len() < 400, "{} bytes", body.len());
        assert!(body.contains("Given: \\\"ttt"), "{body}");
    }

    #[test]
    fn decide_errors_follow_the_route() {
        let schema = DecideError::Schema(dgem_core::SchemaError::new("state", "too long"));
        assert_eq!(
            ApiError::from_engine(&schema, Flavor::Chat).kind.status(),
            400
        );
        assert_eq!(
            ApiError::from_engine(&schema, Flavor::SystemOne)
                .kind
                .status(),
            422
        );
        let down = DecideError::Backend(BackendError::Model("boom".into()));
        let e = ApiError::from_engine(&down, Flavor::Chat);
        assert_eq!(e.kind.status(), 502);
        assert_eq!(e.kind.error_type(), "server_error");
        let full = DecideError::Backend(BackendError::Overloaded("queue".into()));
        assert_eq!(
            ApiError::from_engine(&full, Flavor::Chat).retry_after,
            Some(1)
        );
    }
}
