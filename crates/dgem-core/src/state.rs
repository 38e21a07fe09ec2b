//! The one rule for a state that carries no information.
//!
//! A decision read from an empty state is a reading of the prompt's wording
//! alone: the model would answer with whatever its priors give and the answer
//! would look like any other. So a state with nothing in it is refused on every
//! surface (HTTP, `/api`, MCP, the CLI), before any model call, with an error
//! naming `state`:
//!
//! - `null`, a string that is empty or only whitespace;
//! - an object or a list with no entries, or whose entries are all themselves
//!   empty by this rule (`{"ticket": ""}`, `[" ", {}]`);
//! - a string that is the JSON text of one of these (`"{}"`, `"null"`,
//!   `"\"  \""`): the OpenAI route carries the state as JSON text in the user
//!   message, so `{}` arrives as the string `"{}"`.
//!
//! Numbers and booleans are information (`{"retries": 0}` is not empty), and so
//! is any content part that is not text (an image).

use serde_json::Value;

use crate::error::SchemaError;

/// Whether `state` holds nothing to decide on (see the module docs).
pub fn is_empty(state: &Value) -> bool {
    match state {
        Value::Null => true,
        Value::String(s) => {
            let t = s.trim();
            t.is_empty()
                || ((t.starts_with(['{', '[', '"']) || t == "null")
                    && serde_json::from_str::<Value>(t).is_ok_and(|v| is_empty(&v)))
        }
        Value::Bool(_) | Value::Number(_) => false,
        Value::Array(items) => items.iter().all(is_empty),
        Value::Object(m) => {
            // A content part `{"type": "text", "text": …}` is as empty as its text;
            // any other typed part (an image) is information.
            match m.get("type").and_then(Value::as_str) {
                Some("text") => m.get("text").is_none_or(is_empty),
                Some(_) => false,
                None => m.values().all(is_empty),
            }
        }
    }
}

/// Refuse a state that holds nothing to decide on.
///
/// # Errors
/// [`SchemaError`] on field `state`, showing what was received.
pub fn check_informative(state: &Value) -> Result<(), SchemaError> {
    if !is_empty(state) {
        return Ok(());
    }
    let mut shown = state.to_string();
    if shown.len() > 60 {
        shown = format!("{}…", &shown[..shown.floor_char_boundary(60)]);
    }
    Err(SchemaError::new(
        "state",
        format!(
            "state: there is nothing to decide on (got {shown}); send the ticket, diff, alert or \
             other input as a non-empty string or an object with at least one non-empty value"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_states_are_refused_naming_state() {
        for s in [
            json!(null),
            json!(""),
            json!("   \n\t"),
            json!({}),
            json!([]),
            json!({"ticket": "", "notes": "  "}),
            json!([" ", {}, {"type": "text", "text": " "}]),
            // The JSON text of an empty state, as the OpenAI route carries it
            // (found by a hostile-input run: `"{}"` was answered with 200).
            json!("{}"),
            json!("[]"),
            json!("null"),
            json!("  {\"ticket\": \"\"}  "),
            json!("\"   \""),
            json!("{\"a\":[{}],\"b\":\" \",\"c\":[[]]}"),
        ] {
            let err = check_informative(&s).expect_err("refused");
            assert_eq!(err.field, "state");
            assert!(
                err.message.contains("nothing to decide on"),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn states_with_content_pass() {
        for s in [
            json!("x"),
            json!({"ticket": "refund"}),
            json!({"retries": 0}),
            json!({"flag": false}),
            json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]),
            json!([{"type": "text", "text": "hi"}]),
            json!("{\"ticket\": \"refund\"}"),
            json!("\"hello\""),
            json!("{not json"),
            json!("0"),
        ] {
            assert!(check_informative(&s).is_ok(), "{s}");
        }
    }
}
