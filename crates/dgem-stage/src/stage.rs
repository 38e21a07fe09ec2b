//! The phased staging run: list → headers and full-size files → parallel
//! bodies → verify → `.ready` (see the crate docs).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::Instrument;

use crate::config::{StageConfig, MAX_HEADER};
use crate::error::StageError;
use crate::fetch::{blocking, copy_range, read_range, RangeJob, Retry, Target};
use crate::journal::{self, Journal};
use crate::manifest::FileEntry;
use crate::progress::{unix_now, Phase, Tracker};
use crate::source::Fetcher;

/// Suffix of a small file while it downloads (renamed when complete).
const PART_SUFFIX: &str = ".dgem-part";

/// What a finished run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Files staged (including ones kept from an earlier run).
    pub files: usize,
    /// Bytes of all files.
    pub bytes_total: u64,
    /// Bytes this run fetched (less than the total when it resumed).
    pub bytes_fetched: u64,
    /// Wall time, seconds.
    pub seconds: f64,
}

/// One file after the header phase.
struct Prepared {
    entry: FileEntry,
    target: Option<Target>,
    journal: tokio::sync::Mutex<Journal>,
    journal_path: PathBuf,
}

/// Run every phase; on success `DEST/.ready` exists and every file is verified.
///
/// # Errors
/// The first error that retries could not fix; the progress file then shows
/// phase `failed` with the message, and `.ready` is absent.
pub async fn stage(cfg: StageConfig) -> Result<Summary, StageError> {
    cfg.check()?;
    check_overlap(&cfg)?;
    let span = tracing::info_span!("stage", source = %cfg.source, dest = %cfg.dest.display());
    async move {
        let dest = cfg.dest.clone();
        create_dir(&dest).await?;
        journal::remove(dest.join(crate::READY_FILE)).await?;
        let tracker = Tracker::new(&dest, cfg.source.to_string());
        tracker.write().await?;
        let _tick = tracker.tick();
        let out = run(&cfg, &tracker).await;
        if let Err(e) = &out {
            // The caller reports the error; logging it here too printed it twice.
            tracing::debug!(error = %e, "staging failed");
            tracker.update(|p| {
                p.phase = Phase::Failed;
                p.error = Some(e.to_string());
                p.stage_end_ts = Some(unix_now());
            });
            // The staging error matters more than a failed progress write.
            let _ = tracker.write().await;
        }
        out
    }
    .instrument(span)
    .await
}

