//! [`RemoteDgem`]: a dgem-compatible server over HTTP (a local or remote
//! `dgem serve`, a Cloud Run service, a Vertex dedicated endpoint's `/invoke`
//! base), as a [`Decider`] and a [`Forward`].
//!
//! A decision goes out as `POST {base}/v1/chat/completions` with the schema's
//! wire form ([`ValidSchema::to_wire`](dgem_core::schema::ValidSchema::to_wire))
//! as the system message and the state as the user message. The reply is
//! parsed tolerantly ([`crate::envelope`]: the OpenAI wrapper, a bare envelope,
//! fenced or chatty text) and then checked strictly against the request by
//! [`Decision::from_envelope`], through the one reply check of every gateway
//! route ([`crate::reply::chat_decision`]): an id that was not asked or is
//! missing, labels that are not the question's, a probability outside [0, 1]
//! or NaN, sums more than 0.02 from 1 (closer, renormalized and recorded). A
//! reply that fails is [`BackendError::BadReply`], the
//! replica's failure, so the router fails over to the next one.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Bytes;
use dgem_backend::body::{read_idle, BodyFault, DEFAULT_IDLE_TIMEOUT};
use dgem_backend::{Attention, BackendError, BackendInfo, Health};
use dgem_core::labels::LabelMode;
use dgem_engine::{DecideError, DecideRequest, Decider, Decision};
use serde_json::{json, Value};

use crate::auth::BearerSource;
use crate::forward::{phase, status_fails_over, Forward, Forwarded};

/// Settings of one remote dgem.
#[derive(Clone)]
pub struct RemoteConfig {
    /// Base URL without a trailing `/` or `/v1` (`http://127.0.0.1:8080`,
    /// `https://…/endpoints/123/invoke`).
    pub base: String,
    /// Limit of one request, connect included (default 90 s).
    pub timeout: Duration,
    /// Limit from sending the request to the reply's headers (default 90 s: a
    /// dgem server sends its headers with the finished decision, so this is
    /// the upstream's compute time).
    pub first_byte_timeout: Duration,
    /// Longest silence while the reply body streams, after the headers
    /// (default 5 s, [`DEFAULT_IDLE_TIMEOUT`]: a dgem server writes its body in
    /// one go once the decision is made). A replica that sends its
    /// headers and then stalls fails over after this, not after `timeout`.
    pub idle_timeout: Duration,
    /// Limit of one health probe (default 2.5 s).
    pub health_timeout: Duration,
    /// Where bearer tokens come from, if the target needs one.
    pub auth: Option<Arc<dyn BearerSource>>,
    /// `model` sent in chat bodies (the server echoes it).
    pub model: String,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("base", &self.base)
            .field("timeout", &self.timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("auth", &self.auth.as_ref().map(|a| a.describe()))
            .finish()
    }
}

impl RemoteConfig {
    /// Defaults for `base` (trailing `/`, `/v1` and `/v1/chat/completions` trimmed).
    pub fn new(base: &str) -> Self {
        Self {
            base: trim_base(base),
            timeout: Duration::from_secs(90),
            first_byte_timeout: Duration::from_secs(90),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            health_timeout: Duration::from_millis(2500),
            auth: None,
            model: "dgem".into(),
        }
    }
}

/// `base` without a trailing `/`, `/chat/completions` or `/v1`.
pub fn trim_base(base: &str) -> String {
    let mut b = base.trim().trim_end_matches('/').to_string();
    for suffix in ["/chat/completions", "/v1"] {
        if let Some(s) = b.strip_suffix(suffix) {
            b = s.trim_end_matches('/').to_string();
        }
    }
    b
}

/// A dgem-compatible server over HTTP (see the module docs).
#[derive(Debug, Clone)]
pub struct RemoteDgem {
    config: RemoteConfig,
    client: reqwest::Client,
}

