//! # dgem-backend-llama
//!
//! The embedded CPU backend of dgem: runs GGUF text models (Gemma 3 270M by
//! default; any causal architecture llama.cpp reads) in-process through
//! llama.cpp's Rust bindings (`llama-cpp-2`) and implements [`dgem_backend::Backend`].
//!
//! Place in the dependency graph: `dgem-core` (tokenizer seam) ← `dgem-backend`
//! (the `Backend` trait) ← **this crate** ← `dgem-engine` / `dgem-cli`.
//!
//! - [`LlamaTokenizer`] reads the vocabulary from the GGUF metadata only
//!   (`vocab_only`), so slot resolution and prompt tests never load the weights.
//! - The prompt's chat turns come from the GGUF's own chat template (see
//!   [`TurnsOrigin`]) and travel in [`dgem_backend::BackendInfo::chat_turns`].
//! - [`LlamaBackend`] owns the model on a dedicated OS thread fed by a bounded
//!   queue. It reads a slot's labels from the final hidden state of the row
//!   that predicts it and the label tokens' rows of the output matrix (the
//!   262,144-row output head runs only for slots that ask for the full
//!   vocabulary) and reuses the KV cache of the longest common prefix between
//!   consecutive reads.
//!
//! ```no_run
//! use dgem_backend::{Backend, SequenceRead, SlotQuery};
//! use dgem_backend_llama::{LlamaBackend, LlamaConfig};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let backend = LlamaBackend::load(LlamaConfig::new("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m"))?;
//! let tok = backend.tokenizer();
//! let mut tokens = vec![2];
//! tokens.extend(tok.encode("The capital of France is")?);
//! let slot = SlotQuery { pos: tokens.len(), labels: vec![tok.encode(" Paris")?, tok.encode(" Rome")?], vocab: false };
//! let out = backend.forward(vec![SequenceRead { tokens, slots: vec![slot], reuse_points: Vec::new(), policy_point: None }]).await?;
//! println!("{:?}", out.sequences[0][0].label_logprobs);
//! # Ok(()) }
//! ```

mod backend;
mod config;
pub mod cpu;
mod kv_context;
mod labels;
mod lines;
mod readout;
mod runtime;
mod simd;
pub mod stage2;
mod tokenizer;
mod turns;
mod worker;

pub use backend::LlamaBackend;
pub use config::{
    default_threads, LlamaConfig, LlamaError, DEFAULT_KV_CHUNK, DEFAULT_KV_SNAPSHOT_BYTES,
};
pub use labels::Readout;
pub use readout::{read_slot, read_vocab, restricted_logprobs, LOGPROB_FLOOR};
pub use simd::{check as check_simd, simd_features, SimdFeature, SimdReport};
pub use tokenizer::LlamaTokenizer;
pub use turns::TurnsOrigin;
