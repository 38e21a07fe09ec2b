use std::time::Duration;

use super::*;
use crate::error::Stage2Error;
use crate::options::{CascadeMode, PriorMode};
use crate::testutil::{decision, schema, Canned};
use serde_json::json;

/// team hesitant (H ≈ 0.90 nats), urgent sure (H ≈ 0.06), sev skipped.
fn fixture() -> (ValidSchema, Decision) {
    let s = schema();
    let d = decision(
        &s,
        vec![
            ("urgent", Some(vec![0.01, 0.99])),
            ("team", Some(vec![0.6, 0.3, 0.1])),
            ("sev", None),
        ],
    );
    (s, d)
}

fn opts() -> CascadeOptions {
    CascadeOptions::entropy()
}

#[tokio::test]
async fn writes_back_escalated_slots_and_summarizes_all() {
    let (s, mut d) = fixture();
    let p = Canned::answering(
        "big-model",
        json!({"team": {"decision": "engineering", "confidence": 0.9, "explanation": "A crash."}}),
    );
    let state = json!("the app crashes on login");
    let stage1 = d.answers["team"]
        .as_ref()
        .expect("answered")
        .aggregate
        .clone();
    let sum = cascade(&mut d, &s, &state, &[], &opts(), &p).await;
    assert!(sum.triggered);
    assert_eq!(sum.escalated_count, 1);
    assert_eq!(sum.total_slots, 2);
    assert_eq!(sum.model, "big-model");
    assert_eq!(sum.error, "");
    assert_eq!(sum.failed_slots(), Vec::<String>::new());
    assert_eq!(sum.resolved_slots(), ["team"]);

    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "engineering");
    assert_eq!(team.aggregate.confidence, 0.9);
    assert_eq!(
        team.aggregate.mean, stage1.mean,
        "Stage-1 distribution kept"
    );
    assert_eq!(team.aggregate.entropy, stage1.entropy);
    let r = team.resolved.as_ref().expect("resolved");
    assert_eq!(
        (r.model.as_str(), r.stage1_top, r.stage1_confidence),
        ("big-model", 0, stage1.confidence)
    );
    assert!((stage1.confidence - 0.6).abs() < 1e-12);
    assert_eq!(r.explanation, "A crash.");
    let urgent = d.answers["urgent"].as_ref().expect("answered");
    assert!(urgent.resolved.is_none());
    assert!(d.answers["sev"].is_none());

    // The request covered only the escalated slot.
    let seen = p.seen.lock().expect("lock");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].response_schema["required"], json!(["team"]));
    assert!(seen[0].prompt.contains("the app crashes on login"));
    assert_eq!(seen[0].timeout, Duration::from_secs(25));

    let v = sum.to_value();
    let keys: Vec<&String> = v.as_object().expect("obj").keys().collect();
    assert_eq!(
        keys,
        [
            "mode",
            "model",
            "threshold",
            "threshold_mode",
            "triggered",
            "escalated_count",
            "total_slots",
            "latency_ms",
            "prior",
            "image_count",
            "error",
            "slots"
        ]
    );
    assert_eq!(v["mode"], "entropy");
    assert_eq!(v["threshold_mode"], "nats");
    assert_eq!(v["prior"], "soft");
    assert_eq!(v["threshold"], 0.35);
    let h = stage1.entropy;
    assert!((h - 0.8979).abs() < 1e-4, "{h}");
    assert_eq!(
        v["slots"]["team"],
        json!({
            "question_id": "team", "escalated": true,
            "reason": format!("entropy (H={h:.4} >= 0.35)"),
            "stage1_value": "billing", "stage1_confidence": stage1.confidence,
            "stage1_entropy": h, "stage1_normalized_entropy": h / 3f64.ln(),
            "stage2_value": "engineering", "stage2_confidence": 0.9,
            "explanation": "A crash."
        })
    );
    let urgent = v["slots"]["urgent"].as_object().expect("slot");
    assert_eq!(urgent["escalated"], false);
    assert_eq!(urgent["reason"], "");
    assert_eq!(urgent["stage1_value"], "no");
    assert!(!urgent.contains_key("stage2_value"));
    assert!(!urgent.contains_key("explanation"));
    assert!(
        v["slots"].get("sev").is_none(),
        "skipped slots are not listed"
    );
}

