//! One row of `dgem batch`: from an input row to its output line.
//!
//! A row of fields becomes one [`DecisionRequest`] and is decided by
//! [`Service::decide`], as `dgem decide` decides. An OpenAI Batch row's body
//! goes through `dgem serve`'s own chat route, run in process on the same
//! engine ([`dgem_server::router`]), so its response line holds the bytes a
//! `POST /v1/chat/completions` would have returned.
//!
//! A failure that concerns the row alone (a refused variable, a malformed
//! body, a 4xx) is its answer and is written. A failure of the model or the
//! backend is retried ([`RETRIES`] times, backing off from [`BACKOFF`]); if
//! it persists the job stops before writing that row, so a rerun decides it.

use std::sync::Arc;
use std::time::Duration;

use dgem_bench::batch::input::{InputRow, Item, RowError};
use dgem_engine::{DecideError, Decider};
use dgem_service::{DecisionRequest, Service, ServiceError};
use serde_json::{json, Map, Value};

/// Tries after the first for a failure of the model or the backend.
pub const RETRIES: u32 = 3;
/// The first back-off; each later one doubles it.
pub const BACKOFF: Duration = Duration::from_millis(500);
/// Largest chat response body read back from the in-process route.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// What a row got.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The decision envelope (`answers`, `diagnostics`, post-read keys).
    Envelope(Value),
    /// An OpenAI Batch row's HTTP status and response body.
    Response {
        /// 200, or the 4xx the chat route gave.
        status: u16,
        /// The chat-completions body, or its error body.
        body: Value,
    },
}

impl Answer {
    /// Whether the row counts as failed (a 4xx response).
    pub fn failed(&self) -> bool {
        matches!(self, Self::Response { status, .. } if *status != 200)
    }
}

/// A row's answer, or why it has none.
pub type RowResult = Result<Answer, RowError>;

/// A failure that stops the job (the row is not written).
#[derive(Debug)]
pub struct Stop(pub anyhow::Error);

/// Everything a row needs, shared by every row of the run.
pub struct Ctx {
    /// The decision service (catalogue, policy, post-read setup).
    pub service: Service,
    /// The model or backend.
    pub decider: Arc<dyn Decider>,
    /// The request every row of fields starts from (template or questions,
    /// shared variables, read and post-read options).
    pub base: DecisionRequest,
    /// `dgem serve`'s routes over `decider`, for OpenAI Batch rows.
    pub chat: Option<axum::Router>,
}

/// Decide `row` (its item must be `Ok`).
///
/// # Errors
/// [`Stop`] when the model or backend keeps failing.
pub async fn decide(ctx: &Ctx, item: &Item) -> Result<RowResult, Stop> {
    match item {
        Item::Fields(fields) => decide_fields(ctx, fields).await,
        Item::Chat(body) => decide_chat(ctx, body).await,
    }
}

/// The request of a row of `fields`: the run's `base` with the row's
/// variables over the shared ones or, with ad-hoc questions, the row as the
/// state (its `state` field, or the whole row as a JSON object of fields).
pub fn request(base: &DecisionRequest, fields: &Map<String, Value>) -> DecisionRequest {
    let mut req = base.clone();
    if req.is_custom() {
        req.state = Some(match fields.get("state") {
            Some(s) => s.clone(),
            None => Value::Object(fields.clone()),
        });
    } else {
        let mut vars = req.variables.take().unwrap_or_default();
        vars.extend(fields.iter().map(|(k, v)| (k.clone(), v.clone())));
        req.variables = Some(vars);
    }
    req
}

async fn decide_fields(ctx: &Ctx, fields: &Map<String, Value>) -> Result<RowResult, Stop> {
    let req = request(&ctx.base, fields);
    let custom = req.is_custom();
    let prepared = match ctx.service.prepare(None, req) {
        Ok(p) => p,
        Err(e) => return Ok(Err(refusal(e, custom))),
    };
    if let Err(e) =
        dgem_core::images::check_required(&prepared.request.schema, &prepared.request.state)
    {
        return Ok(Err(RowError::new(e.field.to_string(), e.message)));
    }
    let mut attempt = 0;
    loop {
        match ctx
            .service
            .decide(ctx.decider.as_ref(), prepared.clone())
            .await
        {
            Ok(decided) => return Ok(Ok(Answer::Envelope(decided.envelope()))),
            Err(DecideError::Schema(e)) => {
                return Ok(Err(RowError::new(e.field.to_string(), e.message)))
            }
            Err(e) if e.is_user_error() => return Ok(Err(RowError::new("state", e.to_string()))),
            Err(e) => {
                let retryable = matches!(&e, DecideError::Backend(b) if b.is_retryable());
                if !retryable || attempt >= RETRIES {
                    return Err(Stop(anyhow::anyhow!(
                        "the model failed after {} tries: {e}",
                        attempt + 1
                    )));
                }
                tokio::time::sleep(BACKOFF * 2u32.pow(attempt)).await;
                attempt += 1;
            }
        }
    }
}

