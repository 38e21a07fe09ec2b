//! Stage 2 over an OpenAI-compatible `/chat/completions` endpoint.
//!
//! Structured outputs (`response_format: json_schema`, strict) keep the reply
//! inside the escalated slots' allowed values on servers that enforce them
//! (vLLM, llama.cpp server, ollama, OpenAI, Gemini's OpenAI-compatible
//! endpoint); [`crate::run`] still checks every value.

use async_trait::async_trait;
use serde_json::{json, Value};
use tracing::Instrument as _;

use super::{client, excerpt, parse_object, Secret, Stage2, Stage2Reply, Stage2Request};
use crate::error::Stage2Error;

/// Provider name in errors and summaries.
pub const NAME: &str = "openai";
/// Env var holding the API key, by default.
pub const DEFAULT_KEY_ENV: &str = "DGEM_CASCADE_API_KEY";
/// Env var read when the configured one is unset.
pub const FALLBACK_KEY_ENV: &str = "OPENAI_API_KEY";
/// Env var naming the model used when a request names none.
pub const MODEL_ENV: &str = "DGEM_CASCADE_MODEL";
/// `json_schema.name` sent with every request.
pub const SCHEMA_NAME: &str = "stage2_decision";

/// A Stage-2 provider speaking the OpenAI chat-completions protocol.
#[derive(Debug, Clone)]
pub struct OpenAiChat {
    base_url: String,
    api_key: Option<Secret>,
    default_model: String,
    client: reqwest::Client,
}

impl OpenAiChat {
    /// A provider for `base_url` (e.g. `http://127.0.0.1:8000/v1`; a trailing
    /// `/` is dropped), without a key or a default model.
    pub fn new(base_url: &str) -> Self {
        Self {
            base_url: base_url.trim().trim_end_matches('/').to_string(),
            api_key: None,
            default_model: String::new(),
            client: client(),
        }
    }

    /// A provider for `base_url` with its key from the env var named
    /// `key_env` (default [`DEFAULT_KEY_ENV`]), else [`FALLBACK_KEY_ENV`], and
    /// its default model from [`MODEL_ENV`].
    pub fn from_env(base_url: &str, key_env: Option<&str>) -> Self {
        let primary = key_env
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .unwrap_or(DEFAULT_KEY_ENV);
        let model = std::env::var(MODEL_ENV).unwrap_or_default();
        Self::new(base_url)
            .with_key(Secret::from_env(&[primary, FALLBACK_KEY_ENV]))
            .with_default_model(&model)
    }

    /// Send `Authorization: Bearer <key>` (none when `None`).
    pub fn with_key(mut self, key: Option<Secret>) -> Self {
        self.api_key = key;
        self
    }

    /// Model used when a request names none.
    pub fn with_default_model(mut self, model: &str) -> Self {
        self.default_model = model.trim().to_string();
        self
    }

    /// The base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The request body for `req` asking `model`.
    pub fn body(model: &str, req: &Stage2Request) -> Value {
        let content = if req.images.is_empty() {
            Value::String(req.prompt.clone())
        } else {
            let mut parts: Vec<Value> = req
                .images
                .iter()
                .map(|url| json!({"type": "image_url", "image_url": {"url": url}}))
                .collect();
            parts.push(json!({"type": "text", "text": req.prompt}));
            Value::Array(parts)
        };
        json!({
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": SCHEMA_NAME,
                    "strict": true,
                    "schema": req.response_schema,
                },
            },
        })
    }
}

#[async_trait]
impl Stage2 for OpenAiChat {
    fn name(&self) -> &str {
        NAME
    }

    async fn resolve(&self, req: &Stage2Request) -> Result<Stage2Reply, Stage2Error> {
        let model = if req.model.trim().is_empty() {
            self.default_model.clone()
        } else {
            req.model.trim().to_string()
        };
        if model.is_empty() {
            return Err(Stage2Error::Config {
                provider: NAME.into(),
                field: "cascade_model".into(),
                allowed: format!("a model name (in the request or in {MODEL_ENV})"),
                got: "\"\"".into(),
            });
        }
        let url = format!("{}/chat/completions", self.base_url);
        let span = tracing::info_span!("stage2_openai", %url, %model, images = req.images.len());
        async {
            let mut call = self
                .client
                .post(&url)
                .timeout(req.timeout)
                .json(&Self::body(&model, req));
            if let Some(key) = &self.api_key {
                call = call.bearer_auth(key.expose());
            }
            let resp = call.send().await.map_err(|e| Stage2Error::Transport {
                provider: NAME.into(),
                url: url.clone(),
                message: e.to_string(),
            })?;
            let status = resp.status();
            let text = resp.text().await.map_err(|e| Stage2Error::Transport {
                provider: NAME.into(),
                url: url.clone(),
                message: e.to_string(),
            })?;
            if !status.is_success() {
                tracing::warn!(status = status.as_u16(), "stage-2 call refused");
                return Err(Stage2Error::Status {
                    provider: NAME.into(),
                    model: model.clone(),
                    status: status.as_u16(),
                    body: excerpt(&text),
                });
            }
            let reply_err = |field: &str, got: String| Stage2Error::Reply {
                provider: NAME.into(),
                field: field.into(),
                allowed: "a JSON chat-completion with string content".into(),
                got,
            };
            let v: Value =
                serde_json::from_str(&text).map_err(|_| reply_err("body", excerpt(&text)))?;
            let content = v
                .pointer("/choices/0/message/content")
                .and_then(Value::as_str)
                .ok_or_else(|| reply_err("choices[0].message.content", excerpt(&text)))?;
            let slots = parse_object(NAME, "choices[0].message.content", content)?;
            let answered = v
                .get("model")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .unwrap_or(&model)
                .to_string();
            Ok(Stage2Reply {
                model: answered,
                slots,
            })
        }
        .instrument(span)
        .await
    }
}
