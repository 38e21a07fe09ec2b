//! [`DecisionRequest`]: one decision as every surface receives it, either a
//! policy template with its variables or ad-hoc questions with a state, plus
//! the read and post-read options.
//!
//! The type is the single declaration of the request's keys. Its derives give
//! the OpenAPI schema of `/api/decide` (utoipa) and the MCP decision tools'
//! input schemas (schemars, projected per tool by [`tool_schema`]); the keys
//! a surface refuses as unknown are read from the same schema
//! ([`DecisionRequest::keys`]). [`DecisionRequest::from_object`] checks each
//! value, every error naming the field, the allowed values and the value
//! received: the read and post-read options by serde through their core
//! types' own parses, the other keys by hand.

use dgem_core::schema::QuestionKind;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::error::ServiceError;
use crate::read::ReadOptions;
use crate::AfterOptions;
use crate::Surface;

/// Template used when neither the request nor the route names one.
pub const DEFAULT_TEMPLATE: &str = "support_triage";

/// Label of a decision made from ad-hoc questions.
pub const CUSTOM_LABEL: &str = "custom_questions";

/// Base seed of the reads when the request gives none.
pub const DEFAULT_SEED: i64 = 42;

/// The advertised question types: every [`QuestionKind`]'s wire name
/// (`noul`, `choice`, `score`, `multi`), so that a new kind is advertised without
/// touching this file. The parser ([`dgem_core::adhoc`]) also takes every
/// alias ([`QuestionKind::aliases`]: `boolean`, `bool`).
fn type_names() -> Vec<&'static str> {
    QuestionKind::ALL.iter().map(|k| k.wire_name()).collect()
}

/// `type` as the MCP schema advertises it: a plain string `enum`.
fn type_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": type_names(),
        "description": QuestionKind::described()
    })
}

/// `type` as the OpenAPI document advertises it.
fn type_openapi() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(type_names()))
        .description(Some(QuestionKind::described()))
        .build()
}

/// One ad-hoc question as the schemas advertise it (a list entry with its
/// `id`; the `/v1/systemone` map by id is accepted too).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, ToSchema)]
pub struct CustomQuestion {
    /// Unique question id (no `:` or newline), e.g. `urgent`.
    pub id: String,
    /// The question type (its schema lists every type with what it answers).
    #[serde(rename = "type")]
    #[schemars(schema_with = "type_schema")]
    #[schema(schema_with = type_openapi)]
    pub kind: String,
    /// The question, in plain words.
    #[serde(default)]
    pub instructions: String,
    /// noul: {"true": "when yes", "false": "when no"} (optional). choice and
    /// multi: option name -> description (or give `options`). score: give `levels` (a list of
    /// levels here is accepted too, as on /v1/systemone).
    #[serde(default)]
    #[schemars(schema_with = "criteria_schema")]
    #[schema(value_type = Object)]
    pub criteria: Value,
    /// choice and multi: the option names, e.g. ["billing", "support"] (instead of `criteria`).
    #[serde(default)]
    pub options: Vec<String>,
    /// score only: the levels from lowest to highest, e.g. ["calm", "annoyed", "furious"].
    #[serde(default)]
    pub levels: Vec<String>,
    /// choice and multi: add a real option `none` ("none of the other options
    /// fits"), read and scored like the others; a multi selects it alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub none_of_these: Option<bool>,
    /// multi only: fewest options to select (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u32>,
    /// multi only: most options to select (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
    /// multi only: probability in (0, 1) at or above which an option is
    /// selected (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// `criteria` is declared as an object (the common case) so the schema stays
/// a single plain type; a score's list of levels is accepted as well.
fn criteria_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "default": {},
        "description": "noul: {\"true\": \"when yes\", \"false\": \"when no\"} (optional). choice and multi: option name -> description (or give `options`). score: use `levels`."
    })
}

/// `state` is advertised as a string: the plain schema MCP clients take cannot
/// say "string or object", and a JSON object of fields is accepted anyway.
fn state_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "description": "With `questions`: the text the decision is about (a ticket, a message, a log line, …); a JSON object of fields is accepted too."
    })
}

