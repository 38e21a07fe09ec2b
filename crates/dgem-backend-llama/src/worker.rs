//! The model thread: owns the [`KvContext`] and runs one job at a time from the
//! bounded queue, replying on each job's oneshot.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use dgem_backend::{BackendError, ForwardOutput, ForwardStats, SequenceRead};
use llama_cpp_2::model::LlamaModel;
use tokio::sync::{mpsc, oneshot};

use crate::config::WorkerConfig;
use crate::kv_context::KvContext;
use crate::labels::{OutputRows, Readout};
use crate::LlamaError;

/// What a [`Job`] asks of the model thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobKind {
    /// Read every slot of `reads` (the ordinary `forward`).
    Reads,
    /// The benchmark baseline: empty the KV cache, decode `reads[0].tokens` as
    /// llama.cpp's own prompt evaluation does (one batch, logits at the last
    /// row only), empty the cache again; `forward_ms` is the decode time.
    PromptEval,
    /// Empty the KV cache (the next read starts cold).
    Reset,
}

/// One `forward` call travelling to the model thread.
pub(crate) struct Job {
    /// What to do with `reads`.
    pub kind: JobKind,
    /// The reads to run, already validated.
    pub reads: Vec<SequenceRead>,
    /// When the job entered the queue.
    pub enqueued: Instant,
    /// Span of the caller, entered while the job runs.
    pub span: tracing::Span,
    /// Told when the model thread starts the job (ends the queue wait).
    pub started: Option<oneshot::Sender<()>>,
    /// Where the result goes.
    pub reply: oneshot::Sender<Result<ForwardOutput, BackendError>>,
}

/// Start the model thread; returns once its context exists and its readout
/// was checked (written to `readout`), or failed to.
pub(crate) fn spawn(
    model: Arc<LlamaModel>,
    cfg: WorkerConfig,
    rows: OutputRows,
    rx: mpsc::Receiver<Job>,
    readout: Arc<OnceLock<Readout>>,
) -> Result<JoinHandle<()>, LlamaError> {
    start_thread("dgem-llama", "model thread", move |ready| {
        run(&model, cfg, rows, rx, &readout, ready);
    })
}

/// Start thread `name` running `body`, which reports once on `ready` whether
/// its model context exists; returns when it has. Shared by the Stage-1
/// worker and the local Stage-2 thread.
///
/// # Errors
/// The error `body` reported, or [`LlamaError::Thread`] when the thread could
/// not start or exited before reporting (`what` names it).
pub(crate) fn start_thread<F>(name: &str, what: &str, body: F) -> Result<JoinHandle<()>, LlamaError>
where
    F: FnOnce(&std::sync::mpsc::SyncSender<Result<(), LlamaError>>) + Send + 'static,
{
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), LlamaError>>(1);
    let handle = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || body(&ready_tx))
        .map_err(|e| LlamaError::Thread(e.to_string()))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(LlamaError::Thread(format!("{what} exited during start-up")))
        }
    }
}

fn run(
    model: &LlamaModel,
    cfg: WorkerConfig,
    rows: OutputRows,
    mut rx: mpsc::Receiver<Job>,
    readout: &OnceLock<Readout>,
    ready: &std::sync::mpsc::SyncSender<Result<(), LlamaError>>,
) {
    let mut kv = match KvContext::new(model, cfg, rows) {
        Ok(mut kv) => {
            let checked =
                catch_unwind(AssertUnwindSafe(|| kv.check_readout())).unwrap_or_else(|_| {
                    kv.reset();
                    kv.read_from_head();
                    Readout::FullHead {
                        reason: "the readout check panicked".into(),
                    }
                });
            if let Readout::FullHead { reason } = &checked {
                tracing::warn!(%reason, "reading label logits from the output head");
            }
            let _ = readout.set(checked);
            let _ = ready.send(Ok(()));
            kv
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    while let Some(job) = rx.blocking_recv() {
        handle(&mut kv, job);
    }
    tracing::debug!("llama model thread stopping: queue closed");
}

fn handle(kv: &mut KvContext<'_>, mut job: Job) {
    if job.reply.is_closed() {
        // The caller timed out or went away while the job waited.
        return;
    }
    if let Some(started) = job.started.take() {
        let _ = started.send(());
    }
    let _guard = job.span.enter();
    let started = Instant::now();
    let queue_ms = started.duration_since(job.enqueued).as_secs_f64() * 1e3;
    let cancelled = || job.reply.is_closed();
    let result = catch_unwind(AssertUnwindSafe(|| match job.kind {
        JobKind::Reads => kv.run_reads(&job.reads, &cancelled),
        JobKind::PromptEval => kv.prompt_eval(&job.reads),
        JobKind::Reset => {
            kv.forget();
            Ok((Vec::new(), 0))
        }
    }))
    .unwrap_or_else(|_| {
        kv.forget();
        Err(BackendError::Model("llama.cpp call panicked".into()))
    });
    let forward_ms = match job.kind {
        // The baseline's time is its one `llama_decode`, as llama.cpp reports
        // prompt evaluation (not the cache clears around it).
        JobKind::PromptEval => kv.last_decode_ms(),
        JobKind::Reads | JobKind::Reset => started.elapsed().as_secs_f64() * 1e3,
    };
    let result = result.map(|(sequences, cached_tokens)| ForwardOutput {
        sequences,
        stats: ForwardStats {
            queue_ms,
            forward_ms,
            prompt_tokens: job.reads.iter().map(|r| r.tokens.len()).sum(),
            cached_tokens,
        },
    });
    tracing::debug!(queue_ms, forward_ms, ok = result.is_ok(), "llama forward");
    let _ = job.reply.send(result);
}
