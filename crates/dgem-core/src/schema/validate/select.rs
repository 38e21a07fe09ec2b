//! The fields of `choice` and `multi` questions beyond their options: a "none
//! of these" option (`none_of_these`, or an option so named) and a `multi`
//! question's selection rule (`min`, `max`, `threshold`).

use serde_json::{Map, Value};

use super::text::shown;
use crate::error::SchemaError;
use crate::schema::{
    Alternative, Question, QuestionKind, Selection, DEFAULT_SELECT_THRESHOLD, MAX_QUESTIONS,
    NONE_OPTION_NAMES,
};

/// Schema keys whose near miss is refused. Unknown keys of a policy are
/// ignored (as the original server ignores them), but a misspelt `rules`
/// would drop every rule in silence.
pub(super) const NEAR_MISS_SCHEMA_KEYS: [&str; 1] = ["rules"];

/// Description given to the option `none_of_these: true` adds.
pub(super) const NONE_DESCRIPTION: &str = "none of the other options applies";

/// Whether `name` names a "none of these" option ([`NONE_OPTION_NAMES`],
/// ignoring case and surrounding whitespace).
pub(crate) fn is_none_name(name: &str) -> bool {
    let n = name.trim().to_lowercase();
    NONE_OPTION_NAMES.contains(&n.as_str())
}

/// The index of the question's "none of these" option, after adding it when
/// `none_of_these: true` asks for one and no option is so named; an option so
/// named is the "none" option unless `none_of_these: false` says it is an
/// ordinary one. Only `choice` and `multi` questions may set `none_of_these`.
///
/// # Errors
/// [`SchemaError`] at `questions[i].none_of_these` when it is not a boolean,
/// or is set on another type.
pub(super) fn none_option(
    kind: QuestionKind,
    q: &Map<String, Value>,
    alternatives: &mut Vec<Alternative>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<usize>, SchemaError> {
    let asked = match q.get("none_of_these") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            let msg = format!(
                "question {name}: none_of_these must be true or false (got {})",
                shown(other)
            );
            return Err(SchemaError::new(at(".none_of_these"), msg));
        }
    };
    let has_options = matches!(kind, QuestionKind::Choice | QuestionKind::Multi);
    if asked == Some(true) && !has_options {
        let msg = format!(
            "question {name}: none_of_these is for choice and multi questions (this one is {})",
            kind.as_str()
        );
        return Err(SchemaError::new(at(".none_of_these"), msg));
    }
    if !has_options {
        return Ok(None);
    }
    // `none_of_these: false` keeps an option named `none` an ordinary option.
    if asked == Some(false) {
        return Ok(None);
    }
    if let Some(i) = alternatives.iter().position(|a| is_none_name(&a.name)) {
        return Ok(Some(i));
    }
    if asked.is_none() || alternatives.is_empty() {
        return Ok(None);
    }
    alternatives.push(Alternative {
        name: NONE_OPTION_NAMES[0].to_string(),
        description: Some(NONE_DESCRIPTION.to_string()),
    });
    Ok(Some(alternatives.len() - 1))
}

/// A `multi` question's selection rule: `min` and `max` selections (whole
/// numbers, `0 ≤ min ≤ max ≤` the options that can be selected together:
/// all but an exclusive `none`, or 1 when only `none` would be left) and
/// `threshold` in (0, 1). Other types may not set these fields.
///
/// # Errors
/// [`SchemaError`] naming the field, what it allows and the value given.
pub(super) fn selection(
    kind: QuestionKind,
    q: &Map<String, Value>,
    alternatives: &[Alternative],
    none_option: Option<usize>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<Selection>, SchemaError> {
    if kind != QuestionKind::Multi {
        if let Some(field) = ["min", "max", "threshold"]
            .into_iter()
            .find(|f| q.get(*f).is_some_and(|v| !v.is_null()))
        {
            let msg = format!(
                "question {name}: {field} is for multi questions (this one is {})",
                kind.as_str()
            );
            return Err(SchemaError::new(at(&format!(".{field}")), msg));
        }
        return Ok(None);
    }
    let together = alternatives.len() - usize::from(none_option.is_some());
    let count = |field: &str, default: usize, least: usize| -> Result<usize, SchemaError> {
        match q.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => match v.as_u64() {
                Some(n) if (n as usize) <= together && (n as usize) >= least => Ok(n as usize),
                _ => {
                    let msg = format!(
                        "question {name}: {field} must be a whole number from {least} to {together}, the options that can be selected together (got {})",
                        shown(v)
                    );
                    Err(SchemaError::new(at(&format!(".{field}")), msg))
                }
            },
        }
    };
    let min = count("min", 0, 0)?;
    let max = count("max", together, 1)?;
    if min > max {
        let msg = format!("question {name}: max must be at least min (got min {min}, max {max})");
        return Err(SchemaError::new(at(".max"), msg));
    }
    let threshold = match q.get("threshold") {
        None | Some(Value::Null) => DEFAULT_SELECT_THRESHOLD,
        Some(v) => match v.as_f64() {
            Some(t) if t > 0.0 && t < 1.0 => t,
            _ => {
                let msg = format!(
                    "question {name}: threshold must be a number strictly between 0 and 1, a probability (got {})",
                    shown(v)
                );
                return Err(SchemaError::new(at(".threshold"), msg));
            }
        },
    };
    Ok(Some(Selection {
        min,
        max,
        threshold,
    }))
}

/// A `multi` question is read as one yes/no slot per option
/// ([`crate::multi`]), so: the slots of all questions together stay within
/// [`MAX_QUESTIONS`], and no question depends on a `multi` one (its answer is
/// a set, not one name an `ask_if` could test).
///
/// # Errors
/// [`SchemaError`] at `questions` (too many slots) or at the dependent
/// question's `depends_on`.
pub(super) fn check_multi_reads(questions: &[Question]) -> Result<(), SchemaError> {
    let slots: usize = questions.iter().map(Question::slots).sum();
    if slots > MAX_QUESTIONS {
        let msg = format!(
            "schema: at most {MAX_QUESTIONS} answer slots, and a multi question takes one per option (got {slots})"
        );
        return Err(SchemaError::new("questions", msg));
    }
    for (i, q) in questions.iter().enumerate() {
        if let Some(dep) = q.depends_on.iter().find(|d| {
            questions
                .iter()
                .any(|o| &o.id == *d && o.kind == QuestionKind::Multi)
        }) {
            let msg = format!(
                "question '{}': depends on multi question '{dep}'; a multi answer is a set of options, so depends_on and ask_if may name only boolean, choice and score questions",
                q.id
            );
            return Err(SchemaError::new(format!("questions[{i}].depends_on"), msg));
        }
    }
    Ok(())
}
