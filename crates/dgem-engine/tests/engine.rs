//! End-to-end engine tests on a scripted backend with a toy tokenizer: the
//! numbers that come out are fixed by the script, so they are asserted exactly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dgem_backend::{
    Attention, Backend, BackendError, BackendInfo, ForwardOutput, ForwardStats, LabelMode,
    SequenceRead, SlotLogits,
};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_core::tokenizer::{TokenId, TokenizeError, Tokenizer};
use dgem_engine::{CalibrationMode, DecideRequest, Engine, EngineConfig, EngineError};
use serde_json::json;

/// Whitespace/punctuation tokenizer: `▁word` after a space, ids on first use.
#[derive(Default)]
struct ToyTokenizer {
    ids: Mutex<HashMap<String, TokenId>>,
}

impl ToyTokenizer {
    fn id(&self, piece: &str) -> TokenId {
        let mut ids = self.ids.lock().expect("lock");
        let next = u32::try_from(ids.len()).expect("small") + 10;
        *ids.entry(piece.to_owned()).or_insert(next)
    }
}

impl Tokenizer for ToyTokenizer {
    fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
        let mut out = Vec::new();
        let mut word = String::new();
        let mut space = false;
        for c in text.chars().chain(std::iter::once('\u{0}')) {
            if c.is_alphanumeric() || c == '_' {
                word.push(c);
                continue;
            }
            if !word.is_empty() {
                let piece = if space {
                    format!("▁{word}")
                } else {
                    word.clone()
                };
                out.push(self.id(&piece));
                word.clear();
                space = false;
            }
            match c {
                '\u{0}' => {}
                ' ' => space = true,
                other => out.push(self.id(&other.to_string())),
            }
        }
        Ok(out)
    }
    fn decode(&self, _ids: &[TokenId]) -> String {
        String::new()
    }
    fn bos_id(&self) -> Option<TokenId> {
        Some(2)
    }
    fn vocab_size(&self) -> usize {
        1_000
    }
}

type Script = dyn Fn(&ToyTokenizer, &[TokenId], &[Vec<TokenId>]) -> Vec<f64> + Send + Sync;

/// A causal backend whose label log-probabilities come from a script.
struct Scripted {
    tok: Arc<ToyTokenizer>,
    info: BackendInfo,
    script: Box<Script>,
    calls: Mutex<usize>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl Scripted {
    fn new(max_tokens: usize, script: Box<Script>) -> Arc<Self> {
        Arc::new(Self {
            tok: Arc::new(ToyTokenizer::default()),
            info: BackendInfo {
                engine: "scripted".into(),
                model_id: "toy".into(),
                model_sha256: None,
                attention: Attention::Causal,
                label_mode: LabelMode::Words,
                max_tokens,
                supports_images: false,
            },
            script,
            calls: Mutex::new(0),
        })
    }
}

#[async_trait]
impl Backend for Scripted {
    fn info(&self) -> &BackendInfo {
        &self.info
    }
    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        self.tok.clone()
    }
    async fn forward(&self, reads: Vec<SequenceRead>) -> Result<ForwardOutput, BackendError> {
        *self.calls.lock().expect("lock") += 1;
        let sequences = reads
            .iter()
            .map(|r| {
                r.slots
                    .iter()
                    .map(|s| {
                        let probs = (self.script)(&self.tok, &r.tokens[..s.pos], &s.labels);
                        SlotLogits {
                            label_logprobs: probs.iter().map(|p| p.ln()).collect(),
                            vocab_entropy: 3.0,
                            argmax_token: s.labels[0][0],
                        }
                    })
                    .collect()
            })
            .collect();
        Ok(ForwardOutput {
            sequences,
            stats: ForwardStats {
                queue_ms: 0.0,
                forward_ms: 1.0,
                prompt_tokens: 0,
                cached_tokens: 0,
            },
        })
    }
}

fn schema(v: serde_json::Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
}

fn triage() -> serde_json::Value {
    json!({"questions": [
        {"id": "urgent", "type": "boolean"},
        {"id": "team", "type": "choice", "options": ["billing", "support", "engineering"]}
    ]})
}

/// Puts probability `p` on the label whose token is `▁<word>` and spreads the rest.
fn favour(word: &'static str, p: f64) -> Box<Script> {
    Box::new(move |tok, _prefix, labels| {
        let target = tok.id(&format!("▁{word}"));
        let k = labels.len() as f64;
        labels
            .iter()
            .map(|l| if l.contains(&target) { p } else { (1.0 - p) / (k - 1.0) } * 0.5)
            .collect()
    })
}

fn engine(backend: Arc<Scripted>, calibration: CalibrationMode) -> Engine {
    Engine::new(
        backend,
        EngineConfig {
            calibration,
            ..EngineConfig::default()
        },
    )
}

