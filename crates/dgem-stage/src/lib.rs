//! Weight staging for the serving container (serving.md §10): copy a model
//! directory from a Cloud Storage bucket, an HTTP(S) URL with a
//! [manifest](manifest) or a local directory into a local directory, in the
//! order that lets the engine start at once:
//!
//! 1. **listing**: the file list with sizes (and SHA-256 where published);
//! 2. **headers**: small files (tokenizer, config) are fetched whole, through a
//!    temporary name and a rename; each `*.safetensors` gets its header (the
//!    8-byte little-endian length plus the JSON) and is then sized to its full
//!    length (sparse), so config and header checks pass before any body byte;
//! 3. **bodies**: the rest of each safetensors file in large chunks
//!    ([`StageConfig::chunk_size`], 64 MiB) over up to [`StageConfig::parallel`]
//!    concurrent `Range` requests, each retried with backoff on dropped
//!    connections, short bodies, 429 and 5xx;
//! 4. **verifying**: sizes, and SHA-256 when known;
//! 5. `DEST/.ready` is written last. It is removed when a run starts, so a file
//!    that has its full size but not its bytes is never marked ready.
//!
//! A per-file journal (`DEST/.dgem-stage/journal/`, written atomically after each
//! chunk is synced) lets an interrupted run resume without fetching finished
//! chunks again. Progress goes to `DEST/.dgem-stage/progress.json`
//! ([`Progress`]), which `dgem serve --staging-dir DEST` reports on `/health`.
//!
//! Dependency graph: a leaf library (reqwest, tokio); only `dgem-cli` uses it.
//!
//! ```no_run
//! # async fn run() -> Result<(), dgem_stage::StageError> {
//! use dgem_stage::{stage, Source, StageConfig};
//! let cfg = StageConfig::new(Source::parse("gs://my-bucket/dgemma")?, "/tmp/dgemma".into());
//! let summary = stage(cfg).await?;
//! println!("{} bytes in {:.1} s", summary.bytes_total, summary.seconds);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod config;
pub mod error;
mod fetch;
mod journal;
pub mod manifest;
pub mod progress;
pub mod source;
mod stage;
pub mod token;

pub use config::StageConfig;
pub use error::StageError;
pub use manifest::{FileEntry, Manifest};
pub use progress::{read_progress, Phase, Progress};
pub use source::Source;
pub use stage::{stage, Summary};

/// Marker written in the destination once every file is staged and verified.
pub const READY_FILE: &str = ".ready";

/// Directory inside the destination holding journals and progress.
pub const STATE_DIR: &str = ".dgem-stage";

/// Progress file, relative to the destination (see [`progress`]).
pub const PROGRESS_FILE: &str = ".dgem-stage/progress.json";
