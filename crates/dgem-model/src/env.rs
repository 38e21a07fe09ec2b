//! Names of the environment variables this crate reads (house style rule 15).

/// Directory that holds cached models; overrides the user cache directory.
pub const DGEM_MODEL_DIR: &str = "DGEM_MODEL_DIR";

/// Python executable used to run `-m pip download`; defaults to `python3`.
pub const DGEM_PYTHON: &str = "DGEM_PYTHON";

/// Python executable used when [`DGEM_PYTHON`] is unset or empty.
pub const DEFAULT_PYTHON: &str = "python3";
