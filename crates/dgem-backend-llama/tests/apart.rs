//! Questions read apart on the embedded model (questions must not see each
//! other). Under `isolate: auto` and `document_first` a causal read gives
//! every question of a schema that is not chained a prompt listing only
//! itself, and every such prompt goes on from the KV prefix of the state and
//! the question block's head (the lead sentence and the policy's
//! instructions), decoded once and reused exactly where the head ends. So an answer does not
//! move when the request's other questions are reordered, added or removed,
//! or when it is asked alone: the bar is 0.05 of total variation; these reads
//! (one per question, the default `samples`) give the same bits. Runs when
//! `DGEM_TEST_MODEL` points at a Gemma 3 GGUF.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use dgem_backend::{Backend, SequenceRead};
use dgem_backend_llama::{LlamaBackend, LlamaConfig};
use dgem_core::prompt::{chat_prompt, head_prefix_len, state_text, system_head};
use dgem_core::schema::{Layout, SchemaDefaults, ValidSchema};
use dgem_engine::{DecideRequest, Engine, EngineConfig};
use serde_json::{json, Value};

use common::{model_path, Recorder};

/// Four questions of every scoring path: yes/no, a choice whose options have
/// first tokens of their own, an ordinal score, and a choice whose options
/// share their first word (scored by each option's whole tokenization).
fn question(id: &str) -> Value {
    match id {
        "urgent" => json!({"id": "urgent", "type": "boolean",
            "instructions": "Does this ticket need someone today?"}),
        "team" => json!({"id": "team", "type": "choice", "instructions": "Which team owns it?",
            "options": [{"name": "billing", "description": "charges and refunds"},
                        {"name": "support", "description": "how-to questions"},
                        {"name": "engineering", "description": "outages and bugs"}]}),
        "sentiment" => json!({"id": "sentiment", "type": "score",
            "instructions": "How upset does the customer sound?",
            "levels": ["calm", "annoyed", "furious"]}),
        _ => json!({"id": "surface", "type": "choice", "instructions": "Where did it happen?",
            "options": ["mobile app", "mobile website", "desktop app"]}),
    }
}

const INSTRUCTIONS: &str = "Sort customer tickets. Answer from the ticket text only.";

fn schema(ids: &[&str], isolate: &str) -> ValidSchema {
    let v = json!({
        "instructions": INSTRUCTIONS,
        "questions": ids.iter().map(|id| question(id)).collect::<Vec<_>>(),
        "isolate": isolate,
    });
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("a valid schema")
}

/// Per question, its probabilities; and the questions read alone.
async fn decide(
    engine: &Engine,
    ids: &[&str],
    isolate: &str,
    state: &str,
) -> (BTreeMap<String, Vec<f64>>, Vec<String>) {
    let d = engine
        .decide(DecideRequest {
            schema: schema(ids, isolate),
            state: json!({ "ticket": state }),
            seed: 42,
        })
        .await
        .expect("a decision");
    let probs = d
        .answers
        .iter()
        .map(|(id, a)| {
            let a = a.as_ref().expect("every question answered");
            (id.clone(), a.aggregate.mean.clone())
        })
        .collect();
    (probs, d.diagnostics.isolated.clone())
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[tokio::test]
async fn an_answer_read_apart_does_not_move_when_other_questions_change() {
    let Some(path) = model_path("an_answer_read_apart_does_not_move_when_other_questions_change")
    else {
        return;
    };
    let store = tempfile::tempdir().expect("tempdir");
    let mut cfg = LlamaConfig::new(&path, "test-model");
    cfg.context_size = 1024;
    cfg.n_threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    cfg.kv_store = Some(store.path().to_path_buf());
    let recorder = Recorder::new(LlamaBackend::load(cfg).expect("model loads"));
    let backend: Arc<dyn Backend> = recorder.clone();
    let engine = Engine::new(backend, EngineConfig::default());
    let state = "The mobile app crashes every time I open my invoices, and I was charged twice.";
    // Where every question's prompt of a decision on `state` forks: after the
    // state and the question block's head, in tokens.
    let tok = recorder.tokenizer();
    let text = state_text(&json!({ "ticket": state }));
    let head = system_head(None, Some(INSTRUCTIONS));
    let turns = &recorder.info().chat_turns;
    let len = head_prefix_len(turns, Layout::DocumentFirst, &text, &head).expect("a head point");
    let prompt = chat_prompt(turns, Layout::DocumentFirst, &head, &text);
    let mut fork: Vec<u32> = tok.bos_id().into_iter().collect();
    fork.extend(tok.encode(&prompt[..len]).expect("tokens"));
    let all = ["urgent", "team", "sentiment", "surface"];
    let mut alone = BTreeMap::new();
    for id in all {
        let (p, isolated) = decide(&engine, &[id], "auto", state).await;
        assert_eq!(isolated, vec![id.to_owned()]);
        alone.insert(id.to_owned(), p[id].clone());
    }
    // Every read of the state (not the content-free reads of calibration)
    // has the head's end as a reuse point, and reads of different questions
    // share the prompt up to it.
    let reads = recorder.reads();
    let of_state: Vec<&SequenceRead> = reads
        .iter()
        .filter(|r| r.tokens.starts_with(&fork))
        .collect();
    assert!(of_state.len() >= all.len(), "{} reads", of_state.len());
    for read in &of_state {
        assert!(
            read.reuse_points.contains(&fork.len()),
            "{:?} lacks the head's end {}",
            read.reuse_points,
            fork.len()
        );
    }
    let requests: [&[&str]; 3] = [
        &all,
        &["surface", "sentiment", "team", "urgent"],
        &["sentiment", "urgent"],
    ];
    for ids in requests {
        let (p, isolated) = decide(&engine, ids, "auto", state).await;
        assert_eq!(isolated.len(), ids.len(), "every question is read apart");
        for id in ids {
            let moved = max_diff(&p[*id], &alone[*id]);
            assert!(
                moved <= 1e-9,
                "{id} moved by {moved} in {ids:?}: {:?} against {:?} alone",
                p[*id],
                alone[*id]
            );
        }
    }
    // The state's and the head's ends are reuse points kept in memory only: a
    // `document_first` read has no policy point, so nothing of a state is
    // written to the disk store (it holds policy prefixes).
    let kept = std::fs::read_dir(store.path()).expect("store").count();
    assert_eq!(kept, 0, "no state prefix on disk");
    // `isolate: none` still reads the questions on one shared prompt.
    let (joint, isolated) = decide(&engine, &all, "none", state).await;
    assert!(isolated.is_empty(), "{isolated:?}");
    assert_eq!(joint.len(), all.len());
}
