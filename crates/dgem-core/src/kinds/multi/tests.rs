use serde_json::json;

use super::*;
use crate::readout::aggregate;
use crate::schema::{SchemaDefaults, ValidSchema};

fn schema(q: serde_json::Value) -> Result<ValidSchema, crate::SchemaError> {
    ValidSchema::from_value(&json!({"questions": [q]}), &SchemaDefaults::default())
}

fn sel(min: usize, max: usize) -> Selection {
    Selection {
        min,
        max,
        threshold: 0.5,
    }
}

#[test]
fn selection_follows_threshold_max_min_and_none() {
    let p = [0.9, 0.2, 0.7, 0.55];
    assert_eq!(select(&sel(0, 4), None, &p), vec![0, 2, 3]);
    assert_eq!(
        select(&sel(0, 2), None, &p),
        vec![0, 2],
        "the most probable two"
    );
    assert_eq!(select(&sel(0, 4), None, &[0.1, 0.2]), Vec::<usize>::new());
    assert_eq!(select(&sel(1, 4), None, &[0.1, 0.2]), vec![1], "min fills");
    // An exclusive none wins alone when it reaches the threshold and leads.
    assert_eq!(select(&sel(0, 3), Some(2), &[0.3, 0.4, 0.8]), vec![2]);
    // A none below another option is dropped.
    assert_eq!(select(&sel(0, 3), Some(2), &[0.9, 0.4, 0.8]), vec![0]);
    // Nothing applies: none is the answer even below the threshold.
    assert_eq!(select(&sel(0, 3), Some(2), &[0.1, 0.2, 0.3]), vec![2]);
    let high = Selection {
        threshold: 0.8,
        ..sel(0, 4)
    };
    assert_eq!(select(&high, None, &p), vec![0]);
}

#[test]
fn multi_questions_validate_with_their_selection_fields() {
    let s = schema(
        json!({"id": "pii", "type": "multi", "options": ["email", "phone", "address"],
        "min": 1, "max": 2, "threshold": 0.6, "none_of_these": true}),
    )
    .expect("valid");
    let q = &s.questions[0];
    assert_eq!(q.kind, QuestionKind::Multi);
    assert_eq!(q.alternatives.len(), 4);
    assert_eq!(q.alternatives[3].name, "none");
    assert_eq!(q.none_option, Some(3));
    assert_eq!(
        q.select,
        Some(Selection {
            min: 1,
            max: 2,
            threshold: 0.6
        })
    );
    let again = ValidSchema::from_value(&s.to_wire(), &SchemaDefaults::default()).expect("wire");
    assert_eq!(again.questions[0], *q, "the wire form keeps every field");
}

#[test]
fn bad_multi_fields_name_the_field_and_the_value() {
    let e = schema(json!({"id": "t", "type": "multi", "options": ["a", "b"], "max": 3}))
        .expect_err("refused");
    assert_eq!(e.field, "questions[0].max");
    assert!(
        e.message.contains("from 1 to 2") && e.message.contains("got 3"),
        "{}",
        e.message
    );
    let e = schema(json!({"id": "t", "type": "multi", "options": ["a", "b"], "min": 2, "max": 1}))
        .expect_err("refused");
    assert!(e.message.contains("min 2, max 1"), "{}", e.message);
    let e = schema(json!({"id": "t", "type": "multi", "options": ["a", "b"], "threshold": 1}))
        .expect_err("refused");
    assert_eq!(e.field, "questions[0].threshold");
    let e = schema(json!({"id": "t", "type": "choice", "options": ["a", "b"], "max": 1}))
        .expect_err("refused");
    assert!(
        e.message.contains("max is for multi questions"),
        "{}",
        e.message
    );
    let e = schema(json!({"id": "t", "type": "noul", "none_of_these": true})).expect_err("refused");
    assert_eq!(e.field, "questions[0].none_of_these");
    let e =
        schema(json!({"id": "t", "type": "choice", "options": ["a", "b"], "none_of_these": "yes"}))
            .expect_err("refused");
    assert!(e.message.contains("true or false"), "{}", e.message);
    let many: Vec<String> = (0..27).map(|i| format!("o{i}")).collect();
    let e = schema(json!({"id": "t", "type": "multi", "options": many})).expect_err("refused");
    assert!(e.message.contains("at most 26"), "{}", e.message);
}

