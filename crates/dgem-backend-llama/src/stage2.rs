//! [`LocalStage2`]: a second, larger GGUF model as the cascade's Stage 2,
//! run in-process through llama.cpp so a laptop can cascade with no network.
//!
//! The Stage-2 model has its own weights, context and OS thread (separate
//! from the Stage-1 [`crate::LlamaBackend`]), fed by a bounded queue. Each
//! call wraps the cascade's prompt as one user turn of the model's chat
//! template and generates greedily (temperature 0) under a GBNF grammar
//! built from the request's response schema ([`grammar::slot_grammar`]), so
//! the reply is always a JSON object with exactly the escalated slots, each
//! `{decision, confidence, explanation}` with `decision` one of its allowed
//! values.
//!
//! ```no_run
//! use std::path::Path;
//! use dgem_backend_llama::stage2::{LocalStage2, LocalStage2Config};
//! # fn run() -> Result<(), dgem_backend_llama::LlamaError> {
//! let stage2 = LocalStage2::load(Path::new("gemma-3-4b-it-q4_k_m.gguf"), LocalStage2Config::default())?;
//! // `dgem decide … --cascade entropy --cascade-provider gguf:gemma-3-4b-it-q4_k_m.gguf`
//! # let _ = stage2; Ok(()) }
//! ```

mod generate;
pub mod grammar;

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Instant;

use async_trait::async_trait;
use dgem_cascade::provider::{excerpt, parse_object};
use dgem_cascade::{Stage2, Stage2Error, Stage2Reply, Stage2Request};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument as _;

use crate::LlamaError;
use generate::{Job, Stop, ThreadConfig};
use grammar::{slot_grammar, DEFAULT_MAX_EXPLANATION_CHARS, MAX_EXPLANATION_CHARS};

/// Provider name in logs, summaries and errors.
pub const PROVIDER: &str = "gguf";
/// Default context size of the Stage-2 model, in tokens (prompt and answer).
pub const DEFAULT_STAGE2_CONTEXT: usize = 4096;
/// Default capacity of the Stage-2 job queue: a full queue answers at once.
pub const DEFAULT_STAGE2_QUEUE: usize = 4;
/// Generated tokens allowed for the reply's braces, whatever the slot count.
pub const BASE_NEW_TOKENS: usize = 64;
/// Generated tokens allowed per slot (keys, decision, confidence and an
/// explanation of ~200 characters at ~4 characters a token).
pub const NEW_TOKENS_PER_SLOT: usize = 96;

/// How to run the Stage-2 model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalStage2Config {
    /// CPU threads for llama.cpp (default: available parallelism).
    pub n_threads: usize,
    /// Context size in tokens: the prompt plus the longest answer must fit.
    pub context_size: usize,
    /// Jobs that may wait for the model thread; one more answers at once
    /// with a [`Stage2Error::Transport`] saying the queue is full.
    pub queue_capacity: usize,
    /// Longest explanation the grammar lets the model write, in characters.
    pub max_explanation_chars: usize,
}

impl Default for LocalStage2Config {
    /// All available threads, a 4096-token context, a queue of 4 and
    /// explanations of at most 200 characters.
    fn default() -> Self {
        Self {
            n_threads: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            context_size: DEFAULT_STAGE2_CONTEXT,
            queue_capacity: DEFAULT_STAGE2_QUEUE,
            max_explanation_chars: DEFAULT_MAX_EXPLANATION_CHARS,
        }
    }
}

/// Most tokens generated for a reply covering `slots` slots:
/// [`BASE_NEW_TOKENS`] + [`NEW_TOKENS_PER_SLOT`] · `slots`.
pub fn max_new_tokens(slots: usize) -> usize {
    BASE_NEW_TOKENS.saturating_add(NEW_TOKENS_PER_SLOT.saturating_mul(slots))
}

