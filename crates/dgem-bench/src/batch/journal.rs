//! The output file of `dgem batch`, which is also its journal.
//!
//! Each finished row is one line, appended in input order and flushed before
//! the next, so after a kill the file holds every finished row's line and at
//! most one line cut short. [`Journal::open`] on the same path keeps the
//! complete lines, cuts the short one off and hands back what was kept: the
//! caller checks that line `i` belongs to input row `i` and goes on from the
//! first row without a line. Nothing is lost and nothing is written twice.
//!
//! Beside the output sits `<output>.batch.json`, the sidecar, with the
//! fingerprint of the arguments the output was written under (policy text,
//! questions, variables, mapping, read options, backend, shard). An output
//! whose sidecar is missing or holds another fingerprint is refused: resuming
//! it would mix two runs' answers in one file. `--overwrite` starts over.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
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

/// An output file open for appending.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    lines: usize,
}

/// What [`Journal::open`] found.
#[derive(Debug)]
pub struct Opened {
    /// The journal, positioned after the kept lines.
    pub journal: Journal,
    /// The complete lines an earlier run of the same arguments wrote, in
    /// order, without their newlines.
    pub kept: Vec<String>,
    /// Bytes of a line cut short that were dropped (0 when none).
    pub dropped_bytes: usize,
}

impl Journal {
    /// Open `path` for a run whose arguments hash to `fingerprint`: resume
    /// it when it was written under the same fingerprint, start it when it
    /// does not exist, is empty, or `overwrite` is set.
    ///
    /// # Errors
    /// [`BenchError::Io`] when the file or its sidecar cannot be read or
    /// written (a missing folder, a read-only disk), naming the path;
    /// [`BenchError::Invalid`] when the output exists but was written by
    /// something else or under other arguments, or holds a line that is not
    /// JSON (not a cut-short last line: damage a kill cannot make).
    pub fn open(path: &Path, fingerprint: &str, overwrite: bool) -> Result<Opened, BenchError> {
        let sidecar = sidecar_path(path);
        let existing = match std::fs::metadata(path) {
            Ok(m) => m.len() > 0,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io(path, e)),
        };
        if overwrite || !existing {
            write_sidecar(&sidecar, fingerprint)?;
            let file = File::create(path).map_err(|e| io(path, e))?;
            return Ok(Opened {
                journal: Self {
                    path: path.to_path_buf(),
                    file,
                    lines: 0,
                },
                kept: Vec::new(),
                dropped_bytes: 0,
            });
        }
        check_sidecar(path, &sidecar, fingerprint)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io(path, e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| io(path, e))?;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let dropped_bytes = bytes.len() - complete;
        let mut kept = Vec::new();
        for (i, raw) in bytes[..complete].split(|b| *b == b'\n').enumerate() {
            if raw.is_empty() {
                continue;
            }
            let text = std::str::from_utf8(raw)
                .ok()
                .filter(|t| serde_json::from_str::<Value>(t).is_ok())
                .ok_or_else(|| {
                    BenchError::Invalid(format!(
                        "`--output` {}: line {} is not a JSON line dgem wrote; the file was changed by hand. Pass `--overwrite` to start again",
                        path.display(),
                        i + 1
                    ))
                })?;
            kept.push(text.to_string());
        }
        file.set_len(complete as u64).map_err(|e| io(path, e))?;
        file.seek(SeekFrom::End(0)).map_err(|e| io(path, e))?;
        let lines = kept.len();
        Ok(Opened {
            journal: Self {
                path: path.to_path_buf(),
                file,
                lines,
            },
            kept,
            dropped_bytes,
        })
    }

    /// Append `line` (one JSON value, no newline) and flush it to the file.
    ///
    /// # Errors
    /// [`BenchError::Io`] naming the output (a full disk, a revoked
    /// permission); the lines before it stay, and a rerun resumes after them.
    pub fn append(&mut self, line: &str) -> Result<(), BenchError> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.file
            .write_all(&buf)
            .and_then(|()| self.file.flush())
            .map_err(|e| io(&self.path, e))?;
        self.lines += 1;
        Ok(())
    }

    /// Lines in the file (kept and appended).
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Sync the file to disk.
    ///
    /// # Errors
    /// [`BenchError::Io`] naming the output.
    pub fn finish(self) -> Result<usize, BenchError> {
        self.file.sync_all().map_err(|e| io(&self.path, e))?;
        Ok(self.lines)
    }
}

