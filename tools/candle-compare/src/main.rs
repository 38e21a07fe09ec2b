//! candle 0.11.1 (`quantized_gemma3`) against dgem's llama.cpp backend on the same
//! GGUF and the same prompt. See `docs/engine-choice.md` for how it is run and
//! what it found.
//!
//! ```text
//! candle-compare MODEL.gguf REFERENCE.json THREADS [ITERS]
//! ```
//! REFERENCE.json is written by
//! `cargo run -p dgem-backend-llama --example llama_logprobs -- MODEL THREADS 5 REFERENCE.json`:
//! the prompt's token ids, the label ids and llama.cpp's full next-token log-softmax.
//! This program runs the prompt from scratch (batch 1, no KV cache) through
//! [`gemma3`] — candle's `quantized_gemma3` with its MLP activation corrected
//! (upstream 0.11.1 applies SiLU where Gemma uses GELU) and the two known cache/batch
//! bugs fixed — times ITERS forwards (default 5) after one warm-up, and compares its
//! log-softmax at the last position with llama.cpp's. `--upstream` as the last
//! argument runs the unmodified `candle_transformers::models::quantized_gemma3`.

use std::fs::File;
use std::io::BufReader;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use serde::Deserialize;

mod gemma3;

/// The corrected model file, or candle's own for reference.
enum Model {
    Fixed(gemma3::ModelWeights),
    Upstream(candle_transformers::models::quantized_gemma3::ModelWeights),
}

impl Model {
    fn forward(&mut self, input: &Tensor, index_pos: usize) -> candle_core::Result<Tensor> {
        match self {
            Self::Fixed(m) => m.forward(input, index_pos),
            Self::Upstream(m) => m.forward(input, index_pos),
        }
    }
}

#[derive(Deserialize)]
struct Reference {
    prompt_tokens: Vec<u32>,
    label_words: Vec<String>,
    label_ids: Vec<u32>,
    argmax: u32,
    logprobs: Vec<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Log-softmax of one row, accumulated in f64 like `dgem_backend_llama::read_slot`.
fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .map(|&l| f64::from(l))
        .fold(f64::NEG_INFINITY, f64::max);
    let log_z = max
        + logits
            .iter()
            .map(|&l| (f64::from(l) - max).exp())
            .sum::<f64>()
            .ln();
    logits.iter().map(|&l| f64::from(l) - log_z).collect()
}

/// Ids of the `k` largest values, largest first.
fn top_k(v: &[f64], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..v.len() as u32).collect();
    idx.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]));
    idx.truncate(k);
    idx
}

