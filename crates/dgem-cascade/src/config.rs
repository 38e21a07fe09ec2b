//! Picking a Stage-2 provider from settings.
//!
//! A provider spec is one of:
//!
//! * `openai:<base_url>` — an OpenAI-compatible server, e.g.
//!   `openai:http://127.0.0.1:8000/v1` (vLLM), `openai:http://127.0.0.1:11434/v1`
//!   (ollama), `openai:https://api.openai.com/v1`. The key comes from the env
//!   var named by `api_key_env` (default `DGEM_CASCADE_API_KEY`), else
//!   `OPENAI_API_KEY`; none is sent when both are unset. The default model
//!   comes from `model`, else `DGEM_CASCADE_MODEL`.
//! * `vertex` or `vertex:<project>` — Gemini on Vertex AI. The project comes
//!   from the spec, else `project`, else `GCP_PROJECT`, else
//!   `DGEM_GCP_PROJECT`; the access token from `token`, else
//!   `GOOGLE_OAUTH_ACCESS_TOKEN`. Location defaults to `global`.
//!
//! An empty spec reads `DGEM_CASCADE_PROVIDER`, and `vertex` when that is unset.

use std::sync::Arc;

use crate::error::CascadeError;
use crate::provider::openai::OpenAiChat;
use crate::provider::vertex::{StaticToken, TokenSource, VertexGemini, TOKEN_ENV};
use crate::provider::Stage2;

/// Env var read for the spec when none is given.
pub const PROVIDER_ENV: &str = "DGEM_CASCADE_PROVIDER";

/// What [`CascadeError`]s on the spec list as allowed.
const SPEC_ALLOWED: &str =
    "`openai:<base_url>` (http:// or https://), `vertex` or `vertex:<project>`";

/// Settings for building a Stage-2 provider; every field but `spec` may be
/// left unset to use its env fallback (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Stage2Config {
    /// Provider spec: `openai:<base_url>`, `vertex` or `vertex:<project>`.
    pub spec: String,
    /// Name of the env var holding the OpenAI-compatible API key.
    pub api_key_env: Option<String>,
    /// Default model when a request names none (OpenAI-compatible only;
    /// Vertex uses [`crate::provider::vertex::sanitize_model`]).
    pub model: Option<String>,
    /// Vertex project id.
    pub project: Option<String>,
    /// Vertex location (default `global`).
    pub location: Option<String>,
    /// Vertex API base (default `https://aiplatform.googleapis.com`).
    pub vertex_base: Option<String>,
    /// Vertex token source (default: [`StaticToken::from_env`]).
    pub token: Option<Arc<dyn TokenSource>>,
}

impl Stage2Config {
    /// Settings for `spec`, every other field from the environment.
    pub fn new(spec: &str) -> Self {
        Self {
            spec: spec.to_string(),
            ..Self::default()
        }
    }

    /// Build the provider.
    ///
    /// # Errors
    /// [`CascadeError::Invalid`] for a spec outside the grammar, an OpenAI
    /// base URL that is not http(s), or Vertex without a project or token.
    pub fn build(&self) -> Result<Arc<dyn Stage2>, CascadeError> {
        let mut spec = self.spec.trim().to_string();
        if spec.is_empty() {
            spec = std::env::var(PROVIDER_ENV)
                .unwrap_or_default()
                .trim()
                .to_string();
        }
        if spec.is_empty() {
            spec = "vertex".into();
        }
        let (kind, rest) = spec.split_once(':').unwrap_or((spec.as_str(), ""));
        match kind.to_ascii_lowercase().as_str() {
            "openai" => {
                let base = rest.trim();
                if !(base.starts_with("http://") || base.starts_with("https://")) {
                    return Err(CascadeError::invalid(
                        "cascade provider",
                        SPEC_ALLOWED,
                        format!("`{spec}`"),
                    ));
                }
                let mut p = OpenAiChat::from_env(base, self.api_key_env.as_deref());
                if let Some(m) = self.model.as_deref().filter(|m| !m.trim().is_empty()) {
                    p = p.with_default_model(m);
                }
                Ok(Arc::new(p))
            }
            "vertex" => {
                let project = Some(rest.trim().to_string())
                    .filter(|p| !p.is_empty())
                    .or_else(|| self.project.clone().filter(|p| !p.trim().is_empty()))
                    .or_else(VertexGemini::project_from_env)
                    .ok_or_else(|| {
                        CascadeError::invalid(
                            "vertex project",
                            "a Google Cloud project id (`vertex:<project>`, config, GCP_PROJECT or DGEM_GCP_PROJECT)",
                            "unset",
                        )
                    })?;
                let token: Arc<dyn TokenSource> = match &self.token {
                    Some(t) => Arc::clone(t),
                    None => Arc::new(StaticToken::from_env().ok_or_else(|| {
                        CascadeError::invalid(
                            TOKEN_ENV,
                            "an OAuth2 access token (or a TokenSource in the config)",
                            "unset",
                        )
                    })?),
                };
                let mut p = VertexGemini::new(&project, token)
                    .with_location(self.location.as_deref().unwrap_or(""));
                if let Some(b) = self.vertex_base.as_deref().filter(|b| !b.trim().is_empty()) {
                    p = p.with_base(b);
                }
                Ok(Arc::new(p))
            }
            _ => Err(CascadeError::invalid(
                "cascade provider",
                SPEC_ALLOWED,
                format!("`{spec}`"),
            )),
        }
    }
}

/// [`Stage2Config::new`]`(spec).build()`.
///
/// # Errors
/// As [`Stage2Config::build`].
pub fn provider_from_spec(spec: &str) -> Result<Arc<dyn Stage2>, CascadeError> {
    Stage2Config::new(spec).build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Secret;

    #[test]
    fn openai_specs() {
        let p = provider_from_spec("openai:http://127.0.0.1:8000/v1/").expect("openai");
        assert_eq!(p.name(), "openai");
        assert!(format!("{p:?}").contains("base_url: \"http://127.0.0.1:8000/v1\""));
        let err = provider_from_spec("openai:localhost:8000").expect_err("no scheme");
        assert_eq!(
            err.to_string(),
            format!("`cascade provider` must be {SPEC_ALLOWED}. Given: `openai:localhost:8000`")
        );
        let err = provider_from_spec("anthropic").expect_err("unknown");
        assert!(err.to_string().ends_with("Given: `anthropic`"), "{err}");
    }

    #[test]
    fn vertex_spec_with_project_and_token() {
        let cfg = Stage2Config {
            spec: "vertex:my-proj".into(),
            location: Some("us-central1".into()),
            token: Some(Arc::new(StaticToken(Secret::new("ya29.secret")))),
            ..Stage2Config::default()
        };
        let p = cfg.build().expect("vertex");
        assert_eq!(p.name(), "vertex");
        let dbg = format!("{p:?}");
        assert!(
            dbg.contains("my-proj") && dbg.contains("us-central1"),
            "{dbg}"
        );
        assert!(!dbg.contains("ya29.secret"), "{dbg}");
    }
}
