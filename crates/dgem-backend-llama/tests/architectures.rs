//! Any llama.cpp text architecture through the embedded backend (issue 28
//! item 1), on tiny GGUFs this test writes (`dgem_testkit::gguf::tiny`: a few
//! hundred KB of seeded random weights in each architecture's real layout):
//! `llama` (untied head, Llama 3 template), `qwen2` (byte-level BPE vocabulary
//! without BOS, tied `Q8_0` head with an output bias, ChatML), `phi3` (untied, fused QKV, Phi-3 template), a
//! `llama` base model (tied, no template) and `granite` (a logit scale the
//! label rows do not know, so the load-time check sends it to the head).
//! Each loads through llama.cpp, gets the turns of its own template, reads
//! labels as llama.cpp's own head gives them, and decides with valid
//! distributions, bit-identical on repeat. With `DGEM_TEST_MODEL` set, the real default
//! (Gemma 3 270M base, no template) keeps exactly Gemma's turns.
#![allow(clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dgem_backend::{Backend, DecideRequest, SequenceRead, SlotQuery};
use dgem_backend_llama::{LlamaBackend, LlamaConfig, Readout, TurnsOrigin};
use dgem_core::prompt::ChatTurns;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{Engine, EngineConfig};
use dgem_testkit::gguf::tiny::{Arch, TinyModel};
use serde_json::{json, Value};

use common::Recorder;

/// One tiny model and what it must give.
struct Case {
    name: &'static str,
    model: TinyModel,
    turns: ChatTurns,
    origin: TurnsOrigin,
    /// The load-time check must send it to the head ([`Readout::FullHead`]).
    head: bool,
}

fn turns(user_open: &str, model_open: &str) -> ChatTurns {
    ChatTurns {
        user_open: user_open.into(),
        model_open: model_open.into(),
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "llama-untied-llama3",
            model: TinyModel::new(Arch::Llama),
            turns: turns(
                "<|start_header_id|>user<|end_header_id|>\n\n",
                "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
            ),
            origin: TurnsOrigin::Template,
            head: false,
        },
        Case {
            name: "qwen2-bpe-tied-q8-bias-chatml",
            model: TinyModel::new(Arch::Qwen2)
                .bpe(true)
                .tied(true)
                .quantized_embedding(true)
                .output_bias(true),
            turns: turns("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
            origin: TurnsOrigin::Template,
            head: false,
        },
        Case {
            name: "phi3-untied-phi3",
            model: TinyModel::new(Arch::Phi3),
            turns: turns("<|user|>\n", "<|end|>\n<|assistant|>\n"),
            origin: TurnsOrigin::Template,
            head: false,
        },
        Case {
            name: "llama-tied-base",
            model: TinyModel::new(Arch::Llama).tied(true).chat_template(None),
            turns: ChatTurns::plain(),
            origin: TurnsOrigin::Plain,
            head: false,
        },
        Case {
            name: "granite-untied-granite3",
            model: TinyModel::new(Arch::Granite),
            turns: turns(
                "<|start_of_role|>user<|end_of_role|>",
                "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>",
            ),
            origin: TurnsOrigin::Template,
            head: true,
        },
    ]
}

fn write(dir: &Path, case: &Case) -> PathBuf {
    let path = dir.join(format!("{}.gguf", case.name));
    case.model.write(&path);
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    assert!(size < 400_000, "{}: {size} bytes", case.name);
    path
}

fn load(path: &Path) -> LlamaBackend {
    let mut cfg = LlamaConfig::new(path, "tiny");
    cfg.context_size = 1024;
    cfg.n_threads = 1;
    LlamaBackend::load(cfg).expect("the tiny model loads")
}

/// A policy with one question of each type.
fn policy() -> ValidSchema {
    let v = json!({
        "instructions": "Route support tickets.",
        "questions": [
            {"id": "urgent", "type": "boolean", "instructions": "Does it need action today?"},
            {"id": "team", "type": "choice", "instructions": "Which team owns it?",
             "options": ["billing", "support", "sales"]},
            {"id": "mood", "type": "score", "instructions": "How upset is the user?",
             "levels": ["calm", "annoyed", "angry"]}
        ]
    });
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid policy")
}

/// The `answers` of one decision on `backend` (its envelope without timings).
async fn decide(backend: Arc<dyn Backend>) -> Value {
    let engine = Engine::new(backend, EngineConfig::default());
    let d = engine
        .decide(DecideRequest {
            schema: policy(),
            state: json!({"ticket": "I was charged twice, please refund the duplicate"}),
            seed: 42,
        })
        .await
        .expect("a decision");
    for (id, answer) in &d.answers {
        let a = answer.as_ref().expect("every question answered");
        let p = &a.aggregate.mean;
        assert_eq!(p.len(), a.labels.len(), "{id}");
        assert!(p.iter().all(|x| (0.0..=1.0).contains(x)), "{id}: {p:?}");
        let sum: f64 = p.iter().sum();
        assert!((sum - 1.0).abs() < 1e-9, "{id}: sums to {sum}");
    }
    d.envelope()["answers"].clone()
}

