//! `POST /v1/chat/completions` (and `/predict`, `/rawPredict`, under `/invoke`
//! too): an OpenAI-shaped structured decision (serving.md §3.2, §8.3).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use dgem_cascade::AfterOptions;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use serde_json::{json, Value};

use crate::body;
use crate::decide::{self, Timed};
use crate::error::{ApiError, ErrorKind, Flavor};
use crate::state::AppState;
use crate::structured::{self, StructuredOutput};

mod reply;

pub use reply::{response_body, stream_events};

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

/// Top-level fields a decision reads (`backend` and `vertex_url` are the
/// gateway's routing fields, forwarded with the body).
pub const READ_FIELDS: &[&str] = &[
    "model",
    "messages",
    "seed",
    "stream",
    "stream_options",
    "backend",
    "vertex_url",
    "response_format",
];

/// OpenAI fields that cannot change a decision: a readout takes every
/// allowed answer's probability from the logits of one forward pass, so
/// sampling knobs (`temperature`, `top_p`, penalties) and output budgets
/// (`max_tokens`) have nothing to act on, and bookkeeping fields (`user`,
/// `metadata`, `store`, `service_tier`) nothing to do. They are accepted, so
/// clients that always send them work, and named in the
/// [`IGNORED_FIELDS_HEADER`] of the reply, so they are not dropped silently.
pub const NO_EFFECT_FIELDS: &[&str] = &[
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "user",
    "metadata",
    "store",
    "service_tier",
    "n",
];

/// The service's post-read keys this route does not take: taxonomy
/// expansion is not offered on it.
const NOT_ON_THIS_ROUTE: [&str; 2] = ["suggest_expansions", "expansion_entropy"];

/// dgem extension keys of the chat route: what to do after the read. They
/// are the decision service's post-read keys ([`AfterOptions::keys`], read
/// by the same parses), without taxonomy expansion, and with the post-hoc
/// temperature named `temperature_by_type` (OpenAI's `temperature` is a
/// sampling knob, one of the [`NO_EFFECT_FIELDS`]). The policy's own
/// `temperature` / `abstain_*` keys are **not** applied on this route: it
/// plays the original structured server, whose clients apply them after the
/// reply.
pub fn after_fields() -> &'static [String] {
    static FIELDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    FIELDS.get_or_init(|| {
        AfterOptions::keys()
            .into_iter()
            .filter(|k| !NOT_ON_THIS_ROUTE.contains(&k.as_str()))
            .map(|k| {
                if k == "temperature" {
                    "temperature_by_type".to_string()
                } else {
                    k
                }
            })
            .collect()
    })
}

/// Reply header listing the [`NO_EFFECT_FIELDS`] a request carried.
pub const IGNORED_FIELDS_HEADER: &str = "x-dgem-ignored-fields";

/// Why a field a decision cannot honour is refused (any other unknown field
/// gets the list of fields the route reads).
fn unsupported(field: &str) -> Option<&'static str> {
    Some(match field {
        "tools" | "tool_choice" | "functions" | "function_call" | "parallel_tool_calls" => {
            "tool calls are not served; ask which tool as a `choice` question instead"
        }
        "logprobs" | "top_logprobs" => {
            "token logprobs are not served; the envelope carries every allowed answer's probability"
        }
        "stop" | "logit_bias" | "prediction" | "audio" | "modalities" | "web_search_options"
        | "reasoning_effort" => "there is no free-form generation to steer on a decision route",
        _ => return None,
    })
}

/// Why an unknown field is refused: the fields the route reads, its
/// post-read keys, and the one the field nearly spells, if any (a "did you
/// mean" by the measure of misspelt keys, [`dgem_core::suggest::near_key`]).
fn unknown_field(field: &str) -> String {
    let after: Vec<&str> = after_fields().iter().map(String::as_str).collect();
    let known = READ_FIELDS
        .iter()
        .chain(NO_EFFECT_FIELDS)
        .copied()
        .chain(after.iter().copied());
    let meant = dgem_core::suggest::near_key(field, known)
        .map(|m| format!(" (did you mean `{m}`?)"))
        .unwrap_or_default();
    format!(
        "this route reads [{}] and the post-read keys [{}]{meant}",
        READ_FIELDS.join(", "),
        after.join(", ")
    )
}

