use super::*;
use dgem_core::schema::SchemaDefaults;
use serde_json::json;

fn read(v: Value) -> Result<Option<CascadeOptions>, dgem_core::SchemaError> {
    crate::AfterOptions::from_object(v.as_object().expect("object")).map(|keys| keys.cascade())
}

fn err(v: Value) -> String {
    read(v).expect_err("must fail").message
}

#[test]
fn mode_spellings() {
    for off in [
        json!({}),
        json!({"cascade_mode": null}),
        json!({"cascade_mode": false}),
    ] {
        assert_eq!(read(off).expect("ok"), None);
    }
    for s in ["off", "None", "FALSE", "", " off "] {
        assert_eq!(read(json!({"cascade_mode": s})).expect("ok"), None, "{s}");
    }
    for s in ["entropy", "AUTO", "true", "prior_guided"] {
        let o = read(json!({"cascade_mode": s})).expect("ok").expect("on");
        assert_eq!(o.mode, CascadeMode::Entropy, "{s}");
    }
    let o = read(json!({"cascade_mode": true}))
        .expect("ok")
        .expect("on");
    assert_eq!(o.mode, CascadeMode::Entropy);
    for s in ["on_miss", "Miss"] {
        let o = read(json!({"cascade_mode": s})).expect("ok").expect("on");
        assert_eq!(o.mode, CascadeMode::OnMiss, "{s}");
    }
}

#[test]
fn defaults() {
    let o = read(json!({"cascade_mode": "entropy"}))
        .expect("ok")
        .expect("on");
    assert_eq!(o, CascadeOptions::entropy());
    assert_eq!(o.threshold, 0.35);
    assert_eq!(o.threshold_mode, ThresholdMode::Nats);
    assert_eq!(o.prior, PriorMode::Soft);
    assert_eq!(o.model, "");
    assert_eq!(o.deadline_for(0), Duration::from_secs(25));
    assert_eq!(o.deadline_for(2), Duration::from_secs(90));
    let mut short = o.clone();
    short.deadline = Some(Duration::from_millis(50));
    assert_eq!(short.deadline_for(3), Duration::from_millis(50));
}

#[test]
fn thresholds_and_their_modes() {
    let o = |v: Value| read(v).expect("ok").expect("on");
    let base = |extra: Value| {
        let mut m = json!({"cascade_mode": "entropy"});
        for (k, v) in extra.as_object().expect("obj") {
            m[k] = v.clone();
        }
        m
    };
    assert_eq!(o(base(json!({"cascade_threshold": 0.5}))).threshold, 0.5);
    assert_eq!(o(base(json!({"cascade_threshold": 0}))).threshold, 0.35);
    assert_eq!(o(base(json!({"cascade_threshold": -1}))).threshold, 0.35);
    for alias in ["normalized", "Normalised", "hesitation"] {
        let n = o(base(json!({"cascade_threshold_mode": alias})));
        assert_eq!(n.threshold_mode, ThresholdMode::Normalized, "{alias}");
        assert_eq!(n.threshold, 0.16, "{alias}");
    }
    let raw = o(base(
        json!({"cascade_threshold_mode": "RAW", "cascade_threshold": 0.7}),
    ));
    assert_eq!(raw.threshold_mode, ThresholdMode::Nats);
    assert_eq!(raw.threshold, 0.7);
    let n = o(base(
        json!({"cascade_threshold_mode": "normalized", "cascade_threshold": 0.3}),
    ));
    assert_eq!(n.threshold, 0.3);
}

#[test]
fn prior_model_and_expectations() {
    let o = read(json!({
        "cascade_mode": "on_miss",
        "cascade_model": " gemini-3.8-flash ",
        "stage2_prior": "FULL",
        "expected_answers": {"urgent": true, "calm": false, "team": "Billing",
                             "a": "", "b": "—", "c": "-", "d": null}
    }))
    .expect("ok")
    .expect("on");
    assert_eq!(o.model, "gemini-3.8-flash");
    assert_eq!(o.prior, PriorMode::Full);
    let exp: Vec<(&str, &str)> = o
        .expected
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        exp,
        [("urgent", "yes"), ("calm", "no"), ("team", "Billing")]
    );
    for (s, want) in [
        ("none", PriorMode::None),
        ("soft", PriorMode::Soft),
        ("", PriorMode::Soft),
    ] {
        let p = read(json!({"cascade_mode": "entropy", "stage2_prior": s}));
        assert_eq!(p.expect("ok").expect("on").prior, want, "{s}");
    }
}

#[test]
fn errors_name_field_allowed_and_given() {
    assert_eq!(
        err(json!({"cascade_mode": "sometimes"})),
        "`cascade_mode` must be one of [off, entropy, on_miss] (or true/false). Given: \"sometimes\""
    );
    assert!(err(json!({"cascade_mode": 3})).ends_with("Given: 3"));
    assert_eq!(
        err(json!({"cascade_mode": "entropy", "cascade_threshold": "high"})),
        "`cascade_threshold` must be a number (≤ 0 or absent uses the mode default). Given: \"high\""
    );
    assert_eq!(
        err(json!({"cascade_mode": "entropy", "cascade_threshold_mode": "bits"})),
        "`cascade_threshold_mode` must be one of [nats, normalized]. Given: \"bits\""
    );
    assert_eq!(
        err(json!({"cascade_mode": "entropy", "stage2_prior": "strong"})),
        "`stage2_prior` must be one of [soft, none, full]. Given: \"strong\""
    );
    assert_eq!(
        err(json!({"cascade_mode": "entropy", "cascade_model": 7})),
        "`cascade_model` must be a model name string. Given: 7"
    );
    assert_eq!(
        err(json!({"cascade_mode": "entropy", "expected_answers": ["yes"]})),
        "`expected_answers` must be an object of question id → expected answer. Given: [\"yes\"]"
    );
    assert_eq!(
        err(json!({"cascade_mode": "entropy", "expected_answers": {"u": 1}})),
        "`expected_answers.u` must be an answer name string, true/false, or \"\"/\"—\"/\"-\" \
         for none. Given: 1"
    );
}

#[test]
fn check_names_unknown_slots_and_the_question_ids() {
    let schema = ValidSchema::from_value(
        &json!({"questions": [
            {"id": "urgent", "type": "noul"},
            {"id": "team", "type": "choice", "options": ["billing", "support"]}
        ]}),
        &SchemaDefaults::default(),
    )
    .expect("valid");
    let mut o = CascadeOptions::entropy();
    o.expected.insert("urgent".into(), "yes".into());
    assert_eq!(o.check(&schema), Ok(()));
    o.expected.insert("teem".into(), "billing".into());
    o.expected.insert("x".into(), "no".into());
    assert_eq!(
        o.check(&schema).expect_err("unknown").to_string(),
        "`expected_answers` must be keyed by question ids [urgent, team]. Given: unknown ids [teem, x]"
    );
}

#[test]
fn cascade_threshold_of_the_wrong_type_is_refused_without_a_cascade_mode() {
    let msg = err(json!({"cascade_threshold": "abc"}));
    assert!(
        msg.contains("cascade_threshold") && msg.contains("\"abc\""),
        "{msg}"
    );
    // Well-typed keys without a mode still mean no cascade.
    let none = read(json!({"cascade_threshold": 0.3, "cascade_model": "m"})).expect("ok");
    assert_eq!(none, None);
}
