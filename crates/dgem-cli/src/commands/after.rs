//! Command-line flags for what happens after the read: the cascade, post-hoc
//! temperature and abstention (`decide`), and the deployment's Stage-2
//! provider and calibration file (`decide`, `serve`, `gateway`).
//!
//! The request flags are the decision service's post-read options
//! ([`dgem_service::AfterOptions`]), the same keys `/api/decide` and MCP take
//! (`cascade_mode`, `temperature`, `abstain_above`, …). Each flag's value is
//! read by its type's own parse when the flag is read, the parse every
//! surface uses, and refused in the key's words ("`--temperature` must be a
//! number from 0 to 20 …"); what needs the policy (question ids) is checked
//! by [`dgem_cascade::AfterRequest::from_options`].

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use dgem_cascade::AfterSetup;
use dgem_core::after::calibration::CalibrationFile;
use dgem_service::AfterOptions;
use serde_json::{json, Map, Value};

use crate::failure::{user, Failure};

/// Where escalated answers go and which temperatures a deployment applies.
#[derive(Debug, Clone, Args)]
pub struct SetupArgs {
    /// Stage-2 provider for the cascade: `openai:BASE_URL` (any
    /// OpenAI-compatible `/chat/completions` server with structured output:
    /// vLLM, llama.cpp server, ollama, OpenAI; key from DGEM_CASCADE_API_KEY or
    /// OPENAI_API_KEY), `vertex[:PROJECT]` (Gemini on Vertex AI; project from
    /// GCP_PROJECT; token as the gateway gets one: GOOGLE_OAUTH_ACCESS_TOKEN,
    /// the metadata server, a key file or gcloud) or `gguf:PATH` (a
    /// second, larger GGUF run in-process through llama.cpp with
    /// grammar-constrained JSON: no network; text only).
    #[arg(long, env = "DGEM_CASCADE_PROVIDER", value_name = "SPEC")]
    pub cascade_provider: Option<String>,
    /// Temperatures fitted by `dgem calibrate`; used only for the model and
    /// policies they were fitted on.
    #[arg(long, env = "DGEM_CALIBRATION_FILE", value_name = "FILE")]
    pub calibration_file: Option<PathBuf>,
}

impl SetupArgs {
    /// Build the provider and load the calibration file.
    ///
    /// # Errors
    /// Exit code 1 naming the flag when the spec or the file is unusable.
    pub fn setup(&self) -> Result<Arc<AfterSetup>, Failure> {
        self.setup_for(true)
    }

    /// Refuse a cascade the command line asks for (`cascade`) when no
    /// Stage-2 provider is named: it would read, report every hesitant
    /// answer as escalated and exit 0 with the Stage-1 answers (a black-box
    /// run found that). `dgem serve` keeps answering without one and
    /// reports it per request, since its requests choose the cascade.
    ///
    /// # Errors
    /// Exit code 1 naming the flags and the provider forms.
    pub fn check_provider(&self, cascade: bool) -> Result<(), Failure> {
        let named = self
            .cascade_provider
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty());
        if !cascade || named {
            return Ok(());
        }
        Err(user(anyhow::anyhow!(
            "`--cascade` needs a Stage-2 provider: `--cascade-provider openai:BASE_URL`, `vertex[:PROJECT]` or `gguf:PATH` (or DGEM_CASCADE_PROVIDER). Given: none"
        )))
    }

    /// [`SetupArgs::setup`], building the Stage-2 provider only when
    /// `need_stage2` (a `decide` that asks for no cascade or expansion must
    /// not fail, or load a second model, over a provider it will not use,
    /// e.g. a `DGEM_CASCADE_PROVIDER` exported for `serve`).
    ///
    /// # Errors
    /// As [`SetupArgs::setup`].
    pub fn setup_for(&self, need_stage2: bool) -> Result<Arc<AfterSetup>, Failure> {
        let spec = self.cascade_provider.as_deref().map(str::trim);
        let stage2 = match spec.filter(|_| need_stage2) {
            None | Some("") => None,
            Some(spec) => Some(match gguf_path(spec) {
                Some(path) => gguf_provider(path)?,
                None => {
                    let mut cfg = dgem_cascade::Stage2Config::new(spec);
                    if is_vertex(spec) {
                        cfg.token = Some(Arc::new(GoogleToken::new()));
                    }
                    cfg.build()
                        .map_err(|e| user(anyhow::anyhow!("`--cascade-provider`: {e}")))?
                }
            }),
        };
        let calibration = match &self.calibration_file {
            None => None,
            Some(p) => Some(
                CalibrationFile::load(p)
                    .map_err(|e| user(anyhow::anyhow!("`--calibration-file`: {e}")))?,
            ),
        };
        Ok(Arc::new(AfterSetup {
            stage2,
            calibration,
        }))
    }
}

