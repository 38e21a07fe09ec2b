//! `dgem calibrate`: fit a post-hoc temperature per question type on labelled
//! rows (the `dgem bench` row format) with k-fold cross-validation, print the
//! held-out calibration before and after, and write the calibration file that
//! `decide`/`serve` load. The fitting lives in `dgem_bench::calibrate`; this
//! module parses arguments, runs the rows through the shared bench runner
//! (`--receipt` keeps a partial file, so a killed run continues with
//! `--resume`) and writes the outputs.
//!
//! Exit codes: 0 ok, 1 user error (bad input, or no type could be fitted),
//! 2 engine error.

use std::path::PathBuf;

use clap::Args;
use dgem_bench::calibrate::{
    self, report, svg, CalibrateItem, FitOptions, DEFAULT_BOOTSTRAP_SEED, DEFAULT_FOLDS,
    DEFAULT_RESAMPLES, SUITE,
};
use dgem_bench::receipt::{self, ModelInfo, Receipt};
use dgem_bench::report::{self as bench_report, Format};
use dgem_bench::suites::bench::BenchRow;
use dgem_core::schema::QuestionKind;
use serde_json::json;

use crate::commands::bench::{decisions_per_s, execute, finish, prepare, settings, RunArgs};
use crate::failure::{internal, user, Failure};
use crate::setup::ModelArgs;

/// Arguments of `dgem calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Labelled rows (JSON Lines, the `dgem bench` format:
    /// `{id, template, variables, expected, …}`).
    #[arg(
        short = 'd',
        long = "dataset",
        env = "DGEM_CALIBRATE_DATASET",
        required_unless_present = "from_receipt"
    )]
    pub dataset: Option<PathBuf>,
    /// Cross-validation folds (2–100; default 5). A row's fold is a hash of its id.
    #[arg(
        short = 'k',
        long = "folds",
        env = "DGEM_CALIBRATE_FOLDS",
        conflicts_with = "in_sample"
    )]
    pub folds: Option<usize>,
    /// Fit and score on the same rows (no cross-validation); the figures are
    /// labelled in-sample and are optimistic.
    #[arg(long, env = "DGEM_CALIBRATE_IN_SAMPLE")]
    pub in_sample: bool,
    /// Write the calibration file here.
    #[arg(
        short = 'o',
        long = "out",
        env = "DGEM_CALIBRATE_OUT",
        default_value = "calibration.json"
    )]
    pub out: PathBuf,
    /// Write the run's JSON receipt here (every read, for `--from-receipt`); rows
    /// also go to `<receipt>.partial` as they finish.
    #[arg(long, env = "DGEM_CALIBRATE_RECEIPT")]
    pub receipt: Option<PathBuf>,
    /// Continue a killed run from `<receipt>.partial` (needs `--receipt`).
    #[arg(long, env = "DGEM_CALIBRATE_RESUME")]
    pub resume: bool,
    /// Refit from a `dgem calibrate` receipt instead of running the model.
    /// Repeatable (or comma-separated in the variable): the rows of every
    /// receipt are fitted together, so runs over several datasets make one
    /// fit; they must come from one model (same sha256) and share no row id.
    #[arg(long, env = "DGEM_CALIBRATE_FROM_RECEIPT", conflicts_with_all = ["dataset", "receipt", "resume"], action = clap::ArgAction::Append, value_delimiter = ',')]
    pub from_receipt: Vec<PathBuf>,
    /// Write reliability diagrams before/after per type here (SVG).
    #[arg(long, env = "DGEM_CALIBRATE_SVG")]
    pub svg: Option<PathBuf>,
    /// Bootstrap resamples behind each 95% interval.
    #[arg(long, env = "DGEM_CALIBRATE_BOOTSTRAP", default_value_t = DEFAULT_RESAMPLES)]
    pub bootstrap: usize,
    /// Seed of the bootstrap.
    #[arg(long, env = "DGEM_CALIBRATE_BOOTSTRAP_SEED", default_value_t = DEFAULT_BOOTSTRAP_SEED)]
    pub bootstrap_seed: i64,
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
    /// refusing it (listing it) and fitting on the rest.
    #[arg(long, env = "DGEM_BENCH_STRICT")]
    pub strict: bool,
    /// Reads per decision: a count (1–32) or `auto`. Overrides the templates
    /// (and so enters the policy hash).
    #[arg(long, env = "DGEM_BENCH_SAMPLES")]
    pub samples: Option<String>,
    /// Prompt layout override: `document_first` or `schema_first` (enters the policy hash).
    #[arg(long, env = "DGEM_BENCH_LAYOUT")]
    pub layout: Option<String>,
    /// Base seed of the decisions.
    #[arg(long, env = "DGEM_BENCH_SEED", default_value_t = 42)]
    pub seed: i64,
    /// Report format: table, json, csv, md or github.
    #[arg(long, env = "DGEM_BENCH_FORMAT", default_value = "table")]
    pub format: String,
    #[command(flatten)]
    pub model: ModelArgs,
}

