//! The table and the receipt of `dgem bench-proxy`, and the goal check
//! (issue 28 item 6: p50 overhead ≤ 1 ms and ≥ 2,000 decisions/s at 64
//! clients on the 2-core machine, in a release build).

use dgem_bench::metrics::percentile;
use dgem_bench::receipt::{now_unix, VersionInfo};
use serde_json::{json, Value};

use super::super::proxy_load::Phase;
use super::{ProxyArgs, TICKETS};
use crate::failure::{internal, user, Failure};

/// Receipt format tag.
pub const FORMAT: &str = "dgem.bench.proxy/v1";

/// Goal: most p50 overhead per decision at [`GOAL_CLIENTS`], ms.
pub const GOAL_OVERHEAD_P50_MS: f64 = 1.0;
/// Goal: fewest decisions per second at [`GOAL_CLIENTS`].
pub const GOAL_DECISIONS_PER_S: f64 = 2000.0;
/// The level the goal is read at.
pub const GOAL_CLIENTS: usize = 64;

/// One level of concurrency, both sides measured.
#[derive(Debug, Clone)]
pub struct Level {
    /// Concurrent clients.
    pub clients: usize,
    /// Chat decisions sent to dgem.
    pub dgem: Phase,
    /// The same decisions' vLLM requests replayed straight to the fake.
    pub baseline: Phase,
    /// vLLM requests dgem sent per decision (recording pass, mean).
    pub vllm_requests_per_decision: f64,
    /// The server's `MAX_INFLIGHT` (0 = no gate).
    pub max_inflight: usize,
}

/// p50 and p99 of a phase's latencies, ms.
fn p50_p99(p: &Phase) -> (f64, f64) {
    (
        percentile(&p.latencies_ms, 0.5),
        percentile(&p.latencies_ms, 0.99),
    )
}