#[test]
fn a_question_may_not_depend_on_a_multi_one() {
    let e = ValidSchema::from_value(
        &json!({"questions": [
            {"id": "tags", "type": "multi", "options": ["a", "b"]},
            {"id": "u", "type": "noul", "ask_if": {"tags": ["a"]}}
        ]}),
        &SchemaDefaults::default(),
    )
    .expect_err("refused");
    assert_eq!(e.field, "questions[1].depends_on");
    assert!(e.message.contains("multi question 'tags'"), "{}", e.message);
}

#[test]
fn the_slots_of_multi_questions_count_toward_the_question_limit() {
    let opts: Vec<String> = (0..26).map(|i| format!("o{i}")).collect();
    let qs: Vec<serde_json::Value> = (0..3)
        .map(|i| json!({"id": format!("m{i}"), "type": "multi", "options": opts}))
        .collect();
    let e = ValidSchema::from_value(&json!({"questions": qs}), &SchemaDefaults::default())
        .expect_err("refused");
    assert!(e.message.contains("got 78"), "{}", e.message);
}

#[test]
fn none_of_these_adds_a_real_option_to_a_choice() {
    let s = schema(
        json!({"id": "team", "type": "choice", "options": ["billing", "support"],
        "none_of_these": true}),
    )
    .expect("valid");
    let q = &s.questions[0];
    assert_eq!(q.alternatives.len(), 3);
    assert_eq!(q.none_option, Some(2));
    let a = AnswerOut::new(
        q.clone(),
        vec!["A".into(), "B".into(), "C".into()],
        aggregate(&[vec![0.2, 0.1, 0.7]]),
    );
    let j = a.to_chat_json();
    assert_eq!(j["choice"], "none");
    assert_eq!(j["none_of_these"], true);
    assert_eq!(j["probabilities"]["none"], 0.7);
    // An option already so named is the none option; nothing is added.
    let s = schema(
        json!({"id": "team", "type": "choice", "options": ["billing", "None of these"],
        "none_of_these": true}),
    )
    .expect("valid");
    assert_eq!(s.questions[0].alternatives.len(), 2);
    assert_eq!(s.questions[0].none_option, Some(1));
}

#[test]
fn expansion_reads_one_yes_no_slot_per_option_and_collapse_rebuilds_the_set() {
    let s = ValidSchema::from_value(
        &json!({"questions": [
            {"id": "u", "type": "noul"},
            {"id": "pii", "type": "multi", "instructions": "Which personal data appear?",
             "options": [{"name": "E-mail address", "description": "an address with @"}, "phone", "u"],
             "none_of_these": true}
        ]}),
        &SchemaDefaults::default(),
    )
    .expect("valid");
    let e = expand(&s).expect("expands");
    let ids: Vec<&str> = e.schema.questions.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "u",
            "pii__e_mail_address",
            "pii__phone",
            "pii__u",
            "pii__none"
        ]
    );
    assert_eq!(e.slots["pii"].len(), 4);
    let sub = &e.schema.questions[1];
    assert_eq!(sub.kind, QuestionKind::Boolean);
    assert_eq!(
        sub.instructions,
        "Which personal data appear? Does \"E-mail address\" apply?"
    );
    assert_eq!(
        sub.alternatives[0].description.as_deref(),
        Some("an address with @")
    );
    assert!(e.schema.questions[4]
        .instructions
        .contains("Does none of these apply: E-mail address, phone, u?"));

    let q = s.question("pii").expect("pii").clone();
    let reads = [0.9, 0.2, 0.6, 0.1].map(|p| aggregate(&[vec![p, 1.0 - p]]));
    let a = collapse(&q, reads.to_vec());
    let m = a.multi.as_ref().expect("multi");
    assert_eq!(m.selected, vec![0, 2]);
    assert_eq!(a.selected_names(), ["E-mail address", "u"]);
    let want = 0.9 * 0.8 * 0.6 * 0.9;
    assert!((a.aggregate.confidence - want).abs() < 1e-12);
    let h: f64 = [0.9, 0.2, 0.6, 0.1]
        .iter()
        .map(|p| bernoulli_entropy(*p))
        .sum();
    assert!((a.aggregate.entropy - h).abs() < 1e-12);
    let j = a.to_chat_json();
    assert_eq!(j["type"], "multi");
    assert_eq!(j["multi"], json!(["E-mail address", "u"]));
    assert_eq!(j["label"], j["multi"]);
    assert_eq!(j["probabilities"]["phone"], 0.2);
    assert!(j.get("none_of_these").is_none());
    assert!(
        (j["option_hesitation"]["E-mail address"]
            .as_f64()
            .expect("h")
            - bernoulli_entropy(0.9) / std::f64::consts::LN_2)
            .abs()
            < 1e-12
    );
    let keys: Vec<&String> = j.as_object().expect("obj").keys().collect();
    assert_eq!(
        keys,
        [
            "type",
            "label",
            "confidence",
            "probabilities",
            "multi",
            "entropy",
            "normalized_entropy",
            "option_entropy",
            "option_hesitation"
        ]
    );
}

