//! JSON parsing that refuses duplicate object keys.
//!
//! `serde_json` keeps the last of two equal keys without a word, so
//! `{"questions": {"u": {…}, "u": {…}}}` would decide one question where the
//! caller wrote two. No serde option or well-kept crate refuses duplicates
//! inside an untyped [`Value`] tree, so this module has a small visitor that
//! builds the same `Value` as `serde_json::from_str` and fails on the first
//! repeated key, naming it and where it sits.
//!
//! ```
//! let e = dgem_core::json::parse_strict(r#"{"a": {"b": 1, "b": 2}}"#).unwrap_err();
//! assert!(e.to_string().contains("duplicate key `b` in `a`"));
//! assert_eq!(dgem_core::json::parse_strict("[1, {\"x\": 2}]").unwrap()[1]["x"], 2);
//! ```

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why text is not strict JSON: a syntax error, or a duplicate key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StrictJsonError {
    /// What is wrong (the duplicate key and its path, or serde_json's message).
    pub message: String,
    /// The repeated key, when that is the problem.
    pub duplicate: Option<String>,
}

/// Longest JSON text of a received value quoted in a message, in characters.
pub const SHOWN_CHARS: usize = 80;

/// A received value for an error message: compact JSON, cut at
/// [`SHOWN_CHARS`] characters with `…`.
pub fn shown(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= SHOWN_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{cut}…")
}

/// Longest run of characters without whitespace kept whole in an error
/// message; a longer one (a 100 KB value or key quoted in the message) is
/// cut to [`SHOWN_CHARS`] with `…`.
pub const MESSAGE_RUN_CHARS: usize = 200;

/// Longest error message sent back, in characters: room for the longest
/// legitimate one (a choice's 300 option names listed as the allowed
/// values) and no more, so a request cannot make its error body as large as
/// itself.
pub const MESSAGE_CHARS: usize = 8_000;

/// An error message bounded for sending back: every run of non-whitespace
/// characters longer than [`MESSAGE_RUN_CHARS`] cut to [`SHOWN_CHARS`] with
/// `…`, then the whole cut at [`MESSAGE_CHARS`] saying how much was left
/// out. A message within both bounds is returned as it is. Every error
/// writer of a surface passes its messages through this, so a value quoted
/// whole by a check deep in the stack still comes back bounded.
pub fn bounded_message(message: &str) -> String {
    /// Append `word` to `out`, cut when it is longer than the run bound.
    fn flush(word: &mut String, out: &mut String) {
        if word.chars().count() > MESSAGE_RUN_CHARS {
            out.extend(word.chars().take(SHOWN_CHARS));
            out.push('…');
        } else {
            out.push_str(word);
        }
        word.clear();
    }
    let mut out = String::with_capacity(message.len().min(MESSAGE_CHARS));
    let mut word = String::new();
    for c in message.chars() {
        if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    let n = out.chars().count();
    if n > MESSAGE_CHARS {
        let cut: String = out.chars().take(MESSAGE_CHARS).collect();
        return format!("{cut}… ({} more characters)", n - MESSAGE_CHARS);
    }
    out
}

/// `v`, given as request or policy key `field`, read by `T`'s serde
/// implementation, the one parse of that key on every path. The error names
/// where the fault sits: `field` itself, or `field.key` for a bad value
/// inside an object (`temperature.choice`), followed by `T`'s "must be ….
/// Given: …".
///
/// # Errors
/// [`SchemaError`](crate::SchemaError) on that field, the message starting
/// with it in backticks.
pub fn from_value_at<T: serde::de::DeserializeOwned>(
    field: &str,
    v: &Value,
) -> Result<T, crate::SchemaError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let at = if e.path().iter().next().is_none() {
            field.to_string()
        } else {
            format!("{field}.{}", e.path())
        };
        crate::SchemaError::new(at.clone(), format!("`{at}` {}", e.inner()))
    })
}

/// Parse `text` as JSON, refusing any object that repeats a key.
///
/// # Errors
/// [`StrictJsonError`] for invalid JSON or a duplicate key (`duplicate key
/// `u` in `questions``).
pub fn parse_strict(text: &str) -> Result<Value, StrictJsonError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = Strict {
        path: String::new(),
    }
    .deserialize(&mut de)
    .map_err(|e| {
        let message = e.to_string();
        let duplicate = message
            .strip_prefix("duplicate key `")
            .and_then(|r| r.split('`').next())
            .map(str::to_owned);
        StrictJsonError { message, duplicate }
    })?;
    de.end().map_err(|e| StrictJsonError {
        message: e.to_string(),
        duplicate: None,
    })?;
    Ok(v)
}

