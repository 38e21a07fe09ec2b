//! The GBNF grammar of a Stage-2 reply, built from the cascade's response schema.
//!
//! Why hand-written: llama-cpp-2 exposes llama.cpp's `json_schema_to_grammar`
//! only behind its `common` feature, which this workspace leaves off
//! (`default-features = false`: it would build and link llama.cpp's `common`
//! library). The schema the cascade sends has one fixed shape
//! ([`dgem_cascade::prompt::response_schema`]), so the conversion for that
//! shape is short, and it can also do what a generic converter does not:
//! fix the key order to the slot order, bound the explanation's length and
//! the confidence to `(0, 1]`, and leave no room for free whitespace.
//!
//! The reply it accepts, for slots `a` (values `yes`, `no`) and `b`:
//!
//! ```text
//! {"a": {"decision": "yes", "confidence": 0.8, "explanation": "…"}, "b": {…}}
//! ```
//!
//! Between tokens at most one space is allowed; the object ends at its
//! closing brace (nothing may follow but end of generation).

use std::fmt::Write as _;

use dgem_cascade::provider::excerpt;
use dgem_cascade::Stage2Error;
use serde_json::{Map, Value};

use super::PROVIDER;

/// Default bound on an explanation's length, in characters (escape
/// sequences count as one).
pub const DEFAULT_MAX_EXPLANATION_CHARS: usize = 200;

/// Largest explanation bound accepted: llama.cpp refuses a repetition of more
/// than 2000 (`MAX_REPETITION_THRESHOLD` in `llama-grammar.cpp`).
pub const MAX_EXPLANATION_CHARS: usize = 2000;

/// A grammar for one request and the slots it answers, in reply order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotGrammar {
    /// The grammar in llama.cpp's GBNF; its start rule is `root`.
    pub gbnf: String,
    /// Slot ids in the order the reply writes them (the schema's `required`).
    pub slots: Vec<String>,
}

fn bad(field: impl Into<String>, allowed: &str, got: &Value) -> Stage2Error {
    Stage2Error::Config {
        provider: PROVIDER.into(),
        field: field.into(),
        allowed: allowed.into(),
        got: excerpt(&got.to_string()),
    }
}

/// `v[key]` as an object, else a [`Stage2Error::Config`] naming `field`.
fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, Stage2Error> {
    v.as_object().ok_or_else(|| bad(field, "a JSON object", v))
}

/// Check `obj.type == want`.
fn expect_type(obj: &Map<String, Value>, field: &str, want: &str) -> Result<(), Stage2Error> {
    match obj.get("type") {
        Some(Value::String(t)) if t == want => Ok(()),
        other => Err(bad(
            format!("{field}.type"),
            &format!("\"{want}\""),
            other.unwrap_or(&Value::Null),
        )),
    }
}

/// `additionalProperties`, when present, must be `false`.
fn expect_closed(obj: &Map<String, Value>, field: &str) -> Result<(), Stage2Error> {
    match obj.get("additionalProperties") {
        None | Some(Value::Bool(false)) => Ok(()),
        Some(other) => Err(bad(
            format!("{field}.additionalProperties"),
            "false (or absent)",
            other,
        )),
    }
}

/// `required` as a list of strings naming exactly the keys of `properties`.
fn required_keys(
    obj: &Map<String, Value>,
    props: &Map<String, Value>,
    field: &str,
) -> Result<Vec<String>, Stage2Error> {
    let req = obj.get("required").unwrap_or(&Value::Null);
    let keys: Option<Vec<String>> = req
        .as_array()
        .map(|a| a.iter().map(|k| k.as_str().map(str::to_string)).collect())
        .unwrap_or(None);
    let keys = keys.ok_or_else(|| bad(format!("{field}.required"), "an array of strings", req))?;
    let mut sorted: Vec<&str> = keys.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
    names.sort_unstable();
    if keys.is_empty() || sorted.len() != keys.len() || sorted != names {
        return Err(bad(
            format!("{field}.required"),
            &format!(
                "every key of `{field}.properties` once, and no other ([{}])",
                names.join(", ")
            ),
            req,
        ));
    }
    Ok(keys)
}