async fn run(cfg: &StageConfig, tracker: &Arc<Tracker>) -> Result<Summary, StageError> {
    let started = Instant::now();
    let client = reqwest::Client::builder()
        .connect_timeout(cfg.connect_timeout)
        .read_timeout(cfg.read_timeout)
        .pool_max_idle_per_host(cfg.parallel)
        .build()
        .map_err(|e| StageError::from_reqwest(&cfg.gcs_api, &e))?;
    let fetcher = Fetcher {
        source: cfg.source.clone(),
        client,
        token: cfg.token.clone(),
        gcs_api: cfg.gcs_api.clone(),
    };
    let manifest = fetcher.list().await?;
    let total = manifest.total_bytes();
    tracing::info!(files = manifest.files.len(), bytes = total, "listed");
    tracker.update(|p| {
        p.phase = Phase::Headers;
        p.bytes_total = total;
        p.files_total = manifest.files.len();
    });
    tracker.write().await?;

    let ctx = Ctx {
        cfg,
        fetcher: &fetcher,
        tracker,
    };
    let mut prepared = Vec::with_capacity(manifest.files.len());
    let mut heads = stream::iter(manifest.files.clone())
        .map(|e| async move { ctx.prepare(&e).await })
        .buffer_unordered(cfg.parallel.min(16));
    while let Some(p) = heads.next().await {
        prepared.push(Arc::new(p?));
    }
    drop(heads);
    tracker.update(|p| {
        p.phase = Phase::Bodies;
        p.headers_ready = true;
    });
    tracker.write().await?;

    let mut jobs = Vec::new();
    for p in &prepared {
        let j = p.journal.lock().await;
        if !j.complete {
            jobs.extend(
                (0..j.chunks())
                    .filter(|i| !j.done.contains(i))
                    .map(|i| (p.clone(), i)),
            );
        }
    }
    tracing::info!(chunks = jobs.len(), "fetching bodies");
    let mut bodies = stream::iter(jobs)
        .map(|(p, i)| async move { ctx.body_chunk(p, i).await })
        .buffer_unordered(cfg.parallel);
    while let Some(r) = bodies.next().await {
        r?;
    }
    drop(bodies);

    tracker.update(|p| p.phase = Phase::Verifying);
    tracker.write().await?;
    // Check every file before failing, so each bad file loses its journal and a
    // rerun fetches all of them again.
    let mut first_err = None;
    for p in &prepared {
        if let Err(e) = ctx.verify(p).await {
            tracing::error!(file = %p.entry.path, error = %e, "verification failed");
            first_err.get_or_insert(e);
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let summary = Summary {
        files: prepared.len(),
        bytes_total: total,
        bytes_fetched: tracker
            .staged
            .load(Ordering::Relaxed)
            .saturating_sub(tracker.kept.load(Ordering::Relaxed)),
        seconds: started.elapsed().as_secs_f64(),
    };
    let ready = serde_json::to_vec(&summary).map_err(|e| StageError::Task(e.to_string()))?;
    let ready_path = cfg.dest.join(crate::READY_FILE);
    blocking(move || journal::write_atomic(&ready_path, &ready)).await?;
    tracker.update(|p| {
        p.phase = Phase::Done;
        p.stage_end_ts = Some(unix_now());
    });
    tracker.write().await?;
    tracing::info!(bytes = total, seconds = summary.seconds, "staged");
    Ok(summary)
}

#[derive(Clone, Copy)]
struct Ctx<'a> {
    cfg: &'a StageConfig,
    fetcher: &'a Fetcher,
    tracker: &'a Arc<Tracker>,
}

impl Ctx<'_> {
    fn retry(&self) -> Retry {
        Retry {
            attempts: self.cfg.attempts,
            backoff: self.cfg.backoff,
        }
    }

    /// Header phase for one file: reuse a matching journal, fetch a small file
    /// whole, or put a safetensors header in place and size the file.
    async fn prepare(&self, entry: &FileEntry) -> Result<Prepared, StageError> {
        let dest = &self.cfg.dest;
        let path = dest.join(&entry.path);
        let jpath = journal::journal_path(dest, &entry.path);
        let on_disk = tokio::fs::metadata(&path).await.map(|m| m.len()).ok();
        let mut kept = journal::load(jpath.clone())
            .await
            .filter(|j| j.matches(entry, self.cfg.chunk_size) && on_disk == Some(entry.size));
        // A file finished by an earlier run is checked again when its sha256 is
        // known: bytes changed at the destination since (a bad disk, a stray
        // write) are fetched again instead of being served.
        if kept
            .as_ref()
            .is_some_and(|j| j.complete && entry.sha256.is_some())
        {
            if let Err(e) = verify_file(entry, &path).await {
                tracing::warn!(file = %entry.path, error = %e, "staged file changed since it was verified; fetching it again");
                kept = None;
            }
        }
        let done = |journal: Journal, target| Prepared {
            entry: entry.clone(),
            target,
            journal: tokio::sync::Mutex::new(journal),
            journal_path: jpath.clone(),
        };
        if let Some(j) = kept {
            self.tracker
                .staged
                .fetch_add(j.bytes_done(), Ordering::Relaxed);
            self.tracker
                .kept
                .fetch_add(j.bytes_done(), Ordering::Relaxed);
            if j.complete {
                self.tracker.files_done.fetch_add(1, Ordering::Relaxed);
                return Ok(done(j, None));
            }
            let target = open(&path, false).await?;
            return Ok(done(j, Some(target)));
        }
        journal::remove(jpath.clone()).await?;
        if let Some(dir) = path.parent() {
            create_dir(dir).await?;
        }
        let location = self.fetcher.location(entry)?;
        if !entry.is_safetensors() {
            let mut part = path.as_os_str().to_owned();
            part.push(PART_SUFFIX);
            let part = PathBuf::from(part);
            let target = open(&part, true).await?;
            let job = RangeJob {
                file: entry.path.clone(),
                location,
                offset: 0,
                len: entry.size,
            };
            copy_range(
                self.fetcher,
                &job,
                &target,
                &self.tracker.staged,
                self.retry(),
            )
            .await?;
            target.sync().await?;
            verify_file(entry, &part).await?;
            tokio::fs::rename(&part, &path)
                .await
                .map_err(|e| StageError::io("rename", &part, e))?;
            let mut j = Journal::new(entry, entry.size, self.cfg.chunk_size);
            j.complete = true;
            journal::store(jpath.clone(), &j).await?;
            self.tracker.files_done.fetch_add(1, Ordering::Relaxed);
            return Ok(done(j, None));
        }
        let target = open(&path, true).await?;
        let head_len = self.fetch_header(entry, &location, &target).await?;
        let (t, size) = (target.clone(), entry.size);
        blocking(move || {
            t.file
                .set_len(size)
                .map_err(|e| StageError::io("size", &t.path, e))
        })
        .await?;
        target.sync().await?;
        self.tracker.staged.fetch_add(head_len, Ordering::Relaxed);
        let j = Journal::new(entry, head_len, self.cfg.chunk_size);
        journal::store(jpath.clone(), &j).await?;
        Ok(done(j, Some(target)))
    }

    /// Write the first bytes of a safetensors file (at least its whole header)
    /// at offset 0 and return how many were written.
    async fn fetch_header(
        &self,
        entry: &FileEntry,
        location: &crate::source::Location,
        target: &Target,
    ) -> Result<u64, StageError> {
        let bad = |message: String| StageError::Header {
            file: entry.path.clone(),
            message,
        };
        if entry.size < 8 {
            return Err(bad(format!(
                "{} bytes is shorter than the 8-byte header length",
                entry.size
            )));
        }
        let first = entry.size.min(self.cfg.head_probe);
        let job = RangeJob {
            file: entry.path.clone(),
            location: location.clone(),
            offset: 0,
            len: first,
        };
        let mut head = read_range(self.fetcher, &job, target, self.retry()).await?;
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&head[..8]);
        let n = u64::from_le_bytes(len8);
        if n > MAX_HEADER || 8 + n > entry.size {
            return Err(bad(format!(
                "header length {n} must be at most {MAX_HEADER} and fit in the file ({} bytes)",
                entry.size
            )));
        }
        if 8 + n > first {
            let rest = RangeJob {
                offset: first,
                len: 8 + n - first,
                ..job
            };
            head.extend(read_range(self.fetcher, &rest, target, self.retry()).await?);
        }
        let end = usize::try_from(8 + n).map_err(|_| bad("header too large".into()))?;
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&head[8..end])
            .map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
        Ok(first.max(8 + n))
    }

    /// Fetch body chunk `i` of `p`, sync it, then record it in the journal.
    async fn body_chunk(&self, p: Arc<Prepared>, i: u64) -> Result<(), StageError> {
        let Some(target) = &p.target else {
            return Ok(());
        };
        let (offset, len) = p.journal.lock().await.chunk(i);
        let job = RangeJob {
            file: p.entry.path.clone(),
            location: self.fetcher.location(&p.entry)?,
            offset,
            len,
        };
        copy_range(
            self.fetcher,
            &job,
            target,
            &self.tracker.staged,
            self.retry(),
        )
        .await?;
        target.sync().await?;
        let mut j = p.journal.lock().await;
        j.done.insert(i);
        journal::store(p.journal_path.clone(), &j).await
    }

    /// Check size (and checksum) of a file fetched in chunks, then mark it
    /// complete. A file that fails loses its journal so the next run starts over.
    async fn verify(&self, p: &Prepared) -> Result<(), StageError> {
        let path = self.cfg.dest.join(&p.entry.path);
        let mut j = p.journal.lock().await;
        if j.complete {
            let len = tokio::fs::metadata(&path)
                .await
                .map(|m| m.len())
                .unwrap_or(0);
            return size_ok(&p.entry, len);
        }
        if let Err(e) = verify_file(&p.entry, &path).await {
            journal::remove(p.journal_path.clone()).await?;
            return Err(e);
        }
        j.complete = true;
        journal::store(p.journal_path.clone(), &j).await?;
        self.tracker.files_done.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Refuse a local source that is the destination, lies inside it or contains
/// it: staging would write `.ready` and `.dgem-stage/` into the source (or copy
/// the destination into itself).
fn check_overlap(cfg: &StageConfig) -> Result<(), StageError> {
    let crate::source::Source::Local { dir } = &cfg.source else {
        return Ok(());
    };
    let src = std::fs::canonicalize(dir).map_err(|e| StageError::io("resolve", dir, e))?;
    let dest = resolve_missing(&cfg.dest)?;
    if dest.starts_with(&src) || src.starts_with(&dest) {
        return Err(StageError::Config {
            field: "DEST",
            expected: "a directory that is not the local SRC directory, not inside it and not containing it",
            given: format!(
                "{} (SRC is {})",
                cfg.dest.display(),
                dir.display()
            ),
        });
    }
    Ok(())
}

/// Canonical form of `path`, which need not exist yet: its nearest existing
/// ancestor is canonicalized and the missing components are appended.
fn resolve_missing(path: &Path) -> Result<PathBuf, StageError> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| StageError::io("resolve", path, e))?
            .join(path)
    };
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    loop {
        match std::fs::canonicalize(cur) {
            Ok(mut base) => {
                for c in rest.iter().rev() {
                    base.push(c);
                }
                return Ok(base);
            }
            Err(e) => match (cur.parent(), cur.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    cur = parent;
                }
                _ => return Err(StageError::io("resolve", path, e)),
            },
        }
    }
}

