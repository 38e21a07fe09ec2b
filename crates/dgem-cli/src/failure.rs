//! Exit-code classification of failures (house style rule 12).

use std::process::ExitCode;

/// A failed command: whose fault it is decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// The user's input is wrong (exit 1).
    User(anyhow::Error),
    /// dgem or the model failed (exit 2).
    Internal(anyhow::Error),
}

impl Failure {
    /// Print `error:` with the cause chain to stderr and return the exit code.
    pub fn report(self) -> ExitCode {
        let (err, code) = match self {
            Self::User(e) => (e, 1),
            Self::Internal(e) => (e, 2),
        };
        eprintln!("error: {err}");
        for cause in err.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
        ExitCode::from(code)
    }
}

impl Failure {
    /// The message with its cause chain on one line (`a: b: c`).
    pub fn message(&self) -> String {
        match self {
            Self::User(e) | Self::Internal(e) => format!("{e:#}"),
        }
    }
}

/// Wrap any error as a user error.
pub fn user<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::User(e.into())
}

/// Wrap any error as an internal error.
pub fn internal<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::Internal(e.into())
}

/// Classify a decider's error (the embedded engine's, a vLLM reader's, a
/// remote dgem's) by whose fault it is.
pub fn decider(e: dgem_engine::DecideError) -> Failure {
    if e.is_user_error() {
        Failure::User(e.into())
    } else {
        Failure::Internal(e.into())
    }
}
