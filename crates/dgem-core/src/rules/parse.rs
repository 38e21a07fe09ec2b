//! Validation of a policy's `rules` against its questions.

use serde_json::{Map, Value};

use super::{
    each_assignment, rule_kind, Compiled, Condition, Rule, Rules, MAX_ASSIGNMENTS, MAX_RULES,
    MAX_RULE_CHECKS,
};
use crate::error::SchemaError;
use crate::schema::{Question, QuestionKind};

/// Keys a rule object may hold.
const RULE_KEYS: [&str; 3] = ["if", "then", "not"];

fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

/// The answer index `v` names for `q`: an alternative's name, or `true` /
/// `false` (and `"true"` / `"false"`) for a yes/no question.
fn answer_index(q: &Question, v: &Value) -> Option<usize> {
    let number;
    let name = match v {
        Value::String(s) => s.as_str(),
        // A number is its text, as option and level names are (`3` → `"3"`).
        Value::Number(n) => {
            number = n.to_string();
            number.as_str()
        }
        Value::Bool(true) if q.kind == QuestionKind::Boolean => "yes",
        Value::Bool(false) if q.kind == QuestionKind::Boolean => "no",
        _ => return None,
    };
    let name = match (q.kind, name) {
        (QuestionKind::Boolean, "true") => "yes",
        (QuestionKind::Boolean, "false") => "no",
        _ => name,
    };
    q.alternatives.iter().position(|a| a.name == name)
}

fn conditions(
    part: &Value,
    field: &str,
    questions: &[Question],
) -> Result<Vec<Condition>, SchemaError> {
    let Value::Object(m) = part else {
        let msg = format!(
            "{field} must be an object from question id to an answer or a list of answers, e.g. {{\"team\": \"security\"}} (got {})",
            shown(part)
        );
        return Err(SchemaError::new(field, msg));
    };
    if m.is_empty() {
        return Err(SchemaError::new(
            field,
            format!("{field} must name at least one question (got {{}})"),
        ));
    }
    let mut out = Vec::with_capacity(m.len());
    for (id, v) in m {
        let at = format!("{field}.{id}");
        let Some(q) = questions.iter().find(|q| &q.id == id) else {
            let ids: Vec<&str> = questions.iter().map(|q| q.id.as_str()).collect();
            let msg = format!(
                "{at}: unknown question '{id}'; known questions: {}",
                ids.join(", ")
            );
            return Err(SchemaError::new(at, msg));
        };
        // A question whose answer decides whether another is asked (`ask_if`)
        // is read before that one; a rule changing its answer afterwards
        // would leave the other asked or skipped on an answer it no longer has.
        if let Some(gated) = questions.iter().find(|o| o.ask_if.contains_key(id)) {
            let msg = format!(
                "question '{id}' decides whether '{}' is asked (its ask_if); rules may not name a question another one's ask_if depends on",
                gated.id
            );
            return Err(SchemaError::new(at, msg));
        }
        if !rule_kind(q) {
            let msg = format!(
                "question '{id}' is a multi question; rules may name boolean, choice and score questions (a multi answer is a set of options)"
            );
            return Err(SchemaError::new(at, msg));
        }
        let values: Vec<&Value> = match v {
            Value::Array(items) if items.is_empty() => {
                let msg = format!("{at}: give at least one answer of '{id}' (got an empty list)");
                return Err(SchemaError::new(at, msg));
            }
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        let mut indices = Vec::with_capacity(values.len());
        for value in values {
            let Some(i) = answer_index(q, value) else {
                let names: Vec<String> = q
                    .alternatives
                    .iter()
                    .map(|a| format!("'{}'", a.name))
                    .collect();
                let extra = if q.kind == QuestionKind::Boolean {
                    " (or true / false)"
                } else {
                    ""
                };
                let msg = format!(
                    "{at}: '{id}' has no answer {}; its answers are {}{extra}",
                    shown(value),
                    names.join(", ")
                );
                return Err(SchemaError::new(at, msg));
            };
            if !indices.contains(&i) {
                indices.push(i);
            }
        }
        out.push(Condition {
            question: id.clone(),
            answers: indices
                .iter()
                .filter_map(|&i| q.alternatives.get(i).map(|a| a.name.clone()))
                .collect(),
            indices,
        });
    }
    Ok(out)
}

fn rule(i: usize, v: &Value, questions: &[Question]) -> Result<Rule, SchemaError> {
    let field = format!("rules[{i}]");
    let Value::Object(m) = v else {
        let msg = format!(
            "{field} must be an object with `if` and `then` or `not`, e.g. {{\"if\": {{\"team\": \"security\"}}, \"then\": {{\"urgent\": \"yes\"}}}} (got {})",
            shown(v)
        );
        return Err(SchemaError::new(field, msg));
    };
    if let Some(k) = m.keys().find(|k| !RULE_KEYS.contains(&k.as_str())) {
        let msg =
            format!("{field} has unknown key '{k}'; a rule holds `if` and `then` and/or `not`");
        return Err(SchemaError::new(format!("{field}.{k}"), msg));
    }
    let Some(when) = m.get("if") else {
        return Err(SchemaError::new(
            format!("{field}.if"),
            format!("{field} needs `if`: the answers under which the rule applies"),
        ));
    };
    let when = conditions(when, &format!("{field}.if"), questions)?;
    let part = |key: &str| -> Result<Vec<Condition>, SchemaError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(p) => conditions(p, &format!("{field}.{key}"), questions),
        }
    };
    let (then, not) = (part("then")?, part("not")?);
    if then.is_empty() && not.is_empty() {
        return Err(SchemaError::new(
            format!("{field}.then"),
            format!("{field} needs `then` (answers required) or `not` (answers excluded)"),
        ));
    }
    Ok(Rule { when, then, not })
}