/// One decision request (see the module docs). Every field is optional on
/// the wire; [`crate::prepare`] applies the defaults and the rules between
/// fields (`template` or `questions`, not both; `state` with `questions`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
pub struct DecisionRequest {
    /// Policy template id (e.g. `support_triage`; the templates list names
    /// them). Default: the route's template, else `support_triage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Template variables, e.g. {"ticket": "I was charged twice"}; the
    /// template's own names, or the aliases `context` (for `document`),
    /// `text` (for `user_input`) and `input_text`/`ticket`/`document`/`text`/
    /// `context` (for `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<Map<String, Value>>,
    /// Ad-hoc questions (instead of a template), e.g. [{"id": "urgent",
    /// "type": "noul", "instructions": "Does it need someone today?"}]; the
    /// `/v1/systemone` map by id and every type alias are accepted too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<CustomQuestion>>")]
    #[schema(value_type = Option<Vec<CustomQuestion>>)]
    pub questions: Option<Value>,
    /// With `questions`: the text or JSON object the decision is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "state_schema")]
    pub state: Option<Value>,
    /// Images the decision is about, each a `data:image/...;base64,…` URL
    /// (png, jpeg, webp or gif; at most 16). They go ahead of the text; only
    /// a vision backend (vLLM) reads them, and the embedded model refuses them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<String>>")]
    #[schema(value_type = Option<Vec<String>>)]
    pub images: Option<Value>,
    /// With `questions`: instructions that apply to every question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// With `questions`: rules between answers, e.g. [{"if": {"team":
    /// "security"}, "then": {"urgent": "yes"}}, {"if": {"severity": "low"},
    /// "not": {"page_oncall": "yes"}}]. They are applied to the joint
    /// distribution of the questions they tie; each answer they change is
    /// marked `constrained` with the probability mass removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<Map<String, Value>>>")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub rules: Option<Value>,
    /// Backend to decide with; none means the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// How to read: seed, samples, layout, isolate.
    #[serde(flatten)]
    pub read: ReadOptions,
    /// What to do after the read.
    #[serde(flatten)]
    pub after: AfterOptions,
    /// Decide even when a variable the template reads with no default is not
    /// given (default false): the policy then holds a placeholder (`<no
    /// value>` or null) where the variable would go. Without it such a
    /// request is refused, naming the variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_missing_vars: Option<bool>,
    /// A policy already validated by a surface that reads the structured
    /// server's protocol (the chat route's system message, the
    /// `/v1/systemone` questions), instead of a template or ad-hoc
    /// questions. Not a wire key: no surface reads it from JSON, and it is
    /// neither advertised nor written. See [`InlinePolicy`].
    #[serde(skip)]
    pub inline: Option<InlinePolicy>,
}

/// A policy given inline, validated by the surface that decoded it, under
/// the structured server's protocol: the surface gives the final `state`
/// (its images already joined and checked in its own order), the policy's
/// own post-read keys are the client's to apply, and the post-read runs
/// only when the request's own keys ask for one
/// ([`crate::Prepared::after_when_asked`]). The request's `template`,
/// `variables`, `questions`, `instructions`, `rules`, `images` and read
/// options are not read beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct InlinePolicy {
    /// The validated policy.
    pub schema: dgem_core::schema::ValidSchema,
    /// Its label in metrics and logs (the policy's name, or a hash of it).
    pub label: String,
}

pub use dgem_core::json::shown;

/// The value of `key`, `None` when absent or `null`.
fn given<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

impl DecisionRequest {
    /// The request's JSON keys, as its derived schema names them (the
    /// post-read keys inlined where [`AfterOptions`] is flattened).
    pub fn keys() -> Vec<String> {
        crate::keys::properties::<Self>()
    }

    /// The first key of `obj` that is not in `allowed`, cut to 64 characters
    /// for a message, with the closest allowed key when one is near.
    pub fn unknown_key(
        obj: &Map<String, Value>,
        allowed: &[String],
    ) -> Option<(String, Option<String>)> {
        let key = obj.keys().find(|k| !allowed.iter().any(|a| a == *k))?;
        let mut cut: String = key.chars().take(64).collect();
        if cut.len() < key.len() {
            cut.push('…');
        }
        let closest = dgem_engine::builtin::closest(key, allowed.iter().map(String::as_str))
            .map(str::to_string);
        Some((cut, closest))
    }

