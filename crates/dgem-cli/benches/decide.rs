//! Benchmark: one `support_triage` decision on the embedded model.
//!
//! Prints the median latency of the decision with output logits computed only at
//! the slot rows (the default) and with logits at every position, measured
//! interleaved in the same run, and their ratio. Needs `DGEM_TEST_MODEL` (the
//! GGUF path). Run: `cargo bench -p dgem-cli --bench decide`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::time::Instant;

use dgem_backend_llama::{LlamaBackend, LlamaConfig};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{CalibrationMode, DecideRequest, Engine, EngineConfig};

const ROUNDS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn engine(model: &str, logits_all: bool) -> anyhow::Result<Engine> {
    let mut cfg = LlamaConfig::new(model, "gemma-3-270m-q4_k_m");
    cfg.logits_all = logits_all;
    cfg.context_size = 4096;
    let backend = LlamaBackend::load(cfg)?;
    Ok(Engine::new(
        Arc::new(backend),
        EngineConfig {
            calibration: CalibrationMode::Off,
            ..EngineConfig::default()
        },
    ))
}

fn main() -> anyhow::Result<()> {
    let Ok(model) = std::env::var("DGEM_TEST_MODEL") else {
        eprintln!("skipping: set DGEM_TEST_MODEL to the GGUF path");
        return Ok(());
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("templates/support_triage.json.tmpl"))?;
    let mut vars = serde_json::Map::new();
    vars.insert(
        "ticket".into(),
        "Since this morning's deploy every checkout request returns HTTP 500 and EU customers cannot pay.".into(),
    );
    let rendered = dgem_core::template::render("support_triage", &text, &vars)?;
    let payload = dgem_core::payload::parse_payload(&rendered, &vars)?;
    let schema = ValidSchema::from_value(&payload.schema, &SchemaDefaults::default())?;
    let rt = tokio::runtime::Runtime::new()?;
    let slot_only = engine(&model, false)?;
    let all_rows = engine(&model, true)?;
    let run = |e: &Engine, seed: i64| -> anyhow::Result<f64> {
        // A new state per round (changed at its start) keeps every decision a cold
        // read: the KV prefix cache cannot reuse anything past the first tokens.
        let state = serde_json::json!({"ticket": format!("Round {seed}. {}", vars["ticket"])});
        let t = Instant::now();
        rt.block_on(e.decide(DecideRequest {
            schema: schema.clone(),
            state,
            seed,
        }))?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    run(&slot_only, 0)?;
    run(&all_rows, 0)?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS as i64 {
        a.push(run(&slot_only, round)?);
        b.push(run(&all_rows, round)?);
    }
    let (ma, mb) = (median(a), median(b));
    println!("support_triage decision, embedded Gemma 3 270M, {ROUNDS} interleaved rounds");
    println!("  logits at slot rows only : median {ma:8.1} ms");
    println!("  logits at every position : median {mb:8.1} ms");
    println!("  ratio all-rows / slot-only: {:.2}x", mb / ma);
    Ok(())
}
