//! Structured output as a decision: an OpenAI `response_format` of type
//! `json_schema` whose properties are booleans, enums or bounded integers is
//! read as one decision, one question per property.
//!
//! A client that asks a chat model for `{"urgent": true, "team": "billing"}`
//! in a JSON Schema usually gets one sampled token path and no idea how sure
//! the model was. Here every property becomes a slot on the canvas, every
//! allowed value of every property gets a probability from one forward pass,
//! and the reply's `content` is a JSON object in the schema's shape holding
//! the most probable value of each property (what `client.beta.chat.
//! completions.parse` turns into the caller's model). The full decision
//! envelope (`answers` with `probabilities`, `entropy`, `normalized_entropy`,
//! and `diagnostics`) rides beside it in the top-level `dgem` extension field.
//!
//! The mapping, property by property (the property name is the question id,
//! its `description` — else its `title` — the question text):
//!
//! | JSON Schema | question | value in the reply |
//! | :-- | :-- | :-- |
//! | `{"type": "boolean"}` | `boolean` | `true` / `false` |
//! | `{"enum": [...]}` (strings, numbers or booleans; 2 to 300 values) | `choice` over the values | the chosen enum value, with its JSON type |
//! | `{"type": "integer", "minimum": a, "maximum": b}` (2 to 26 values) | `score` with levels `a`..=`b` | the most probable level, an integer |
//! | `{"type": "array", "items": {"enum": [...]}}` (2 to 26 values; `minItems` / `maxItems` optional) | `multi` over the values | the selected values, a list |
//!
//! A `$ref` to `#/$defs/NAME` (or `#/definitions/NAME`), and an `allOf` of
//! exactly one schema (how Pydantic writes an `Enum` field with a
//! description), are followed. Everything else — free text, numbers without
//! an enum, nested objects, arrays of anything but enum values, nullable
//! (`anyOf` with `null`) fields — is
//! not a decision and is refused with a 400 naming the property's path, the
//! kinds allowed and what was given.
//!
//! The messages: every `system`/`developer` message is the rubric (the
//! schema's `instructions`, followed by the JSON Schema's own
//! `description`); the `user`/`assistant` messages are the state. One user
//! message is the state as it is (text, or its image parts); several are
//! written one per paragraph as `role: text`.

use dgem_core::envelope::AnswerOut;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use indexmap::IndexMap;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ErrorKind};

mod property;

use property::{integer_bound, kind_of, resolve, Kind};

/// Path of the JSON Schema inside a chat request, the prefix of every
/// error's `param` from this module.
pub const SCHEMA_PATH: &str = "response_format.json_schema.schema";

/// Most integer levels a score property may have (a score has at most 26
/// levels: one slot, one letter or digit per level).
pub const MAX_INTEGER_LEVELS: i64 = 26;

/// One property of the requested object, in the schema's order.
#[derive(Debug, Clone, PartialEq)]
struct Property {
    name: String,
    kind: Kind,
}

/// The shape of the reply a `json_schema` response format asks for, kept to
/// write the chosen values back in that shape
/// ([`StructuredOutput::reply_object`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StructuredOutput {
    properties: Vec<Property>,
}

/// A chat request in structured-output form, after validation.
#[derive(Debug, Clone)]
pub struct StructuredRequest {
    /// The schema built from the JSON Schema (one question per property).
    pub schema: ValidSchema,
    /// The state: the user text, or its image parts.
    pub state: Value,
    /// How to write the answers back as the requested object.
    pub output: StructuredOutput,
}

fn invalid(message: impl Into<String>, param: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::InvalidRequest, message).with_param(param)
}

