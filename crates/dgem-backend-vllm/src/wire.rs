//! The vLLM wire format of serving.md §5: request bodies and reply parsing.
//!
//! Pure functions, so the exact JSON of a read can be tested without a server.
//! A reply that lacks a field the read needs is an error naming that field,
//! never a silent default.

use std::collections::HashMap;

use dgem_backend::BackendError;
use dgem_core::slots::CanvasSlot;
use dgem_core::tokenizer::TokenId;
use dgem_core::SchemaError;
use serde_json::{json, Value};

use crate::config::{LOGPROB_TOKEN_IDS_MAX, TOP_LOGPROBS};

/// vLLM path of a plain read (§5.1).
pub const CHAT_PATH: &str = "/v1/chat/completions";
/// vLLM path of a continuation read or a text thought (§5.2, §5.3).
pub const COMPLETIONS_PATH: &str = "/v1/completions";

/// How a read's prompt travels.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Chat messages through the model's chat template (`/v1/chat/completions`).
    Chat {
        /// The `messages` array.
        messages: Value,
        /// `chat_template_kwargs.enable_thinking`.
        enable_thinking: bool,
    },
    /// Token ids (`/v1/completions`), so no chat template can alter them.
    Tokens(Vec<TokenId>),
}

impl Prompt {
    /// The vLLM path this prompt goes to.
    pub fn path(&self) -> &'static str {
        match self {
            Self::Chat { .. } => CHAT_PATH,
            Self::Tokens(_) => COMPLETIONS_PATH,
        }
    }
}

/// Everything one structured read sends (§5.1/§5.2).
#[derive(Debug, Clone, Copy)]
pub struct ReadSpec<'a> {
    /// Served model name.
    pub model: &'a str,
    /// The prompt.
    pub prompt: &'a Prompt,
    /// Tokens in the answer template (`max_tokens` = this + 1).
    pub template_len: usize,
    /// The seeded canvas; its length is the canvas width.
    pub canvas: &'a [TokenId],
    /// Sorted, distinct label ids of every slot in the read.
    pub label_ids: &'a [TokenId],
    /// `diffusion_max_steps`.
    pub steps: u32,
    /// `diffusion_pinned` (only when `steps > 1`).
    pub pinned: Option<&'a [usize]>,
    /// `diffusion_constrained`.
    pub constrained: bool,
}

/// The sorted, distinct label ids of `slots` (`logprob_token_ids`).
///
/// # Errors
/// [`SchemaError`] on `questions` when more than 128 ids would be sent.
pub fn label_id_set(slots: &[CanvasSlot]) -> Result<Vec<TokenId>, SchemaError> {
    let mut ids: Vec<TokenId> = slots
        .iter()
        .flat_map(|s| s.label_ids.iter().copied())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() > LOGPROB_TOKEN_IDS_MAX {
        return Err(SchemaError::new(
            "questions",
            format!(
                "one read would ask vLLM for {} label ids; `logprob_token_ids` holds at most {LOGPROB_TOKEN_IDS_MAX} (set `chunk_rows` or mark questions `alone`)",
                ids.len()
            ),
        ));
    }
    Ok(ids)
}

/// Canvas positions that are not slots (`diffusion_pinned`, §4.7).
pub fn pinned_positions(width: usize, slots: &[CanvasSlot]) -> Vec<usize> {
    (0..width)
        .filter(|p| !slots.iter().any(|s| s.pos == *p))
        .collect()
}

/// The JSON body of one read.
pub fn read_body(spec: &ReadSpec<'_>) -> Value {
    let mut xargs = json!({
        "diffusion_seed_canvas": spec.canvas,
        "diffusion_canvas_length": spec.canvas.len(),
        "diffusion_max_steps": spec.steps,
        "diffusion_read_only": true,
    });
    if let Some(p) = spec.pinned {
        xargs["diffusion_pinned"] = json!(p);
    }
    if spec.constrained {
        xargs["diffusion_constrained"] = json!(true);
    }
    match spec.prompt {
        Prompt::Chat {
            messages,
            enable_thinking,
        } => json!({
            "model": spec.model,
            "messages": messages,
            "max_tokens": spec.template_len + 1,
            "logprobs": true,
            "top_logprobs": TOP_LOGPROBS,
            "logprob_token_ids": spec.label_ids,
            "return_tokens_as_token_ids": true,
            "chat_template_kwargs": {"enable_thinking": enable_thinking},
            "vllm_xargs": xargs,
        }),
        Prompt::Tokens(ids) => json!({
            "model": spec.model,
            "prompt": ids,
            "max_tokens": spec.template_len + 1,
            "logprobs": TOP_LOGPROBS,
            "logprob_token_ids": spec.label_ids,
            "return_tokens_as_token_ids": true,
            "vllm_xargs": xargs,
        }),
    }
}

/// The JSON body of a text thought (§5.3 `think()`).
pub fn think_body(model: &str, prompt: &[TokenId], budget: u32, close: &[TokenId]) -> Value {
    json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": budget,
        "logprobs": 0,
        "return_tokens_as_token_ids": true,
        "stop_token_ids": close,
    })
}

/// The JSON body of a thought about an image state (§5.3 `think_chat()`):
/// the chat route with thinking on, token ids back, stopped at the close tag.
pub fn think_chat_body(model: &str, messages: &Value, budget: u32, close: &[TokenId]) -> Value {
    json!({
        "model": model,
        "messages": messages,
        "max_tokens": budget,
        "logprobs": true,
        "top_logprobs": 0,
        "return_tokens_as_token_ids": true,
        "stop_token_ids": close,
        "chat_template_kwargs": {"enable_thinking": true},
    })
}

