//! Splitting a rendered template into a schema and a state, and schema
//! alias normalization (reference.md §1.1 steps 2–4).
//!
//! Two JSON shapes are accepted:
//!
//! * the **envelope** `{"schema": {…}, "state": …}`; a missing or `null` state
//!   becomes the variables map;
//! * the legacy **flat** form: the whole object is the schema, except `input`
//!   and `context` (moved to `state.input` / `state.context`) and `state`
//!   (merged into the state when it is an object, else stored as
//!   `state.input`). The variables are the base of the state.
//!
//! Unlike the Go client, a rendering that is not a JSON object is an error,
//! carrying serde's line and column, rather than being sent verbatim.
//!
//! ```
//! use dgem_core::payload::parse_payload;
//! let p = parse_payload(r#"{"questions": {"ok": {"type": "bool"}}, "input": "hi"}"#, &Default::default())?;
//! assert_eq!(p.schema["questions"][0]["id"], "ok");
//! assert_eq!(p.schema["questions"][0]["type"], "boolean");
//! assert_eq!(p.state["input"], "hi");
//! # Ok::<(), dgem_core::TemplateError>(())
//! ```

use serde_json::{Map, Value};

use crate::error::TemplateError;
use crate::schema::QuestionKind;

/// A rendered policy split into its parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    /// The raw schema after [`normalize_schema`]; validate it with
    /// [`crate::schema::ValidSchema::from_value`].
    pub schema: Value,
    /// The state the decision is about (text, object or image parts).
    pub state: Value,
}

/// Split `rendered` into a [`Payload`]; `vars` are the template variables.
///
/// Errors name the template as `rendered template`; use
/// [`parse_named_payload`] to name the file instead.
pub fn parse_payload(rendered: &str, vars: &Map<String, Value>) -> Result<Payload, TemplateError> {
    parse_named_payload("rendered template", rendered, vars)
}

/// Like [`parse_payload`], with the template `name` used in errors.
pub fn parse_named_payload(
    name: &str,
    rendered: &str,
    vars: &Map<String, Value>,
) -> Result<Payload, TemplateError> {
    // Strict: a key a template writes twice is an error, not "last one wins".
    let value: Value = crate::json::parse_strict(rendered).map_err(|e| TemplateError::Json {
        name: name.to_string(),
        detail: e.message,
    })?;
    let Value::Object(mut obj) = value else {
        return Err(TemplateError::Json {
            name: name.to_string(),
            detail: format!("the rendering must be a JSON object; got {}", kind(&value)),
        });
    };
    if obj.get("schema").is_some_and(|s| !is_empty(s)) {
        let mut schema = obj.shift_remove("schema").unwrap_or(Value::Null);
        normalize_schema(&mut schema);
        let state = match obj.shift_remove("state") {
            Some(s) if !s.is_null() => s,
            _ => Value::Object(vars.clone()),
        };
        return Ok(Payload { schema, state });
    }
    // Legacy flat form: variables are the base of the state.
    let mut state = vars.clone();
    if let Some(input) = obj.shift_remove("input") {
        state.insert("input".into(), input);
    }
    if let Some(context) = obj.shift_remove("context") {
        state.insert("context".into(), context);
    }
    match obj.shift_remove("state") {
        Some(Value::Object(extra)) => state.extend(extra),
        Some(Value::Null) | None => {}
        Some(scalar) => {
            state.insert("input".into(), scalar);
        }
    }
    obj.shift_remove("schema"); // an empty `schema` key is not a question field
    let mut schema = Value::Object(obj);
    normalize_schema(&mut schema);
    Ok(Payload {
        schema,
        state: Value::Object(state),
    })
}

/// `null`, `""`, `{}` and `[]` count as an absent `schema`.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// A short description of a JSON value's kind for error messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Apply the schema aliases of reference.md §1.1 step 3 (and step 4's digit
/// `samples`) in place. Key order is kept everywhere; non-objects are left alone.
pub fn normalize_schema(v: &mut Value) {
    let Value::Object(schema) = v else {
        return;
    };
    if let Some(Value::Object(map)) = schema.get("questions") {
        let list = map
            .iter()
            .map(|(key, q)| {
                let mut q = q.clone();
                if let Value::Object(fields) = &mut q {
                    if !fields.contains_key("id") {
                        fields.insert("id".into(), Value::String(key.clone()));
                    }
                }
                q
            })
            .collect();
        schema.insert("questions".into(), Value::Array(list));
    }
    if let Some(Value::Array(questions)) = schema.get_mut("questions") {
        for q in questions.iter_mut() {
            if let Value::Object(fields) = q {
                normalize_question(fields);
            }
        }
    }
    if let Some(Value::String(s)) = schema.get("samples") {
        let t = s.trim();
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = t.parse::<u64>() {
                schema.insert("samples".into(), Value::from(n));
            }
        }
    }
}

/// Move `from` to `to` when `to` is absent.
fn rename(q: &mut Map<String, Value>, from: &str, to: &str) {
    if !q.contains_key(to) {
        if let Some(v) = q.shift_remove(from) {
            q.insert(to.into(), v);
        }
    }
}

