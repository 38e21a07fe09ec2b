//! Stage 2 on Gemini through Vertex AI `generateContent`.
//!
//! The response schema is sent as `generationConfig.responseSchema` in
//! Gemini's OpenAPI subset (see [`gemini_schema`]). Model names are cleaned
//! by [`sanitize_model`], and a model that is missing, over quota or failing
//! (HTTP 404, 429, 5xx) hands over to the next of [`FALLBACK_MODELS`]; the
//! reply names the model that answered. Both rules are the original dgem
//! cascade's.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{client, excerpt, parse_object, Secret, Stage2, Stage2Reply, Stage2Request};
use crate::error::Stage2Error;

/// Provider name in errors and summaries.
pub const NAME: &str = "vertex";
/// Vertex API base.
pub const DEFAULT_BASE: &str = "https://aiplatform.googleapis.com";
/// Location used when none is configured (the global endpoint).
pub const DEFAULT_LOCATION: &str = "global";
/// Model used when neither the request nor `DGEM_CASCADE_MODEL` names one.
pub const DEFAULT_MODEL: &str = "gemini-3.8-flash";
/// Models tried, in order, after the requested one fails with 404/429/5xx.
pub const FALLBACK_MODELS: [&str; 4] = [
    "gemini-3.8-flash",
    "gemini-3.7-flash",
    "gemini-3.5-flash-lite",
    "gemini-3-flash-preview",
];
/// Env vars naming the project, in the order read.
pub const PROJECT_ENV: [&str; 2] = ["GCP_PROJECT", "DGEM_GCP_PROJECT"];
/// Env var holding an OAuth2 access token for [`StaticToken::from_env`].
pub const TOKEN_ENV: &str = "GOOGLE_OAUTH_ACCESS_TOKEN";

/// Something that yields an OAuth2 access token (scope `cloud-platform`).
#[async_trait]
pub trait TokenSource: Send + Sync + std::fmt::Debug {
    /// A token valid now, without the `Bearer ` prefix.
    ///
    /// # Errors
    /// [`Stage2Error`] when no token can be had.
    async fn token(&self) -> Result<String, Stage2Error>;
}

/// A fixed access token. Tokens expire (about an hour for Google's); long
/// runs should pass a refreshing [`TokenSource`] instead.
#[derive(Debug, Clone)]
pub struct StaticToken(pub Secret);

impl StaticToken {
    /// The token in [`TOKEN_ENV`], if set.
    pub fn from_env() -> Option<Self> {
        Secret::from_env(&[TOKEN_ENV]).map(Self)
    }
}

#[async_trait]
impl TokenSource for StaticToken {
    async fn token(&self) -> Result<String, Stage2Error> {
        Ok(self.0.expose().to_string())
    }
}

/// The model to ask for `requested` (the original cascade's clean-up):
/// empty → `env_default` → [`DEFAULT_MODEL`]; `gemini-3.5-flash` →
/// `gemini-3.7-flash`; `gemini-3.1-flash-lite` → `gemini-3.5-flash-lite`;
/// any `gemini-1*` or `gemini-2*` (retired) → [`DEFAULT_MODEL`].
pub fn sanitize_model_with(requested: &str, env_default: Option<&str>) -> String {
    let mut m = requested.trim().to_ascii_lowercase();
    if m.is_empty() {
        m = env_default.unwrap_or("").trim().to_ascii_lowercase();
    }
    if m.is_empty() {
        return DEFAULT_MODEL.to_string();
    }
    match m.as_str() {
        "gemini-3.5-flash" => "gemini-3.7-flash".to_string(),
        "gemini-3.1-flash-lite" => "gemini-3.5-flash-lite".to_string(),
        _ if m.starts_with("gemini-1") || m.starts_with("gemini-2") => DEFAULT_MODEL.to_string(),
        _ => m,
    }
}

/// [`sanitize_model_with`] with the default from env `DGEM_CASCADE_MODEL`.
pub fn sanitize_model(requested: &str) -> String {
    let env = std::env::var(super::openai::MODEL_ENV).ok();
    sanitize_model_with(requested, env.as_deref())
}

