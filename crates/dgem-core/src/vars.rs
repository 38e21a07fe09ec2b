//! Template variables from `-v key=value` and `-d vars.json` (reference.md §1.2).
//!
//! `-v` values are trimmed; `true`/`false` become booleans; a value that looks
//! like a JSON list or object and parses is that JSON; **everything else stays
//! a string — numbers are not parsed** (so `samples=4` arrives as `"4"`, which
//! the validator accepts). `-d` loads a JSON object first and `-v` overrides it.
//!
//! ```
//! use dgem_core::vars::{merge_vars, parse_var};
//! let (k, v) = parse_var("samples= 4 ")?;
//! assert_eq!((k.as_str(), v), ("samples", serde_json::json!("4")));
//! let vars = merge_vars(None, vec![(k, serde_json::json!("4"))]);
//! assert_eq!(vars["samples"], "4");
//! # Ok::<(), dgem_core::TemplateError>(())
//! ```

use serde_json::{Map, Value};

use crate::error::TemplateError;
pub use crate::suggest::closest_variable;

/// Parse one `-v key=value` argument.
///
/// The argument is split at the first `=`; the key is trimmed and must not be
/// empty.
pub fn parse_var(arg: &str) -> Result<(String, Value), TemplateError> {
    let Some((key, value)) = arg.split_once('=') else {
        return Err(TemplateError::Variable {
            detail: format!("`{arg}` must have the form `key=value` (no `=` found)"),
        });
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(TemplateError::Variable {
            detail: format!("`{arg}` must have the form `key=value` (the key is empty)"),
        });
    }
    Ok((key.to_string(), parse_value(value)))
}