fn normalize_question(q: &mut Map<String, Value>) {
    if let Some(Value::String(t)) = q.get("type") {
        if let Some(kind) = QuestionKind::parse(t) {
            q.insert("type".into(), Value::String(kind.as_str().into()));
        }
    }
    rename(q, "name", "id");
    rename(q, "question", "instructions");
    rename(q, "prompt", "instructions");
    let is_boolean = q.get("type").and_then(Value::as_str) == Some(QuestionKind::Boolean.as_str());
    if !is_boolean {
        // For booleans `criteria` is the {true, false} description pair.
        rename(q, "choices", "options");
        rename(q, "criteria", "options");
    }
    if let Some(Value::Object(opts)) = q.get("options") {
        let list = opts
            .iter()
            .map(|(name, desc)| {
                let mut o = Map::new();
                o.insert("name".into(), Value::String(name.clone()));
                o.insert("description".into(), desc.clone());
                Value::Object(o)
            })
            .collect();
        q.insert("options".into(), Value::Array(list));
    }
    rename(q, "items", "levels");
    let is_score = q.get("type").and_then(Value::as_str) == Some(QuestionKind::Score.as_str());
    if is_score && q.get("levels").is_none_or(Value::is_null) {
        let five = (1..=5).map(|i| Value::String(i.to_string())).collect();
        q.insert("levels".into(), Value::Array(five));
    }
    if let Some(Value::Array(levels)) = q.get_mut("levels") {
        for level in levels.iter_mut() {
            if !level.is_string() {
                *level = Value::String(level.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars() -> Map<String, Value> {
        match json!({"ticket": "t1"}) {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn norm(v: Value) -> Value {
        let mut v = v;
        normalize_schema(&mut v);
        v
    }

    #[test]
    fn envelope_form() {
        let p = parse_payload(
            r#"{"schema": {"questions": []}, "state": {"x": 1}}"#,
            &vars(),
        )
        .expect("ok");
        assert_eq!(p.schema, json!({"questions": []}));
        assert_eq!(p.state, json!({"x": 1}));
        let p =
            parse_payload(r#"{"schema": {"samples": "4"}, "state": null}"#, &vars()).expect("ok");
        assert_eq!(p.schema, json!({"samples": 4}));
        assert_eq!(p.state, json!({"ticket": "t1"}));
    }

    #[test]
    fn flat_form_moves_state_keys() {
        let p = parse_payload(
            r#"{"input": "alert", "context": {"c": 1}, "questions": [], "schema": null}"#,
            &vars(),
        )
        .expect("ok");
        assert_eq!(p.schema, json!({"questions": []}));
        assert_eq!(
            p.state,
            json!({"ticket": "t1", "input": "alert", "context": {"c": 1}})
        );
        let p = parse_payload(
            r#"{"state": {"a": 2, "ticket": "t2"}, "questions": []}"#,
            &vars(),
        )
        .expect("ok");
        assert_eq!(p.state, json!({"ticket": "t2", "a": 2}));
        let p = parse_payload(r#"{"state": "raw text", "questions": []}"#, &vars()).expect("ok");
        assert_eq!(p.state, json!({"ticket": "t1", "input": "raw text"}));
    }

    #[test]
    fn non_json_is_an_error_with_position() {
        let err = parse_payload("{\"a\": \n  oops}", &vars()).expect_err("must fail");
        assert_eq!(
            err.to_string(),
            "rendered template `rendered template` is not valid JSON: expected value at line 2 column 3"
        );
        let err = parse_named_payload("p.json.tmpl", "[1]", &vars()).expect_err("must fail");
        assert_eq!(
            err.to_string(),
            "rendered template `p.json.tmpl` is not valid JSON: the rendering must be a JSON object; got a list"
        );
    }

    #[test]
    fn a_rendered_template_that_repeats_a_key_is_refused() {
        // Regression: the last of two equal keys won silently.
        let e = parse_named_payload(
            "dup",
            r#"{"schema": {"questions": [{"id": "a", "type": "noul", "type": "choice"}]}, "state": "s"}"#,
            &vars(),
        )
        .expect_err("duplicate");
        assert!(
            e.to_string()
                .contains("duplicate key `type` in `schema.questions[0]`"),
            "{e}"
        );
    }

    #[test]
    fn question_aliases() {
        let v = norm(json!({"questions": {
            "b": {"type": "noul", "prompt": "p?", "criteria": {"true": "T", "false": "F"}},
            "a": {"name": "ignored_because_key", "type": "choice", "question": "q?", "choices": ["x", "y"]},
            "s": {"type": "score", "items": [1, 2.5, "three"]},
            "d": {"type": "score"},
            "o": {"id": "own", "type": "choice", "options": {"zeta": "Z", "alpha": "A"}}
        }}));
        assert_eq!(
            v,
            json!({"questions": [
                {"type": "boolean", "id": "b", "instructions": "p?", "criteria": {"true": "T", "false": "F"}},
                {"name": "ignored_because_key", "type": "choice", "id": "a", "instructions": "q?", "options": ["x", "y"]},
                {"type": "score", "id": "s", "levels": ["1", "2.5", "three"]},
                {"type": "score", "id": "d", "levels": ["1", "2", "3", "4", "5"]},
                {"id": "own", "type": "choice", "options": [{"name": "zeta", "description": "Z"}, {"name": "alpha", "description": "A"}]}
            ]})
        );
    }

    #[test]
    fn list_questions_and_criteria_on_choice() {
        let v = norm(json!({"questions": [
            {"name": "n", "type": "bool"},
            {"id": "c", "type": "choice", "criteria": {"p": "P", "q": "Q"}},
            {"id": "k", "type": "choice", "options": ["keep"], "choices": ["drop"]}
        ], "samples": " 12 "}));
        assert_eq!(v["questions"][0], json!({"type": "boolean", "id": "n"}));
        assert_eq!(
            v["questions"][1]["options"],
            json!([{"name": "p", "description": "P"}, {"name": "q", "description": "Q"}])
        );
        assert_eq!(v["questions"][2]["options"], json!(["keep"]));
        assert_eq!(v["samples"], json!(12));
        assert_eq!(norm(json!({"samples": "auto"}))["samples"], "auto");
        assert_eq!(norm(json!("not an object")), json!("not an object"));
    }
}