/// Models to try for an already sanitized `model`: it, then
/// [`FALLBACK_MODELS`], without repeats.
pub fn model_chain(model: &str) -> Vec<String> {
    let mut chain = vec![model.to_string()];
    for m in FALLBACK_MODELS {
        if !chain.iter().any(|c| c == m) {
            chain.push(m.to_string());
        }
    }
    chain
}

/// A JSON Schema turned into Gemini's OpenAPI subset: `additionalProperties`
/// dropped (Gemini refuses it) and `type` names upper-cased (`OBJECT`,
/// `STRING`, `NUMBER`), at every depth.
pub fn gemini_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "additionalProperties")
                .map(|(k, v)| match (k.as_str(), v) {
                    ("type", Value::String(t)) => (k.clone(), json!(t.to_ascii_uppercase())),
                    // Property names are not schema keywords: keep them as given.
                    ("properties", Value::Object(props)) => (
                        k.clone(),
                        Value::Object(
                            props
                                .iter()
                                .map(|(name, s)| (name.clone(), gemini_schema(s)))
                                .collect(),
                        ),
                    ),
                    _ => (k.clone(), gemini_schema(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(gemini_schema).collect()),
        other => other.clone(),
    }
}

/// A `parts` entry for one image: `inlineData` for a `data:` URI, `fileData`
/// for an `http(s)://` or `gs://` URL (MIME type from the extension).
///
/// # Errors
/// [`Stage2Error::Config`] for anything else, or a `data:` URI that is not base64.
pub fn image_part(image: &str) -> Result<Value, Stage2Error> {
    let bad = |allowed: &str| Stage2Error::Config {
        provider: NAME.into(),
        field: "images".into(),
        allowed: allowed.into(),
        got: excerpt(&image.chars().take(60).collect::<String>()),
    };
    if let Some(rest) = image.strip_prefix("data:") {
        let (meta, data) = rest
            .split_once(',')
            .ok_or_else(|| bad("a data:<mime>;base64,<data> URI"))?;
        let mime = meta
            .strip_suffix(";base64")
            .ok_or_else(|| bad("a base64 data: URI (data:<mime>;base64,<data>)"))?;
        return Ok(json!({"inlineData": {"mimeType": mime, "data": data}}));
    }
    let lower = image.to_ascii_lowercase();
    if !["http://", "https://", "gs://"]
        .iter()
        .any(|p| lower.starts_with(p))
    {
        return Err(bad("a data: URI or an http(s):// or gs:// URL"));
    }
    let path = lower.split(['?', '#']).next().unwrap_or("");
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    let mime = match ext {
        "png" => "image/png",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        "pdf" => "application/pdf",
        _ => "image/jpeg",
    };
    Ok(json!({"fileData": {"mimeType": mime, "fileUri": image}}))
}

/// Gemini on Vertex AI as a Stage-2 provider.
#[derive(Debug, Clone)]
pub struct VertexGemini {
    base: String,
    project: String,
    location: String,
    token: Arc<dyn TokenSource>,
    client: reqwest::Client,
}

impl VertexGemini {
    /// A provider for `project` at [`DEFAULT_BASE`], location [`DEFAULT_LOCATION`].
    pub fn new(project: &str, token: Arc<dyn TokenSource>) -> Self {
        Self {
            base: DEFAULT_BASE.to_string(),
            project: project.trim().to_string(),
            location: DEFAULT_LOCATION.to_string(),
            token,
            client: client(),
        }
    }

    /// The project from `GCP_PROJECT`, else `DGEM_GCP_PROJECT`.
    pub fn project_from_env() -> Option<String> {
        PROJECT_ENV
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .map(|v| v.trim().to_string())
            .find(|v| !v.is_empty())
    }

    /// Post to another API base (tests, regional endpoints); trailing `/` dropped.
    pub fn with_base(mut self, base: &str) -> Self {
        self.base = base.trim().trim_end_matches('/').to_string();
        self
    }

    /// Use another location (`us-central1`, …); blank keeps the current one.
    pub fn with_location(mut self, location: &str) -> Self {
        if !location.trim().is_empty() {
            self.location = location.trim().to_string();
        }
        self
    }

    /// The `generateContent` URL for `model`.
    pub fn url(&self, model: &str) -> String {
        format!(
            "{}/v1/projects/{}/locations/{}/publishers/google/models/{model}:generateContent",
            self.base, self.project, self.location
        )
    }

    /// The request body for `req`.
    ///
    /// # Errors
    /// [`Stage2Error::Config`] for an image that is neither a data URI nor a URL.
    pub fn body(req: &Stage2Request) -> Result<Value, Stage2Error> {
        let mut parts = req
            .images
            .iter()
            .map(|i| image_part(i))
            .collect::<Result<Vec<_>, _>>()?;
        parts.push(json!({"text": req.prompt}));
        Ok(json!({
            "contents": [{"role": "user", "parts": parts}],
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseSchema": gemini_schema(&req.response_schema),
                "temperature": 0,
            },
        }))
    }

    /// One `generateContent` call to `model`, within `timeout`.
    async fn call(
        &self,
        model: &str,
        body: &Value,
        token: &str,
        timeout: Duration,
    ) -> Result<Map<String, Value>, Stage2Error> {
        let url = self.url(model);
        let transport = |e: reqwest::Error| Stage2Error::Transport {
            provider: NAME.into(),
            url: url.clone(),
            message: e.to_string(),
        };
        let resp = self
            .client
            .post(&url)
            .timeout(timeout)
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status();
        let text = resp.text().await.map_err(transport)?;
        if !status.is_success() {
            return Err(Stage2Error::Status {
                provider: NAME.into(),
                model: model.to_string(),
                status: status.as_u16(),
                body: excerpt(&text),
            });
        }
        let field = "candidates[0].content.parts[*].text";
        let v: Value = serde_json::from_str(&text).map_err(|_| Stage2Error::Reply {
            provider: NAME.into(),
            field: "body".into(),
            allowed: "a JSON generateContent response".into(),
            got: excerpt(&text),
        })?;
        let joined: String = v
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        if joined.trim().is_empty() {
            return Err(Stage2Error::Reply {
                provider: NAME.into(),
                field: field.into(),
                allowed: "non-empty JSON text".into(),
                got: excerpt(&text),
            });
        }
        parse_object(NAME, field, &joined)
    }
}

