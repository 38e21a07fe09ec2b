//! The output file of `dgem batch`, which is also its journal.
//!
//! Each finished row is one line, appended in input order and flushed before
//! the next, so after a kill the file holds every finished row's line and at
//! most one line cut short. [`Journal::open`] on the same path counts the
//! complete lines, cuts the short one off, and [`Journal::kept`] reads the
//! kept lines back one at a time (an output of 200,000 rows is never held in
//! memory): the caller checks that line `i` belongs to input row `i` and goes
//! on from the first row without a line. Nothing is lost and nothing is
//! written twice.
//!
//! Beside the output sits `<output>.batch.json`, the sidecar, with the
//! fingerprint of the arguments the output was written under and, once the
//! run is complete, its row counts ([`Complete`], which `batch-merge`
//! checks). An output whose sidecar is missing or holds another fingerprint
//! is refused: resuming it would mix two runs' answers in one file.
//! `--overwrite` starts over: the old sidecar is removed and the output
//! emptied before the new sidecar is written, so a kill in between leaves an
//! empty output, which the next run starts afresh.
//!
//! The output is locked (an exclusive advisory lock, `flock`) while a run
//! writes it: a second run on the same file, such as a retried Kubernetes
//! pod overlapping the one it replaces, is refused instead of interleaving
//! its lines.

use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::BenchError;

/// The sidecar's suffix, appended to the output's file name.
pub const SIDECAR_SUFFIX: &str = ".batch.json";

/// The sidecar's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Sidecar {
    /// Format version of this file (1).
    dgem_batch: u32,
    /// Hex sha256 of the run's arguments.
    fingerprint: String,
    /// Set when every row of the run has its line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    complete: Option<Complete>,
}

/// The counts of a finished output, kept in its sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Complete {
    /// Lines in this output (the rows of its shard).
    pub lines: usize,
    /// Rows of the whole input, every shard's together.
    pub input_rows: usize,
    /// Hex sha256 of the run's arguments less its shard: every shard of one
    /// run has the same, so `batch-merge` can refuse parts of different
    /// runs (absent from sidecars written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

fn io(path: &Path, source: std::io::Error) -> BenchError {
    BenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The sidecar path of `output`.
pub fn sidecar_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_os_string();
    name.push(SIDECAR_SUFFIX);
    PathBuf::from(name)
}

/// An output file open for appending, locked for this run.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    fingerprint: String,
    lines: usize,
    /// Bytes in the file (where the next line starts).
    len: u64,
    /// Lines an earlier run wrote that this one kept.
    kept: usize,
    /// [`Complete::run`], recorded when the run finishes.
    run: Option<String>,
}

/// What [`Journal::open`] found.
#[derive(Debug)]
pub struct Opened {
    /// The journal, positioned after the kept lines.
    pub journal: Journal,
    /// Complete lines an earlier run of the same arguments wrote (read
    /// them back with [`Journal::kept`]).
    pub kept: usize,
    /// Bytes of a line cut short that were dropped (0 when none).
    pub dropped_bytes: usize,
}

