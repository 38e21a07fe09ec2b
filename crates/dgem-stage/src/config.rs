//! Settings of one staging run, with serving.md §10.1 defaults (64 parallel
//! requests, 64 MiB chunks, 4 MiB header probe, 4 attempts, 45 s timeout).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::StageError;
use crate::source::{Source, GCS_API};

/// Largest safetensors JSON header accepted, bytes (the format's own limit).
pub const MAX_HEADER: u64 = 100 << 20;

/// How one staging run behaves.
#[derive(Clone)]
pub struct StageConfig {
    /// Where the files come from.
    pub source: Source,
    /// Destination directory (created if missing).
    pub dest: PathBuf,
    /// Concurrent range requests (default 64; serving.md §10.1).
    pub parallel: usize,
    /// Body chunk size, bytes (default 64 MiB).
    pub chunk_size: u64,
    /// Bytes fetched first from each safetensors file (default 4 MiB); more is
    /// fetched when the header is longer.
    pub head_probe: u64,
    /// Attempts per range request (default 4).
    pub attempts: u32,
    /// Backoff unit: attempt `k` waits `k × backoff` (default 500 ms).
    pub backoff: Duration,
    /// Connection timeout (default 10 s).
    pub connect_timeout: Duration,
    /// Longest silence while reading a response (default 45 s).
    pub read_timeout: Duration,
    /// Bearer token sent to Cloud Storage (never to other hosts). Redacted in `Debug`.
    pub token: Option<String>,
    /// Cloud Storage API base URL (default [`GCS_API`]; tests use a fake).
    pub gcs_api: String,
}

impl std::fmt::Debug for StageConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageConfig")
            .field("source", &self.source)
            .field("dest", &self.dest)
            .field("parallel", &self.parallel)
            .field("chunk_size", &self.chunk_size)
            .field("head_probe", &self.head_probe)
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("gcs_api", &self.gcs_api)
            .finish()
    }
}

impl StageConfig {
    /// Defaults of serving.md §10.1 for `source` → `dest`.
    pub fn new(source: Source, dest: PathBuf) -> Self {
        Self {
            source,
            dest,
            parallel: 64,
            chunk_size: 64 << 20,
            head_probe: 4 << 20,
            attempts: 4,
            backoff: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(45),
            token: None,
            gcs_api: GCS_API.to_string(),
        }
    }

    pub(crate) fn check(&self) -> Result<(), StageError> {
        let bad = |field, expected, given: String| StageError::Config {
            field,
            expected,
            given,
        };
        if !(1..=1024).contains(&self.parallel) {
            return Err(bad(
                "parallel",
                "between 1 and 1024",
                self.parallel.to_string(),
            ));
        }
        if !(64 << 10..=4 << 30).contains(&self.chunk_size) {
            return Err(bad(
                "chunk_size",
                "between 64 KiB and 4 GiB",
                self.chunk_size.to_string(),
            ));
        }
        if !(8..=MAX_HEADER).contains(&self.head_probe) {
            return Err(bad(
                "head_probe",
                "between 8 bytes and 100 MiB",
                self.head_probe.to_string(),
            ));
        }
        if !(1..=100).contains(&self.attempts) {
            return Err(bad(
                "attempts",
                "between 1 and 100",
                self.attempts.to_string(),
            ));
        }
        Ok(())
    }
}