fn malformed(what: impl std::fmt::Display) -> BackendError {
    BackendError::Model(format!("malformed vLLM reply: {what}"))
}

/// Parse `token_id:<N>`.
///
/// # Errors
/// [`BackendError::Model`] for any other text.
pub fn parse_token(s: &str) -> Result<TokenId, BackendError> {
    s.strip_prefix("token_id:")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            malformed(format!(
                "expected a token written `token_id:<N>`, got `{s}`"
            ))
        })
}

/// What one read returned.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadReply {
    /// For each requested position, the returned `{token id: logprob}` set.
    pub tops: Vec<HashMap<TokenId, f64>>,
    /// `usage.prompt_tokens`, when reported.
    pub prompt_tokens: Option<usize>,
}

fn logprob(v: &Value, at: &str) -> Result<f64, BackendError> {
    v.as_f64()
        .filter(|x| !x.is_nan())
        .ok_or_else(|| malformed(format!("`{at}` must be a number, got {v}")))
}

/// Parse a read reply and take the top sets at `positions` (§5.1 chat rows or
/// §5.2 completion dicts).
///
/// # Errors
/// [`BackendError::Model`] naming the missing or mistyped field, or a position
/// past the returned rows.
pub fn parse_read(
    path: &str,
    reply: &Value,
    positions: &[usize],
) -> Result<ReadReply, BackendError> {
    let lp = reply
        .pointer("/choices/0/logprobs")
        .filter(|v| v.is_object())
        .ok_or_else(|| malformed("`choices[0].logprobs` is missing"))?;
    let rows = if path == CHAT_PATH {
        lp.get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("`choices[0].logprobs.content` is missing"))?
    } else {
        lp.get("top_logprobs")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("`choices[0].logprobs.top_logprobs` is missing"))?
    };
    let mut tops = Vec::with_capacity(positions.len());
    for &pos in positions {
        let row = rows.get(pos).ok_or_else(|| {
            malformed(format!(
                "slot position {pos} but only {} rows came back",
                rows.len()
            ))
        })?;
        let mut top = HashMap::new();
        if path == CHAT_PATH {
            let entries = row
                .get("top_logprobs")
                .and_then(Value::as_array)
                .ok_or_else(|| malformed(format!("row {pos} has no `top_logprobs` list")))?;
            for e in entries {
                let t = e
                    .get("token")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed(format!("row {pos}: an entry has no `token`")))?;
                let v = e.get("logprob").unwrap_or(&Value::Null);
                top.insert(parse_token(t)?, logprob(v, "logprob")?);
            }
        } else {
            let entries = row
                .as_object()
                .ok_or_else(|| malformed(format!("`top_logprobs[{pos}]` must be an object")))?;
            for (t, v) in entries {
                top.insert(
                    parse_token(t)?,
                    logprob(v, &format!("top_logprobs[{pos}]"))?,
                );
            }
        }
        if top.is_empty() {
            return Err(malformed(format!("row {pos} returned no logprobs")));
        }
        tops.push(top);
    }
    let prompt_tokens = reply
        .pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok());
    Ok(ReadReply {
        tops,
        prompt_tokens,
    })
}

/// Token ids of a text thought (`choices[0].logprobs.tokens`), cut at the first
/// `close_first` id. Returns `(ids, closed)`.
///
/// # Errors
/// [`BackendError::Model`] when `tokens` is missing or holds something else.
pub fn parse_think(
    reply: &Value,
    close_first: Option<TokenId>,
) -> Result<(Vec<TokenId>, bool), BackendError> {
    let tokens = reply
        .pointer("/choices/0/logprobs/tokens")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("`choices[0].logprobs.tokens` is missing"))?;
    let mut ids = Vec::with_capacity(tokens.len());
    for t in tokens {
        let s = t
            .as_str()
            .ok_or_else(|| malformed(format!("a thought token must be a string, got {t}")))?;
        let id = parse_token(s)?;
        if Some(id) == close_first {
            return Ok((ids, true));
        }
        ids.push(id);
    }
    Ok((ids, false))
}

/// Token ids of a chat-route thought (`choices[0].logprobs.content[*].token`):
/// a leading `open` the model wrote is dropped, and the ids are cut at the
/// first `close_first` id. Returns `(ids, closed)`.
///
/// # Errors
/// [`BackendError::Model`] when `content` is missing or a token is not `token_id:<N>`.
pub fn parse_think_chat(
    reply: &Value,
    open: &[TokenId],
    close_first: Option<TokenId>,
) -> Result<(Vec<TokenId>, bool), BackendError> {
    let content = reply
        .pointer("/choices/0/logprobs/content")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("`choices[0].logprobs.content` is missing"))?;
    let mut ids = Vec::with_capacity(content.len());
    for c in content {
        let s = c
            .get("token")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(format!("a thought entry needs a string `token`, got {c}")))?;
        ids.push(parse_token(s)?);
    }
    if !open.is_empty() && ids.starts_with(open) {
        ids.drain(..open.len());
    }
    match ids.iter().position(|&t| Some(t) == close_first) {
        Some(at) => {
            ids.truncate(at);
            Ok((ids, true))
        }
        None => Ok((ids, false)),
    }
}

#[cfg(test)]
mod tests;
