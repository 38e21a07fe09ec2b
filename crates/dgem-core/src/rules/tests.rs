use indexmap::IndexMap;
use serde_json::json;

use crate::envelope::AnswerOut;
use crate::readout::aggregate;
use crate::schema::{SchemaDefaults, ValidSchema};

fn schema(rules: serde_json::Value) -> Result<ValidSchema, crate::SchemaError> {
    ValidSchema::from_value(
        &json!({"questions": [
            {"id": "team", "type": "choice", "options": ["billing", "security", "support"]},
            {"id": "urgent", "type": "noul"},
            {"id": "severity", "type": "score", "levels": ["low", "mid", "high"]},
            {"id": "page_oncall", "type": "noul"},
            {"id": "tags", "type": "multi", "options": ["a", "b"]}
        ], "rules": rules}),
        &SchemaDefaults::default(),
    )
}

fn answers(s: &ValidSchema, dists: &[(&str, Vec<f64>)]) -> IndexMap<String, Option<AnswerOut>> {
    dists
        .iter()
        .map(|(id, d)| {
            let q = s.question(id).expect("question").clone();
            let labels = q.alternatives.iter().map(|a| a.name.clone()).collect();
            (
                id.to_string(),
                Some(AnswerOut::new(
                    q,
                    labels,
                    aggregate(std::slice::from_ref(d)),
                )),
            )
        })
        .collect()
}

#[test]
fn the_issue_rules_validate_and_round_trip_on_the_wire() {
    let s = schema(json!([
        {"if": {"team": "security"}, "then": {"urgent": "yes"}},
        {"if": {"severity": "low"}, "not": {"page_oncall": true}}
    ]))
    .expect("valid");
    assert_eq!(s.rules.0.len(), 2);
    assert_eq!(s.rules.0[1].not[0].answers, ["yes"]);
    let again = ValidSchema::from_value(&s.to_wire(), &SchemaDefaults::default()).expect("wire");
    assert_eq!(again.rules, s.rules);
}

#[test]
fn unknown_questions_answers_and_keys_are_refused_naming_them() {
    let e = schema(json!([{"if": {"teem": "security"}, "then": {"urgent": "yes"}}]))
        .expect_err("refused");
    assert_eq!(e.field, "rules[0].if.teem");
    assert!(
        e.message.contains("unknown question 'teem'"),
        "{}",
        e.message
    );
    assert!(e.message.contains("team, urgent"), "{}", e.message);
    let e =
        schema(json!([{"if": {"team": "sales"}, "then": {"urgent": "yes"}}])).expect_err("refused");
    assert_eq!(e.field, "rules[0].if.team");
    assert!(
        e.message.contains("no answer \"sales\"") && e.message.contains("'security'"),
        "{}",
        e.message
    );
    let e = schema(json!([{"if": {"team": "billing"}, "than": {"urgent": "yes"}}]))
        .expect_err("refused");
    assert_eq!(e.field, "rules[0].than");
    let e = schema(json!([{"if": {"team": "billing"}}])).expect_err("refused");
    assert!(e.message.contains("needs `then`"), "{}", e.message);
    let e = schema(json!([{"if": {"tags": "a"}, "then": {"urgent": "yes"}}])).expect_err("refused");
    assert!(e.message.contains("multi question"), "{}", e.message);
    let e = schema(json!({"if": {}})).expect_err("refused");
    assert_eq!(e.field, "rules");
}

#[test]
fn an_impossible_rule_set_is_refused_up_front() {
    let e = schema(json!([
        {"if": {"team": ["billing", "security", "support"]}, "then": {"urgent": "yes"}},
        {"if": {"urgent": "yes"}, "then": {"team": "security"}},
        {"if": {"team": "security"}, "not": {"urgent": "yes"}}
    ]))
    .expect_err("refused");
    assert_eq!(e.field, "rules");
    assert!(e.message.contains("cannot all hold"), "{}", e.message);
}

#[test]
fn rules_restrict_the_product_and_renormalise() {
    let s =
        schema(json!([{"if": {"team": "security"}, "then": {"urgent": "yes"}}])).expect("valid");
    let mut a = answers(
        &s,
        &[
            ("team", vec![0.6, 0.3, 0.1]),
            ("urgent", vec![0.2, 0.8]),
            ("severity", vec![0.2, 0.3, 0.5]),
        ],
    );
    let (done, warnings) = s.rules.apply(&mut a);
    assert!(warnings.is_empty());
    // Removed: team=security ∧ urgent=no = 0.3 · 0.8 = 0.24; Z = 0.76.
    assert_eq!(done.len(), 1);
    assert!((done[0].mass_removed - 0.24).abs() < 1e-12);
    assert_eq!(done[0].questions, ["team", "urgent"]);
    let team = a["team"].as_ref().expect("team");
    assert!((team.aggregate.mean[1] - 0.06 / 0.76).abs() < 1e-12);
    assert!((team.aggregate.mean[0] - 0.6 / 0.76).abs() < 1e-12);
    let urgent = a["urgent"].as_ref().expect("urgent");
    // p(yes) = (0.6·0.2 + 0.3·0.2 + 0.1·0.2) / 0.76
    assert!((urgent.aggregate.mean[0] - 0.2 / 0.76).abs() < 1e-12);
    assert_eq!(urgent.constrained, Some(done[0].mass_removed));
    let json = urgent.to_chat_json();
    assert_eq!(json["constrained"], true);
    // A question no rule ties is left as read.
    let sev = a["severity"].as_ref().expect("severity");
    assert_eq!(sev.constrained, None);
    assert!((sev.aggregate.mean[2] - 0.5).abs() < 1e-12);
}

