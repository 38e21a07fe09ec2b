//! The gateway as a composite `Decider`: a decision routed through it comes back
//! with the same probabilities as the engine gives directly, and the wire
//! schema re-validates to the same policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideRequest, Decider};
use dgem_gateway::{Gateway, Kind, Replica};
use dgem_testkit::{scripts, ScriptedBackend};
use serde_json::json;

fn schema() -> ValidSchema {
    let raw = json!({"instructions": "Sort tickets.", "samples": 2, "questions": [
        {"id": "urgent", "type": "boolean", "criteria": {"true": "today", "false": "later"}},
        {"id": "team", "type": "choice", "options": [{"name": "billing", "description": "money"}, "support"]},
        {"id": "mood", "type": "score", "levels": ["calm", "angry"], "depends_on": ["urgent"]}
    ]});
    ValidSchema::from_value(&raw, &SchemaDefaults::default()).unwrap()
}

#[test]
fn wire_schema_round_trips() {
    let s = schema();
    let again = ValidSchema::from_value(&s.to_wire(), &SchemaDefaults::default()).unwrap();
    // The wire form always states its layout (so a peer keeps the reading
    // the caller chose); the gateway leaves it out when no one stated one.
    assert!(again.layout_stated);
    let mut stated = s.clone();
    stated.layout_stated = true;
    assert_eq!(again, stated);
}

#[tokio::test]
async fn remote_decision_matches_the_engine() {
    let engine = Arc::new(dgem_testkit::engine(ScriptedBackend::new(
        scripts::want_marker(0.8),
    )));
    let direct = engine
        .decide(DecideRequest {
            schema: schema(),
            state: json!("charged twice"),
            seed: 42,
        })
        .await
        .unwrap();
    let gw = Arc::new(Gateway::single(
        "local",
        Kind::Local,
        Replica::in_process(engine),
    ));
    let remote: Arc<dyn Decider> = gw;
    let routed = remote
        .decide(DecideRequest {
            schema: schema(),
            state: json!("charged twice"),
            seed: 42,
        })
        .await
        .unwrap();
    assert_eq!(
        routed.answers.keys().collect::<Vec<_>>(),
        ["urgent", "team", "mood"]
    );
    // Every diagnostics key comes through (stages, chunks, per-question).
    assert_eq!(routed.diagnostics.stages, direct.diagnostics.stages);
    assert_eq!(routed.diagnostics.chunks, direct.diagnostics.chunks);
    assert_eq!(
        routed.diagnostics.questions.keys().collect::<Vec<_>>(),
        direct.diagnostics.questions.keys().collect::<Vec<_>>()
    );
    for (id, a) in &direct.answers {
        let (a, b) = (a.as_ref().unwrap(), routed.answers[id].as_ref().unwrap());
        assert_eq!(a.answer_name(), b.answer_name(), "{id}");
        for (x, y) in a.aggregate.mean.iter().zip(&b.aggregate.mean) {
            assert!((x - y).abs() < 1e-9, "{id}: {x} vs {y}");
        }
    }
    assert_eq!(remote.health().await, dgem_backend::Health::Ready);
    assert_eq!(remote.info().runtime, "dgem-gateway");
}
