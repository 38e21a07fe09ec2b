//! JSON receipts: everything needed to reproduce and compare a run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dgem_engine::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dataset::{Dataset, Refused};
use crate::BenchError;

/// Receipt format tag.
pub const RECEIPT_FORMAT: &str = "dgem.bench.receipt/v1";

/// The dataset a run read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetInfo {
    /// Path as given.
    pub path: PathBuf,
    /// sha256 of the file.
    pub sha256: String,
    /// Rows run (after `--offset`/`--limit`).
    pub rows: usize,
    /// Lines that could not be mapped to a row: counted, listed, not run.
    /// (Receipts written before refusals were counted call it `skipped`.)
    #[serde(default, alias = "skipped")]
    pub refused: Vec<Refused>,
}

impl DatasetInfo {
    /// Describe a loaded dataset.
    pub fn of<R>(d: &Dataset<R>) -> Self {
        Self {
            path: d.path.clone(),
            sha256: d.sha256.clone(),
            rows: d.rows.len(),
            refused: d.refused.clone(),
        }
    }
}

/// The model and backend that answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Model id.
    pub id: String,
    /// sha256 of the model file, when known.
    pub sha256: Option<String>,
    /// The runtime that ran the model (`llama.cpp`, `vllm`, …).
    pub backend: String,
    /// `words` or `letters`.
    pub label_mode: String,
    /// Whether contextual calibration was applied.
    pub calibration: bool,
    /// Hash of the question block's sentences when they were not dgem's own
    /// (`--wording compact`; `sha256:` and 16 hex digits); absent for dgem's
    /// own, and in receipts written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wording: Option<String>,
}

impl ModelInfo {
    /// Describe the engine's backend.
    pub fn of(engine: &Engine) -> Self {
        let info = engine.backend().info();
        Self {
            id: info.model_id.clone(),
            sha256: info.model_sha256.clone(),
            backend: info.runtime.clone(),
            label_mode: engine.label_mode().as_str().to_owned(),
            calibration: engine.calibrates(),
            wording: engine.wording_hash(),
        }
    }
}

/// Which dgem produced the receipt: the commit the **binary** was built from,
/// captured at compile time by this crate's build script (`build.rs`), not the
/// working directory's state when the benchmark ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionInfo {
    /// Crate version.
    pub version: String,
    /// `git rev-parse HEAD` of the checkout the binary was built from, else
    /// `unknown` (built outside a git repository).
    pub git_revision: String,
    /// Whether the sources the binary was built from (tracked files under
    /// `crates/`, `vendor/` and `templates/`, `Cargo.toml`, `Cargo.lock`,
    /// `.cargo/config.toml`, `rust-toolchain.toml`: `build.rs`'s `SOURCES`)
    /// differed from
    /// `git_revision` at build time: the receipt then measured changes not in
    /// that commit. `None` when git could not tell (and in receipts written
    /// before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_dirty: Option<bool>,
}

impl VersionInfo {
    /// This binary: its version, the commit it was built from and whether
    /// its sources were changed from that commit.
    pub fn current() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            git_revision: env!("DGEM_BUILD_REVISION").to_owned(),
            git_dirty: match env!("DGEM_BUILD_DIRTY") {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            },
        }
    }
}

/// Run accounting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Concurrent workers.
    pub workers: usize,
    /// Rows restored from a `.partial` file.
    pub resumed: usize,
    /// Rows run in the last session.
    pub ran: usize,
    /// Wall time of the last session, seconds.
    pub elapsed_s: f64,
    /// Decisions per second in the last session (engine calls / wall time).
    pub decisions_per_s: f64,
    /// Items that failed on their own (a timeout, an overloaded backend): not
    /// scored; `--resume` runs them again. Absent when none failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<crate::runner::ItemFailure>,
}

/// One benchmark receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// [`RECEIPT_FORMAT`].
    pub format: String,
    /// `bench`, `calibration`, `intents`, `rerank` or `permutation`.
    pub suite: String,
    /// Unix seconds when the receipt was written.
    pub created_unix: u64,
    /// The dataset.
    pub dataset: DatasetInfo,
    /// The model and backend.
    pub model: ModelInfo,
    /// dgem version and git revision.
    pub dgem: VersionInfo,
    /// Base seed.
    pub seed: i64,
    /// Harness settings (workers, samples, layout, thresholds…).
    pub settings: Value,
    /// Run accounting.
    pub run: RunInfo,
    /// Flat metric table (the names `--fail-under` and `bench-compare` use).
    pub metrics: BTreeMap<String, f64>,
    /// Grouped results (by domain, tier, regime, bins…).
    pub breakdown: Value,
    /// Every item with its answers, probabilities and timing.
    pub items: Vec<Value>,
    /// Set on the receipt of one shard of a run (`--shard I/N`): which shard,
    /// and the id and dataset line of every row it was given, so
    /// `dgem bench-merge` can check that the shards cover the dataset once
    /// and put the items back in dataset order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardPlan>,
}

/// What one shard of a run was given (see [`Receipt::shard`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardPlan {
    /// 0-based shard index.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
    /// `(id, 1-based dataset line)` of every row of this shard, in dataset order.
    pub rows: Vec<(String, usize)>,
}

/// Unix seconds now.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Receipt {
    /// Write pretty JSON (via a temporary file, then rename).
    ///
    /// # Errors
    /// I/O or serialization errors.
    pub fn write(&self, path: &Path) -> Result<(), BenchError> {
        let text =
            serde_json::to_string_pretty(self).map_err(|e| BenchError::json("receipt", e))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text + "\n").map_err(|e| BenchError::io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| BenchError::io(path, e))
    }

    /// Read a receipt.
    ///
    /// # Errors
    /// I/O errors, or [`BenchError::Json`] when the file is not a receipt.
    pub fn read(path: &Path) -> Result<Self, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))?;
        serde_json::from_str(&text).map_err(|e| BenchError::json(path.display().to_string(), e))
    }
}

/// A hash of the dataset and settings, for `.partial` files.
pub fn fingerprint(dataset_sha: &str, suite: &str, seed: i64, settings: &Value) -> String {
    let text = format!("{suite}|{dataset_sha}|{seed}|{settings}");
    crate::dataset::sha256_hex(text.as_bytes())[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use super::VersionInfo;

    fn git(args: &[&str]) -> Option<String> {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let out = std::process::Command::new("git")
            .arg("--no-optional-locks")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Issue 36: a receipt recorded the working directory's commit at run
    /// time, so a binary built earlier was credited to whatever was checked
    /// out when it ran. It now names the commit the binary was built from.
    #[test]
    fn the_receipt_names_the_commit_the_binary_was_built_from() {
        let v = VersionInfo::current();
        let Some(head) = git(&["rev-parse", "HEAD"]) else {
            assert_eq!(v.git_revision, "unknown");
            assert_eq!(v.git_dirty, None);
            return;
        };
        // The test binary was built from this checkout just now.
        assert_eq!(v.git_revision, head);
        let mut args = vec!["status", "--porcelain", "--untracked-files=no", "--"];
        args.extend(env!("DGEM_BUILD_SOURCES").split(' '));
        let status = git(&args).expect("git status");
        assert_eq!(v.git_dirty, Some(!status.is_empty()));
        let json = serde_json::to_value(&v).expect("serializes");
        assert_eq!(json["git_revision"], head.as_str());
        assert_eq!(json["git_dirty"], !status.is_empty());
    }
}
