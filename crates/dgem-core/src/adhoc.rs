//! Ad-hoc questions → a raw schema's `questions` list: the one converter behind
//! `/v1/systemone`, MCP `decide_custom_questions`, the gateway's `/api/decide`
//! and the Studio, so every surface accepts the same question forms.
//!
//! Accepted forms (any mix):
//! * `questions` as a map `{id: question}` (the `/v1/systemone` shape, key order
//!   kept) or as a list `[{"id": …, …}]`;
//! * `type`: any name [`QuestionKind::parse`] accepts (`boolean`, `bool`, `noul`,
//!   `choice`, `score`, `multi`);
//! * the text as `instructions`, `question` or `prompt`;
//! * yes/no: optional `criteria` `{"true": …, "false": …}`;
//! * choice: `options` (names or `{name, description}`, or a map name →
//!   description) or `criteria` (a map name → description, or a list of names);
//! * score: `levels`, or a list in `criteria` or `options`, lowest first;
//! * multi: options as for choice, with optional `min`, `max` and `threshold`;
//! * `depends_on`, `ask_if`, `alone`, `none_of_these`, `abstain_below` and
//!   `abstain_above` pass through;
//! * the text and the alternatives are each given once, in keys the type
//!   reads (a second one, or another type's list, is refused);
//! * any other key is ignored, except one that nearly spells a known key
//!   (`instrucions`, `critera`), which is refused naming the key it nearly
//!   spells.
//!
//! The result still goes through [`crate::schema::ValidSchema::from_value`], which
//! checks counts, names and dependencies.
//!
//! ```
//! let qs = serde_json::json!({"urgent": {"type": "noul", "instructions": "Today?"},
//!                             "team": {"type": "choice", "criteria": {"billing": "money"}}});
//! let list = dgem_core::adhoc::adhoc_questions(&qs)?;
//! assert_eq!(list[0]["type"], "boolean");
//! assert_eq!(list[1]["options"][0]["name"], "billing");
//! # Ok::<(), dgem_core::adhoc::AdhocError>(())
//! ```

use serde_json::{json, Map, Value};

pub use crate::error::AdhocError;
use crate::prompt::python_json;
use crate::schema::{QuestionKind, QUESTION_KEYS};

fn err(field: String, message: String) -> AdhocError {
    AdhocError { field, message }
}

use crate::json::shown;

/// Convert ad-hoc questions (see the module docs) into a schema's `questions`.
///
/// # Errors
/// [`AdhocError`] for an empty or non-collection `questions`, a question that is
/// not an object or has no id, an unknown type, or a criteria/options/levels
/// value of the wrong shape for its type.
pub fn adhoc_questions(questions: &Value) -> Result<Vec<Value>, AdhocError> {
    let entries: Vec<(String, String, &Value)> = match questions {
        Value::Object(m) if !m.is_empty() => m
            .iter()
            .map(|(id, q)| (format!("questions.{id}"), id.clone(), q))
            .collect(),
        Value::Array(l) if !l.is_empty() => l
            .iter()
            .enumerate()
            .map(|(i, q)| {
                // Not trimmed: the schema validator refuses a padded id
                // rather than answer it under a key the client never sent.
                let id = q.get("id").and_then(Value::as_str).unwrap_or("");
                (format!("questions[{i}]"), id.to_owned(), q)
            })
            .collect(),
        other => {
            return Err(err(
                "questions".into(),
                format!(
                    "questions: needs a non-empty map of id -> question (or a list of questions with ids). Given: {}",
                    shown(other)
                ),
            ))
        }
    };
    entries
        .into_iter()
        .map(|(field, id, q)| question(&field, &id, q))
        .collect()
}

/// The keys the converter reads itself: the id, the type, the text and the
/// alternatives in each type's forms.
const READ_KEYS: [&str; 9] = [
    "id",
    "type",
    "instructions",
    "question",
    "prompt",
    "criteria",
    "options",
    "choices",
    "levels",
];

