//! `dgem bench-intents`, `bench-rerank`, `bench-permutation` and `bench-compare`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use dgem_bench::receipt::Receipt;
use dgem_bench::report::{Format, Gate};
use dgem_bench::suites::{
    self, intents::IntentRow, permutation::PermutationRow, rerank::RerankRow,
};
use serde_json::{json, Value};

use crate::commands::bench::{
    bench_template, execute, finish, prepare, print_and_gate, settings, Outcome, RunArgs,
};
use crate::failure::{user, Failure};

/// Arguments of `dgem bench-intents`.
#[derive(Debug, Args)]
pub struct IntentsArgs {
    #[command(flatten)]
    pub run: RunArgs,
}

/// Arguments of `dgem bench-rerank`.
#[derive(Debug, Args)]
pub struct RerankArgs {
    #[command(flatten)]
    pub run: RunArgs,
}

/// Arguments of `dgem bench-permutation`.
#[derive(Debug, Args)]
pub struct PermutationArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Before an item's shifts, decide its question (options in their
    /// canonical order) on the states of the N items after it among the
    /// items this run reads (wrapping around), as a policy's earlier
    /// decisions. Under `--order-debias prior` a question learns its prior
    /// from its first 3 distinct states and reads one listing after them, so
    /// `--learn 3` times one-read decisions; 0 (the default) leaves every
    /// shift a learning decision.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub learn: usize,
}

/// Arguments of `dgem bench-compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline receipt.
    pub a: PathBuf,
    /// The receipt to compare against the baseline.
    pub b: PathBuf,
    /// Report format: table, json, csv, md or github.
    #[arg(long, env = "DGEM_BENCH_FORMAT", default_value = "table")]
    pub format: String,
    /// Also write each report table to its own CSV file in this folder.
    #[arg(long = "csv-dir", env = "DGEM_BENCH_CSV_DIR", value_name = "DIR")]
    pub csv_dir: Option<PathBuf>,
    /// Exit 3 unless METRIC meets VALUE (e.g. `mcnemar_p=0.05`).
    #[arg(
        long = "fail-under",
        env = "DGEM_BENCH_FAIL_UNDER",
        value_delimiter = ','
    )]
    pub fail_under: Vec<String>,
}

/// Run `dgem bench-intents`.
pub fn run_intents(args: IntentsArgs) -> Result<Outcome, Failure> {
    let a = &args.run;
    let template = Arc::new(bench_template("intent_select")?);
    let p = prepare::<IntentRow>(a, "data/intents/banking77_eval.jsonl", true)?;
    let st = settings(
        a,
        json!({"bracket_size": suites::intents::BRACKET_SIZE, "finalists_per_bracket": suites::intents::FINALISTS_PER_BRACKET}),
    );
    let d = p.decider.clone();
    let outcome = execute(a, "intents", &p, &st, move |_, row| {
        let (d, t) = (d.clone(), template.clone());
        async move { suites::intents::run_item(&d, &t, row).await }
    })?;
    let per = outcome.rows.iter().map(|i| i.decisions as f64).sum::<f64>()
        / outcome.rows.len().max(1) as f64;
    let s = suites::intents::summarize(
        &outcome.rows,
        crate::commands::bench::decisions_per_s(&outcome, per),
    );
    finish(
        a,
        "intents",
        &p,
        st,
        &outcome,
        &s,
        &["intent_accuracy", "ece_10bin"],
    )
}

/// Run `dgem bench-rerank`.
pub fn run_rerank(args: RerankArgs) -> Result<Outcome, Failure> {
    let a = &args.run;
    let template = Arc::new(bench_template("rerank_listwise")?);
    let p = prepare::<RerankRow>(a, "data/rerank_suite.jsonl", true)?;
    let st = settings(
        a,
        json!({"score": "expectation over grades 0-3", "quarantine": -1.0}),
    );
    let d = p.decider.clone();
    let outcome = execute(a, "rerank", &p, &st, move |_, row| {
        let (d, t) = (d.clone(), template.clone());
        async move { suites::rerank::run_item(&d, &t, row).await }
    })?;
    let per = outcome.rows.iter().map(|i| i.decisions as f64).sum::<f64>()
        / outcome.rows.len().max(1) as f64;
    let s = suites::rerank::summarize(
        &outcome.rows,
        crate::commands::bench::decisions_per_s(&outcome, per),
    );
    finish(
        a,
        "rerank",
        &p,
        st,
        &outcome,
        &s,
        &["ndcg10", "p_mrr", "tie_rate"],
    )
}

