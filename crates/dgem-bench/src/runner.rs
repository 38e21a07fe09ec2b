//! The concurrent runner: `workers` jobs in flight over one shared engine, each
//! finished row appended (and flushed) to a `.partial` JSON Lines file as soon as
//! it finishes, so a killed run can continue with `--resume` without losing or
//! repeating rows.
//!
//! The partial file starts with a header line `{"dgem_partial":1,"fingerprint":…}`
//! (a hash of the dataset and the settings); each further line is
//! `{"id":…,"row":…}`. On resume, rows whose id is still in the dataset are kept,
//! a line cut short by the kill is dropped (its item runs again), the file is
//! rewritten clean and only the missing items are run.
//!
//! A job that fails in a way that concerns that item alone (a timeout, an
//! overloaded or restarting backend, a malformed upstream reply: see
//! [`BenchError::is_item_failure`]) is recorded as an [`ItemFailure`] and the
//! run goes on; the item has no row (it is not scored), and `--resume` runs it
//! again. Any other error stops the run: the rows already written stay, the
//! in-flight ones are cancelled and run again on resume.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::BenchError;

/// Progress reporting (the CLI draws an indicatif bar; tests use [`NoProgress`]).
pub trait Progress: Send + Sync {
    /// The run starts: `total` items, `done` of them restored from a partial file.
    fn begin(&self, total: usize, done: usize);
    /// One item finished.
    fn advance(&self, id: &str);
    /// The run ended (successfully or not).
    fn end(&self);
}

/// A [`Progress`] that reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _: usize, _: usize) {}
    fn advance(&self, _: &str) {}
    fn end(&self) {}
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Jobs in flight at once (at least 1).
    pub workers: usize,
    /// Where finished rows go as they finish; `None` keeps them in memory only.
    pub partial: Option<PathBuf>,
    /// Continue from an existing partial file instead of starting over.
    pub resume: bool,
    /// Hash of the dataset and settings; a partial file with another one is refused.
    pub fingerprint: String,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome<R> {
    /// One row per item that finished, in item order.
    pub rows: Vec<R>,
    /// Items that failed on their own (see the module docs), in item order.
    pub failed: Vec<ItemFailure>,
    /// Rows restored from the partial file.
    pub resumed: usize,
    /// Rows run in this session.
    pub ran: usize,
    /// Wall time of this session, seconds.
    pub elapsed_s: f64,
}

/// One item that failed without stopping the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemFailure {
    /// Item id.
    pub id: String,
    /// What went wrong.
    pub error: String,
}

#[derive(Serialize, Deserialize)]
struct Header {
    dgem_partial: u32,
    fingerprint: String,
}

#[derive(Serialize, Deserialize)]
struct Line<R> {
    id: String,
    row: R,
}

/// The partial file for a receipt path: `receipt.json` → `receipt.json.partial`.
pub fn partial_path(receipt: &Path) -> PathBuf {
    let mut s = receipt.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

/// Read the rows of a partial file (a cut-short line is ignored).
fn read_partial<R: DeserializeOwned>(
    path: &Path,
    fingerprint: &str,
) -> Result<HashMap<String, Value>, BenchError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(BenchError::io(path, e)),
    };
    let mut lines = text.lines();
    if let Some(first) = lines.next() {
        if let Ok(h) = serde_json::from_str::<Header>(first) {
            if h.fingerprint != fingerprint {
                return Err(BenchError::ResumeMismatch {
                    path: path.to_path_buf(),
                    found: h.fingerprint,
                    expected: fingerprint.to_owned(),
                });
            }
        }
    }
    let mut rows = HashMap::new();
    for (i, line) in lines.enumerate() {
        match serde_json::from_str::<Line<Value>>(line) {
            // Check that the row still parses as this harness's row type.
            Ok(l) if serde_json::from_value::<R>(l.row.clone()).is_ok() => {
                rows.insert(l.id, l.row);
            }
            _ => tracing::warn!(
                line = i + 2,
                "unreadable partial row dropped; it will run again"
            ),
        }
    }
    Ok(rows)
}

