//! The state's head as a reuse point (`schema_first`): decisions of one
//! policy usually send states of one shape, `{"ticket": "…"}`, so the text up
//! to the first value (the policy, then `{"ticket": "`) is shared by every
//! decision and a new state's read starts at its first value. The engine
//! marks that point; the embedded backend keeps the prefix there in memory
//! and on disk beside the policy's own point, and a new process loads the
//! longer one when the next state has the same first key, the policy's point
//! when it has another. Every load gives a cold read's bits. Runs when
//! `DGEM_TEST_MODEL` points at a Gemma 3 GGUF.

mod common;

use std::sync::Arc;

use dgem_backend::{Backend, SequenceRead};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{CalibrationMode, DecideRequest, Engine, EngineConfig};
use serde_json::{json, Value};

use common::{backend_with_store as load, model_path, Recorder};

/// An engine over `recorder`: no order debiasing, no calibration, so a
/// decision is one read.
fn engine(recorder: &Arc<Recorder>) -> Engine {
    Engine::new(
        recorder.clone() as Arc<dyn Backend>,
        EngineConfig {
            calibration: CalibrationMode::Off,
            order_debias: dgem_core::order::OrderDebias::Off,
            ..EngineConfig::default()
        },
    )
}

/// The one read `engine` sends for `state` under a `schema_first` policy of
/// one yes/no question.
async fn read_of(engine: &Engine, recorder: &Recorder, state: Value) -> SequenceRead {
    let schema = ValidSchema::from_value(
        &json!({
            "instructions": "Sort customer tickets. Answer from the ticket text only.",
            "layout": "schema_first",
            "questions": [{"id": "urgent", "type": "boolean",
                           "instructions": "Does this ticket need someone today?"}],
        }),
        &SchemaDefaults::default(),
    )
    .expect("a valid schema");
    let before = recorder.reads().len();
    engine
        .decide(DecideRequest {
            schema,
            state,
            seed: 42,
        })
        .await
        .expect("a decision");
    let reads = recorder.reads();
    assert_eq!(reads.len(), before + 1, "one read");
    reads.into_iter().last().expect("one read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_state_of_the_same_shape_is_read_from_its_first_value_in_a_new_process() {
    let Some(path) =
        model_path("a_new_state_of_the_same_shape_is_read_from_its_first_value_in_a_new_process")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Recorder::new(load(&path, Some(dir.path())));
    let e = engine(&first);
    let a = read_of(
        &e,
        &first,
        json!({"ticket": "I was charged twice this morning."}),
    )
    .await;
    let b = read_of(
        &e,
        &first,
        json!({"ticket": "The export button does nothing."}),
    )
    .await;
    let other = read_of(
        &e,
        &first,
        json!({"message": "The export button does nothing."}),
    )
    .await;
    // Reuse points: the policy's end, then the state's head a few tokens on.
    let (policy, head) = match a.reuse_points[..] {
        [p, h, ..] => (p, h),
        _ => panic!("two reuse points: {:?}", a.reuse_points),
    };
    assert!(head > policy && head - policy <= 5, "{policy} then {head}");
    assert_eq!(a.policy_point, Some(head));
    assert_eq!(b.reuse_points[..2], a.reuse_points[..2]);
    assert_eq!(b.tokens[..head], a.tokens[..head]);
    assert_eq!(other.reuse_points[0], policy);
    assert_eq!(other.tokens[..policy], a.tokens[..policy]);
    assert_ne!(other.tokens[..head], a.tokens[..head]);

    // The engine's decisions wrote the policy's prefix, the `ticket`
    // head's and the `message` head's.
    let kept = std::fs::read_dir(dir.path()).expect("store").count();
    assert_eq!(kept, 3, "two heads after one policy prefix");
    drop((e, first));
    for f in std::fs::read_dir(dir.path()).expect("store") {
        let f = f.expect("entry").path();
        let len = std::fs::metadata(&f).expect("meta").len();
        assert!(len > 1000, "{len} bytes in {f:?}");
    }
    // Keep the policy's and the `ticket` head's only: a new process first.
    let only = tempfile::tempdir().expect("tempdir");
    let fresh = load(&path, Some(only.path()));
    fresh.forward(vec![a]).await.expect("cold a");
    drop(fresh);
    assert_eq!(std::fs::read_dir(only.path()).expect("store").count(), 2);
    let dir = only;

    let plain = load(&path, None);
    let cold_b = plain.forward(vec![b.clone()]).await.expect("cold b");
    let cold_other = plain.forward(vec![other.clone()]).await.expect("cold");
    drop(plain);

    // A new process: the same first key loads the longer prefix, another
    // key the policy's; both with the cold bits.
    // Regression (review): loading the head's file refreshed only that
    // file, so the policy's own prefix aged and was pruned first. Age it,
    // and see the next load make it recent again.
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path())
        .expect("store")
        .map(|e| e.expect("entry").path())
        .collect();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(86_400);
    for f in &files {
        std::fs::File::options()
            .append(true)
            .open(f)
            .and_then(|h| h.set_modified(old))
            .expect("age the file");
    }
    let second = load(&path, Some(dir.path()));
    let warm = second.forward(vec![b]).await.expect("same key");
    assert_eq!(warm.stats.cached_tokens, head, "{:?}", warm.stats);
    assert_eq!(warm.sequences, cold_b.sequences, "same bits as cold");
    drop(second);
    for f in &files {
        let modified = std::fs::metadata(f)
            .and_then(|m| m.modified())
            .expect("mtime");
        assert!(modified > old, "{f:?} still looks unused");
    }
    let third = load(&path, Some(dir.path()));
    let warm = third.forward(vec![other]).await.expect("another key");
    assert_eq!(warm.stats.cached_tokens, policy, "{:?}", warm.stats);
    assert_eq!(warm.sequences, cold_other.sequences, "same bits as cold");
}
