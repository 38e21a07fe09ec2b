//! Scripted targets and request helpers shared by the gateway tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::Router;
use dgem_backend::{Attention, BackendError, BackendInfo, Health, LabelMode};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideError, DecideRequest, Decider, Decision};
use dgem_gateway::{Forward, Forwarded, Replica};
use http_body_util::BodyExt as _;
use serde_json::{json, Value};
use tower::ServiceExt as _;

/// One scripted reply of [`Scripted::decide`].
#[derive(Debug, Clone)]
pub enum Step {
    /// Answer after this delay.
    Ok(Duration),
    /// Fail with this error after this delay.
    Err(Duration, BackendError),
}

/// A replica (decider and pass-through) that answers from a script; when the
/// script runs out it answers Ok.
#[derive(Debug)]
pub struct Scripted {
    pub name: &'static str,
    steps: Mutex<VecDeque<Step>>,
    health: Mutex<VecDeque<Health>>,
    calls: Mutex<u32>,
    health_calls: Mutex<u32>,
}

impl Scripted {
    pub fn new(name: &'static str, steps: Vec<Step>) -> Arc<Self> {
        Arc::new(Self {
            name,
            steps: Mutex::new(steps.into()),
            health: Mutex::new(VecDeque::new()),
            calls: Mutex::new(0),
            health_calls: Mutex::new(0),
        })
    }

    /// Health answers in order; the last one repeats. Default: unreachable.
    pub fn with_health(self: Arc<Self>, hs: Vec<Health>) -> Arc<Self> {
        *self.health.lock().unwrap() = hs.into();
        self
    }

    pub fn calls(&self) -> u32 {
        *self.calls.lock().unwrap()
    }

    pub fn health_calls(&self) -> u32 {
        *self.health_calls.lock().unwrap()
    }
}

/// A reply to `schema` from replica `who`: every asked question answered with
/// its first alternative at 0.8 and the rest sharing 0.2.
pub fn envelope(schema: &ValidSchema, who: &str) -> Value {
    let answers: serde_json::Map<String, Value> = schema
        .asked()
        .iter()
        .map(|q| {
            let rest = 0.2 / (q.alternatives.len() - 1) as f64;
            let probs: serde_json::Map<String, Value> = q
                .alternatives
                .iter()
                .enumerate()
                .map(|(i, a)| (a.name.clone(), json!(if i == 0 { 0.8 } else { rest })))
                .collect();
            let first = &q.alternatives[0].name;
            (
                q.id.clone(),
                json!({"type": q.kind.as_str(), "label": first, "confidence": 0.8, "probabilities": probs}),
            )
        })
        .collect();
    json!({"answers": answers,
        "diagnostics": {"engine": who, "timing": {"total_ms": 5.0, "reads": 1}}})
}

/// The one-question schema the scripted replicas answer.
pub fn schema() -> ValidSchema {
    ValidSchema::from_value(
        &json!({"questions": [{"id": "urgent", "type": "boolean"}]}),
        &SchemaDefaults::default(),
    )
    .unwrap()
}

pub fn request() -> DecideRequest {
    DecideRequest {
        schema: schema(),
        state: json!("s"),
        seed: 42,
    }
}

impl Scripted {
    /// This scripted replica, deciding and forwarding.
    pub fn replica(self: &Arc<Self>) -> Replica {
        Replica {
            decider: self.clone(),
            forward: Some(self.clone()),
            url: format!("scripted://{}", self.name),
        }
    }

    async fn step(&self) -> Result<(), BackendError> {
        *self.calls.lock().unwrap() += 1;
        let step = self.steps.lock().unwrap().pop_front();
        match step {
            None => Ok(()),
            Some(Step::Ok(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            Some(Step::Err(d, e)) => {
                tokio::time::sleep(d).await;
                Err(e)
            }
        }
    }
}

#[async_trait]
impl Decider for Scripted {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            runtime: "scripted".into(),
            model_id: String::new(),
            model_sha256: None,
            attention: Attention::Causal,
            label_mode: LabelMode::Words,
            max_tokens: 0,
            supports_images: false,
            canvas: None,
            chat_turns: dgem_core::prompt::ChatTurns::gemma(),
        }
    }

    async fn health(&self) -> Health {
        *self.health_calls.lock().unwrap() += 1;
        let mut h = self.health.lock().unwrap();
        if h.len() > 1 {
            h.pop_front().unwrap()
        } else {
            h.front().cloned().unwrap_or_else(|| Health::Failed {
                phase: "unreachable".into(),
                reason: "scripted".into(),
            })
        }
    }

    async fn decide(&self, req: DecideRequest) -> Result<Decision, DecideError> {
        self.step().await?;
        Decision::from_envelope(&req.schema, &envelope(&req.schema, self.name))
    }
}

#[async_trait]
impl Forward for Scripted {
    async fn forward(&self, path: &str, body: Bytes) -> Result<Forwarded, BackendError> {
        self.step().await?;
        Ok(Forwarded {
            headers: Vec::new(),
            status: 200,
            content_type: Some("application/json".into()),
            body: Bytes::from(
                json!({"from": self.name, "path": path, "echo": String::from_utf8_lossy(&body)})
                    .to_string(),
            ),
        })
    }
}

pub fn refused() -> BackendError {
    BackendError::Connection("connection refused".into())
}

pub fn upstream(status: u16) -> BackendError {
    BackendError::Upstream {
        status,
        body: format!("status {status}"),
    }
}

/// Send a request to `app`; returns status, `X-DGem-Backend-Used` and the JSON body.
pub async fn send(
    app: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, Option<String>, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let resp = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = resp.status();
    let used = resp
        .headers()
        .get("x-dgem-backend-used")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, used, json)
}
