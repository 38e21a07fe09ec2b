//! `dgem plan`: resolve every read of each JevBench row without running the
//! model, and count what would be refused.
//!
//! For each row the one-question schema is built (`dgem_bench::suites::jev`),
//! validated and planned ([`dgem_engine::Engine::plan`]): prompt, slot position,
//! label token ids and scoring method. The model file is opened for its
//! tokenizer only; nothing is decoded. The summary counts every line: rows
//! planned, and rows refused (a line that cannot be mapped to a row, or a row
//! the engine refuses), each with its `id`, `line` and `reason`; and how many
//! questions were scored by first token or by whole-option sequence
//! (`dgem_bench::suites::jev_plan`).
//!
//! Exit codes: 0 ok, 1 user error (including any refused row, unless
//! `--allow-refused`; the summary is printed first), 2 engine error.

use std::path::PathBuf;

use clap::Args;
use dgem_bench::suites::jev::JevRow;
use dgem_bench::suites::jev_plan::{plan_rows, PlanReport};
use serde_json::json;

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
    /// Exit 0 even when rows were refused (they are still counted and listed).
    /// Without it any refused row exits 1.
    #[arg(long = "allow-refused")]
    pub allow_refused: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Run `dgem plan`.
pub fn run(args: PlanArgs) -> Result<(), Failure> {
    let data = dgem_bench::dataset::load::<JevRow>(&args.dataset, false).map_err(user)?;
    let engine = setup::engine(&args.model)?;
    let report = plan_rows(&engine, &data, args.rows).map_err(|e| {
        if e.is_user_error() {
            user(e)
        } else {
            internal(e)
        }
    })?;
    let mut out = serde_json::to_value(&report).map_err(internal)?;
    if let Some(o) = out.as_object_mut() {
        o.shift_insert(
            0,
            "dataset".into(),
            json!(args.dataset.display().to_string()),
        );
    }
    println!("{}", serde_json::to_string_pretty(&out).map_err(internal)?);
    refused_exit(&report, args.allow_refused)
}

/// Exit 1 (a user error naming the first refusal) when any row was refused,
/// unless `allow_refused`.
fn refused_exit(report: &PlanReport, allow_refused: bool) -> Result<(), Failure> {
    match report.refusals.first() {
        Some(first) if !allow_refused => Err(user(anyhow::anyhow!(
            "{} of {} row(s) refused (first: line {}, `{}`: {}); the summary lists them; pass `--allow-refused` to exit 0 anyway",
            report.refused,
            report.items,
            first.line,
            first.label(),
            first.reason
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use dgem_bench::dataset::Refused;
    use dgem_bench::suites::jev_plan::ScoringCounts;

    use super::*;

    fn report(refusals: Vec<Refused>) -> PlanReport {
        PlanReport {
            items: 3,
            planned: 3 - refusals.len(),
            refused: refusals.len(),
            refusals,
            scoring: ScoringCounts::default(),
            plan_ms_median: 0.0,
            rows: Vec::new(),
        }
    }

    /// Regression: `dgem plan` exited 0 with rows it could not map; a refused
    /// row now exits 1 (a user error) unless `--allow-refused`.
    #[test]
    fn plan_exits_1_on_a_refused_row_unless_allowed() {
        let r = report(vec![Refused {
            line: 2,
            id: Some("sev-9".into()),
            reason: "`expected` must be one of the levels. Given: `9`".into(),
        }]);
        match refused_exit(&r, false) {
            Err(f @ Failure::User(_)) => {
                assert_eq!(
                    f.message(),
                    "1 of 3 row(s) refused (first: line 2, `sev-9`: `expected` must be one of the levels. Given: `9`); the summary lists them; pass `--allow-refused` to exit 0 anyway"
                );
            }
            other => panic!("expected a user error, got {other:?}"),
        }
        assert!(refused_exit(&r, true).is_ok());
        assert!(refused_exit(&report(Vec::new()), false).is_ok());
    }
}
