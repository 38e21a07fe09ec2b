//! JSON Lines datasets with line-numbered refusals.
//!
//! [`load`] maps every non-empty line to a row type. A line that is not valid
//! JSON, lacks a field, holds a value its row type cannot map, repeats an
//! earlier `id` or fails the row's own check is **refused**: never dropped, but
//! counted and listed ([`Refused`]: its line, its `id` when it has one, and a
//! reason naming the field, the allowed values and the value received). The
//! harnesses report the refused rows and exit 1 on any unless
//! `--allow-refused`; with `strict` the first refused line is fatal. Nothing in a
//! dataset can crash a run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::shard::Shard;
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

/// A dataset line that could not be mapped to a row: counted and listed in the
/// report and the receipt, never silently dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    /// 1-based line number.
    pub line: usize,
    /// The row's `id`, when the line has one (`None` for a line that is not a
    /// JSON object or has no usable `id`).
    #[serde(default)]
    pub id: Option<String>,
    /// Why it was refused: the field, the allowed values and the value received.
    /// (Receipts written before refusals were counted call it `message`.)
    #[serde(alias = "message")]
    pub reason: String,
}

impl Refused {
    /// The id to show: the row's `id`, else `line N`.
    pub fn label(&self) -> String {
        self.id
            .clone()
            .unwrap_or_else(|| format!("line {}", self.line))
    }
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
    /// Lines that could not be mapped to a row, in file order.
    pub refused: Vec<Refused>,
}

/// sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The `id` of a parsed line, if it has a usable one (a string or a number).
fn id_of(v: &Value) -> Option<String> {
    match v.get("id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Map one parsed line to `R`. A deserialization error names the field path
/// (`options[2].name: invalid type: …`); a row-level message stands as is.
pub fn map_row<R: Row>(v: Value) -> Result<R, String> {
    let row: R = serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            inner.to_string()
        } else {
            format!("`{path}`: {inner}")
        }
    })?;
    row.check()?;
    Ok(row)
}

/// Load `path` as JSON Lines of `R`.
///
/// # Errors
/// [`BenchError::Io`] if the file cannot be read; [`BenchError::Row`] for the
/// first refused line when `strict`; [`BenchError::Empty`] when the file holds
/// no line at all (a file whose every line is refused loads, with no rows, so
/// the refusals are reported).
pub fn load<R: Row>(path: &Path, strict: bool) -> Result<Dataset<R>, BenchError> {
    let bytes = std::fs::read(path).map_err(|e| BenchError::io(path, e))?;
    let text = String::from_utf8_lossy(&bytes);
    let mut rows = Vec::new();
    let mut refused = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let (id, mapped) = match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => (id_of(&v), map_row::<R>(v)),
            Ok(v) => (
                None,
                Err(format!(
                    "the line must be a JSON object (one row). Given: `{}`",
                    crate::mapping::shown(&v)
                )),
            ),
            Err(e) => (None, Err(format!("the line is not valid JSON: {e}"))),
        };
        let mapped = mapped.and_then(|r| match seen.get(r.id()) {
            Some(first) => Err(format!(
                "`id` must be unique. Given: `{}`, already the id of line {first}",
                r.id()
            )),
            None => {
                seen.insert(r.id().to_owned(), n);
                Ok(r)
            }
        });
        match mapped {
            Ok(r) => rows.push((n, r)),
            Err(message) if strict => {
                return Err(BenchError::Row {
                    path: path.to_path_buf(),
                    line: n,
                    message,
                })
            }
            Err(reason) => {
                tracing::warn!(line = n, id = ?id, %reason, "dataset row refused");
                refused.push(Refused {
                    line: n,
                    id,
                    reason,
                });
            }
        }
    }
    if rows.is_empty() && refused.is_empty() {
        return Err(BenchError::Empty(path.to_path_buf()));
    }
    Ok(Dataset {
        path: path.to_path_buf(),
        sha256: sha256_hex(&bytes),
        rows,
        refused,
    })
}

impl<R> Dataset<R> {
    /// Keep the lines `offset..offset + limit`, counting refused lines as rows:
    /// a window holds the refused lines that fall inside it.
    pub fn window(&mut self, offset: usize, limit: Option<usize>) {
        let mut lines: Vec<usize> = self
            .rows
            .iter()
            .map(|(l, _)| *l)
            .chain(self.refused.iter().map(|r| r.line))
            .collect();
        lines.sort_unstable();
        let kept: Vec<usize> = lines
            .into_iter()
            .skip(offset)
            .take(limit.unwrap_or(usize::MAX))
            .collect();
        let inside = |l: usize| match (kept.first(), kept.last()) {
            (Some(lo), Some(hi)) => (*lo..=*hi).contains(&l),
            _ => false,
        };
        self.rows.retain(|(l, _)| inside(*l));
        self.refused.retain(|r| inside(r.line));
    }
}

impl<R: Row> Dataset<R> {
    /// Keep the rows of one shard: a row by its id, a refused line by its id
    /// too, or in shard 0 when it has none, so the shards' refusals add up to
    /// the whole file's once.
    pub fn keep_shard(&mut self, shard: Shard) {
        self.rows.retain(|(_, r)| shard.contains(r.id()));
        self.refused.retain(|r| match &r.id {
            Some(id) => shard.contains(id),
            None => shard.index == 0,
        });
    }
}

#[cfg(test)]
mod tests;
