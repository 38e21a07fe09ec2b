//! One upstream reply check for the pass-through routes (issue 27): a 2xx
//! reply of `/v1/chat/completions` (its aliases, `"stream": true` included)
//! or `/v1/systemone` must answer the request, as a decision of `/api/*` and
//! `/mcp` must. The check is the one every decision goes through,
//! [`Decision::from_envelope`] (every asked id answered, exactly the
//! question's options, finite probabilities in [0, 1] summing to 1 within
//! 0.02, renormalized within it; a `refusal` entry an abstention with its
//! reason);
//! this module only finds the envelope in each route's wire form:
//!
//! * chat: the OpenAI `chat.completion` body read tolerantly
//!   ([`crate::envelope::parse_reply_value`]), or its `dgem` field for a structured
//!   (`response_format: json_schema`) reply;
//! * chat with `"stream": true`: the gateway reads the upstream reply whole
//!   before it answers (a decision is one chunk), so the assembled stream is
//!   checked before a byte is forwarded: the `delta.content` of every `data:`
//!   chunk joined (or the first chunk's `dgem`), then read as above;
//! * systemone: the Jev body, whose score probabilities are keyed by level
//!   index (`"0"`, `"1"`, …) and yes/no probabilities by `true`/`false`.
//!
//! A reply that fails is [`BackendError::BadReply`] naming the JSON path
//! (`decision reply at \`answers.u.probabilities\`: …`; `$` is the whole body),
//! which fails over like any retryable error, and is a 502 naming that path
//! when no backend is left. A request the gateway cannot read has no
//! [`Expectation`]: it is forwarded as it is, and the upstream's 4xx comes back.

use dgem_backend::BackendError;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideError, Decision};
use serde_json::{json, Map, Value};

use crate::envelope::parse_reply_value;

/// Pass-through path of the chat route (and of its aliases).
pub const CHAT_PATH: &str = "/v1/chat/completions";
/// Pass-through path of the System One route.
pub const SYSTEMONE_PATH: &str = "/v1/systemone";

/// What a 2xx reply of a pass-through route must answer: the request's
/// questions (ids and options), in the route's wire form.
#[derive(Debug, Clone)]
pub enum Expectation {
    /// `/v1/chat/completions`: a `chat.completion` body or its SSE chunks.
    Chat(ValidSchema),
    /// `/v1/systemone`: the Jev body.
    SystemOne(ValidSchema),
}

impl Expectation {
    /// The expectation of a request `body` on pass-through `path`, read as
    /// `dgem serve` reads it (with `defaults`); `None` for another path or a
    /// request the gateway cannot read (the upstream refuses it with a 4xx,
    /// which comes back as it is).
    pub fn of_request(path: &str, body: &[u8], defaults: &SchemaDefaults) -> Option<Self> {
        let req: Value = serde_json::from_slice(body).ok()?;
        match path {
            CHAT_PATH => dgem_server::chat::parse(&req, defaults)
                .ok()
                .map(|r| Self::Chat(r.schema)),
            SYSTEMONE_PATH => {
                let raw = dgem_server::systemone::jev_schema(req.as_object()?).ok()?;
                ValidSchema::from_value(&raw, defaults)
                    .ok()
                    .map(Self::SystemOne)
            }
            _ => None,
        }
    }

