//! Refusing placeholders: a decision must not be made on a policy that holds
//! Go's `<no value>` (or `null`) where a variable the caller did not give
//! would have gone.
//!
//! # How a placeholder is found, exactly
//!
//! Reading the template text cannot tell `{{ .x | toJson }}` (a placeholder)
//! from `{{ default "…" .x }}`, `{{ .x | default "…" }}`, `{{ if .x }}…{{ end }}`
//! or `{{ with .x }}…{{ end }}` (no placeholder) once pipelines, `with`,
//! `range` and sub-templates mix, so the template is *executed* instead, and
//! what reaches the output decides. The unset variables
//! ([`unset_variables`]: read by the template, not given or given as `null`)
//! are left absent, as in the real render. An execution has a **fault** when
//!
//! 1. one of our helpers other than `default` (`toJson`, `toPrettyJson`,
//!    `printf`, `indent`, `upper`, `lower`, `trim`) was handed a missing value:
//!    `toJson` would write `null`, `printf` `<nil>`, and the others fail
//!    (a flag recorded per execution, see `NoValueSeen`); or
//! 2. its output holds more `<no value>` than the *baseline*: the same
//!    execution with every unset variable set to a neutral non-empty
//!    placeholder. The baseline keeps `<no value>` written in the template's
//!    own text from counting, and given values are probed with any
//!    `<no value>` in their text rewritten, so a caller's text is never taken
//!    for a placeholder.
//!
//! To name the variable at fault, the template is executed once more per
//! unset variable with only that one absent and the other unset ones set to
//! the placeholder. When no variable faults alone (`{{ or .a .b }}` writes
//! `<no value>` only when both are missing), every unset variable is named.
//!
//! Cost: the template is parsed once; when every variable it reads is given,
//! it is executed once, as [`super::render`] does. Otherwise two more
//! executions, plus one per unset variable when there is a fault.
//!
//! Not seen: a Go builtin that transforms the missing value before it is
//! written (`html .x` writes `&lt;no value&gt;`, `len .x` fails). The shipped
//! policies use none of them on variables.

use serde_json::{Map, Value as Json};

use super::{execute, parse, template_variables};
use crate::error::{TemplateError, NO_VALUE};

/// What a caller's `<no value>` text is probed as (same length, so `printf`
/// widths and `len` see the same text).
const NO_VALUE_REWRITTEN: &str = "<no_value>";

/// The neutral non-empty value an unset variable takes in the baseline.
const PLACEHOLDER: &str = "placeholder";

/// The variables template `text` reads ([`template_variables`]) that `vars`
/// does not give, or gives as JSON `null` (which renders as a missing value),
/// in order of first use.
pub fn unset_variables(text: &str, vars: &Map<String, Json>) -> Vec<String> {
    template_variables(text)
        .into_iter()
        .filter(|v| vars.get(v).is_none_or(Json::is_null))
        .collect()
}

/// Render template `text` (named `name` in errors) with `vars`, refusing a
/// variable the template reads but `vars` does not give (absent or `null`)
/// when it would leave a placeholder in the policy (see the module docs). A
/// variable the template gives a `default`, or only tests with `if` / `with`,
/// is no fault. With `allow_missing` the placeholder is rendered, as
/// [`super::render`] does.
///
/// # Errors
/// [`TemplateError::Unset`] naming the variables at fault and the variables
/// given (with the nearest given name as a "did you mean"); when rendering
/// fails for another reason, that error ([`TemplateError::Parse`],
/// [`TemplateError::Render`]).
pub fn render_strict(
    name: &str,
    text: &str,
    vars: &Map<String, Json>,
    allow_missing: bool,
) -> Result<String, TemplateError> {
    let tmpl = parse(name, text)?;
    let (rendered, _) = execute(name, &tmpl, vars);
    if allow_missing {
        return rendered;
    }
    let unset = unset_variables(text, vars);
    if unset.is_empty() {
        return rendered;
    }
    let missing = at_fault(name, &tmpl, vars, &unset);
    if missing.is_empty() {
        return rendered;
    }
    Err(TemplateError::Unset {
        name: name.to_string(),
        missing,
        given: vars
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, _)| k.clone())
            .collect(),
    })
}

/// One probing execution: whether a helper was handed a missing value, and
/// how many `<no value>` the output holds (`None` when it failed).
#[derive(Debug, Clone, Copy)]
struct Probe {
    flagged: bool,
    no_values: Option<usize>,
}

impl Probe {
    /// Whether this execution wrote a placeholder the baseline did not.
    fn faults_beyond(self, baseline: Probe) -> bool {
        self.flagged
            || self
                .no_values
                .is_some_and(|n| n > baseline.no_values.unwrap_or(0))
    }
}

/// The unset variables whose absence puts a placeholder in the output (see
/// the module docs); empty when none does.
fn at_fault(
    name: &str,
    tmpl: &gtmpl::Template,
    vars: &Map<String, Json>,
    unset: &[String],
) -> Vec<String> {
    let given: Map<String, Json> = vars
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), rewrite_no_value(v)))
        .collect();
    let probe = |absent: &[&String]| {
        let mut data = given.clone();
        for u in unset.iter().filter(|u| !absent.contains(u)) {
            data.insert(u.clone(), Json::String(PLACEHOLDER.into()));
        }
        let (out, seen) = execute(name, tmpl, &data);
        Probe {
            flagged: seen.0,
            no_values: out.ok().map(|o| o.matches(NO_VALUE).count()),
        }
    };
    let baseline = probe(&[]);
    let all: Vec<&String> = unset.iter().collect();
    if !probe(&all).faults_beyond(baseline) {
        return Vec::new();
    }
    let alone: Vec<String> = unset
        .iter()
        .filter(|u| probe(&[*u]).faults_beyond(baseline))
        .cloned()
        .collect();
    if alone.is_empty() {
        unset.to_vec()
    } else {
        alone
    }
}

