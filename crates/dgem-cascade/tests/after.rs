//! The post-read pipeline as the surfaces run it: request keys, cascade,
//! temperature, abstention and the calibration file, on hand-built decisions.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dgem_backend::Decision;
use dgem_cascade::{
    AfterRequest, AfterSetup, Stage2, Stage2Error, Stage2Reply, Stage2Request, CASCADE_FAILED,
};
use dgem_core::after::calibration::{
    policy_hash, CalibrationFile, Evaluation, FittedTemperature, HeldOut, PolicyRef,
    TypeCalibration, CALIBRATION_FORMAT,
};
use dgem_core::envelope::AnswerOut;
use dgem_core::readout::aggregate;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use indexmap::IndexMap;
use serde_json::{json, Map, Value};

fn schema(extra: Value) -> ValidSchema {
    let mut raw = json!({"questions": [
        {"id": "urgent", "type": "noul"},
        {"id": "team", "type": "choice", "options": ["billing", "support", "engineering"]}
    ]});
    if let (Some(r), Some(e)) = (raw.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    ValidSchema::from_value(&raw, &SchemaDefaults::default()).expect("valid")
}

/// `urgent` sure (0.95), `team` hesitant (0.4 / 0.35 / 0.25).
fn decision(s: &ValidSchema, sha: Option<&str>) -> Decision {
    let dists = [vec![0.95, 0.05], vec![0.4, 0.35, 0.25]];
    let answers: IndexMap<String, Option<AnswerOut>> = s
        .questions
        .iter()
        .zip(dists)
        .map(|(q, d)| {
            let labels = q.alternatives.iter().map(|a| a.name.clone()).collect();
            (
                q.id.clone(),
                Some(AnswerOut::new(q.clone(), labels, aggregate(&[d]))),
            )
        })
        .collect();
    let diagnostics = dgem_core::envelope::Diagnostics {
        model_sha256: sha.map(str::to_string),
        ..Default::default()
    };
    Decision {
        answers,
        diagnostics,
    }
}

fn keys(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("object")
}

/// A Stage 2 that answers `team` with a fixed reply and records its prompt.
#[derive(Debug, Default)]
struct Canned {
    prompts: Mutex<Vec<String>>,
}

#[async_trait]
impl Stage2 for Canned {
    fn name(&self) -> &str {
        "canned"
    }

    async fn resolve(&self, req: &Stage2Request) -> Result<Stage2Reply, Stage2Error> {
        self.prompts.lock().expect("lock").push(req.prompt.clone());
        let slots = keys(json!({"team": {
            "decision": "engineering", "confidence": 0.9, "explanation": "an outage"
        }}));
        Ok(Stage2Reply {
            model: "big-model".into(),
            slots,
        })
    }
}

#[tokio::test]
async fn cascade_then_temperature_on_stage1_answers_only() {
    let s = schema(json!({}));
    let mut d = decision(&s, None);
    let req = AfterRequest::from_object(
        &keys(json!({"cascade_mode": "entropy", "temperature": 2})),
        &s,
    )
    .expect("valid request");
    let canned = Arc::new(Canned::default());
    let setup = AfterSetup {
        stage2: Some(canned.clone()),
        calibration: None,
    };
    let done = setup
        .run(&mut d, &s, &json!("the API is down"), &[], &req)
        .await;
    let summary = done.cascade.as_ref().expect("cascade ran");
    assert_eq!(summary.escalated_count, 1, "only `team` is over 0.35 nats");
    assert_eq!(done.cascade_model().as_deref(), Some("big-model"));
    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "engineering");
    assert_eq!(team.temperature, None, "stage-2 answers are left as given");
    assert_eq!(team.aggregate.mean, vec![0.4, 0.35, 0.25]);
    let urgent = d.answers["urgent"].as_ref().expect("answered");
    // T = 2 on (0.95, 0.05): sqrt(0.95) / (sqrt(0.95) + sqrt(0.05)).
    let want = 0.95_f64.sqrt() / (0.95_f64.sqrt() + 0.05_f64.sqrt());
    assert!((urgent.aggregate.confidence - want).abs() < 1e-12);
    assert!(canned.prompts.lock().expect("lock")[0].contains("the API is down"));
    let extra = done.to_json().expect("keys");
    assert_eq!(
        extra["cascade"]["slots"]["team"]["stage2_value"],
        "engineering"
    );
}

#[tokio::test]
async fn no_provider_keeps_stage1_and_abstains_where_a_rule_asks() {
    let s = schema(json!({"abstain_below": {"team": 0.99}}));
    let mut d = decision(&s, None);
    let req = AfterRequest::from_object(&keys(json!({"cascade_mode": "entropy"})), &s)
        .expect("valid request");
    let done = AfterSetup::default()
        .run(&mut d, &s, &json!("the API is down"), &[], &req)
        .await;
    let summary = done.cascade.as_ref().expect("summary");
    assert!(summary.error.contains("configured"), "{}", summary.error);
    assert_eq!(summary.failed_slots(), vec!["team".to_string()]);
    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "billing", "stage 1 stands");
    assert_eq!(team.abstained.as_deref(), Some(CASCADE_FAILED));
    assert_eq!(done.abstained, 1);
    assert_eq!(d.answers["urgent"].as_ref().expect("a").abstained, None);
}

fn type_cal() -> TypeCalibration {
    TypeCalibration {
        slots: 0,
        rows: 0,
        temperature: None,
        unset_reason: Some("test".into()),
        fold_temperatures: Vec::new(),
        note: None,
        scores: None,
    }
}

