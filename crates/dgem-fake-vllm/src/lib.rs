//! # dgem-fake-vllm
//!
//! Dev-only (`publish = false`): an in-process fake of vLLM serving
//! DiffusionGemma, for testing `dgem-backend-vllm` without weights or a GPU.
//!
//! It speaks the wire format of serving.md §5: `POST /v1/chat/completions`
//! (plain reads), `POST /v1/completions` (continuation reads and thoughts) and
//! `GET /health`. Every field of every request is checked the way vLLM checks it
//! (§5.4): unknown, missing or mistyped fields are answered with 400 and a
//! message naming the field. Accepted requests are recorded for assertions.
//! Replies carry scripted logprobs (a [`Script`] sees the seeded canvas and the
//! requested label ids) in the exact shapes of §5.1/§5.2, token ids written as
//! `token_id:<N>`. On demand the fake is not ready for N health polls, or fails
//! the next calls with a status, a slow reply, a dropped connection, a body that
//! is not JSON or a reply without logprobs ([`Failure`]).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use dgem_fake_vllm::{FakeConfig, FakeVllm};
//! let fake = FakeVllm::start(FakeConfig::default()).await?;
//! println!("vLLM at {}", fake.url());
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod reply;
mod validate;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

pub use reply::scripts;

/// What a [`Script`] sees of one read.
#[derive(Debug, Clone)]
pub struct ReadView {
    /// `/v1/chat/completions` or `/v1/completions`.
    pub path: String,
    /// The seeded canvas (`vllm_xargs.diffusion_seed_canvas`).
    pub canvas: Vec<u32>,
    /// `logprob_token_ids`, as sent.
    pub label_ids: Vec<u32>,
    /// Whether the read is constrained to `label_ids`.
    pub constrained: bool,
    /// The prompt: the chat messages' text, or the token ids written as numbers.
    pub prompt: String,
}

/// Scripted logprobs: for each canvas position, `(token id, logprob)` entries
/// (the returned top set). Positions past the returned rows get an empty set.
pub type Script = dyn Fn(&ReadView) -> Vec<Vec<(u32, f64)>> + Send + Sync;

/// A failure to produce instead of a normal reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Answer with this status and body text.
    Status(u16, String),
    /// Wait this long, then answer normally (to trip client timeouts).
    Slow(Duration),
    /// Send the headers, then drop the connection mid-body.
    DropConnection,
    /// Send the headers and the first bytes of the body, then go silent for
    /// this long (a wedged upstream), then drop the connection.
    StallBody(Duration),
    /// Answer 200 with a body that is not JSON.
    MalformedJson,
    /// Answer 200 with valid JSON that lacks `logprobs`.
    MissingLogprobs,
}

/// Settings of the fake (the served model's limits, §5.4).
#[derive(Clone)]
pub struct FakeConfig {
    /// Served model name requests must use (`--served-model-name`).
    pub model: String,
    /// Served canvas length (`--diffusion-config canvas_length`).
    pub canvas_length: usize,
    /// Vocabulary size; ids must lie in `[0, vocab)`.
    pub vocab: u32,
    /// `--max-logprobs`: the largest `top_logprobs` / `logprobs` accepted.
    pub max_logprobs: u64,
    /// Most `logprob_token_ids` per request.
    pub logprob_token_ids_max: usize,
    /// The logprobs of each read.
    pub script: Arc<Script>,
    /// Token ids a thought request returns (the stop id is appended).
    pub thought: Vec<u32>,
    /// Keep only the first N accepted requests for [`FakeVllm::requests`]
    /// (`None`, the default: every one). A load run sets it, so that the
    /// record neither grows by a request body per request nor costs a clone
    /// of each; [`FakeVllm::accepted`] still counts them all.
    pub keep_requests: Option<usize>,
}

impl std::fmt::Debug for FakeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeConfig")
            .field("model", &self.model)
            .field("canvas_length", &self.canvas_length)
            .field("keep_requests", &self.keep_requests)
            .finish_non_exhaustive()
    }
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            model: "dgemma".into(),
            canvas_length: 128,
            vocab: 262_144,
            max_logprobs: 32,
            logprob_token_ids_max: 128,
            script: Arc::new(scripts::weights(|_, _, _| 1.0)),
            thought: Vec::new(),
            keep_requests: None,
        }
    }
}

/// One accepted request.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Request path.
    pub path: String,
    /// The JSON body.
    pub body: Value,
}

