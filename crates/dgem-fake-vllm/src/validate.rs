//! Request validation, field by field, as vLLM does it (serving.md §5.1–5.4).
//! Every error names the field, what is allowed and what was received.

use serde_json::{Map, Value};

use crate::{FakeConfig, ReadView};

/// What an accepted request asks for.
#[derive(Debug, Clone)]
pub(crate) enum Checked {
    /// A structured read (has `vllm_xargs`).
    Read(ReadView),
    /// A thought generation (no `vllm_xargs`, has `stop_token_ids`).
    Think {
        /// `stop_token_ids`.
        stop: Vec<u32>,
        /// `max_tokens`.
        max_tokens: usize,
    },
}

const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "logprobs",
    "top_logprobs",
    "logprob_token_ids",
    "return_tokens_as_token_ids",
    "chat_template_kwargs",
    "vllm_xargs",
    "stop_token_ids",
];
const COMPLETION_FIELDS: &[&str] = &[
    "model",
    "prompt",
    "max_tokens",
    "logprobs",
    "logprob_token_ids",
    "return_tokens_as_token_ids",
    "vllm_xargs",
    "stop_token_ids",
];
const XARGS: &[&str] = &[
    "diffusion_seed_canvas",
    "diffusion_canvas_length",
    "diffusion_max_steps",
    "diffusion_read_only",
    "diffusion_pinned",
    "diffusion_constrained",
];

fn uint(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a non-negative integer, got {v}")),
    }
}

fn required<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a Value, String> {
    obj.get(key).ok_or_else(|| format!("`{key}` is required"))
}

fn boolean(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a boolean, got {v}")),
    }
}

fn ids(v: &Value, key: &str, vocab: u32) -> Result<Vec<u32>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| format!("`{key}` must be a list of token ids, got {v}"))?;
    arr.iter()
        .map(|x| {
            x.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n < vocab)
                .ok_or_else(|| format!("`{key}`: ids must be in [0, {vocab}), got {x}"))
        })
        .collect()
}

/// Check one request body against the route's schema.
pub(crate) fn request(cfg: &FakeConfig, path: &str, body: &Value) -> Result<Checked, String> {
    let obj = body
        .as_object()
        .ok_or_else(|| format!("request body must be a JSON object, got {body}"))?;
    let chat = path == "/v1/chat/completions";
    let allowed = if chat { CHAT_FIELDS } else { COMPLETION_FIELDS };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "unknown field `{k}` (allowed: {})",
            allowed.join(", ")
        ));
    }
    let model = required(obj, "model")?;
    if model.as_str() != Some(cfg.model.as_str()) {
        return Err(format!(
            "The model `{model}` does not exist (serving `{}`)",
            cfg.model
        ));
    }
    let max_tokens = uint(obj, "max_tokens")?
        .filter(|&n| n > 0)
        .ok_or("`max_tokens` is required and must be a positive integer")?;
    if obj.get("return_tokens_as_token_ids") != Some(&Value::Bool(true)) {
        return Err("`return_tokens_as_token_ids` must be true for this fake".into());
    }
    let prompt = if chat {
        chat_prompt(obj)?
    } else {
        let p = ids(required(obj, "prompt")?, "prompt", cfg.vocab)?;
        if p.is_empty() {
            return Err("`prompt` must not be empty".into());
        }
        p.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
    };
    let top = if chat {
        if boolean(obj, "logprobs")? != Some(true) {
            return Err("`logprobs` must be true".into());
        }
        uint(obj, "top_logprobs")?.ok_or("`top_logprobs` is required")?
    } else {
        uint(obj, "logprobs")?.ok_or("`logprobs` is required and must be an integer")?
    };
    if top > cfg.max_logprobs {
        return Err(format!(
            "requested logprobs {top} exceed --max-logprobs {}",
            cfg.max_logprobs
        ));
    }
    let label_ids = match obj.get("logprob_token_ids") {
        Some(v) => ids(v, "logprob_token_ids", cfg.vocab)?,
        None => Vec::new(),
    };
    if label_ids.len() > cfg.logprob_token_ids_max {
        return Err(format!(
            "`logprob_token_ids` holds at most {} ids, got {}",
            cfg.logprob_token_ids_max,
            label_ids.len()
        ));
    }
    let stop = match obj.get("stop_token_ids") {
        Some(v) => ids(v, "stop_token_ids", cfg.vocab)?,
        None => Vec::new(),
    };
    let Some(xargs) = obj.get("vllm_xargs") else {
        if stop.is_empty() {
            return Err(
                "a request without `vllm_xargs` must be a thought with `stop_token_ids`".into(),
            );
        }
        return Ok(Checked::Think {
            stop,
            max_tokens: usize::try_from(max_tokens).unwrap_or(usize::MAX),
        });
    };
    let (canvas, constrained) = xargs_fields(cfg, xargs, &label_ids, max_tokens)?;
    if top != 20 {
        return Err(format!("reads must ask for 20 top logprobs, got {top}"));
    }
    Ok(Checked::Read(ReadView {
        path: path.to_owned(),
        canvas,
        label_ids,
        constrained,
        prompt,
    }))
}