#[tokio::test]
async fn answers_follow_the_script_exactly() {
    let b = Scripted::new(4096, favour("engineering", 0.7));
    let d = engine(b, CalibrationMode::Off)
        .decide(DecideRequest {
            schema: schema(triage()),
            state: json!({"ticket": "down"}),
            seed: 42,
        })
        .await
        .expect("decision");
    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "engineering");
    assert!((team.aggregate.confidence - 0.7).abs() < 1e-9);
    let urgent = d.answers["urgent"].as_ref().expect("answered");
    assert!(
        (urgent.aggregate.mean[0] - 0.5).abs() < 1e-9,
        "no preference → 50/50"
    );
    assert!((urgent.aggregate.normalized_entropy - 1.0).abs() < 1e-9);
    // label_mass: the script puts half of the vocabulary mass on the labels.
    assert!((d.diagnostics.questions["team"].label_mass - 0.5).abs() < 1e-9);
    assert_eq!(d.diagnostics.slot_reading, "cloze");
    assert_eq!(d.diagnostics.label_mode, "words");
    assert_eq!(d.diagnostics.calibration, None);
}

#[tokio::test]
async fn permuted_samples_map_back_to_original_options() {
    let b = Scripted::new(4096, favour("support", 0.6));
    let mut s = triage();
    s["samples"] = json!(4);
    let d = engine(b, CalibrationMode::Off)
        .decide(DecideRequest {
            schema: schema(s),
            state: json!("x"),
            seed: 7,
        })
        .await
        .expect("decision");
    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "support");
    assert_eq!(team.aggregate.agreement, Some(1.0));
    assert!(team.aggregate.stderr.expect("n>1").abs() < 1e-9);
    assert_eq!(d.diagnostics.samples.n, 4);
    assert_eq!(d.diagnostics.samples.tops.len(), 4);
}

#[tokio::test]
async fn calibration_removes_a_constant_preference() {
    // The model always prefers billing 0.6 / support 0.3 / engineering 0.1, whatever
    // the state: calibration divides that out and leaves a uniform answer.
    let script: Box<Script> = Box::new(|tok, _p, labels| {
        let pref = [
            ("billing", 0.6),
            ("support", 0.3),
            ("engineering", 0.1),
            ("yes", 0.8),
            ("no", 0.2),
        ];
        labels
            .iter()
            .map(|l| {
                pref.iter()
                    .find(|(w, _)| l.contains(&tok.id(&format!("▁{w}"))))
                    .map_or(0.01, |(_, p)| *p)
            })
            .collect()
    });
    let b = Scripted::new(4096, script);
    let d = engine(b.clone(), CalibrationMode::On)
        .decide(DecideRequest {
            schema: schema(triage()),
            state: json!("anything"),
            seed: 42,
        })
        .await
        .expect("decision");
    let team = d.answers["team"].as_ref().expect("answered");
    for p in &team.aggregate.mean {
        assert!(
            (p - 1.0 / 3.0).abs() < 1e-9,
            "calibrated distribution is uniform: {p}"
        );
    }
    let raw = d.diagnostics.questions["team"]
        .uncalibrated
        .as_ref()
        .expect("raw kept");
    assert!((raw[0] - 0.6).abs() < 1e-9);
    assert_eq!(d.diagnostics.calibration.as_ref().map(Vec::len), Some(3));
}

#[tokio::test]
async fn calibration_priors_are_cached_between_decisions() {
    let b = Scripted::new(4096, favour("billing", 0.5));
    let e = engine(b.clone(), CalibrationMode::On);
    let req = DecideRequest {
        schema: schema(triage()),
        state: json!("one"),
        seed: 42,
    };
    e.decide(req.clone()).await.expect("first");
    let after_first = *b.calls.lock().expect("lock");
    let mut second = req;
    second.state = json!("two");
    let d = e.decide(second).await.expect("second");
    assert_eq!(
        *b.calls.lock().expect("lock") - after_first,
        1,
        "only the real read runs"
    );
    assert_eq!(d.diagnostics.timing.calibration_ms, 0.0);
}

#[tokio::test]
async fn ask_if_skips_and_later_stage_sees_prefill() {
    let b = Scripted::new(4096, favour("no", 0.9));
    let s = schema(json!({"questions": [
        {"id": "breach", "type": "boolean"},
        {"id": "action", "type": "choice", "options": ["revoke", "monitor"],
         "ask_if": {"breach": ["yes"]}}
    ]}));
    let d = engine(b, CalibrationMode::Off)
        .decide(DecideRequest {
            schema: s,
            state: json!("alert"),
            seed: 42,
        })
        .await
        .expect("decision");
    assert_eq!(
        d.answers["breach"]
            .as_ref()
            .expect("answered")
            .answer_name(),
        "no"
    );
    assert!(d.answers["action"].is_none());
    let skip = &d.diagnostics.skipped["action"];
    assert_eq!(skip.because, "breach");
    assert_eq!(skip.was.as_deref(), Some("no"));
    assert_eq!(skip.wanted, ["yes"]);
    let env = d.envelope();
    assert!(env["answers"]["action"].is_null());
}

#[tokio::test]
async fn state_longer_than_context_is_a_user_error() {
    let b = Scripted::new(32, favour("yes", 0.9));
    let err = engine(b, CalibrationMode::Off)
        .decide(DecideRequest {
            schema: schema(triage()),
            state: json!("a long state ".repeat(20)),
            seed: 42,
        })
        .await
        .expect_err("too long");
    assert!(err.is_user_error());
    assert!(matches!(err, EngineError::Schema(ref s) if s.field == "state"));
    assert!(err.to_string().contains("the context holds 32"));
}