#[tokio::test]
async fn nothing_escalated_means_no_call() {
    let (s, mut d) = fixture();
    let p = Canned::answering("m", json!({}));
    let mut o = opts();
    o.threshold = 5.0;
    o.model = "asked-model".into();
    let sum = cascade(&mut d, &s, &json!("x"), &[], &o, &p).await;
    assert!(!sum.triggered);
    assert_eq!(sum.escalated_count, 0);
    assert_eq!(sum.model, "asked-model");
    assert_eq!(sum.latency_ms, 0);
    assert!(p.seen.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn out_of_enum_answers_are_not_written_back() {
    let (s, mut d) = fixture();
    let mut o = opts();
    o.threshold = 0.01; // both answered slots escalate
    let p = Canned::answering(
        "m",
        json!({
            "team": {"decision": "marketing", "confidence": 0.8, "explanation": "?"},
            "urgent": {"decision": "maybe", "confidence": 0.8, "explanation": "?"}
        }),
    );
    let sum = cascade(&mut d, &s, &json!("x"), &[], &o, &p).await;
    assert_eq!(sum.escalated_count, 2);
    assert_eq!(
        sum.slots["urgent"].error.as_deref(),
        Some("stage-2 answered \"maybe\", allowed: [yes, no]")
    );
    assert_eq!(
        sum.slots["team"].error.as_deref(),
        Some("stage-2 answered \"marketing\", allowed: [billing, engineering, sales]")
    );
    assert_eq!(sum.failed_slots(), ["urgent", "team"]);
    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "billing");
    assert!(team.resolved.is_none());
    assert_eq!(
        sum.to_value()["slots"]["team"]["error"],
        sum.slots["team"].error.clone().unwrap_or_default()
    );
}

#[tokio::test]
async fn confidence_outside_unit_interval_falls_back() {
    for (given, want) in [
        (json!(0), 0.95),
        (json!(90), 0.95),
        (json!("high"), 0.95),
        (json!(1.0), 1.0),
    ] {
        let (s, mut d) = fixture();
        let p = Canned::answering(
            "m",
            json!({"team": {"decision": " Sales ", "confidence": given, "explanation": "x"}}),
        );
        let sum = cascade(&mut d, &s, &json!("x"), &[], &opts(), &p).await;
        let team = d.answers["team"].as_ref().expect("answered");
        assert_eq!(team.answer_name(), "sales");
        assert_eq!(team.aggregate.confidence, want, "{given}");
        assert_eq!(sum.slots["team"].stage2_confidence, Some(want));
    }
}

#[tokio::test]
async fn boolean_json_and_missing_slots() {
    let s = schema();
    let mut d = decision(
        &s,
        vec![
            ("urgent", Some(vec![0.5, 0.5])),
            ("team", Some(vec![0.4, 0.3, 0.3])),
        ],
    );
    let p = Canned::answering(
        "m",
        json!({"urgent": {"decision": false, "confidence": 0.7}}),
    );
    let sum = cascade(&mut d, &s, &json!("x"), &[], &opts(), &p).await;
    let urgent = d.answers["urgent"].as_ref().expect("answered");
    assert_eq!(urgent.answer_name(), "no");
    assert_eq!(
        urgent.resolved.as_ref().map(|r| r.explanation.as_str()),
        Some("")
    );
    assert_eq!(
        sum.slots["team"].error.as_deref(),
        Some("stage-2 gave no answer for this slot")
    );
    assert_eq!(sum.failed_slots(), ["team"]);
}

#[tokio::test]
async fn provider_errors_keep_stage_one() {
    let (s, mut d) = fixture();
    let before = d.answers.clone();
    let p = Canned {
        reply: Err(Stage2Error::Status {
            provider: "canned".into(),
            model: "m".into(),
            status: 503,
            body: "overloaded".into(),
        }),
        delay: Duration::ZERO,
        seen: Default::default(),
    };
    let mut o = opts();
    o.model = "m".into();
    let sum = cascade(&mut d, &s, &json!("x"), &[], &o, &p).await;
    assert_eq!(sum.error, "canned: model m answered HTTP 503: overloaded");
    assert_eq!(sum.model, "m");
    assert!(sum.triggered);
    assert_eq!(sum.failed_slots(), ["team"]);
    assert_eq!(d.answers, before);
}

#[tokio::test(start_paused = true)]
async fn a_hung_provider_hits_the_deadline() {
    let (s, mut d) = fixture();
    let before = d.answers.clone();
    let mut p = Canned::answering("m", json!({"team": {"decision": "sales"}}));
    p.delay = Duration::from_secs(3600);
    let mut o = opts();
    o.deadline = Some(Duration::from_millis(200));
    let sum = cascade(&mut d, &s, &json!("x"), &[], &o, &p).await;
    assert_eq!(sum.error, "stage-2 call timed out after 200 ms (deadline)");
    assert_eq!(d.answers, before);
    // With images the default deadline is 90 s.
    let (s, mut d) = fixture();
    let sum = cascade(
        &mut d,
        &s,
        &json!("x"),
        &["data:image/png;base64,AA==".into()],
        &opts(),
        &p,
    )
    .await;
    assert_eq!(
        sum.error,
        "stage-2 call timed out after 90000 ms (deadline)"
    );
    assert_eq!(sum.image_count, 1);
}

#[tokio::test]
async fn on_miss_escalates_misses_and_clears_abstention() {
    let (s, mut d) = fixture();
    if let Some(Some(a)) = d.answers.get_mut("urgent") {
        a.abstained = Some("hesitation 0.93 ≥ 0.50".into());
    }
    let mut o = opts();
    o.mode = CascadeMode::OnMiss;
    o.prior = PriorMode::Full;
    o.threshold = 5.0; // entropy gate never fires here
    o.expected.insert("urgent".into(), "yes".into());
    let p = Canned::answering(
        "m",
        json!({"urgent": {"decision": "yes", "confidence": 0.8, "explanation": "outage"}}),
    );
    let sum = cascade(&mut d, &s, &json!("x"), &[], &o, &p).await;
    assert_eq!(
        sum.slots["urgent"].reason,
        "stage1_miss (dgemma=\"no\" != expected=\"yes\")"
    );
    assert!(!sum.slots["team"].escalated);
    assert_eq!(sum.to_value()["mode"], "on_miss");
    let urgent = d.answers["urgent"].as_ref().expect("answered");
    assert_eq!(urgent.answer_name(), "yes");
    assert_eq!(urgent.abstained, None);
    let seen = p.seen.lock().expect("lock");
    assert!(
        seen[0].prompt.contains("escalated because stage1_miss"),
        "{}",
        seen[0].prompt
    );
}