/// Whether `response_format` asks for a JSON Schema (`{"type":
/// "json_schema", ...}`); `None` and `{"type": "text"}` (OpenAI's default)
/// ask for nothing.
///
/// # Errors
/// 400 naming `response_format.type` for `json_object` (no schema to decide
/// on) or any other type, and `response_format` when it is not an object.
pub fn wants_schema(response_format: Option<&Value>) -> Result<bool, ApiError> {
    let rf = match response_format {
        None | Some(Value::Null) => return Ok(false),
        Some(Value::Object(o)) => o,
        Some(other) => {
            return Err(invalid(
                format!("`response_format` must be an object such as {{\"type\": \"json_schema\", \"json_schema\": {{\"name\": ..., \"schema\": {{...}}}}}}. Given: {other}"),
                "response_format",
            ))
        }
    };
    match rf.get("type").and_then(Value::as_str) {
        Some("json_schema") => Ok(true),
        Some("text") => Ok(false),
        Some("json_object") => Err(invalid(
            "`response_format.type` `json_object` has no schema to decide on: send `{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {...}}}` whose properties are booleans, enums or bounded integers",
            "response_format.type",
        )),
        _ => Err(invalid(
            format!(
                "`response_format.type` must be one of [json_schema, text]. Given: {}",
                rf.get("type").map_or_else(|| "nothing".to_string(), Value::to_string)
            ),
            "response_format.type",
        )),
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The dgem schema for a JSON Schema, plus the reply shape.
fn schema_of(
    json_schema: &Value,
    instructions: &[String],
) -> Result<(Value, StructuredOutput), ApiError> {
    let path = SCHEMA_PATH;
    let root = json_schema.get("schema").ok_or_else(|| {
        invalid(
            "`response_format.json_schema.schema` is missing: it holds the JSON Schema of the reply object",
            path,
        )
    })?;
    let obj = resolve(root, root, path)?;
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        return Err(invalid(
            format!("{path}: the reply must be an object (`\"type\": \"object\"` with `properties`). Given type: {}", obj.get("type").unwrap_or(&Value::Null)),
            format!("{path}.type"),
        ));
    }
    let props = match obj.get("properties") {
        Some(Value::Object(p)) if !p.is_empty() => p,
        _ => {
            return Err(invalid(
                format!("{path}.properties must be a non-empty object: one property per question"),
                format!("{path}.properties"),
            ))
        }
    };
    let mut properties = Vec::with_capacity(props.len());
    let mut questions = Vec::with_capacity(props.len());
    for (name, raw) in props {
        let ppath = format!("{path}.properties.{name}");
        let p = resolve(root, raw, &ppath)?;
        let kind = kind_of(root, p, &ppath)?;
        // The property's own description wins over its referenced type's.
        let text = [raw, p]
            .iter()
            .find_map(|s| s.get("description").or_else(|| s.get("title")))
            .map(text_of)
            .unwrap_or_default();
        let mut q = Map::new();
        q.insert("id".into(), json!(name));
        q.insert("instructions".into(), json!(text));
        match &kind {
            Kind::Boolean => {
                q.insert("type".into(), json!("boolean"));
            }
            Kind::Enum(values) => {
                q.insert("type".into(), json!("choice"));
                q.insert(
                    "options".into(),
                    json!(values.iter().map(text_of).collect::<Vec<_>>()),
                );
            }
            Kind::Multi { values, min, max } => {
                q.insert("type".into(), json!("multi"));
                q.insert(
                    "options".into(),
                    json!(values.iter().map(text_of).collect::<Vec<_>>()),
                );
                // Out-of-range counts are refused by the schema's own rules,
                // under the property's `minItems` / `maxItems`.
                if let Some(n) = min {
                    q.insert("min".into(), json!(n));
                }
                if let Some(n) = max {
                    q.insert("max".into(), json!(n));
                }
            }
            Kind::Integer { min } => {
                let hi = integer_bound(p, "maximum", &ppath)?
                    .or(integer_bound(p, "exclusiveMaximum", &ppath)?.map(|m| m - 1))
                    .unwrap_or(*min);
                q.insert("type".into(), json!("score"));
                q.insert(
                    "levels".into(),
                    json!((*min..=hi).map(|l| l.to_string()).collect::<Vec<_>>()),
                );
            }
        }
        questions.push(Value::Object(q));
        properties.push(Property {
            name: name.clone(),
            kind,
        });
    }
    let mut rubric: Vec<String> = instructions.to_vec();
    if let Some(d) = obj
        .get("description")
        .or_else(|| json_schema.get("description"))
    {
        rubric.push(text_of(d));
    }
    let mut schema = Map::new();
    if !rubric.is_empty() {
        schema.insert("instructions".into(), json!(rubric.join("\n\n")));
    }
    schema.insert("questions".into(), Value::Array(questions));
    Ok((Value::Object(schema), StructuredOutput { properties }))
}

/// Text of a message: a string content as is, or every text part's `text`.
fn message_text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The rubric and the state from the messages (see the module doc).
fn messages_of(messages: &[Value]) -> Result<(Vec<String>, Value), ApiError> {
    let mut rubric = Vec::new();
    let mut turns: Vec<(usize, &str, &Value)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "system" | "developer" => {
                if m.get("content").is_some_and(dgem_core::images::has_images) {
                    return Err(invalid(
                        format!("messages[{i}].content: a {role} message is the rubric, text only; send image parts in a user message"),
                        format!("messages[{i}].content"),
                    ));
                }
                let t = message_text(m).trim().to_string();
                if !t.is_empty() {
                    rubric.push(t);
                }
            }
            "user" | "assistant" => turns.push((i, role, m)),
            other => {
                return Err(invalid(
                    format!("messages[{i}].role must be one of [system, developer, user, assistant]. Given: {other:?}"),
                    format!("messages[{i}].role"),
                ))
            }
        }
    }
    let state = match turns.as_slice() {
        [] => {
            return Err(invalid(
                "messages: a structured-output decision needs a user message (what the schema's questions are about)",
                "messages",
            ))
        }
        [(_, "user", m)] => match m.get("content") {
            Some(content @ Value::Array(_)) if dgem_core::images::has_images(content) => {
                content.clone()
            }
            _ => Value::String(message_text(m).trim().to_string()),
        },
        many => {
            let mut text = Vec::with_capacity(many.len());
            for (i, role, m) in many {
                if m.get("content").is_some_and(dgem_core::images::has_images) {
                    return Err(invalid(
                        format!("messages[{i}].content: images are read from a conversation of one user message only"),
                        format!("messages[{i}].content"),
                    ));
                }
                text.push(format!("{role}: {}", message_text(m).trim()));
            }
            Value::String(text.join("\n\n"))
        }
    };
    if let Err(e) = dgem_core::state::check_informative(&state) {
        return Err(invalid(e.message, "messages"));
    }
    Ok((rubric, state))
}

