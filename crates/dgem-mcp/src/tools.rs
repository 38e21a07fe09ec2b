//! Tool arguments, their JSON Schemas, and the tool list.
//!
//! Every argument is a plain, non-`Option` field with a serde default, so the
//! generated input schemas carry no nullable unions (`["null", …]`, `anyOf`
//! with a null branch) that Gemini-backed clients reject. [`plain_schema`]
//! strips any that slip in anyway.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ToolError;

// The enumerated values of three cascade arguments, as the tool schema lists
// them: the canonical spellings of `dgem_cascade::options::CASCADE_MODES`,
// `THRESHOLD_MODES` and `STAGE2_PRIORS` (the arguments themselves are read by
// the cascade's parser, which also takes aliases). Schema only; variants carry
// no doc comments so that schemars writes a plain `enum`, not a `oneOf`.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum CascadeModeValue {
    Off,
    Entropy,
    OnMiss,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum ThresholdModeValue {
    Nats,
    Normalized,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum Stage2PriorValue {
    Soft,
    None,
    Full,
}

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

fn default_template() -> String {
    "support_triage".into()
}

fn default_seed() -> i64 {
    42
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// `criteria` is declared as an object (the common case) so the schema stays
/// a single plain type; a score's list of levels is accepted as well.
fn criteria_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "default": {},
        "description": "noul: {\"true\": \"when yes\", \"false\": \"when no\"} (optional). choice: option name -> description (required). score: use `levels`."
    })
}

fn state_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "description": "The text the decision is about (a ticket, a message, a log line, …); a JSON object of fields is accepted too."
    })
}

fn questions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    generator.subschema_for::<Vec<CustomQuestion>>()
}

/// Arguments of `decide_policy`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct DecidePolicyArgs {
    /// Policy template name from list_policy_templates (e.g. `support_triage`).
    #[serde(default = "default_template")]
    pub template: String,
    /// Template variables, e.g. {"ticket": "I was charged twice"}. See the
    /// template's `variables` in list_policy_templates.
    #[serde(default)]
    pub variables: Map<String, Value>,
    /// Images the decision is about, each a `data:image/...;base64,…` URL
    /// (png, jpeg, webp or gif; at most 16; the whole MCP request is capped at
    /// 1 MiB). They go ahead of the text; only a vision backend (vLLM) reads
    /// them, and the embedded model refuses them.
    #[serde(default)]
    pub images: Vec<String>,
    /// Base seed for the reads (default 42).
    #[serde(default = "default_seed")]
    pub seed: i64,
    /// Decide even when a variable the template reads with no default is
    /// not given (default false): the policy then holds a placeholder
    /// (`<no value>` or null) where the variable would go. Without it such a
    /// call is refused, naming the variable.
    #[serde(default)]
    pub allow_missing_vars: bool,
    /// Backend to decide with; empty means the default. Its schema (an
    /// `enum` of the configured backends) is set by [`with_backend_enum`].
    #[serde(default)]
    #[schemars(skip)]
    pub backend: String,
    /// Post-hoc temperature: a number for every question (T > 1 flattens an
    /// over-confident distribution, 0 = not set, range 0–20), or an object by
    /// question type, e.g. {"choice": 1.4}. Wins over the policy's.
    #[serde(default)]
    pub temperature: Option<Value>,
    /// Abstain when an answer's confidence is below this (0–1), or an object
    /// by question id ("*" for the rest). An abstained answer keeps its
    /// probabilities and is marked `abstained` with the reason.
    #[serde(default)]
    pub abstain_below: Option<Value>,
    /// Abstain when an answer's hesitation (entropy / ln K, 0–1) is at or
    /// above this, or an object by question id.
    #[serde(default)]
    pub abstain_above: Option<Value>,
    /// Escalate hesitant answers to a Stage-2 model: "off" (default),
    /// "entropy", or "on_miss" (answers differing from expected_answers).
    #[serde(default)]
    #[schemars(with = "Option<CascadeModeValue>")]
    pub cascade_mode: Option<Value>,
    /// Gate threshold: nats (default 0.35) or, with cascade_threshold_mode
    /// "normalized", entropy / ln K (default 0.16).
    #[serde(default)]
    pub cascade_threshold: Option<Value>,
    /// "nats" (default) or "normalized".
    #[serde(default)]
    #[schemars(with = "Option<ThresholdModeValue>")]
    pub cascade_threshold_mode: Option<Value>,
    /// Stage-2 model name (default: the provider's).
    #[serde(default)]
    pub cascade_model: Option<Value>,
    /// How much of Stage 1 the Stage-2 prompt shows: "soft" (default), "none", "full".
    #[serde(default)]
    #[schemars(with = "Option<Stage2PriorValue>")]
    pub stage2_prior: Option<Value>,
    /// Expected answers for cascade_mode "on_miss", e.g. {"urgent": "yes"}.
    #[serde(default)]
    pub expected_answers: Option<Value>,
    /// Taxonomy expansion: add an "other_unclassified" option to choice
    /// questions without a catch-all and propose a new option where the answer
    /// is that catch-all or hesitant (reply key `suggested_expansions`).
    #[serde(default)]
    pub suggest_expansions: Option<Value>,
    /// Entropy in nats at or above which a choice answer asks for a new option (default 0.35).
    #[serde(default)]
    pub expansion_entropy: Option<Value>,
}

