//! `POST /v1/systemone`: a Jev/TypeSafe "System One" decision (serving.md §3.3,
//! §8.4). Validation errors are 422 `validation_error`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use dgem_core::envelope::AnswerOut;
use dgem_core::prompt::state_text;
use dgem_core::schema::ValidSchema;
use serde_json::{json, Map, Value};

use crate::body;
use crate::chat::seed_of;
use crate::decide::{self, Timed};
use crate::error::{ApiError, ErrorKind, Flavor};
use crate::state::AppState;

/// Body keys copied into the schema as they are.
pub const EXTENSION_KEYS: &[&str] = &[
    "instructions",
    "samples",
    "auto_max",
    "auto_threshold",
    "steps",
    "think",
    "think_optional",
    "requires_image",
    "ask",
    "chunk_rows",
    "chunk_prompt",
    "sequential",
    "layout",
    "isolate",
    "rules",
];

fn unprocessable(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::Validation, message)
}

/// `jev_schema`: the Jev body → a serving.md §3.1 raw schema.
///
/// # Errors
/// 422 with the exact serving.md §3.3 messages.
pub fn jev_schema(body: &Map<String, Value>) -> Result<Value, ApiError> {
    // The one ad-hoc converter every surface uses (map or list, every type alias).
    let list = dgem_core::adhoc::adhoc_questions(body.get("questions").unwrap_or(&Value::Null))
        .map_err(|e| unprocessable(e.message))?;
    let mut schema = Map::new();
    schema.insert("questions".into(), Value::Array(list));
    for key in EXTENSION_KEYS {
        if let Some(v) = body.get(*key) {
            schema.insert((*key).into(), v.clone());
        }
    }
    Ok(Value::Object(schema))
}

/// A policy's post-read keys, which this route does not apply.
const POST_READ_KEYS: [&str; 3] = ["temperature", "abstain_below", "abstain_above"];

/// The gateway's routing keys, forwarded with the body to a replica, which
/// serves one model and does not look at them (as on the chat route).
const ROUTING_KEYS: [&str; 2] = ["backend", "vertex_url"];

/// A top-level key that reads like `images` (`image`, `imges`, `image_url`) is
/// a 422 naming it: ignored, it would decide on the text alone. So is a near
/// miss of any other key this route reads (`rule` for `rules`), and any other
/// key this route does not read: dropped, it would change nothing the
/// caller meant it to.
fn refuse_unknown_keys(req: &Map<String, Value>) -> Result<(), ApiError> {
    for key in req.keys() {
        let known = key == "images"
            || EXTENSION_KEYS.contains(&key.as_str())
            || ROUTING_KEYS.contains(&key.as_str())
            || ["model", "state", "questions", "seed"].contains(&key.as_str());
        if !known
            && (key == "image_url" || dgem_engine::builtin::closest(key, ["images"]).is_some())
        {
            return Err(unprocessable(format!(
                "`{}` is not read; send images as `images`: a list of data:image/... URLs or objects with content_type and base64",
                key.chars().take(40).collect::<String>()
            ))
            .with_param(key.chars().take(40).collect::<String>()));
        }
        // The post-read keys of a policy are its client's to apply on this
        // route, as on the original server: say so, and where they apply.
        if POST_READ_KEYS.contains(&key.as_str()) {
            return Err(unprocessable(format!(
                "`{key}` is not applied on this route: a System One client applies the policy's temperature and abstention to the reply itself; to have dgem apply them, send the decision to /api/decide (keys `temperature`, `abstain_below`, `abstain_above`) or to /v1/chat/completions (`temperature_by_type`, `abstain_below`, `abstain_above`)"
            ))
            .with_param(key.clone()));
        }
        // A near miss of a key this route reads (`rule`, `sample`) would be
        // dropped and the decision made without it.
        if !known {
            let keys = EXTENSION_KEYS
                .iter()
                .copied()
                .chain(["state", "questions", "seed"]);
            if let Some(near) = dgem_engine::builtin::closest(key, keys) {
                let shown: String = key.chars().take(40).collect();
                return Err(unprocessable(format!(
                    "`{shown}` is not read (did you mean `{near}`?); this route reads state, questions, images, seed, model and {}",
                    EXTENSION_KEYS.join(", ")
                ))
                .with_param(shown));
            }
            let shown: String = key.chars().take(40).collect();
            return Err(unprocessable(format!(
                "`{shown}` is not read; this route reads state, questions, images, seed, model and {}",
                EXTENSION_KEYS.join(", ")
            ))
            .with_param(shown));
        }
    }
    Ok(())
}

