//! Shared helpers: a toy-tokenizer decider pointed at an in-process fake vLLM.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dgem_backend::{DecideError, DecideRequest, Decider, Decision};
use dgem_backend_vllm::{VllmConfig, VllmDecider};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_fake_vllm::{scripts, FakeConfig, FakeVllm, ReadView, Recorded};
use dgem_testkit::ToyTokenizer;
use serde_json::{json, Value};

/// Toy tokenizer ids of `▁yes` / `▁no` (the slot tokens of `id: yes`).
pub struct Ids {
    pub tok: Arc<ToyTokenizer>,
    pub yes: u32,
    pub no: u32,
}

pub fn ids() -> Ids {
    let tok = Arc::new(ToyTokenizer::default());
    let yes = tok.id("▁yes");
    let no = tok.id("▁no");
    Ids { tok, yes, no }
}

/// A fake whose constrained logprobs weigh `yes` and `no` as `w(canvas cell at
/// the slot)` returns.
pub async fn fake_with(
    ids: &Ids,
    weight: impl Fn(u32, u32) -> f64 + Send + Sync + 'static,
) -> FakeVllm {
    let (yes, no) = (ids.yes, ids.no);
    let script = scripts::weights(move |_pos, cell, id| {
        if id == yes || id == no {
            weight(cell, id)
        } else {
            1.0
        }
    });
    fake_scripted(script, Vec::new()).await
}

/// A fake with flat logprobs whose thoughts return `thought` (then the stop id).
pub async fn fake_thinking(thought: Vec<u32>) -> FakeVllm {
    fake_scripted(scripts::weights(|_, _, _| 1.0), thought).await
}

/// A fake answering reads with `script` and thoughts with `thought`.
pub async fn fake_scripted(
    script: impl Fn(&ReadView) -> Vec<Vec<(u32, f64)>> + Send + Sync + 'static,
    thought: Vec<u32>,
) -> FakeVllm {
    FakeVllm::start(FakeConfig {
        script: Arc::new(script),
        thought,
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

/// Settings for tests: short waits so failures show quickly.
pub fn config(fake: &FakeVllm) -> VllmConfig {
    let mut cfg = VllmConfig::new(fake.url());
    cfg.request_timeout = Duration::from_secs(5);
    cfg.ready_wait = Duration::from_secs(2);
    cfg.probe_interval = Duration::from_millis(10);
    cfg
}

pub fn decider(ids: &Ids, cfg: VllmConfig) -> Arc<VllmDecider> {
    Arc::new(VllmDecider::new(cfg, ids.tok.clone()).unwrap())
}

pub fn schema(v: Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).unwrap()
}

pub async fn decide(d: &VllmDecider, s: Value) -> Result<Decision, DecideError> {
    d.decide(DecideRequest {
        schema: schema(s),
        state: json!({"ticket": "the card was charged twice"}),
        seed: 42,
    })
    .await
}

/// The seeded canvas of a recorded read.
pub fn canvas(r: &Recorded) -> Vec<u64> {
    r.body["vllm_xargs"]["diffusion_seed_canvas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

pub fn env(d: &Decision) -> Value {
    d.envelope()
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Letter (or digit) of option `name` in a read's question block (`  B: high`),
/// in a prompt as the fake sees it (chat JSON with `\n` escapes, or plain text).
pub fn letter_of(prompt: &str, name: &str) -> Option<String> {
    prompt
        .split("\\n")
        .flat_map(|l| l.split('\n'))
        .find_map(|l| {
            let (letter, rest) = l.trim().split_once(": ")?;
            (rest.trim() == name && letter.len() == 1).then(|| letter.to_owned())
        })
}

/// `(option, probability)` of question `q` in an envelope, sorted by option.
pub fn probs(env: &Value, q: &str) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = env["answers"][q]["probabilities"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, p)| (k.clone(), p.as_f64().unwrap()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Which of `names` a read's question block lists first (under the letter `A`).
pub fn listed_first<S: AsRef<str>>(prompt: &str, names: &[S]) -> Option<String> {
    names
        .iter()
        .map(AsRef::as_ref)
        .find(|n| letter_of(prompt, n).as_deref() == Some("A"))
        .map(str::to_owned)
}
