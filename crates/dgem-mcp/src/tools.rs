//! Tool arguments, their JSON Schemas, and the tool list.
//!
//! The two decision tools take views of the decision service's one typed
//! request ([`dgem_service::DecisionRequest`]): `decide_policy` its template
//! half, `decide_custom_questions` its ad-hoc half, and both its read and
//! post-read options. Their input schemas are that type's derived schema,
//! projected per tool; [`plain_schema`] strips the nullable unions (`["null",
//! …]`, `anyOf` with a null branch) that Gemini-backed clients reject.

use std::sync::Arc;

use dgem_service::{DecisionRequest, Surface, ToolKind};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ToolError;

/// `decide_policy` tool name.
pub const DECIDE_POLICY: &str = "decide_policy";
/// `decide_custom_questions` tool name.
pub const DECIDE_CUSTOM: &str = "decide_custom_questions";
/// `list_policy_templates` tool name.
pub const LIST_TEMPLATES: &str = "list_policy_templates";
/// `get_health_and_gpu_status` tool name.
pub const HEALTH: &str = "get_health_and_gpu_status";
/// `warmup_gpu` tool name.
pub const WARMUP: &str = "warmup_gpu";
/// Name of the one backend an MCP server over a single in-process decider has.
pub const LOCAL_BACKEND: &str = "local";

/// The decision service's tool view of `tool` (a decision tool's name).
fn tool_kind(tool: &str) -> ToolKind {
    if tool == DECIDE_CUSTOM {
        ToolKind::Custom
    } else {
        ToolKind::Policy
    }
}

/// The arguments of decision tool `tool` as a [`DecisionRequest`]: the keys
/// it takes are its view of the request ([`ToolKind::keys`], read from the
/// request's derived schema), so a misspelled `imges` is refused rather than
/// dropped, and each value is checked by the same code `/api/decide` uses.
///
/// # Errors
/// [`ToolError::Arguments`] naming the unknown or missing argument (with the
/// closest known one), or the field at fault, its allowed values and the
/// value given.
pub fn parse_request(
    tool: &'static str,
    args: Option<JsonObject>,
) -> Result<DecisionRequest, ToolError> {
    let kind = tool_kind(tool);
    let known = kind_keys(kind);
    let args = args.unwrap_or_default();
    if let Some((key, closest)) = DecisionRequest::unknown_key(&args, &known) {
        let hint = closest
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        return Err(ToolError::Arguments {
            tool,
            detail: format!(
                "unknown argument `{key}`{hint} (the arguments are [{}])",
                known.join(", ")
            ),
        });
    }
    if let Some(missing) = kind.required().iter().find(|k| !args.contains_key(**k)) {
        return Err(ToolError::Arguments {
            tool,
            detail: format!("missing field `{missing}`"),
        });
    }
    DecisionRequest::from_object(&args, &Surface::MCP).map_err(|e| ToolError::from_service(tool, e))
}

/// The argument names of a decision tool, generated once per tool rather
/// than on every call.
fn kind_keys(kind: ToolKind) -> Arc<Vec<String>> {
    static POLICY: std::sync::OnceLock<Arc<Vec<String>>> = std::sync::OnceLock::new();
    static CUSTOM: std::sync::OnceLock<Arc<Vec<String>>> = std::sync::OnceLock::new();
    let cell = match kind {
        ToolKind::Policy => &POLICY,
        ToolKind::Custom => &CUSTOM,
    };
    cell.get_or_init(|| Arc::new(kind.keys())).clone()
}

/// A decision tool's input schema: the service's view of the request for
/// `kind` ([`dgem_service::tool_schema`]), made plain by [`plain_schema`].
/// `backend` is left out here and added by [`with_backend_enum`] as an `enum`
/// of the configured backends.
pub fn decision_schema(kind: ToolKind) -> Arc<JsonObject> {
    let mut obj = dgem_service::tool_schema(kind);
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.shift_remove("backend");
    }
    tool_input(obj)
}

/// A JSON Schema object as a tool input schema: made plain by
/// [`plain_schema`], without `$schema`, `title` and `$defs`, and always an
/// object with `properties`.
fn tool_input(schema: Map<String, Value>) -> Arc<JsonObject> {
    let mut value = Value::Object(schema);
    plain_schema(&mut value);
    let mut obj = match value {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    obj.remove("$schema");
    obj.remove("title");
    obj.remove("$defs");
    obj.entry("type")
        .or_insert_with(|| Value::String("object".into()));
    obj.entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    Arc::new(obj)
}

/// Arguments of the tools that take none.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct NoArgs {}

/// Parse a tool's arguments; a mismatch names the field at fault.
///
/// # Errors
/// [`ToolError::Arguments`] with the JSON path of the bad field.
pub fn parse_args<T: DeserializeOwned>(
    tool: &'static str,
    args: Option<JsonObject>,
) -> Result<T, ToolError> {
    let value = Value::Object(args.unwrap_or_default());
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let detail = if path == "." {
            e.inner().to_string()
        } else {
            format!("field `{path}`: {}", e.inner())
        };
        ToolError::Arguments { tool, detail }
    })
}

/// The JSON Schema of `T` as a tool input schema, made plain by [`plain_schema`].
pub fn input_schema<T: JsonSchema>() -> Arc<JsonObject> {
    tool_input(dgem_service::keys::schema_of::<T>())
}

