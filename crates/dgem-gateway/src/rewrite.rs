//! What the pass-through routes hand back when the reply check
//! ([`crate::reply`]) had to read an upstream's reply charitably.
//!
//! Two things the check accepts change the numbers: probabilities that sum
//! to 1 only within the tolerance (0.02: an upstream that rounds to two
//! decimals) are divided by their sum, and a `refusal` entry (or an OpenAI
//! message with `refusal` and no `content`) is an abstention with its reason.
//! `/api/*` and `/mcp` build their reply from the checked decision, so they
//! carry both; the chat and System One routes pass the upstream's body on, so
//! here the same two changes are made to that body, in place:
//!
//! * each renormalized answer takes the decision's numbers (probabilities
//!   divided by their sum, entropy and confidence of that distribution), in
//!   the route's answer shape, and `diagnostics.renormalized` maps its id to
//!   the sum received;
//! * each refused answer becomes the decision's abstention (`abstained: true`,
//!   `abstain_reason`, a uniform distribution), in the route's answer shape.
//!
//! Keys of an answer that the decision does not write stay as the upstream
//! wrote them (a `refusal` reason, for one).
//!
//! Everything else in the body stays as the upstream wrote it, and a reply
//! that needed neither change is forwarded byte for byte.

use dgem_core::envelope::AnswerOut;
use dgem_engine::Decision;
use serde_json::{json, Map, Value};

/// Whether `d` read its reply with a renormalization or a refusal.
pub fn needs_rewrite(d: &Decision) -> bool {
    !d.diagnostics.renormalized.is_empty()
        || d.answers
            .values()
            .any(|a| a.as_ref().is_some_and(|a| a.abstained.is_some()))
}

/// Apply `d`'s renormalizations and refusals to an `{answers, diagnostics}`
/// object (`shape` writes a refused answer in the route's form).
fn patch(envelope: &mut Value, d: &Decision, shape: &dyn Fn(&str, &AnswerOut) -> Value) {
    let Some(obj) = envelope.as_object_mut() else {
        return;
    };
    if let Some(answers) = obj.get_mut("answers").and_then(Value::as_object_mut) {
        let changed = d
            .answers
            .iter()
            .filter(|(id, a)| {
                d.diagnostics.renormalized.contains_key(*id)
                    || a.as_ref().is_some_and(|a| a.abstained.is_some())
            })
            .filter_map(|(id, a)| a.as_ref().map(|a| (id, a)));
        for (id, a) in changed {
            // The decision's numbers over the upstream's entry: keys the
            // decision writes are replaced, the upstream's others stay.
            let fresh = shape(id, a);
            let entry = answers
                .entry(id.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            match (entry.as_object_mut(), fresh) {
                (Some(m), Value::Object(f)) => m.extend(f),
                (_, fresh) => *entry = fresh,
            }
        }
    }
    if !d.diagnostics.renormalized.is_empty() {
        let diagnostics = obj
            .entry("diagnostics")
            .or_insert_with(|| Value::Object(Map::new()));
        if !diagnostics.is_object() {
            *diagnostics = Value::Object(Map::new());
        }
        if let Some(m) = diagnostics.as_object_mut() {
            m.insert("renormalized".into(), json!(d.diagnostics.renormalized));
        }
    }
}

/// The chat envelope's form of an answer, written from the typed answer
/// as `d.envelope()` writes each one.
fn chat_answer(_id: &str, a: &AnswerOut) -> Value {
    a.to_chat_json()
}

/// A rewritten chat envelope `env` (the one the check read) as message text,
/// two-space indented as `dgem serve` writes it.
fn envelope_text(env: &Value) -> String {
    serde_json::to_string_pretty(env).unwrap_or_else(|_| env.to_string())
}

/// The non-streamed chat reply `v` with `d`'s changes: `dgem` (a structured
/// reply's envelope) patched, and the message content replaced by the
/// patched envelope (`read`, the envelope the check read from the content).
pub fn chat(mut v: Value, read: &Value, d: &Decision) -> Value {
    let shape = chat_answer;
    if let Some(dgem) = v.get_mut("dgem").filter(|x| x.is_object()) {
        patch(dgem, d, &shape);
    }
    let mut env = read.clone();
    patch(&mut env, d, &shape);
    if let Some(message) = v
        .pointer_mut("/choices/0/message")
        .and_then(Value::as_object_mut)
    {
        message.insert("content".into(), json!(envelope_text(&env)));
    }
    v
}

/// The streamed chat reply `text` (server-sent events) with `d`'s changes:
/// the first chunk that carried content carries the whole patched envelope
/// (`read`), later ones an empty delta; a `dgem` field is patched; every
/// other line stays as it was.
pub fn chat_stream(text: &str, read: &Value, d: &Decision) -> String {
    let shape = chat_answer;
    let mut env = read.clone();
    patch(&mut env, d, &shape);
    let whole = envelope_text(&env);
    let mut placed = false;
    let mut out = String::with_capacity(text.len() + whole.len());
    for line in text.split_inclusive('\n') {
        let data = line.strip_prefix("data:").map(str::trim);
        let chunk = data
            .filter(|x| *x != "[DONE]")
            .and_then(|x| serde_json::from_str::<Value>(x).ok());
        let Some(mut chunk) = chunk else {
            out.push_str(line);
            continue;
        };
        if let Some(dgem) = chunk.get_mut("dgem").filter(|x| x.is_object()) {
            patch(dgem, d, &shape);
        }
        if let Some(content) = chunk.pointer_mut("/choices/0/delta/content") {
            if content.is_string() {
                *content = json!(if placed { "" } else { whole.as_str() });
                placed = true;
            }
        }
        out.push_str("data: ");
        out.push_str(&chunk.to_string());
        out.push('\n');
    }
    out
}

/// The System One reply `v` with `d`'s changes; a refused answer takes the
/// Jev shape ([`dgem_server::systemone::jev_answer`]) plus `abstained` and
/// `abstain_reason`.
pub fn systemone(mut v: Value, d: &Decision) -> Value {
    let shape = |_: &str, a: &AnswerOut| {
        let mut jev = dgem_server::systemone::jev_answer(a);
        if let (Some(m), Some(reason)) = (jev.as_object_mut(), &a.abstained) {
            m.insert("abstained".into(), json!(true));
            m.insert("abstain_reason".into(), json!(reason));
        }
        jev
    };
    patch(&mut v, d, &shape);
    v
}
