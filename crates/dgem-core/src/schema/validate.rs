//! Validation of a raw schema into a [`ValidSchema`] (serving.md §3.1).
//!
//! Rules are applied in the order of `parse_schema` so that the first error
//! reported is the same one the Python server reports. Each message starts
//! with the server wording and then adds the allowed values and the value
//! given (house style rule 7). Per-question rules live here; the schema-level
//! settings (rules 4 and 8–15) live in `settings.rs`.

mod select;
mod settings;
pub(crate) mod text;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::{
    Alternative, AnswerFormat, Isolate, Question, QuestionKind, SchemaDefaults, ValidSchema,
    MAX_ALTERNATIVES, MAX_ID_CHARS, MAX_QUESTIONS, MIN_ALTERNATIVES,
};
use crate::after::AfterRead;
use crate::error::SchemaError;
use crate::stages::stage_levels;
use text::{kind, py_list, py_repr, shown, text_of};

/// `ask_if` as given: dependency id → raw answer values, checked by rule 6.
type RawAskIf = Vec<(String, Vec<Value>)>;

impl ValidSchema {
    /// Validate a raw (normalized) schema object, applying serving.md §3.1
    /// rules 1–16 in order, then dgem-rs's switches `think_optional` and
    /// `requires_image`. `defaults` supplies `samples` and `layout` when the
    /// schema has none.
    ///
    /// ```
    /// use dgem_core::schema::{SchemaDefaults, ValidSchema};
    /// let raw = serde_json::json!({"questions": [{"id": "ok", "type": "noul"}]});
    /// let schema = ValidSchema::from_value(&raw, &SchemaDefaults::default())?;
    /// assert_eq!(schema.questions[0].alternatives[0].name, "yes");
    /// # Ok::<(), dgem_core::SchemaError>(())
    /// ```
    pub fn from_value(v: &Value, defaults: &SchemaDefaults) -> Result<ValidSchema, SchemaError> {
        let (obj, raw_questions) = questions_of(v)?;
        if let Some((key, meant)) =
            crate::suggest::near_miss(obj.keys(), &select::NEAR_MISS_SCHEMA_KEYS)
        {
            let msg = format!("schema: unknown key `{key}` (did you mean `{meant}`?)");
            return Err(SchemaError::new(key, msg));
        }
        let mut questions: Vec<Question> = Vec::with_capacity(raw_questions.len());
        let mut raw_ask_if: Vec<RawAskIf> = Vec::with_capacity(raw_questions.len());
        for (i, raw) in raw_questions.iter().enumerate() {
            let (q, ask_if) = parse_question(i, raw, &questions)?;
            questions.push(q);
            raw_ask_if.push(ask_if);
        }
        let isolate = settings::isolate(obj, defaults)?;
        apply_isolation(&mut questions, isolate);
        check_dependencies(&questions)?;
        select::check_multi_reads(&questions)?;
        for (i, ask_if) in raw_ask_if.into_iter().enumerate() {
            questions[i].ask_if = check_ask_if(i, &questions, ask_if)?;
        }
        let pairs: Vec<(&str, &[String])> = questions
            .iter()
            .map(|q| (q.id.as_str(), q.depends_on.as_slice()))
            .collect();
        stage_levels(&pairs)?;
        let samples = settings::samples(obj, defaults)?;
        let ask = settings::ask(obj, &questions)?;
        let ids: Vec<&str> = questions.iter().map(|q| q.id.as_str()).collect();
        let after = AfterRead::from_object(obj, &ids, Some(raw_questions))?;
        let rules = crate::rules::Rules::from_object(obj, &questions)?;
        let format = AnswerFormat::for_count(questions.len());
        Ok(ValidSchema {
            instructions: obj.get("instructions").and_then(text_of),
            samples,
            ask,
            chunk_rows: settings::chunk_rows(obj)?,
            chunk_prompt: settings::chunk_prompt(obj)?,
            sequential: settings::sequential(obj)?,
            layout: settings::layout(obj, defaults)?,
            layout_stated: obj.get("layout").is_some_and(|v| !v.is_null())
                || defaults.layout_stated,
            think: settings::think(obj)?,
            steps: settings::steps(obj)?,
            think_optional: settings::think_optional(obj)?,
            requires_image: settings::requires_image(obj)?,
            format,
            questions,
            isolate,
            after,
            rules,
            policy: None,
        })
    }
}