/// `s` as a GBNF string literal (quotes, backslashes and control characters
/// escaped; other characters, non-ASCII included, written as they are).
pub fn gbnf_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` as JSON (quoted, escaped) and then as a GBNF literal: the exact bytes
/// the model must write for the JSON string `s`.
fn json_literal(s: &str) -> String {
    gbnf_literal(&Value::String(s.to_string()).to_string())
}

/// The allowed `decision` values of slot `id`.
fn decision_values(slot: &Map<String, Value>, field: &str) -> Result<Vec<String>, Stage2Error> {
    let props = object(
        slot.get("properties").unwrap_or(&Value::Null),
        &format!("{field}.properties"),
    )?;
    let keys = required_keys(slot, props, field)?;
    let want = ["confidence", "decision", "explanation"];
    let mut sorted: Vec<&str> = keys.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    if sorted != want {
        return Err(bad(
            format!("{field}.properties"),
            "exactly `decision`, `confidence` and `explanation`",
            &Value::from(keys),
        ));
    }
    let prop = |name: &str| props.get(name).unwrap_or(&Value::Null);
    let decision = object(prop("decision"), &format!("{field}.properties.decision"))?;
    expect_type(decision, &format!("{field}.properties.decision"), "string")?;
    let en = decision.get("enum").unwrap_or(&Value::Null);
    let values: Option<Vec<String>> = en
        .as_array()
        .filter(|a| !a.is_empty())
        .map(|a| a.iter().map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or(None);
    let values = values.ok_or_else(|| {
        bad(
            format!("{field}.properties.decision.enum"),
            "a non-empty array of strings",
            en,
        )
    })?;
    let confidence = object(
        prop("confidence"),
        &format!("{field}.properties.confidence"),
    )?;
    expect_type(
        confidence,
        &format!("{field}.properties.confidence"),
        "number",
    )?;
    let explanation = object(
        prop("explanation"),
        &format!("{field}.properties.explanation"),
    )?;
    expect_type(
        explanation,
        &format!("{field}.properties.explanation"),
        "string",
    )?;
    expect_closed(slot, field)?;
    Ok(values)
}

/// Build the grammar for `schema`, the cascade's response schema: an object
/// with one required property per slot id, each `{decision: {type: string,
/// enum}, confidence: {type: number}, explanation: {type: string}}`, all
/// required and `additionalProperties: false`.
///
/// Keys come in the order of the schema's `required` arrays; the decision is
/// one of the enum strings exactly; the confidence a decimal in `(0, 1]` with
/// at most three decimals (`0.001`…`1`: the cascade reads a confidence of 0 as
/// "none given" and writes its 0.95 fallback instead, so a greedy model that
/// would write `0` is steered to a small positive value); the explanation a JSON string of at most
/// `max_explanation_chars` characters (1..=[`MAX_EXPLANATION_CHARS`]).
///
/// # Errors
/// [`Stage2Error::Config`] naming the schema field that has another shape
/// (e.g. `response_schema.properties.team.properties.decision.enum`), what it
/// must be and what it is.
pub fn slot_grammar(
    schema: &Value,
    max_explanation_chars: usize,
) -> Result<SlotGrammar, Stage2Error> {
    if !(1..=MAX_EXPLANATION_CHARS).contains(&max_explanation_chars) {
        return Err(bad(
            "max_explanation_chars",
            &format!("between 1 and {MAX_EXPLANATION_CHARS}"),
            &Value::from(max_explanation_chars),
        ));
    }
    let root = object(schema, "response_schema")?;
    expect_type(root, "response_schema", "object")?;
    let props = object(
        root.get("properties").unwrap_or(&Value::Null),
        "response_schema.properties",
    )?;
    let slots = required_keys(root, props, "response_schema")?;
    expect_closed(root, "response_schema")?;

    let mut rules = String::new();
    let mut top = String::from("root ::= \"{\" ws");
    for (i, id) in slots.iter().enumerate() {
        let field = format!("response_schema.properties.{id}");
        let slot = object(props.get(id).unwrap_or(&Value::Null), &field)?;
        expect_type(slot, &field, "object")?;
        let values = decision_values(slot, &field)?;
        if i > 0 {
            top.push_str(" \",\" ws");
        }
        let _ = write!(top, " {} ws \":\" ws slot{i} ws", json_literal(id));
        let _ = writeln!(
            rules,
            "slot{i} ::= \"{{\" ws {} ws \":\" ws decision{i} ws \",\" ws {} ws \":\" ws confidence ws \",\" ws {} ws \":\" ws explanation ws \"}}\"",
            json_literal("decision"),
            json_literal("confidence"),
            json_literal("explanation"),
        );
        let alts: Vec<String> = values.iter().map(|v| json_literal(v)).collect();
        let _ = writeln!(rules, "decision{i} ::= {}", alts.join(" | "));
    }
    top.push_str(" \"}\"\n");
    let mut gbnf = top;
    gbnf.push_str(&rules);
    gbnf.push_str("confidence ::= \"0.\" [0-9]{0,2} [1-9] | \"1\" (\".\" \"0\"{1,3})?\n");
    let _ = writeln!(
        gbnf,
        "explanation ::= \"\\\"\" echar{{0,{max_explanation_chars}}} \"\\\"\""
    );
    gbnf.push_str("echar ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" [\"\\\\/nt]\n");
    gbnf.push_str("ws ::= \" \"?\n");
    Ok(SlotGrammar { gbnf, slots })
}

#[cfg(test)]
mod tests;
