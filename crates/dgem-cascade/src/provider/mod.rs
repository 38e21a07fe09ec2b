//! Stage-2 providers: one trait, two HTTP implementations.
//!
//! * [`openai::OpenAiChat`] — any OpenAI-compatible `/chat/completions`
//!   server with structured outputs (vLLM, llama.cpp server, ollama, OpenAI,
//!   Gemini's OpenAI-compatible endpoint).
//! * [`vertex::VertexGemini`] — Gemini on Vertex AI `generateContent`, with
//!   model fallback.
//!
//! Keys and tokens live in [`Secret`], whose `Debug` never shows them.

pub mod openai;
pub mod vertex;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::Stage2Error;

/// Most characters of a response body kept in an error.
pub const BODY_EXCERPT_CHARS: usize = 300;

/// One Stage-2 call.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage2Request {
    /// Model asked for; empty lets the provider choose its default.
    pub model: String,
    /// The prompt text ([`crate::prompt::stage2_prompt`]).
    pub prompt: String,
    /// JSON Schema the reply must follow ([`crate::prompt::response_schema`]).
    pub response_schema: Value,
    /// Images, as `data:<mime>;base64,…` URIs or `http(s)://` URLs.
    pub images: Vec<String>,
    /// Time left for the whole call, retries and fallbacks included.
    pub timeout: Duration,
}

/// What Stage 2 answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage2Reply {
    /// The model that answered (after any fallback).
    pub model: String,
    /// The reply parsed as a JSON object: slot id → `{decision, confidence, explanation}`.
    pub slots: Map<String, Value>,
}

/// A model that answers escalated slots with structured JSON.
#[async_trait]
pub trait Stage2: Send + Sync + std::fmt::Debug {
    /// Provider name for logs and summaries (`openai`, `vertex`).
    fn name(&self) -> &str;

    /// Ask the model.
    ///
    /// # Errors
    /// [`Stage2Error`] when no model gave a usable JSON object.
    async fn resolve(&self, req: &Stage2Request) -> Result<Stage2Reply, Stage2Error>;
}

/// A key or token. `Debug` prints `<redacted>`; read it with [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret (surrounding whitespace and a `Bearer ` prefix dropped).
    pub fn new(s: impl Into<String>) -> Self {
        let s: String = s.into();
        Self(s.trim().trim_start_matches("Bearer ").trim().to_string())
    }

    /// The secret from the first of `vars` that is set and non-blank.
    pub fn from_env(vars: &[&str]) -> Option<Self> {
        vars.iter()
            .filter_map(|v| std::env::var(v).ok())
            .find(|v| !v.trim().is_empty())
            .map(Self::new)
    }

    /// The secret itself, for an `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The first [`BODY_EXCERPT_CHARS`] characters of `body`, `…` marking a cut.
pub fn excerpt(body: &str) -> String {
    let body = body.trim();
    if body.chars().count() <= BODY_EXCERPT_CHARS {
        return body.to_string();
    }
    let mut out: String = body.chars().take(BODY_EXCERPT_CHARS).collect();
    out.push('…');
    out
}

/// Parse model text as one JSON object, also when wrapped in a Markdown
/// fence (```` ```json … ``` ````).
///
/// # Errors
/// [`Stage2Error::Reply`] naming `field` when the text is not a JSON object.
pub fn parse_object(
    provider: &str,
    field: &str,
    text: &str,
) -> Result<Map<String, Value>, Stage2Error> {
    let bad = || Stage2Error::Reply {
        provider: provider.to_string(),
        field: field.to_string(),
        allowed: "a JSON object".into(),
        got: excerpt(text),
    };
    match serde_json::from_str::<Value>(unfence(text)) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(bad()),
    }
}

/// Text inside a ```` ``` ```` fence (language tag dropped), else `text` trimmed.
fn unfence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let body = rest.split_once('\n').map_or("", |(_, b)| b);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

/// An HTTP client without a total timeout (each call sets its own).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_and_plain_objects_parse() {
        let plain = parse_object("p", "f", r#"{"a": 1}"#).expect("plain");
        assert_eq!(plain["a"], 1);
        let fenced = parse_object("p", "f", "```json\n{\"a\": 2}\n```").expect("fenced");
        assert_eq!(fenced["a"], 2);
        let bare = parse_object("p", "f", "```\n{\"a\": 3}\n```\n").expect("bare fence");
        assert_eq!(bare["a"], 3);
        let err = parse_object("p", "content", "[1]").expect_err("not an object");
        assert_eq!(
            err.to_string(),
            "p: `content` of the reply must be a JSON object; got [1]"
        );
    }

    #[test]
    fn excerpts_are_bounded_and_secrets_hidden() {
        let long = "x".repeat(1000);
        assert_eq!(excerpt(&long).chars().count(), BODY_EXCERPT_CHARS + 1);
        assert_eq!(excerpt(" short "), "short");
        let s = Secret::new("Bearer sk-123");
        assert_eq!(s.expose(), "sk-123");
        assert_eq!(format!("{s:?}"), "<redacted>");
    }
}