/// One forward from position 0 and the log-softmax of the last position.
fn run(model: &mut Model, tokens: &[u32], device: &Device) -> Result<Vec<f64>> {
    let input = Tensor::new(tokens, device)?.unsqueeze(0)?;
    let logits = model.forward(&input, 0)?.squeeze(0)?.to_vec1::<f32>()?;
    Ok(log_softmax(&logits))
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let upstream = args.last().is_some_and(|a| a == "--upstream");
    if upstream {
        args.pop();
    }
    let [model_path, reference, threads, rest @ ..] = args.as_slice() else {
        bail!("usage: candle-compare MODEL.gguf REFERENCE.json THREADS [ITERS] [--upstream]");
    };
    let threads: usize = threads.parse().context("THREADS")?;
    let iters: usize = match rest.first() {
        Some(s) => s.parse().context("ITERS")?,
        None => 5,
    };
    // candle sizes its thread pools from these on first use.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", threads.to_string());
    let reference: Reference = serde_json::from_reader(BufReader::new(
        File::open(reference).with_context(|| format!("opening {reference}"))?,
    ))?;

    let device = Device::Cpu;
    let t = Instant::now();
    let mut file = File::open(model_path).with_context(|| format!("opening {model_path}"))?;
    let content = gguf_file::Content::read(&mut file)?;
    let vocab: Vec<String> = match content.metadata.get("tokenizer.ggml.tokens") {
        Some(v) => v
            .to_vec()?
            .iter()
            .map(|s| s.to_string().cloned())
            .collect::<candle_core::Result<_>>()?,
        None => Vec::new(),
    };
    let mut model = if upstream {
        Model::Upstream(
            candle_transformers::models::quantized_gemma3::ModelWeights::from_gguf(
                content, &mut file, &device,
            )?,
        )
    } else {
        Model::Fixed(gemma3::ModelWeights::from_gguf(
            content, &mut file, &device,
        )?)
    };
    let load_ms = t.elapsed().as_secs_f64() * 1e3;

    let tokens = &reference.prompt_tokens;
    let mut runs = Vec::with_capacity(iters);
    let mut lp = Vec::new();
    for i in 0..=iters {
        let t = Instant::now();
        lp = run(&mut model, tokens, &device)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if i > 0 {
            runs.push(ms);
        }
    }
    let med = median(runs.clone());
    if lp.len() != reference.logprobs.len() {
        bail!(
            "vocabulary sizes differ: candle {} vs llama.cpp {}",
            lp.len(),
            reference.logprobs.len()
        );
    }

    let name = |id: u32| vocab.get(id as usize).map_or("?", String::as_str);
    let variant = if upstream { "upstream" } else { "fixed" };
    println!(
        "candle ({variant} quantized_gemma3): {} prompt tokens, {threads} thread(s), load {load_ms:.0} ms",
        tokens.len()
    );
    println!(
        "  forward median {med:.1} ms ({:.3} ms/token), runs {runs:.1?}",
        med / tokens.len() as f64
    );
    println!("label          id   llama.cpp     candle      delta");
    let mut max_label_delta = 0f64;
    for (word, &id) in reference.label_words.iter().zip(&reference.label_ids) {
        let (a, b) = (reference.logprobs[id as usize], lp[id as usize]);
        max_label_delta = max_label_delta.max((a - b).abs());
        println!("  {word:<11} {id:>6} {a:>10.4} {b:>10.4} {:>+10.4}", b - a);
    }
    let (top_llama, top_candle) = (top_k(&reference.logprobs, 5), top_k(&lp, 5));
    let argmax = top_candle[0];
    let union: Vec<u32> = top_k(&reference.logprobs, 20)
        .into_iter()
        .chain(top_k(&lp, 20))
        .collect();
    let max_top20_delta = union
        .iter()
        .map(|&id| (reference.logprobs[id as usize] - lp[id as usize]).abs())
        .fold(0f64, f64::max);
    // KL(llama.cpp || candle) over the whole vocabulary, in nats.
    let kl: f64 = reference
        .logprobs
        .iter()
        .zip(&lp)
        .filter(|(a, _)| **a > -50.0)
        .map(|(a, b)| a.exp() * (a - b))
        .sum();
    let show = |ids: &[u32]| -> Vec<String> {
        ids.iter()
            .map(|&id| format!("{id}:{:?}", name(id)))
            .collect()
    };
    println!("  max |delta| over labels: {max_label_delta:.4} nats");
    println!("  max |delta| over both top-20: {max_top20_delta:.4} nats, KL(llama||candle) {kl:.2e} nats");
    println!(
        "  argmax llama.cpp {} candle {argmax} ({})",
        reference.argmax,
        if argmax == reference.argmax {
            "agree"
        } else {
            "DIFFER"
        }
    );
    println!("  top-5 llama.cpp {:?}", show(&top_llama));
    println!("  top-5 candle    {:?}", show(&top_candle));
    println!(
        "  top-5 same order: {}, same set: {}",
        top_llama == top_candle,
        {
            let (mut a, mut b) = (top_llama.clone(), top_candle.clone());
            a.sort_unstable();
            b.sort_unstable();
            a == b
        }
    );
    println!(
        "{{\"engine\":\"candle-{variant}\",\"threads\":{threads},\"prompt_tokens\":{},\"runs_ms\":{:?},\"median_ms\":{med:.1},\"ms_per_token\":{:.3},\"max_label_delta\":{max_label_delta:.5},\"top5_same\":{},\"argmax_same\":{}}}",
        tokens.len(),
        runs.iter().map(|x| (x * 10.0).round() / 10.0).collect::<Vec<_>>(),
        med / tokens.len() as f64,
        top_llama == top_candle,
        argmax == reference.argmax,
    );
    Ok(())
}
