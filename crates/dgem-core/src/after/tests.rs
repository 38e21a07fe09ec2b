use serde_json::json;

use super::*;
use crate::readout::aggregate;
use crate::schema::{SchemaDefaults, ValidSchema};

fn schema(v: Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid")
}

fn answers(s: &ValidSchema, dists: &[Vec<f64>]) -> IndexMap<String, Option<AnswerOut>> {
    s.questions
        .iter()
        .zip(dists)
        .map(|(q, d)| {
            let labels = q.alternatives.iter().map(|a| a.name.clone()).collect();
            (
                q.id.clone(),
                Some(AnswerOut::new(
                    q.clone(),
                    labels,
                    aggregate(std::slice::from_ref(d)),
                )),
            )
        })
        .collect()
}

#[test]
fn the_policy_carries_its_post_read_settings() {
    let s = schema(json!({
        "temperature": {"choice": 2.0},
        "abstain_above": 0.9,
        "questions": [
            {"id": "urgent", "type": "noul", "abstain_below": 0.7},
            {"id": "team", "type": "choice", "options": ["a", "b"]}
        ]
    }));
    assert_eq!(
        s.after.temperature.of(crate::schema::QuestionKind::Choice),
        Some(2.0)
    );
    assert_eq!(
        s.after.temperature.of(crate::schema::QuestionKind::Boolean),
        None
    );
    assert_eq!(s.after.abstain.rule_for("urgent").below, Some(0.7));
    assert_eq!(s.after.abstain.rule_for("urgent").above, Some(0.9));
    assert_eq!(s.after.abstain.rule_for("team").below, None);
}

#[test]
fn bad_policy_settings_are_schema_errors_naming_the_key() {
    let e = ValidSchema::from_value(
        &json!({"temperature": 30, "questions": [{"id": "u", "type": "noul"}]}),
        &SchemaDefaults::default(),
    )
    .expect_err("too hot");
    assert_eq!(e.field, "temperature");
    let e = ValidSchema::from_value(
        &json!({"questions": [{"id": "u", "type": "noul", "abstain_above": 2}]}),
        &SchemaDefaults::default(),
    )
    .expect_err("range");
    assert_eq!(e.field, "questions[0].abstain_above.u");
    assert!(e.message.contains("0 to 1"), "{e}");
}

#[test]
fn temperature_then_abstention_and_counts() {
    let s = schema(json!({"questions": [
        {"id": "urgent", "type": "noul"},
        {"id": "team", "type": "choice", "options": ["a", "b", "c"]}
    ]}));
    let mut a = answers(&s, &[vec![0.9, 0.1], vec![0.5, 0.3, 0.2]]);
    let mut after = AfterRead {
        temperature: Temperature::uniform(2.0),
        ..AfterRead::default()
    };
    after
        .abstain
        .set(
            Threshold::Above,
            "abstain_above",
            &json!(0.9),
            &["urgent", "team"],
        )
        .expect("rule");
    let n = apply(&mut a, &after, &json!("a long enough ticket"));
    let urgent = a["urgent"].as_ref().expect("answered");
    // T = 2 takes (0.9, 0.1) to (3/4, 1/4): sqrt(0.9) / (sqrt(0.9) + sqrt(0.1)).
    assert!((urgent.aggregate.confidence - 0.75).abs() < 1e-12);
    assert_eq!(urgent.temperature, Some(2.0));
    assert_eq!(urgent.abstained, None);
    let team = a["team"].as_ref().expect("answered");
    assert_eq!(team.aggregate.top, 0);
    let reason = team.abstained.as_deref().expect("withheld");
    assert!(reason.starts_with("hesitation 0.9"), "{reason}");
    assert_eq!(n, 1);
    let json = team.to_chat_json();
    assert_eq!(json["abstained"], true);
    assert_eq!(json["choice"], "a", "the distribution and argmax are kept");
}

#[test]
fn stage2_answers_keep_what_stage2_said() {
    let s = schema(json!({"questions": [{"id": "urgent", "type": "noul"}]}));
    let mut a = answers(&s, &[vec![0.55, 0.45]]);
    if let Some(Some(u)) = a.get_mut("urgent") {
        u.resolve(1, 0.8, "big-model", "no sign of urgency");
    }
    let after = AfterRead {
        temperature: Temperature::uniform(3.0),
        ..AfterRead::default()
    };
    apply(&mut a, &after, &json!("ticket text"));
    let u = a["urgent"].as_ref().expect("answered");
    assert_eq!(u.temperature, None);
    assert_eq!(u.aggregate.mean, vec![0.55, 0.45]);
    let json = u.to_chat_json();
    assert_eq!(json["label"], "no");
    assert_eq!(json["confidence"], 0.8);
    assert!((json["noul"].as_f64().expect("noul") - 0.2).abs() < 1e-12);
    assert_eq!(json["resolved_by"], "big-model");
}

#[test]
fn low_information_states_abstain_only_when_a_rule_is_set() {
    let s = schema(json!({"questions": [{"id": "urgent", "type": "noul"}]}));
    let mut a = answers(&s, &[vec![0.99, 0.01]]);
    assert_eq!(apply(&mut a, &AfterRead::default(), &json!("?")), 0);
    let mut after = AfterRead::default();
    after
        .abstain
        .set(Threshold::Below, "abstain_below", &json!(0.5), &["urgent"])
        .expect("rule");
    assert_eq!(apply(&mut a, &after, &json!(" ?! ")), 1);
    let u = a["urgent"].as_ref().expect("answered");
    assert_eq!(u.abstained.as_deref(), Some(LOW_INFORMATION));
    assert!(is_low_information(&json!("..")));
    // Regression: the keys of an object state counted as text, so a
    // template's `{"ticket": "?"}` was never low-information.
    assert!(is_low_information(&json!({"ticket": "?"})));
    assert!(is_low_information(&json!({"ticket": "", "note": ["."]})));
    assert!(!is_low_information(&json!({"amount": 120})));
    // Regression: the chat route's state is the JSON text itself.
    assert!(is_low_information(&json!("{\"ticket\": \"?\"}")));
    assert!(!is_low_information(&json!("{\"ticket\": \"refund me\"}")));
    assert!(!is_low_information(
        &json!([{"type": "image_url", "image_url": {"url": "data:,"}}])
    ));
    assert!(!is_low_information(&json!({"ticket": "refund please"})));
}

/// Regression: a score answer Stage 2 resolved kept Stage 1's expected
/// position in `score` (2.52, "annoyed") next to Stage 2's level ("calm").
#[test]
fn a_stage2_score_reports_its_own_level_position() {
    let s = schema(json!({"questions": [
        {"id": "mood", "type": "score", "levels": ["calm", "annoyed", "furious"]},
        {"id": "n", "type": "score", "levels": ["1", "2", "3"]}
    ]}));
    let mut a = answers(&s, &[vec![0.2, 0.5, 0.3], vec![0.2, 0.5, 0.3]]);
    for id in ["mood", "n"] {
        if let Some(Some(x)) = a.get_mut(id) {
            x.resolve(0, 0.9, "m", "calm words");
        }
    }
    let mood = a["mood"].as_ref().expect("answered").to_chat_json();
    assert_eq!(mood["level"], "calm");
    assert_eq!(mood["score"], 1.0);
    let n = a["n"].as_ref().expect("answered").to_chat_json();
    assert_eq!(n["value"], 1.0);
}