impl Rules {
    /// Read and validate the `rules` key of a policy object against its
    /// (validated) `questions`; absent or `null` is no rule.
    ///
    /// # Errors
    /// [`SchemaError`] naming the rule's field: not a list, more than
    /// [`MAX_RULES`], an unknown key, question or answer (with the allowed
    /// ones), a `multi` question, a question another one's `ask_if` depends
    /// on, a group of tied questions with more than [`MAX_ASSIGNMENTS`]
    /// assignments or [`MAX_RULE_CHECKS`] condition checks, or rules that no
    /// assignment of a group satisfies.
    pub fn from_object(
        obj: &Map<String, Value>,
        questions: &[Question],
    ) -> Result<Rules, SchemaError> {
        let list = match obj.get("rules") {
            None | Some(Value::Null) => return Ok(Rules::default()),
            Some(Value::Array(list)) => list,
            Some(other) => {
                let msg = format!(
                    "rules must be a list of {{\"if\": …, \"then\": …}} / {{\"if\": …, \"not\": …}} objects (got {})",
                    shown(other)
                );
                return Err(SchemaError::new("rules", msg));
            }
        };
        if list.len() > MAX_RULES {
            let msg = format!("at most {MAX_RULES} rules (got {})", list.len());
            return Err(SchemaError::new("rules", msg));
        }
        let rules = Rules(
            list.iter()
                .enumerate()
                .map(|(i, v)| rule(i, v, questions))
                .collect::<Result<_, _>>()?,
        );
        let order: Vec<&str> = questions.iter().map(|q| q.id.as_str()).collect();
        for (group, ids) in rules.groups(&order) {
            let sizes: Vec<usize> = ids
                .iter()
                .map(|id| {
                    questions
                        .iter()
                        .find(|q| &q.id == id)
                        .map_or(0, |q| q.alternatives.len())
                })
                .collect();
            let total = sizes
                .iter()
                .try_fold(1usize, |acc, &n| acc.checked_mul(n))
                .unwrap_or(usize::MAX);
            if total > MAX_ASSIGNMENTS {
                let msg = format!(
                    "rules {group:?} tie questions {} with {total} combinations of answers; at most {MAX_ASSIGNMENTS} may be tied together",
                    ids.join(", ")
                );
                return Err(SchemaError::new("rules", msg));
            }
            let rs: Vec<Compiled> = group
                .iter()
                .filter_map(|r| rules.0.get(*r))
                .map(|r| Compiled::of(r, &ids))
                .collect();
            let checks = total.saturating_mul(rs.iter().map(Compiled::conditions).sum());
            if checks > MAX_RULE_CHECKS {
                let msg = format!(
                    "rules {group:?} would cost {checks} condition checks per decision ({total} combinations of answers of {} times their conditions); at most {MAX_RULE_CHECKS}: tie fewer questions or state fewer rules",
                    ids.join(", ")
                );
                return Err(SchemaError::new("rules", msg));
            }
            let some_consistent =
                !each_assignment(&sizes, |at| !rs.iter().all(|r| r.satisfied(at)));
            if !some_consistent {
                let msg = format!(
                    "rules {group:?} cannot all hold: no answers of {} satisfy every one of them",
                    ids.join(", ")
                );
                return Err(SchemaError::new("rules", msg));
            }
        }
        Ok(rules)
    }
}