impl RemoteDgem {
    /// A remote with its own connection pool.
    ///
    /// # Errors
    /// [`BackendError::Unavailable`] when the HTTP client cannot be built.
    pub fn new(config: RemoteConfig) -> Result<Self, BackendError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| BackendError::Unavailable(format!("http client: {e}")))?;
        Ok(Self { config, client })
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.config.base
    }

    async fn bearer(&self) -> Result<Option<String>, BackendError> {
        match &self.config.auth {
            None => Ok(None),
            Some(a) => a
                .bearer()
                .await
                .map(Some)
                .map_err(|e| BackendError::NotReady(format!("auth: {e}"))),
        }
    }

    async fn post(
        &self,
        path: &str,
        body: Bytes,
    ) -> Result<(u16, Option<String>, Bytes, Vec<(String, String)>), BackendError> {
        let url = format!("{}{path}", self.config.base);
        let mut req = self
            .client
            .post(&url)
            .timeout(self.config.timeout)
            .header("content-type", "application/json")
            .body(body);
        if let Some(token) = self.bearer().await? {
            req = req.bearer_auth(token);
        }
        let first_byte = self.config.first_byte_timeout;
        let resp = match tokio::time::timeout(first_byte, req.send()).await {
            Ok(sent) => sent.map_err(|e| transport(&e, self.config.timeout))?,
            Err(_) => return Err(BackendError::Timeout(first_byte.as_millis() as u64)),
        };
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let passed: Vec<(String, String)> = crate::forward::PASSED_HEADERS
            .iter()
            .filter_map(|h| {
                resp.headers()
                    .get(*h)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| ((*h).to_string(), v.to_string()))
            })
            .collect();
        let bytes = read_body(resp, self.config.idle_timeout).await?;
        Ok((status, ctype, bytes, passed))
    }
}

/// The reply body, each chunk within `idle` of the one before
/// ([`dgem_backend::body::read_idle`]).
///
/// The headers came, so the replica is up: a body that stalls (no byte for
/// `idle`) or is cut (the connection closes before the body ends) is a reply
/// that does not answer, [`BackendError::BadReply`], which fails over at once
/// without a health probe and counts against the replica's breaker. A body
/// over [`crate::MAX_UPSTREAM_BODY`] is refused as it grows.
async fn read_body(resp: reqwest::Response, idle: Duration) -> Result<Bytes, BackendError> {
    match read_idle(resp.bytes_stream(), idle, crate::MAX_UPSTREAM_BODY).await {
        Ok(body) => Ok(Bytes::from(body)),
        Err(e @ BodyFault::TooLarge { .. }) => Err(BackendError::Model(e.to_string())),
        Err(e) => Err(BackendError::BadReply(e.to_string())),
    }
}

fn transport(e: &reqwest::Error, limit: Duration) -> BackendError {
    if e.is_timeout() {
        BackendError::Timeout(limit.as_millis() as u64)
    } else {
        BackendError::Connection(error_chain(e))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

pub(crate) fn snippet(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(300).collect()
}

/// The chat body of a decision: the schema JSON as the system message, the
/// state as the user message, and the seed.
///
/// The chat route reads the user message as JSON text and puts that text in
/// the prompt as it is, so the state is encoded as the original gateway
/// encodes it: a list of content parts (images) goes as it is; a string that
/// is itself a JSON object or array goes as that text; any other string goes
/// as `{"state": "<text>"}` (a bare string would not be JSON, and a quoted
/// one would reach the model with its quotes); any other value goes as its
/// JSON text with Python's separators, as the in-process engine renders it.
pub fn chat_body(model: &str, schema: &Value, state: &Value, seed: i64) -> Value {
    let state = match state {
        Value::Array(parts) if parts.iter().any(|p| p.get("type").is_some()) => state.clone(),
        Value::String(s) if is_json_container(s) => Value::String(s.trim().to_string()),
        Value::String(s) => Value::String(dgem_core::prompt::python_json(&json!({"state": s}))),
        other => Value::String(dgem_core::prompt::python_json(other)),
    };
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": schema.to_string()},
            {"role": "user", "content": state},
        ],
        "seed": seed,
    })
}

