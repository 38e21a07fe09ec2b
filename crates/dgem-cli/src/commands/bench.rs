//! `dgem bench` and `dgem bench-calibration`, plus the options and run loop the
//! other `bench-*` commands share (`bench_suites.rs`). The harness logic lives in
//! the `dgem-bench` library; this module parses arguments, builds the engine,
//! draws the progress bar and prints reports.
//!
//! Exit codes: 0 ok, 1 user error (including dataset rows that were refused,
//! unless `--allow-refused`), 2 engine error, 3 a `--fail-under` gate failed.
//! Refused rows win over a failed gate: the metrics then miss rows.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use dgem_bench::dataset::{self, Dataset, Refused, Row};
use dgem_bench::receipt::{self, DatasetInfo, ModelInfo, Receipt, RunInfo, ShardPlan, VersionInfo};
use dgem_bench::report::{self, Format, Gate, GateResult};
use dgem_bench::runner::{self, RunConfig, RunOutcome};
use dgem_bench::shard::Shard;
use dgem_bench::suites::{self, bench::BenchRow, Decider, Summary};
use dgem_bench::BenchError;
use dgem_core::labels::LabelMode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

mod calibration;
mod flags;
mod progress;

pub use calibration::{run_calibration, CalibrationArgs};
pub use flags::{parse_layout, parse_samples, RunCalibration};
use progress::Bar;
#[cfg(test)]
use progress::{eta_from_window, ETA_WINDOW};

/// How a bench command ended when it did not fail outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All gates passed.
    Pass,
    /// A `--fail-under` gate failed (exit 3).
    GateFailed,
    /// Dataset rows were refused and `--allow-refused` was not given (exit 1);
    /// the report and the receipt were written first.
    Refused,
}

/// The outcome once refused rows are counted: [`Outcome::Refused`] when any
/// row was refused and they are not allowed, else the gates' outcome.
pub fn with_refused(gates: Outcome, refused: usize, allow_refused: bool) -> Outcome {
    if refused > 0 && !allow_refused {
        Outcome::Refused
    } else {
        gates
    }
}

/// Map a bench command's result to the process exit code.
pub fn exit(r: Result<Outcome, Failure>) -> ExitCode {
    match r {
        Ok(Outcome::Pass) => ExitCode::SUCCESS,
        Ok(Outcome::GateFailed) => ExitCode::from(3),
        Ok(Outcome::Refused) => ExitCode::from(1),
        Err(f) => f.report(),
    }
}

/// Say on stderr what batch calibration did to a run's slots.
pub fn report_applied(a: dgem_bench::batch::rescore::Applied) {
    eprintln!(
        "batch calibration: {} of {} slots corrected (a question needs {} rows sharing its options), {} answers changed",
        a.corrected,
        a.slots,
        dgem_bench::batch::calibrate::MIN_ROWS,
        a.flipped
    );
}