/// Rewrite a schema error's field (`questions[2].options[1]`) as the path
/// in the request (`response_format.json_schema.schema.properties.team.enum[1]`).
fn request_path(field: &str, output: &StructuredOutput) -> String {
    let Some(rest) = field.strip_prefix("questions[") else {
        return if field == "questions" {
            format!("{SCHEMA_PATH}.properties")
        } else {
            SCHEMA_PATH.to_string()
        };
    };
    let Some((index, tail)) = rest.split_once(']') else {
        return format!("{SCHEMA_PATH}.properties");
    };
    let name = index
        .parse::<usize>()
        .ok()
        .and_then(|i| output.properties.get(i))
        .map_or("?", |p| p.name.as_str());
    let multi = output
        .properties
        .iter()
        .any(|p| p.name == name && matches!(p.kind, Kind::Multi { .. }));
    let tail = if multi {
        match tail {
            ".min" => ".minItems".to_string(),
            ".max" => ".maxItems".to_string(),
            t => t.replacen(".options", ".items.enum", 1),
        }
    } else {
        tail.replacen(".options", ".enum", 1)
    };
    let tail = if tail == ".id" { String::new() } else { tail };
    format!("{SCHEMA_PATH}.properties.{name}{tail}")
}

/// Read a structured-output chat request: the questions from
/// `response_format.json_schema.schema`, the rubric and state from
/// `messages`.
///
/// # Errors
/// 400 `invalid_request_error` naming the property (or message) at fault.
pub fn parse(req: &Value, defaults: &SchemaDefaults) -> Result<StructuredRequest, ApiError> {
    let json_schema = req
        .get("response_format")
        .and_then(|rf| rf.get("json_schema"))
        .filter(|j| j.is_object())
        .ok_or_else(|| {
            invalid(
                "`response_format.json_schema` must be an object {\"name\": ..., \"schema\": {...}}",
                "response_format.json_schema",
            )
        })?;
    let messages = req
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| invalid("`messages` must be a non-empty list", "messages"))?;
    let (rubric, state) = messages_of(messages)?;
    let (raw, output) = schema_of(json_schema, &rubric)?;
    let schema = ValidSchema::from_value(&raw, defaults).map_err(|e| {
        let param = request_path(&e.field, &output);
        let message = e.message.replacen(&e.field, &param, 1);
        invalid(message, param)
    })?;
    Ok(StructuredRequest {
        schema,
        state,
        output,
    })
}

impl StructuredOutput {
    /// The reply object: each property's most probable value, in the
    /// schema's order (`null` for an answer withheld by abstention, skipped
    /// or missing), written from the typed `answers` (the decision's, one
    /// per question id) rather than read back out of the envelope's JSON.
    pub fn reply_object(&self, answers: &IndexMap<String, Option<AnswerOut>>) -> Value {
        let out: Map<String, Value> = self
            .properties
            .iter()
            .map(|p| {
                let value = match answers.get(&p.name).and_then(Option::as_ref) {
                    Some(a) if a.abstained.is_none() => value_of(&p.kind, a),
                    _ => Value::Null,
                };
                (p.name.clone(), value)
            })
            .collect();
        Value::Object(out)
    }
}

/// The reply value of answer `a` to a property of kind `kind`: the answer's
/// name (after any Stage-2 write-back) as the property's JSON type.
fn value_of(kind: &Kind, a: &AnswerOut) -> Value {
    let name = a.answer_name();
    match kind {
        // A boolean's alternatives are always `yes` / `no`.
        Kind::Boolean => match name {
            "yes" => json!(true),
            "no" => json!(false),
            _ => Value::Null,
        },
        Kind::Enum(values) => values
            .iter()
            .find(|v| text_of(v) == name)
            .cloned()
            .unwrap_or(Value::Null),
        Kind::Integer { .. } => name.parse::<i64>().map_or(Value::Null, |l| json!(l)),
        // The selected values, each with its JSON type (none without the
        // per-option reads a multi answer's selection comes from).
        Kind::Multi { .. } if a.multi.is_none() => Value::Null,
        Kind::Multi { values, .. } => a
            .selected_names()
            .into_iter()
            .filter_map(|c| values.iter().find(|v| text_of(v) == c))
            .cloned()
            .collect::<Vec<_>>()
            .into(),
    }
}

#[cfg(test)]
#[path = "structured_tests.rs"]
mod tests;