/// Whether `text` parses as a JSON object or array.
fn is_json_container(text: &str) -> bool {
    matches!(
        serde_json::from_str::<Value>(text.trim()),
        Ok(Value::Object(_) | Value::Array(_))
    )
}

impl RemoteDgem {
    /// One `/health` probe: unreachable, a 429/503 front end (scaled to zero)
    /// or the body's phase (see [`health_from_body`]). Never fails.
    pub async fn probe(&self) -> Health {
        let mut req = self
            .client
            .get(format!("{}/health", self.config.base))
            .timeout(self.config.health_timeout);
        match self.bearer().await {
            Ok(Some(t)) => req = req.bearer_auth(t),
            Ok(None) => {}
            Err(e) => return unreachable(e.to_string()),
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return unreachable(error_chain(&e)),
        };
        let status = resp.status().as_u16();
        if matches!(status, 429 | 503) {
            return Health::starting(phase::SCALED_TO_ZERO);
        }
        if !(200..300).contains(&status) {
            return unreachable(format!("health answered {status}"));
        }
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        health_from_body(&body)
    }
}

fn unreachable(reason: String) -> Health {
    Health::Failed {
        phase: phase::UNREACHABLE.into(),
        reason,
    }
}

#[async_trait]
impl Decider for RemoteDgem {
    /// What is known before the remote answers: the engine is `dgem-remote` and
    /// the model id is empty (a reply's `diagnostics.model` names it).
    fn info(&self) -> BackendInfo {
        BackendInfo {
            runtime: "dgem-remote".into(),
            model_id: String::new(),
            model_sha256: None,
            attention: Attention::Causal,
            label_mode: LabelMode::Words,
            max_tokens: 0,
            supports_images: true,
            canvas: None,
            chat_turns: dgem_core::prompt::ChatTurns::gemma(),
        }
    }

    async fn health(&self) -> Health {
        self.probe().await
    }

    async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError> {
        let body = chat_body(
            &self.config.model,
            &forwarded_schema(&req.schema),
            &req.state,
            req.seed,
        );
        let (status, content_type, bytes, _) = self
            .post("/v1/chat/completions", Bytes::from(body.to_string()))
            .await?;
        if !(200..300).contains(&status) {
            return Err(BackendError::Upstream {
                status,
                body: snippet(&bytes),
            }
            .into());
        }
        crate::reply::chat_decision(&req.schema, content_type.as_deref(), &bytes)
            .map_err(DecideError::from)
    }
}

#[async_trait]
impl Forward for RemoteDgem {
    async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, BackendError> {
        let (status, content_type, body, headers) = self.post(path, body).await?;
        if status_fails_over(status) {
            return Err(BackendError::Upstream {
                status,
                body: snippet(&body),
            });
        }
        Ok(Forwarded {
            status,
            content_type,
            body,
            headers,
        })
    }
}

/// Words in a phase that name a failure rather than a stage of start-up
/// (compared case-insensitively): `warmup_failed` of a `dgem serve` whose vLLM
/// upstream is down, `crashed`, `unhealthy`, …
const FAILURE_WORDS: [&str; 6] = ["fail", "error", "crash", "unhealthy", "dead", "stopped"];

/// Read a `/health` body: `phase` (default `ready`), `ready`/`vllm_ready`,
/// `bytes_staged_gb` (GB). Not ready in a phase that names a failure
/// ([`FAILURE_WORDS`], or `unreachable`/`failed`) is [`Health::Failed`]:
/// nothing to wait for; any other phase is [`Health::Starting`].
pub fn health_from_body(body: &Value) -> Health {
    let phase = body
        .get("phase")
        .and_then(Value::as_str)
        .unwrap_or(phase::READY)
        .to_string();
    let ready = body
        .get("ready")
        .or_else(|| body.get("vllm_ready"))
        .and_then(Value::as_bool)
        .unwrap_or(phase == phase::READY);
    if ready {
        return Health::Ready;
    }
    let lower = phase.to_ascii_lowercase();
    if lower == phase::UNREACHABLE
        || lower == phase::FAILED
        || FAILURE_WORDS.iter().any(|w| lower.contains(w))
    {
        let reason = body
            .get("detail")
            .or_else(|| body.get("error"))
            .and_then(Value::as_str)
            .map_or_else(
                || format!("the server reports phase `{phase}`"),
                str::to_string,
            );
        return Health::Failed { phase, reason };
    }
    Health::Starting {
        phase,
        bytes_staged_gb: body.get("bytes_staged_gb").and_then(Value::as_f64),
    }
}

