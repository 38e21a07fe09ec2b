//! Configuration and load errors of the llama.cpp backend.

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// Default context size (tokens) of a [`LlamaConfig`].
pub const DEFAULT_CONTEXT_SIZE: usize = 2048;
/// Default budget of saved KV prefixes, bytes ([`LlamaConfig::kv_snapshot_bytes`]):
/// 256 MiB, about 64 policy prefixes of 225 tokens on Gemma 3 270M (measured:
/// 4.15 MB each, 18.5 KB of K and V a token).
pub const DEFAULT_KV_SNAPSHOT_BYTES: usize = 256 << 20;
/// Default canonical KV chunk size, tokens ([`LlamaConfig::kv_chunk`]).
pub const DEFAULT_KV_CHUNK: usize = 64;
/// Default capacity of the bounded job queue.
pub const DEFAULT_QUEUE_CAPACITY: usize = 64;
/// Default limit on the model time of one call (from the moment the model
/// thread starts it).
pub const DEFAULT_MODEL_TIMEOUT: Duration = Duration::from_secs(120);
/// Default limit on the time one call may wait in the queue before the model
/// thread starts it (the server's own request timeout, 300 s, bounds it too).
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(300);

/// Default CPU thread count: the cores this process may actually run on.
///
/// [`std::thread::available_parallelism`] reads, on Linux, the CPU affinity
/// mask (`sched_getaffinity`, so `taskset` and cpusets count) and the cgroup
/// CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`, so a container limited to 2
/// CPUs on a 64-core host gets 2), and takes the smaller. More threads than
/// that only make ggml's spinning workers fight for the same cores. 1 when it
/// cannot tell.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// How to load and run a GGUF model with llama.cpp.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Path of the GGUF file.
    pub model_path: PathBuf,
    /// Model id reported in [`dgem_backend::BackendInfo::model_id`].
    pub model_id: String,
    /// sha256 of the model file (hex), reported as is; this crate does not hash the file.
    pub sha256: Option<String>,
    /// CPU threads for llama.cpp (default: [`default_threads`]); with
    /// `follow_load`, the most a call uses.
    pub n_threads: usize,
    /// Before each call, lower its threads to the CPUs other processes leave
    /// free, at least 1 ([`crate::cpu`]): on a machine whose cores are all
    /// busy, a decision at full threads took 3.1× as long as at one thread
    /// (24.1 s against 7.8 s on 2 cores). Changes no number. Default on.
    pub follow_load: bool,
    /// Context size in tokens: the longest sequence one read may hold.
    pub context_size: usize,
    /// Capacity of the bounded job queue; a full queue answers `Overloaded`.
    pub queue_capacity: usize,
    /// Limit on the model time of one call, counted from the moment the model
    /// thread starts it; past it the call is [`dgem_backend::BackendError::Timeout`]
    /// and the thread stops at its next read. `None` waits forever.
    pub model_timeout: Option<Duration>,
    /// Limit on the time one call waits in the queue before the model thread
    /// starts it; past it the call is [`dgem_backend::BackendError::Overloaded`]
    /// (retryable, 503) and the job is dropped unrun. `None` waits forever.
    pub queue_timeout: Option<Duration>,
    /// Benchmark hook: request output logits at **every** position instead of only
    /// the rows that predict a slot. Slower (the 262k head runs per row); results
    /// are identical. Leave `false` outside benchmarks.
    pub logits_all: bool,
    /// Read the sequences of one call that share a prefix in a single decode (one
    /// llama sequence id per read, prefix KV shared) instead of one after another
    /// through the prefix cache. Either way the numbers of a request are the same
    /// on every run; the two ways differ from each other by up to ~0.05 nats
    /// (rows share kernel tiles differently). On by default: 8 questions cost
    /// 2.2× one instead of 2.4× (`dgem bench-speed`).
    pub batch_reads: bool,
    /// Canonical KV chunk size in tokens: prompts are decoded in chunks that end
    /// at multiples of it before each read's first reuse point and at its
    /// reuse points (`kv_context::canonical_plan`), and a prefix cached
    /// by an earlier call is reused only up to a chunk end both reads' chunk
    /// plans share, so a warm read decodes in batches of the same shape as a
    /// cold one and gives the same bits. Smaller: more reuse between prompts
    /// that begin alike without a reuse point, more `llama_decode` calls on a
    /// cold prompt. 1 to `context_size`.
    pub kv_chunk: usize,
    /// Most bytes of KV state kept as snapshots of prompt prefixes at reuse
    /// points (where a `schema_first` policy's prefix ends, where a
    /// `document_first` state ends and where the question block's head after
    /// it ends, where a chained policy's turn ends), restored instead of decoded when a later read starts
    /// with the same prefix and chunk chain; the answers are the same bits
    /// either way. Needed because option-order debiasing reads one prompt per
    /// listing and the KV cache keeps one chain. 0 turns it off. Default
    /// [`DEFAULT_KV_SNAPSHOT_BYTES`].
    pub kv_snapshot_bytes: usize,
    /// Folder where a policy's prefix KV state is kept between processes
    /// (where a `schema_first` policy's shared prefix ends), so a new
    /// process's first decision of a known policy decodes only its new
    /// tokens; answers are the same bits either way. One folder per model
    /// (the key holds the model, the context size and the build too). `None`
    /// (default) keeps nothing on disk.
    pub kv_store: Option<PathBuf>,
}

