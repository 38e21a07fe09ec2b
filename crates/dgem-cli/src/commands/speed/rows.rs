//! The rows of one `dgem bench-speed` round that take more than a line:
//! the tokenizer rows, the default engine's rows, busy neighbours,
//! throughput and concurrent overhead (moved from `speed.rs` unchanged).

use std::time::Instant;

use dgem_core::schema::{Layout, ValidSchema};
use dgem_core::tokenizer::Tokenizer;
use dgem_engine::Engine;

use super::{timed, triage, Bench, TICKET_A, TICKET_B};
use crate::failure::{internal, user, Failure};

/// One row of per-round times: `(scenario, ms)`.
pub(super) type Push<'a> = &'a mut dyn FnMut(&'static str, f64);

/// The tokenizer rows and the overhead of a state no earlier round tokenized.
pub(super) async fn tokenizer_rows(
    b: &Bench,
    main: &ValidSchema,
    tok: &dgem_backend_llama::LlamaTokenizer,
    prompt_text: &str,
    round: u32,
    push: Push<'_>,
) -> Result<(), Failure> {
    let t = Instant::now();
    tok.encode(prompt_text)
        .map_err(|e| internal(anyhow::anyhow!("tokenize: {e}")))?;
    push("tokenize", t.elapsed().as_secs_f64() * 1e3);
    // A state no earlier round tokenized: its lines miss the line cache.
    let novel = format!("{TICKET_B} My order reference is {}.", 7_301 + round);
    push(
        "overhead_new_state",
        b.cold(main, &novel).await?.overhead_ms,
    );
    let t = Instant::now();
    tok.encode_reference(prompt_text)
        .map_err(|e| internal(anyhow::anyhow!("tokenize: {e}")))?;
    push("tokenize_llama", t.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

/// The rows of the default (cyclic) engine: cold, warm, first of policy,
/// 1 and 8 questions, and `schema_first`.
pub(super) async fn cyclic_rows(
    b: &Bench,
    [main, sf, q1, q8]: [&ValidSchema; 4],
    round: u32,
    push: Push<'_>,
) -> Result<(), Failure> {
    let cold = b.cold(main, TICKET_A).await?;
    push("cold", cold.wall_ms);
    push("overhead_1", cold.overhead_ms);
    let warm = b.decide(main, TICKET_A).await?;
    push("warm", warm.wall_ms);
    push("overhead_1", warm.overhead_ms);
    let fresh = triage(
        &format!(" (Policy revision {round}.)"),
        Layout::DocumentFirst,
    )?;
    push("first_of_policy", b.cold(&fresh, TICKET_A).await?.wall_ms);
    push("q1", b.cold(q1, TICKET_A).await?.wall_ms);
    push("q8", b.cold(q8, TICKET_A).await?.wall_ms);
    push("schema_first_cold", b.cold(sf, TICKET_B).await?.wall_ms);
    b.decide(sf, TICKET_A).await?;
    push("schema_first_cached", b.decide(sf, TICKET_B).await?.wall_ms);
    let fresh_sf = triage(&format!(" (Policy revision {round}.)"), Layout::SchemaFirst)?;
    push(
        "schema_first_first_of_policy",
        b.cold(&fresh_sf, TICKET_B).await?.wall_ms,
    );
    Ok(())
}

/// CPU-bound processes running beside the bench (`sh -c 'while :; do :; done'`),
/// stopped when dropped.
pub(super) struct BusyLoops(Vec<std::process::Child>);

impl BusyLoops {
    pub(super) fn start(n: usize) -> Result<Self, Failure> {
        let mut loops = Self(Vec::with_capacity(n));
        for _ in 0..n {
            let child = std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|e| user(anyhow::anyhow!("cannot start a busy loop (`sh`): {e}")))?;
            loops.0.push(child);
        }
        // Let the scheduler put them on the cores before the decision starts.
        std::thread::sleep(std::time::Duration::from_millis(200));
        Ok(loops)
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Milliseconds per decision of `n` new states of `schema` decided one after
/// another, and of `n` other new states decided by `n` callers at once.
pub(super) async fn throughput(
    engine: &Engine,
    b: &Bench,
    schema: &ValidSchema,
    round: u32,
    n: usize,
) -> Result<(f64, f64), Failure> {
    let state = |batch: usize, i: usize| {
        let reference = 50_000 + (round as usize * 2 + batch) * n + i;
        format!("{TICKET_B} My order reference is {reference}.")
    };
    let t = Instant::now();
    for i in 0..n {
        timed(engine, schema, &state(0, i)).await?;
    }
    let serial = t.elapsed().as_secs_f64() * 1e3 / n as f64;
    let states: Vec<String> = (0..n).map(|i| state(1, i)).collect();
    let t = Instant::now();
    let done =
        futures_util::future::join_all(states.iter().map(|s| timed(engine, schema, s))).await;
    let concurrent = t.elapsed().as_secs_f64() * 1e3 / n as f64;
    b.recorder.take();
    for d in done {
        d?;
    }
    Ok((serial, concurrent))
}

/// Per-caller overhead of `n` concurrent warm decisions.
pub(super) async fn concurrent_overhead(
    b: &Bench,
    schema: &ValidSchema,
    n: usize,
) -> Result<Vec<f64>, Failure> {
    let calls = (0..n).map(|_| timed(&b.engine, schema, TICKET_A));
    let done = futures_util::future::join_all(calls).await;
    b.recorder.take();
    done.into_iter().map(|r| r.map(|(_, o)| o)).collect()
}