/// `v` with every `<no value>` in its text rewritten ([`NO_VALUE_REWRITTEN`]).
fn rewrite_no_value(v: &Json) -> Json {
    match v {
        Json::String(s) if s.contains(NO_VALUE) => {
            Json::String(s.replace(NO_VALUE, NO_VALUE_REWRITTEN))
        }
        Json::Array(a) => Json::Array(a.iter().map(rewrite_no_value).collect()),
        Json::Object(o) => Json::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), rewrite_no_value(x)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars(v: Json) -> Map<String, Json> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn strict(text: &str, v: Json) -> Result<String, TemplateError> {
        render_strict("t", text, &vars(v), false)
    }

    fn missing_of(e: TemplateError) -> Vec<String> {
        match e {
            TemplateError::Unset { missing, .. } => missing,
            other => panic!("not an unset-variable error: {other:?}"),
        }
    }

    #[test]
    fn an_unset_variable_is_an_error_naming_it() {
        let text = r#"{"state": {{ .ticket | toJson }}, "n": {{ default 1 .samples }}}"#;
        let e = strict(text, json!({"samples": 2})).expect_err("ticket is unset");
        assert_eq!(
            e.to_string(),
            "template `t` reads `ticket`, which was not given and has no `default` there, so the policy would be decided on a placeholder (<no value>, or null through toJson); the variables given are [samples]"
        );
        assert_eq!(missing_of(e), ["ticket"]);
        // Printed bare, through printf, or through a string helper: the same.
        for text in [
            "{{ .ticket }}",
            r#"{{ printf "%s" .ticket }}"#,
            "{{ upper .ticket }}",
            "{{ .ticket | toPrettyJson }}",
        ] {
            let e = strict(text, json!({})).expect_err(text);
            assert_eq!(missing_of(e), ["ticket"], "{text}");
        }
        assert_eq!(
            strict(text, json!({"ticket": "refund"})).expect("given"),
            r#"{"state": "refund", "n": 1}"#
        );
    }

    #[test]
    fn a_default_or_a_test_is_not_a_placeholder() {
        for text in [
            r#"{{ default "x" .v | toJson }}"#,
            r#"{{ .v | default "x" | toJson }}"#,
            r#"{{ if .v }}{{ .v | toJson }}{{ end }}"#,
            r#"{{ with .v }}{{ toJson . }}{{ else }}none{{ end }}"#,
            r#"{{ if not .v }}none{{ end }}"#,
        ] {
            let out = strict(text, json!({})).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(
                !out.contains(NO_VALUE) && !out.contains("null"),
                "{text}: {out}"
            );
        }
    }

    #[test]
    fn json_null_counts_as_unset() {
        let e = strict("{{ .ticket | toJson }}", json!({"ticket": null})).expect_err("null");
        assert_eq!(missing_of(e.clone()), ["ticket"]);
        assert!(e.to_string().ends_with("no variables were given"), "{e}");
        assert_eq!(
            unset_variables("{{ .a }}{{ .b }}", &vars(json!({"a": null, "b": ""}))),
            ["a"]
        );
    }

    #[test]
    fn a_near_given_name_is_suggested() {
        let text = "{{ .ticket | toJson }}{{ if .tickets }}{{ end }}";
        let e = strict(text, json!({"tickets": "x"})).expect_err("ticket is unset");
        assert!(
            e.to_string()
                .contains("reads `ticket` (did you misspell it as `tickets`?)"),
            "{e}"
        );
    }

    #[test]
    fn allow_missing_renders_the_placeholder() {
        let out =
            render_strict("t", "[{{ .v }}|{{ toJson .v }}]", &Map::new(), true).expect("allowed");
        assert_eq!(out, "[<no value>|null]");
    }

    #[test]
    fn a_callers_no_value_text_is_not_taken_for_a_placeholder() {
        let text = r#"{{ .text }}{{ if .extra }}{{ .extra }}{{ end }}"#;
        let out = strict(text, json!({"text": "it printed <no value>"})).expect("no fault");
        assert_eq!(out, "it printed <no value>");
        // Nor is the template's own text.
        let out = strict("say <no value>{{ default 1 .n }}", json!({})).expect("no fault");
        assert_eq!(out, "say <no value>1");
    }

    #[test]
    fn variables_that_leave_a_placeholder_only_together_are_all_named() {
        let e = strict("{{ or .a .b }}", json!({})).expect_err("both unset");
        assert_eq!(missing_of(e), ["a", "b"]);
        assert_eq!(strict("{{ or .a .b }}", json!({"b": "B"})).expect("b"), "B");
        // Only the variable that leaves one is named.
        let e = strict("{{ .a }}{{ default 2 .b }}", json!({})).expect_err("a unset");
        assert_eq!(missing_of(e), ["a"]);
    }
}
