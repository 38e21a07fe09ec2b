//! The table `dgem bench-speed` prints and the receipt it writes: each
//! scenario's median, min and max, and its ratio to the scenario it names
//! (moved from `speed.rs` unchanged).

use dgem_bench::metrics::percentile;
use serde_json::{json, Value};

use super::SpeedArgs;
use crate::failure::{user, Failure};

/// Scenario names in print order; `ratio_to` names the scenario each one is
/// divided by within a round.
pub(super) const SCENARIOS: [(&str, &str, &str); 27] = [
    ("baseline", "llama.cpp prompt eval of the cold prompt", ""),
    ("cold", "cold decision, priors cached", "baseline"),
    ("warm", "same decision again (KV cached)", "baseline"),
    (
        "first_of_policy",
        "first decision of a new policy",
        "baseline",
    ),
    (
        "prior_cold",
        "cold decision, --order-debias prior",
        "baseline",
    ),
    (
        "prior_first_of_policy",
        "first decision of a new policy, prior",
        "prior_cold",
    ),
    (
        "new_tokens",
        "llama.cpp eval of the next row's new tokens",
        "",
    ),
    (
        "prior_schema_first_cached",
        "prior, schema_first, policy cached: new state",
        "new_tokens",
    ),
    (
        "prior_schema_first_from_disk",
        "the same, its prefix only on disk (new process)",
        "new_tokens",
    ),
    ("q1", "1 question, cold", "baseline"),
    ("q8", "8 questions, cold", "q1"),
    (
        "long_q1",
        "1 question, 2,000-character state, cold",
        "baseline",
    ),
    ("long_q12", "12 questions, the same state, cold", "long_q1"),
    (
        "long_q1_schema_first",
        "1 question, long state, schema_first, cold",
        "baseline",
    ),
    (
        "long_q12_schema_first",
        "12 questions, long state, schema_first, cold",
        "long_q1_schema_first",
    ),
    ("schema_first_cold", "schema_first, cold", "baseline"),
    (
        "schema_first_cached",
        "schema_first, policy cached",
        "schema_first_cold",
    ),
    (
        "schema_first_first_of_policy",
        "schema_first, first decision of a new policy",
        "schema_first_cold",
    ),
    (
        "contended_1",
        "cold decision, 1 busy process beside it",
        "cold",
    ),
    (
        "contended_all",
        "cold decision, a busy process per core",
        "cold",
    ),
    ("serial_16", "16 new states, 1 caller: ms per decision", ""),
    (
        "concurrent_16",
        "16 new states, 16 callers: ms per decision",
        "serial_16",
    ),
    ("overhead_1", "overhead outside the model, 1 caller", ""),
    ("overhead_16", "overhead outside the model, 16 callers", ""),
    (
        "overhead_new_state",
        "overhead outside the model, a state not seen",
        "",
    ),
    ("tokenize", "one encode of the cold prompt text", ""),
    (
        "tokenize_llama",
        "the same, one llama.cpp encode, no cache",
        "",
    ),
];

/// Median, min and max (the median interpolates between the middle two).
fn stats(v: &[f64]) -> (f64, f64, f64) {
    (percentile(v, 0.5), percentile(v, 0.0), percentile(v, 1.0))
}

/// Print and record a row computed from other rows, per round: its
/// `(name, what, ratio_to)`, the per-round ratios, the text after the ratio,
/// and a goal when the issue set one.
fn derived_row(
    summary: &mut serde_json::Map<String, Value>,
    (name, what, ratio_to): (&str, &str, &str),
    ratios: &[f64],
    of: &str,
    goal: Option<f64>,
) {
    let (m, lo, hi) = stats(ratios);
    println!(
        "{name:<28} {what:<46} {:>9} {:>9} {:>9}   {m:.2}× [{lo:.2}, {hi:.2}] {of}",
        "", "", ""
    );
    let mut row = json!({"what": what, "ratio_to": ratio_to,
                         "ratio": {"median": m, "min": lo, "max": hi}});
    if let Some(g) = goal {
        row["goal"] = json!(g);
    }
    summary.insert(name.to_owned(), row);
}