/// Take the run's exclusive lock on `file`.
fn lock(path: &Path, file: &File) -> Result<(), BenchError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(BenchError::Invalid(format!(
            "`--output` {} is being written by another `dgem batch` right now; wait for it to finish, or name another file",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(io(path, e)),
    }
}

impl Journal {
    /// The journal of `path` open as `file`, after `kept` lines (`len`
    /// bytes) an earlier run wrote.
    fn at(path: &Path, file: File, fingerprint: &str, kept: usize, len: u64) -> Self {
        Self {
            path: path.to_path_buf(),
            file,
            fingerprint: fingerprint.to_string(),
            lines: kept,
            len,
            kept,
            run: None,
        }
    }

    /// Record `run` ([`Complete::run`]) in the sidecar when the run finishes.
    pub fn set_run(&mut self, run: String) {
        self.run = Some(run);
    }

    /// Open `path` for a run whose arguments hash to `fingerprint`: resume
    /// it when it was written under the same fingerprint, start it when it
    /// does not exist, is empty, or `overwrite` is set.
    ///
    /// # Errors
    /// [`BenchError::Io`] when the file or its sidecar cannot be read or
    /// written (a missing folder, a read-only disk), naming the path;
    /// [`BenchError::Invalid`] when another run holds the output, or it
    /// exists but was written by something else or under other arguments,
    /// or holds a line that is not JSON (not a cut-short last line: damage a
    /// kill cannot make).
    pub fn open(path: &Path, fingerprint: &str, overwrite: bool) -> Result<Opened, BenchError> {
        let sidecar = sidecar_path(path);
        let existing = match std::fs::metadata(path) {
            Ok(m) => m.len() > 0,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io(path, e)),
        };
        if !overwrite && existing {
            check_sidecar(path, &sidecar, fingerprint)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io(path, e))?;
        lock(path, &file)?;
        let fresh = |file: File| -> Result<Opened, BenchError> {
            match std::fs::remove_file(&sidecar) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&sidecar, e)),
            }
            file.set_len(0).map_err(|e| io(path, e))?;
            write_sidecar(&sidecar, fingerprint, None)?;
            Ok(Opened {
                journal: Self::at(path, file, fingerprint, 0, 0),
                kept: 0,
                dropped_bytes: 0,
            })
        };
        if overwrite || !existing {
            return fresh(file);
        }
        // Count the complete lines, one at a time, checking each is JSON.
        let total = file.metadata().map_err(|e| io(path, e))?.len();
        let mut reader = BufReader::new(&mut file);
        let (mut kept, mut complete, mut buf) = (0usize, 0u64, Vec::new());
        loop {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .map_err(|e| io(path, e))?;
            if n == 0 || buf.last() != Some(&b'\n') {
                break;
            }
            complete += n as u64;
            let line = &buf[..n - 1];
            if line.is_empty() {
                continue;
            }
            if serde_json::from_slice::<Value>(line).is_err() {
                return Err(BenchError::Invalid(format!(
                    "`--output` {}: line {} is not a JSON line dgem wrote; the file was changed by hand. Pass `--overwrite` to start again",
                    path.display(),
                    kept + 1
                )));
            }
            kept += 1;
        }
        drop(reader);
        file.set_len(complete).map_err(|e| io(path, e))?;
        file.seek(SeekFrom::End(0)).map_err(|e| io(path, e))?;
        // A finished run that is resumed (to add nothing) is finished again
        // by it; until then its sidecar says it is not.
        write_sidecar(&sidecar, fingerprint, None)?;
        Ok(Opened {
            journal: Self::at(path, file, fingerprint, kept, complete),
            kept,
            dropped_bytes: usize::try_from(total - complete).unwrap_or(usize::MAX),
        })
    }

    /// The kept lines of an earlier run, in order, each with its byte
    /// offset, read from the file one at a time.
    ///
    /// # Errors
    /// [`BenchError::Io`] when the output cannot be read.
    pub fn kept(
        &self,
    ) -> Result<impl Iterator<Item = Result<(u64, String), BenchError>>, BenchError> {
        let file = File::open(&self.path).map_err(|e| io(&self.path, e))?;
        let path = self.path.clone();
        let mut reader = BufReader::new(file);
        let mut offset = 0u64;
        let mut left = self.kept;
        Ok(std::iter::from_fn(move || loop {
            if left == 0 {
                return None;
            }
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => return None,
                Ok(n) => {
                    let at = offset;
                    offset += n as u64;
                    let text = line.trim_end_matches('\n');
                    if text.is_empty() {
                        continue;
                    }
                    left -= 1;
                    return Some(Ok((at, text.to_string())));
                }
                Err(e) => return Some(Err(io(&path, e))),
            }
        }))
    }

    /// Append `line` (one JSON value, no newline) and flush it to the file;
    /// returns the byte offset it starts at.
    ///
    /// # Errors
    /// [`BenchError::Io`] naming the output (a full disk, a revoked
    /// permission); the lines before it stay, and a rerun resumes after them.
    pub fn append(&mut self, line: &str) -> Result<u64, BenchError> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.file
            .write_all(&buf)
            .and_then(|()| self.file.flush())
            .map_err(|e| io(&self.path, e))?;
        let at = self.len;
        self.len += buf.len() as u64;
        self.lines += 1;
        Ok(at)
    }

    /// The line that starts at byte `offset` (from [`Journal::append`] or
    /// [`Journal::kept`]), without its newline.
    ///
    /// # Errors
    /// [`BenchError::Io`] when it cannot be read back.
    pub fn line_at(&self, offset: u64) -> Result<String, BenchError> {
        let mut file = File::open(&self.path).map_err(|e| io(&self.path, e))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io(&self.path, e))?;
        let mut line = String::new();
        BufReader::new(file)
            .read_line(&mut line)
            .map_err(|e| io(&self.path, e))?;
        Ok(line.trim_end_matches('\n').to_string())
    }

    /// Lines in the file (kept and appended).
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Sync the file to disk; with `complete`, record in the sidecar that
    /// every row has its line, and the input's row count.
    ///
    /// # Errors
    /// [`BenchError::Io`] naming the output or its sidecar.
    pub fn finish(self, input_rows: Option<usize>) -> Result<usize, BenchError> {
        self.file.sync_all().map_err(|e| io(&self.path, e))?;
        if let Some(input_rows) = input_rows {
            let complete = Complete {
                lines: self.lines,
                input_rows,
                run: self.run.clone(),
            };
            write_sidecar(&sidecar_path(&self.path), &self.fingerprint, Some(complete))?;
        }
        Ok(self.lines)
    }
}