/// [`parse_strict`] over bytes (UTF-8).
///
/// # Errors
/// As [`parse_strict`], plus invalid UTF-8.
pub fn parse_strict_slice(bytes: &[u8]) -> Result<Value, StrictJsonError> {
    let text = std::str::from_utf8(bytes).map_err(|e| StrictJsonError {
        message: format!("body is not UTF-8: {e}"),
        duplicate: None,
    })?;
    parse_strict(text)
}

struct Strict {
    path: String,
}

impl Strict {
    fn child(&self, key: &str) -> Strict {
        Strict {
            path: if self.path.is_empty() || key.starts_with('[') {
                format!("{}{key}", self.path)
            } else {
                format!("{}.{key}", self.path)
            },
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        let mut i = 0usize;
        while let Some(v) = seq.next_element_seed(self.child(&format!("[{i}]")))? {
            out.push(v);
            i += 1;
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let place = if self.path.is_empty() {
                    "the top-level object".to_owned()
                } else {
                    format!("`{}`", self.path)
                };
                return Err(de::Error::custom(format!(
                    "duplicate key `{key}` in {place}: every key of an object must be unique"
                )));
            }
            let v = map.next_value_seed(self.child(&key))?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a 100 KB value (or key) quoted in an error message came
    /// back whole in the error body, on every route (found by a black-box
    /// run of `dgem serve`).
    #[test]
    fn an_error_message_quoting_a_huge_value_is_bounded() {
        let huge = "x".repeat(100_000);
        let m = bounded_message(&format!("`seed` must be an integer. Given: \"{huge}\""));
        assert_eq!(
            m,
            format!(
                "`seed` must be an integer. Given: \"{}…",
                "x".repeat(SHOWN_CHARS - 1)
            )
        );
        // Many short words are cut at the message bound, saying how much.
        let words = "ab ".repeat(5_000);
        let m = bounded_message(&words);
        assert!(
            m.ends_with("… (7000 more characters)"),
            "{}",
            &m[m.len() - 40..]
        );
        assert_eq!(
            m.chars().count(),
            MESSAGE_CHARS + "… (7000 more characters)".chars().count()
        );
        // A message within the bounds is unchanged, a 200-character run included.
        let ok = format!(
            "must be one of [a, b]. Given: {}",
            "y".repeat(MESSAGE_RUN_CHARS)
        );
        assert_eq!(bounded_message(&ok), ok);
    }

    #[test]
    fn duplicate_question_ids_are_refused_naming_key_and_path() {
        let e = parse_strict(r#"{"questions": {"u": {"type": "noul"}, "u": {"type": "noul"}}}"#)
            .expect_err("duplicate");
        assert_eq!(e.duplicate.as_deref(), Some("u"));
        assert!(
            e.message.starts_with("duplicate key `u` in `questions`"),
            "{e}"
        );
        let top = parse_strict(r#"{"a": 1, "a": 2}"#).expect_err("duplicate");
        assert!(top.message.contains("in the top-level object"), "{top}");
        let deep = parse_strict(r#"{"l": [{"x": 1}, {"x": 1, "x": 2}]}"#).expect_err("dup");
        assert!(deep.message.contains("in `l[1]`"), "{deep}");
    }

    #[test]
    fn same_value_as_serde_json_otherwise() {
        let text = r#"{"b": [1, 2.5, -3, "s", null, true], "a": {"z": {}, "y": []}}"#;
        let want: Value = serde_json::from_str(text).expect("json");
        assert_eq!(parse_strict(text).expect("strict"), want);
        let parsed = parse_strict(text).expect("strict");
        let keys: Vec<&String> = parsed.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["b", "a"], "key order kept");
        assert!(parse_strict("{oops").is_err());
        assert!(parse_strict("{} trailing").is_err());
        assert_eq!(
            parse_strict_slice(b"[1]").expect("ok"),
            serde_json::json!([1])
        );
    }
}