/// Interpret a `-v` value: trimmed; booleans; JSON lists/objects; else a string.
fn parse_value(raw: &str) -> Value {
    let v = raw.trim();
    match v {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let looks_json =
        (v.starts_with('[') && v.ends_with(']')) || (v.starts_with('{') && v.ends_with('}'));
    if looks_json {
        if let Ok(parsed) = serde_json::from_str::<Value>(v) {
            return parsed;
        }
    }
    Value::String(v.to_string())
}

/// Parse the text of a `-d vars.json` file named `source`; it must be a JSON object.
pub fn load_vars_file(text: &str, source: &str) -> Result<Map<String, Value>, TemplateError> {
    // Strict: a key written twice is refused, as on every HTTP route (the
    // last one silently won before; issue 38).
    let value: Value = crate::json::parse_strict(text).map_err(|e| TemplateError::Variable {
        detail: format!("file `{source}` is not valid JSON: {e}"),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(TemplateError::Variable {
            detail: format!(
                "file `{source}` must hold a JSON object of variables; got {}",
                json_kind(&other)
            ),
        }),
    }
}

/// A short description of a JSON value's kind for error messages.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Merge `-d` file variables with `-v` variables; `-v` wins, later `-v` beats earlier.
pub fn merge_vars(
    file: Option<Map<String, Value>>,
    cli: Vec<(String, Value)>,
) -> Map<String, Value> {
    let mut vars = file.unwrap_or_default();
    for (k, v) in cli {
        vars.insert(k, v);
    }
    vars
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn var(arg: &str) -> Value {
        parse_var(arg).expect("valid").1
    }

    #[test]
    fn values_are_typed_like_the_go_client() {
        assert_eq!(var("a=true"), json!(true));
        assert_eq!(var("a= false "), json!(false));
        assert_eq!(var("a=4"), json!("4"));
        assert_eq!(var("a=3.5"), json!("3.5"));
        assert_eq!(var("a=null"), json!("null"));
        assert_eq!(var("a=[\"x\", \"y\"]"), json!(["x", "y"]));
        assert_eq!(var("a={\"k\": 1}"), json!({"k": 1}));
        assert_eq!(var("a=[not json"), json!("[not json"));
        assert_eq!(var("a=[1, 2"), json!("[1, 2"));
        assert_eq!(var("a=x=y"), json!("x=y"));
        assert_eq!(var("a="), json!(""));
        assert_eq!(parse_var(" key =v").expect("valid").0, "key");
    }

    #[test]
    fn malformed_arguments() {
        assert_eq!(
            parse_var("novalue").expect_err("must fail").to_string(),
            "variable `novalue` must have the form `key=value` (no `=` found)"
        );
        assert_eq!(
            parse_var(" =v").expect_err("must fail").to_string(),
            "variable ` =v` must have the form `key=value` (the key is empty)"
        );
    }

    #[test]
    fn vars_file() {
        let m = load_vars_file(r#"{"b": 1, "a": "x"}"#, "v.json").expect("object");
        assert_eq!(m.keys().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(
            load_vars_file("[1]", "v.json")
                .expect_err("must fail")
                .to_string(),
            "variable file `v.json` must hold a JSON object of variables; got a list"
        );
        let err = load_vars_file("{", "v.json")
            .expect_err("must fail")
            .to_string();
        assert!(
            err.starts_with("variable file `v.json` is not valid JSON: EOF"),
            "{err}"
        );
    }

    #[test]
    fn cli_overrides_file() {
        let file = load_vars_file(r#"{"a": 1, "b": 2}"#, "f").expect("object");
        let m = merge_vars(
            Some(file),
            vec![("b".into(), json!("x")), ("c".into(), json!(true))],
        );
        assert_eq!(Value::Object(m), json!({"a": 1, "b": "x", "c": true}));
        assert!(merge_vars(None, vec![]).is_empty());
    }

    proptest! {
        #[test]
        fn plain_values_stay_trimmed_strings(key in "[a-z_]{1,8}", value in "[a-zA-Z0-9 .]{0,12}") {
            let (k, v) = parse_var(&format!("{key}={value}")).expect("valid");
            prop_assert_eq!(k, key);
            let t = value.trim();
            if t == "true" || t == "false" {
                prop_assert!(v.is_boolean());
            } else {
                prop_assert_eq!(v, Value::String(t.to_string()));
            }
        }
    }
}

/// A message refusing the variables of `given` that the template does not read
/// (`declared`, see [`crate::template::template_variables`]), each with the
/// closest declared name when one is near (edit distance ≤ 2, or one name is a
/// prefix of the other); `None` when every variable is read. A misspelled
/// `-v tikcet=…` would otherwise render the template's placeholder text and
/// decide on that.
pub fn unknown_variables<'a>(
    template: &str,
    given: impl IntoIterator<Item = &'a str>,
    declared: &[String],
) -> Option<String> {
    let unknown: Vec<String> = given
        .into_iter()
        .filter(|g| !declared.iter().any(|d| d == g))
        .map(
            |g| match closest_variable(g, declared.iter().map(String::as_str)) {
                Some(d) => format!("`{g}` (did you mean `{d}`?)"),
                None => format!("`{g}`"),
            },
        )
        .collect();
    if unknown.is_empty() {
        return None;
    }
    Some(format!(
        "template `{template}` does not read {}; its variables are [{}]",
        unknown.join(", "),
        declared.join(", ")
    ))
}

/// Template variables that tune the decision rather than carry the state
/// (`samples`); a request that gives only these gives no information.
pub const KNOB_VARIABLES: &[&str] = &["samples"];

/// Why a decision request gives the template no state: the template reads at
/// least one state variable (any `declared` name outside [`KNOB_VARIABLES`])
/// and `given` has none of them with content (a value that is empty by
/// [`crate::state::is_empty`], such as `""`, counts as not given: the template's
/// `default` would replace it). The template would then render its own
/// placeholder text ("No ticket text was provided.") and the model would
/// decide on that. `None` when the template reads no state variable, or one
/// is given. The caller names its own field (`--var`, `variables`).
pub fn missing_state_variables(
    template: &str,
    given: &serde_json::Map<String, serde_json::Value>,
    declared: &[String],
) -> Option<String> {
    let state = unfilled_state_variables(given, declared)?;
    Some(format!(
        "template `{template}` needs its state: give at least one of [{}]; without one it would decide on its placeholder text",
        state.join(", ")
    ))
}

/// The state variables of [`missing_state_variables`] when none of them is
/// given with content (every one of them, then, is unfilled); `None` when
/// the template reads no state variable or one is given.
fn unfilled_state_variables(
    given: &serde_json::Map<String, serde_json::Value>,
    declared: &[String],
) -> Option<Vec<String>> {
    let state = state_variables(declared);
    let unset = unset_state_variables(given, declared);
    (!state.is_empty() && unset.len() == state.len()).then_some(unset)
}

/// The template's state variables (every `declared` name outside
/// [`KNOB_VARIABLES`]) that `given` has no content for (absent, or empty by
/// [`crate::state::is_empty`]), in `declared` order.
pub fn unset_state_variables(
    given: &serde_json::Map<String, serde_json::Value>,
    declared: &[String],
) -> Vec<String> {
    state_variables(declared)
        .into_iter()
        .filter(|v| given.get(v).is_none_or(crate::state::is_empty))
        .collect()
}

fn state_variables(declared: &[String]) -> Vec<String> {
    declared
        .iter()
        .filter(|d| !KNOB_VARIABLES.contains(&d.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod unknown_tests {
    use super::*;

    #[test]
    fn misspelled_variable_is_named_with_a_suggestion() {
        let declared = vec!["ticket".to_owned(), "samples".to_owned()];
        assert_eq!(unknown_variables("t", ["ticket"], &declared), None);
        let msg =
            unknown_variables("support_triage", ["tikcet", "zzz"], &declared).expect("refused");
        assert_eq!(
            msg,
            "template `support_triage` does not read `tikcet` (did you mean `ticket`?), `zzz`; its variables are [ticket, samples]"
        );
    }

    #[test]
    fn a_request_with_no_state_variable_is_refused() {
        let declared = vec!["samples".to_string(), "ticket".to_string()];
        let vars = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        let msg = missing_state_variables(
            "support_triage",
            &vars(serde_json::json!({"samples": 2})),
            &declared,
        )
        .expect("only a knob is given");
        assert!(msg.contains("[ticket]"), "{msg}");
        // An empty or blank value is no state either (the template's default
        // text would stand in for it).
        for blank in ["", "   ", "\u{200B}"] {
            let given = vars(serde_json::json!({"ticket": blank}));
            assert!(missing_state_variables("support_triage", &given, &declared).is_some());
        }
        assert_eq!(
            missing_state_variables(
                "support_triage",
                &vars(serde_json::json!({"ticket": "refund"})),
                &declared
            ),
            None
        );
        assert_eq!(
            missing_state_variables("plain", &serde_json::Map::new(), &["samples".to_string()]),
            None
        );
    }

    #[test]
    fn vars_file_with_a_duplicate_key_is_refused() {
        let err = load_vars_file(r#"{"ticket": "a", "ticket": "b"}"#, "v.json")
            .expect_err("duplicate key")
            .to_string();
        assert!(
            err.contains("file `v.json` is not valid JSON")
                && err.contains("duplicate key `ticket`"),
            "{err}"
        );
    }
}
