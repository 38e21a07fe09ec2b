//! [`LlamaBackend`]: the async face of the model thread.

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dgem_backend::{
    Attention, Backend, BackendError, BackendInfo, ForwardOutput, ForwardStats, Health, LabelMode,
    SequenceRead, SlotLogits, SlotQuery,
};
use dgem_core::tokenizer::{TokenId, Tokenizer};
use llama_cpp_2::model::params::LlamaModelParams;
use tokio::sync::{mpsc, oneshot};

use crate::config::WorkerConfig;
use crate::labels::{OutputRows, Readout};
use crate::tokenizer::{load_model, LlamaTokenizer};
use crate::turns::{chat_turns, TurnsOrigin};
use crate::worker::{self, Job, JobKind};
use crate::{LlamaConfig, LlamaError};

/// A GGUF text model (Gemma 3 by default; any causal architecture llama.cpp
/// reads) run in-process on the CPU.
///
/// The model lives on a dedicated OS thread fed by a bounded queue; `forward`
/// never blocks an async worker. Dropping the backend closes the queue and joins
/// the thread (after the job in progress, if any).
pub struct LlamaBackend {
    info: BackendInfo,
    turns_origin: TurnsOrigin,
    readout: Readout,
    tokenizer: Arc<LlamaTokenizer>,
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    model_timeout: Option<Duration>,
    queue_timeout: Option<Duration>,
    queue_capacity: usize,
}

impl std::fmt::Debug for LlamaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaBackend")
            .field("info", &self.info)
            .field("turns_origin", &self.turns_origin)
            .field("readout", &self.readout)
            .field("model_timeout", &self.model_timeout)
            .field("queue_timeout", &self.queue_timeout)
            .field("queue_capacity", &self.queue_capacity)
            .finish_non_exhaustive()
    }
}

/// `Ok` when `ok`, else [`LlamaError::InvalidConfig`] naming `field`, what
/// it must be and the value `given` (also used by the local Stage 2).
pub(crate) fn check(
    ok: bool,
    field: &'static str,
    expected: &'static str,
    given: usize,
) -> Result<(), LlamaError> {
    if ok {
        Ok(())
    } else {
        Err(LlamaError::InvalidConfig {
            field,
            expected,
            given: given.to_string(),
        })
    }
}

