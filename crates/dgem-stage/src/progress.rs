//! Live staging progress, written atomically to `DEST/.dgem-stage/progress.json`
//! at most every [`PROGRESS_EVERY`] and at each phase change, so that `dgem serve`
//! (another process in the container) can report it on `/health`
//! (serving.md §9.5 `bytes_staged_gb`, §10.2 step 5).
//!
//! File format (all sizes in bytes, timestamps in Unix seconds):
//!
//! ```json
//! {"phase": "bodies", "headers_ready": true, "bytes_staged": 123, "bytes_total": 456,
//!  "files_done": 1, "files_total": 3, "source": "gs://b/dgemma/",
//!  "stage_start_ts": 1790600640.2, "updated_ts": 1790600650.9, "stage_end_ts": null,
//!  "error": null}
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::StageError;
use crate::fetch::blocking;
use crate::journal::write_atomic;

/// Least time between two progress writes while bytes flow.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Where staging stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Reading the file list.
    Listing,
    /// Fetching small files whole and safetensors headers, pre-sizing files.
    Headers,
    /// Streaming safetensors bodies over parallel range requests. The engine may start.
    Bodies,
    /// Checking sizes and checksums.
    Verifying,
    /// Every file verified; `.ready` written.
    Done,
    /// Staging stopped with an error (see `error`); no `.ready`.
    Failed,
}

/// A snapshot of staging progress (the progress file's content).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Current phase.
    pub phase: Phase,
    /// True once every small file and every safetensors header is in place and
    /// every file has its full size: the engine can start loading.
    pub headers_ready: bool,
    /// Bytes in place so far (including chunks kept from an earlier run).
    pub bytes_staged: u64,
    /// Bytes of all files.
    pub bytes_total: u64,
    /// Files completely staged.
    pub files_done: usize,
    /// Files to stage.
    pub files_total: usize,
    /// The source, as given.
    pub source: String,
    /// When this run started, Unix seconds.
    pub stage_start_ts: f64,
    /// When this snapshot was taken, Unix seconds.
    pub updated_ts: f64,
    /// When staging finished (done or failed), Unix seconds.
    pub stage_end_ts: Option<f64>,
    /// The error that stopped staging.
    pub error: Option<String>,
}

/// Counters shared by the staging tasks plus the progress file they feed.
#[derive(Debug)]
pub(crate) struct Tracker {
    pub(crate) staged: AtomicU64,
    /// Bytes found already staged by an earlier run.
    pub(crate) kept: AtomicU64,
    pub(crate) files_done: AtomicUsize,
    state: Mutex<Progress>,
    path: PathBuf,
    /// Serializes writes so an older snapshot never replaces a newer one.
    writing: tokio::sync::Mutex<()>,
}

impl Tracker {
    pub(crate) fn new(dest: &Path, source: String) -> Arc<Self> {
        let now = unix_now();
        Arc::new(Self {
            staged: AtomicU64::new(0),
            kept: AtomicU64::new(0),
            files_done: AtomicUsize::new(0),
            state: Mutex::new(Progress {
                phase: Phase::Listing,
                headers_ready: false,
                bytes_staged: 0,
                bytes_total: 0,
                files_done: 0,
                files_total: 0,
                source,
                stage_start_ts: now,
                updated_ts: now,
                stage_end_ts: None,
                error: None,
            }),
            path: dest.join(crate::PROGRESS_FILE),
            writing: tokio::sync::Mutex::new(()),
        })
    }

    /// The current snapshot.
    pub(crate) fn snapshot(&self) -> Progress {
        let mut p = match self.state.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        p.bytes_staged = self.staged.load(Ordering::Relaxed);
        p.files_done = self.files_done.load(Ordering::Relaxed);
        p.updated_ts = unix_now();
        p
    }

    /// Change fields of the snapshot (phase, totals, error).
    pub(crate) fn update(&self, f: impl FnOnce(&mut Progress)) {
        match self.state.lock() {
            Ok(mut g) => f(&mut g),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Write the snapshot to the progress file.
    pub(crate) async fn write(self: &Arc<Self>) -> Result<(), StageError> {
        let _one_at_a_time = self.writing.lock().await;
        let snap = self.snapshot();
        let bytes = serde_json::to_vec(&snap).map_err(|e| StageError::Task(e.to_string()))?;
        let path = self.path.clone();
        blocking(move || write_atomic(&path, &bytes)).await
    }

    /// Rewrite the progress file every [`PROGRESS_EVERY`] until the returned
    /// guard is dropped.
    pub(crate) fn tick(self: &Arc<Self>) -> TickGuard {
        let me = self.clone();
        TickGuard(tokio::spawn(async move {
            let mut every = tokio::time::interval(PROGRESS_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                if let Err(e) = me.write().await {
                    tracing::warn!(error = %e, "could not write staging progress");
                }
            }
        }))
    }
}

/// Stops the periodic progress writer when dropped (also when the staging
/// future itself is dropped half-way).
#[derive(Debug)]
pub(crate) struct TickGuard(tokio::task::JoinHandle<()>);

impl Drop for TickGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Read a progress file (for `dgem serve` and tests).
///
/// # Errors
/// [`StageError::Io`] when it cannot be read, [`StageError::Manifest`] when it
/// does not parse.
pub fn read_progress(dest: &Path) -> Result<Progress, StageError> {
    let path = dest.join(crate::PROGRESS_FILE);
    let bytes = std::fs::read(&path).map_err(|e| StageError::io("read", &path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| StageError::Manifest {
        origin: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