/// Check the top-level fields of a chat body: every field is read, has no
/// effect (returned, for the reply header), or is refused naming it.
///
/// # Errors
/// 400 naming the first field a decision cannot honour, or an unknown one.
pub fn check_fields(req: &Value) -> Result<Vec<String>, ApiError> {
    let Some(obj) = req.as_object() else {
        return Err(invalid(format!(
            "{SHAPE_MESSAGE}. Given: {}",
            dgem_core::json::shown(req)
        )));
    };
    let mut ignored = Vec::new();
    for (k, v) in obj {
        if READ_FIELDS.contains(&k.as_str()) || after_fields().contains(k) {
            continue;
        }
        if k == "n" && !(v.is_null() || v.as_u64() == Some(1)) {
            return Err(invalid(format!(
                "`n` must be 1: a request is one decision (send more requests, or `samples` in the schema for repeated reads). Given: {v}"
            ))
            .with_param("n"));
        }
        if NO_EFFECT_FIELDS.contains(&k.as_str()) {
            ignored.push(k.clone());
            continue;
        }
        let why = unsupported(k).map_or_else(|| unknown_field(k), str::to_string);
        // A field name can be any length: show at most 64 characters of it.
        let mut shown: String = k.chars().take(64).collect();
        if shown.len() < k.len() {
            shown.push('…');
        }
        return Err(invalid(format!(
            "`{shown}` is not supported on a decision route: {why}"
        ))
        .with_param(shown));
    }
    Ok(ignored)
}

/// Whether the body asks for a stream (`stream: true`), and whether the
/// stream ends with a usage chunk (`stream_options.include_usage`).
///
/// # Errors
/// 400 when `stream` is not a boolean or `stream_options` not an object.
pub fn stream_of(req: &Value) -> Result<(bool, bool), ApiError> {
    let stream = match req.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(
                invalid(format!("`stream` must be true or false. Given: {other}"))
                    .with_param("stream"),
            )
        }
    };
    let usage = match req.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(_)) if !stream => {
            return Err(invalid(
                "`stream_options` is only allowed with `stream: true` (as OpenAI requires)",
            )
            .with_param("stream_options"))
        }
        Some(Value::Object(o)) => {
            if let Some(k) = o.keys().find(|k| k.as_str() != "include_usage") {
                return Err(invalid(format!(
                    "`stream_options.{k}` is not supported; `stream_options` takes `include_usage` only"
                ))
                .with_param(format!("stream_options.{k}")));
            }
            match o.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(invalid(format!(
                        "`stream_options.include_usage` must be true or false. Given: {other}"
                    ))
                    .with_param("stream_options.include_usage"))
                }
            }
        }
        Some(other) => {
            return Err(invalid(format!(
                "`stream_options` must be an object such as {{\"include_usage\": true}}. Given: {other}"
            ))
            .with_param("stream_options"))
        }
    };
    Ok((stream, usage))
}

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
    /// `stream: true`: answer as server-sent events.
    pub stream: bool,
    /// `stream_options.include_usage`: end the stream with a usage chunk.
    pub stream_usage: bool,
    /// [`NO_EFFECT_FIELDS`] the request carried.
    pub ignored: Vec<String>,
    /// The [`after_fields`] asked for: cascade, temperature, abstention
    /// (their question ids are checked when the decision is prepared).
    pub after: AfterOptions,
    /// Set for a `response_format` of type `json_schema`: the reply's content
    /// is the requested object and the envelope goes in `dgem`
    /// ([`crate::structured`]).
    pub structured: Option<StructuredOutput>,
}