impl LlamaBackend {
    /// Load the model, create its context on a new thread and return when it is
    /// ready to serve.
    ///
    /// # Errors
    /// [`LlamaError`] when the config is out of range, the file is missing or
    /// unreadable, or the context cannot be created.
    pub fn load(config: LlamaConfig) -> Result<Self, LlamaError> {
        check(
            config.n_threads >= 1,
            "n_threads",
            "at least 1",
            config.n_threads,
        )?;
        check(
            config.queue_capacity >= 1,
            "queue_capacity",
            "at least 1",
            config.queue_capacity,
        )?;
        check(
            (16..=i32::MAX as usize).contains(&config.context_size),
            "context_size",
            "between 16 and 2^31-1",
            config.context_size,
        )?;
        check(
            (1..=config.context_size).contains(&config.kv_chunk),
            "kv_chunk",
            "between 1 and the context size",
            config.kv_chunk,
        )?;
        let started = Instant::now();
        let model = Arc::new(load_model(
            &config.model_path,
            &LlamaModelParams::default(),
        )?);
        let tokenizer = LlamaTokenizer::from_model(Arc::clone(&model))?;
        let (chat_turns, turns_origin) = chat_turns(&model);
        let (tx, rx) = mpsc::channel(config.queue_capacity);
        let worker_cfg = WorkerConfig {
            n_threads: config.n_threads,
            follow_load: config.follow_load,
            context_size: config.context_size,
            logits_all: config.logits_all,
            batch_reads: config.batch_reads,
            kv_chunk: config.kv_chunk,
            kv_snapshot_bytes: config.kv_snapshot_bytes,
            kv_store: config
                .kv_store
                .clone()
                .map(|dir| (dir, model_identity(&config))),
        };
        let model = tokenizer.model();
        let rows = OutputRows::open(
            &config.model_path,
            usize::try_from(model.n_embd()).unwrap_or(0),
            usize::try_from(model.n_vocab()).unwrap_or(0),
        )?;
        let checked = Arc::new(OnceLock::new());
        let thread = worker::spawn(model, worker_cfg, rows, rx, Arc::clone(&checked))?;
        let readout = checked.get().cloned().unwrap_or(Readout::FullHead {
            reason: "the model thread reported no readout check".into(),
        });
        tracing::info!(
            model = %config.model_path.display(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            threads = config.n_threads,
            context = config.context_size,
            turns = turns_origin.name(),
            readout = ?readout,
            "llama.cpp model loaded"
        );
        Ok(Self {
            info: BackendInfo {
                runtime: "llama.cpp".into(),
                model_id: config.model_id,
                model_sha256: config.sha256,
                attention: Attention::Causal,
                label_mode: LabelMode::Words,
                max_tokens: config.context_size,
                supports_images: false,
                canvas: None,
                chat_turns,
            },
            turns_origin,
            readout,
            tokenizer: Arc::new(tokenizer),
            tx: Some(tx),
            thread: Some(thread),
            model_timeout: config.model_timeout,
            queue_timeout: config.queue_timeout,
            queue_capacity: config.queue_capacity,
        })
    }

    /// Where the prompt's chat turns ([`BackendInfo::chat_turns`]) came from:
    /// the GGUF's chat template, the Gemma default, or none.
    pub fn turns_origin(&self) -> TurnsOrigin {
        self.turns_origin
    }

    /// How label logits are read: from the label rows of the output matrix
    /// (checked at load against llama.cpp's logits), or from the head.
    pub fn readout(&self) -> &Readout {
        &self.readout
    }

    /// The concrete tokenizer (same vocabulary as [`Backend::tokenizer`]).
    pub fn llama_tokenizer(&self) -> &LlamaTokenizer {
        &self.tokenizer
    }

    /// Send one job to the model thread and wait for its answer, under the
    /// queue and model timeouts.
    async fn submit(
        &self,
        kind: JobKind,
        reads: Vec<SequenceRead>,
    ) -> Result<ForwardOutput, BackendError> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| BackendError::Unavailable("backend is shutting down".into()))?;
        let (reply, rx) = oneshot::channel();
        let (started, started_rx) = oneshot::channel();
        let job = Job {
            kind,
            reads,
            enqueued: Instant::now(),
            span: tracing::Span::current(),
            started: Some(started),
            reply,
        };
        tx.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => BackendError::Overloaded(format!(
                "llama.cpp queue of {} jobs is full",
                self.queue_capacity
            )),
            mpsc::error::TrySendError::Closed(_) => {
                BackendError::Unavailable("model thread has stopped".into())
            }
        })?;
        // Two budgets: the wait in the queue, then the model time. A job whose
        // queue wait runs out is dropped unrun (the worker skips a job whose
        // caller is gone) and the caller hears `Overloaded`, not `Timeout`.
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        if let Some(limit) = self.queue_timeout {
            match tokio::time::timeout(limit, started_rx).await {
                Ok(_) => {}
                Err(_) => {
                    return Err(BackendError::Overloaded(format!(
                        "waited {} ms in the llama.cpp queue (the queue timeout) before the model could start",
                        ms(limit)
                    )))
                }
            }
        } else {
            let _ = started_rx.await;
        }
        let answer = async {
            rx.await
                .map_err(|_| BackendError::Unavailable("model thread dropped the request".into()))?
        };
        match self.model_timeout {
            Some(limit) => tokio::time::timeout(limit, answer)
                .await
                .map_err(|_| BackendError::Timeout(ms(limit)))?,
            None => answer.await,
        }
    }

    /// The benchmark baseline, on the model thread and its context:
    /// llama.cpp's own prompt evaluation of `tokens` (an empty KV cache, the
    /// whole prompt in one `llama_decode`, logits at the last row only), with
    /// the cache emptied again afterwards. With `cached` > 0, the first
    /// `cached` tokens are decoded first, untimed, and only the rest is timed:
    /// the evaluation of the tokens new to a prompt whose prefix is cached.
    /// Returns the timed decode's wall time in ms and the last row read over
    /// `labels` (empty `labels`: no slot).
    ///
    /// # Errors
    /// [`BackendError::InvalidRequest`] for an empty or too long prompt,
    /// `cached` not below its length, or an id outside the vocabulary;
    /// otherwise as [`Backend::forward`].
    pub async fn prompt_eval(
        &self,
        tokens: Vec<TokenId>,
        cached: usize,
        labels: Vec<Vec<TokenId>>,
    ) -> Result<(f64, Option<SlotLogits>), BackendError> {
        if cached > 0 && cached >= tokens.len() {
            return Err(BackendError::InvalidRequest(format!(
                "cached prefix of {cached} tokens is not shorter than the {}-token prompt",
                tokens.len()
            )));
        }
        let pos = tokens.len();
        let read = SequenceRead {
            tokens,
            slots: vec![SlotQuery {
                pos,
                labels,
                vocab: true,
            }],
            // The model thread's prompt evaluation reads its cached prefix here.
            reuse_points: if cached > 0 { vec![cached] } else { Vec::new() },
            policy_point: None,
        };
        validate(
            std::slice::from_ref(&read),
            self.tokenizer.vocab_size(),
            self.info.max_tokens,
        )?;
        let out = self.submit(JobKind::PromptEval, vec![read]).await?;
        let slot = out
            .sequences
            .into_iter()
            .next()
            .and_then(|s| s.into_iter().next());
        Ok((out.stats.forward_ms, slot))
    }

    /// Empty the KV cache: the next read decodes its whole prompt (a cold read).
    ///
    /// # Errors
    /// As [`Backend::forward`] (queue full, thread stopped, timeouts).
    pub async fn clear_cache(&self) -> Result<(), BackendError> {
        self.submit(JobKind::Reset, Vec::new()).await.map(|_| ())
    }
}

