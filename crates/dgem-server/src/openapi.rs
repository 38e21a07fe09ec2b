//! The OpenAPI 3.1 document of `dgem serve`, at `GET /openapi.json`.
//!
//! Built with `utoipa` from the wire types below (one Rust type per request
//! and reply shape, with serde's field names) and one `#[utoipa::path]` per
//! route. The handlers read and write JSON through `serde_json::Value`, so that
//! a malformed body gets the error that names its field rather than serde's;
//! these types describe the same shapes for clients and code generators. Tests
//! keep them honest: every documented path answers on the real router, every
//! route in the list of the server is documented, and the documented top-level
//! request fields are exactly the fields the handlers read
//! (`tests/openapi.rs`).
//!
//! Routes that only some listeners have are marked in their description:
//! `/api/*` and the Studio page come with `--studio` (and on `dgem gateway`),
//! `/mcp` with every `dgem serve`.

use std::collections::BTreeMap;

use axum::Json;
use serde_json::Value;
use utoipa::OpenApi;

mod types;

pub use types::*;

/// The document.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "dgem",
        description = "A zero-shot decision engine: every allowed answer of every question gets a probability from one forward pass, with its entropy. Auth: with `API_KEY` set, every POST needs `Authorization: Bearer <key>` or `X-DGem-Key: <key>`; GETs stay open.",
        license(name = "Apache-2.0")
    ),
    paths(
        chat_completions,
        systemone,
        models,
        raw_removed,
        health,
        ready,
        metrics,
        openapi_json,
        api_templates,
        api_decide,
        api_decide_template,
        api_health,
        api_backends,
        mcp,
        studio,
    ),
    components(schemas(
        ChatCompletionRequest,
        ChatMessage,
        StreamOptions,
        ResponseFormat,
        JsonSchemaFormat,
        ChatCompletion,
        ChatChoice,
        AssistantMessage,
        Usage,
        Envelope,
        Answer,
        SystemOneRequest,
        SystemOneQuestion,
        SystemOneResponse,
        ModelList,
        ModelEntry,
        ErrorBody,
        ErrorDetail,
        dgem_service::DecisionRequest,
        dgem_service::ReadOptions,
        dgem_core::schema::Layout,
        dgem_core::schema::Isolate,
        dgem_service::AfterOptions,
        dgem_service::CustomQuestion,
        dgem_cascade::options::CascadeSwitch,
        dgem_cascade::options::ThresholdMode,
        dgem_cascade::options::PriorMode,
        JsonRpcRequest,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "decisions", description = "Decision routes: OpenAI-shaped, Jev-shaped and the Studio API"),
        (name = "operations", description = "Health, readiness, metrics and this document"),
        (name = "agents", description = "MCP over Streamable HTTP")
    )
)]
pub struct ApiDoc;

/// Adds the bearer-key security scheme (`API_KEY`).
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The server's `API_KEY` (or one of `DGEM_SERVER_KEY`); also accepted as `X-DGem-Key`."))
                    .build(),
            ),
        );
    }
}

/// Aliases served by the same handler as a documented path: `(alias, path)`.
/// Each is added to the document as a copy of its path.
pub const ALIASES: &[(&str, &str)] = &[
    ("/predict", "/v1/chat/completions"),
    ("/rawPredict", "/v1/chat/completions"),
    ("/invoke/v1/chat/completions", "/v1/chat/completions"),
    ("/invoke/predict", "/v1/chat/completions"),
    ("/invoke/rawPredict", "/v1/chat/completions"),
    ("/invoke/v1/systemone", "/v1/systemone"),
    (
        "/invoke/v1/raw/chat/completions",
        "/v1/raw/chat/completions",
    ),
    ("/invoke/v1/models", "/v1/models"),
    ("/invoke/health", "/health"),
];