fn write_sidecar(sidecar: &Path, fingerprint: &str) -> Result<(), BenchError> {
    let text = serde_json::to_string(&Sidecar {
        dgem_batch: 1,
        fingerprint: fingerprint.to_string(),
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

fn check_sidecar(path: &Path, sidecar: &Path, fingerprint: &str) -> Result<(), BenchError> {
    let text = match std::fs::read_to_string(sidecar) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BenchError::Invalid(format!(
                "`--output` {} already exists and was not written by `dgem batch` (there is no {}); pass `--overwrite` to replace it, or name another file",
                path.display(),
                sidecar.display()
            )))
        }
        Err(e) => return Err(io(sidecar, e)),
    };
    let found: Option<Sidecar> = serde_json::from_str(&text).ok();
    match found {
        Some(s) if s.fingerprint == fingerprint => Ok(()),
        _ => Err(BenchError::Invalid(format!(
            "`--output` {} was written by `dgem batch` under other arguments (policy, questions, variables, mapping, read options, backend or shard differ), so resuming it would mix two runs; pass `--overwrite` to start again, or name another file",
            path.display()
        ))),
    }
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
/// [`BenchError::Invalid`] for a line that is not a batch output line, a row
/// found twice, or rows missing between 0 and the last one (a shard that
/// did not finish or was not given).
pub fn merge(parts: &[PathBuf], out: &Path) -> Result<usize, BenchError> {
    let mut rows: Vec<(usize, String)> = Vec::new();
    for p in parts {
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
    let missing: Vec<usize> = match rows.last() {
        Some((last, _)) => (0..*last)
            .filter(|r| rows.binary_search_by_key(r, |(row, _)| *row).is_err())
            .take(10)
            .collect(),
        None => Vec::new(),
    };
    if !missing.is_empty() {
        return Err(BenchError::Invalid(format!(
            "rows are missing from the shard outputs (first: {}); is a shard unfinished or not given?",
            missing
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
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

    #[test]
    fn a_cut_short_line_is_dropped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        let mut j = Journal::open(&out, "f1", false).unwrap().journal;
        j.append(r#"{"row":0}"#).unwrap();
        j.append(r#"{"row":1}"#).unwrap();
        drop(j);
        // A kill in the middle of the third line.
        let mut f = OpenOptions::new().append(true).open(&out).unwrap();
        f.write_all(br#"{"row":2,"dec"#).unwrap();
        drop(f);
        let opened = Journal::open(&out, "f1", false).unwrap();
        assert_eq!(opened.kept, vec![r#"{"row":0}"#, r#"{"row":1}"#]);
        assert_eq!(opened.dropped_bytes, 13);
        let mut j = opened.journal;
        j.append(r#"{"row":2}"#).unwrap();
        assert_eq!(j.finish().unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "{\"row\":0}\n{\"row\":1}\n{\"row\":2}\n"
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
        assert!(fresh.kept.is_empty());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
        // A file dgem did not write (no sidecar) is not touched.
        let other = dir.path().join("mine.jsonl");
        std::fs::write(&other, "precious\n").unwrap();
        let e = Journal::open(&other, "f1", false).unwrap_err().to_string();
        assert!(e.contains("was not written by `dgem batch`"), "{e}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "precious\n");
    }

    #[test]
    fn an_output_in_a_missing_folder_is_an_io_error_naming_it() {
        let e = Journal::open(Path::new("/nonexistent/dir/out.jsonl"), "f", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/dir/out.jsonl"), "{e}");
    }

    #[test]
    fn merge_puts_shard_lines_back_in_input_order_and_finds_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        std::fs::write(&a, "{\"row\":2,\"id\":\"c\"}\n{\"row\":0,\"id\":\"a\"}\n").unwrap();
        std::fs::write(&b, "{\"id\":\"batch_req_1\",\"custom_id\":\"b\"}\n").unwrap();
        let out = dir.path().join("all.jsonl");
        assert_eq!(merge(&[a.clone(), b], &out).unwrap(), 3);
        let text = std::fs::read_to_string(&out).unwrap();
        let rows: Vec<usize> = text
            .lines()
            .map(|l| row_of(&serde_json::from_str(l).unwrap()).unwrap())
            .collect();
        assert_eq!(rows, vec![0, 1, 2]);
        let e = merge(&[a], &out).unwrap_err().to_string();
        assert!(
            e.contains("rows are missing") && e.contains("first: 1"),
            "{e}"
        );
    }
}
