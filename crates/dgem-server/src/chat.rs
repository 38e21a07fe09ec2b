//! `POST /v1/chat/completions` (and `/predict`, `/rawPredict`, under `/invoke`
//! too): an OpenAI-shaped structured decision (serving.md §3.2, §8.3).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::DecideRequest;
use serde_json::{json, Value};

use crate::body;
use crate::decide::{self, Timed};
use crate::error::{ApiError, ErrorKind, Flavor};
use crate::state::AppState;

/// The message-shape error (exact wording of serving.md §3.2).
pub const SHAPE_MESSAGE: &str =
    "a structured request is exactly two messages: the schema (system) and the state JSON (user)";
/// Prefix of every other parse failure on this route.
pub const PARSE_PREFIX: &str =
    "system must be a JSON question schema and user must be JSON state or image parts: ";
/// `model` echoed when the request names none.
pub const DEFAULT_MODEL: &str = "dgemma-structured";
/// Seed when the request has none.
pub const DEFAULT_SEED: i64 = 42;

/// A chat request after validation.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The validated schema (from the system message).
    pub schema: ValidSchema,
    /// The state: the user text (valid JSON) or the list of image/text parts.
    pub state: Value,
    /// Top-level `seed`.
    pub seed: i64,
    /// `model` to echo.
    pub model: String,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::InvalidRequest, message)
}

/// Text of a message: a string content as is, or the concatenation of every
/// part's `text` for list content.
fn message_text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Parse the top-level seed (`int(req.get("seed", 42))`).
pub(crate) fn seed_of(v: Option<&Value>) -> Result<i64, String> {
    match v {
        None | Some(Value::Null) => Ok(DEFAULT_SEED),
        Some(Value::Bool(b)) => Ok(i64::from(*b)),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| {
                // A whole float (`7.0`) is the integer it names; a fraction is
                // refused rather than silently truncated.
                n.as_f64()
                    .filter(|f| f.is_finite() && f.abs() < 9.2e18 && f.fract() == 0.0)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| format!("`seed` must be an integer (got {n})")),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| format!("`seed` must be an integer (got {s:?})")),
        Some(other) => Err(format!("`seed` must be an integer (got {other})")),
    }
}

/// Validate a chat body (serving.md §3.2).
///
/// # Errors
/// 400 `invalid_request_error` with the serving.md wording.
pub fn parse(req: &Value, defaults: &SchemaDefaults) -> Result<ChatRequest, ApiError> {
    let messages = req
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| m.len() == 2)
        .ok_or_else(|| invalid(SHAPE_MESSAGE))?;
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (system, user) = (&messages[0], &messages[1]);
    if !matches!(role(system).as_str(), "system" | "developer") || role(user) != "user" {
        return Err(invalid(SHAPE_MESSAGE));
    }
    let raw_schema: Value =
        dgem_core::json::parse_strict(&message_text(system)).map_err(|e| match e.duplicate {
            // A repeated key would make the last one win silently: refused.
            Some(_) => ApiError::new(ErrorKind::Validation, format!("schema: {e}")),
            None => invalid(format!("{PARSE_PREFIX}{}", e.message)),
        })?;
    let schema = ValidSchema::from_value(&raw_schema, defaults)
        .map_err(|e| invalid(e.message).with_param(e.field))?;
    let state = match user.get("content") {
        Some(content @ Value::Array(_)) if decide::has_images(content) => content.clone(),
        _ => {
            let text = message_text(user).trim().to_string();
            // An empty user message is an empty state: the one rule's message
            // (naming `state`), not a JSON syntax error.
            if dgem_core::state::is_empty(&Value::String(text.clone())) {
                let e = dgem_core::state::check_informative(&Value::String(text))
                    .err()
                    .map_or_else(|| "state: empty".to_string(), |e| e.message);
                return Err(invalid(e).with_param("state"));
            }
            // Strict, as the schema is: a repeated key in the state would make
            // the model read one value while the caller meant the other.
            dgem_core::json::parse_strict(&text).map_err(|e| match e.duplicate {
                Some(_) => ApiError::new(ErrorKind::Validation, format!("state: {e}")),
                None => invalid(format!("{PARSE_PREFIX}{}", e.message)),
            })?;
            Value::String(text)
        }
    };
    let seed = seed_of(req.get("seed")).map_err(invalid)?;
    let model = req
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(DEFAULT_MODEL)
        .to_string();
    Ok(ChatRequest {
        schema,
        state,
        seed,
        model,
    })
}

/// The OpenAI `chat.completion` body whose `content` is the pretty-printed envelope.
pub fn response_body(model: &str, t: &Timed) -> Result<Value, ApiError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let content = serde_json::to_string_pretty(&t.decision.envelope()).map_err(|e| {
        ApiError::new(
            ErrorKind::Internal,
            format!("could not write the envelope: {e}"),
        )
    })?;
    let n = decide::output_tokens(&t.decision);
    Ok(json!({
        "id": format!("chatcmpl-{}", now.as_millis()),
        "object": "chat.completion",
        "created": now.as_secs(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 0, "completion_tokens": n, "total_tokens": n}
    }))
}

/// The handler.
pub async fn handle(
    State(state): State<AppState>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    match respond(&state, &headers, bytes).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn respond(
    state: &AppState,
    headers: &HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = bytes.map_err(|r| body::rejection(&r))?;
    let parsed = body::parse(headers, bytes).await?;
    let req = parse(&parsed.json, &state.config().schema_defaults)?;
    decide::check_images(state, Flavor::Chat, decide::has_images(&req.state))?;
    let timed = decide::run(
        state,
        DecideRequest {
            schema: req.schema,
            state: req.state,
            seed: req.seed,
        },
        Flavor::Chat,
    )
    .await?;
    let body = response_body(&req.model, &timed)?;
    Ok((decide::timing_headers(&timed), Json(body)).into_response())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fractional_seed_is_refused_not_truncated() {
        assert_eq!(seed_of(Some(&json!(7))), Ok(7));
        assert_eq!(seed_of(Some(&json!(7.0))), Ok(7));
        assert_eq!(seed_of(Some(&json!("12"))), Ok(12));
        assert_eq!(
            seed_of(Some(&json!(1.5))),
            Err("`seed` must be an integer (got 1.5)".to_owned())
        );
        assert!(seed_of(Some(&json!(1e300))).is_err());
    }
}
