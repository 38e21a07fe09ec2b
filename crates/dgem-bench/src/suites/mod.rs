//! The harnesses. Each has a dataset row type, an async job that turns one row
//! into one result row (the runner writes those as they finish), and a
//! `summarize` that turns all result rows into flat metrics, a breakdown and
//! report tables.

pub mod bench;
pub use bench::multilabel;
pub mod calibration;
pub mod compare;
pub mod intents;
pub mod jev;
pub mod jev_plan;
pub mod jev_run;
pub mod permutation;
pub mod quality;
pub mod rerank;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use dgem_core::envelope::AnswerOut;
use dgem_core::schema::{Layout, SamplePolicy, SchemaDefaults, ValidSchema};
use dgem_engine::{DecideRequest, Decision, Engine};
use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::dataset::Refused;
use crate::report::Table;
use crate::BenchError;

/// What every harness hands back for reporting.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Flat metrics (gate and compare names).
    pub metrics: std::collections::BTreeMap<String, f64>,
    /// Grouped results.
    pub breakdown: Value,
    /// Report tables.
    pub tables: Vec<Table>,
}

/// Name of the metric that counts refused dataset rows.
pub const REFUSED_METRIC: &str = "refused";

/// Title of the report table that lists refused dataset rows.
pub const REFUSED_TABLE: &str = "Refused rows";

impl Summary {
    /// Report the dataset rows that could not be mapped (call once, after the
    /// suite's own summary): the metric [`REFUSED_METRIC`] (also when 0), a
    /// `refused N` row in the first `Metric | Value` table, a
    /// [`REFUSED_TABLE`] table with each row's line, id and reason when there
    /// are any, and `breakdown.refused` listing them.
    pub fn record_refused(&mut self, refused: &[Refused]) {
        let n = refused.len();
        self.metrics.insert(REFUSED_METRIC.into(), n as f64);
        if let Some(t) = self
            .tables
            .iter_mut()
            .find(|t| t.columns == ["Metric", "Value"])
        {
            t.push(vec![REFUSED_METRIC.into(), n.to_string()]);
        }
        if n > 0 {
            let mut t = Table::new(REFUSED_TABLE, &["Line", "ID", "Reason"]);
            for r in refused {
                t.push(vec![r.line.to_string(), r.label(), r.reason.clone()]);
            }
            self.tables.push(t);
        }
        if self.breakdown.is_null() {
            self.breakdown = Value::Object(Map::new());
        }
        if let Value::Object(b) = &mut self.breakdown {
            let list = refused
                .iter()
                .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
                .collect();
            b.insert(REFUSED_METRIC.into(), Value::Array(list));
        }
    }
}

/// Shared decision settings of a run: the engine and the per-request overrides.
#[derive(Debug, Clone)]
pub struct Decider {
    /// The engine (shared by all workers).
    pub engine: Arc<Engine>,
    /// `--samples` override.
    pub samples: Option<SamplePolicy>,
    /// `--layout` override.
    pub layout: Option<Layout>,
    /// Base seed.
    pub seed: i64,
}

/// A decision and how long it took.
#[derive(Debug, Clone)]
pub struct Timed {
    /// The decision.
    pub decision: Decision,
    /// Wall time of `Engine::decide`, ms.
    pub wall_ms: f64,
}

impl Decider {
    /// Render `template` with `vars`, validate the schema and apply overrides.
    ///
    /// # Errors
    /// [`BenchError::Item`] when the template or schema is invalid.
    pub fn prepare(
        &self,
        id: &str,
        name: &str,
        template: &str,
        vars: &Map<String, Value>,
    ) -> Result<(ValidSchema, Value), BenchError> {
        let item = |e: &dyn std::fmt::Display| BenchError::Item {
            id: id.to_owned(),
            message: e.to_string(),
        };
        let rendered = dgem_core::template::render(name, template, vars).map_err(|e| item(&e))?;
        let payload =
            dgem_core::payload::parse_named_payload(name, &rendered, vars).map_err(|e| item(&e))?;
        let mut schema = ValidSchema::from_value(&payload.schema, &SchemaDefaults::default())
            .map_err(|e| item(&e))?;
        if let Some(s) = self.samples {
            schema = schema.with_samples(s);
        }
        if let Some(l) = self.layout {
            schema = schema.with_layout(l);
        }
        Ok((schema, payload.state))
    }

    /// Make one decision and time it.
    ///
    /// # Errors
    /// [`BenchError::Engine`]; check [`BenchError::is_user_error`] to tell an item
    /// problem (recorded, run continues) from a failing engine (run stops).
    pub async fn decide(
        &self,
        id: &str,
        schema: ValidSchema,
        state: Value,
    ) -> Result<Timed, BenchError> {
        let started = Instant::now();
        let decision = self
            .engine
            .decide(DecideRequest {
                schema,
                state,
                seed: self.seed,
            })
            .await
            .map_err(|source| BenchError::Engine {
                id: id.to_owned(),
                source,
            })?;
        Ok(Timed {
            decision,
            wall_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}

/// Turn a job error into a recorded item error when it is the item's fault;
/// pass engine failures through (they stop the run).
pub(crate) fn item_error(e: BenchError) -> Result<String, BenchError> {
    if e.is_user_error() {
        Ok(e.to_string())
    } else {
        Err(e)
    }
}

/// Probability of every alternative, by name, in alternative order.
pub fn probabilities(a: &AnswerOut) -> IndexMap<String, f64> {
    a.question
        .alternatives
        .iter()
        .zip(&a.aggregate.mean)
        .map(|(alt, p)| (alt.name.clone(), *p))
        .collect()
}

/// Answer comparison of reference.md §8.1: case-insensitive, `yes≡true`, `no≡false`.
pub fn normalize_answer(s: &str) -> String {
    let t = s.trim().to_lowercase();
    match t.as_str() {
        "true" => "yes".into(),
        "false" => "no".into(),
        _ => t,
    }
}

/// Whether the auto-samples policy extended any part of this decision
/// (`None` when every part used fixed samples).
pub fn extended(d: &Decision) -> Option<bool> {
    d.diagnostics
        .samples
        .parts
        .iter()
        .filter_map(|p| p.policy.get("extended").and_then(Value::as_bool))
        .reduce(|a, b| a || b)
}

/// Find a template named in a dataset row: as given (relative to the working
/// directory), then relative to the dataset's folder and its parent, then as a
/// name under `templates/`.
pub fn resolve_template(t: &Path, dataset: &Path) -> Option<PathBuf> {
    let dir = dataset.parent().unwrap_or(Path::new("."));
    let name = t.to_string_lossy();
    [
        t.to_path_buf(),
        dir.join(t),
        dir.join("..").join(t),
        PathBuf::from("templates").join(format!("{name}.json.tmpl")),
    ]
    .into_iter()
    .find(|c| c.is_file())
}

/// Read a template file.
///
/// # Errors
/// [`BenchError::Io`].
pub fn read_template(path: &Path) -> Result<String, BenchError> {
    std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))
}
