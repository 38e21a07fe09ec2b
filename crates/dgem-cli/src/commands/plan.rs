//! `dgem plan`: resolve every read of each JevBench row without running the
//! model, and count what would be refused.
//!
//! For each row the one-question schema is built (`dgem_bench::suites::jev`),
//! validated and planned ([`dgem_engine::Engine::plan`]): prompt, slot position,
//! label token ids and scoring method. The model file is opened for its
//! tokenizer only; nothing is decoded. The summary counts rows planned and
//! refused (with each refusal's message) and how many questions were scored by
//! first token or by whole-option sequence.

use std::path::PathBuf;

use clap::Args;
use dgem_bench::suites::jev::JevRow;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::DecideRequest;
use serde_json::{json, Value};

use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

/// Arguments of `dgem plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// JevBench-format JSON Lines (`id`, `state`, `question`, `labels`, `expected`).
    #[arg(short = 'd', long = "dataset")]
    pub dataset: PathBuf,
    /// Include every row's full plan (prompts included) in the output.
    #[arg(long)]
    pub rows: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Run `dgem plan`.
pub fn run(args: PlanArgs) -> Result<(), Failure> {
    let data = dgem_bench::dataset::load::<JevRow>(&args.dataset, false).map_err(user)?;
    let engine = setup::engine(&args.model)?;
    let mut rows = Vec::with_capacity(data.rows.len());
    let (mut planned, mut refused) = (0usize, Vec::new());
    let (mut first_token, mut sequence) = (0usize, 0usize);
    let mut times = Vec::with_capacity(data.rows.len());
    for (_, row) in &data.rows {
        let result = ValidSchema::from_value(&row.schema(), &SchemaDefaults::default())
            .map_err(dgem_engine::EngineError::from)
            .and_then(|schema| {
                engine.plan(&DecideRequest {
                    schema,
                    state: row.state_value(),
                    seed: 42,
                })
            });
        match result {
            Ok(plan) => {
                planned += 1;
                times.push(plan.plan_ms);
                for slot in plan.stages.iter().flatten().flat_map(|g| &g.slots) {
                    match slot.scoring {
                        dgem_core::envelope::Scoring::Sequence => sequence += 1,
                        _ => first_token += 1,
                    }
                }
                if args.rows {
                    rows.push(json!({"id": row.id, "plan": plan}));
                }
            }
            Err(e) => {
                refused.push(json!({"id": row.id, "error": e.to_string()}));
            }
        }
    }
    let median = dgem_bench::metrics::stats::percentile(&times, 0.5);
    let mut out = json!({
        "dataset": args.dataset.display().to_string(),
        "items": data.rows.len(),
        "skipped_lines": data.skipped,
        "planned": planned,
        "refused": refused.len(),
        "refusals": refused,
        "scoring": {"first_token": first_token, "sequence": sequence},
        "plan_ms_median": median,
    });
    if args.rows {
        out["rows"] = Value::Array(rows);
    }
    println!("{}", serde_json::to_string_pretty(&out).map_err(internal)?);
    Ok(())
}