/// Run `dgem bench-permutation`.
pub fn run_permutation(args: PermutationArgs) -> Result<Outcome, Failure> {
    let a = &args.run;
    let template = Arc::new(bench_template("option_select")?);
    let p = prepare::<PermutationRow>(a, "data/permutation_suite.jsonl", true)?;
    if let (true, Some(shard)) = (args.learn > 0, &p.shard) {
        return Err(user(anyhow::anyhow!(
            "`--learn` cannot be combined with `--shard`: an item's learning states would depend on the split. Given: --learn {} --shard {shard}",
            args.learn
        )));
    }
    let learn = learning_states(&p.dataset.rows, args.learn)?;
    // `listings`: each shift records the listings it read (receipts and
    // partial runs from before lack it, and are not resumed into this one).
    let mut st_extra = json!({"shifts": "cyclic, one per option", "listings": "recorded"});
    if args.learn > 0 {
        st_extra["learn"] = json!(args.learn);
    }
    let st = settings(a, st_extra);
    let d = p.decider.clone();
    let learn = Arc::new(learn);
    let outcome = execute(a, "permutation", &p, &st, move |_, row| {
        let (d, t, learn) = (d.clone(), template.clone(), learn.clone());
        async move {
            let states = learn.get(&row.id).cloned().unwrap_or_default();
            suites::permutation::run_item(&d, &t, row, &states).await
        }
    })?;
    // Decisions per item: its shifts and its `--learn` decisions.
    let per = outcome
        .rows
        .iter()
        .map(|i| (i.shifts.len() + i.learned_from) as f64)
        .sum::<f64>()
        / outcome.rows.len().max(1) as f64;
    let s = suites::permutation::summarize(
        &outcome.rows,
        crate::commands::bench::decisions_per_s(&outcome, per),
    );
    finish(
        a,
        "permutation",
        &p,
        st,
        &outcome,
        &s,
        &["flip_rate", "mean_max_tvd", "canonical_accuracy"],
    )
}

/// `--learn`: for each row's id, the states of the `n` rows after it among
/// `rows` (wrapping around).
///
/// # Errors
/// A user error when `n` is not below the number of rows: a question must
/// learn from states other than its own.
fn learning_states(
    rows: &[(usize, PermutationRow)],
    n: usize,
) -> Result<std::collections::HashMap<String, Vec<Value>>, Failure> {
    if n > 0 && n >= rows.len() {
        return Err(user(anyhow::anyhow!(
            "`--learn` must be below the number of items this run reads ({}), so that every item learns from other items' states. Given: {n}",
            rows.len()
        )));
    }
    Ok(rows
        .iter()
        .enumerate()
        .map(|(i, (_, row))| {
            let states = (1..=n)
                .map(|k| rows[(i + k) % rows.len()].1.state.clone())
                .collect();
            (row.id.clone(), states)
        })
        .collect())
}

/// Arguments of `dgem bench-jev`.
#[derive(Debug, Args)]
pub struct JevArgs {
    /// Where the model runs, for the speed score: `cpu` or `gpu` (self-hosted:
    /// latency is charged 2t + 0.15 s) or `api`.
    #[arg(
        long = "endpoint-kind",
        env = "DGEM_JEV_ENDPOINT_KIND",
        default_value = "cpu"
    )]
    pub endpoint_kind: String,
    /// USD per 1,000 decisions, for the cost score (default: dgem's $0.0260).
    #[arg(long = "usd-per-1k", env = "DGEM_JEV_USD_PER_1K")]
    pub usd_per_1k: Option<f64>,
    /// `batch`: score the run after batch calibration (the mean
    /// log-probability over the run of each question type and label set
    /// removed; see `dgem_bench::batch::rescore`). Default `none`.
    #[arg(long = "calibrate", value_enum, default_value_t = crate::commands::bench::RunCalibration::None)]
    pub calibrate: crate::commands::bench::RunCalibration,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Run `dgem bench-jev`.