    /// Read a request from the keys of `obj`, checking each value's type.
    /// Unknown keys are not looked at here: each surface refuses them with
    /// its own wording ([`DecisionRequest::unknown_key`]).
    ///
    /// `surface` names where the template ids are listed, for the message
    /// of a `template` that is not a string.
    ///
    /// # Errors
    /// [`ServiceError::Field`] naming the field, what it must be and the
    /// value given (e.g. "`seed` must be an integer. Given: \"x\""). Every
    /// read and post-read value is checked here by its type's parse; what
    /// needs the policy (the question ids of `abstain_below`,
    /// `abstain_above` and `expected_answers`) is checked when the request
    /// is prepared.
    pub fn from_object(obj: &Map<String, Value>, surface: &Surface) -> Result<Self, ServiceError> {
        let string = |key: &str, what: &str| -> Result<Option<String>, ServiceError> {
            match given(obj, key) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(ServiceError::field(
                    key,
                    format!("`{key}` must be {what}. Given: {}", shown(other)),
                )),
            }
        };
        let template = match given(obj, "template") {
            None => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            Some(other) => {
                return Err(ServiceError::field(
                    "template",
                    format!(
                        "`template` must be a template id from {}. Given: {}",
                        surface.templates_from,
                        shown(other)
                    ),
                ))
            }
        };
        let variables = match given(obj, "variables") {
            None => None,
            Some(Value::Object(m)) => Some(m.clone()),
            Some(other) => {
                return Err(ServiceError::field(
                    "variables",
                    format!(
                        "`variables` must be an object of template variables. Given: {}",
                        shown(other)
                    ),
                ))
            }
        };
        let allow_missing_vars = match given(obj, "allow_missing_vars") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(ServiceError::field(
                    "allow_missing_vars",
                    format!(
                        "`allow_missing_vars` must be true or false. Given: {}",
                        shown(other)
                    ),
                ))
            }
        };
        Ok(Self {
            template,
            variables,
            questions: given(obj, "questions").cloned(),
            state: given(obj, "state").cloned(),
            images: given(obj, "images").cloned(),
            instructions: string("instructions", "a string")?,
            // Checked against the questions when the schema is validated.
            rules: given(obj, "rules").cloned(),
            backend: string("backend", "a string")?,
            read: ReadOptions::from_object(obj)?,
            after: AfterOptions::from_object(obj).map_err(ServiceError::from_schema_error)?,
            allow_missing_vars,
            inline: None,
        })
    }

    /// Whether the request asks ad-hoc questions rather than a template (a
    /// `questions` key that is not `null`).
    pub fn is_custom(&self) -> bool {
        self.questions.is_some()
    }

    /// Whether the request gives at least one image (a non-empty `images`
    /// list; each entry is checked in [`crate::prepare()`]). An image may stand
    /// in for the state of a policy that reads images
    /// (`dgem_core::image_state`).
    pub fn gives_images(&self) -> bool {
        gives_images(self.images.as_ref())
    }
}

/// Whether a request's raw `images` value is a non-empty list.
pub fn gives_images(images: Option<&Value>) -> bool {
    matches!(images, Some(Value::Array(items)) if !items.is_empty())
}

/// The two MCP decision tools, each a view of [`DecisionRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// `decide_policy`: a template and its variables.
    Policy,
    /// `decide_custom_questions`: ad-hoc questions and a state.
    Custom,
}

impl ToolKind {
    /// The request keys this tool does not take.
    fn left_out(self) -> &'static [&'static str] {
        match self {
            Self::Policy => &["questions", "state", "instructions", "rules"],
            Self::Custom => &["template", "variables", "allow_missing_vars"],
        }
    }

    /// The request keys this tool requires. `decide_custom_questions` needs
    /// `questions`; `state` may be left out when `images` are given (they are
    /// then the state), which the service checks.
    pub fn required(self) -> &'static [&'static str] {
        match self {
            Self::Policy => &[],
            Self::Custom => &["questions"],
        }
    }

    /// The keys this tool takes, in schema order.
    pub fn keys(self) -> Vec<String> {
        DecisionRequest::keys()
            .into_iter()
            .filter(|k| !self.left_out().contains(&k.as_str()))
            .collect()
    }
}