/// A service refusal as the row's error, named by the request field at
/// fault.
fn refusal(e: ServiceError, custom: bool) -> RowError {
    use dgem_engine::templates::TemplateError;
    let field = match &e {
        ServiceError::Field { field, .. } => field.clone(),
        ServiceError::Variables(_) | ServiceError::NoState(_) => "variables".into(),
        ServiceError::Template(f) if matches!(f.error, TemplateError::Unset { .. }) => {
            "variables".into()
        }
        ServiceError::Schema { .. } if custom => "questions".into(),
        _ => "template".into(),
    };
    RowError::new(field, e.to_string())
}

async fn decide_chat(ctx: &Ctx, body: &Value) -> Result<RowResult, Stop> {
    use tower::ServiceExt as _;
    let Some(router) = &ctx.chat else {
        return Err(Stop(anyhow::anyhow!(
            "an OpenAI Batch row needs the chat route, which this run did not build"
        )));
    };
    let bytes = serde_json::to_vec(body).map_err(|e| Stop(e.into()))?;
    let mut attempt = 0;
    loop {
        let request = axum::http::Request::builder()
            .method("POST")
            .uri(dgem_bench::batch::input::OPENAI_URL)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(bytes.clone()))
            .map_err(|e| Stop(e.into()))?;
        let response = router
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| Stop(anyhow::anyhow!("the chat route failed: {e}")))?;
        let status = response.status().as_u16();
        let raw = axum::body::to_bytes(response.into_body(), MAX_RESPONSE_BYTES)
            .await
            .map_err(|e| Stop(anyhow::anyhow!("the chat route's reply: {e}")))?;
        let body: Value = serde_json::from_slice(&raw).unwrap_or_else(
            |_| json!({"error": {"message": String::from_utf8_lossy(&raw), "type": "server_error"}}),
        );
        if status < 500 && status != 429 {
            return Ok(Ok(Answer::Response { status, body }));
        }
        if attempt >= RETRIES {
            return Err(Stop(anyhow::anyhow!(
                "the chat route answered {status} after {} tries: {body}",
                attempt + 1
            )));
        }
        tokio::time::sleep(BACKOFF * 2u32.pow(attempt)).await;
        attempt += 1;
    }
}

/// The output line of `row`: dgem's form (`id`, `row`, then `decision` or
/// `error`, and `duplicate_of` for a row decided as an earlier one), or with
/// `openai` OpenAI Batch's (`id: batch_req_<row>`, `custom_id`, `response`
/// with `status_code` and `body`, `error`).
pub fn line(openai: bool, row: &InputRow, result: &RowResult, duplicate_of: Option<&str>) -> Value {
    let mut out = if openai {
        let (response, error) = match result {
            Ok(Answer::Response { status, body }) => (
                json!({"status_code": status, "request_id": format!("req_{}", row.index), "body": body}),
                Value::Null,
            ),
            Ok(Answer::Envelope(env)) => (
                json!({"status_code": 200, "request_id": format!("req_{}", row.index), "body": env}),
                Value::Null,
            ),
            Err(e) => (
                Value::Null,
                json!({"code": "invalid_request", "message": e.message, "param": e.field}),
            ),
        };
        json!({
            "id": format!("batch_req_{}", row.index),
            "custom_id": row.id,
            "response": response,
            "error": error,
        })
    } else {
        let mut m = Map::new();
        m.insert("id".into(), json!(row.id));
        m.insert("row".into(), json!(row.index));
        match result {
            Ok(Answer::Envelope(env)) => m.insert("decision".into(), env.clone()),
            Ok(Answer::Response { status, body }) => {
                m.insert("status".into(), json!(status));
                m.insert("response".into(), body.clone())
            }
            Err(e) => m.insert(
                "error".into(),
                json!({"field": e.field, "message": e.message}),
            ),
        };
        Value::Object(m)
    };
    if let (Some(first), Some(m)) = (duplicate_of, out.as_object_mut()) {
        m.insert("duplicate_of".into(), json!(first));
    }
    out
}

/// A written line read back on resume: its id and its result (to decide a
/// later duplicate the same way).
pub fn parse_line(line: &Value) -> Option<(String, RowResult)> {
    if let Some(custom) = line.get("custom_id").and_then(Value::as_str) {
        let result = match line.get("response").filter(|r| !r.is_null()) {
            Some(r) => Ok(Answer::Response {
                status: r
                    .get("status_code")
                    .and_then(Value::as_u64)
                    .and_then(|s| u16::try_from(s).ok())?,
                body: r.get("body").cloned()?,
            }),
            None => Err(row_error(line.get("error")?, "param")?),
        };
        return Some((custom.to_string(), result));
    }
    let id = line.get("id").and_then(Value::as_str)?.to_string();
    let result = if let Some(d) = line.get("decision") {
        Ok(Answer::Envelope(d.clone()))
    } else {
        Err(row_error(line.get("error")?, "field")?)
    };
    Some((id, result))
}

fn row_error(e: &Value, field_key: &str) -> Option<RowError> {
    Some(RowError::new(
        e.get(field_key).and_then(Value::as_str).unwrap_or("line"),
        e.get("message").and_then(Value::as_str)?,
    ))
}
