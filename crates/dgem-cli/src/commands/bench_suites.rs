//! `dgem bench-intents`, `bench-rerank`, `bench-permutation` and `bench-compare`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use dgem_bench::receipt::Receipt;
use dgem_bench::report::{Format, Gate};
use dgem_bench::suites::{
    self, intents::IntentRow, permutation::PermutationRow, rerank::RerankRow,
};
use serde_json::json;

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
    let st = settings(a, json!({"shifts": "cyclic, one per option"}));
    let d = p.decider.clone();
    let outcome = execute(a, "permutation", &p, &st, move |_, row| {
        let (d, t) = (d.clone(), template.clone());
        async move { suites::permutation::run_item(&d, &t, row).await }
    })?;
    let per = outcome
        .rows
        .iter()
        .map(|i| i.shifts.len() as f64)
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
    print_and_gate(format, &s, &gates, &["mcnemar_p"])
}
