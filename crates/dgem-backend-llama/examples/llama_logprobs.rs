//! Reference numbers of the llama.cpp backend for `tools/candle-compare`.
//!
//! ```text
//! cargo run -p dgem-backend-llama --example llama_logprobs -- MODEL.gguf THREADS [ITERS] [DUMP.json]
//! ```
//! Builds the 196-token prompt of `benches/forward.rs` (BOS, "Ticket:", `tests/prompt.txt`,
//! "Question: Which team?\nAnswer:"), times ITERS (default 5) cold reads with logits at
//! the last row only (after one warm-up; the KV cache is emptied before each read) and
//! prints one JSON line: thread count, per-run and median milliseconds, and the
//! log-probabilities of a few label tokens. With DUMP.json it also writes the prompt's
//! token ids, the label ids and the full next-token log-softmax (one read with every
//! vocabulary id as a label) for the candle side to compare against.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use dgem_backend::{Backend, SequenceRead, SlotQuery};
use dgem_backend_llama::{LlamaBackend, LlamaConfig};
use dgem_core::tokenizer::{TokenId, Tokenizer};

const PROMPT: &str = include_str!("../tests/prompt.txt");
/// Label words of a yes/no slot and of a team slot; each is read as its first
/// `▁`-prefixed token.
const LABELS: [&str; 8] = [
    "yes",
    "no",
    "billing",
    "support",
    "engineering",
    "technical",
    "account",
    "general",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn prompt_tokens(tok: &dyn Tokenizer) -> anyhow::Result<Vec<TokenId>> {
    let mut tokens = vec![2];
    for part in ["Ticket:", PROMPT, "Question: Which team?\nAnswer:"] {
        tokens.extend(tok.encode(part)?);
    }
    Ok(tokens)
}

fn at_end(tokens: &[TokenId], labels: Vec<Vec<TokenId>>) -> Vec<SequenceRead> {
    vec![SequenceRead {
        tokens: tokens.to_vec(),
        slots: vec![SlotQuery {
            pos: tokens.len(),
            labels,
            vocab: true,
        }],
        reuse_points: Vec::new(),
        policy_point: None,
    }]
}

fn json_list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items.into_iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(","))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, threads, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: llama_logprobs MODEL.gguf THREADS [ITERS] [DUMP.json]");
    };
    let threads: usize = threads.parse().context("THREADS")?;
    let iters: usize = match rest.first() {
        Some(s) => s.parse().context("ITERS")?,
        None => 5,
    };
    let mut cfg = LlamaConfig::new(Path::new(model), "compare");
    cfg.n_threads = threads;
    let be = LlamaBackend::load(cfg)?;
    let tok = be.tokenizer();
    let tokens = prompt_tokens(tok.as_ref())?;
    let mut label_ids = Vec::with_capacity(LABELS.len());
    for word in LABELS {
        let ids = tok.encode(&format!(" {word}"))?;
        label_ids.push(*ids.first().context("empty label")?);
    }
    let labels: Vec<Vec<TokenId>> = label_ids.iter().map(|&id| vec![id]).collect();

    // A one-token read at another first token empties the prefix cache, so every
    // timed read decodes all its tokens.
    let flush = at_end(&[0], vec![vec![0]]);
    let mut runs = Vec::with_capacity(iters);
    let mut label_lp = Vec::new();
    for i in 0..=iters {
        be.forward(flush.clone()).await?;
        let t = Instant::now();
        let out = be.forward(at_end(&tokens, labels.clone())).await?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if out.stats.cached_tokens != 0 {
            anyhow::bail!(
                "read was not cold: {} cached tokens",
                out.stats.cached_tokens
            );
        }
        if i > 0 {
            runs.push(ms);
        }
        let slot = &out.sequences[0][0];
        let full = slot
            .vocab
            .as_ref()
            .context("the read asked for the vocabulary")?;
        label_lp.clone_from(&full.label_logprobs);
    }
    let med = median(runs.clone());
    println!(
        "{{\"engine\":\"llama.cpp\",\"threads\":{threads},\"prompt_tokens\":{},\"runs_ms\":{},\"median_ms\":{med:.1},\"ms_per_token\":{:.3},\"label_logprobs\":{}}}",
        tokens.len(),
        json_list(runs.iter().map(|x| format!("{x:.1}"))),
        med / tokens.len() as f64,
        json_list(label_lp.iter().map(|x| format!("{x:.6}"))),
    );

    if let Some(dump) = rest.get(1) {
        let vocab = u32::try_from(tok.vocab_size())?;
        let all: Vec<Vec<TokenId>> = (0..vocab).map(|id| vec![id]).collect();
        be.forward(flush.clone()).await?;
        let out = be.forward(at_end(&tokens, all)).await?;
        let slot = out.sequences[0][0]
            .vocab
            .as_ref()
            .context("the read asked for the vocabulary")?;
        let mut json = String::new();
        write!(
            json,
            "{{\"prompt_tokens\":{},\"label_words\":{},\"label_ids\":{},\"argmax\":{},\"logprobs\":{}}}",
            json_list(&tokens),
            json_list(LABELS.iter().map(|w| format!("\"{w}\""))),
            json_list(&label_ids),
            slot.argmax_token,
            json_list(slot.label_logprobs.iter().map(|x| format!("{x:.7}"))),
        )?;
        std::fs::write(dump, json).with_context(|| format!("writing {dump}"))?;
        eprintln!("wrote {dump}");
    }
    Ok(())
}
