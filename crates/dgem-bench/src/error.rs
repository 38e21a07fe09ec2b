//! Errors of the benchmark library.

use std::path::PathBuf;

/// Everything that can go wrong while loading, running or reporting a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file could not be read or written.
    #[error("cannot access `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A dataset row cannot be mapped (only raised in `--strict` mode; otherwise
    /// the row is refused: counted and listed in the report and the receipt).
    #[error("{path}:{line}: malformed row: {message}")]
    Row {
        /// Dataset file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The dataset file holds no row at all (not even a refused one).
    #[error("`dataset` {0} has no usable rows")]
    Empty(PathBuf),
    /// A template failed to render or its schema is invalid (a user error for that item).
    #[error("item `{id}`: {message}")]
    Item {
        /// Item id.
        id: String,
        /// What went wrong.
        message: String,
    },
    /// The engine failed in a way that stops the run (backend down, model error).
    #[error("item `{id}`: the engine failed: {source}")]
    Engine {
        /// Item id.
        id: String,
        /// The cause.
        #[source]
        source: dgem_engine::DecideError,
    },
    /// A `.partial` file belongs to a different dataset or settings.
    #[error("`--resume`: {path} was written for a different dataset or settings (fingerprint {found}, expected {expected}); delete it or drop `--resume`")]
    ResumeMismatch {
        /// The partial file.
        path: PathBuf,
        /// Fingerprint in the file.
        found: String,
        /// Fingerprint of this run.
        expected: String,
    },
    /// A receipt or JSON value could not be (de)serialized.
    #[error("`{what}` is not valid JSON for this purpose: {source}")]
    Json {
        /// What was being read or written.
        what: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A command-line style argument is invalid.
    #[error("{0}")]
    Invalid(String),
    /// Drawing a chart failed.
    #[error("cannot draw `{path}`: {message}")]
    Plot {
        /// Output file.
        path: PathBuf,
        /// The cause.
        message: String,
    },
    /// A worker task panicked or was cancelled.
    #[error("a benchmark worker stopped unexpectedly: {0}")]
    Worker(String),
}

impl BenchError {
    /// Whether the user must fix something (bad dataset, arguments, resume file)
    /// rather than the engine having failed.
    pub fn is_user_error(&self) -> bool {
        match self {
            Self::Row { .. }
            | Self::Empty(_)
            | Self::Item { .. }
            | Self::ResumeMismatch { .. }
            | Self::Invalid(_) => true,
            Self::Engine { source, .. } => source.is_user_error(),
            Self::Io { .. } | Self::Json { .. } | Self::Plot { .. } | Self::Worker(_) => false,
        }
    }

    /// Whether this error concerns one item only, so a run records it and goes
    /// on: an engine failure that a retry may fix (a timeout, an overloaded or
    /// not-ready backend, a dropped connection, a malformed upstream reply).
    /// A backend that is gone, a model failure or a user error stops the run.
    pub fn is_item_failure(&self) -> bool {
        match self {
            Self::Engine {
                source: dgem_engine::DecideError::Backend(b),
                ..
            } => b.is_retryable(),
            _ => false,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn json(what: impl Into<String>, source: serde_json::Error) -> Self {
        Self::Json {
            what: what.into(),
            source,
        }
    }
}
