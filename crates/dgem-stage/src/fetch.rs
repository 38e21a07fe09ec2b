//! One ranged read from a [`Location`] streamed into a pre-sized file with
//! positional writes, and the retry loop around it (serving.md §10.1: a GET
//! with `Range: bytes=off-(off+len-1)`, 4 attempts with backoff).

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{CONTENT_RANGE, RANGE};
use reqwest::StatusCode;

use crate::error::StageError;
use crate::source::{Fetcher, Location};

/// Bytes buffered before one positional write.
const WRITE_BUF: usize = 4 << 20;

/// An open destination file shared by the tasks writing its chunks.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) file: Arc<std::fs::File>,
    pub(crate) path: PathBuf,
}

impl Target {
    /// Write `buf` at byte `off` (on a blocking thread).
    pub(crate) async fn write_at(&self, buf: Vec<u8>, off: u64) -> Result<(), StageError> {
        let t = self.clone();
        blocking(move || {
            t.file
                .write_all_at(&buf, off)
                .map_err(|e| StageError::io("write", &t.path, e))
        })
        .await
    }

    /// Flush written data to the device before the journal records it.
    pub(crate) async fn sync(&self) -> Result<(), StageError> {
        let t = self.clone();
        blocking(move || {
            t.file
                .sync_data()
                .map_err(|e| StageError::io("sync", &t.path, e))
        })
        .await
    }
}

/// Run blocking file work off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StageError> + Send + 'static,
) -> Result<T, StageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StageError::Task(e.to_string()))?
}

/// Retry policy of one ranged read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    pub(crate) attempts: u32,
    pub(crate) backoff: Duration,
}

/// What one ranged read copies: `len` bytes of `file` from `offset`.
#[derive(Debug, Clone)]
pub(crate) struct RangeJob {
    pub(crate) file: String,
    pub(crate) location: Location,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// Copy `job` into `target` at the same offset, retrying what
/// [`StageError::is_retryable`] allows with linear backoff (`backoff × attempt`).
/// `staged` counts bytes as they land; a failed attempt takes its bytes back.
pub(crate) async fn copy_range(
    fetcher: &Fetcher,
    job: &RangeJob,
    target: &Target,
    staged: &AtomicU64,
    retry: Retry,
) -> Result<(), StageError> {
    let mut attempt = 0;
    loop {
        let mut written = 0u64;
        let out = copy_once(fetcher, job, target, staged, &mut written).await;
        match out {
            Ok(()) => return Ok(()),
            Err(e) => {
                staged.fetch_sub(written, Ordering::Relaxed);
                attempt += 1;
                if !e.is_retryable() || attempt >= retry.attempts {
                    return Err(e);
                }
                tracing::warn!(file = %job.file, offset = job.offset, attempt, error = %e, "retrying range");
                tokio::time::sleep(retry.backoff * attempt).await;
            }
        }
    }
}

async fn copy_once(
    fetcher: &Fetcher,
    job: &RangeJob,
    target: &Target,
    staged: &AtomicU64,
    written: &mut u64,
) -> Result<(), StageError> {
    if job.len == 0 {
        return Ok(());
    }
    match &job.location {
        Location::Local(path) => {
            let mut off = job.offset;
            let end = job.offset + job.len;
            let file =
                Arc::new(std::fs::File::open(path).map_err(|e| StageError::io("open", path, e))?);
            while off < end {
                let n = usize::try_from((end - off).min(WRITE_BUF as u64)).unwrap_or(WRITE_BUF);
                let (f, p) = (file.clone(), path.clone());
                let buf = blocking(move || {
                    let mut buf = vec![0u8; n];
                    f.read_exact_at(&mut buf, off)
                        .map_err(|e| StageError::io("read", &p, e))?;
                    Ok(buf)
                })
                .await?;
                target.write_at(buf, off).await?;
                off += n as u64;
                *written += n as u64;
                staged.fetch_add(n as u64, Ordering::Relaxed);
            }
            Ok(())
        }
        Location::Remote(url) => copy_remote(fetcher, url, job, target, staged, written).await,
    }
}

async fn copy_remote(
    fetcher: &Fetcher,
    url: &str,
    job: &RangeJob,
    target: &Target,
    staged: &AtomicU64,
    written: &mut u64,
) -> Result<(), StageError> {
    let last = job.offset + job.len - 1;
    let mut resp = fetcher
        .get(url)
        .header(RANGE, format!("bytes={}-{last}", job.offset))
        .send()
        .await
        .map_err(|e| StageError::from_reqwest(url, &e))?;
    let status = resp.status();
    if (status == StatusCode::OK && job.offset != 0) || !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(if status.is_success() {
            ignored_range(url, status.as_u16())
        } else {
            StageError::status(url, status.as_u16(), &body)
        });
    }
    if status == StatusCode::PARTIAL_CONTENT {
        let start = resp
            .headers()
            .get(CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("bytes "))
            .and_then(|v| v.split('-').next())
            .and_then(|v| v.parse::<u64>().ok());
        if start != Some(job.offset) {
            return Err(ignored_range(url, 206));
        }
    }
    let mut buf = Vec::with_capacity(WRITE_BUF.min(usize::try_from(job.len).unwrap_or(WRITE_BUF)));
    let mut received = 0u64;
    loop {
        let piece = resp
            .chunk()
            .await
            .map_err(|e| StageError::from_reqwest(url, &e))?;
        let done = piece.is_none();
        if let Some(p) = piece {
            received += p.len() as u64;
            if received > job.len {
                // A 200 to a range that starts at 0: the server sent the whole object.
                return Err(ignored_range(url, status.as_u16()));
            }
            buf.extend_from_slice(&p);
        }
        if buf.len() >= WRITE_BUF || (done && !buf.is_empty()) {
            let n = buf.len() as u64;
            let at = job.offset + *written;
            target.write_at(std::mem::take(&mut buf), at).await?;
            *written += n;
            staged.fetch_add(n, Ordering::Relaxed);
        }
        if done {
            break;
        }
    }
    if received != job.len {
        return Err(StageError::ShortBody {
            file: job.file.clone(),
            offset: job.offset,
            expected: job.len,
            received,
        });
    }
    Ok(())
}

fn ignored_range(url: &str, status: u16) -> StageError {
    StageError::Http {
        url: url.to_string(),
        status: Some(status),
        message: "the server does not honour `Range` requests (wrong or missing Content-Range)"
            .into(),
        retryable: false,
    }
}

/// Read `len` bytes from `offset` into memory (for headers), retrying like [`copy_range`].
pub(crate) async fn read_range(
    fetcher: &Fetcher,
    job: &RangeJob,
    scratch: &Target,
    retry: Retry,
) -> Result<Vec<u8>, StageError> {
    let counter = AtomicU64::new(0);
    copy_range(fetcher, job, scratch, &counter, retry).await?;
    let (t, off, len) = (scratch.clone(), job.offset, job.len);
    blocking(move || {
        let n = usize::try_from(len).map_err(|_| StageError::Task("header too large".into()))?;
        let mut buf = vec![0u8; n];
        t.file
            .read_exact_at(&mut buf, off)
            .map_err(|e| StageError::io("read", &t.path, e))?;
        Ok(buf)
    })
    .await
}
