//! `dgem bench -d FILE.jsonl`: run a labelled dataset through the engine and
//! report per-slot accuracy, 10-bin ECE, mean hesitation and latency.
//!
//! Rows are `{id, domain, template, variables, expected, tier}` (reference.md §8.2).
//! A malformed row is reported with its line number and skipped, or fails the
//! run with `--strict`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use dgem_core::metrics::{accuracy, ece, mean_hesitation, quantile, Scored};
use dgem_core::schema::QuestionKind;
use dgem_engine::DecideRequest;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::commands::decide::{resolve_template, valid_schema};
use crate::failure::{engine, internal, user, Failure};
use crate::setup::{self, ModelArgs};

/// Arguments of `dgem bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Dataset (JSON Lines).
    #[arg(short = 'd', long = "dataset")]
    pub dataset: PathBuf,
    /// Stop at the first malformed row instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    /// Only the first N rows.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Write a JSON receipt (settings, every item's answers, summary) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reads per decision (count or `auto`); default: the template's.
    #[arg(long)]
    pub samples: Option<String>,
    /// Prompt layout override.
    #[arg(long)]
    pub layout: Option<String>,
    /// Base seed.
    #[arg(long, default_value_t = 42)]
    pub seed: i64,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Debug, Deserialize)]
struct Row {
    id: String,
    #[serde(default)]
    domain: String,
    template: PathBuf,
    #[serde(default)]
    variables: Map<String, Value>,
    expected: BTreeMap<String, String>,
    #[serde(default)]
    tier: String,
}

/// Run `dgem bench`.
pub fn run(args: BenchArgs) -> Result<(), Failure> {
    let text = std::fs::read_to_string(&args.dataset).map_err(|e| {
        user(anyhow::anyhow!(
            "cannot read dataset {}: {e}",
            args.dataset.display()
        ))
    })?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Row>(line) {
            Ok(r) => rows.push(r),
            Err(e) if args.strict => {
                return Err(user(anyhow::anyhow!(
                    "{}:{}: malformed row: {e}",
                    args.dataset.display(),
                    i + 1
                )))
            }
            Err(e) => eprintln!(
                "warning: {}:{}: malformed row skipped: {e}",
                args.dataset.display(),
                i + 1
            ),
        }
    }
    if let Some(n) = args.limit {
        rows.truncate(n);
    }
    let engine_ = setup::engine(&args.model)?;
    let rt = setup::runtime()?;
    let mut scored: BTreeMap<&'static str, Vec<Scored>> = BTreeMap::new();
    let mut latencies = Vec::new();
    let mut items = Vec::new();
    for row in &rows {
        let path = resolve_template(&row.template)?;
        let text = std::fs::read_to_string(&path).map_err(|e| {
            user(anyhow::anyhow!(
                "row `{}`: cannot read {}: {e}",
                row.id,
                path.display()
            ))
        })?;
        let name = path.display().to_string();
        let rendered = dgem_core::template::render(&name, &text, &row.variables).map_err(user)?;
        let payload = dgem_core::payload::parse_named_payload(&name, &rendered, &row.variables)
            .map_err(user)?;
        let schema = valid_schema(&payload, args.samples.as_deref(), args.layout.as_deref())?;
        let started = std::time::Instant::now();
        let d = rt
            .block_on(engine_.decide(DecideRequest {
                schema,
                state: payload.state.clone(),
                seed: args.seed,
            }))
            .map_err(engine)?;
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
        let mut item_answers = Map::new();
        for (qid, want) in &row.expected {
            let Some(Some(a)) = d.answers.get(qid) else {
                continue;
            };
            let got = a.answer_name();
            let s = Scored {
                confidence: a.aggregate.confidence,
                correct: got == want,
                hesitation: a.aggregate.normalized_entropy,
            };
            let kind = match a.question.kind {
                QuestionKind::Boolean => "boolean",
                QuestionKind::Choice => "choice",
                QuestionKind::Score => "score",
            };
            scored.entry(kind).or_default().push(s);
            scored.entry("all").or_default().push(s);
            item_answers.insert(
                qid.clone(),
                json!({"expected": want, "got": got, "confidence": s.confidence,
                "hesitation": s.hesitation, "probabilities": a.to_chat_json()["probabilities"]}),
            );
        }
        items.push(
            json!({"id": row.id, "domain": row.domain, "tier": row.tier, "answers": item_answers,
            "ms": latencies.last()}),
        );
        eprintln!(
            "{} done ({:.0} ms)",
            row.id,
            latencies.last().copied().unwrap_or(0.0)
        );
    }
    let mut summary = Map::new();
    println!(
        "{:<8} | {:>5} | {:>8} | {:>6} | {:>15}",
        "SLOTS", "N", "ACCURACY", "ECE", "MEAN HESITATION"
    );
    println!("{}", "-".repeat(56));
    for (kind, s) in &scored {
        println!(
            "{kind:<8} | {:>5} | {:>7.1}% | {:>6.3} | {:>15.3}",
            s.len(),
            accuracy(s) * 100.0,
            ece(s, 10),
            mean_hesitation(s)
        );
        summary.insert((*kind).to_owned(), json!({"n": s.len(), "accuracy": accuracy(s), "ece": ece(s, 10), "mean_hesitation": mean_hesitation(s)}));
    }
    println!(
        "latency per decision: p50 {:.0} ms, p90 {:.0} ms",
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.9)
    );
    let info = engine_.backend().info();
    println!(
        "model: {} ({}) — the small embedded model, not DiffusionGemma",
        info.model_id, info.engine
    );
    if let Some(out) = &args.out {
        let receipt = json!({
            "dataset": args.dataset, "model": info.model_id, "model_sha256": info.model_sha256,
            "engine": info.engine, "label_mode": engine_.label_mode().as_str(), "calibration": engine_.calibrates(),
            "seed": args.seed, "dgem_version": env!("CARGO_PKG_VERSION"),
            "latency_ms": {"p50": quantile(&latencies, 0.5), "p90": quantile(&latencies, 0.9)},
            "summary": summary, "items": items,
        });
        let text = serde_json::to_string_pretty(&receipt).map_err(internal)?;
        std::fs::write(out, text).map_err(internal)?;
    }
    Ok(())
}