    /// Check a 2xx reply `body` (of `content_type`, if known) against the
    /// request. `Ok(None)`: the reply stands as sent; `Ok(Some(body))`: the
    /// check renormalized an answer or read a refusal as an abstention, and
    /// `body` is the reply with those changes made ([`crate::rewrite`]).
    ///
    /// # Errors
    /// [`BackendError::BadReply`] naming the JSON path of the first value that
    /// does not answer the request (`$` for a body that is not JSON).
    pub fn check(
        &self,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Option<Vec<u8>>, BackendError> {
        match self {
            Self::Chat(schema) => {
                let stream = is_event_stream(content_type, body);
                let read = if stream {
                    stream_envelope(body)?
                } else {
                    chat_envelope(schema, body)?
                };
                let d = decided(schema, &read)?;
                if !crate::rewrite::needs_rewrite(&d) {
                    return Ok(None);
                }
                Ok(Some(if stream {
                    let text = String::from_utf8_lossy(body);
                    crate::rewrite::chat_stream(&text, &read, &d).into_bytes()
                } else {
                    let v = json_body(body)?;
                    crate::rewrite::chat(v, &read, &d).to_string().into_bytes()
                }))
            }
            Self::SystemOne(schema) => {
                let v = json_body(body)?;
                let d = decided(schema, &systemone_envelope(schema, &v)?)?;
                if !crate::rewrite::needs_rewrite(&d) {
                    return Ok(None);
                }
                Ok(Some(
                    crate::rewrite::systemone(v, &d).to_string().into_bytes(),
                ))
            }
        }
    }
}

/// Read a 2xx chat reply `body` (of `content_type`, if known; a stream of
/// `data:` chunks is assembled first) as a decision for `schema`: the check of
/// the chat pass-through route and of every decision a [`RemoteDgem`]
/// makes (`/api/*`, `/mcp`).
///
/// # Errors
/// [`BackendError::BadReply`] naming the JSON path of the first value that
/// does not answer the request (`$` for a body that is not JSON).
///
/// [`RemoteDgem`]: crate::RemoteDgem
pub fn chat_decision(
    schema: &ValidSchema,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Decision, BackendError> {
    let envelope = if is_event_stream(content_type, body) {
        stream_envelope(body)?
    } else {
        chat_envelope(schema, body)?
    };
    decided(schema, &envelope)
}

/// A malformed reply at `path`.
fn bad(path: &str, what: impl std::fmt::Display) -> BackendError {
    BackendError::BadReply(format!("decision reply at `{path}`: {what}"))
}

fn json_body(body: &[u8]) -> Result<Value, BackendError> {
    // The body itself stays out of the message: a caller is never shown an
    // upstream's page (the log has the hop's error).
    // Strict: an `answers` that holds a key twice is refused, not read with
    // the last one winning (issue 38).
    dgem_core::json::parse_strict_slice(body).map_err(|e| bad("$", format!("not JSON ({e})")))
}

/// `Decision::from_envelope`, its failure as a [`BackendError`].
fn decided(schema: &ValidSchema, envelope: &Value) -> Result<Decision, BackendError> {
    Decision::from_envelope(schema, envelope).map_err(|e| match e {
        DecideError::Backend(b) => b,
        other => BackendError::BadReply(other.to_string()),
    })
}

/// `success: false` (the original server's failure shape) names the
/// upstream's own message rather than "no `answers`".
fn refused_by_upstream(v: &Value) -> Option<BackendError> {
    if v.get("success").and_then(Value::as_bool) != Some(false) {
        return None;
    }
    let message = v
        .get("error")
        .and_then(|e| e.get("message").or(Some(e)))
        .or_else(|| v.get("message"))
        .map_or_else(
            || "no message".to_string(),
            |m| m.as_str().map_or_else(|| m.to_string(), str::to_string),
        );
    Some(bad(
        "success",
        format!("the upstream reported `success: false`: {message}"),
    ))
}

/// The envelope of a non-streamed chat reply. An OpenAI refusal (a message
/// with `refusal` and no `content`) is every asked question's `refusal`: an
/// abstention with that reason.
fn chat_envelope(schema: &ValidSchema, body: &[u8]) -> Result<Value, BackendError> {
    let v = json_body(body)?;
    if let Some(e) = refused_by_upstream(&v) {
        return Err(e);
    }
    if let Some(d) = v.get("dgem").filter(|d| d.is_object()) {
        return Ok(d.clone());
    }
    let message = v.pointer("/choices/0/message");
    let refusal = message
        .and_then(|m| m.get("refusal"))
        .filter(|r| !r.is_null());
    let content = message
        .and_then(|m| m.get("content"))
        .filter(|c| !c.is_null());
    if let (Some(reason), None) = (refusal, content) {
        let answers: Map<String, Value> = schema
            .asked()
            .iter()
            .map(|q| (q.id.clone(), json!({"refusal": reason})))
            .collect();
        return Ok(json!({"answers": answers, "diagnostics": {}}));
    }
    parse_reply_value(v).map_err(|e| bad("choices[0].message.content", e.0))
}

/// Whether a reply is server-sent events (by its `content-type`, else by a
/// body opening with `data:`).
fn is_event_stream(content_type: Option<&str>, body: &[u8]) -> bool {
    content_type.is_some_and(|c| c.contains("text/event-stream"))
        || body.trim_ascii_start().starts_with(b"data:")
}

/// The envelope of a streamed chat reply: the first chunk's `dgem`, else the
/// `choices[0].delta.content` of every chunk joined.
fn stream_envelope(body: &[u8]) -> Result<Value, BackendError> {
    let text = std::str::from_utf8(body).map_err(|e| bad("$", format!("must be UTF-8 ({e})")))?;
    let mut content = String::new();
    let mut chunks = 0usize;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let path = format!("data[{chunks}]");
        let chunk: Value = dgem_core::json::parse_strict(data)
            .map_err(|e| bad(&path, format!("each chunk must be JSON ({e})")))?;
        chunks += 1;
        if let Some(e) = refused_by_upstream(&chunk) {
            return Err(e);
        }
        if let Some(d) = chunk.get("dgem").filter(|d| d.is_object()) {
            return Ok(d.clone());
        }
        match chunk.pointer("/choices/0/delta/content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => content.push_str(s),
            Some(other) => {
                return Err(bad(
                    &format!("{path}.choices[0].delta.content"),
                    format!("must be a string. Given: {other}"),
                ))
            }
        }
    }
    if chunks == 0 {
        return Err(bad("$", "a stream with no `data:` chunk"));
    }
    let whole = json!({"choices": [{"message": {"content": content}}]});
    parse_reply_value(whole).map_err(|e| bad("choices[0].delta.content", e.0))
}

/// The `{answers, diagnostics}` envelope of a Jev reply: score probabilities
/// keyed by level index are keyed by the level's name (an index out of range
/// is kept, and refused by the check as a key that is not an option).
fn systemone_envelope(schema: &ValidSchema, v: &Value) -> Result<Value, BackendError> {
    if let Some(e) = refused_by_upstream(v) {
        return Err(e);
    }
    let answers = v
        .get("answers")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("answers", "missing or not an object"))?;
    let mut out = answers.clone();
    for q in schema.asked() {
        let Some(probs) = out
            .get_mut(&q.id)
            .and_then(|a| a.get_mut("probabilities"))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        *probs = dgem_core::kinds::reply::jev_probabilities_by_name(q, std::mem::take(probs));
    }
    Ok(json!({
        "answers": out,
        "diagnostics": v.get("diagnostics").cloned().unwrap_or(Value::Null),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn chat_expectation() -> Expectation {
        let schema = json!({"questions": [{"id": "u", "type": "boolean"}]});
        let req = json!({"messages": [
            {"role": "system", "content": schema.to_string()},
            {"role": "user", "content": "{\"ticket\": \"x\"}"},
        ]});
        Expectation::of_request(
            CHAT_PATH,
            req.to_string().as_bytes(),
            &SchemaDefaults::default(),
        )
        .expect("a chat request")
    }

    fn reply(content: &Value) -> Vec<u8> {
        json!({"choices": [{"message": {"role": "assistant", "content": content.to_string()}}]})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn chat_replies_are_checked_against_the_request() {
        let e = chat_expectation();
        let good = json!({"answers": {"u": {"probabilities": {"yes": 0.9, "no": 0.1}}}});
        e.check(Some("application/json"), &reply(&good))
            .expect("valid");
        let err = e.check(None, b"not json at all").unwrap_err();
        assert!(err.to_string().contains("at `$`"), "{err}");
        let other = json!({"answers": {"v": {"probabilities": {"yes": 0.9, "no": 0.1}}}});
        let err = e.check(None, &reply(&other)).unwrap_err();
        assert!(err.to_string().contains("`answers.u`"), "{err}");
    }

    #[test]
    fn success_false_keeps_the_upstream_message() {
        let e = chat_expectation();
        let err = e
            .check(None, br#"{"success": false, "error": "model crashed"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("model crashed"), "{err}");
    }

    #[test]
    fn an_openai_refusal_is_an_abstention() {
        let schema = ValidSchema::from_value(
            &json!({"questions": [{"id": "u", "type": "boolean"}]}),
            &SchemaDefaults::default(),
        )
        .unwrap();
        let body = json!({"choices": [{"message": {"role": "assistant", "content": null, "refusal": "I cannot judge this"}}]});
        let d = chat_decision(&schema, None, body.to_string().as_bytes()).expect("an abstention");
        let u = d.answers["u"].as_ref().expect("answered");
        assert_eq!(
            u.abstained.as_deref(),
            Some("the upstream refused: I cannot judge this")
        );
    }

    #[test]
    fn a_stream_is_checked_whole() {
        let e = chat_expectation();
        let env = json!({"answers": {"u": {"probabilities": {"yes": 0.5, "no": 0.5}}}}).to_string();
        let (a, b) = env.split_at(10);
        let chunk = |c: &str| json!({"choices": [{"delta": {"content": c}}]});
        let sse = format!(
            "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            chunk(a),
            chunk(b)
        );
        e.check(Some("text/event-stream"), sse.as_bytes())
            .expect("valid");
        let bad_env = env.replace("0.5}", "0.1}");
        let sse = format!("data: {}\n\ndata: [DONE]\n\n", chunk(&bad_env));
        let err = e.check(None, sse.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("answers.u.probabilities"), "{err}");
        let err = e.check(None, b"data: nope\n\n").unwrap_err();
        assert!(err.to_string().contains("`data[0]`"), "{err}");
    }

    #[test]
    fn systemone_score_probabilities_keyed_by_index() {
        let req = json!({"state": "x", "questions": {
            "s": {"type": "score", "question": "how bad?", "levels": ["low", "mid", "high"]},
            "u": {"type": "noul", "question": "urgent?"},
        }});
        let e = Expectation::of_request(
            SYSTEMONE_PATH,
            req.to_string().as_bytes(),
            &SchemaDefaults::default(),
        )
        .expect("a systemone request has an expectation");
        let good = json!({"answers": {
            "s": {"type": "score", "probabilities": {"0": 0.2, "1": 0.3, "2": 0.5}},
            "u": {"type": "noul", "probabilities": {"true": 0.7, "false": 0.3}},
        }});
        e.check(None, good.to_string().as_bytes()).expect("valid");
        let bad = json!({"answers": {
            "s": {"type": "score", "probabilities": {"0": 0.2, "1": 0.3, "7": 0.5}},
            "u": {"type": "noul", "probabilities": {"true": 0.7, "false": 0.3}},
        }});
        let err = e.check(None, bad.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("answers.s.probabilities"), "{err}");
    }
}