/// The JSON Schema (draft 2020-12, subschemas inlined) of the request keys
/// `tool` takes: [`DecisionRequest`]'s own schema with the other tool's keys
/// left out and the tool's required keys marked. A caller makes it plain for
/// small-schema clients (no nullable unions) and adds the `backend` enum.
pub fn tool_schema(tool: ToolKind) -> Map<String, Value> {
    let mut obj = crate::keys::schema_of::<DecisionRequest>();
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for k in tool.left_out() {
            props.shift_remove(*k);
        }
        if tool == ToolKind::Policy {
            if let Some(Value::Object(t)) = props.get_mut("template") {
                t.insert("default".into(), Value::from(DEFAULT_TEMPLATE));
            }
        }
        if let Some(Value::Object(t)) = props.get_mut("seed") {
            t.insert("default".into(), Value::from(DEFAULT_SEED));
        }
    }
    let required: Vec<Value> = tool.required().iter().map(|k| Value::from(*k)).collect();
    if required.is_empty() {
        obj.remove("required");
    } else {
        obj.insert("required".into(), Value::Array(required));
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    /// The keys `/api/decide` took before the request was one type are all
    /// still taken (new options may join them), each once.
    #[test]
    fn the_keys_the_studio_api_has_always_taken_are_still_taken() {
        let keys = DecisionRequest::keys();
        for k in [
            "template",
            "variables",
            "questions",
            "state",
            "images",
            "instructions",
            "backend",
            "seed",
            "samples",
            "temperature",
            "abstain_below",
            "abstain_above",
            "cascade_mode",
            "cascade_threshold",
            "cascade_threshold_mode",
            "cascade_model",
            "stage2_prior",
            "expected_answers",
            "suggest_expansions",
            "expansion_entropy",
            "allow_missing_vars",
        ] {
            assert_eq!(keys.iter().filter(|x| *x == k).count(), 1, "{k}: {keys:?}");
        }
        assert_eq!(keys[0], "template", "the list in messages starts with it");
    }

    #[test]
    fn each_tool_takes_its_half_of_the_request() {
        let policy = ToolKind::Policy.keys();
        assert!(policy.contains(&"variables".to_string()));
        assert!(policy.contains(&"cascade_mode".to_string()));
        assert!(!policy.contains(&"questions".to_string()));
        let custom = ToolKind::Custom.keys();
        assert!(custom.contains(&"questions".to_string()));
        assert!(custom.contains(&"temperature".to_string()));
        assert!(!custom.contains(&"template".to_string()));
        let schema = tool_schema(ToolKind::Custom);
        assert_eq!(schema["required"], json!(["questions"]));
        assert_eq!(schema["properties"]["seed"]["default"], json!(42));
        assert_eq!(schema["properties"]["state"]["type"], json!("string"));
    }

    #[test]
    fn values_are_typed_with_errors_naming_the_field() {
        let r = DecisionRequest::from_object(
            &obj(json!({
                "template": " pr_risk ", "seed": 7, "samples": 3, "cascade_mode": "entropy",
                "variables": {"diff": "x"}, "allow_missing_vars": true
            })),
            &Surface::TEST,
        )
        .expect("parses");
        assert_eq!(r.template.as_deref(), Some("pr_risk"));
        assert_eq!(r.read.seed, Some(7));
        assert_eq!(r.read.count(), Some(3));
        assert_eq!(
            r.after.cascade_mode,
            Some(dgem_cascade::options::CascadeSwitch::Entropy)
        );
        assert_eq!(r.allow_missing_vars, Some(true));
        let cases = [
            (
                json!({"seed": "x"}),
                "seed",
                "`seed` must be an integer. Given: \"x\"",
            ),
            (
                json!({"backend": 3}),
                "backend",
                "`backend` must be a string. Given: 3",
            ),
            (
                json!({"instructions": ["a"]}),
                "instructions",
                "`instructions` must be a string. Given: [\"a\"]",
            ),
            (
                json!({"allow_missing_vars": "yes"}),
                "allow_missing_vars",
                "must be true or false",
            ),
        ];
        for (body, want_field, want) in cases {
            match DecisionRequest::from_object(&obj(body), &Surface::TEST) {
                Err(ServiceError::Field { field, message }) => {
                    assert_eq!(field, want_field);
                    assert!(message.contains(want), "{message} !~ {want}");
                }
                other => panic!("{want_field}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_unknown_key_is_found_with_the_closest_known_one() {
        let allowed = DecisionRequest::keys();
        let (key, closest) =
            DecisionRequest::unknown_key(&obj(json!({"seed": 1, "temprature": 2})), &allowed)
                .expect("found");
        assert_eq!(key, "temprature");
        assert_eq!(closest.as_deref(), Some("temperature"));
    }
}
