//! `dgem bench-calibration`: its arguments and its run, live or re-scored
//! from a `dgem bench` receipt (moved from `bench.rs` unchanged).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use dgem_bench::receipt::{self, ModelInfo, Receipt};
use dgem_bench::report::{Format, Gate};
use dgem_bench::suites::{self, bench::BenchRow};
use serde_json::{json, Value};

use super::{
    finish, prepare, print_and_gate, report_applied, run_bench_items, settings, Outcome, RunArgs,
    RunCalibration, BENCH_DATASET,
};
use crate::failure::{internal, user, Failure};

/// Arguments of `dgem bench-calibration`.
#[derive(Debug, Args)]
pub struct CalibrationArgs {
    /// Re-score a `dgem bench` receipt instead of running the model.
    #[arg(long, env = "DGEM_BENCH_FROM_RECEIPT")]
    pub from_receipt: Option<PathBuf>,
    /// Write the reliability diagram here (SVG); default `<out>.svg` when `--out` is set.
    #[arg(long, env = "DGEM_BENCH_SVG")]
    pub svg: Option<PathBuf>,
    /// `batch`: score the run after batch calibration (each question's
    /// mean log-probability over the run removed, `dgem batch --calibrate
    /// batch`), live or `--from-receipt`. Default `none`.
    #[arg(long = "calibrate", value_enum, default_value_t = RunCalibration::None)]
    pub calibrate: RunCalibration,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Run `dgem bench-calibration`.
pub fn run_calibration(args: CalibrationArgs) -> Result<Outcome, Failure> {
    let a = &args.run;
    let svg = args
        .svg
        .clone()
        .or_else(|| a.out.as_ref().map(|o| o.with_extension("svg")));
    let title_for = |m: &ModelInfo| format!("Reliability — {} ({})", m.id, m.backend);
    if let Some(from) = &args.from_receipt {
        let r = Receipt::read(from).map_err(user)?;
        let mut items: Vec<suites::bench::BenchItem> = r
            .items
            .iter()
            .map(|v| serde_json::from_value(v.clone()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("{} is not a `dgem bench` receipt", from.display()))
            .map_err(user)?;
        if args.calibrate == RunCalibration::Batch {
            if r.settings.get("calibrate").and_then(Value::as_str) == Some("batch") {
                return Err(user(anyhow::anyhow!(
                    "`--calibrate batch`: {} was already scored after batch calibration; correcting it twice would remove the lean again",
                    from.display()
                )));
            }
            report_applied(dgem_bench::batch::rescore::bench_items(&mut items));
        }
        let (mut s, bins) = suites::calibration::summarize(&items);
        s.record_refused(&r.dataset.refused);
        if let Some(path) = &svg {
            dgem_bench::svg::reliability_svg(&bins, &title_for(&r.model), path)
                .map_err(internal)?;
            eprintln!("reliability diagram written to {}", path.display());
        }
        if let Some(out) = &a.out {
            let mut c = r.clone();
            c.suite = "calibration".into();
            c.created_unix = receipt::now_unix();
            c.settings = json!({"from_receipt": from});
            if let (Some(m), Value::Object(extra)) =
                (c.settings.as_object_mut(), args.calibrate.settings())
            {
                m.extend(extra);
            }
            c.items = items
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()
                .map_err(internal)?;
            c.metrics = s.metrics.clone();
            c.breakdown = s.breakdown.clone();
            c.write(out).map_err(internal)?;
            eprintln!("receipt written to {}", out.display());
        }
        let gates = a
            .fail_under
            .iter()
            .map(|g| g.parse::<Gate>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(user)?;
        let format: Format = a.format.parse().map_err(user)?;
        return print_and_gate(
            format,
            &s,
            &gates,
            &["accuracy", "ece_10bin", "brier"],
            a.csv_dir.as_deref(),
        );
    }
    let p = prepare::<BenchRow>(a, BENCH_DATASET, false)?;
    let settings = settings(a, args.calibrate.settings());
    let mut outcome = run_bench_items(a, "calibration", &p, &settings)?;
    if args.calibrate == RunCalibration::Batch {
        report_applied(dgem_bench::batch::rescore::bench_items(&mut outcome.rows));
    }
    let (s, bins) = suites::calibration::summarize(&outcome.rows);
    if let Some(path) = &svg {
        let title = title_for(&ModelInfo::of(&p.decider.engine));
        dgem_bench::svg::reliability_svg(&bins, &title, path).map_err(internal)?;
        eprintln!("reliability diagram written to {}", path.display());
    }
    finish(
        a,
        "calibration",
        &p,
        settings,
        &outcome,
        &s,
        &["accuracy", "ece_10bin", "brier"],
    )
}