/// Options shared by every harness that runs a dataset.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Dataset (JSON Lines); each harness has a default under `data/`.
    #[arg(short = 'd', long = "dataset", env = "DGEM_BENCH_DATASET")]
    pub dataset: Option<PathBuf>,
    /// Write the JSON receipt here; rows also go to `<out>.partial` as they finish.
    #[arg(short = 'o', long = "out", env = "DGEM_BENCH_OUT")]
    pub out: Option<PathBuf>,
    /// Concurrent decisions in flight.
    #[arg(
        short = 'w',
        long = "workers",
        env = "DGEM_BENCH_WORKERS",
        default_value_t = 1
    )]
    pub workers: usize,
    /// Only the first N rows (after `--offset`).
    #[arg(short = 'n', long = "limit", env = "DGEM_BENCH_LIMIT")]
    pub limit: Option<usize>,
    /// Skip the first N rows.
    #[arg(long, env = "DGEM_BENCH_OFFSET", default_value_t = 0)]
    pub offset: usize,
    /// Fail on the first dataset row that cannot be mapped, instead of
    /// refusing it (counting and listing it) and going on with the rest.
    #[arg(long, env = "DGEM_BENCH_STRICT")]
    pub strict: bool,
    /// Exit 0 (or 3 on a failed gate) even when dataset rows were refused;
    /// they are still counted and listed. Without it any refused row exits 1.
    #[arg(long = "allow-refused", env = "DGEM_BENCH_ALLOW_REFUSED")]
    pub allow_refused: bool,
    /// Continue a killed run from `<out>.partial` (needs `--out`).
    #[arg(long, env = "DGEM_BENCH_RESUME")]
    pub resume: bool,
    /// Report format: table, json, csv, md or github.
    #[arg(long, env = "DGEM_BENCH_FORMAT", default_value = "table")]
    pub format: String,
    /// Also write each report table to its own CSV file in this folder
    /// (`items.csv`, `groups.csv`, …).
    #[arg(long = "csv-dir", env = "DGEM_BENCH_CSV_DIR", value_name = "DIR")]
    pub csv_dir: Option<PathBuf>,
    /// Exit 3 unless METRIC meets VALUE (repeatable), e.g. `item_accuracy=0.8`;
    /// for error-like metrics (ece, brier, nll, *_ms, flip_rate, tvd) the value is a ceiling.
    #[arg(
        long = "fail-under",
        env = "DGEM_BENCH_FAIL_UNDER",
        value_delimiter = ','
    )]
    pub fail_under: Vec<String>,
    /// Reads per decision: a count (1–32) or `auto`. Overrides the templates.
    #[arg(long, env = "DGEM_BENCH_SAMPLES")]
    pub samples: Option<String>,
    /// Prompt layout override: `document_first` or `schema_first`.
    #[arg(long, env = "DGEM_BENCH_LAYOUT")]
    pub layout: Option<String>,
    /// Base seed.
    #[arg(long, env = "DGEM_BENCH_SEED", default_value_t = 42)]
    pub seed: i64,
    /// Run shard I of N (0-based): the rows whose id hashes to I. Also read
    /// from `DGEM_BENCH_SHARD`, Cloud Run Jobs' `CLOUD_RUN_TASK_INDEX`/`_COUNT`
    /// and Kubernetes' `JOB_COMPLETION_INDEX` with `DGEM_SHARD_COUNT`. Join the
    /// shards' receipts with `dgem bench-merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Set by commands that must see every row (`dgem calibrate` fits on the
    /// whole set): no shard, whatever the environment says.
    #[arg(skip)]
    pub never_shard: bool,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// The shard of this run: `--shard`, else the environment (see [`Shard::resolve`]).
pub fn shard_of(args: &RunArgs) -> Result<Option<Shard>, Failure> {
    if args.never_shard {
        return Ok(None);
    }
    Shard::resolve(args.shard.as_deref(), |k| std::env::var(k).ok()).map_err(user)
}

/// Arguments of `dgem bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// `batch`: score the run after batch calibration (each question's
    /// mean log-probability over the run removed, as `dgem batch
    /// --calibrate batch` does). Default `none`.
    #[arg(long = "calibrate", value_enum, default_value_t = RunCalibration::None)]
    pub calibrate: RunCalibration,
}

impl RunCalibration {
    /// The receipt settings that name this correction: none for `none`, so
    /// receipts of uncorrected runs keep their settings.
    pub fn settings(self) -> Value {
        match self {
            Self::None => json!({}),
            Self::Batch => json!({"calibrate": "batch"}),
        }
    }
}

/// Everything a harness needs to run, resolved from [`RunArgs`].
pub struct Prepared<T> {
    pub dataset: Dataset<T>,
    /// The shard this process runs (its rows only are in `dataset`).
    pub shard: Option<Shard>,
    pub decider: Decider,
    pub format: Format,
    pub gates: Vec<Gate>,
}

/// A benchmark library error as the exit code it deserves: 1 for the
/// user's input, 2 otherwise (also `dgem batch`'s).
pub(crate) fn bench_err(e: BenchError) -> Failure {
    if e.is_user_error() {
        user(e)
    } else {
        internal(e)
    }
}