fn open_fresh(
    path: &Path,
    fingerprint: &str,
    keep: &[(String, Value)],
) -> Result<std::fs::File, BenchError> {
    let mut f = std::fs::File::create(path).map_err(|e| BenchError::io(path, e))?;
    let mut text = serde_json::to_string(&Header {
        dgem_partial: 1,
        fingerprint: fingerprint.to_owned(),
    })
    .map_err(|e| BenchError::json("partial header", e))?;
    text.push('\n');
    for (id, row) in keep {
        let line = serde_json::to_string(&Line {
            id: id.clone(),
            row,
        })
        .map_err(|e| BenchError::json("partial row", e))?;
        text.push_str(&line);
        text.push('\n');
    }
    f.write_all(text.as_bytes())
        .map_err(|e| BenchError::io(path, e))?;
    f.flush().map_err(|e| BenchError::io(path, e))?;
    Ok(f)
}

/// Run `job` over `items` (`(id, item)` pairs with unique ids).
///
/// # Errors
/// The first error a job returns (after the rows finished so far are saved),
/// [`BenchError::ResumeMismatch`] for a partial file of another run, or I/O errors.
pub async fn run<T, R, F, Fut>(
    items: Vec<(String, T)>,
    cfg: &RunConfig,
    progress: &dyn Progress,
    job: F,
) -> Result<RunOutcome<R>, BenchError>
where
    T: Send + 'static,
    R: Serialize + DeserializeOwned + Send + 'static,
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<R, BenchError>> + Send + 'static,
{
    let started = Instant::now();
    let order: Vec<String> = items.iter().map(|(id, _)| id.clone()).collect();
    let mut done: HashMap<String, Value> = HashMap::new();
    let mut file = None;
    if let Some(path) = &cfg.partial {
        if cfg.resume {
            done = read_partial::<R>(path, &cfg.fingerprint)?;
            done.retain(|id, _| order.contains(id));
        }
        let keep: Vec<(String, Value)> = order
            .iter()
            .filter_map(|id| done.get(id).map(|v| (id.clone(), v.clone())))
            .collect();
        file = Some(open_fresh(path, &cfg.fingerprint, &keep)?);
    }
    let resumed = done.len();
    progress.begin(order.len(), resumed);
    let pending: Vec<(String, T)> = items
        .into_iter()
        .filter(|(id, _)| !done.contains_key(id))
        .collect();
    let mut todo = pending.into_iter();
    let mut set: JoinSet<(String, Result<R, BenchError>)> = JoinSet::new();
    let mut ran = 0;
    let mut failed: Vec<ItemFailure> = Vec::new();
    let workers = cfg.workers.max(1);
    loop {
        while set.len() < workers {
            let Some((id, item)) = todo.next() else { break };
            let fut = job(item);
            set.spawn(async move { (id, fut.await) });
        }
        let Some(joined) = set.join_next().await else {
            break;
        };
        let (id, result) = joined.map_err(|e| BenchError::Worker(e.to_string()))?;
        let row = match result {
            Ok(r) => r,
            Err(e) if e.is_item_failure() => {
                tracing::warn!(item = %id, error = %e, "item failed; the run goes on");
                failed.push(ItemFailure {
                    id: id.clone(),
                    error: e.to_string(),
                });
                progress.advance(&id);
                continue;
            }
            Err(e) => {
                set.abort_all();
                progress.end();
                return Err(e);
            }
        };
        let value = serde_json::to_value(&row).map_err(|e| BenchError::json("row", e))?;
        if let (Some(f), Some(path)) = (file.as_mut(), cfg.partial.as_ref()) {
            let mut line = serde_json::to_string(&Line {
                id: id.clone(),
                row: &value,
            })
            .map_err(|e| BenchError::json("partial row", e))?;
            line.push('\n');
            f.write_all(line.as_bytes())
                .and_then(|()| f.flush())
                .map_err(|e| BenchError::io(path, e))?;
        }
        progress.advance(&id);
        done.insert(id, value);
        ran += 1;
    }
    progress.end();
    let rows = order
        .iter()
        .filter_map(|id| done.remove(id))
        .map(|v| serde_json::from_value(v).map_err(|e| BenchError::json("row", e)))
        .collect::<Result<Vec<R>, _>>()?;
    failed.sort_by_key(|f| order.iter().position(|id| id == &f.id));
    Ok(RunOutcome {
        rows,
        failed,
        resumed,
        ran,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}