#[tokio::test]
async fn each_architecture_loads_with_the_turns_of_its_own_template() {
    let dir = tempfile::tempdir().expect("tempdir");
    for case in cases() {
        let backend = load(&write(dir.path(), &case));
        assert_eq!(backend.info().chat_turns, case.turns, "{}", case.name);
        assert_eq!(backend.turns_origin(), case.origin, "{}", case.name);
        let head = matches!(backend.readout(), Readout::FullHead { .. });
        assert_eq!(head, case.head, "{}: {:?}", case.name, backend.readout());
        // The template's markers are the vocabulary's special tokens.
        let tok = backend.tokenizer();
        for marker in ["<|im_start|>", "<|eot_id|>", "<|assistant|>"] {
            assert_eq!(tok.encode(marker).expect("encodes").len(), 1, "{marker}");
        }
        // SentencePiece models add BOS; the byte-level BPE one (as Qwen's) does not.
        assert_eq!(tok.bos_id().is_none(), case.model.bpe, "{}", case.name);
        assert_eq!(
            tok.encode(" billing").expect("encodes").len(),
            1,
            "{}",
            case.name
        );
    }
}

#[tokio::test]
async fn label_rows_read_what_llama_cpp_logits_give_with_tied_and_untied_heads() {
    let dir = tempfile::tempdir().expect("tempdir");
    for case in cases() {
        let backend = load(&write(dir.path(), &case));
        let tok = backend.tokenizer();
        let mut tokens: Vec<u32> = tok.bos_id().into_iter().collect();
        tokens.extend(tok.encode("the ticket is urgent: yes").expect("encodes"));
        let labels: Vec<Vec<u32>> = ["▁yes", "▁no", "billing", "<|end|>", "<0x41>"]
            .iter()
            .map(|w| tok.encode(&w.replace('▁', " ")).expect("encodes"))
            .map(|ids| vec![ids[0]])
            .collect();
        let read = SequenceRead {
            slots: vec![SlotQuery {
                pos: tokens.len(),
                labels,
                vocab: true,
            }],
            tokens,
            reuse_points: Vec::new(),
            policy_point: None,
        };
        let out = backend.forward(vec![read]).await.expect("a read");
        let slot = &out.sequences[0][0];
        // The head's full-vocabulary log-probabilities, restricted to the labels.
        let full = &common::vocab(slot).label_logprobs;
        let z = dgem_core::readout::log_sum_exp(full);
        let q8 = case.model.quantized_embedding;
        // An F32 head agrees to rounding; a Q8_0 one within ggml's 8-bit
        // quantization of the hidden state; read from the head, exactly.
        let tol = match (case.head, q8) {
            (true, _) => 1e-9,
            (false, true) => 2e-2,
            (false, false) => 1e-4,
        };
        for (rows, head) in slot.label_logprobs.iter().zip(full) {
            assert!(
                (rows - (head - z)).abs() <= tol,
                "{}: label rows {rows} vs head {}",
                case.name,
                head - z
            );
        }
    }
}

#[tokio::test]
async fn each_architecture_decides_with_valid_distributions_bit_identical_on_repeat() {
    let dir = tempfile::tempdir().expect("tempdir");
    for case in cases() {
        let path = write(dir.path(), &case);
        let recorder = Recorder::new(load(&path));
        let first = decide(recorder.clone()).await;
        // The prompt wears the model's own turns around the policy and state
        // (compared as tokens: Phi-3's markers strip the whitespace after them).
        let tok = recorder.tokenizer();
        let ids = |text: &str| tok.encode(text).expect("encodes");
        let sent = recorder.reads();
        let prompt = &sent
            .iter()
            .find(|read| tok.decode(&read.tokens).contains("charged twice"))
            .expect("a read of the state")
            .tokens;
        let mut opening: Vec<u32> = tok.bos_id().into_iter().collect();
        opening.extend(ids(&case.turns.user_open));
        assert!(prompt.starts_with(&opening), "{}", case.name);
        let closing = ids(&format!("</instructions>{}", case.turns.model_open));
        assert!(
            prompt
                .windows(closing.len())
                .any(|w| w == closing.as_slice()),
            "{}: {:?}",
            case.name,
            tok.decode(prompt)
        );
        // Again on the same backend (its KV cache now warm), and on a fresh load.
        let warm = decide(recorder.clone()).await;
        let fresh = decide(Arc::new(load(&path))).await;
        assert_eq!(first, warm, "{}: warm repeat", case.name);
        assert_eq!(first, fresh, "{}: fresh load", case.name);
    }
}

#[tokio::test]
async fn a_template_llama_cpp_does_not_recognise_falls_back_to_plain_turns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("odd-template.gguf");
    let odd = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
    TinyModel::new(Arch::Llama)
        .chat_template(Some(odd))
        .write(&path);
    let backend = load(&path);
    assert_eq!(backend.info().chat_turns, ChatTurns::plain());
    assert_eq!(backend.turns_origin(), TurnsOrigin::Plain);
}

/// Runs only with `DGEM_TEST_MODEL`: the small model's Gemma 3 270M base GGUF has no
/// chat template, and keeps exactly Gemma's turns (and the label-row readout).
#[tokio::test]
async fn gemma3_base_without_a_template_keeps_gemma_turns() {
    let Some(path) = common::model_path("gemma3_base_without_a_template_keeps_gemma_turns") else {
        return;
    };
    let backend = common::backend(&path);
    assert_eq!(backend.info().chat_turns, ChatTurns::gemma());
    assert_eq!(backend.turns_origin(), TurnsOrigin::GemmaFamily);
    let Readout::LabelRows {
        max_error,
        largest_logit,
    } = backend.readout()
    else {
        panic!(
            "Gemma 3 must keep the label-row readout: {:?}",
            backend.readout()
        );
    };
    eprintln!(
        "label rows vs llama.cpp logits on Gemma 3 270M: max error {max_error:.5}, largest logit {largest_logit:.3}"
    );
}
