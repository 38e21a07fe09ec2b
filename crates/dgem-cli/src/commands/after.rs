//! Command-line flags for what happens after the read: the cascade, post-hoc
//! temperature and abstention (`decide`), and the deployment's Stage-2
//! provider and calibration file (`decide`, `serve`, `gateway`).
//!
//! The request flags are turned into the same JSON keys `/api/decide` and MCP
//! take (`cascade_mode`, `temperature`, `abstain_above`, …) and read by
//! [`dgem_cascade::Hesitation::from_object`], so every surface checks them the
//! same way.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use dgem_cascade::{AfterSetup, Hesitation};
use dgem_core::hesitation::calibration::CalibrationFile;
use dgem_core::schema::ValidSchema;
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

/// What one decision asks for after the read.
#[derive(Debug, Clone, Args)]
pub struct HesitationArgs {
    /// Post-hoc temperature: a number for every question (T > 1 flattens,
    /// T < 1 sharpens, 0 = not set), or JSON by type, e.g.
    /// `{"choice": 1.4, "boolean": 2}`. Range 0–20. Wins over the policy's.
    #[arg(long, value_name = "T|JSON")]
    pub temperature: Option<String>,
    /// Abstain when an answer's confidence is below this (0–1), or JSON by
    /// question id, e.g. `{"team": 0.6, "*": 0.4}`.
    #[arg(long, value_name = "P|JSON")]
    pub abstain_below: Option<String>,
    /// Abstain when an answer's hesitation (H / ln K) is at or above this
    /// (0–1), or JSON by question id.
    #[arg(long, value_name = "H|JSON")]
    pub abstain_above: Option<String>,
    /// Escalate hesitant answers to Stage 2: `entropy` (gate on entropy) or
    /// `on_miss` (answers that differ from `--expect`, else the entropy gate).
    #[arg(long, value_name = "MODE")]
    pub cascade: Option<String>,
    /// Escalate at or above this gate value (default 0.35 nats, or 0.16
    /// normalized).
    #[arg(long, value_name = "X")]
    pub cascade_threshold: Option<f64>,
    /// What the threshold is compared with: `nats` or `normalized` (H / ln K).
    #[arg(long, value_name = "MODE")]
    pub cascade_threshold_mode: Option<String>,
    /// Stage-2 model name (default: the provider's).
    #[arg(long, value_name = "NAME")]
    pub cascade_model: Option<String>,
    /// How much of Stage 1 the Stage-2 prompt shows: `soft`, `none` or `full`.
    #[arg(long, value_name = "MODE")]
    pub stage2_prior: Option<String>,
    /// Expected answer for `--cascade on_miss`, `QUESTION=VALUE` (repeatable).
    #[arg(long = "expect", value_name = "QUESTION=VALUE")]
    pub expect: Vec<String>,
    /// Taxonomy expansion: add an `other_unclassified` option to each choice
    /// question that lacks a catch-all, and propose a new option where the
    /// answer is that catch-all or hesitant (Stage 2 names it when a provider
    /// is configured).
    #[arg(long)]
    pub suggest_expansions: bool,
    /// Entropy (nats) at or above which a choice answer asks for a new
    /// option (default 0.35).
    #[arg(long, value_name = "NATS")]
    pub expansion_entropy: Option<f64>,
}

/// `s` as JSON when it parses (a number, an object), else as a JSON string.
fn json_or_string(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| json!(s))
}

impl HesitationArgs {
    /// The flags as the request keys of `/api/decide`.
    ///
    /// # Errors
    /// Exit code 1 when an `--expect` value is not `QUESTION=VALUE`.
    pub fn to_object(&self) -> Result<Map<String, Value>, Failure> {
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.to_string(), v);
            }
        };
        put(
            "temperature",
            self.temperature.as_deref().map(json_or_string),
        );
        put(
            "abstain_below",
            self.abstain_below.as_deref().map(json_or_string),
        );
        put(
            "abstain_above",
            self.abstain_above.as_deref().map(json_or_string),
        );
        put("cascade_mode", self.cascade.as_deref().map(|s| json!(s)));
        // JSON has no infinity or NaN (serde would write null, i.e. "the
        // default"): refuse them here, naming the flag.
        for (flag, x) in [
            ("--cascade-threshold", self.cascade_threshold),
            ("--expansion-entropy", self.expansion_entropy),
        ] {
            if let Some(x) = x.filter(|x| !x.is_finite()) {
                return Err(user(anyhow::anyhow!(
                    "`{flag}` must be a finite number. Given: `{x}`"
                )));
            }
        }
        put(
            "cascade_threshold",
            self.cascade_threshold.map(|x| json!(x)),
        );
        put(
            "cascade_threshold_mode",
            self.cascade_threshold_mode.as_deref().map(|s| json!(s)),
        );
        put(
            "cascade_model",
            self.cascade_model.as_deref().map(|s| json!(s)),
        );
        put(
            "stage2_prior",
            self.stage2_prior.as_deref().map(|s| json!(s)),
        );
        put(
            "suggest_expansions",
            self.suggest_expansions.then_some(json!(true)),
        );
        put(
            "expansion_entropy",
            self.expansion_entropy.map(|x| json!(x)),
        );
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
            m.insert("expected_answers".into(), Value::Object(expected));
        }
        Ok(m)
    }

    /// The raw policy as it is read: with catch-all options added when
    /// `--suggest-expansions` asks; returns it and the questions changed.
    ///
    /// # Errors
    /// Exit code 1 naming the flag.
    pub fn inject(&self, raw: &Value) -> Result<(Value, Vec<String>), Failure> {
        dgem_cascade::inject_if_asked(&self.to_object()?, raw).map_err(flag_error)
    }

    /// The request settings, checked against `schema` (read from template
    /// `template`, with catch-alls `injected` by [`HesitationArgs::inject`]).
    ///
    /// # Errors
    /// Exit code 1 naming the flag, its allowed values and the value given.
    pub fn request(
        &self,
        schema: &ValidSchema,
        template: &str,
        injected: Vec<String>,
    ) -> Result<Hesitation, Failure> {
        let obj = self.to_object()?;
        Hesitation::from_object(&obj, schema)
            .map(|h| h.for_policy(template, injected))
            .map_err(flag_error)
    }
}

/// A request-key error as the flag that set it.
fn flag_error(e: dgem_core::SchemaError) -> Failure {
    let flag = match e.field.split('.').next().unwrap_or_default() {
        "cascade_mode" => "--cascade".to_string(),
        "expected_answers" => "--expect".to_string(),
        other => format!("--{}", other.replace('_', "-")),
    };
    user(anyhow::anyhow!("`{flag}`: {}", e.message))
}