/// The whole document as JSON, aliases included. An alias's operations get
/// their own `operationId` (`chat_completions` at `/invoke/predict` is
/// `chat_completions_invoke_predict`): OpenAPI requires them unique.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or(Value::Null);
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return doc;
    };
    for (alias, path) in ALIASES {
        let Some(mut item) = paths.get(*path).cloned() else {
            continue;
        };
        let slug: String = alias
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if let Some(ops) = item.as_object_mut() {
            for op in ops.values_mut() {
                if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                    let unique = format!("{id}{slug}");
                    op["operationId"] = Value::String(unique);
                }
            }
        }
        paths.insert((*alias).to_string(), item);
    }
    doc
}

/// `GET /openapi.json`.
pub async fn handler() -> Json<Value> {
    Json(document())
}

// The path items. The functions are never called: each carries one route's
// description for the document (the real handler is named in the doc line).

/// A decision, OpenAI-shaped (`chat::handle`). The system message is the
/// question schema JSON and the user message the state; or ordinary messages
/// with a `response_format` of type `json_schema`, whose properties become the
/// questions. Also served at `/predict`, `/rawPredict` and under `/invoke`.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "decisions",
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The decision: `content` is the envelope (or, with `response_format`, the requested object with the envelope in `dgem`). With `stream: true`, `text/event-stream` of `chat.completion.chunk` events, then `[DONE]`.", body = ChatCompletion),
        (status = 400, description = "The request names the field at fault in `error.param`", body = ErrorBody),
        (status = 401, description = "Missing or wrong key", body = ErrorBody),
        (status = 422, description = "An image on a model that cannot read images", body = ErrorBody),
        (status = 503, description = "Overloaded or loading; see `Retry-After`", body = ErrorBody),
        (status = 504, description = "The request took longer than `REQUEST_TIMEOUT_S`", body = ErrorBody)
    ),
    security((), ("bearer" = [])))]
#[allow(dead_code)]
fn chat_completions() {}

/// A decision, Jev-shaped (`systemone::handle`), JSON or multipart with a
/// `request` part and `image/*` parts. Also under `/invoke`.
#[utoipa::path(post, path = "/v1/systemone", tag = "decisions",
    request_body(content = SystemOneRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Answers by question id", body = SystemOneResponse),
        (status = 401, description = "Missing or wrong key", body = ErrorBody),
        (status = 422, description = "Validation error naming the field", body = ErrorBody)
    ),
    security((), ("bearer" = [])))]
#[allow(dead_code)]
fn systemone() {}

/// The served model, in OpenAI's list shape (`chat::models`).
#[utoipa::path(get, path = "/v1/models", tag = "decisions",
    responses((status = 200, description = "One model", body = ModelList)))]
#[allow(dead_code)]
fn models() {}

/// The original server's free-form route, removed (`health::raw_removed`).
#[utoipa::path(post, path = "/v1/raw/chat/completions", tag = "decisions",
    responses((status = 410, description = "`route_removed`", body = ErrorBody)))]
#[allow(dead_code)]
fn raw_removed() {}

/// Liveness and model state (`health::health`); always 200. Also `/` (when
/// the Studio is off) and `/invoke/health`.
#[utoipa::path(get, path = "/health", tag = "operations",
    responses((status = 200, description = "`status`, `phase` (`loading_model` until the model is in), the backend, the canvas profile, staging progress", body = Object)))]
#[allow(dead_code)]
fn health() {}

/// Readiness (`health::ready`): 200 after a real warm-up decision.
#[utoipa::path(get, path = "/ready", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Object),
        (status = 503, description = "Not ready yet, or the warm-up failed", body = Object)
    ))]
#[allow(dead_code)]
fn ready() {}

/// Prometheus metrics (`health::metrics`).
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format", content_type = "text/plain", body = String)))]
#[allow(dead_code)]
fn metrics() {}

/// This document (`openapi::handler`).
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
#[allow(dead_code)]
fn openapi_json() {}