impl DecidePolicyArgs {
    /// The post-read keys given, as a request object for
    /// [`dgem_cascade::Hesitation::from_object`].
    pub fn after_keys(&self) -> Map<String, Value> {
        let keys = [
            ("temperature", &self.temperature),
            ("abstain_below", &self.abstain_below),
            ("abstain_above", &self.abstain_above),
            ("cascade_mode", &self.cascade_mode),
            ("cascade_threshold", &self.cascade_threshold),
            ("cascade_threshold_mode", &self.cascade_threshold_mode),
            ("cascade_model", &self.cascade_model),
            ("stage2_prior", &self.stage2_prior),
            ("expected_answers", &self.expected_answers),
            ("suggest_expansions", &self.suggest_expansions),
            ("expansion_entropy", &self.expansion_entropy),
        ];
        keys.into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
            .collect()
    }
}

/// Question type of an ad-hoc question: `noul` (yes/no), `choice` (one of
/// named options) or `score` (an ordered level). Variants carry no doc comments
/// so that the schema is a plain string `enum`, not a `oneOf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum QuestionType {
    Noul,
    Choice,
    Score,
}

/// One ad-hoc question as the tool schema advertises it (a list entry with its
/// `id`; the `/v1/systemone` map by id is accepted too).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct CustomQuestion {
    /// Unique question id (no `:` or newline), e.g. `urgent`.
    pub id: String,
    /// `noul` (yes/no), `choice` (one option of `criteria`) or `score` (one of `levels`).
    #[serde(rename = "type")]
    pub kind: QuestionType,
    /// The question, in plain words.
    #[serde(default)]
    pub instructions: String,
    /// noul: {"true": "when yes", "false": "when no"} (optional). choice: option
    /// name -> description (or give `options`). score: give `levels` (a list of
    /// levels here is accepted too, as on /v1/systemone).
    #[serde(default = "empty_object")]
    #[schemars(schema_with = "criteria_schema")]
    pub criteria: Value,
    /// choice only: the option names, e.g. ["billing", "support"] (instead of `criteria`).
    #[serde(default)]
    pub options: Vec<String>,
    /// score only: the levels from lowest to highest, e.g. ["calm", "annoyed", "furious"].
    #[serde(default)]
    pub levels: Vec<String>,
}