#[test]
fn a_not_rule_can_flip_the_answer() {
    let s =
        schema(json!([{"if": {"severity": "low"}, "not": {"page_oncall": "yes"}}])).expect("valid");
    let mut a = answers(
        &s,
        &[
            ("severity", vec![0.9, 0.05, 0.05]),
            ("page_oncall", vec![0.6, 0.4]),
        ],
    );
    s.rules.apply(&mut a);
    let page = a["page_oncall"].as_ref().expect("page");
    // p(yes) = 0.1·0.6 / (1 − 0.9·0.6) = 0.06 / 0.46
    assert!((page.aggregate.mean[0] - 0.06 / 0.46).abs() < 1e-12);
    assert_eq!(page.answer_name(), "no");
}

#[test]
fn a_rule_on_a_skipped_question_is_set_aside_with_a_warning() {
    let s =
        schema(json!([{"if": {"team": "security"}, "then": {"urgent": "yes"}}])).expect("valid");
    let mut a = answers(&s, &[("team", vec![0.6, 0.3, 0.1])]);
    a.insert("urgent".into(), None);
    let (done, warnings) = s.rules.apply(&mut a);
    assert!(done.is_empty());
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("skipped"), "{}", warnings[0]);
    let team = a["team"].as_ref().expect("team");
    assert_eq!(team.constrained, None);
    assert!((team.aggregate.mean[1] - 0.3).abs() < 1e-12);
}

#[test]
fn rules_sharing_a_question_form_one_group() {
    let s = schema(json!([
        {"if": {"team": "security"}, "then": {"urgent": "yes"}},
        {"if": {"severity": "low"}, "not": {"page_oncall": "yes"}},
        {"if": {"urgent": "no"}, "not": {"page_oncall": "yes"}}
    ]))
    .expect("valid");
    let groups = s
        .rules
        .groups(&["team", "urgent", "severity", "page_oncall"]);
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].0, vec![0, 1, 2]);
    assert_eq!(groups[0].1, ["team", "urgent", "severity", "page_oncall"]);
}

/// Review of issue 40: one skipped question set aside every rule connected
/// to it; now only the rules that name it are.
#[test]
fn a_skipped_question_sets_aside_only_the_rules_that_name_it() {
    let s = ValidSchema::from_value(
        &json!({"questions": [
            {"id": "a", "type": "noul"}, {"id": "b", "type": "noul"},
            {"id": "c", "type": "noul", "depends_on": ["d"]}, {"id": "d", "type": "noul"}],
         "rules": [{"if": {"a": "yes"}, "then": {"b": "yes"}},
                   {"if": {"b": "yes"}, "then": {"c": "yes"}}]}),
        &SchemaDefaults::default(),
    )
    .expect("valid");
    let mut a = answers(&s, &[("a", vec![0.8, 0.2]), ("b", vec![0.3, 0.7])]);
    a.insert("c".into(), None);
    let (done, warnings) = s.rules.apply(&mut a);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("rule 1 was not applied"),
        "{warnings:?}"
    );
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].rules, [0]);
    assert!((done[0].mass_removed - 0.8 * 0.7).abs() < 1e-12);
}

#[test]
fn a_question_another_asks_on_may_not_be_in_a_rule() {
    let e = ValidSchema::from_value(
        &json!({"questions": [
            {"id": "urgent", "type": "noul"},
            {"id": "page", "type": "noul", "ask_if": {"urgent": ["yes"]}},
            {"id": "team", "type": "choice", "options": ["a", "b"]}],
         "rules": [{"if": {"team": "a"}, "then": {"urgent": "yes"}}]}),
        &SchemaDefaults::default(),
    )
    .expect_err("refused");
    assert_eq!(e.field, "rules[0].then.urgent");
    assert!(
        e.message.contains("decides whether 'page' is asked"),
        "{}",
        e.message
    );
}

#[test]
fn numbers_name_score_levels_and_nothing_removed_marks_nothing() {
    let s = ValidSchema::from_value(
        &json!({"questions": [
            {"id": "p", "type": "score", "levels": ["1", "2", "3"]},
            {"id": "u", "type": "noul"}],
         "rules": [{"if": {"p": 3}, "then": {"u": true}}]}),
        &SchemaDefaults::default(),
    )
    .expect("a number names the level `3`");
    assert_eq!(s.rules.0[0].when[0].answers, ["3"]);
    // No mass on p = 3: the rule removes nothing and marks nothing.
    let mut a = answers(&s, &[("p", vec![0.5, 0.5, 0.0]), ("u", vec![0.2, 0.8])]);
    let (done, _) = s.rules.apply(&mut a);
    assert_eq!(done[0].mass_removed, 0.0);
    assert!(a["u"].as_ref().expect("u").constrained.is_none());
}

#[test]
fn a_rule_set_too_costly_to_enumerate_is_refused() {
    // Four 16-option choices: 65,536 combinations, times 64 rules of 3 conditions.
    let opts: Vec<String> = (0..16).map(|i| format!("o{i}")).collect();
    let qs: Vec<serde_json::Value> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| json!({"id": id, "type": "choice", "options": opts}))
        .collect();
    let rules: Vec<serde_json::Value> = [json!({"if": {"c": "o0"}, "not": {"d": "o1"}})]
        .into_iter()
        .chain((0..63).map(|i| {
            json!({"if": {"a": format!("o{}", i % 16), "b": format!("o{}", i / 16)}, "not": {"c": "o1"}})
        }))
        .collect();
    let e = ValidSchema::from_value(
        &json!({"questions": qs, "rules": rules}),
        &SchemaDefaults::default(),
    )
    .expect_err("refused");
    assert_eq!(e.field, "rules");
    assert!(e.message.contains("condition checks"), "{}", e.message);
}