/// Rule 4, second half: a question that does not state `alone` gets it from the
/// isolation rule in effect; an explicit `alone` always wins. Questions isolated
/// by `auto` are flagged `alone_auto`.
fn apply_isolation(questions: &mut [Question], isolate: Isolate) {
    let rule = isolate.resolve(questions);
    for q in questions.iter_mut() {
        if q.alone.is_some() {
            continue;
        }
        let alone = match rule {
            Isolate::All => true,
            // A multi question's options are yes/no reads.
            Isolate::Noul => q.kind.slot_kind() == QuestionKind::Boolean,
            Isolate::None | Isolate::Auto => false,
        };
        if alone {
            q.alone = Some(true);
            q.alone_auto = isolate == Isolate::Auto;
        }
    }
}

/// Rules 1–2: an object with a non-empty `questions` list of at most 64.
fn questions_of(v: &Value) -> Result<(&Map<String, Value>, &Vec<Value>), SchemaError> {
    const MSG: &str = "schema: needs a non-empty questions array";
    let Value::Object(obj) = v else {
        let got = format!("{MSG} (the schema is {}, not an object)", kind(v));
        return Err(SchemaError::new("questions", got));
    };
    let list = match obj.get("questions") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => {
            return Err(SchemaError::new(
                "questions",
                format!("{MSG} (got an empty list)"),
            ))
        }
        None => {
            return Err(SchemaError::new(
                "questions",
                format!("{MSG} (`questions` is missing)"),
            ))
        }
        Some(other) => {
            return Err(SchemaError::new(
                "questions",
                format!("{MSG} (got {})", kind(other)),
            ))
        }
    };
    if list.len() > MAX_QUESTIONS {
        let msg = format!(
            "schema: at most {MAX_QUESTIONS} questions (got {})",
            list.len()
        );
        return Err(SchemaError::new("questions", msg));
    }
    Ok((obj, list))
}

/// Rule 3 for question `i`; `earlier` are the questions already parsed.
/// Returns the question (with `ask_if` still empty) and its raw `ask_if`.
fn parse_question(
    i: usize,
    raw: &Value,
    earlier: &[Question],
) -> Result<(Question, RawAskIf), SchemaError> {
    let at = |f: &str| format!("questions[{i}]{f}");
    let Value::Object(q) = raw else {
        let msg = format!(
            "schema: questions[{i}] must be an object with an id and a type (got {})",
            kind(raw)
        );
        return Err(SchemaError::new(at(""), msg));
    };
    let id = match q.get("id") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.trim() != s && !s.trim().is_empty() => {
            // The original server strips the id, so `" x "` was answered
            // under `x`, a key the client never sent (issue 38).
            let msg = format!(
                "question id {} must not begin or end with whitespace; use {}",
                py_repr(s),
                py_repr(s.trim())
            );
            return Err(SchemaError::new(at(".id"), msg));
        }
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            let msg = format!("question id must be a string (got {})", shown(other));
            return Err(SchemaError::new(at(".id"), msg));
        }
    };
    if id.is_empty() || id.contains(':') || id.contains('\n') {
        let msg = format!(
            "question id {} must be non-empty, no ':' or newline",
            py_repr(&id)
        );
        return Err(SchemaError::new(at(".id"), msg));
    }
    // Ids are keys in answers, metrics labels and JSON paths: no whitespace and
    // at most MAX_ID_CHARS characters (the limit peer decision APIs use).
    if id.chars().any(invisible) || id.chars().count() > MAX_ID_CHARS {
        let shown_id: String = id.chars().take(40).collect();
        let msg = format!(
            "question id {}{} must have no spaces, other whitespace or invisible characters and at most {MAX_ID_CHARS} characters (got {} characters); use snake_case, e.g. {}",
            py_repr(&shown_id),
            if id.chars().count() > 40 { "…" } else { "" },
            id.chars().count(),
            py_repr(&snake_suggestion(&id)),
        );
        return Err(SchemaError::new(at(".id"), msg));
    }
    if let Some(j) = earlier.iter().position(|e| e.id == id) {
        let msg = format!(
            "duplicate question id {} (questions[{j}] and questions[{i}])",
            py_repr(&id)
        );
        return Err(SchemaError::new(at(".id"), msg));
    }
    let name = py_repr(&id);
    if let Some((key, meant)) = crate::suggest::near_miss(q.keys(), &crate::schema::QUESTION_KEYS) {
        let msg = format!("question {name}: unknown key `{key}` (did you mean `{meant}`?)");
        return Err(SchemaError::new(at(&format!(".{key}")), msg));
    }
    let (kind, mut alternatives, alt_field) = alternatives_of(q, &name, &at)?;
    let given = alternatives.len();
    let none_option = select::none_option(kind, q, &mut alternatives, &name, &at)?;
    // Said in a count error when `none_of_these` added the option over the limit.
    let added = if alternatives.len() > given {
        " (counting the `none` option none_of_these adds)"
    } else {
        ""
    };
    if alternatives.len() < MIN_ALTERNATIVES {
        // The original's wording first, then the field and what it held.
        let held: Vec<String> = alternatives.iter().map(|a| py_repr(&a.name)).collect();
        let msg = format!(
            "question {name}: needs at least two alternatives (got {}); `{}` holds [{}]",
            alternatives.len(),
            alt_field.trim_start_matches('.'),
            held.join(", ")
        );
        return Err(SchemaError::new(at(alt_field), msg));
    }
    // One slot reads at most 26 labels; a choice may hold up to 300 options,
    // answered through brackets (`crate::brackets`).
    let max = crate::kinds::of(kind).max_alternatives();
    if alternatives.len() > max {
        let msg = match kind {
            QuestionKind::Choice => format!(
                "question {name}: at most {max} alternatives (got {}; choices over {MAX_ALTERNATIVES} are answered through brackets)",
                alternatives.len()
            ),
            _ => format!(
                "question {name}: at most {max} alternatives (got {}{added})",
                alternatives.len()
            ),
        };
        return Err(SchemaError::new(at(alt_field), msg));
    }
    check_alternative_names(&alternatives, &name, &at(alt_field))?;
    let selection = select::selection(kind, q, &alternatives, none_option, &name, &at)?;
    let mut depends_on: Vec<String> = match q.get("depends_on") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|d| d.as_str().map(str::to_string))
            .collect(),
        Some(other) => {
            let msg = format!(
                "question {name}: depends_on must be a list of question ids (got {})",
                shown(other)
            );
            return Err(SchemaError::new(at(".depends_on"), msg));
        }
    };
    let ask_if: RawAskIf = match q.get("ask_if") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(m))
            if m.values()
                .all(|v| v.as_array().is_some_and(|a| !a.is_empty())) =>
        {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_array().cloned().unwrap_or_default()))
                .collect()
        }
        Some(other) => {
            let msg = format!(
                "question {name}: ask_if must map a question id to a non-empty list of its answers (got {})",
                shown(other)
            );
            return Err(SchemaError::new(at(".ask_if"), msg));
        }
    };
    for (dep, _) in &ask_if {
        if !depends_on.contains(dep) {
            depends_on.push(dep.clone());
        }
    }
    let mut unique: Vec<String> = Vec::with_capacity(depends_on.len());
    for d in depends_on {
        if !unique.contains(&d) {
            unique.push(d);
        }
    }
    let alone = match q.get("alone") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(Value::Number(n)) => Some(n.as_f64().is_some_and(|f| f != 0.0)),
        Some(other) => {
            let msg = format!(
                "question {name}: alone must be true or false (got {})",
                shown(other)
            );
            return Err(SchemaError::new(at(".alone"), msg));
        }
    };
    let question = Question {
        id,
        kind,
        instructions: q.get("instructions").and_then(text_of).unwrap_or_default(),
        alternatives,
        depends_on: unique,
        ask_if: IndexMap::new(),
        alone,
        alone_auto: false,
        none_option,
        select: selection,
    };
    Ok((question, ask_if))
}

