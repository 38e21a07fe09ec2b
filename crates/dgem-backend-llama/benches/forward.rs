//! Latency of the llama.cpp backend on a ~210-token prompt.
//!
//! `DGEM_TEST_MODEL=/path/gemma-3-270m-q4_k_m.gguf cargo bench -p dgem-backend-llama`
//! (`DGEM_BENCH_ITERS` sets the iterations, default 7). Measures, as medians:
//! (a) a cold read with logits only at the slot row, (b) the same with logits at
//! every row, (c) a read whose prompt is already in the KV cache (new short
//! suffix), (d) three suffixes after one shared prompt in one call, read one by
//! one through the prefix cache vs batched in one decode.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::time::Instant;

use dgem_backend::{Backend, SequenceRead, SlotQuery};
use dgem_backend_llama::{LlamaBackend, LlamaConfig};
use dgem_core::tokenizer::Tokenizer;

const PROMPT: &str = include_str!("../tests/prompt.txt");

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn load(path: &Path, logits_all: bool, batch_reads: bool) -> anyhow::Result<LlamaBackend> {
    let mut cfg = LlamaConfig::new(path, "bench");
    cfg.logits_all = logits_all;
    cfg.batch_reads = batch_reads;
    if let Some(n) = std::env::var("DGEM_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        cfg.n_threads = n;
    }
    Ok(LlamaBackend::load(cfg)?)
}

fn read(tok: &dyn Tokenizer, head: &str, suffix: &str) -> anyhow::Result<SequenceRead> {
    let mut tokens = vec![2];
    tokens.extend(tok.encode(head)?);
    tokens.extend(tok.encode(PROMPT)?);
    tokens.extend(tok.encode(suffix)?);
    let labels = ["billing", "technical", "account", "general"]
        .iter()
        .map(|w| tok.encode(&format!(" {w}")).map(|ids| ids[..1].to_vec()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SequenceRead {
        slots: vec![SlotQuery {
            pos: tokens.len(),
            labels,
            vocab: false,
        }],
        tokens,
        reuse_points: Vec::new(),
        policy_point: None,
    })
}

/// Wall time of one call in ms.
async fn once(be: &LlamaBackend, reads: Vec<SequenceRead>) -> anyhow::Result<f64> {
    let t = Instant::now();
    be.forward(reads).await?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let Some(path) = std::env::var_os("DGEM_TEST_MODEL") else {
        eprintln!("set DGEM_TEST_MODEL to a Gemma 3 GGUF to run this benchmark");
        return Ok(());
    };
    let path = Path::new(&path);
    let iters: usize = std::env::var("DGEM_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let slot_only = load(path, false, false)?;
    let batched = load(path, false, true)?;
    let all_rows = load(path, true, false)?;
    let one_by_one = load(path, false, false)?;
    let tok = slot_only.tokenizer();
    let tok = tok.as_ref();
    // Alternate the first word so every call misses the cache after position 1.
    let heads = ["Ticket:", "Message:"];
    let cold = |i: usize| -> anyhow::Result<Vec<SequenceRead>> {
        Ok(vec![read(
            tok,
            heads[i % 2],
            "Question: Which team?\nAnswer:",
        )?])
    };
    let n = read(tok, heads[0], "Question: Which team?\nAnswer:")?
        .tokens
        .len();
    let suffixes = [
        "Question: Which team?\nAnswer:",
        "Question: How urgent?\nAnswer:",
        "Question: Angry?\nAnswer:",
    ];
    let three = |i: usize| -> anyhow::Result<Vec<SequenceRead>> {
        let head = heads[i % 2];
        suffixes.iter().map(|s| read(tok, head, s)).collect()
    };
    // Interleave the variants so background load hits them alike; one warm-up round.
    let mut m: [Vec<f64>; 5] = Default::default();
    for i in 0..=iters {
        let round = [
            once(&slot_only, cold(i)?).await?,
            once(&all_rows, cold(i)?).await?,
            // Same head as the previous call on `slot_only`: only the suffix is new.
            once(
                &slot_only,
                vec![read(tok, heads[i % 2], suffixes[1 + i % 2])?],
            )
            .await?,
            once(&one_by_one, three(i)?).await?,
            once(&batched, three(i)?).await?,
        ];
        if i > 0 {
            for (v, x) in m.iter_mut().zip(round) {
                v.push(x);
            }
        }
    }
    let [a, b, cached, seq3, batch3] = m.map(median);
    println!("prompt tokens: {n}, iterations: {iters}");
    println!(
        "(a) slot rows only : {a:8.1} ms  ({:.2} ms/prompt token)",
        a / n as f64
    );
    println!(
        "(b) all {n} rows    : {b:8.1} ms  ({:.2} ms/prompt token)",
        b / n as f64
    );
    println!("    all-rows / slot-only = {:.2}x", b / a);
    println!("(c) prefix cached, new suffix : {cached:8.1} ms");
    println!("(d) 3 suffixes, one by one    : {seq3:8.1} ms");
    println!(
        "    3 suffixes, one batch     : {batch3:8.1} ms  (one-by-one / batch = {:.2}x)",
        seq3 / batch3
    );
    Ok(())
}