impl CalibrateArgs {
    /// The bench options these arguments stand for (the receipt is `--out` there).
    fn run_args(&self) -> RunArgs {
        RunArgs {
            dataset: self.dataset.clone(),
            out: self.receipt.clone(),
            workers: self.workers,
            limit: self.limit,
            offset: self.offset,
            strict: self.strict,
            // `dgem calibrate` fits on the rows it could map; the refused
            // ones are listed on stderr, in the report and in the receipt.
            allow_refused: true,
            resume: self.resume,
            format: self.format.clone(),
            csv_dir: None,
            fail_under: Vec::new(),
            samples: self.samples.clone(),
            layout: self.layout.clone(),
            seed: self.seed,
            shard: None,
            never_shard: true,
            // A fit reads the probabilities before any shipped temperature,
            // so a new fit is not fitted on top of an old one.
            model: ModelArgs {
                model_calibration: false,
                ..self.model.clone()
            },
        }
    }
}

const HEADLINE: &[&str] = &[
    "boolean.temperature",
    "choice.temperature",
    "score.temperature",
];

/// The rows of a `dgem calibrate` receipt and the model that read them.
fn from_receipt(path: &std::path::Path) -> Result<(Vec<CalibrateItem>, ModelInfo), Failure> {
    let r = Receipt::read(path).map_err(user)?;
    if r.suite != SUITE {
        return Err(user(anyhow::anyhow!(
            "`--from-receipt` must be a `dgem calibrate` receipt (suite `{SUITE}`). Given: `{}` with suite `{}`",
            path.display(),
            r.suite
        )));
    }
    let items = r
        .items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value::<CalibrateItem>(v.clone()).map_err(|e| {
                user(anyhow::anyhow!(
                    "`--from-receipt` {}: `items[{i}]` is not a calibrate row: {e}",
                    path.display()
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((items, r.model))
}

/// The rows of several `dgem calibrate` receipts, fitted together, and the
/// model that read them.
///
/// # Errors
/// A user error when a receipt cannot be read (see [`from_receipt`]), when
/// two receipts were read by different models (their sha256 differ: one
/// temperature cannot describe two models), or when a row id appears in two
/// receipts (the fold of a row is a hash of its id, so a repeated id would be
/// fitted and scored twice).
fn from_receipts(paths: &[PathBuf]) -> Result<(Vec<CalibrateItem>, ModelInfo), Failure> {
    let mut items: Vec<CalibrateItem> = Vec::new();
    let mut model: Option<ModelInfo> = None;
    let mut seen: std::collections::HashMap<String, PathBuf> = std::collections::HashMap::new();
    for path in paths {
        let (rows, m) = from_receipt(path)?;
        if let Some(first) = &model {
            if first.sha256 != m.sha256 {
                return Err(user(anyhow::anyhow!(
                    "`--from-receipt` receipts must come from one model: {} was read by {} (sha256 {}), the first by {} (sha256 {})",
                    path.display(),
                    m.id,
                    m.sha256.as_deref().unwrap_or("unknown"),
                    first.id,
                    first.sha256.as_deref().unwrap_or("unknown")
                )));
            }
        }
        for row in &rows {
            let id = row.item.id.clone();
            if let Some(other) = seen.insert(id.clone(), path.clone()) {
                return Err(user(anyhow::anyhow!(
                    "`--from-receipt`: row id `{id}` is in both {} and {}; a row may be fitted once",
                    other.display(),
                    path.display()
                )));
            }
        }
        items.extend(rows);
        model.get_or_insert(m);
    }
    let model = model.ok_or_else(|| user(anyhow::anyhow!("`--from-receipt` names no receipt")))?;
    Ok((items, model))
}

/// `--out` can be written: its folder exists and it is not a folder itself.
/// Checked before any row is read (a black-box run read every row, then
/// failed to write the file).
fn check_out(out: &std::path::Path) -> Result<(), Failure> {
    let folder = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if out.is_dir() {
        return Err(user(anyhow::anyhow!(
            "`--out` {} is a folder; give the path of the calibration file to write",
            out.display()
        )));
    }
    if !folder.is_dir() {
        return Err(user(anyhow::anyhow!(
            "`--out` {}: the folder {} does not exist",
            out.display(),
            folder.display()
        )));
    }
    Ok(())
}

/// Run `dgem calibrate`.
pub fn run(args: CalibrateArgs) -> Result<(), Failure> {
    let options = FitOptions::new(
        args.folds.unwrap_or(DEFAULT_FOLDS),
        args.in_sample,
        args.bootstrap,
        args.bootstrap_seed,
    )
    .map_err(user)?;
    let format: Format = args.format.parse().map_err(user)?;
    if args.resume && args.receipt.is_none() {
        return Err(user(anyhow::anyhow!(
            "`--resume` needs `--receipt` (the run's rows are kept in `<receipt>.partial`)"
        )));
    }
    check_out(&args.out)?;
    let (items, model, live) = match args.from_receipt.as_slice() {
        [] => {
            let a = args.run_args();
            let p = prepare::<BenchRow>(&a, "", false)?;
            let s = settings(&a, json!({ "suite": SUITE }));
            let path = p.dataset.path.clone();
            let d = p.decider.clone();
            let outcome = execute(&a, SUITE, &p, &s, move |line, row| {
                let (d, path) = (d.clone(), path.clone());
                async move { calibrate::run_row(&d, &path, line, row).await }
            })?;
            let model = ModelInfo::of(&p.decider.engine);
            (outcome.rows.clone(), model, Some((a, p, s, outcome)))
        }
        paths => {
            let (items, model) = from_receipts(paths)?;
            (items, model, None)
        }
    };
    let labelled = calibrate::collect(&items);
    for s in labelled.skipped.iter().take(5) {
        eprintln!("warning: left out of the fit: {s}");
    }
    if labelled.skipped.len() > 5 {
        eprintln!(
            "warning: … and {} more left out",
            labelled.skipped.len() - 5
        );
    }
    let fitted = calibrate::calibrate(&labelled, options);
    let file = calibrate::calibration_file(&model, &labelled, &fitted, receipt::now_unix());
    let mut summary = report::summarize(&fitted, &file);
    match &live {
        Some((a, p, s, outcome)) => {
            summary
                .metrics
                .insert("decisions_per_s".into(), decisions_per_s(outcome, 1.0));
            finish(a, SUITE, p, s.clone(), outcome, &summary, HEADLINE)?;
        }
        None => print!(
            "{}",
            bench_report::render(
                format,
                &summary.tables,
                &summary.metrics,
                &summary.breakdown,
                HEADLINE
            )
        ),
    }
    let reasons = QuestionKind::SLOT_KINDS
        .iter()
        .filter_map(|k| {
            let f = &fitted.of(*k).figures;
            f.unset_reason
                .as_ref()
                .map(|r| format!("{}: {r}", k.as_str()))
        })
        .collect::<Vec<_>>();
    if !fitted.scored() {
        let keep = match &args.receipt {
            Some(r) => format!(
                "; the reads are kept in `{}`: refit with `--from-receipt {}`",
                r.display(),
                r.display()
            ),
            None => String::new(),
        };
        return Err(user(anyhow::anyhow!(
            "no question type could be fitted, so no calibration file was written ({}){keep}",
            reasons.join("; ")
        )));
    }
    for r in &reasons {
        eprintln!("note: left unset (no temperature applied): {r}");
    }
    file.save(&args.out).map_err(internal)?;
    eprintln!("calibration written to {}", args.out.display());
    if let Some(path) = &args.svg {
        let title = format!("Temperature scaling — {} ({})", model.id, model.backend);
        svg::before_after_svg(&fitted, &title, path).map_err(internal)?;
        eprintln!("reliability diagrams written to {}", path.display());
    }
    Ok(())
}