/// JSON `images` entries → image parts (after any multipart images).
fn json_images(body: &Map<String, Value>, parts: &mut Vec<Value>) -> Result<(), ApiError> {
    let more = dgem_core::images::parts_from_json(body.get("images"))
        .map_err(|e| unprocessable(e.message).with_param(e.field))?;
    parts.extend(more);
    Ok(())
}

/// One answer in the Jev shape (each type's shape is in `dgem_core::kinds`):
/// 0-based score with `legend`; noul probabilities keyed `true`/`false`; as
/// dgem-rs extensions, a `multi` answer's selected options under `multi`
/// (probabilities by option, each its own probability of applying) and
/// `none_of_these: true` when that option won. dgem-rs adds `entropy` and
/// `normalized_entropy`, and a score over numeric levels carries `value` as on
/// the chat route ([`AnswerOut::level_value`]).
pub fn jev_answer(a: &AnswerOut) -> Value {
    dgem_core::kinds::jev_answer(a)
}

/// The Jev response body.
pub fn response_body(model: &str, t: &Timed) -> Value {
    let d = &t.decision;
    let answers: Map<String, Value> = d
        .answers
        .iter()
        .map(|(id, a)| (id.clone(), a.as_ref().map_or(Value::Null, jev_answer)))
        .collect();
    json!({
        "model": model,
        "answers": answers,
        "usage": {
            "input_tokens": d.diagnostics.prompt_tokens.unwrap_or(0),
            "output_tokens": decide::output_tokens(d),
        },
        "diagnostics": serde_json::to_value(&d.diagnostics).unwrap_or(Value::Null),
    })
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
    let Value::Object(req) = &parsed.json else {
        return Err(ApiError::new(
            ErrorKind::InvalidRequest,
            "invalid body: the request must be a JSON object",
        ));
    };
    refuse_unknown_keys(req)?;
    let raw = jev_schema(req)?;
    let schema = ValidSchema::from_value(&raw, &state.config().schema_defaults)
        .map_err(|e| unprocessable(e.message).with_param(e.field))?;
    let mut images = parsed.images;
    // The images are looked at first: an engine that cannot read them
    // refuses them before anything else, and an image may stand in for the
    // state (questions sent with only images are about them).
    let given_state = req.get("state").filter(|s| !s.is_null());
    if given_state.is_none() && images.is_empty() && !dgem_service::gives_images(req.get("images"))
    {
        return Err(unprocessable("state: required").with_param("state"));
    }
    let seed = seed_of(req.get("seed")).map_err(|e| unprocessable(e).with_param("seed"))?;
    json_images(req, &mut images)?;
    // A `state` that is a list of content parts with images is an image state,
    // as on chat, /api and MCP (the original server wrote it as JSON text).
    let state_parts = given_state
        .filter(|s| dgem_core::images::has_images(s))
        .and_then(Value::as_array);
    decide::check_images(state, !images.is_empty() || state_parts.is_some())?;
    // Each part is checked and named as the caller sent it (`images[i]`, `state[i]`).
    let text = given_state.map_or(Value::Null, |s| Value::String(state_text(s)));
    let base = state_parts.map_or(text, |p| Value::Array(p.clone()));
    let decide_state = dgem_core::images::with_images(base, images)
        .map_err(|e| unprocessable(e.message).with_param(e.field))?;
    // The body decoded as the service's request: the policy inline, the
    // state as built here (its images checked in this route's order).
    let label = crate::telemetry::policy_label(&schema);
    let request = dgem_service::DecisionRequest {
        inline: Some(dgem_service::InlinePolicy { schema, label }),
        state: Some(decide_state),
        read: dgem_service::ReadOptions {
            seed: Some(seed),
            ..dgem_service::ReadOptions::default()
        },
        ..dgem_service::DecisionRequest::default()
    };
    // Without post-read keys an inline policy's preparation cannot fail; a
    // failure would still be this route's 422.
    let prepared = state
        .service()
        .prepare(None, request)
        .map_err(|e| unprocessable(e.to_string()))?;
    let decided = state
        .service()
        .decide_on(
            &decide::Gated {
                state,
                flavor: Flavor::SystemOne,
            },
            prepared,
        )
        .await?;
    let timed = Timed::of(decided);
    let body = response_body(&state.config().model_name, &timed);
    Ok((decide::timing_headers(&timed), Json(body)).into_response())
}