impl LlamaConfig {
    /// A config with defaults: [`default_threads`], 2048-token context, a
    /// 64-deep queue, 300 s of queue wait and 120 s of model time per call,
    /// batched reads, [`DEFAULT_KV_CHUNK`]-token canonical chunks.
    pub fn new(model_path: impl Into<PathBuf>, model_id: impl Into<String>) -> Self {
        Self {
            model_path: model_path.into(),
            model_id: model_id.into(),
            sha256: None,
            n_threads: default_threads(),
            follow_load: true,
            context_size: DEFAULT_CONTEXT_SIZE,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            model_timeout: Some(DEFAULT_MODEL_TIMEOUT),
            queue_timeout: Some(DEFAULT_QUEUE_TIMEOUT),
            logits_all: false,
            batch_reads: true,
            kv_chunk: DEFAULT_KV_CHUNK,
            kv_snapshot_bytes: DEFAULT_KV_SNAPSHOT_BYTES,
            kv_store: None,
        }
    }
}

/// Why the llama.cpp backend or tokenizer could not be loaded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LlamaError {
    /// The model file does not exist.
    #[error("`model_path` does not exist. Given: `{0}`")]
    ModelNotFound(PathBuf),
    /// A config value is out of range.
    #[error("`{field}` must be {expected}. Given: `{given}`")]
    InvalidConfig {
        /// Offending field.
        field: &'static str,
        /// Allowed range.
        expected: &'static str,
        /// Value received.
        given: String,
    },
    /// llama.cpp could not be initialised in this process.
    #[error("llama.cpp backend init failed: {0}")]
    Init(String),
    /// llama.cpp could not read the model file.
    #[error("cannot load model `{path}`: {reason}")]
    Load {
        /// Path of the GGUF file.
        path: PathBuf,
        /// What llama.cpp reported.
        reason: String,
    },
    /// The model does not look like what this backend expects (vocabulary, BOS…).
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// The inference context could not be created (out of memory, bad sizes).
    #[error("cannot create llama.cpp context: {0}")]
    Context(String),
    /// The model thread could not be started or died during load.
    #[error("model thread failed: {0}")]
    Thread(String),
}

/// What the thread needs to build its context.
#[derive(Debug, Clone)]
pub(crate) struct WorkerConfig {
    /// Most threads a call uses ([`crate::LlamaConfig::n_threads`]).
    pub n_threads: usize,
    /// Lower the threads of a call while other processes keep cores busy
    /// ([`crate::LlamaConfig::follow_load`], [`crate::cpu`]).
    pub follow_load: bool,
    pub context_size: usize,
    pub logits_all: bool,
    pub batch_reads: bool,
    /// Canonical KV chunk size in tokens ([`crate::LlamaConfig::kv_chunk`]).
    pub kv_chunk: usize,
    /// Bytes of saved KV prefixes ([`crate::LlamaConfig::kv_snapshot_bytes`]).
    pub kv_snapshot_bytes: usize,
    /// Policy prefixes kept on disk ([`crate::LlamaConfig::kv_store`]): the
    /// folder and the model's identity (sha256, else id, size and mtime).
    pub kv_store: Option<(std::path::PathBuf, String)>,
}