fn size_ok(entry: &FileEntry, actual: u64) -> Result<(), StageError> {
    if actual == entry.size {
        Ok(())
    } else {
        Err(StageError::Size {
            file: entry.path.clone(),
            expected: entry.size,
            actual,
        })
    }
}

/// Size, then SHA-256 when the entry has one.
async fn verify_file(entry: &FileEntry, path: &Path) -> Result<(), StageError> {
    let (entry, path) = (entry.clone(), path.to_path_buf());
    blocking(move || {
        let len = std::fs::metadata(&path)
            .map_err(|e| StageError::io("stat", &path, e))?
            .len();
        size_ok(&entry, len)?;
        let Some(expected) = &entry.sha256 else {
            return Ok(());
        };
        let mut f = std::fs::File::open(&path).map_err(|e| StageError::io("open", &path, e))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 8 << 20];
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| StageError::io("read", &path, e))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        let actual = hex::encode(h.finalize());
        if actual == expected.to_lowercase() {
            Ok(())
        } else {
            Err(StageError::Checksum {
                file: entry.path.clone(),
                expected: expected.clone(),
                actual,
            })
        }
    })
    .await
}

async fn create_dir(dir: &Path) -> Result<(), StageError> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| StageError::io("create", dir, e))
}

/// Open `path` for positional writes; `fresh` truncates it to 0 first.
async fn open(path: &Path, fresh: bool) -> Result<Target, StageError> {
    let p = path.to_path_buf();
    blocking(move || {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(fresh)
            .open(&p)
            .map_err(|e| StageError::io("open", &p, e))?;
        Ok(Target {
            file: Arc::new(file),
            path: p,
        })
    })
    .await
}