/// Load the dataset, parse options and build the engine. `letters` makes the
/// engine read letter labels unless `--labels` says otherwise (option names of
/// intent and ranking sets share their first token, so words cannot tell them apart).
pub fn prepare<T: Row>(
    args: &RunArgs,
    default_dataset: &str,
    letters: bool,
) -> Result<Prepared<T>, Failure> {
    let format: Format = args.format.parse().map_err(user)?;
    let gates = args
        .fail_under
        .iter()
        .map(|g| g.parse::<Gate>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(user)?;
    if args.resume && args.out.is_none() {
        return Err(user(anyhow::anyhow!(
            "`--resume` needs `--out` (the run's rows are kept in `<out>.partial`)"
        )));
    }
    let samples = args.samples.as_deref().map(parse_samples).transpose()?;
    let layout = args.layout.as_deref().map(parse_layout).transpose()?;
    let path = args
        .dataset
        .clone()
        .unwrap_or_else(|| PathBuf::from(default_dataset));
    // A dataset that is not there is the user's to fix (exit 1), not an
    // internal failure (exit 2).
    if !path.is_file() {
        return Err(user(anyhow::anyhow!(
            "`--dataset` must be a JSON Lines file. Given: `{}` ({})",
            path.display(),
            if path.exists() {
                "not a file"
            } else {
                "no such file"
            }
        )));
    }
    let mut ds = dataset::load::<T>(&path, args.strict).map_err(bench_err)?;
    ds.window(args.offset, args.limit);
    let shard = shard_of(args)?;
    if let Some(sh) = shard {
        ds.keep_shard(sh);
        eprintln!(
            "shard {sh}: {} row(s) of this dataset (split by item id)",
            ds.rows.len()
        );
    }
    for r in &ds.refused {
        eprintln!(
            "refused: {}:{}: row `{}`: {}",
            path.display(),
            r.line,
            r.label(),
            r.reason
        );
    }
    let mut model = args.model.clone();
    if letters && model.labels.is_none() {
        model.labels = Some(LabelMode::Letters);
    }
    let engine = Arc::new(setup::engine(&model)?);
    Ok(Prepared {
        dataset: ds,
        shard,
        decider: Decider {
            engine,
            samples,
            layout,
            seed: args.seed,
        },
        format,
        gates,
    })
}

/// Run `job` over the prepared rows with the runner (workers, partial, resume).
pub fn execute<T, R, F, Fut>(
    args: &RunArgs,
    suite: &str,
    p: &Prepared<T>,
    settings: &Value,
    job: F,
) -> Result<RunOutcome<R>, Failure>
where
    T: Row + Clone + Send + 'static,
    R: Serialize + DeserializeOwned + Send + 'static,
    F: Fn(usize, T) -> Fut,
    Fut: Future<Output = Result<R, BenchError>> + Send + 'static,
{
    let cfg = RunConfig {
        workers: args.workers,
        partial: args.out.as_deref().map(runner::partial_path),
        resume: args.resume,
        fingerprint: receipt::fingerprint(&p.dataset.sha256, suite, args.seed, settings),
    };
    let items: Vec<(String, (usize, T))> = p
        .dataset
        .rows
        .iter()
        .map(|(line, r)| (r.id().to_owned(), (*line, r.clone())))
        .collect();
    let rt = setup::runtime()?;
    let bar = Bar::new(suite);
    rt.block_on(runner::run(items, &cfg, &bar, |(line, row)| job(line, row)))
        .map_err(bench_err)
}

/// Shared settings JSON of a run.
pub fn settings(args: &RunArgs, extra: Value) -> Value {
    let mut s = json!({
        "workers": args.workers, "limit": args.limit, "offset": args.offset,
        "samples": args.samples, "layout": args.layout, "strict": args.strict,
    });
    // A bad shard stops the run in `prepare`; here only a valid one is named.
    if let (Ok(Some(sh)), Some(o)) = (shard_of(args), s.as_object_mut()) {
        o.insert("shard".into(), json!(sh.to_string()));
    }
    if let (Some(o), Value::Object(e)) = (s.as_object_mut(), extra) {
        o.extend(e);
    }
    s
}

/// Build the receipt, write it (and drop the partial file), print the report
/// with the refused rows ([`Summary::record_refused`]), check the gates, and
/// end [`Outcome::Refused`] when rows were refused without `--allow-refused`.
pub fn finish<T: Row, R: Serialize>(
    args: &RunArgs,
    suite: &str,
    p: &Prepared<T>,
    settings: Value,
    outcome: &RunOutcome<R>,
    summary: &Summary,
    headline: &[&str],
) -> Result<Outcome, Failure> {
    let mut summary = summary.clone();
    summary.record_refused(&p.dataset.refused);
    let summary = &summary;
    let items = outcome
        .rows
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;
    let receipt = Receipt {
        format: receipt::RECEIPT_FORMAT.into(),
        suite: suite.into(),
        created_unix: receipt::now_unix(),
        dataset: DatasetInfo::of(&p.dataset),
        model: ModelInfo::of(&p.decider.engine),
        dgem: VersionInfo::current(),
        seed: args.seed,
        settings,
        run: RunInfo {
            workers: args.workers,
            resumed: outcome.resumed,
            ran: outcome.ran,
            elapsed_s: outcome.elapsed_s,
            decisions_per_s: summary
                .metrics
                .get("decisions_per_s")
                .copied()
                .unwrap_or(0.0),
            failed: outcome.failed.clone(),
        },
        metrics: summary.metrics.clone(),
        breakdown: summary.breakdown.clone(),
        items,
        shard: p.shard.map(|sh| ShardPlan {
            index: sh.index,
            count: sh.count,
            rows: p
                .dataset
                .rows
                .iter()
                .map(|(line, r)| (r.id().to_owned(), *line))
                .collect(),
        }),
    };
    if !outcome.failed.is_empty() {
        eprintln!(
            "{} item(s) failed and are not scored (first: `{}`: {}); `--resume` runs them again",
            outcome.failed.len(),
            outcome.failed[0].id,
            outcome.failed[0].error
        );
    }
    if let Some(out) = &args.out {
        receipt.write(out).map_err(internal)?;
        // With failed items the partial file stays, so `--resume` runs only them.
        if outcome.failed.is_empty() {
            let _ = std::fs::remove_file(runner::partial_path(out));
        }
        eprintln!("receipt written to {}", out.display());
    }
    let gates = print_and_gate(
        p.format,
        summary,
        &p.gates,
        headline,
        args.csv_dir.as_deref(),
    )?;
    let out = with_refused(gates, p.dataset.refused.len(), args.allow_refused);
    if out == Outcome::Refused {
        report_refused(p.format, &p.dataset.refused);
    }
    Ok(out)
}

/// Say on stderr (and as a GitHub annotation) that rows were refused.
fn report_refused(format: Format, refused: &[Refused]) {
    let Some(first) = refused.first() else { return };
    let msg = format!(
        "{} dataset row(s) refused and not run (first: line {}, `{}`: {}); the report lists them; pass `--allow-refused` to accept the run without them",
        refused.len(),
        first.line,
        first.label(),
        first.reason
    );
    if format == Format::Github {
        println!("::error title=dgem refused rows::{msg}");
    }
    eprintln!("error: {msg}");
}

/// Decisions per second of the last session.
pub fn decisions_per_s<R>(o: &RunOutcome<R>, decisions_per_item: f64) -> f64 {
    if o.elapsed_s > 0.0 {
        o.ran as f64 * decisions_per_item / o.elapsed_s
    } else {
        0.0
    }
}

/// Print the report in `format` (and write its tables to `csv_dir`, one CSV
/// file each) and check gates, saying on stderr how each came out (`gate
/// passed:`, `gate skipped:` for a metric of a group with no slots, `gate
/// failed:`).
pub fn print_and_gate(
    format: Format,
    s: &Summary,
    gates: &[Gate],
    headline: &[&str],
    csv_dir: Option<&Path>,
) -> Result<Outcome, Failure> {
    if let Some(dir) = csv_dir {
        let written = report::write_csv_tables(dir, &s.tables).map_err(user)?;
        eprintln!(
            "{} table(s) written as CSV to {}",
            written.len(),
            dir.display()
        );
    }
    print!(
        "{}",
        report::render(format, &s.tables, &s.metrics, &s.breakdown, headline)
    );
    let mut failed = false;
    for r in report::evaluate_gates(gates, &s.metrics) {
        let (word, level) = match &r {
            GateResult::Passed(_) => ("passed", None),
            GateResult::Skipped(_) => ("skipped", Some("notice")),
            GateResult::Failed(_) => ("failed", Some("error")),
        };
        failed |= matches!(r, GateResult::Failed(_));
        if let (Format::Github, Some(level)) = (format, level) {
            println!("::{level} title=dgem gate::{}", r.message());
        }
        eprintln!("gate {word}: {}", r.message());
    }
    Ok(if failed {
        Outcome::GateFailed
    } else {
        Outcome::Pass
    })
}

const BENCH_DATASET: &str = "data/eval_dataset.jsonl";

fn run_bench_items(
    args: &RunArgs,
    suite: &str,
    p: &Prepared<BenchRow>,
    settings: &Value,
) -> Result<RunOutcome<suites::bench::BenchItem>, Failure> {
    let path = p.dataset.path.clone();
    let d = p.decider.clone();
    execute(args, suite, p, settings, move |line, row| {
        let (d, path) = (d.clone(), path.clone());
        async move { suites::bench::run_item(&d, &path, line, row).await }
    })
}

/// Run `dgem bench`.
pub fn run(args: BenchArgs) -> Result<Outcome, Failure> {
    let a = &args.run;
    let p = prepare::<BenchRow>(a, BENCH_DATASET, false)?;
    let settings = settings(a, args.calibrate.settings());
    let mut outcome = run_bench_items(a, "bench", &p, &settings)?;
    if args.calibrate == RunCalibration::Batch {
        report_applied(dgem_bench::batch::rescore::bench_items(&mut outcome.rows));
    }
    let s = suites::bench::summarize(&outcome.rows, decisions_per_s(&outcome, 1.0));
    finish(
        a,
        "bench",
        &p,
        settings,
        &outcome,
        &s,
        &["item_accuracy", "slot_accuracy", "latency_p50_ms"],
    )
}

/// Read a template shipped under `templates/bench/`.
pub fn bench_template(name: &str) -> Result<String, Failure> {
    let path = Path::new("templates")
        .join("bench")
        .join(format!("{name}.json.tmpl"));
    std::fs::read_to_string(&path)
        .with_context(|| {
            format!(
                "cannot read {} (run dgem from the repository root)",
                path.display()
            )
        })
        .map_err(user)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    use super::*;

    /// Regression (issue 16): the ETA jumped, taken from the whole run's
    /// average; it is now the rate of the last items only.
    #[test]
    fn the_eta_follows_the_recent_rate_not_the_run_average() {
        let t0 = Instant::now();
        // A slow first item (60 s, the model load), then one item a second.
        let mut w: VecDeque<Instant> = VecDeque::new();
        w.push_back(t0);
        for i in 0..ETA_WINDOW {
            w.push_back(t0 + Duration::from_secs(60 + i as u64));
        }
        while w.len() > ETA_WINDOW {
            w.pop_front();
        }
        let eta = eta_from_window(&w, 30).expect("eta");
        assert_eq!(eta.as_secs_f64().round(), 30.0);
        assert!(eta_from_window(&VecDeque::from([t0]), 5).is_none());
        assert!(eta_from_window(&VecDeque::new(), 5).is_none());
    }

    /// Regression: a run with refused rows exited 0. Refused rows exit 1
    /// (before a failed gate's 3) unless `--allow-refused`.
    #[test]
    fn refused_rows_exit_1_unless_allowed() {
        use Outcome::{GateFailed, Pass, Refused};
        assert_eq!(with_refused(Pass, 2, false), Refused);
        assert_eq!(with_refused(GateFailed, 1, false), Refused);
        assert_eq!(with_refused(Pass, 2, true), Pass);
        assert_eq!(with_refused(GateFailed, 2, true), GateFailed);
        assert_eq!(with_refused(Pass, 0, false), Pass);
        assert_eq!(exit(Ok(Refused)), ExitCode::from(1));
        assert_eq!(exit(Ok(GateFailed)), ExitCode::from(3));
        assert_eq!(exit(Ok(Pass)), ExitCode::SUCCESS);
    }
}
