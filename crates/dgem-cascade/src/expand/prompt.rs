//! The expansion call's prompt and its strict reply schema.
//!
//! One prompt covers every flagged slot of a decision: the policy's global
//! guidance, the state (written by [`state_text`]), then per slot its id,
//! question text, current options, the Stage-1 candidates and why it was
//! flagged. The reply schema asks for one `{name, description}` per slot.

use std::fmt::Write as _;

use dgem_core::prompt::state_text;
use serde_json::{json, Map, Value};

use super::Flagged;

/// The prompt asking for one new option per flagged slot.
pub(super) fn expansion_prompt(
    instructions: Option<&str>,
    state: &Value,
    flagged: &[Flagged<'_>],
) -> String {
    let mut out = String::from(
        "You help maintain the answer options of an automated review policy. For each \
         question below, the input did not fit the listed options well: the first-stage \
         model either picked a catch-all option or spread its belief over several. Propose \
         ONE new option per question, a sibling of the existing ones, that would cover this \
         input and cases like it. Do not repeat or merely rename an existing option.\n",
    );
    if let Some(g) = instructions.map(str::trim).filter(|g| !g.is_empty()) {
        let _ = write!(out, "\nPolicy guidance:\n{g}\n");
    }
    out.push_str("\nInput:\n<<<\n");
    out.push_str(&state_text(state));
    out.push_str("\n>>>\n\nQuestions:\n");
    for f in flagged {
        let q = &f.answer.question;
        let _ = write!(out, "- {}", q.id);
        let text = q.instructions.trim();
        if !text.is_empty() {
            let _ = write!(out, ": {text}");
        }
        let options: Vec<String> = q
            .alternatives
            .iter()
            .map(|a| match a.description.as_deref().map(str::trim) {
                Some(d) if !d.is_empty() => format!("{} ({d})", a.name),
                _ => a.name.clone(),
            })
            .collect();
        let candidates: Vec<String> = f
            .candidates
            .iter()
            .map(|c| format!("{} {:.1}%", c.name, c.probability * 100.0))
            .collect();
        let _ = write!(
            out,
            "\n  Current options: {}\n  First-stage candidates: {}\n  Flagged because: {}\n",
            options.join(", "),
            if candidates.is_empty() {
                "none".to_string()
            } else {
                candidates.join(", ")
            },
            f.reason
        );
    }
    out.push_str(
        "\nReply with a single JSON object with one key per question id. Each value is an \
         object with \"name\" (the new option's name in snake_case, e.g. \"refund_request\") \
         and \"description\" (one sentence saying which cases the option covers).\n",
    );
    out
}

/// The strict reply schema: one required `{name, description}` object (both
/// strings, both required, nothing else) per slot id, and no other key.
pub fn expansion_schema<'a>(ids: impl IntoIterator<Item = &'a str>) -> Value {
    let mut props = Map::new();
    let mut required = Vec::new();
    for id in ids {
        props.insert(
            id.to_string(),
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                },
                "required": ["name", "description"],
                "additionalProperties": false,
            }),
        );
        required.push(Value::String(id.to_string()));
    }
    json!({
        "type": "object",
        "properties": Value::Object(props),
        "required": required,
        "additionalProperties": false,
    })
}