/// What identifies the model file for [`crate::LlamaConfig::kv_store`]: its
/// sha256 when known, else its id, size and modification time (a changed
/// file is another model).
fn model_identity(config: &crate::LlamaConfig) -> String {
    if let Some(sha) = &config.sha256 {
        return format!("sha256 {sha}");
    }
    let meta = std::fs::metadata(&config.model_path).ok();
    let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
    let mtime = meta
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{} {size} {mtime}", config.model_id)
}

/// Check every read against the vocabulary and the context size.
///
/// # Errors
/// [`BackendError::InvalidRequest`] naming the read, the slot and the bad value.
pub(crate) fn validate(
    reads: &[SequenceRead],
    vocab: usize,
    max_tokens: usize,
) -> Result<(), BackendError> {
    let bad = |msg: String| Err(BackendError::InvalidRequest(msg));
    for (r, read) in reads.iter().enumerate() {
        let n = read.tokens.len();
        if n == 0 {
            return bad(format!("read {r}: `tokens` must not be empty"));
        }
        if n > max_tokens {
            return bad(format!("read {r}: `tokens` must hold at most {max_tokens} tokens (context size). Given: {n}"));
        }
        if let Some((i, t)) = read
            .tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab)
        {
            return bad(format!(
                "read {r}: `tokens[{i}]` must be below the vocabulary size {vocab}. Given: {t}"
            ));
        }
        for (s, slot) in read.slots.iter().enumerate() {
            if slot.pos == 0 || slot.pos > n {
                return bad(format!(
                    "read {r} slot {s}: `pos` must be in 1..={n} (a causal model predicts position p from p-1). Given: {}",
                    slot.pos
                ));
            }
            for (l, ids) in slot.labels.iter().enumerate() {
                if let Some(&t) = ids.iter().find(|&&t| t as usize >= vocab) {
                    return bad(format!(
                        "read {r} slot {s}: `labels[{l}]` ids must be below the vocabulary size {vocab}. Given: {t}"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[async_trait]
impl Backend for LlamaBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::clone(&self.tokenizer) as Arc<dyn Tokenizer>
    }

    async fn forward(&self, reads: Vec<SequenceRead>) -> Result<ForwardOutput, BackendError> {
        validate(&reads, self.tokenizer.vocab_size(), self.info.max_tokens)?;
        if reads.is_empty() {
            return Ok(ForwardOutput {
                sequences: Vec::new(),
                stats: ForwardStats::default(),
            });
        }
        self.submit(JobKind::Reads, reads).await
    }

    async fn health(&self) -> Health {
        let alive = self.tx.as_ref().is_some_and(|tx| !tx.is_closed())
            && self.thread.as_ref().is_some_and(|t| !t.is_finished());
        if alive {
            Health::Ready
        } else {
            Health::failed("llama.cpp model thread has stopped")
        }
    }
}

impl Drop for LlamaBackend {
    fn drop(&mut self) {
        // Closing the queue ends the thread's receive loop; then wait for it so the
        // model and context are freed before we return.
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("llama.cpp model thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(tokens: Vec<u32>, pos: usize, labels: Vec<Vec<u32>>) -> SequenceRead {
        SequenceRead {
            tokens,
            slots: vec![SlotQuery {
                pos,
                labels,
                vocab: true,
            }],
            reuse_points: Vec::new(),
            policy_point: None,
        }
    }

    #[test]
    fn validation_rejects_bad_reads_with_clear_messages() {
        let cases = [
            (read(vec![], 1, vec![]), "must not be empty"),
            (read(vec![2, 3], 0, vec![]), "`pos` must be in 1..=2"),
            (read(vec![2, 3], 3, vec![]), "Given: 3"),
            (read(vec![2, 300], 1, vec![]), "`tokens[1]`"),
            (read(vec![2, 3], 2, vec![vec![1], vec![999]]), "`labels[1]`"),
            (read(vec![1; 9], 2, vec![]), "at most 8 tokens"),
        ];
        for (r, needle) in cases {
            let err = validate(&[r], 256, 8).expect_err("must be rejected");
            assert!(matches!(err, BackendError::InvalidRequest(_)));
            assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        }
        validate(&[read(vec![2, 3], 2, vec![vec![5]])], 256, 8).expect("valid read");
    }
}
