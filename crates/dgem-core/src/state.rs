//! The one rule for a state that carries no information.
//!
//! A decision read from an empty state is a reading of the prompt's wording
//! alone: the model would answer with whatever its priors give and the answer
//! would look like any other. So a state with nothing in it is refused on every
//! surface (HTTP, `/api`, MCP, the CLI), before any model call, with an error
//! naming `state`:
//!
//! - `null`, a string that is empty or holds only invisible characters
//!   ([`is_invisible`]: whitespace, control characters, and Unicode format
//!   characters such as U+200B ZERO WIDTH SPACE or U+00AD SOFT HYPHEN);
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

/// Whether `c` shows nothing: whitespace, a control character, or a Unicode
/// format character (general category Cf: soft hyphen, zero-width space and
/// joiners, bidirectional marks and overrides, invisible operators, the byte
/// order mark, tag characters). The ranges are those of the Unicode 15
/// character database for category Cf.
pub fn is_invisible(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0001}'
                | '\u{E0020}'..='\u{E007F}'
        )
}

/// Whether `state` holds nothing to decide on (see the module docs).
pub fn is_empty(state: &Value) -> bool {
    match state {
        Value::Null => true,
        Value::String(s) => {
            let t = s.trim();
            t.chars().all(is_invisible)
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

#[cfg(test)]
mod invisible_tests {
    use super::*;
    use serde_json::json;

    /// Regression (issue 12, bad-input suite): a state of one zero-width space
    /// was decided on as if it were text.
    #[test]
    fn a_state_of_invisible_characters_is_empty() {
        for s in ["\u{200B}", " \u{00AD} ", "\u{202E}\u{2063}", "\u{FEFF}"] {
            assert!(is_empty(&json!(s)), "{s:?}");
            assert!(is_empty(&json!({"ticket": s})), "{s:?}");
        }
        assert!(!is_empty(&json!("a\u{200B}")));
        assert!(!is_empty(&json!("é")));
    }
}