fn file(s: &ValidSchema, sha: &str) -> CalibrationFile {
    CalibrationFile {
        format: CALIBRATION_FORMAT.into(),
        model_id: "m".into(),
        model_sha256: Some(sha.into()),
        policies: vec![PolicyRef {
            template: "t".into(),
            policy_hash: policy_hash(s),
        }],
        temperature: FittedTemperature::default()
            .with(dgem_core::schema::QuestionKind::Boolean, Some(3.0)),
        k: 5,
        rows: 10,
        fitted_at_unix: 0,
        held_out: HeldOut {
            method: Evaluation::CrossValidated,
            bootstrap_resamples: 1000,
            bootstrap_seed: 7,
            confidence_level: 0.95,
            types: dgem_core::schema::ByKind::from_fn(|_| type_cal()),
        },
    }
}

#[tokio::test]
async fn calibration_file_applies_to_its_model_and_policy_only() {
    let s = schema(json!({}));
    let setup = AfterSetup {
        stage2: None,
        calibration: Some(file(&s, "abc")),
    };
    let req = AfterRequest::default();
    let mut d = decision(&s, Some("ABC"));
    let done = setup.run(&mut d, &s, &json!("ticket"), &[], &req).await;
    assert!(done.calibration.as_ref().expect("used").applied);
    assert_eq!(
        d.answers["urgent"].as_ref().expect("a").temperature,
        Some(3.0)
    );
    // A request temperature wins over the file's.
    let mut d = decision(&s, Some("abc"));
    let req1 =
        AfterRequest::from_object(&keys(json!({"temperature": {"bool": 1}})), &s).expect("valid");
    setup.run(&mut d, &s, &json!("ticket"), &[], &req1).await;
    assert_eq!(d.answers["urgent"].as_ref().expect("a").temperature, None);
    // Another model: not applied, and the reason names both sha256 values.
    let mut d = decision(&s, Some("def"));
    let done = setup.run(&mut d, &s, &json!("ticket"), &[], &req).await;
    let used = done.calibration.expect("reported");
    assert!(!used.applied);
    assert!(
        used.reason.contains("abc") && used.reason.contains("def"),
        "{}",
        used.reason
    );
    assert_eq!(d.answers["urgent"].as_ref().expect("a").temperature, None);
    // Another policy: not applied either.
    let other = schema(json!({"instructions": "another policy"}));
    let mut d = decision(&other, Some("abc"));
    let done = setup.run(&mut d, &other, &json!("ticket"), &[], &req).await;
    assert!(!done.calibration.expect("reported").applied);
}

#[test]
fn request_keys_are_checked_against_the_policy() {
    let s = schema(json!({}));
    let e = AfterRequest::from_object(&keys(json!({"cascade_mode": "sometimes"})), &s)
        .expect_err("mode");
    assert_eq!(e.field, "cascade_mode");
    assert!(
        e.message.contains("sometimes") && e.message.contains("on_miss"),
        "{e}"
    );
    let e = AfterRequest::from_object(
        &keys(json!({"cascade_mode": "on_miss", "expected_answers": {"tema": "billing"}})),
        &s,
    )
    .expect_err("unknown slot");
    assert!(
        e.message.contains("tema") && e.message.contains("team"),
        "{e}"
    );
    // Regression: an expected answer no question can give escalated it on every call.
    let e = AfterRequest::from_object(
        &keys(json!({"cascade_mode": "on_miss", "expected_answers": {"team": "bogus"}})),
        &s,
    )
    .expect_err("not an option");
    assert_eq!(e.field, "expected_answers.team");
    assert!(
        e.message.contains("billing, support, engineering") && e.message.contains("bogus"),
        "{e}"
    );
    assert!(AfterRequest::from_object(
        &keys(json!({"cascade_mode": "on_miss", "expected_answers": {"team": "Billing", "urgent": true}})),
        &s,
    )
    .is_ok());
    let e = AfterRequest::from_object(&keys(json!({"abstain_above": {"urgnet": 0.5}})), &s)
        .expect_err("unknown id");
    assert!(e.message.contains("urgnet"), "{e}");
    let h = AfterRequest::from_object(&keys(json!({"abstain_above": 0.5})), &s).expect("ok");
    assert_eq!(h.after.abstain.rule_for("team").above, Some(0.5));
    assert!(AfterRequest::from_object(&Map::new(), &s)
        .expect("empty")
        .is_empty());
}

/// Regression: `cascade_threshold: 5` with `cascade_threshold_mode:
/// normalized` was taken, a gate no hesitation (H / ln K, in [0, 1]) can
/// reach, so the cascade never ran (found by a black-box run of `dgem serve`).
#[test]
fn a_normalized_threshold_above_one_is_refused() {
    let s = schema(json!({}));
    let e = AfterRequest::from_object(
        &keys(json!({"cascade_mode": "entropy", "cascade_threshold": 5,
                     "cascade_threshold_mode": "normalized"})),
        &s,
    )
    .expect_err("never reached");
    assert_eq!(e.field, "cascade_threshold");
    assert_eq!(
        e.message,
        "`cascade_threshold` must be at most 1 with `cascade_threshold_mode` normalized (a hesitation H / ln K is in [0, 1]; ≤ 0 uses the default 0.16). Given: 5"
    );
    // 1 itself, and 5 in nats, are thresholds a read can reach.
    for (t, mode) in [(1.0, "normalized"), (5.0, "nats")] {
        let req = AfterRequest::from_object(
            &keys(json!({"cascade_mode": "entropy", "cascade_threshold": t,
                         "cascade_threshold_mode": mode})),
            &s,
        )
        .expect("reachable");
        assert_eq!(req.cascade.expect("on").threshold, t);
    }
}
