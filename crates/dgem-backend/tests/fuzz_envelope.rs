//! Property test over upstream replies (issue 12): `Decision::from_envelope`
//! reads any JSON value without a panic, and whatever it accepts answers the
//! request: every asked id, probabilities over exactly the question's labels,
//! each in [0, 1], summing to 1. `scripts/fuzz` runs it with
//! `PROPTEST_CASES=1000000`.

use dgem_backend::Decision;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use proptest::prelude::*;
use serde_json::{json, Value};

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(n)
}

fn schema() -> ValidSchema {
    ValidSchema::from_value(
        &json!({"questions": [
            {"id": "urgent", "type": "noul"},
            {"id": "team", "type": "choice", "options": ["billing", "support"]}]}),
        &SchemaDefaults::default(),
    )
    .expect("valid")
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0.0f64..1.0).prop_map(|f| json!(f)),
        (-2.0f64..2.0).prop_map(|f| json!(f)),
        Just(json!(0.5)),
        Just(json!(1)),
        Just(json!("0.5")),
        Just(Value::Null),
    ]
}

fn answer() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "yes", "no", "true", "false", "billing", "support", "C",
    ]);
    (
        prop::collection::btree_map(key, number(), 0..4),
        prop::option::of(prop::sample::select(vec!["yes", "billing", "A", "maybe"])),
    )
        .prop_map(|(probs, label)| {
            let mut a = json!({"probabilities": probs});
            if let Some(l) = label {
                a["label"] = json!(l);
            }
            a
        })
}

fn envelope() -> impl Strategy<Value = Value> {
    let id = prop::sample::select(vec!["urgent", "team", "other"]);
    (
        prop::collection::btree_map(id, prop_oneof![answer(), Just(Value::Null)], 0..4),
        prop::option::of(prop_oneof![
            Just(json!({})),
            Just(json!({"samples": {"n": [1, 2]}})),
            Just(json!("x")),
            Just(json!({"stages": [["urgent"]], "layout": "nope"})),
        ]),
    )
        .prop_map(|(answers, diag)| {
            let mut e = json!({"answers": answers});
            if let Some(d) = diag {
                e["diagnostics"] = d;
            }
            e
        })
}

proptest! {
    #![proptest_config(cases(3000))]

    #[test]
    fn from_envelope_never_panics_and_accepts_only_valid_answers(env in envelope()) {
        let s = schema();
        let r = std::panic::catch_unwind(|| Decision::from_envelope(&s, &env));
        prop_assert!(r.is_ok(), "panicked on {env}");
        if let Ok(Ok(d)) = r {
            let out = d.envelope();
            for q in &s.questions {
                let a = &out["answers"][&q.id];
                prop_assert!(!a.is_null(), "accepted without {}: {env}", q.id);
                let probs = a["probabilities"].as_object().expect("probabilities");
                prop_assert_eq!(probs.len(), q.alternatives.len());
                let sum: f64 = probs.values().map(|p| p.as_f64().unwrap_or(f64::NAN)).sum();
                prop_assert!((sum - 1.0).abs() < 1e-6, "sum {sum}: {env}");
                for p in probs.values() {
                    let p = p.as_f64().unwrap_or(f64::NAN);
                    prop_assert!((0.0..=1.0).contains(&p), "{p}: {env}");
                }
            }
        }
    }
}