/// The schema a replica is sent: its wire form, less `layout` when no one
/// stated one ([`dgem_core::schema::ValidSchema::layout_stated`]), so the
/// replica reads with its own model's layout as a direct request would.
fn forwarded_schema(schema: &dgem_core::schema::ValidSchema) -> serde_json::Value {
    let mut wire = schema.to_wire();
    if !schema.layout_stated {
        if let Some(obj) = wire.as_object_mut() {
            obj.remove("layout");
        }
    }
    wire
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_bases() {
        assert_eq!(trim_base("http://h:1/v1/"), "http://h:1");
        assert_eq!(trim_base("http://h:1/v1/chat/completions"), "http://h:1");
        assert_eq!(trim_base("https://x/invoke"), "https://x/invoke");
    }

    #[test]
    fn reads_health_bodies() {
        let h = health_from_body(
            &json!({"phase": "staging_tmpfs", "vllm_ready": false, "bytes_staged_gb": 4.5}),
        );
        assert_eq!(
            h,
            Health::Starting {
                phase: "staging_tmpfs".into(),
                bytes_staged_gb: Some(4.5)
            }
        );
        assert!(h.is_warming());
        assert_eq!(health_from_body(&json!({"status": "ok"})), Health::Ready);
    }

    #[test]
    fn phases_that_name_a_failure_are_failed_not_warming() {
        for p in [
            "warmup_failed",
            "FAILED",
            "unreachable",
            "ERROR",
            "crashed",
            "model_error",
            "unhealthy",
            "dead",
            "stopped",
        ] {
            let h = health_from_body(&json!({"phase": p, "ready": false}));
            assert!(h.is_failed() && h.phase() == p, "{p}: {h:?}");
        }
        for p in [
            "warming_up",
            "loading",
            "starting",
            "loading_model",
            "staging_tmpfs",
            "scaled_to_zero",
            "mounting_gcs",
        ] {
            let h = health_from_body(&json!({"phase": p, "ready": false}));
            assert!(h.is_warming(), "{p}: {h:?}");
        }
    }

    #[test]
    fn a_replica_reads_an_unstated_layout_with_its_own_model() {
        let raw = json!({"questions": [{"id": "q", "type": "boolean"}]});
        let d = dgem_core::schema::SchemaDefaults::default();
        let open = dgem_core::schema::ValidSchema::from_value(&raw, &d).expect("valid");
        assert!(forwarded_schema(&open).get("layout").is_none());
        let mut stated = raw.clone();
        stated["layout"] = json!("document_first");
        let stated = dgem_core::schema::ValidSchema::from_value(&stated, &d).expect("valid");
        assert_eq!(forwarded_schema(&stated)["layout"], "document_first");
    }

    #[test]
    fn chat_body_sends_the_state_as_json_text() {
        let schema = json!({"questions": []});
        let b = chat_body("m", &schema, &json!({"ticket": "x"}), 3);
        assert_eq!(b["messages"][0]["content"], "{\"questions\":[]}");
        // Python separators, as the in-process engine renders the state.
        assert_eq!(b["messages"][1]["content"], "{\"ticket\": \"x\"}");
        assert_eq!(b["seed"], 3);
        // A plain string goes wrapped, as the original gateway sends it.
        let b = chat_body("m", &schema, &json!("on fire"), 3);
        assert_eq!(b["messages"][1]["content"], "{\"state\": \"on fire\"}");
        // A string holding a JSON object goes as that text.
        let b = chat_body("m", &schema, &json!(" {\"a\": 1} "), 3);
        assert_eq!(b["messages"][1]["content"], "{\"a\": 1}");
    }
}