/// Whether `spec` names Gemini on Vertex AI (`vertex` or `vertex:PROJECT`).
fn is_vertex(spec: &str) -> bool {
    let kind = spec.split_once(':').map_or(spec, |(k, _)| k);
    kind.trim().eq_ignore_ascii_case("vertex")
}

/// The gateway's Google auth as the Vertex Stage 2's token source: an
/// explicit `GOOGLE_OAUTH_ACCESS_TOKEN`, else the metadata server, a
/// service-account key (`GOOGLE_APPLICATION_CREDENTIALS`) or gcloud, minted
/// and refreshed before expiry (so a long `serve` keeps working).
struct GoogleToken(dgem_gateway::auth::TokenProvider);

impl GoogleToken {
    fn new() -> Self {
        let kind = dgem_gateway::auth::TokenKind::Access;
        let config = dgem_gateway::auth::AuthConfig::from_env(&kind);
        Self(dgem_gateway::auth::TokenProvider::new(kind, config))
    }
}

impl std::fmt::Debug for GoogleToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GoogleToken(<gateway auth>)")
    }
}

#[async_trait::async_trait]
impl dgem_cascade::provider::vertex::TokenSource for GoogleToken {
    async fn token(&self) -> Result<String, dgem_cascade::Stage2Error> {
        use dgem_gateway::auth::BearerSource as _;
        self.0
            .bearer()
            .await
            .map_err(|e| dgem_cascade::Stage2Error::Config {
                provider: "vertex".into(),
                field: "Google credentials".into(),
                allowed: "GOOGLE_OAUTH_ACCESS_TOKEN, the metadata server, GOOGLE_APPLICATION_CREDENTIALS or gcloud".into(),
                got: e.to_string(),
            })
    }
}

/// The path of a `gguf:PATH` spec (prefix case-insensitive), else `None`.
///
/// `dgem-cascade` stays free of llama.cpp, so this spec is handled here
/// rather than in [`dgem_cascade::provider_from_spec`].
fn gguf_path(spec: &str) -> Option<&str> {
    let (kind, rest) = spec.split_once(':')?;
    kind.trim()
        .eq_ignore_ascii_case("gguf")
        .then(|| rest.trim())
}

/// Load the local GGUF Stage-2 model at `path` (its own model, context and
/// thread, separate from Stage 1).
///
/// # Errors
/// Exit code 1 naming `--cascade-provider` and the path when it does not load.
#[cfg(feature = "embedded")]
fn gguf_provider(path: &str) -> Result<Arc<dyn dgem_cascade::Stage2>, Failure> {
    if path.is_empty() {
        return Err(user(anyhow::anyhow!(
            "`--cascade-provider` must be `gguf:PATH` with the path of a GGUF file. Given: `gguf:`"
        )));
    }
    let cfg = dgem_backend_llama::stage2::LocalStage2Config::default();
    dgem_backend_llama::stage2::LocalStage2::load(std::path::Path::new(path), cfg)
        .map(|p| Arc::new(p) as Arc<dyn dgem_cascade::Stage2>)
        .map_err(|e| {
            user(anyhow::anyhow!(
                "`--cascade-provider gguf:{path}`: the Stage-2 GGUF model did not load: {e}"
            ))
        })
}

/// A build without llama.cpp has no local GGUF Stage 2.
///
/// # Errors
/// Always a user error naming `--cascade-provider`.
#[cfg(not(feature = "embedded"))]
fn gguf_provider(path: &str) -> Result<Arc<dyn dgem_cascade::Stage2>, Failure> {
    Err(user(anyhow::anyhow!(
        "`--cascade-provider gguf:{path}`: this dgem was built without llama.cpp (Cargo feature `embedded`), which runs a local GGUF Stage 2; use an `openai:` or `vertex:` provider, or a default build"
    )))
}

