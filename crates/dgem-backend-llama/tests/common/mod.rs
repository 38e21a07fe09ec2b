//! Shared helpers for the model tests: they run only when `DGEM_TEST_MODEL`
//! points at a Gemma 3 GGUF.
#![allow(dead_code, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dgem_backend::{
    Backend, BackendError, BackendInfo, ForwardOutput, SequenceRead, SlotLogits, SlotQuery,
    VocabRead,
};
use dgem_backend_llama::{LlamaBackend, LlamaConfig};
use dgem_core::tokenizer::Tokenizer;

/// A backend that keeps every read the engine sends it, then reads it.
#[derive(Debug)]
pub struct Recorder {
    pub inner: Arc<LlamaBackend>,
    pub reads: Mutex<Vec<SequenceRead>>,
}

impl Recorder {
    /// A recorder around `inner`, with nothing recorded yet.
    pub fn new(inner: LlamaBackend) -> Arc<Self> {
        Arc::new(Self {
            inner: Arc::new(inner),
            reads: Mutex::default(),
        })
    }

    /// Every read recorded so far, in the order sent.
    pub fn reads(&self) -> Vec<SequenceRead> {
        self.reads.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Backend for Recorder {
    fn info(&self) -> &BackendInfo {
        self.inner.info()
    }
    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        self.inner.tokenizer()
    }
    async fn forward(&self, reads: Vec<SequenceRead>) -> Result<ForwardOutput, BackendError> {
        if let Ok(mut seen) = self.reads.lock() {
            seen.extend(reads.iter().cloned());
        }
        self.inner.forward(reads).await
    }
}

/// The GGUF named by `DGEM_TEST_MODEL`, or `None` (with a note) when unset.
pub fn model_path(test: &str) -> Option<PathBuf> {
    match std::env::var_os("DGEM_TEST_MODEL") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            eprintln!("skipping {test}: set DGEM_TEST_MODEL to a Gemma 3 GGUF to run it");
            None
        }
    }
}

/// A backend with a small context and two threads.
pub fn backend(path: &PathBuf) -> LlamaBackend {
    let mut cfg = LlamaConfig::new(path, "test-model");
    cfg.context_size = 1024;
    cfg.n_threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    // These tests compare lone reads through the prefix cache; batched reads
    // (the default) have a test of their own.
    cfg.batch_reads = false;
    LlamaBackend::load(cfg).expect("model loads")
}

/// A backend with a small context and two threads that keeps policy
/// prefixes on disk in `store` (none when `None`), reads batched as by
/// default.
pub fn backend_with_store(path: &Path, store: Option<&Path>) -> LlamaBackend {
    let mut cfg = LlamaConfig::new(path, "test-model");
    cfg.context_size = 1024;
    cfg.n_threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    cfg.kv_store = store.map(Path::to_path_buf);
    LlamaBackend::load(cfg).expect("model loads")
}

/// BOS + `text` encoded.
pub fn prompt(tok: &dyn Tokenizer, text: &str) -> Vec<u32> {
    let mut ids = vec![tok.bos_id().expect("model has a BOS")];
    ids.extend(tok.encode(text).expect("encodes"));
    ids
}

/// First-token labels of `words`, each pooled with its `▁`-less form.
pub fn labels(tok: &dyn Tokenizer, words: &[&str]) -> Vec<Vec<u32>> {
    words
        .iter()
        .map(|w| {
            let mut ids = vec![tok.encode(&format!(" {w}")).expect("encodes")[0]];
            ids.push(tok.encode(w).expect("encodes")[0]);
            ids
        })
        .collect()
}

/// One read with a single slot at the end of `tokens`, full vocabulary asked.
pub fn read_at_end(tokens: Vec<u32>, labels: Vec<Vec<u32>>) -> SequenceRead {
    let pos = tokens.len();
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

/// The full-vocabulary reading of a slot that asked for it.
pub fn vocab(s: &SlotLogits) -> &VocabRead {
    s.vocab
        .as_ref()
        .expect("the slot asked for the full vocabulary")
}

/// Assert two slot readings agree within `tol`.
pub fn assert_close(a: &SlotLogits, b: &SlotLogits, tol: f64) {
    assert_eq!(a.label_logprobs.len(), b.label_logprobs.len());
    for (x, y) in a.label_logprobs.iter().zip(&b.label_logprobs) {
        assert!((x - y).abs() <= tol, "label logprob {x} vs {y}");
    }
    match (&a.vocab, &b.vocab) {
        (Some(a), Some(b)) => assert!(
            (a.entropy - b.entropy).abs() <= tol,
            "entropy {} vs {}",
            a.entropy,
            b.entropy
        ),
        (None, None) => {}
        _ => panic!("one reading has the full vocabulary and the other not"),
    }
}

/// A ~200-token policy-like prompt.
pub const LONG_PROMPT: &str = include_str!("../prompt.txt");
