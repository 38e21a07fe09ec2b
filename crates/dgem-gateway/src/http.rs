//! [`HttpTarget`]: a dgem-compatible server over HTTP (a local or remote
//! `dgem serve`, a Cloud Run service, a Vertex dedicated endpoint's `/invoke`
//! base). Decisions go out as `POST {base}/v1/chat/completions` with the schema
//! JSON as the system message and the state as the user message (serving.md
//! §3.2); replies are parsed tolerantly ([`crate::envelope`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Bytes;
use dgem_backend::BackendError;
use serde_json::{json, Value};

use crate::auth::BearerSource;
use crate::envelope::parse_reply;
use crate::target::{phase, status_fails_over, DecideCall, Forwarded, Target, TargetHealth};

/// Settings of one HTTP target.
#[derive(Clone)]
pub struct HttpTargetConfig {
    /// Base URL without a trailing `/` or `/v1` (`http://127.0.0.1:8080`,
    /// `https://…/endpoints/123/invoke`).
    pub base: String,
    /// Limit of one request, connect included (default 90 s).
    pub timeout: Duration,
    /// Limit of one health probe (default 2.5 s).
    pub health_timeout: Duration,
    /// Where bearer tokens come from, if the target needs one.
    pub auth: Option<Arc<dyn BearerSource>>,
    /// `model` sent in chat bodies (the server echoes it).
    pub model: String,
}

impl std::fmt::Debug for HttpTargetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTargetConfig")
            .field("base", &self.base)
            .field("timeout", &self.timeout)
            .field("auth", &self.auth.as_ref().map(|a| a.describe()))
            .finish()
    }
}

impl HttpTargetConfig {
    /// Defaults for `base` (trailing `/`, `/v1` and `/v1/chat/completions` trimmed).
    pub fn new(base: &str) -> Self {
        Self {
            base: trim_base(base),
            timeout: Duration::from_secs(90),
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

/// A dgem-compatible server over HTTP.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    config: HttpTargetConfig,
    client: reqwest::Client,
}

impl HttpTarget {
    /// A target with its own connection pool.
    ///
    /// # Errors
    /// [`BackendError::Unavailable`] when the HTTP client cannot be built.
    pub fn new(config: HttpTargetConfig) -> Result<Self, BackendError> {
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
    ) -> Result<(u16, Option<String>, Bytes), BackendError> {
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
        let resp = req
            .send()
            .await
            .map_err(|e| transport(&e, self.config.timeout))?;
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // A reset while the body streams is a failure *during* the request: it
        // surfaces here as a retryable connection error, so it fails over.
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| transport(&e, self.config.timeout))?;
        if bytes.len() > crate::MAX_UPSTREAM_BODY {
            return Err(BackendError::Model(format!(
                "reply of {} bytes exceeds {} bytes",
                bytes.len(),
                crate::MAX_UPSTREAM_BODY
            )));
        }
        Ok((status, ctype, bytes))
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

fn snippet(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(300).collect()
}

/// The chat body of a decision (serving.md §3.2).
pub fn chat_body(model: &str, call: &DecideCall) -> Value {
    let state = match &call.state {
        Value::Array(parts) if parts.iter().any(|p| p.get("type").is_some()) => call.state.clone(),
        other => Value::String(other.to_string()),
    };
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": call.schema.to_string()},
            {"role": "user", "content": state},
        ],
        "seed": call.seed,
    })
}

#[async_trait]
impl Target for HttpTarget {
    fn url(&self) -> String {
        self.config.base.clone()
    }

    async fn health(&self) -> TargetHealth {
        let mut req = self
            .client
            .get(format!("{}/health", self.config.base))
            .timeout(self.config.health_timeout);
        match self.bearer().await {
            Ok(Some(t)) => req = req.bearer_auth(t),
            Ok(None) => {}
            Err(e) => return TargetHealth::not_ready(phase::UNREACHABLE, Some(e.to_string())),
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return TargetHealth::not_ready(phase::UNREACHABLE, Some(error_chain(&e))),
        };
        let status = resp.status().as_u16();
        if matches!(status, 429 | 503) {
            return TargetHealth::not_ready(
                phase::SCALED_TO_ZERO,
                Some(format!("health answered {status}")),
            );
        }
        if !(200..300).contains(&status) {
            return TargetHealth::not_ready(
                phase::UNREACHABLE,
                Some(format!("health answered {status}")),
            );
        }
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        health_from_body(&body)
    }

    async fn decide(&self, call: &DecideCall) -> Result<Value, BackendError> {
        let body = chat_body(&self.config.model, call).to_string();
        let (status, _, bytes) = self.post("/v1/chat/completions", Bytes::from(body)).await?;
        if !(200..300).contains(&status) {
            return Err(BackendError::Upstream {
                status,
                body: snippet(&bytes),
            });
        }
        parse_reply(&bytes).map_err(|e| BackendError::Model(e.to_string()))
    }

    async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, BackendError> {
        let (status, content_type, body) = self.post(path, body).await?;
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
        })
    }
}

/// Read a `/health` body: `phase` (default `ready`), `ready`/`vllm_ready`,
/// `bytes_staged_gb` (serving.md §9.5).
pub fn health_from_body(body: &Value) -> TargetHealth {
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
    TargetHealth {
        phase: if ready { phase::READY.into() } else { phase },
        ready,
        bytes_staged_gb: body.get("bytes_staged_gb").and_then(Value::as_f64),
        detail: None,
    }
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
            (h.phase.as_str(), h.ready, h.bytes_staged_gb),
            ("staging_tmpfs", false, Some(4.5))
        );
        assert!(h.is_warming());
        let h = health_from_body(&json!({"status": "ok"}));
        assert!(h.ready && h.phase == "ready");
    }

    #[test]
    fn chat_body_shape() {
        let call = DecideCall {
            schema: json!({"questions": []}),
            state: json!({"ticket": "x"}),
            seed: 3,
        };
        let b = chat_body("m", &call);
        assert_eq!(b["messages"][0]["content"], "{\"questions\":[]}");
        assert_eq!(b["messages"][1]["content"], "{\"ticket\":\"x\"}");
        assert_eq!(b["seed"], 3);
    }
}