/// The first key of `q` that is no known key (one the converter reads, or
/// a policy question's, [`QUESTION_KEYS`]) but nearly spells one
/// ([`crate::suggest::near_miss`], the check of a policy's keys), with the
/// key it nearly spells. Other unknown keys are ignored, as the original
/// server ignores them, but a misspelt known key would drop the question's
/// text, its options or a setting in silence.
fn near_miss(q: &Map<String, Value>) -> Option<(&str, &'static str)> {
    let known: Vec<&'static str> = READ_KEYS
        .iter()
        .chain(QUESTION_KEYS.iter())
        .copied()
        .collect();
    crate::suggest::near_miss(q.keys(), &known)
}

/// The keys an ad-hoc question may give its text in, in the order read.
const TEXT_KEYS: [&str; 3] = ["instructions", "question", "prompt"];

/// The question's text and alternatives are each given once, in keys its
/// type reads: a second text (`question` beside `instructions`), a second
/// list (`criteria` beside `options`) or another type's list (`options` on
/// a yes/no question, `levels` on a choice) would be dropped in silence.
///
/// # Errors
/// [`AdhocError`] at the key that would be dropped, naming the keys the
/// type reads.
fn given_once(
    field: &str,
    id: &str,
    kind: QuestionKind,
    q: &Map<String, Value>,
) -> Result<(), AdhocError> {
    // Absent: missing, `null`, or empty (`[]`, `{}`, `""`: the defaults the
    // request schemas advertise). A yes/no question listed with its fixed
    // answers (`options: ["yes", "no"]`, as the template listing writes it)
    // gives nothing else either.
    let present = |k: &&str| match q.get(*k) {
        None | Some(Value::Null) => false,
        Some(Value::Array(l)) => {
            let fixed = kind == QuestionKind::Boolean && is_yes_no(l);
            !(l.is_empty() || fixed)
        }
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::String(s)) => !s.trim().is_empty(),
        Some(_) => true,
    };
    let texts: Vec<&str> = TEXT_KEYS.iter().copied().filter(present).collect();
    if let [first, second, ..] = texts[..] {
        return Err(err(
            format!("{field}.{second}"),
            format!("question '{id}': give its text once, in `{first}` (or `question` or `prompt`), not also in `{second}`"),
        ));
    }
    let own = crate::kinds::of(kind).adhoc_alternative_keys();
    // Every type's alternative keys, from the types themselves.
    let mut all = QuestionKind::ALL.iter().flat_map(|k| {
        crate::kinds::of(*k)
            .adhoc_alternative_keys()
            .iter()
            .copied()
    });
    if let Some(other) = all.find(|k| present(k) && !own.contains(k)) {
        return Err(err(
            format!("{field}.{other}"),
            format!(
                "question '{id}': a {} question takes its alternatives in {}, not `{other}`",
                kind.as_str(),
                crate::words::joined_or(own, '`')
            ),
        ));
    }
    let lists: Vec<&str> = own.iter().copied().filter(present).collect();
    if let [first, second, ..] = lists[..] {
        return Err(err(
            format!("{field}.{second}"),
            format!(
                "question '{id}': give its alternatives once, in `{first}`, not also in `{second}`"
            ),
        ));
    }
    Ok(())
}

/// Whether `l` is `["yes", "no"]` (in any case), a yes/no question's own
/// alternatives.
fn is_yes_no(l: &[Value]) -> bool {
    let names: Vec<String> = l
        .iter()
        .filter_map(Value::as_str)
        .map(|s| s.trim().to_lowercase())
        .collect();
    names == ["yes", "no"]
}