fn chat_prompt(obj: &Map<String, Value>) -> Result<String, String> {
    let msgs = required(obj, "messages")?
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or("`messages` must be a non-empty list")?;
    let mut text = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        if !matches!(role, Some("system" | "user" | "assistant")) {
            return Err(format!(
                "`messages[{i}].role` must be system, user or assistant"
            ));
        }
        match m.get("content") {
            Some(Value::String(s)) => text.push(s.clone()),
            Some(Value::Array(parts)) => {
                check_parts(i, parts)?;
                text.push(m["content"].to_string());
            }
            other => {
                return Err(format!(
                    "`messages[{i}].content` must be a string or a list of parts, got {other:?}"
                ))
            }
        }
        if let Some(k) = m
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "role" && *k != "content"))
        {
            return Err(format!("unknown field `messages[{i}].{k}`"));
        }
    }
    if let Some(kw) = obj.get("chat_template_kwargs") {
        let kw = kw
            .as_object()
            .ok_or("`chat_template_kwargs` must be an object")?;
        if let Some(k) = kw.keys().find(|k| *k != "enable_thinking") {
            return Err(format!("unknown chat template kwarg `{k}`"));
        }
        boolean(kw, "enable_thinking")?;
    }
    Ok(text.join("\n"))
}

fn xargs_fields(
    cfg: &FakeConfig,
    xargs: &Value,
    label_ids: &[u32],
    max_tokens: u64,
) -> Result<(Vec<u32>, bool), String> {
    let x = xargs.as_object().ok_or("`vllm_xargs` must be an object")?;
    if let Some(k) = x.keys().find(|k| !XARGS.contains(&k.as_str())) {
        return Err(format!(
            "unknown diffusion argument `{k}` (allowed: {})",
            XARGS.join(", ")
        ));
    }
    let width = uint(x, "diffusion_canvas_length")?
        .filter(|&n| n > 0)
        .ok_or("`diffusion_canvas_length` is required and must be a positive integer")?;
    let width = usize::try_from(width).unwrap_or(usize::MAX);
    if width > cfg.canvas_length {
        return Err(format!(
            "`diffusion_canvas_length` must be no larger than the served canvas {}, got {width}",
            cfg.canvas_length
        ));
    }
    let canvas = ids(
        required(x, "diffusion_seed_canvas")?,
        "diffusion_seed_canvas",
        cfg.vocab,
    )?;
    if canvas.len() != width {
        return Err(format!(
            "`diffusion_seed_canvas` must hold exactly {width} ids, got {}",
            canvas.len()
        ));
    }
    if max_tokens > width as u64 {
        return Err(format!(
            "`max_tokens` {max_tokens} exceeds the canvas {width}"
        ));
    }
    match x.get("diffusion_max_steps") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|s| s > 0) => {}
        other => {
            return Err(format!(
                "`diffusion_max_steps` must be a positive integer, got {other:?}"
            ))
        }
    }
    if boolean(x, "diffusion_read_only")? != Some(true) {
        return Err("`diffusion_read_only` must be true for a structured read".into());
    }
    if let Some(p) = x.get("diffusion_pinned") {
        let pins = p
            .as_array()
            .ok_or("`diffusion_pinned` must be a list of canvas positions")?;
        if let Some(bad) = pins
            .iter()
            .find(|v| v.as_u64().is_none_or(|n| n >= width as u64))
        {
            return Err(format!(
                "`diffusion_pinned` positions must lie in [0, {width}), got {bad}"
            ));
        }
    }
    let constrained = boolean(x, "diffusion_constrained")?.unwrap_or(false);
    if constrained && label_ids.is_empty() {
        return Err("`diffusion_constrained` requires `logprob_token_ids`".into());
    }
    Ok((canvas, constrained))
}

/// Content parts as vLLM's chat parser takes them: `text` parts with a string
/// `text`, `image_url` parts with `image_url.url` an inline image.
fn check_parts(i: usize, parts: &[Value]) -> Result<(), String> {
    for (j, p) in parts.iter().enumerate() {
        let at = format!("`messages[{i}].content[{j}]`");
        match p.get("type").and_then(Value::as_str) {
            Some("text") if p.get("text").is_some_and(Value::is_string) => {}
            Some("image_url") => {
                let url = p.pointer("/image_url/url").and_then(Value::as_str);
                if !url.is_some_and(|u| u.starts_with("data:image/")) {
                    return Err(format!("{at}: `image_url.url` must be a data:image/... URL"));
                }
            }
            other => {
                return Err(format!(
                    "{at}: a part must be `text` with a string `text` or `image_url`, got type {other:?}"
                ))
            }
        }
    }
    Ok(())
}