/// Make a schema plain in place, for clients whose schema subset is small
/// (Gemini's function declarations refuse `additionalProperties`, unions, `$ref`
/// and type arrays): `"type": ["null", X]` becomes `"type": X`, null branches
/// leave `anyOf`/`oneOf`, a union left with one branch is merged into its
/// parent, and `additionalProperties` is dropped (maps stay `"type": "object"`).
pub fn plain_schema(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("additionalProperties");
            if let Some(Value::Array(types)) = o.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let t = types.remove(0);
                    o.insert("type".into(), t);
                }
            }
            for key in ["anyOf", "oneOf"] {
                let Some(Value::Array(branches)) = o.get_mut(key) else {
                    continue;
                };
                branches.retain(|b| b.get("type").and_then(Value::as_str) != Some("null"));
                if branches.len() == 1 {
                    if let Some(Value::Object(only)) = branches.pop() {
                        o.remove(key);
                        for (k, val) in only {
                            o.entry(k).or_insert(val);
                        }
                    }
                }
            }
            o.values_mut().for_each(plain_schema);
        }
        Value::Array(items) => items.iter_mut().for_each(plain_schema),
        _ => {}
    }
}

/// Where a tool input schema uses what small-schema clients (Gemini-backed ones)
/// refuse: `additionalProperties`, `anyOf`/`oneOf`/`allOf`, `$ref` or a type
/// array. Returns one `path: keyword` entry per finding; empty when plain.
pub fn schema_lint(v: &Value) -> Vec<String> {
    fn walk(v: &Value, path: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                for key in ["additionalProperties", "anyOf", "oneOf", "allOf", "$ref"] {
                    if o.contains_key(key) {
                        out.push(format!("{path}: {key}"));
                    }
                }
                if o.get("type").is_some_and(Value::is_array) {
                    out.push(format!("{path}: type array"));
                }
                for (k, val) in o {
                    walk(val, &format!("{path}/{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    walk(x, &format!("{path}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

/// Whether a schema still holds a nullable union anywhere (for tests).
pub fn has_null_union(v: &Value) -> bool {
    match v {
        Value::Object(o) => {
            let nullable_type = o
                .get("type")
                .and_then(Value::as_array)
                .is_some_and(|t| t.iter().any(|x| x == "null"));
            let null_branch = ["anyOf", "oneOf"].iter().any(|k| {
                o.get(*k).and_then(Value::as_array).is_some_and(|b| {
                    b.iter()
                        .any(|x| x.get("type") == Some(&Value::from("null")))
                })
            });
            nullable_type || null_branch || o.values().any(has_null_union)
        }
        Value::Array(items) => items.iter().any(has_null_union),
        _ => false,
    }
}

fn read_only() -> ToolAnnotations {
    ToolAnnotations::from_raw(None, Some(true), Some(false), Some(true), Some(false))
}

/// Add the `backend` property to a decision tool's input schema: a string
/// `enum` of exactly `backends` (the configured ones), defaulting to the first.
/// Tools without a `variables` or `questions` property are left alone.
pub fn with_backend_enum(tool: &mut Tool, backends: &[String]) {
    let Some(default) = backends.first() else {
        return;
    };
    let mut schema = tool.input_schema.as_ref().clone();
    let Some(Value::Object(props)) = schema.get_mut("properties") else {
        return;
    };
    if !props.contains_key("variables") && !props.contains_key("questions") {
        return;
    }
    props.insert(
        "backend".into(),
        serde_json::json!({
            "type": "string",
            "enum": backends,
            "default": default,
            "description": format!(
                "Backend to decide with; this server has: {} (default `{default}`).",
                backends.join(", ")
            ),
        }),
    );
    tool.input_schema = Arc::new(schema);
}

/// Check a `backend` argument against the configured `backends` (empty = default).
///
/// # Errors
/// [`ToolError::Arguments`] naming the field, the allowed values and the value given.
pub fn check_backend(
    tool: &'static str,
    backend: &str,
    backends: &[String],
) -> Result<(), ToolError> {
    if backend.is_empty() || backends.iter().any(|b| b == backend) {
        return Ok(());
    }
    Err(ToolError::Arguments {
        tool,
        detail: format!(
            "field `backend` must be one of [{}]. Given: `{backend}`",
            backends.join(", ")
        ),
    })
}

/// The tools this server offers, with the `backend` enum of [`LOCAL_BACKEND`].
pub fn tool_list() -> Vec<Tool> {
    tool_list_for(&[LOCAL_BACKEND.to_string()])
}

/// The tools, with the decision tools' `backend` argument an `enum` of `backends`.
pub fn tool_list_for(backends: &[String]) -> Vec<Tool> {
    let mut tools = base_tools();
    for t in &mut tools {
        with_backend_enum(t, backends);
    }
    tools
}

fn base_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            DECIDE_POLICY,
            "Run a policy template (see list_policy_templates) on variables and return, per question, \
             the answer, the probability of every allowed answer, confidence and normalized entropy \
             (hesitation, 0 = certain, 1 = coin flip), plus the maximum hesitation.",
            decision_schema(ToolKind::Policy),
        )
        .with_annotations(read_only()),
        Tool::new(
            DECIDE_CUSTOM,
            format!(
                "Ask ad-hoc questions about a text (state). Questions by id, each of a type: {}. \
                 Returns the same answers, probabilities and hesitation as decide_policy.",
                dgem_core::schema::QuestionKind::described()
            ),
            decision_schema(ToolKind::Custom),
        )
        .with_annotations(read_only()),
        Tool::new(
            LIST_TEMPLATES,
            "List the policy templates: name, description, question ids and types, and the variables \
             each template reads.",
            input_schema::<NoArgs>(),
        )
        .with_annotations(read_only()),
        Tool::new(
            HEALTH,
            "Backend engine, model and health. The embedded model runs on the CPU: there is no GPU.",
            input_schema::<NoArgs>(),
        )
        .with_annotations(read_only()),
        Tool::new(
            WARMUP,
            "Run one tiny decision to load and warm the model; reports how long it took in ms.",
            input_schema::<NoArgs>(),
        )
        .with_annotations(read_only()),
    ]
}