/// Arguments of `decide_custom_questions`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct DecideCustomArgs {
    /// The text the decision is about (a ticket, a message, a log line, …).
    /// A JSON object of fields is taken too, as `/v1/systemone` and
    /// `/api/decide` take it; the advertised type is `string` because the
    /// lint-clean schema (no `anyOf`, no type arrays) cannot say "string or
    /// object".
    #[schemars(schema_with = "state_schema")]
    pub state: Value,
    /// The questions, e.g. [{"id": "urgent", "type": "noul", "instructions": "Does it need someone today?"}].
    /// Kept as JSON (in the order given) and converted by the one ad-hoc
    /// converter every surface uses (`dgem_core::adhoc`), which also takes the
    /// `/v1/systemone` map by id and every type alias; the advertised schema is a
    /// list of [`CustomQuestion`] (a map would need `additionalProperties`,
    /// which Gemini-backed clients refuse).
    #[schemars(schema_with = "questions_schema")]
    pub questions: Value,
    /// Instructions that apply to every question (optional).
    #[serde(default)]
    pub instructions: String,
    /// Images the decision is about, each a `data:image/...;base64,…` URL
    /// (png, jpeg, webp or gif; at most 16; the whole MCP request is capped at
    /// 1 MiB). They go ahead of the text; only a vision backend (vLLM) reads
    /// them, and the embedded model refuses them.
    #[serde(default)]
    pub images: Vec<String>,
    /// Base seed for the reads (default 42).
    #[serde(default = "default_seed")]
    pub seed: i64,
    /// Backend to decide with; empty means the default. Its schema (an
    /// `enum` of the configured backends) is set by [`with_backend_enum`].
    #[serde(default)]
    #[schemars(skip)]
    pub backend: String,
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

/// The argument names of `tool` (its schema's properties and `backend`),
/// generated once per tool rather than on every call.
fn known_args<T: JsonSchema>(tool: &'static str) -> Arc<Vec<String>> {
    type Names = std::collections::HashMap<&'static str, Arc<Vec<String>>>;
    static CACHE: std::sync::OnceLock<std::sync::Mutex<Names>> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    map.entry(tool)
        .or_insert_with(|| {
            let schema = input_schema::<T>();
            let mut names: Vec<String> = schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            names.push("backend".into());
            Arc::new(names)
        })
        .clone()
}

/// [`parse_args`], refusing arguments the tool does not take (a misspelled
/// `imges` would otherwise be dropped and the decision made without it). The
/// allowed names are `T`'s schema properties and `backend`.
///
/// # Errors
/// [`ToolError::Arguments`] naming the unknown argument and the closest known one.
pub fn parse_args_strict<T: DeserializeOwned + JsonSchema>(
    tool: &'static str,
    args: Option<JsonObject>,
) -> Result<T, ToolError> {
    let known = known_args::<T>(tool);
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    if let Some(key) = args
        .as_ref()
        .and_then(|a| a.keys().find(|k| !known.contains(&k.as_str())))
    {
        let hint = dgem_engine::builtin::closest(key, known.iter().copied())
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        return Err(ToolError::Arguments {
            tool,
            detail: format!(
                "unknown argument `{}`{hint} (the arguments are [{}])",
                key.chars().take(40).collect::<String>(),
                known.join(", ")
            ),
        });
    }
    parse_args(tool, args)
}

/// The JSON Schema of `T` as a tool input schema, made plain by [`plain_schema`].
pub fn input_schema<T: JsonSchema>() -> Arc<JsonObject> {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
    });
    let root = settings.into_generator().into_root_schema_for::<T>();
    let mut value = serde_json::to_value(root).unwrap_or(Value::Null);
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
            input_schema::<DecidePolicyArgs>(),
        )
        .with_annotations(read_only()),
        Tool::new(
            DECIDE_CUSTOM,
            "Ask ad-hoc questions about a text (state). Questions by id: type noul (yes/no), choice \
             (criteria maps option names to descriptions) or score (levels, lowest first). Returns the \
             same answers, probabilities and hesitation as decide_policy.",
            input_schema::<DecideCustomArgs>(),
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