fn write_sidecar(
    sidecar: &Path,
    fingerprint: &str,
    complete: Option<Complete>,
) -> Result<(), BenchError> {
    let text = serde_json::to_string(&Sidecar {
        dgem_batch: 1,
        fingerprint: fingerprint.to_string(),
        complete,
    })
    .map_err(|e| BenchError::Json {
        what: "batch sidecar".into(),
        source: e,
    })?;
    let mut tmp = sidecar.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, sidecar).map_err(|e| io(sidecar, e))
}

fn read_sidecar(sidecar: &Path) -> Result<Option<Sidecar>, BenchError> {
    match std::fs::read_to_string(sidecar) {
        Ok(t) => Ok(serde_json::from_str(&t).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(sidecar, e)),
    }
}

/// Refuse `path` unless its sidecar holds `fingerprint`.
///
/// # Errors
/// [`BenchError::Invalid`] naming the output when it was not written by
/// `dgem batch` or was written under other arguments.
pub fn check_owner(path: &Path, fingerprint: &str) -> Result<(), BenchError> {
    check_sidecar(path, &sidecar_path(path), fingerprint)
}

fn check_sidecar(path: &Path, sidecar: &Path, fingerprint: &str) -> Result<(), BenchError> {
    match read_sidecar(sidecar)? {
        None => Err(BenchError::Invalid(format!(
            "`--output` {} already exists and was not written by `dgem batch` (there is no readable {}); pass `--overwrite` to replace it, or name another file",
            path.display(),
            sidecar.display()
        ))),
        Some(s) if s.fingerprint == fingerprint => Ok(()),
        Some(_) => Err(BenchError::Invalid(format!(
            "`--output` {} was written by `dgem batch` under other arguments (policy, questions, variables, mapping, read options, model settings such as `--order-debias` or `--wording` as written, backend, shard or calibration differ), so resuming it would mix two runs; pass `--overwrite` to start again, or name another file",
            path.display()
        ))),
    }
}

/// Record `path` (a file written whole, such as a calibrated output) as
/// written under `fingerprint` and complete.
///
/// # Errors
/// [`BenchError::Io`] when the sidecar cannot be written.
pub fn own(path: &Path, fingerprint: &str, complete: Complete) -> Result<(), BenchError> {
    write_sidecar(&sidecar_path(path), fingerprint, Some(complete))
}

/// The input row a `dgem batch` output line answers: `row` in dgem's lines,
/// the number in `id: "batch_req_<row>"` in OpenAI Batch lines.
pub fn row_of(line: &Value) -> Option<usize> {
    if let Some(n) = line.get("row").and_then(Value::as_u64) {
        return usize::try_from(n).ok();
    }
    line.get("id")
        .and_then(Value::as_str)
        .and_then(|id| id.strip_prefix("batch_req_"))
        .and_then(|n| n.parse().ok())
}