pub fn run_jev(args: JevArgs) -> Result<Outcome, Failure> {
    let a = &args.run;
    let self_hosted = match args.endpoint_kind.as_str() {
        "cpu" | "gpu" => true,
        "api" => false,
        other => {
            return Err(user(anyhow::anyhow!(
                "`--endpoint-kind` must be one of [cpu, gpu, api]. Given: `{other}`"
            )))
        }
    };
    let usd_per_1k = args
        .usd_per_1k
        .unwrap_or(dgem_bench::metrics::jevbench::DGEM_USD_PER_1K);
    if !(usd_per_1k.is_finite() && usd_per_1k >= 0.0) {
        return Err(user(anyhow::anyhow!(
            "`--usd-per-1k` must be a non-negative number. Given: `{usd_per_1k}`"
        )));
    }
    let scoring = suites::jev_run::JevScoring {
        self_hosted,
        usd_per_1k,
    };
    // Labels such as `refund_full`/`refund_partial` share their first token:
    // letters tell them apart.
    let p = prepare::<suites::jev::JevRow>(a, "data/jevbench_style.jsonl", true)?;
    let mut extra = json!({"scoring": scoring, "endpoint_kind": args.endpoint_kind});
    if let (Some(m), Value::Object(c)) = (extra.as_object_mut(), args.calibrate.settings()) {
        m.extend(c);
    }
    let st = settings(a, extra);
    let d = p.decider.clone();
    let mut outcome = execute(a, "jev", &p, &st, move |_, row| {
        let d = d.clone();
        async move { suites::jev_run::run_item(&d, row).await }
    })?;
    if args.calibrate == crate::commands::bench::RunCalibration::Batch {
        crate::commands::bench::report_applied(dgem_bench::batch::rescore::jev_items(
            &mut outcome.rows,
        ));
    }
    let s = suites::jev_run::summarize(
        &outcome.rows,
        crate::commands::bench::decisions_per_s(&outcome, 1.0),
        scoring,
    );
    finish(a, "jev", &p, st, &outcome, &s, headline("jev"))
}

/// Arguments of `dgem bench-merge`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  dgem bench --shard 0/2 -o s0.json & dgem bench --shard 1/2 -o s1.json; wait\n  dgem bench-merge s0.json s1.json -o merged.json"
)]
pub struct MergeArgs {
    /// The shards' receipts (written by a `bench*` command with `--shard I/N`), one per shard, in any order.
    #[arg(required = true, value_name = "RECEIPT")]
    pub receipts: Vec<PathBuf>,
    /// Write the merged receipt here.
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
    /// Report format: table, json, csv, md or github.
    #[arg(long, env = "DGEM_BENCH_FORMAT", default_value = "table")]
    pub format: String,
    /// Also write each report table to its own CSV file in this folder.
    #[arg(long = "csv-dir", env = "DGEM_BENCH_CSV_DIR", value_name = "DIR")]
    pub csv_dir: Option<PathBuf>,
    /// Exit 3 unless METRIC meets VALUE (repeatable), as on the bench commands.
    #[arg(
        long = "fail-under",
        env = "DGEM_BENCH_FAIL_UNDER",
        value_delimiter = ','
    )]
    pub fail_under: Vec<String>,
}

/// The metrics a suite's report leads with.
fn headline(suite: &str) -> &'static [&'static str] {
    match suite {
        "bench" => &["item_accuracy", "slot_accuracy", "latency_p50_ms"],
        "calibration" => &["accuracy", "ece_10bin", "brier"],
        "intents" => &["intent_accuracy", "ece_10bin"],
        "rerank" => &["ndcg10", "p_mrr", "tie_rate"],
        "permutation" => &["flip_rate", "mean_max_tvd", "canonical_accuracy"],
        "jev" => &["chance_corrected_accuracy", "ece_10bin", "composite_v14"],
        _ => &[],
    }
}

/// Run `dgem bench-merge`: join shard receipts into one whose rows and
/// metrics are a single-process run's (see `dgem_bench::merge`).
pub fn run_merge(args: MergeArgs) -> Result<Outcome, Failure> {
    let format: Format = args.format.parse().map_err(user)?;
    let gates = args
        .fail_under
        .iter()
        .map(|g| g.parse::<Gate>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(user)?;
    let shards = args
        .receipts
        .iter()
        .map(|p| Ok((p.display().to_string(), Receipt::read(p).map_err(user)?)))
        .collect::<Result<Vec<_>, Failure>>()?;
    let (merged, summary) = dgem_bench::merge::merge(&shards).map_err(user)?;
    if let Some(out) = &args.out {
        merged.write(out).map_err(crate::failure::internal)?;
        eprintln!(
            "merged {} shard(s), {} item(s): receipt written to {}",
            shards.len(),
            merged.items.len(),
            out.display()
        );
    }
    print_and_gate(
        format,
        &summary,
        &gates,
        headline(&merged.suite),
        args.csv_dir.as_deref(),
    )
}

/// Run `dgem bench-compare`.
pub fn run_compare(args: CompareArgs) -> Result<Outcome, Failure> {
    let format: Format = args.format.parse().map_err(user)?;
    let gates = args
        .fail_under
        .iter()
        .map(|g| g.parse::<Gate>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(user)?;
    let a = Receipt::read(&args.a).map_err(user)?;
    let b = Receipt::read(&args.b).map_err(user)?;
    let s = suites::compare::compare(&a, &b);
    if let Some(w) = s.breakdown.get("warnings").and_then(|w| w.as_array()) {
        for x in w {
            eprintln!("warning: {}", x.as_str().unwrap_or_default());
        }
    }
    print_and_gate(format, &s, &gates, &["mcnemar_p"], args.csv_dir.as_deref())
}