pub(super) fn report(
    times: &std::collections::BTreeMap<&str, Vec<f64>>,
    prompt_tokens: usize,
    (q1_tokens, q8_tokens): (usize, usize),
    threads: Option<usize>,
    args: &SpeedArgs,
) -> Result<(), Failure> {
    let threads = threads.unwrap_or_else(dgem_backend_llama::default_threads);
    println!(
        "dgem bench-speed: {} rounds, {threads} threads, cold prompt {prompt_tokens} tokens, q1 prompt {q1_tokens}, q8 prompt {q8_tokens}",
        args.rounds
    );
    println!(
        "{:<28} {:<46} {:>9} {:>9} {:>9}   {:<34}",
        "scenario", "what", "median ms", "min", "max", "ratio median [min, max]"
    );
    let mut summary = serde_json::Map::new();
    for (name, what, to) in SCENARIOS {
        let Some(v) = times.get(name) else { continue };
        let (med, min, max) = stats(v);
        let mut row =
            json!({"what": what, "median_ms": med, "min_ms": min, "max_ms": max, "ms": v});
        let ratio = times.get(to).map(|base| {
            let r: Vec<f64> = v.iter().zip(base).map(|(a, b)| a / b).collect();
            stats(&r)
        });
        let goal = match name {
            // A busy neighbour costs at most 2.5× idle.
            "contended_1" => Some(2.5),
            // One read: at most the full prompt's evaluation.
            "prior_cold" => Some(1.0),
            // A new policy, priors included, at most 2 cold decisions.
            "prior_first_of_policy" => Some(2.0),
            // A known policy costs its new tokens.
            "prior_schema_first_cached" | "prior_schema_first_from_disk" => Some(1.2),
            // Questions read apart share the state: 12 cost at most 3× one.
            "long_q12" => Some(3.0),
            _ => None,
        };
        if let Some(g) = goal {
            row["goal"] = json!(g);
        }
        let ratio_text = match ratio {
            Some((m, lo, hi)) => {
                row["ratio_to"] = json!(to);
                row["ratio"] = json!({"median": m, "min": lo, "max": hi});
                format!("{m:.2}× [{lo:.2}, {hi:.2}] of {to}")
            }
            None => String::new(),
        };
        println!("{name:<28} {what:<46} {med:>9.1} {min:>9.1} {max:>9.1}   {ratio_text}");
        summary.insert(name.to_owned(), row);
    }
    // 8 questions against 1 with the prompt lengths divided out: what the
    // extra slots cost beyond their longer policy text.
    if let (Some(q1), Some(q8)) = (times.get("q1"), times.get("q8")) {
        let per_token = (q8_tokens.max(1) as f64 / q1_tokens.max(1) as f64).recip();
        let r: Vec<f64> = q8.iter().zip(q1).map(|(a, b)| a / b * per_token).collect();
        derived_row(
            &mut summary,
            ("q8_per_token", "q8 / q1, each per prompt token", "q1"),
            &r,
            "of q1 per token",
            None,
        );
    }
    // Decisions per second at 16 callers as a ratio to one caller (issue
    // goal ≥ 1.5×): the serial time per decision over the concurrent one.
    if let (Some(one), Some(many)) = (times.get("serial_16"), times.get("concurrent_16")) {
        let r: Vec<f64> = one.iter().zip(many).map(|(a, b)| a / b).collect();
        derived_row(
            &mut summary,
            (
                "throughput_16",
                "decisions/s at 16 callers / at 1 caller",
                "serial_16",
            ),
            &r,
            "of 1 caller (goal ≥ 1.5×)",
            Some(1.5),
        );
    }
    if let Some(out) = &args.out {
        let doc = json!({
            "dgem": dgem_bench::receipt::VersionInfo::current(),
            "created_unix": dgem_bench::receipt::now_unix(),
            "model": args.model.model.as_ref().map_or_else(|| "default".to_owned(), |m| m.display().to_string()),
            "rounds": args.rounds,
            "threads": threads,
            "prompt_tokens": prompt_tokens,
            "q1_prompt_tokens": q1_tokens,
            "q8_prompt_tokens": q8_tokens,
            "scenarios": summary,
        });
        std::fs::write(out, serde_json::to_vec_pretty(&doc).unwrap_or_default())
            .map_err(|e| user(anyhow::anyhow!("cannot write `{}`: {e}", out.display())))?;
    }
    Ok(())
}