/// The request's [`after_fields`], each value read by its type's parse
/// (`temperature_by_type` is the service's `temperature`).
fn after_of(req: &Value) -> Result<AfterOptions, ApiError> {
    let obj: serde_json::Map<String, Value> = after_fields()
        .iter()
        .filter_map(|k| {
            let v = req.get(k)?;
            let key = if k == "temperature_by_type" {
                "temperature"
            } else {
                k
            };
            Some((key.to_string(), v.clone()))
        })
        .collect();
    AfterOptions::from_object(&obj).map_err(|e| after_error(&e.field, e.message))
}

/// A refused post-read key in this route's words: the service's
/// `temperature` is named `temperature_by_type` here.
fn after_error(field: &str, message: String) -> ApiError {
    let renamed = field.replacen("temperature", "temperature_by_type", 1);
    let message = if renamed == field {
        message
    } else {
        // The message names the key as this route does, as `param` does.
        let message = message.replacen(&format!("`{field}`"), &format!("`{renamed}`"), 1);
        format!("`temperature_by_type` (the post-hoc temperature): {message}")
    };
    invalid(message).with_param(renamed)
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

/// Parse the top-level seed by the service's one parse
/// ([`dgem_service::read::seed_value`]: an integer or a whole float; a
/// fraction, a boolean or a string refused), default 42.
pub(crate) fn seed_of(v: Option<&Value>) -> Result<i64, String> {
    dgem_service::read::seed_value(v.unwrap_or(&Value::Null))
        .map(|s| s.unwrap_or(DEFAULT_SEED))
        .map_err(|e| format!("`seed` {e}"))
}

/// A no-effect field, what OpenAI accepts for it in words, and the check.
type NoEffectRule = (&'static str, &'static str, fn(&Value) -> bool);

/// What OpenAI accepts for each of the [`NO_EFFECT_FIELDS`] (but `n`,
/// checked on its own), in words, and the check. A decision ignores their
/// values (it reads, it does not sample), but a value OpenAI would refuse is
/// refused here too, naming the field: `temperature: "x"` (issue 38) or
/// `max_tokens: -5` is a client bug, not something to drop in silence.
/// Ranges from OpenAI's chat completions reference.
const NO_EFFECT_RULES: [NoEffectRule; 10] = [
    ("temperature", "a number from 0 to 2", |v| {
        in_range(v, 0.0, 2.0)
    }),
    ("top_p", "a number from 0 to 1", |v| in_range(v, 0.0, 1.0)),
    ("presence_penalty", "a number from -2 to 2", |v| {
        in_range(v, -2.0, 2.0)
    }),
    ("frequency_penalty", "a number from -2 to 2", |v| {
        in_range(v, -2.0, 2.0)
    }),
    ("max_tokens", TOKEN_BUDGET, token_budget),
    ("max_completion_tokens", TOKEN_BUDGET, token_budget),
    ("user", "a string", Value::is_string),
    ("metadata", "an object of strings", |v| {
        v.as_object()
            .is_some_and(|m| m.values().all(Value::is_string))
    }),
    ("store", "true or false", Value::is_boolean),
    ("service_tier", "a string", Value::is_string),
];

/// What a token budget may be, in words ([`token_budget`]).
const TOKEN_BUDGET: &str = "a whole number ≥ 1, or -1 for no limit";

/// Whether `v` is a token budget: a whole number ≥ 1 (written `64` or
/// `64.0`, as `seed` is read), or -1, the "no limit" of several
/// OpenAI-compatible clients.
fn token_budget(v: &Value) -> bool {
    v.as_f64()
        .is_some_and(|f| f.fract() == 0.0 && (f >= 1.0 || f == -1.0) && f.is_finite())
}

/// Whether `v` is a finite number in `[lo, hi]`.
fn in_range(v: &Value, lo: f64, hi: f64) -> bool {
    v.as_f64()
        .is_some_and(|f| f.is_finite() && (lo..=hi).contains(&f))
}

/// The [`NO_EFFECT_FIELDS`] must hold what OpenAI accepts ([`NO_EFFECT_RULES`]);
/// `null` is absent.
///
/// # Errors
/// 400 naming the field (`param`), what it must be and the value given.
fn sampling_keys(req: &Value) -> Result<(), ApiError> {
    for (key, allowed, ok) in NO_EFFECT_RULES {
        match req.get(key) {
            None | Some(Value::Null) => {}
            Some(v) if ok(v) => {}
            Some(other) => {
                return Err(invalid(format!(
                    "`{key}` must be {allowed} (dgem reads a decision and does not sample, so it is ignored). Given: {}",
                    dgem_core::json::shown(other)
                ))
                .with_param(key))
            }
        }
    }
    Ok(())
}

/// Validate a chat body (serving.md §3.2): everything but what the
/// extension keys say about the policy's questions (the ids in
/// `expected_answers`, `abstain_below`, `abstain_above`), which the decision
/// service checks when the request is prepared, still before any image
/// check or read.
///
/// # Errors
/// 400 `invalid_request_error` with the serving.md wording.
pub fn parse(req: &Value, defaults: &SchemaDefaults) -> Result<ChatRequest, ApiError> {
    let ignored = check_fields(req)?;
    sampling_keys(req)?;
    // The model is echoed in the reply: a non-string would be replaced by
    // the default in silence.
    let model = match req.get("model") {
        None | Some(Value::Null) => DEFAULT_MODEL,
        Some(Value::String(m)) if m.is_empty() => DEFAULT_MODEL,
        Some(Value::String(m)) => m.as_str(),
        Some(other) => {
            return Err(invalid(format!(
                "`model` must be a string (the model name echoed in the reply). Given: {}",
                dgem_core::json::shown(other)
            ))
            .with_param("model"))
        }
    }
    .to_string();
    let (stream, stream_usage) = stream_of(req)?;
    let (schema, state, structured) = if structured::wants_schema(req.get("response_format"))? {
        let s = structured::parse(req, defaults)?;
        (s.schema, s.state, Some(s.output))
    } else {
        let (schema, state) = schema_and_state(req, defaults)?;
        (schema, state, None)
    };
    let seed = seed_of(req.get("seed")).map_err(|e| invalid(e).with_param("seed"))?;
    let after = after_of(req)?;
    Ok(ChatRequest {
        schema,
        state,
        seed,
        model,
        stream,
        stream_usage,
        ignored,
        after,
        structured,
    })
}

/// The dgem form: the system message is the schema JSON, the user message
/// the state.
fn schema_and_state(
    req: &Value,
    defaults: &SchemaDefaults,
) -> Result<(ValidSchema, Value), ApiError> {
    // The spec's wording first, then what was given.
    let messages =
        match req.get("messages") {
            Some(Value::Array(m)) if m.len() == 2 => m,
            Some(Value::Array(m)) => {
                let n = m.len();
                let s = if n == 1 { "" } else { "s" };
                return Err(invalid(format!("{SHAPE_MESSAGE}. Given: {n} message{s}"))
                    .with_param("messages"));
            }
            None | Some(Value::Null) => {
                return Err(invalid(format!("{SHAPE_MESSAGE}. Given: no `messages`"))
                    .with_param("messages"))
            }
            Some(other) => {
                return Err(invalid(format!(
                    "{SHAPE_MESSAGE}. Given: {}",
                    dgem_core::json::shown(other)
                ))
                .with_param("messages"))
            }
        };
    for (i, allowed) in [
        (0, ["system", "developer"].as_slice()),
        (1, ["user"].as_slice()),
    ] {
        let role = messages[i].get("role").unwrap_or(&Value::Null);
        if !role.as_str().is_some_and(|r| allowed.contains(&r)) {
            return Err(invalid(format!(
                "{SHAPE_MESSAGE}: `messages[{i}].role` must be {}. Given: {}",
                allowed.join(" or "),
                dgem_core::json::shown(role)
            ))
            .with_param(format!("messages[{i}].role")));
        }
    }
    let (system, user) = (&messages[0], &messages[1]);
    if system
        .get("content")
        .is_some_and(dgem_core::images::has_images)
    {
        // Dropping it would decide without the image the caller sent.
        return Err(invalid(
            "messages[0].content: the system message holds the question schema as text; send image parts in the user message",
        )
        .with_param("messages[0].content"));
    }
    let raw_schema: Value =
        dgem_core::json::parse_strict(&message_text(system)).map_err(|e| match e.duplicate {
            // A repeated key would make the last one win silently: refused.
            Some(_) => ApiError::new(ErrorKind::Validation, format!("schema: {e}"))
                .with_param("messages[0].content"),
            None => {
                invalid(format!("{PARSE_PREFIX}{}", e.message)).with_param("messages[0].content")
            }
        })?;
    let schema = ValidSchema::from_value(&raw_schema, defaults)
        .map_err(|e| invalid(e.message).with_param(e.field))?;
    let state = match user.get("content") {
        Some(content @ Value::Array(_)) if dgem_core::images::has_images(content) => {
            content.clone()
        }
        _ => {
            let text = message_text(user).trim().to_string();
            // An empty user message is an empty state: the one rule's message
            // (naming `state`), not a JSON syntax error.
            if let Err(e) = dgem_core::state::check_informative(&Value::String(text.clone())) {
                return Err(invalid(e.message).with_param(e.field));
            }
            // Strict, as the schema is: a repeated key in the state would make
            // the model read one value while the caller meant the other.
            // The text must be JSON; the text itself is the state, as sent:
            // a JSON string literal keeps its quotes, as in the original server.
            dgem_core::json::parse_strict(&text).map_err(|e| match e.duplicate {
                Some(_) => ApiError::new(ErrorKind::Validation, format!("state: {e}"))
                    .with_param("messages[1].content"),
                None => invalid(format!("{PARSE_PREFIX}{}", e.message))
                    .with_param("messages[1].content"),
            })?;
            Value::String(text)
        }
    };
    Ok((schema, state))
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
    // The body decoded as the service's request: the policy inline (its own
    // post-read keys are its client's to apply, see after_fields), the
    // request's extension keys checked against it.
    let label = crate::telemetry::policy_label(&req.schema);
    let request = dgem_service::DecisionRequest {
        inline: Some(dgem_service::InlinePolicy {
            schema: req.schema,
            label,
        }),
        state: Some(req.state),
        read: dgem_service::ReadOptions {
            seed: Some(req.seed),
            ..dgem_service::ReadOptions::default()
        },
        after: req.after,
        ..dgem_service::DecisionRequest::default()
    };
    let prepared = state
        .service()
        .prepare(None, request)
        .map_err(|e| match e {
            dgem_service::ServiceError::Field { field, message } => after_error(&field, message),
            other => invalid(other.to_string()),
        })?;
    let read = &prepared.request.state;
    decide::check_images(state, dgem_core::images::has_images(read))?;
    decide::check_state_images(Flavor::Chat, read)?;
    let decided = state
        .service()
        .decide_on(
            &decide::Gated {
                state,
                flavor: Flavor::Chat,
            },
            prepared,
        )
        .await?;
    let extra = decided.after.to_json();
    let timed = Timed::of(decided);
    let body = response_body(&req.model, &timed, extra, req.structured.as_ref())?;
    let mut resp = if req.stream {
        let events = stream_events(&body, req.stream_usage)
            .into_iter()
            .map(|data| {
                Ok::<_, std::convert::Infallible>(axum::response::sse::Event::default().data(data))
            });
        (
            decide::timing_headers(&timed),
            axum::response::sse::Sse::new(futures_util::stream::iter(events)),
        )
            .into_response()
    } else {
        (decide::timing_headers(&timed), Json(body)).into_response()
    };
    if !req.ignored.is_empty() {
        if let Ok(v) = axum::http::HeaderValue::from_str(&req.ignored.join(", ")) {
            resp.headers_mut().insert(IGNORED_FIELDS_HEADER, v);
        }
    }
    Ok(resp)
}

/// `GET /v1/models`: the one model this server decides with, in OpenAI's
/// list shape (`id` is the served model name, `DGEM_SERVED_MODEL`).
pub async fn models(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.config().model_name,
            "object": "model",
            "created": crate::state::unix_now() as u64,
            "owned_by": "dgem",
        }],
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Regression (issue 16): `tools`, `logprobs` and `n` were silently
    /// ignored; an unknown field too. (`response_format` is read now: a
    /// `json_schema` one is a decision, see `crate::structured`.)
    #[test]
    fn fields_a_decision_cannot_honour_are_refused_naming_them() {
        let base = json!({"model": "m", "messages": [], "temperature": 0.2, "max_tokens": 5});
        assert_eq!(
            check_fields(&base).expect("no-effect fields pass"),
            vec!["temperature".to_string(), "max_tokens".to_string()]
        );
        for (field, value, needle) in [
            ("tools", json!([]), "tool calls are not served"),
            ("logprobs", json!(true), "probability"),
            ("n", json!(2), "`n` must be 1"),
            (
                "temprature",
                json!(1),
                "this route reads [model, messages, seed, stream, stream_options, backend, vertex_url, response_format]",
            ),
        ] {
            let mut body = base.clone();
            body[field] = value;
            let e = check_fields(&body).expect_err(field);
            assert!(e.message.contains(needle), "{field}: {}", e.message);
            assert_eq!(e.param.as_deref(), Some(field));
        }
        let mut one = base.clone();
        one["n"] = json!(1);
        assert!(check_fields(&one).is_ok());
    }

    /// Regression: of the no-effect OpenAI fields only the sampling knobs
    /// were type-checked, and loosely (`temperature: 3`, `max_tokens: -5`,
    /// `store: "yes"`, `user: {}` and `model: 5` were taken), and their
    /// refusals named no `param` (found by a black-box run of `dgem serve`).
    #[test]
    fn no_effect_fields_must_hold_what_openai_accepts() {
        let base = json!({"model": "m", "messages": []});
        for (field, bad, allowed) in [
            ("temperature", json!(3), "a number from 0 to 2"),
            ("top_p", json!(1.5), "a number from 0 to 1"),
            ("presence_penalty", json!(-3), "a number from -2 to 2"),
            ("max_tokens", json!(-5), TOKEN_BUDGET),
            ("max_completion_tokens", json!("64"), TOKEN_BUDGET),
            ("max_tokens", json!(0), TOKEN_BUDGET),
            ("user", json!({}), "a string"),
            ("metadata", json!([1]), "an object of strings"),
            ("store", json!("yes"), "true or false"),
            ("service_tier", json!(5), "a string"),
        ] {
            let mut body = base.clone();
            body[field] = bad.clone();
            let e = sampling_keys(&body).expect_err(field);
            assert_eq!(e.param.as_deref(), Some(field));
            assert_eq!(
                e.message,
                format!("`{field}` must be {allowed} (dgem reads a decision and does not sample, so it is ignored). Given: {bad}")
            );
        }
        let good = json!({"temperature": 2, "top_p": 0, "frequency_penalty": -2, "max_tokens": 64.0,
            "max_completion_tokens": -1,
            "user": "u-1", "metadata": {"k": "v"}, "store": false, "service_tier": "auto"});
        assert!(sampling_keys(&good).is_ok());
        let body = json!({"model": 5, "messages": [{"role": "user", "content": "hi"}]});
        let e = parse(&body, &SchemaDefaults::default()).expect_err("model");
        assert_eq!(e.param.as_deref(), Some("model"));
    }

    /// Regression: an unknown field's message listed five of the fields the
    /// route reads (not `response_format`, nor a post-read key) and gave no
    /// hint for a near miss (found by a black-box run of `dgem serve`).
    #[test]
    fn an_unknown_field_names_every_field_read_and_the_one_it_nearly_spells() {
        let body = json!({"model": "m", "messages": [], "cascade_treshold": 0.3});
        let e = check_fields(&body).expect_err("unknown");
        assert_eq!(e.param.as_deref(), Some("cascade_treshold"));
        assert!(
            e.message.starts_with(
                "`cascade_treshold` is not supported on a decision route: this route reads [model, messages, seed, stream, stream_options, backend, vertex_url, response_format] and the post-read keys [temperature_by_type, "
            ),
            "{}",
            e.message
        );
        assert!(
            e.message.ends_with(" (did you mean `cascade_threshold`?)"),
            "{}",
            e.message
        );
        let body = json!({"model": "m", "messages": [], "frobnicate": 1});
        let e = check_fields(&body).expect_err("unknown");
        assert!(e.message.ends_with("expected_answers]"), "{}", e.message);
    }

    /// Regression (issue 16): `response_format` was ignored; a `json_object`
    /// one (no schema to decide on) is refused naming its type.
    #[test]
    fn a_json_object_response_format_is_refused_naming_its_type() {
        let body = json!({"model": "m", "response_format": {"type": "json_object"},
            "messages": [{"role": "user", "content": "hi"}]});
        let e = parse(&body, &SchemaDefaults::default()).expect_err("json_object");
        assert_eq!(e.param.as_deref(), Some("response_format.type"));
        assert!(e.message.contains("json_schema"), "{}", e.message);
    }

    /// Regression: the message named `temperature.choice`, the service's
    /// key, while `param` named `temperature_by_type.choice`.
    #[test]
    fn a_bad_temperature_by_type_value_is_named_as_its_param_names_it() {
        let e = after_of(&json!({"temperature_by_type": {"choice": 50}})).expect_err("refused");
        assert_eq!(e.param.as_deref(), Some("temperature_by_type.choice"));
        assert!(
            e.message.starts_with(
                "`temperature_by_type` (the post-hoc temperature): `temperature_by_type.choice` must be a number from 0 to 20"
            ),
            "{}",
            e.message
        );
    }

    /// The extension keys are derived from the service's post-read keys;
    /// these are the nine the route has always taken.
    #[test]
    fn the_extension_keys_are_the_post_read_keys_without_expansion() {
        assert_eq!(
            after_fields(),
            [
                "temperature_by_type",
                "abstain_below",
                "abstain_above",
                "cascade_mode",
                "cascade_threshold",
                "cascade_threshold_mode",
                "cascade_model",
                "stage2_prior",
                "expected_answers",
            ]
        );
    }

    #[test]
    fn stream_chunks_carry_the_envelope_then_done() {
        let body = json!({"id": "chatcmpl-1", "created": 7, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}});
        let ev = stream_events(&body, true);
        assert_eq!(ev.len(), 4);
        let first: Value = serde_json::from_str(&ev[0]).expect("json");
        assert_eq!(first["object"], "chat.completion.chunk");
        assert_eq!(first["choices"][0]["delta"]["content"], "{}");
        let stop: Value = serde_json::from_str(&ev[1]).expect("json");
        assert_eq!(stop["choices"][0]["finish_reason"], "stop");
        let usage: Value = serde_json::from_str(&ev[2]).expect("json");
        assert_eq!(usage["usage"]["total_tokens"], 11);
        assert_eq!(ev[3], "[DONE]");
        assert_eq!(
            stream_of(&json!({"stream": true})).expect("ok"),
            (true, false)
        );
        assert!(stream_of(&json!({"stream": "yes"})).is_err());
    }

    #[test]
    fn fractional_seed_is_refused_not_truncated() {
        assert_eq!(seed_of(Some(&json!(7))), Ok(7));
        assert_eq!(seed_of(Some(&json!(7.0))), Ok(7));
        assert_eq!(
            seed_of(Some(&json!(1.5))),
            Err("`seed` must be an integer. Given: 1.5".to_owned())
        );
        assert!(seed_of(Some(&json!(1e300))).is_err());
    }

    #[test]
    fn seed_given_as_a_boolean_or_a_string_is_refused() {
        assert_eq!(
            seed_of(Some(&json!(true))),
            Err("`seed` must be an integer. Given: true".to_owned())
        );
        assert_eq!(
            seed_of(Some(&json!("7"))),
            Err("`seed` must be an integer. Given: \"7\"".to_owned())
        );
    }
}