/// A local GGUF model answering escalated slots ([`Stage2`] named `gguf`).
///
/// Text only: a request with images is refused. The request's `model` is
/// ignored (one model is loaded); replies name the GGUF's file stem. A
/// caller that stops waiting (its timeout, or a dropped future) makes the
/// thread stop at the next generated token. Dropping the provider closes the
/// queue and joins the thread.
pub struct LocalStage2 {
    path: PathBuf,
    model: String,
    cfg: LocalStage2Config,
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LocalStage2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStage2")
            .field("path", &self.path)
            .field("model", &self.model)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

use crate::backend::check;

impl LocalStage2 {
    /// Load the GGUF at `path` on a new thread with its own context and
    /// return when it is ready to answer.
    ///
    /// # Errors
    /// [`LlamaError`] when a config value is out of range, the file is
    /// missing or unreadable, or the context cannot be created.
    pub fn load(path: &Path, cfg: LocalStage2Config) -> Result<Self, LlamaError> {
        check(cfg.n_threads >= 1, "n_threads", "at least 1", cfg.n_threads)?;
        check(
            cfg.queue_capacity >= 1,
            "queue_capacity",
            "at least 1",
            cfg.queue_capacity,
        )?;
        check(
            (256..=i32::MAX as usize).contains(&cfg.context_size),
            "context_size",
            "between 256 and 2^31-1",
            cfg.context_size,
        )?;
        check(
            (1..=MAX_EXPLANATION_CHARS).contains(&cfg.max_explanation_chars),
            "max_explanation_chars",
            "between 1 and 2000",
            cfg.max_explanation_chars,
        )?;
        let started = Instant::now();
        let (tx, rx) = mpsc::channel(cfg.queue_capacity);
        let thread = generate::spawn(
            ThreadConfig {
                path: path.to_path_buf(),
                n_threads: cfg.n_threads,
                context_size: cfg.context_size,
            },
            rx,
        )?;
        let model = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        tracing::info!(
            model = %model,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "gguf Stage-2 provider ready"
        );
        Ok(Self {
            path: path.to_path_buf(),
            model,
            cfg,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// The name replies carry: the GGUF's file stem.
    pub fn model(&self) -> &str {
        &self.model
    }

    fn transport(&self, message: impl Into<String>) -> Stage2Error {
        Stage2Error::Transport {
            provider: PROVIDER.into(),
            url: self.path.display().to_string(),
            message: message.into(),
        }
    }
}

#[async_trait]
impl Stage2 for LocalStage2 {
    fn name(&self) -> &str {
        PROVIDER
    }

    async fn resolve(&self, req: &Stage2Request) -> Result<Stage2Reply, Stage2Error> {
        if !req.images.is_empty() {
            return Err(Stage2Error::Config {
                provider: PROVIDER.into(),
                field: "images".into(),
                allowed: "none: the local GGUF provider reads no images (use `openai:…` or \
                          `vertex` for policies with images)"
                    .into(),
                got: format!("{} image(s)", req.images.len()),
            });
        }
        let grammar = slot_grammar(&req.response_schema, self.cfg.max_explanation_chars)?;
        let max_new = max_new_tokens(grammar.slots.len());
        if !req.model.is_empty() && req.model != self.model {
            tracing::debug!(asked = %req.model, serving = %self.model, "gguf serves one model; `model` ignored");
        }
        let span = tracing::info_span!(
            "gguf_stage2",
            model = %self.model,
            slots = grammar.slots.len(),
            max_new_tokens = max_new,
        );
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| self.transport("the provider is shutting down"))?;
        let (reply, rx) = oneshot::channel();
        let job = Job {
            prompt: req.prompt.clone(),
            grammar: grammar.gbnf,
            max_new_tokens: max_new,
            enqueued: Instant::now(),
            span: span.clone(),
            reply,
        };
        tx.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => self.transport(format!(
                "the Stage-2 queue of {} jobs is full",
                self.cfg.queue_capacity
            )),
            mpsc::error::TrySendError::Closed(_) => self.transport("the model thread has stopped"),
        })?;
        // Dropping `rx` on timeout closes the reply channel: the thread skips
        // the job if it still waits, or stops at its next token.
        let answer = tokio::time::timeout(req.timeout, rx)
            .instrument(span.clone())
            .await;
        let done = match answer {
            Err(_) => {
                return Err(self.transport(format!(
                    "no answer within {} ms (the request timeout); generation stopped",
                    req.timeout.as_millis()
                )))
            }
            Ok(Err(_)) => return Err(self.transport("the model thread dropped the request")),
            Ok(Ok(result)) => result?,
        };
        span.in_scope(|| {
            tracing::info!(
                queue_ms = done.queue_ms,
                run_ms = done.run_ms,
                prompt_tokens = done.prompt_tokens,
                new_tokens = done.new_tokens,
                full_scans = done.full_scans,
                stop = ?done.stop,
                "gguf stage-2 answered"
            );
        });
        if done.stop == Stop::Budget {
            return Err(Stage2Error::Reply {
                provider: PROVIDER.into(),
                field: "completion".into(),
                allowed: format!("a complete JSON object within {max_new} generated tokens"),
                got: excerpt(&done.text),
            });
        }
        let slots = parse_object(PROVIDER, "completion", &done.text)?;
        Ok(Stage2Reply {
            model: self.model.clone(),
            slots,
        })
    }
}

impl Drop for LocalStage2 {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("Stage-2 model thread panicked");
            }
        }
    }
}
