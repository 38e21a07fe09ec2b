//! The Stage-2 prompt and its response JSON Schema.
//!
//! One prompt covers every escalated slot of a decision: the policy's global
//! instructions, the state (written by [`dgem_core::prompt::state_text`]),
//! then one line per slot with its id, type, question text and allowed
//! values, shaped by the [`PriorMode`]. The response schema asks for one
//! object per slot, `{decision, confidence, explanation}`, with `decision`
//! limited to the slot's allowed values.

use std::fmt::Write as _;

use dgem_core::envelope::AnswerOut;
use dgem_core::prompt::state_text;
use dgem_core::schema::Question;
use serde_json::{json, Map, Value};

use crate::options::PriorMode;

/// One escalated slot as the prompt sees it.
#[derive(Debug, Clone, Copy)]
pub struct Escalated<'a> {
    /// The Stage-1 answer (its question included).
    pub answer: &'a AnswerOut,
    /// The gate's reason, e.g. `entropy (H=0.4100 >= 0.35)`.
    pub reason: &'a str,
}

/// The values Stage 2 may answer for `q`: `yes`/`no` for a boolean, option
/// names for a choice, level names for a score, in template order.
pub fn allowed_values(q: &Question) -> Vec<String> {
    q.alternatives.iter().map(|a| a.name.clone()).collect()
}

/// The Stage-2 prompt text.
///
/// `instructions` is the policy's global rubric, `image_count` the number of
/// images sent along (mentioned so the model looks at them).
pub fn stage2_prompt(
    instructions: Option<&str>,
    state: &Value,
    image_count: usize,
    slots: &[Escalated<'_>],
    prior: PriorMode,
) -> String {
    let mut out = String::from(
        "You are the second, more careful stage of an automated review. Decide each \
         question below from the input alone, following the guidance.\n",
    );
    if let Some(g) = instructions.map(str::trim).filter(|g| !g.is_empty()) {
        let _ = write!(out, "\nGuidance:\n{g}\n");
    }
    out.push_str("\nInput:\n<<<\n");
    out.push_str(&state_text(state));
    out.push_str("\n>>>\n");
    if image_count > 0 {
        let _ = writeln!(
            out,
            "The input also includes {image_count} image(s), sent with this message."
        );
    }
    out.push_str("\nQuestions (answer every one):\n");
    for s in slots {
        out.push_str(&slot_line(s, prior));
        out.push('\n');
    }
    out.push_str(
        "\nReply with a single JSON object with one key per question id. Each value is an \
         object with \"decision\" (exactly one of that question's allowed values), \
         \"confidence\" (a number from 0 to 1: how sure you are) and \"explanation\" \
         (one short sentence).\n",
    );
    out
}

/// `- id (type): text Allowed values: a, b (what a means). <prior>`.
fn slot_line(s: &Escalated<'_>, prior: PriorMode) -> String {
    let a = s.answer;
    let q = &a.question;
    let values: Vec<String> = q
        .alternatives
        .iter()
        .map(|alt| match alt.description.as_deref().map(str::trim) {
            Some(d) if !d.is_empty() => format!("{} ({d})", alt.name),
            _ => alt.name.clone(),
        })
        .collect();
    let mut line = format!("- {} ({})", q.id, q.kind.as_str());
    let text = q.instructions.trim();
    if !text.is_empty() {
        let _ = write!(line, ": {text}");
    }
    let _ = write!(line, " Allowed values: {}.", values.join(", "));
    let stage1 = a.answer_name();
    match prior {
        PriorMode::None => {}
        PriorMode::Soft => {
            let _ = write!(
                line,
                " A quicker first-stage model leaned toward \"{stage1}\"; weigh that as a hint \
                 only and make your own decision."
            );
        }
        PriorMode::Full => {
            let dist: Vec<String> = q
                .alternatives
                .iter()
                .zip(&a.aggregate.mean)
                .map(|(alt, p)| format!("{} {:.1}%", alt.name, p * 100.0))
                .collect();
            let _ = write!(
                line,
                " First-stage candidate: \"{stage1}\" (confidence {:.1}%, entropy {:.4} nats); \
                 escalated because {}. First-stage distribution: {}.",
                a.aggregate.confidence * 100.0,
                a.aggregate.entropy,
                s.reason,
                dist.join(", ")
            );
        }
    }
    line
}

/// The response JSON Schema for these slots: an object with one required
/// property per slot, each `{decision: enum of allowed values, confidence:
/// number, explanation: string}`, all required, no other properties.
pub fn response_schema(slots: &[Escalated<'_>]) -> Value {
    let mut props = Map::new();
    let mut required = Vec::new();
    for s in slots {
        let q = &s.answer.question;
        props.insert(
            q.id.clone(),
            json!({
                "type": "object",
                "properties": {
                    "decision": {"type": "string", "enum": allowed_values(q)},
                    "confidence": {"type": "number"},
                    "explanation": {"type": "string"},
                },
                "required": ["decision", "confidence", "explanation"],
                "additionalProperties": false,
            }),
        );
        required.push(Value::String(q.id.clone()));
    }
    json!({
        "type": "object",
        "properties": Value::Object(props),
        "required": required,
        "additionalProperties": false,
    })
}

#[cfg(test)]
mod tests;