#[async_trait]
impl Stage2 for VertexGemini {
    fn name(&self) -> &str {
        NAME
    }

    async fn resolve(&self, req: &Stage2Request) -> Result<Stage2Reply, Stage2Error> {
        if self.project.is_empty() {
            return Err(Stage2Error::Config {
                provider: NAME.into(),
                field: "project".into(),
                allowed: "a Google Cloud project id (config, GCP_PROJECT or DGEM_GCP_PROJECT)"
                    .into(),
                got: "\"\"".into(),
            });
        }
        let requested = sanitize_model(&req.model);
        let span =
            tracing::info_span!("stage2_vertex", model = %requested, images = req.images.len());
        async {
            let body = Self::body(req)?;
            let token = self.token.token().await?;
            let deadline = Instant::now() + req.timeout;
            let mut last = None;
            for model in model_chain(&requested) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match self.call(&model, &body, &token, left).await {
                    Ok(slots) => return Ok(Stage2Reply { model, slots }),
                    Err(e) if e.is_model_retryable() => {
                        tracing::warn!(%model, error = %e, "stage-2 model unavailable; trying the next");
                        last = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(last.unwrap_or_else(|| Stage2Error::Transport {
                provider: NAME.into(),
                url: self.url(&requested),
                message: format!("no time left of {} ms", req.timeout.as_millis()),
            }))
        }
        .instrument(span)
        .await
    }
}

#[cfg(test)]
mod tests;