impl Level {
    fn row(&self) -> Value {
        let (d50, d99) = p50_p99(&self.dgem);
        let (b50, b99) = p50_p99(&self.baseline);
        let side = |p: &Phase, p50: f64, p99: f64| {
            json!({"items": p.items(), "failed": p.failed, "first_failure": p.first_failure,
                   "elapsed_s": p.elapsed_s, "per_s": p.per_s(), "p50_ms": p50, "p99_ms": p99})
        };
        json!({
            "clients": self.clients,
            "dgem": side(&self.dgem, d50, d99),
            "baseline": side(&self.baseline, b50, b99),
            "overhead_p50_ms": d50 - b50,
            "overhead_p99_ms": d99 - b99,
            "decisions_per_s": self.dgem.per_s(),
            "baseline_requests_per_s": self.baseline.per_s(),
            "throughput_ratio": ratio(self.dgem.per_s(), self.baseline.per_s()),
        })
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// `debug` or `release`: the profile this binary was built with.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// Print the table and the goal, write the receipt; an internal failure
/// when any decision or baseline request failed (after the receipt is written).
///
/// # Errors
/// A user [`Failure`] when the receipt cannot be written; internal as above.
pub fn report(levels: &[Level], args: &ProxyArgs, tokenizer: &str) -> Result<(), Failure> {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let (reads, inflight) = levels
        .first()
        .map_or((0.0, 0), |l| (l.vllm_requests_per_decision, l.max_inflight));
    println!(
        "dgem bench-proxy: {} build, {cpus} CPUs, tokenizer {tokenizer}, MAX_INFLIGHT {inflight}, {reads:.1} vLLM requests per decision; fake vLLM in place of DiffusionGemma",
        build_profile()
    );
    println!(
        "{:>7} {:>9} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>12} {:>10} {:>7} {:>7}",
        "clients",
        "decisions",
        "dgem p50",
        "dgem p99",
        "base p50",
        "base p99",
        "ovh p50 ms",
        "ovh p99 ms",
        "decisions/s",
        "base req/s",
        "ratio",
        "failed"
    );
    let rows: Vec<Value> = levels.iter().map(Level::row).collect();
    for (l, r) in levels.iter().zip(&rows) {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let (d50, d99) = p50_p99(&l.dgem);
        let (b50, b99) = p50_p99(&l.baseline);
        println!(
            "{:>7} {:>9} {d50:>10.2} {d99:>10.2} {b50:>10.2} {b99:>10.2} {:>11.2} {:>11.2} {:>12.0} {:>10.0} {:>7.2} {:>7}",
            l.clients,
            l.dgem.latencies_ms.len(),
            f("overhead_p50_ms"),
            f("overhead_p99_ms"),
            f("decisions_per_s"),
            f("baseline_requests_per_s"),
            f("throughput_ratio"),
            l.dgem.failed + l.baseline.failed
        );
    }
    let goal = goal(levels);
    println!("{}", goal_line(&goal));
    if let Some(out) = &args.out {
        let doc = json!({
            "format": FORMAT,
            "suite": "proxy",
            "created_unix": now_unix(),
            "dgem": VersionInfo::current(),
            "build": build_profile(),
            "machine": {"cpus": cpus},
            "backend": "fake vLLM (dgem-fake-vllm), not DiffusionGemma",
            "settings": {
                "clients": args.clients, "requests": args.requests, "seconds": args.seconds,
                "warmup": args.warmup, "max_inflight": inflight, "tokenizer": tokenizer,
                "canvas_profile": "plain", "questions": ["boolean", "choice (4 options)", "score (3 levels)"],
                "tickets": TICKETS.len(), "vllm_requests_per_decision": reads,
            },
            "levels": rows,
            "goal": goal,
        });
        let text = serde_json::to_string_pretty(&doc).map_err(internal)?;
        std::fs::write(out, text + "\n")
            .map_err(|e| user(anyhow::anyhow!("cannot write `{}`: {e}", out.display())))?;
    }
    let failed: usize = levels
        .iter()
        .map(|l| l.dgem.failed + l.baseline.failed)
        .sum();
    if failed > 0 {
        let first = levels
            .iter()
            .find_map(|l| {
                l.dgem
                    .first_failure
                    .clone()
                    .or(l.baseline.first_failure.clone())
            })
            .unwrap_or_default();
        return Err(internal(anyhow::anyhow!(
            "{failed} decisions or baseline requests failed; the first: {first}"
        )));
    }
    Ok(())
}

/// The goal as read at [`GOAL_CLIENTS`] (`null` figures when that level did not run).
fn goal(levels: &[Level]) -> Value {
    let at = levels.iter().find(|l| l.clients == GOAL_CLIENTS);
    let overhead = at
        .map(|l| percentile(&l.dgem.latencies_ms, 0.5) - percentile(&l.baseline.latencies_ms, 0.5));
    let per_s = at.map(|l| l.dgem.per_s());
    json!({
        "clients": GOAL_CLIENTS,
        "overhead_p50_ms_max": GOAL_OVERHEAD_P50_MS,
        "decisions_per_s_min": GOAL_DECISIONS_PER_S,
        "overhead_p50_ms": overhead,
        "decisions_per_s": per_s,
        "overhead_met": overhead.map(|o| o <= GOAL_OVERHEAD_P50_MS),
        "throughput_met": per_s.map(|d| d >= GOAL_DECISIONS_PER_S),
        "build": build_profile(),
        "note": "the goal is for a release build on the 2-core machine; a debug build compiles dgem's own crates at opt-level 0",
    })
}

fn goal_line(goal: &Value) -> String {
    let verdict = |k: &str| match goal[k].as_bool() {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    };
    let fig = |k: &str, unit: &str| {
        goal[k]
            .as_f64()
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.2}{unit}"))
    };
    let mut line = format!(
        "goal at {GOAL_CLIENTS} clients: p50 overhead ≤ {GOAL_OVERHEAD_P50_MS} ms: {} ({}); ≥ {GOAL_DECISIONS_PER_S:.0} decisions/s: {} ({})",
        verdict("overhead_met"),
        fig("overhead_p50_ms", " ms"),
        verdict("throughput_met"),
        fig("decisions_per_s", "/s"),
    );
    if cfg!(debug_assertions) {
        line.push_str(
            "\nnote: a debug build (dgem's own crates at opt-level 0, dependencies optimized): the goal is set for a release build",
        );
    }
    line
}