/// The policy templates with their questions (`api::templates`). With
/// `--studio`, and on `dgem gateway`.
#[utoipa::path(get, path = "/api/templates", tag = "decisions",
    responses((status = 200, description = "`{count, templates: [{id, name, category, questions, variables…}]}`", body = Object)))]
#[allow(dead_code)]
fn api_templates() {}

/// A decision from a template or from ad-hoc questions (`api::decide`).
/// With `--studio`, and on `dgem gateway`.
#[utoipa::path(post, path = "/api/decide", tag = "decisions",
    request_body = dgem_service::DecisionRequest,
    responses(
        (status = 200, description = "The envelope with `template`, `backend` and timing", body = Envelope),
        (status = 400, description = "The request names the field at fault", body = ErrorBody),
        (status = 401, description = "Missing or wrong key", body = ErrorBody)
    ),
    security((), ("bearer" = [])))]
#[allow(dead_code)]
fn api_decide() {}

/// [`api_decide`] with the template named in the path.
#[utoipa::path(post, path = "/api/decide/{template}", tag = "decisions",
    params(("template" = String, Path, description = "Template id, e.g. `support_triage`")),
    request_body = dgem_service::DecisionRequest,
    responses(
        (status = 200, description = "The envelope", body = Envelope),
        (status = 400, description = "The request names the field at fault; an unknown template is a 400 naming `template`", body = ErrorBody),
        (status = 401, description = "Missing or wrong key", body = ErrorBody)
    ),
    security((), ("bearer" = [])))]
#[allow(dead_code)]
fn api_decide_template() {}

/// Health of every backend (`api::health`). With `--studio`, and on `dgem gateway`.
#[utoipa::path(get, path = "/api/health", tag = "operations",
    responses((status = 200, description = "Per-backend health", body = Object)))]
#[allow(dead_code)]
fn api_health() {}

/// The backends a decision may be routed to (`api::backend_list`).
#[utoipa::path(get, path = "/api/backends", tag = "operations",
    responses((status = 200, description = "The backend list and the default", body = Object)))]
#[allow(dead_code)]
fn api_backends() {}

/// MCP over Streamable HTTP (`dgem_mcp::http_router_for`): JSON-RPC 2.0
/// `initialize`, `tools/list`, `tools/call` (`decide_policy`,
/// `decide_custom_questions`, `list_policy_templates`,
/// `get_health_and_gpu_status`, `warmup_gpu`).
#[utoipa::path(post, path = "/mcp", tag = "agents",
    request_body = JsonRpcRequest,
    responses(
        (status = 200, description = "JSON-RPC reply (JSON or an SSE stream, as the client's `Accept` asks)", body = Object),
        (status = 401, description = "Missing or wrong key", body = ErrorBody)
    ),
    security((), ("bearer" = [])))]
#[allow(dead_code)]
fn mcp() {}

/// Decision Studio, the browser page (`dgem_studio`), with `--studio`.
#[utoipa::path(get, path = "/studio", tag = "operations",
    responses((status = 200, description = "HTML", content_type = "text/html", body = String)))]
#[allow(dead_code)]
fn studio() {}

/// The documented top-level properties of a schema in the document, sorted
/// (the tests compare them with the fields the handlers read). A schema
/// composed with `allOf` (a flattened field: `DecisionRequest` flattens
/// `AfterOptions`) has the properties of every part, `$ref`s followed.
pub fn properties_of(doc: &Value, schema: &str) -> Vec<String> {
    fn collect(doc: &Value, s: &Value, out: &mut BTreeMap<String, Value>) {
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            if let Some(target) = doc.pointer(r.trim_start_matches('#')) {
                collect(doc, target, out);
            }
        }
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            out.extend(props.clone());
        }
        for part in s
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            collect(doc, part, out);
        }
    }
    let mut props = BTreeMap::new();
    collect(doc, &doc["components"]["schemas"][schema], &mut props);
    props.into_keys().collect()
}