struct Shared {
    config: FakeConfig,
    requests: Mutex<Vec<Recorded>>,
    accepted: AtomicUsize,
    failures: Mutex<VecDeque<Failure>>,
    not_ready_polls: AtomicUsize,
    health_polls: AtomicUsize,
}

/// A running fake vLLM bound to `127.0.0.1:<random port>`; stops when dropped.
pub struct FakeVllm {
    url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FakeVllm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeVllm").field("url", &self.url).finish()
    }
}

impl Drop for FakeVllm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeVllm {
    /// Bind `127.0.0.1:0` and serve in a background task.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start(config: FakeConfig) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            config,
            requests: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
            failures: Mutex::new(VecDeque::new()),
            not_ready_polls: AtomicUsize::new(0),
            health_polls: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/health", get(health))
            .route("/v1/chat/completions", post(chat))
            .route("/v1/completions", post(completions))
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            // The fake lives as long as the test; a serve error ends it.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, shared, task })
    }

    /// Base URL, e.g. `http://127.0.0.1:41234` (no trailing slash).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Requests accepted so far (after validation), in arrival order; only
    /// the first [`FakeConfig::keep_requests`] when that is set.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// How many requests were accepted so far, kept or not.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// `GET /health` calls so far.
    pub fn health_polls(&self) -> usize {
        self.shared.health_polls.load(Ordering::SeqCst)
    }

    /// Answer `/health` with 503 for the next `n` polls.
    pub fn set_not_ready_polls(&self, n: usize) {
        self.shared.not_ready_polls.store(n, Ordering::SeqCst);
    }

    /// Fail the next `count` POST requests with `failure`.
    pub fn fail_next(&self, failure: Failure, count: usize) {
        let mut q = lock(&self.shared.failures);
        q.extend(std::iter::repeat_n(failure, count));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn health(State(s): State<Arc<Shared>>) -> StatusCode {
    s.health_polls.fetch_add(1, Ordering::SeqCst);
    let left = s.not_ready_polls.load(Ordering::SeqCst);
    if left > 0 {
        s.not_ready_polls.store(left - 1, Ordering::SeqCst);
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    StatusCode::OK
}

async fn chat(State(s): State<Arc<Shared>>, body: String) -> Response {
    handle(&s, "/v1/chat/completions", &body).await
}

async fn completions(State(s): State<Arc<Shared>>, body: String) -> Response {
    handle(&s, "/v1/completions", &body).await
}

fn bad_request(message: String) -> Response {
    let body =
        json!({"object": "error", "message": message, "type": "BadRequestError", "code": 400});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

async fn handle(s: &Shared, path: &str, raw: &str) -> Response {
    let failure = lock(&s.failures).pop_front();
    match failure {
        Some(Failure::Status(code, text)) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return (status, text).into_response();
        }
        Some(Failure::Slow(d)) => tokio::time::sleep(d).await,
        Some(Failure::DropConnection) => {
            let broken = futures_util::stream::iter([
                Ok(axum::body::Bytes::from_static(b"{\"choices\": [")),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "fake vLLM dropped the connection",
                )),
            ]);
            return Response::new(Body::from_stream(broken));
        }
        Some(Failure::StallBody(d)) => {
            let first = futures_util::stream::iter([Ok::<_, std::io::Error>(
                axum::body::Bytes::from_static(b"{\"choices\": ["),
            )]);
            let silent = futures_util::stream::once(async move {
                tokio::time::sleep(d).await;
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "fake vLLM gave up after stalling",
                ))
            });
            return Response::new(Body::from_stream(futures_util::StreamExt::chain(
                first, silent,
            )));
        }
        Some(Failure::MalformedJson) => {
            return (StatusCode::OK, "<html>not json</html>").into_response();
        }
        Some(Failure::MissingLogprobs) | None => {}
    }
    let body: Value = match serde_json::from_str(raw) {
        Ok(v) => v,
        Err(e) => return bad_request(format!("request body is not JSON: {e}")),
    };
    let req = match validate::request(&s.config, path, &body) {
        Ok(r) => r,
        Err(message) => return bad_request(message),
    };
    s.accepted.fetch_add(1, Ordering::SeqCst);
    {
        let mut kept = lock(&s.requests);
        if s.config.keep_requests.is_none_or(|n| kept.len() < n) {
            kept.push(Recorded {
                path: path.to_owned(),
                body: body.clone(),
            });
        }
    }
    if failure == Some(Failure::MissingLogprobs) {
        return axum::Json(
            json!({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}),
        )
        .into_response();
    }
    axum::Json(reply::build(&s.config, path, &req)).into_response()
}
