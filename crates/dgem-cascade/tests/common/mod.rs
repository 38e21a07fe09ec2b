//! A fake Stage-2 server (axum on 127.0.0.1:0) that records each request,
//! and a hand-built decision to cascade over.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::Router;
use dgem_backend::Decision;
use dgem_core::envelope::AnswerOut;
use dgem_core::readout::aggregate;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use indexmap::IndexMap;
use serde_json::{json, Value};

/// One request as the fake server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

/// What the fake server sends back.
pub struct Answer {
    pub status: u16,
    pub body: String,
    pub delay: Duration,
}

impl Answer {
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }
}

/// Start a server answering every POST with `respond(&seen)`; returns its
/// base URL (`http://127.0.0.1:PORT`) and the log of requests.
pub async fn serve<F>(respond: F) -> (String, Arc<Mutex<Vec<Seen>>>)
where
    F: Fn(&Seen) -> Answer + Clone + Send + Sync + 'static,
{
    let log: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log2 = Arc::clone(&log);
    let app = Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: String| {
        let log = Arc::clone(&log2);
        let respond = respond.clone();
        async move {
            let seen = Seen {
                path: uri.path().to_string(),
                authorization: headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                body: serde_json::from_str(&body).unwrap_or(Value::Null),
            };
            let answer = respond(&seen);
            log.lock().unwrap().push(seen);
            tokio::time::sleep(answer.delay).await;
            let status = StatusCode::from_u16(answer.status).unwrap();
            (status, [("content-type", "application/json")], answer.body).into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), log)
}

/// A policy with a boolean, a choice and a score question.
pub fn schema() -> ValidSchema {
    ValidSchema::from_value(
        &json!({
            "instructions": "Route support tickets.",
            "questions": [
                {"id": "urgent", "type": "noul", "instructions": "Is it urgent?"},
                {"id": "team", "type": "choice", "instructions": "Which team?",
                 "options": ["billing", "engineering", "sales"]},
                {"id": "sev", "type": "score", "levels": ["low", "mid", "high"]}
            ]
        }),
        &SchemaDefaults::default(),
    )
    .unwrap()
}

fn answer(s: &ValidSchema, id: &str, dist: Vec<f64>) -> AnswerOut {
    let q = s.question(id).unwrap().clone();
    let labels = q.alternatives.iter().map(|a| a.name.clone()).collect();
    AnswerOut::new(q, labels, aggregate(&[dist]))
}

/// `urgent` sure (no), `team` hesitant (billing, H ≈ 0.90 nats), `sev` skipped.
pub fn decision(s: &ValidSchema) -> Decision {
    let mut answers = IndexMap::new();
    answers.insert("urgent".into(), Some(answer(s, "urgent", vec![0.02, 0.98])));
    answers.insert("team".into(), Some(answer(s, "team", vec![0.6, 0.3, 0.1])));
    answers.insert("sev".into(), None);
    Decision {
        answers,
        diagnostics: Default::default(),
    }
}

/// The Stage-2 JSON answering `team` with engineering.
pub fn team_answer() -> Value {
    json!({"team": {"decision": "engineering", "confidence": 0.9, "explanation": "A crash."}})
}
