//! Resume state: one JSON journal per staged file under `DEST/.dgem-stage/journal/`,
//! written atomically (`.tmp` + rename) after each chunk has been written and
//! synced. A restarted run skips the chunks a journal lists; a journal that
//! does not match the source (size, checksum, chunk layout) is discarded, and
//! only a journal marked `complete` after verification lets a file count as done.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::StageError;
use crate::fetch::blocking;
use crate::manifest::FileEntry;

/// Journal format version; any other version is ignored.
const VERSION: u32 = 2;

/// What has been staged of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Journal {
    pub(crate) version: u32,
    pub(crate) path: String,
    pub(crate) size: u64,
    pub(crate) sha256: Option<String>,
    /// The source version the bytes on disk came from ([`FileEntry::fingerprint`]).
    #[serde(default)]
    pub(crate) fingerprint: Option<String>,
    /// Bytes from 0 that the header phase wrote (0 for files fetched whole).
    pub(crate) head_len: u64,
    /// Body chunk size, bytes.
    pub(crate) chunk_size: u64,
    /// Indices of body chunks written and synced.
    pub(crate) done: BTreeSet<u64>,
    /// Set only after the whole file was verified.
    pub(crate) complete: bool,
}

impl Journal {
    pub(crate) fn new(entry: &FileEntry, head_len: u64, chunk_size: u64) -> Self {
        Self {
            version: VERSION,
            path: entry.path.clone(),
            size: entry.size,
            sha256: entry.sha256.clone(),
            fingerprint: entry.fingerprint.clone(),
            head_len,
            chunk_size,
            done: BTreeSet::new(),
            complete: false,
        }
    }

    /// Whether this journal describes `entry` staged with `chunk_size`: same path,
    /// size, checksum and source fingerprint (a source file rewritten since, even
    /// with the same size, no longer matches).
    pub(crate) fn matches(&self, entry: &FileEntry, chunk_size: u64) -> bool {
        self.version == VERSION
            && self.path == entry.path
            && self.size == entry.size
            && self.sha256 == entry.sha256
            && self.fingerprint == entry.fingerprint
            && (self.chunk_size == chunk_size || self.complete)
    }

    /// Number of body chunks.
    pub(crate) fn chunks(&self) -> u64 {
        let body = self.size.saturating_sub(self.head_len);
        body.div_ceil(self.chunk_size.max(1))
    }

    /// Byte range `(offset, len)` of body chunk `i`.
    pub(crate) fn chunk(&self, i: u64) -> (u64, u64) {
        let off = self.head_len + i * self.chunk_size;
        (off, self.chunk_size.min(self.size - off))
    }

    /// Bytes this journal says are on disk.
    pub(crate) fn bytes_done(&self) -> u64 {
        if self.complete {
            return self.size;
        }
        self.head_len + self.done.iter().map(|&i| self.chunk(i).1).sum::<u64>()
    }
}

/// Where the journal of `rel` lives.
pub(crate) fn journal_path(dest: &Path, rel: &str) -> PathBuf {
    dest.join(crate::STATE_DIR)
        .join("journal")
        .join(format!("{}.json", rel.replace('/', "%2F")))
}

/// Read a journal; a missing or unreadable one is `None` (start over).
pub(crate) async fn load(path: PathBuf) -> Option<Journal> {
    let bytes = tokio::fs::read(&path).await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Write a journal atomically.
pub(crate) async fn store(path: PathBuf, journal: &Journal) -> Result<(), StageError> {
    let bytes = serde_json::to_vec(journal).map_err(|e| StageError::Task(e.to_string()))?;
    blocking(move || write_atomic(&path, &bytes)).await
}

/// Remove a journal (a file that failed verification starts over next run).
pub(crate) async fn remove(path: PathBuf) -> Result<(), StageError> {
    match tokio::fs::remove_file(&path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StageError::io("remove", path, e)),
    }
}

/// Write `bytes` to `path` through a uniquely named sibling `.tmp` file and a rename, so a
/// reader sees the old content or the new one, never a torn write.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StageError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| StageError::io("create", dir, e))?;
    }
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.{seq}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(|e| StageError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| StageError::io("rename", &tmp, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_layout_and_matching() {
        let e = FileEntry {
            path: "m.safetensors".into(),
            size: 1000,
            sha256: None,
            fingerprint: Some("local:1000:1".into()),
        };
        let mut j = Journal::new(&e, 100, 256);
        assert_eq!(j.chunks(), 4);
        assert_eq!(j.chunk(0), (100, 256));
        assert_eq!(j.chunk(3), (868, 132));
        j.done.insert(3);
        assert_eq!(j.bytes_done(), 232);
        assert!(j.matches(&e, 256));
        assert!(!j.matches(&e, 512));
        let bigger = FileEntry { size: 1001, ..e };
        assert!(!j.matches(&bigger, 256));
    }

    #[test]
    fn same_size_rewritten_source_does_not_match_journal() {
        let e = FileEntry {
            path: "config.json".into(),
            size: 10,
            sha256: None,
            fingerprint: Some("local:10:1700000000000000001".into()),
        };
        let mut j = Journal::new(&e, 10, 256);
        j.complete = true;
        assert!(j.matches(&e, 256));
        let rewritten = FileEntry {
            fingerprint: Some("local:10:1700000000000000002".into()),
            ..e.clone()
        };
        assert!(!j.matches(&rewritten, 256));
        // A version-1 journal (no fingerprint) never matches a fingerprinted entry.
        let old: Journal = serde_json::from_str(
            r#"{"version":2,"path":"config.json","size":10,"sha256":null,
                "head_len":10,"chunk_size":256,"done":[],"complete":true}"#,
        )
        .expect("journal without fingerprint");
        assert_eq!(old.fingerprint, None);
        assert!(!old.matches(&e, 256));
    }
}
