//! The chat route's reply: the OpenAI `chat.completion` body of a decision,
//! and the same reply as server-sent events.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::decide::{self, Timed};
use crate::error::{ApiError, ErrorKind};
use crate::structured::StructuredOutput;

/// The OpenAI `chat.completion` body whose `content` is the pretty-printed
/// envelope, plus `extra` top-level envelope keys (the `cascade` summary).
/// With `structured`, the content is the requested object (compact JSON)
/// and the envelope is the top-level `dgem` field.
pub fn response_body(
    model: &str,
    t: &Timed,
    extra: Option<serde_json::Map<String, Value>>,
    structured: Option<&StructuredOutput>,
) -> Result<Value, ApiError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut envelope = t.decision.envelope();
    if let (Some(extra), Some(m)) = (extra, envelope.as_object_mut()) {
        m.extend(extra);
    }
    let written = match structured {
        Some(s) => serde_json::to_string(&s.reply_object(&t.decision.answers)),
        None => serde_json::to_string_pretty(&envelope),
    };
    let content = written.map_err(|e| {
        ApiError::new(
            ErrorKind::Internal,
            format!("could not write the envelope: {e}"),
        )
    })?;
    let n = decide::output_tokens(&t.decision);
    let prompt = t.decision.diagnostics.prompt_tokens.unwrap_or(0);
    let mut body = json!({
        "id": format!("chatcmpl-{}", now.as_millis()),
        "object": "chat.completion",
        "created": now.as_secs(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
    });
    if let (Some(_), Some(m)) = (structured, body.as_object_mut()) {
        m.insert("dgem".into(), envelope);
    }
    Ok(body)
}

/// The same reply as OpenAI `chat.completion.chunk` server-sent events: one
/// chunk with the role and the whole envelope as content (a decision is read
/// at once, not token by token), one with `finish_reason: "stop"`, a usage
/// chunk when `include_usage`, then `data: [DONE]`.
pub fn stream_events(body: &Value, include_usage: bool) -> Vec<String> {
    let base = |choices: Value| {
        json!({
            "id": body["id"],
            "object": "chat.completion.chunk",
            "created": body["created"],
            "model": body["model"],
            "choices": choices,
        })
    };
    let content = body["choices"][0]["message"]["content"].clone();
    let mut first = base(
        json!([{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": null}]),
    );
    if let (Some(dgem), Some(m)) = (body.get("dgem"), first.as_object_mut()) {
        m.insert("dgem".into(), dgem.clone());
    }
    let mut events = vec![
        first,
        base(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
    ];
    if include_usage {
        let mut last = base(json!([]));
        if let Some(m) = last.as_object_mut() {
            m.insert("usage".into(), body["usage"].clone());
        }
        events.push(last);
    }
    let mut out: Vec<String> = events.iter().map(Value::to_string).collect();
    out.push("[DONE]".to_string());
    out
}