/// Join shard outputs into one file in input order, written to `out` (via a
/// temporary file and a rename, so a reader never sees half of it).
/// Returns the number of rows.
///
/// # Errors
/// [`BenchError::Io`] for a file that cannot be read or written;
/// [`BenchError::Invalid`] for a part that `dgem batch` did not finish (its
/// sidecar is missing or does not say it is complete), parts of inputs of
/// different sizes, a line that is not a batch output line, a row found
/// twice, or fewer rows than the input has (a shard not given).
pub fn merge(parts: &[PathBuf], out: &Path) -> Result<usize, BenchError> {
    let mut rows: Vec<(usize, String)> = Vec::new();
    let mut input_rows: Option<usize> = None;
    let mut run: Option<(String, &Path)> = None;
    for p in parts {
        let complete = read_sidecar(&sidecar_path(p))?.and_then(|s| s.complete).ok_or_else(|| {
            BenchError::Invalid(format!(
                "{} is not a finished `dgem batch` output (its sidecar {} is missing or says the run did not finish); run its shard again until it finishes",
                p.display(),
                sidecar_path(p).display()
            ))
        })?;
        match input_rows {
            Some(n) if n != complete.input_rows => {
                return Err(BenchError::Invalid(format!(
                    "{} was cut from an input of {} rows, the other parts from one of {n}: they are not shards of one run",
                    p.display(),
                    complete.input_rows
                )))
            }
            _ => input_rows = Some(complete.input_rows),
        }
        match (&run, &complete.run) {
            (Some((first, first_part)), Some(this)) if first != this => {
                return Err(BenchError::Invalid(format!(
                    "{} and {} were written by different runs (another policy, questions, column map or options): they are not shards of one run",
                    first_part.display(),
                    p.display()
                )))
            }
            (None, Some(this)) => run = Some((this.clone(), p.as_path())),
            _ => {}
        }
        let text = std::fs::read_to_string(p).map_err(|e| io(p, e))?;
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let row = serde_json::from_str::<Value>(line)
                .ok()
                .as_ref()
                .and_then(row_of)
                .ok_or_else(|| {
                    BenchError::Invalid(format!(
                        "{}:{}: not a `dgem batch` output line (no `row`)",
                        p.display(),
                        i + 1
                    ))
                })?;
            rows.push((row, line.to_string()));
        }
    }
    rows.sort_by_key(|(row, _)| *row);
    for pair in rows.windows(2) {
        if pair[0].0 == pair[1].0 {
            return Err(BenchError::Invalid(format!(
                "row {} is in more than one shard output (the parts overlap)",
                pair[0].0
            )));
        }
    }
    let want = input_rows.unwrap_or(0);
    if rows.len() != want {
        let missing: Vec<String> = (0..want)
            .filter(|r| rows.binary_search_by_key(r, |(row, _)| *row).is_err())
            .take(10)
            .map(|r| r.to_string())
            .collect();
        return Err(BenchError::Invalid(format!(
            "rows are missing from the shard outputs: the input has {want} rows and the parts hold {} (first missing: {}); is a shard not given?",
            rows.len(),
            missing.join(", ")
        )));
    }
    let mut tmp = out.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut text = String::new();
    for (_, line) in &rows {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, out).map_err(|e| io(out, e))?;
    Ok(rows.len())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn kept(j: &Journal) -> Vec<String> {
        j.kept().unwrap().map(|r| r.unwrap().1).collect()
    }

    #[test]
    fn a_cut_short_line_is_dropped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        let mut j = Journal::open(&out, "f1", false).unwrap().journal;
        assert_eq!(j.append(r#"{"row":0}"#).unwrap(), 0);
        assert_eq!(j.append(r#"{"row":1}"#).unwrap(), 10);
        drop(j);
        // A kill in the middle of the third line.
        let mut f = OpenOptions::new().append(true).open(&out).unwrap();
        f.write_all(br#"{"row":2,"dec"#).unwrap();
        drop(f);
        let opened = Journal::open(&out, "f1", false).unwrap();
        assert_eq!(opened.kept, 2);
        assert_eq!(opened.dropped_bytes, 13);
        let mut j = opened.journal;
        assert_eq!(kept(&j), vec![r#"{"row":0}"#, r#"{"row":1}"#]);
        assert_eq!(j.line_at(10).unwrap(), r#"{"row":1}"#);
        assert_eq!(j.append(r#"{"row":2}"#).unwrap(), 20);
        assert_eq!(j.finish(Some(3)).unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "{\"row\":0}\n{\"row\":1}\n{\"row\":2}\n"
        );
        let side = read_sidecar(&sidecar_path(&out)).unwrap().unwrap();
        assert_eq!(
            side.complete,
            Some(Complete {
                lines: 3,
                input_rows: 3,
                run: None,
            })
        );
    }

    #[test]
    fn another_runs_output_is_refused_unless_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        let mut j = Journal::open(&out, "f1", false).unwrap().journal;
        j.append("{}").unwrap();
        drop(j);
        let e = Journal::open(&out, "f2", false).unwrap_err().to_string();
        assert!(
            e.contains("under other arguments") && e.contains("--overwrite"),
            "{e}"
        );
        let fresh = Journal::open(&out, "f2", true).unwrap();
        assert_eq!(fresh.kept, 0);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
        drop(fresh);
        // A file dgem did not write (no sidecar) is not touched.
        let other = dir.path().join("mine.jsonl");
        std::fs::write(&other, "precious\n").unwrap();
        let e = Journal::open(&other, "f1", false).unwrap_err().to_string();
        assert!(e.contains("was not written by `dgem batch`"), "{e}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "precious\n");
    }

    #[test]
    fn a_second_run_on_the_same_output_is_refused_while_the_first_writes() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        let first = Journal::open(&out, "f1", false).unwrap();
        let e = Journal::open(&out, "f1", false).unwrap_err().to_string();
        assert!(e.contains("being written by another `dgem batch`"), "{e}");
        drop(first);
        assert!(
            Journal::open(&out, "f1", false).is_ok(),
            "the lock goes with the run"
        );
    }

    #[test]
    fn an_output_in_a_missing_folder_is_an_io_error_naming_it() {
        let e = Journal::open(Path::new("/nonexistent/dir/out.jsonl"), "f", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/dir/out.jsonl"), "{e}");
    }

    fn part(dir: &Path, name: &str, lines: &[&str], input_rows: usize) -> PathBuf {
        let p = dir.join(name);
        let mut j = Journal::open(&p, name, false).unwrap().journal;
        for l in lines {
            j.append(l).unwrap();
        }
        j.finish(Some(input_rows)).unwrap();
        p
    }

    #[test]
    fn merge_puts_shard_lines_back_in_input_order_and_finds_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let a = part(
            dir.path(),
            "a.jsonl",
            &[r#"{"row":2,"id":"c"}"#, r#"{"row":0,"id":"a"}"#],
            4,
        );
        let b = part(
            dir.path(),
            "b.jsonl",
            &[r#"{"id":"batch_req_1","custom_id":"b"}"#],
            4,
        );
        let c = part(dir.path(), "c.jsonl", &[r#"{"row":3,"id":"d"}"#], 4);
        let out = dir.path().join("all.jsonl");
        assert_eq!(merge(&[a.clone(), b.clone(), c], &out).unwrap(), 4);
        let text = std::fs::read_to_string(&out).unwrap();
        let rows: Vec<usize> = text
            .lines()
            .map(|l| row_of(&serde_json::from_str(l).unwrap()).unwrap())
            .collect();
        assert_eq!(rows, vec![0, 1, 2, 3]);
        // The last shard missing: its rows are after every row present.
        let e = merge(&[a.clone(), b], &out).unwrap_err().to_string();
        assert!(
            e.contains("rows are missing") && e.contains("first missing: 3"),
            "{e}"
        );
        // A part whose run did not finish.
        let unfinished = dir.path().join("u.jsonl");
        let mut j = Journal::open(&unfinished, "u", false).unwrap().journal;
        j.append(r#"{"row":1}"#).unwrap();
        drop(j);
        let e = merge(&[a, unfinished], &out).unwrap_err().to_string();
        assert!(e.contains("not a finished `dgem batch` output"), "{e}");
    }

    /// Shards of two runs (another policy over the same input) were merged
    /// into one file of mixed answers (found by a black-box run).
    #[test]
    fn merge_refuses_parts_of_different_runs() {
        let dir = tempfile::tempdir().unwrap();
        let shard = |name: &str, row: usize, run: &str| {
            let p = dir.path().join(name);
            let mut j = Journal::open(&p, name, false).unwrap().journal;
            j.append(&format!(r#"{{"row":{row}}}"#)).unwrap();
            j.set_run(run.into());
            j.finish(Some(2)).unwrap();
            p
        };
        let out = dir.path().join("all.jsonl");
        let (a, b) = (shard("a.jsonl", 0, "r1"), shard("b.jsonl", 1, "r1"));
        assert_eq!(merge(&[a.clone(), b], &out).unwrap(), 2);
        let other = shard("c.jsonl", 1, "r2");
        let e = merge(&[a, other], &out).unwrap_err().to_string();
        assert!(
            e.contains("were written by different runs") && e.contains("c.jsonl"),
            "{e}"
        );
    }
}