fn question(field: &str, id: &str, q: &Value) -> Result<Value, AdhocError> {
    let Value::Object(q) = q else {
        return Err(err(
            field.into(),
            format!(
                "question '{id}': must be an object {{type, instructions, criteria}}. Given: {}",
                shown(q)
            ),
        ));
    };
    if id.is_empty() {
        return Err(err(
            format!("{field}.id"),
            format!(
                "{field}: needs a non-empty string `id`. Given: {}",
                shown(q.get("id").unwrap_or(&Value::Null))
            ),
        ));
    }
    // A misspelt key first: `tpye` is a typo, not a missing type.
    if let Some((key, meant)) = near_miss(q) {
        return Err(err(
            format!("{field}.{key}"),
            format!("question '{id}': unknown key `{key}` (did you mean `{meant}`?)"),
        ));
    }
    let kind = match q.get("type") {
        Some(Value::String(t)) => QuestionKind::parse(t.trim()).ok_or_else(|| (t.clone(), false)),
        None | Some(Value::Null) => Err(("None".to_owned(), true)),
        Some(other) => Err((shown(other), false)),
    }
    .map_err(|(t, absent)| {
        // The policy validator's wording, which says when `type` is missing.
        let missing = if absent {
            "`type` is missing; it"
        } else {
            "`type`"
        };
        err(
            format!("{field}.type"),
            format!(
                "question '{id}': unknown type '{t}' ({missing} must be one of {})",
                QuestionKind::accepted_names()
            ),
        )
    })?;
    let mut out = Map::new();
    out.insert("id".into(), json!(id));
    out.insert("type".into(), json!(kind.as_str()));
    // The first text given (an empty one is absent, as in given_once).
    let text = TEXT_KEYS.iter().find_map(|k| {
        q.get(*k)
            .filter(|v| !v.is_null() && v.as_str().is_none_or(|s| !s.trim().is_empty()))
    });
    if let Some(t) = text {
        // A non-string is written the way Python's str() writes it, as the
        // original server does (`{'rubric': 'severity'}`).
        let text = t.as_str().map_or_else(|| python_json(t), str::to_owned);
        out.insert("instructions".into(), json!(text));
    }
    given_once(field, id, kind, q)?;
    let criteria = q.get("criteria").filter(|v| !v.is_null());
    let at = crate::kinds::AdhocAt { id, field };
    crate::kinds::of(kind).adhoc(&at, q, criteria, &mut out)?;
    // A question's own keys, checked when the schema is validated. The
    // abstention floors were dropped here, so an ad-hoc question's
    // `abstain_below` was ignored on /api, MCP and /v1/systemone while the
    // chat route (which reads the schema as written) checked it.
    // A question's own keys the converter does not read itself, passed to
    // the schema as written and checked when it is validated.
    for key in QUESTION_KEYS.into_iter().filter(|k| !READ_KEYS.contains(k)) {
        if let Some(v) = q.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{SchemaDefaults, ValidSchema};

    fn schema(qs: Value) -> ValidSchema {
        let list = adhoc_questions(&qs).expect("converts");
        ValidSchema::from_value(&json!({"questions": list}), &SchemaDefaults::default())
            .expect("valid")
    }

    /// Regression: a question's `abstain_below` / `abstain_above` were
    /// dropped by the converter, so they were neither applied nor checked.
    #[test]
    fn a_question_s_abstention_floors_are_kept_and_checked() {
        let s = schema(json!([{"id": "a", "type": "noul", "abstain_below": 0.9}]));
        assert_eq!(s.after.abstain.rule_for("a").below, Some(0.9));
        let list = adhoc_questions(&json!([{"id": "a", "type": "noul", "abstain_above": "x"}]))
            .expect("converts");
        let e = ValidSchema::from_value(&json!({"questions": list}), &SchemaDefaults::default())
            .expect_err("refused");
        assert!(
            e.field.starts_with("questions[0].abstain_above"),
            "{}",
            e.field
        );
    }

    #[test]
    fn map_and_list_forms_give_the_same_schema() {
        let map = schema(json!({
            "urgent": {"type": "noul", "instructions": "Today?", "criteria": {"true": "now", "false": "later"}},
            "team": {"type": "choice", "criteria": {"billing": "money", "support": "help"}},
            "tone": {"type": "score", "criteria": ["calm", "annoyed", "furious"]}}));
        let list = schema(json!([
            {"id": "urgent", "type": "boolean", "question": "Today?", "criteria": {"true": "now", "false": "later"}},
            {"id": "team", "type": "choice", "options": [{"name": "billing", "description": "money"}, {"name": "support", "description": "help"}]},
            {"id": "tone", "type": "score", "levels": ["calm", "annoyed", "furious"]}]));
        assert_eq!(map, list);
        assert_eq!(
            map.questions[0].alternatives[0].description.as_deref(),
            Some("now")
        );
        let ids: Vec<&str> = map.questions.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["urgent", "team", "tone"], "key order kept");
    }

    #[test]
    fn every_type_alias_is_accepted() {
        for t in ["boolean", "bool", "noul"] {
            let s = schema(json!({"q": {"type": t}}));
            assert_eq!(s.questions[0].kind, QuestionKind::Boolean, "{t}");
        }
        let s = schema(json!({"c": {"type": "choice", "criteria": ["a", "b"]},
                              "s": {"type": "score", "options": ["lo", "hi"]}}));
        assert_eq!(s.questions[0].alternatives.len(), 2);
        assert_eq!(s.questions[1].kind, QuestionKind::Score);
    }

    #[test]
    fn errors_name_the_field_the_allowed_forms_and_the_value() {
        let e = adhoc_questions(&json!({})).expect_err("empty");
        assert_eq!(e.field, "questions");
        assert!(e
            .message
            .starts_with("questions: needs a non-empty map of id -> question"));
        let e = adhoc_questions(&json!({"a": "noul"})).expect_err("not object");
        assert!(
            e.message.starts_with("question 'a': must be an object"),
            "{e}"
        );
        let e = adhoc_questions(&json!({"a": {"type": "maybe"}})).expect_err("type");
        assert_eq!(e.field, "questions.a.type");
        assert_eq!(
            e.message,
            format!(
                "question 'a': unknown type 'maybe' (`type` must be one of {})",
                QuestionKind::accepted_names()
            )
        );
        let e = adhoc_questions(&json!([{"id": "a", "type": "choice"}])).expect_err("options");
        assert_eq!(e.field, "questions[0].criteria");
        assert!(e
            .message
            .contains("choice criteria must map option names to descriptions"));
        let e = adhoc_questions(&json!({"a": {"type": "score", "criteria": {"low": 1}}}))
            .expect_err("levels");
        assert!(e
            .message
            .contains("score criteria must be an ordered list of levels"));
        assert!(e.message.ends_with("Given: {\"low\":1}"), "{e}");
        let e = adhoc_questions(&json!({"a": {"type": "noul", "criteria": ["x"]}})).expect_err("c");
        assert!(e
            .message
            .starts_with("question 'a': noul criteria must be an object"));
        let e = adhoc_questions(&json!([{"type": "noul"}])).expect_err("id");
        assert_eq!(e.field, "questions[0].id");
    }

    /// Regression: a misspelt key of an ad-hoc question (`instrucions`,
    /// `critera`) was dropped in silence, so the question was asked with no
    /// text or refused for a reason that hid the typo (found by a black-box
    /// run of `dgem serve`).
    #[test]
    fn a_misspelt_question_key_is_refused_naming_the_key_it_nearly_spells() {
        let cases = [
            (
                json!({"a": {"type": "noul", "instrucions": "Urgent?"}}),
                "instrucions",
                "instructions",
            ),
            (
                json!({"a": {"type": "choice", "critera": ["x", "y"]}}),
                "critera",
                "criteria",
            ),
            (
                json!({"a": {"type": "choice", "option": ["x", "y"]}}),
                "option",
                "options",
            ),
            (
                json!({"a": {"type": "score", "levles": ["lo", "hi"]}}),
                "levles",
                "levels",
            ),
            (
                json!({"a": {"type": "noul", "abstain_bellow": 0.6}}),
                "abstain_bellow",
                "abstain_below",
            ),
        ];
        for (qs, key, meant) in cases {
            let e = adhoc_questions(&qs).expect_err(key);
            assert_eq!(e.field, format!("questions.a.{key}"));
            assert_eq!(
                e.message,
                format!("question 'a': unknown key `{key}` (did you mean `{meant}`?)")
            );
        }
        // A key that spells nothing known is ignored, as the original server ignores it.
        let s = schema(
            json!({"a": {"type": "noul", "instructions": "Urgent?", "note": "from the triage bot"}}),
        );
        assert_eq!(s.questions[0].instructions, "Urgent?");
    }

    /// Regression: another type's list (`options` on a yes/no question,
    /// `levels` on a choice), a second list (`criteria` beside `options`) or
    /// a second text (`question` beside `instructions`) was dropped in
    /// silence (found by a black-box run of `dgem serve`).
    #[test]
    fn text_and_alternatives_are_given_once_in_keys_the_type_reads() {
        let cases = [
            (
                json!({"type": "noul", "options": ["a", "b"]}),
                "options",
                "question 'a': a boolean question takes its alternatives in `criteria`, not `options`",
            ),
            (
                json!({"type": "choice", "options": ["x", "y"], "levels": ["lo", "hi"]}),
                "levels",
                "question 'a': a choice question takes its alternatives in `options`, `criteria` or `choices`, not `levels`",
            ),
            (
                json!({"type": "choice", "options": ["x", "y"], "criteria": {"z": "w"}}),
                "criteria",
                "question 'a': give its alternatives once, in `options`, not also in `criteria`",
            ),
            (
                json!({"type": "noul", "instructions": "Urgent?", "question": "Late?"}),
                "question",
                "question 'a': give its text once, in `instructions` (or `question` or `prompt`), not also in `question`",
            ),
        ];
        for (q, key, message) in cases {
            let e = adhoc_questions(&json!({"a": q})).expect_err(key);
            assert_eq!(e.field, format!("questions.a.{key}"));
            assert_eq!(e.message, message);
        }
        // A score may give its levels in `options` (the Studio's form); `null`
        // and the empty defaults the request schemas advertise are absent.
        let s = schema(json!({"a": {"type": "score", "options": ["lo", "hi"], "levels": null}}));
        assert_eq!(s.questions[0].alternatives.len(), 2);
        let s = schema(
            json!({"a": {"type": "choice", "options": ["x", "y"], "criteria": {}, "levels": []},
                              "b": {"type": "noul", "options": [], "question": ""}}),
        );
        assert_eq!(s.questions[0].alternatives.len(), 2);
        // A yes/no question copied from the template listing, with its fixed answers.
        let s = schema(json!({"a": {"type": "boolean", "options": ["yes", "no"]}}));
        assert_eq!(s.questions[0].kind, QuestionKind::Boolean);
    }

    /// Regression: a misspelt `tpye` was reported as a missing type named
    /// 'None', with no hint, and a missing type was not said to be missing
    /// (found by a black-box run of `dgem serve`).
    #[test]
    fn a_misspelt_or_missing_type_says_which() {
        let e = adhoc_questions(&json!({"a": {"tpye": "boolean"}})).expect_err("typo");
        assert_eq!(e.field, "questions.a.tpye");
        assert_eq!(
            e.message,
            "question 'a': unknown key `tpye` (did you mean `type`?)"
        );
        let e = adhoc_questions(&json!({"a": {"instructions": "Urgent?"}})).expect_err("missing");
        assert_eq!(e.field, "questions.a.type");
        assert_eq!(
            e.message,
            format!(
                "question 'a': unknown type 'None' (`type` is missing; it must be one of {})",
                QuestionKind::accepted_names()
            )
        );
    }
}