/// Review of issue 40: options whose names slug to a taken id (`C++` and
/// `C#` both give `c`, and `2` is an option) got the same fallback id, and
/// every decision of a valid schema failed.
#[test]
fn option_ids_never_collide() {
    let s = schema(json!({"id": "tags", "type": "multi", "options": ["2", "C++", "C#", "c"]}))
        .expect("valid");
    let e = expand(&s).expect("expands");
    let ids: Vec<&str> = e.schema.questions.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(ids, ["tags__2", "tags__c", "tags__c_2", "tags__c_3"]);
}

#[test]
fn none_of_these_false_keeps_an_option_named_none_ordinary() {
    let s = schema(
        json!({"id": "tags", "type": "multi", "options": ["None", "vip"],
        "none_of_these": false}),
    )
    .expect("valid");
    assert_eq!(s.questions[0].none_option, None);
    let e = schema(json!({"id": "tags", "type": "multi",
        "options": (0..26).map(|i| format!("o{i}")).collect::<Vec<_>>(), "none_of_these": true}))
    .expect_err("refused");
    assert!(e.message.contains("none_of_these adds"), "{}", e.message);
}

#[test]
fn isolation_counts_a_multi_question_in_slots() {
    let many: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
    let s = ValidSchema::from_value(
        &json!({"isolate": "all", "questions": [
            {"id": "tags", "type": "multi", "options": many}, {"id": "u", "type": "noul"}]}),
        &SchemaDefaults::default(),
    )
    .expect("valid");
    assert!(
        s.isolated().is_empty(),
        "11 slots: over ISOLATE_MAX_QUESTIONS"
    );
    let s = ValidSchema::from_value(
        &json!({"isolate": "noul", "questions": [
            {"id": "tags", "type": "multi", "options": ["a", "b"]},
            {"id": "team", "type": "choice", "options": ["x", "y"]}]}),
        &SchemaDefaults::default(),
    )
    .expect("valid");
    assert_eq!(s.isolated(), ["tags"], "a multi's slots are yes/no reads");
}

#[test]
fn a_multi_temperature_key_is_refused_naming_boolean() {
    let e =
        crate::after::Temperature::parse("temperature", &json!({"multi": 2})).expect_err("refused");
    assert!(e.message.contains("set `boolean`"), "{}", e.message);
}

/// A new user's trial of issue 40: `"rulez"` or `"thresold"` was dropped
/// without a word, and the rule or setting silently not applied.
#[test]
fn near_misses_of_the_new_keys_are_refused() {
    let e = ValidSchema::from_value(
        &json!({"questions": [{"id": "u", "type": "noul"}], "rulez": []}),
        &SchemaDefaults::default(),
    )
    .expect_err("refused");
    assert_eq!(e.field, "rulez");
    assert!(e.message.contains("did you mean `rules`"), "{}", e.message);
    let e = schema(json!({"id": "t", "type": "multi", "options": ["a", "b"], "thresold": 0.7}))
        .expect_err("refused");
    assert_eq!(e.field, "questions[0].thresold");
    assert!(
        e.message.contains("did you mean `threshold`"),
        "{}",
        e.message
    );
}
