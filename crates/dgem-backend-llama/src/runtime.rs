//! Process-wide llama.cpp initialisation.
//!
//! `llama_backend_init` may run once per process (`LlamaBackend::init` errors on a
//! second call), while tests and the CLI load several models. We keep the one
//! backend handle in a `OnceLock` for the life of the process and route
//! llama.cpp's own logging (normally printed on stderr) into `tracing`, so CLI
//! output stays clean unless a subscriber asks for it. The SIMD check
//! ([`crate::simd`]) runs first.

use std::sync::OnceLock;

use llama_cpp_2::llama_backend::LlamaBackend as LlamaRuntime;
use llama_cpp_2::{send_logs_to_tracing, LogOptions};

use crate::LlamaError;

static RUNTIME: OnceLock<Result<LlamaRuntime, String>> = OnceLock::new();

/// The initialised llama.cpp runtime, initialising it on first use.
pub(crate) fn runtime() -> Result<&'static LlamaRuntime, LlamaError> {
    RUNTIME
        .get_or_init(|| {
            // Before any ggml code runs: a build for instructions this CPU
            // lacks would die with SIGILL inside the first kernel.
            crate::simd::check_this_cpu().map_err(|e| e.to_string())?;
            send_logs_to_tracing(LogOptions::default().with_logs_enabled(true));
            LlamaRuntime::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| LlamaError::Init(e.clone()))
}
