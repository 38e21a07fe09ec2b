//! `dgem plan`: every JevBench row's one-question schema planned by the engine
//! ([`dgem_engine::Engine::plan`]: prompt, slot position, label token ids and
//! scoring method) without running the model. Every line of the dataset is
//! counted: planned, or refused with its id and reason, either because it
//! could not be mapped to a row ([`crate::dataset`]) or because the engine
//! refused its request as the user's to fix. An engine failure (not the row's
//! fault) stops the plan.

use dgem_core::envelope::Scoring;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideError, DecideRequest, Engine};
use serde::Serialize;
use serde_json::{json, Value};

use super::jev::JevRow;
use crate::dataset::{Dataset, Refused};
use crate::metrics::stats::percentile;
use crate::BenchError;

/// Seed of the planned requests (plans do not depend on it but for sample orders).
pub const PLAN_SEED: i64 = 42;

/// Questions counted by how their labels are scored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScoringCounts {
    /// Scored by each label's first token.
    pub first_token: usize,
    /// Scored by each option's whole token sequence (labels sharing a first token).
    pub sequence: usize,
}

/// What `dgem plan` prints (without the dataset path, which the CLI adds).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// Every non-empty line of the dataset (in the window): planned + refused.
    pub items: usize,
    /// Rows planned.
    pub planned: usize,
    /// Number of refused lines (`refusals.len()`).
    pub refused: usize,
    /// Each refused line with its id and reason, in file order.
    pub refusals: Vec<Refused>,
    /// Planned questions by scoring method.
    pub scoring: ScoringCounts,
    /// Median planning time, ms.
    pub plan_ms_median: f64,
    /// Every planned row's full plan (`{id, plan}`), when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<Value>,
}

/// Plan every row of `data`; `with_rows` keeps each full plan (prompts included).
///
/// # Errors
/// [`BenchError::Engine`] when the engine fails for a reason that is not the
/// row's (a backend or model failure); a row's own problem is a refusal.
pub fn plan_rows(
    engine: &Engine,
    data: &Dataset<JevRow>,
    with_rows: bool,
) -> Result<PlanReport, BenchError> {
    let mut refusals = data.refused.clone();
    let (mut planned, mut scoring) = (0usize, ScoringCounts::default());
    let mut times = Vec::with_capacity(data.rows.len());
    let mut rows = Vec::new();
    for (line, row) in &data.rows {
        let result = ValidSchema::from_value(&row.schema(), &SchemaDefaults::default())
            .map_err(DecideError::from)
            .and_then(|schema| {
                engine.plan(&DecideRequest {
                    schema,
                    state: row.state_value(),
                    seed: PLAN_SEED,
                })
            });
        let plan = match result {
            Ok(plan) => plan,
            Err(e) if e.is_user_error() => {
                refusals.push(Refused {
                    line: *line,
                    id: Some(row.id.clone()),
                    reason: e.to_string(),
                });
                continue;
            }
            Err(source) => {
                return Err(BenchError::Engine {
                    id: row.id.clone(),
                    source,
                })
            }
        };
        planned += 1;
        times.push(plan.plan_ms);
        for slot in plan.stages.iter().flatten().flat_map(|g| &g.slots) {
            match slot.scoring {
                Scoring::Sequence => scoring.sequence += 1,
                _ => scoring.first_token += 1,
            }
        }
        if with_rows {
            rows.push(json!({"id": row.id, "plan": plan}));
        }
    }
    refusals.sort_by_key(|r| r.line);
    Ok(PlanReport {
        items: data.rows.len() + data.refused.len(),
        planned,
        refused: refusals.len(),
        refusals,
        scoring,
        plan_ms_median: percentile(&times, 0.5),
        rows,
    })
}