/// What one decision asks for after the read: the decision service's
/// post-read options ([`AfterOptions`], whose clap derive gives the flags
/// `--temperature`, `--abstain-below`, `--abstain-above`, `--cascade`,
/// `--cascade-threshold`, `--cascade-threshold-mode`, `--cascade-model`,
/// `--stage2-prior`, `--suggest-expansions`, `--expansion-entropy`), and
/// `--expect`, the command line's repeatable form of `expected_answers`.
#[derive(Debug, Clone, Args)]
pub struct AfterArgs {
    #[command(flatten)]
    pub options: AfterOptions,
    /// Expected answer for `--cascade on_miss`, `QUESTION=VALUE` (repeatable).
    #[arg(long = "expect", value_name = "QUESTION=VALUE")]
    pub expect: Vec<String>,
}

impl AfterArgs {
    /// The flags as the decision service's post-read options.
    ///
    /// # Errors
    /// Exit code 1 when an `--expect` value is not `QUESTION=VALUE`.
    pub fn to_options(&self) -> Result<AfterOptions, Failure> {
        let mut options = self.options.clone();
        if !self.expect.is_empty() {
            let mut expected = Map::new();
            for e in &self.expect {
                let (k, v) = e.split_once('=').ok_or_else(|| {
                    user(anyhow::anyhow!(
                        "`--expect` must be QUESTION=VALUE, e.g. `--expect urgent=yes`. Given: `{e}`"
                    ))
                })?;
                expected.insert(k.trim().to_string(), json!(v.trim()));
            }
            // The strings are read by the key's own parse (trimmed, a blank
            // or a dash states no expectation).
            let expected = serde_json::from_value(Value::Object(expected))
                .map_err(|e| user(anyhow::anyhow!("`--expect`: {e}")))?;
            options.expected_answers = Some(expected);
        }
        Ok(options)
    }
}

/// A decision service refusal as the flag or option that caused it: a
/// post-read key as its flag (`cascade_mode` → `--cascade`), a variable
/// problem as `--var`, an image as `--image`.
pub fn service_failure(e: dgem_service::ServiceError) -> Failure {
    use dgem_engine::templates::TemplateError;
    use dgem_service::ServiceError as S;
    match e {
        S::Field { field, message } => {
            if field.starts_with("images") || field.starts_with("state[") {
                user(anyhow::anyhow!("`--image`: {message}"))
            } else {
                flag_error(dgem_core::SchemaError::new(field, message))
            }
        }
        S::Variables(detail) => user(anyhow::anyhow!("`--var`: {detail}")),
        S::NoState(detail) => user(anyhow::anyhow!(
            "`--var`: {detail}; pass it with `-v NAME=VALUE` or `-d FILE`"
        )),
        S::Template(failure) => match failure.error {
            TemplateError::Unset { detail, .. } => user(anyhow::anyhow!(
                "`--var`: {detail}; pass it with `-v NAME=VALUE` or `-d FILE`, or render the placeholder anyway with `--allow-missing-vars`"
            )),
            TemplateError::Variables(detail) => user(anyhow::anyhow!("{detail}")),
            error => user(anyhow::anyhow!("`--template`: {error}")),
        },
        S::Schema { detail, .. } => user(anyhow::anyhow!("{detail}")),
        other => user(anyhow::anyhow!("{other}")),
    }
}

/// A request-key error as the flag that set it.
fn flag_error(e: dgem_core::SchemaError) -> Failure {
    let flag = match e.field.split('.').next().unwrap_or_default() {
        "cascade_mode" => "--cascade".to_string(),
        "expected_answers" => "--expect".to_string(),
        other => format!("--{}", other.replace('_', "-")),
    };
    // "`samples` must be …" reads "`--samples` must be …" on the command line.
    let key = format!("`{}` ", e.field);
    match e.message.strip_prefix(&key) {
        Some(rest) => user(anyhow::anyhow!("`{flag}` {rest}")),
        None => user(anyhow::anyhow!("`{flag}`: {}", e.message)),
    }
}
