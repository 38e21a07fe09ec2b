//! JSON Lines datasets with line-numbered errors.
//!
//! [`load`] parses every non-empty line into a row type. A line that is not
//! valid JSON, lacks a field, repeats an earlier `id` or fails the row's own
//! check is reported with its 1-based line number: skipped (and listed in the
//! receipt) normally, or fatal with `strict`. Nothing in a dataset can crash a run.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::BenchError;

/// A dataset row type: deserializable, with an id and an optional self-check.
pub trait Row: DeserializeOwned {
    /// The row's unique id (the key that `--resume` uses).
    fn id(&self) -> &str;
    /// Extra validation beyond the JSON shape; the message names the field.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// A skipped line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Malformed {
    /// 1-based line number.
    pub line: usize,
    /// Why it was skipped.
    pub message: String,
}

/// A loaded dataset.
#[derive(Debug, Clone)]
pub struct Dataset<R> {
    /// The file.
    pub path: PathBuf,
    /// sha256 of the file's bytes, hex.
    pub sha256: String,
    /// Usable rows with their 1-based line numbers, in file order.
    pub rows: Vec<(usize, R)>,
    /// Skipped lines.
    pub skipped: Vec<Malformed>,
}

/// sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Load `path` as JSON Lines of `R`.
///
/// # Errors
/// [`BenchError::Io`] if the file cannot be read; [`BenchError::Row`] for the
/// first bad line when `strict`; [`BenchError::Empty`] when no row is usable.
pub fn load<R: Row>(path: &Path, strict: bool) -> Result<Dataset<R>, BenchError> {
    let bytes = std::fs::read(path).map_err(|e| BenchError::io(path, e))?;
    let text = String::from_utf8_lossy(&bytes);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<R>(line)
            .map_err(|e| e.to_string())
            .and_then(|r| {
                r.check()?;
                if !seen.insert(r.id().to_owned()) {
                    return Err(format!("`id` `{}` repeats an earlier row", r.id()));
                }
                Ok(r)
            });
        match parsed {
            Ok(r) => rows.push((n, r)),
            Err(message) if strict => {
                return Err(BenchError::Row {
                    path: path.to_path_buf(),
                    line: n,
                    message,
                })
            }
            Err(message) => {
                tracing::warn!(line = n, %message, "malformed dataset row skipped");
                skipped.push(Malformed { line: n, message });
            }
        }
    }
    if rows.is_empty() {
        return Err(BenchError::Empty(path.to_path_buf()));
    }
    Ok(Dataset {
        path: path.to_path_buf(),
        sha256: sha256_hex(&bytes),
        rows,
        skipped,
    })
}

impl<R> Dataset<R> {
    /// Keep rows `offset..offset + limit`.
    pub fn window(&mut self, offset: usize, limit: Option<usize>) {
        let rows = std::mem::take(&mut self.rows);
        self.rows = rows
            .into_iter()
            .skip(offset)
            .take(limit.unwrap_or(usize::MAX))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct R {
        id: String,
        n: u32,
    }
    impl Row for R {
        fn id(&self) -> &str {
            &self.id
        }
        fn check(&self) -> Result<(), String> {
            if self.n == 0 {
                return Err("`n` must be at least 1. Given: `0`".into());
            }
            Ok(())
        }
    }

    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), text).expect("write");
        f
    }

    #[test]
    fn malformed_rows_are_skipped_with_line_numbers() {
        let f = write(
            "{\"id\":\"a\",\"n\":1}\n\nnot json\n{\"id\":\"b\"}\n{\"id\":\"a\",\"n\":2}\n{\"id\":\"c\",\"n\":0}\n{\"id\":\"d\",\"n\":3}\n",
        );
        let d = load::<R>(f.path(), false).expect("loads");
        let ids: Vec<&str> = d.rows.iter().map(|(_, r)| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "d"]);
        assert_eq!(d.rows[1].0, 7);
        let lines: Vec<usize> = d.skipped.iter().map(|m| m.line).collect();
        assert_eq!(lines, [3, 4, 5, 6]);
        assert!(d.skipped[1].message.contains("missing field `n`"));
        assert!(d.skipped[2].message.contains("repeats"));
        assert_eq!(d.sha256.len(), 64);
    }

    #[test]
    fn strict_fails_on_the_first_bad_line() {
        let f = write("{\"id\":\"a\",\"n\":1}\nnope\n");
        match load::<R>(f.path(), true) {
            Err(BenchError::Row { line, .. }) => assert_eq!(line, 2),
            other => panic!("expected a row error, got {other:?}"),
        }
        let empty = write("\n\n");
        assert!(matches!(
            load::<R>(empty.path(), false),
            Err(BenchError::Empty(_))
        ));
    }
}