/// The type and the alternatives of a question, and the field that holds them.
fn alternatives_of(
    q: &Map<String, Value>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<(QuestionKind, Vec<Alternative>, &'static str), SchemaError> {
    let type_name = match q.get("type") {
        None | Some(Value::Null) => {
            let msg = format!(
                "question {name}: unknown type 'None' (`type` is missing; it must be one of {})",
                QuestionKind::accepted_names()
            );
            return Err(SchemaError::new(at(".type"), msg));
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    match QuestionKind::parse(&type_name) {
        Some(kind) => {
            let (alts, field) = crate::kinds::of(kind).alternatives(q, name, at)?;
            Ok((kind, alts, field))
        }
        None => {
            let msg = format!(
                "question {name}: unknown type {} (`type` must be one of {})",
                py_repr(&type_name),
                QuestionKind::accepted_names()
            );
            Err(SchemaError::new(at(".type"), msg))
        }
    }
}

/// A list-valued question field; absent or `null` is an empty list.
pub(crate) fn list_field<'a>(
    q: &'a Map<String, Value>,
    key: &str,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<&'a [Value], SchemaError> {
    match q.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => {
            let msg = format!(
                "question {name}: {key} must be a list (got {})",
                shown(other)
            );
            Err(SchemaError::new(at(&format!(".{key}")), msg))
        }
    }
}

/// A valid id close to `id`: whitespace runs become `_`, other invisible
/// characters are dropped, and the result is cut to [`MAX_ID_CHARS`].
fn snake_suggestion(id: &str) -> String {
    let words: Vec<String> = id
        .split_whitespace()
        .map(|w| w.chars().filter(|c| !invisible(*c)).collect::<String>())
        .filter(|w| !w.is_empty())
        .collect();
    let joined = words.join("_");
    let joined = if joined.is_empty() {
        "question".to_string()
    } else {
        joined
    };
    joined.chars().take(MAX_ID_CHARS).collect()
}

/// Characters an id may not hold: whitespace, control characters (NUL…) and
/// Unicode format characters (zero-width, soft hyphen, bidi overrides), which
/// would make two ids that look the same differ ([`crate::state::is_invisible`]).
fn invisible(c: char) -> bool {
    crate::state::is_invisible(c)
}

/// Rule 5: every dependency is a known id other than the question itself.
fn check_dependencies(questions: &[Question]) -> Result<(), SchemaError> {
    for (i, q) in questions.iter().enumerate() {
        for dep in &q.depends_on {
            let known = questions.iter().any(|o| &o.id == dep);
            if known && dep != &q.id {
                continue;
            }
            let why = if dep == &q.id {
                "a question cannot depend on itself".to_string()
            } else {
                let ids: Vec<&str> = questions.iter().map(|o| o.id.as_str()).collect();
                format!("known ids: {}", ids.join(", "))
            };
            let msg = format!(
                "question {}: depends on unknown question {} ({why})",
                py_repr(&q.id),
                py_repr(dep)
            );
            return Err(SchemaError::new(format!("questions[{i}].depends_on"), msg));
        }
    }
    Ok(())
}

/// Alternative names must be usable as answers: non-empty after trimming, one
/// line, free of invisible and control characters (zero-width spaces,
/// bidirectional overrides, NUL, tabs…: two names that look the same must not
/// be two options), and unique within the question once compared as
/// [`name_key`] does: Unicode NFC, every run of whitespace (NBSP included) one
/// space, ends trimmed. A duplicate would overwrite the other's probability
/// in the answer's `probabilities` map, and a look-alike would be a second
/// option no reader can tell apart.
fn check_alternative_names(
    alternatives: &[Alternative],
    name: &str,
    field: &str,
) -> Result<(), SchemaError> {
    for (j, a) in alternatives.iter().enumerate() {
        if a.name.trim().is_empty() || a.name.contains('\n') || a.name.contains('\r') {
            let msg = format!(
                "question {name}: alternative {j} must be a non-empty name on one line (got {})",
                py_repr(&a.name)
            );
            return Err(SchemaError::new(format!("{field}[{j}]"), msg));
        }
        if let Some(c) = a
            .name
            .chars()
            .find(|&c| (invisible(c) && !c.is_whitespace()) || c.is_control())
        {
            let msg = format!(
                "question {name}: alternative {j} must have no invisible or control characters; {} holds U+{:04X}",
                py_repr(&a.name),
                u32::from(c)
            );
            return Err(SchemaError::new(format!("{field}[{j}]"), msg));
        }
        let key = name_key(&a.name);
        if let Some(k) = alternatives[..j]
            .iter()
            .position(|b| name_key(&b.name) == key)
        {
            let msg = if alternatives[k].name == a.name {
                format!(
                    "question {name}: alternative names must be unique; {} appears at {k} and {j}",
                    py_repr(&a.name)
                )
            } else {
                format!(
                    "question {name}: alternative names must be unique; {} (at {k}) and {} (at {j}) are the same name once spaces are trimmed and Unicode is normalised (NFC)",
                    py_repr(&alternatives[k].name),
                    py_repr(&a.name)
                )
            };
            return Err(SchemaError::new(format!("{field}[{j}]"), msg));
        }
    }
    Ok(())
}

/// What two option names are compared by: NFC, whitespace runs (any Unicode
/// whitespace) as one space, ends trimmed.
fn name_key(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization as _;
    let nfc: String = name.nfc().collect();
    nfc.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Rule 6: every `ask_if` value is an answer name of its dependency.
fn check_ask_if(
    i: usize,
    questions: &[Question],
    raw: RawAskIf,
) -> Result<IndexMap<String, Vec<String>>, SchemaError> {
    let mut out = IndexMap::new();
    for (dep, values) in raw {
        let names: Vec<String> = questions
            .iter()
            .find(|o| o.id == dep)
            .map(|o| o.alternatives.iter().map(|a| a.name.clone()).collect())
            .unwrap_or_default();
        let mut kept = Vec::with_capacity(values.len());
        for v in &values {
            match v.as_str() {
                Some(s) if names.iter().any(|n| n == s) => kept.push(s.to_string()),
                _ => {
                    let msg = format!(
                        "question {}: ask_if values for {} must be among {} (got {})",
                        py_repr(&questions[i].id),
                        py_repr(&dep),
                        py_list(&names),
                        shown(v)
                    );
                    return Err(SchemaError::new(
                        format!("questions[{i}].ask_if.{dep}"),
                        msg,
                    ));
                }
            }
        }
        out.insert(dep, kept);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
