//! Option-order debiasing on the scripted backend: a pure position bias is
//! removed, a content signal survives, and the answer does not depend on the
//! order a policy lists its options in. Numbers come from the script, so they
//! are exact.

use std::sync::Arc;

use dgem_core::order::OrderDebias;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{CalibrationMode, DecideRequest, Engine, EngineConfig};
use dgem_testkit::{scripts, ScriptedBackend, SlotContext};
use serde_json::json;

fn req(options: &[&str]) -> DecideRequest {
    let v = json!({"questions": [{"id": "pick", "type": "choice", "options": options}]});
    DecideRequest {
        schema: ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema"),
        state: json!("a case"),
        seed: 42,
    }
}

fn debiasing(backend: Arc<ScriptedBackend>, order_debias: OrderDebias) -> Engine {
    Engine::new(
        backend,
        EngineConfig {
            calibration: CalibrationMode::Off,
            order_debias,
            ..EngineConfig::default()
        },
    )
}

/// A model that reads nothing but position: 80 % on whatever is listed first.
fn first_listed(ctx: &SlotContext) -> Vec<f64> {
    let mut p = vec![0.2 / (ctx.labels.len() as f64 - 1.0); ctx.labels.len()];
    p[0] = 0.8;
    p
}

/// `(name, probability)` of the answer, sorted by name.
async fn read(engine: &Engine, options: &[&str]) -> (Vec<(String, f64)>, serde_json::Value) {
    let d = engine.decide(req(options)).await.expect("decision");
    let a = d.answers["pick"].as_ref().expect("answered");
    let mut by_name: Vec<(String, f64)> = a
        .question
        .alternatives
        .iter()
        .map(|alt| alt.name.clone())
        .zip(a.aggregate.mean.iter().copied())
        .collect();
    by_name.sort_by(|x, y| x.0.cmp(&y.0));
    (by_name, a.to_chat_json())
}

#[tokio::test]
async fn a_pure_position_bias_is_read_as_a_uniform_answer() {
    let b = ScriptedBackend::new(first_listed);
    let (biased, _) = read(
        &debiasing(b.clone(), OrderDebias::Off),
        &["low", "medium", "high"],
    )
    .await;
    assert!(
        biased.iter().any(|(_, p)| (p - 0.8).abs() < 1e-9),
        "{biased:?}"
    );
    let (p, json) = read(
        &debiasing(b, OrderDebias::default()),
        &["low", "medium", "high"],
    )
    .await;
    for (_, x) in &p {
        assert!((x - 1.0 / 3.0).abs() < 1e-9, "{p:?}");
    }
    let order = &json["order_sensitivity"];
    assert_eq!(order["orders"], 3);
    assert_eq!(order["method"], "cyclic");
    assert_eq!(
        order["fragile"], true,
        "each listing chose its first option"
    );
    assert!((order["spread"].as_f64().expect("spread") - 0.7).abs() < 1e-9);
}

#[tokio::test]
async fn a_content_signal_survives_debiasing() {
    let b = ScriptedBackend::new(scripts::favour("medium", 0.7));
    let (p, json) = read(
        &debiasing(b, OrderDebias::default()),
        &["low", "medium", "high"],
    )
    .await;
    assert_eq!(p[2].0, "medium");
    assert!((p[2].1 - 0.7).abs() < 1e-9, "{p:?}");
    assert_eq!(json["label"], "medium");
    assert_eq!(json["order_sensitivity"]["fragile"], false);
    assert!(
        json["order_sensitivity"]["spread"]
            .as_f64()
            .expect("spread")
            < 1e-9
    );
}

#[tokio::test]
async fn the_answer_does_not_depend_on_the_listed_order() {
    // Position bias and content together: every listing order of the policy
    // gives the same distribution, bit for bit.
    let script = |ctx: &SlotContext| -> Vec<f64> {
        let bias = [0.6, 0.3, 0.1];
        ctx.labels
            .iter()
            .enumerate()
            .map(|(i, l)| bias[i.min(2)] * if l == "high" { 0.5 } else { 0.25 })
            .collect()
    };
    let b = ScriptedBackend::new(script);
    let engine = debiasing(b.clone(), OrderDebias::default());
    let (first, _) = read(&engine, &["low", "medium", "high"]).await;
    for order in [
        ["high", "medium", "low"],
        ["medium", "low", "high"],
        ["low", "high", "medium"],
    ] {
        let (p, _) = read(&engine, &order).await;
        assert_eq!(p, first, "listed as {order:?}");
    }
    // With debiasing off the listed order decides.
    let off = debiasing(b, OrderDebias::Off);
    let (a, _) = read(&off, &["low", "medium", "high"]).await;
    let (z, _) = read(&off, &["high", "medium", "low"]).await;
    assert_ne!(a, z);
}

#[tokio::test]
async fn one_listing_says_the_sensitivity_was_not_estimated() {
    let b = ScriptedBackend::new(scripts::favour("low", 0.6));
    let (_, json) = read(&debiasing(b, OrderDebias::Off), &["low", "high"]).await;
    assert_eq!(json["order_sensitivity"]["orders"], 1);
    assert_eq!(json["order_sensitivity"]["method"], "single_order");
    assert!(json["order_sensitivity"]["spread"].is_null());
}

/// Position bias 0.6 / 0.3 / 0.1 times a content term: the option the state
/// names (`favour NAME`) three times the others.
fn biased_by_position_and_state(ctx: &SlotContext) -> Vec<f64> {
    let bias = [0.6, 0.3, 0.1];
    ctx.labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let named = ctx.prefix.contains(&format!("favour {l}"));
            bias[i.min(2)] * if named { 0.6 } else { 0.2 }
        })
        .collect()
}

fn on_state(state: &str) -> DecideRequest {
    DecideRequest {
        state: json!(state),
        ..req(&["low", "medium", "high"])
    }
}

/// `(probabilities by name, order_sensitivity)` of one decision.
async fn read_state(engine: &Engine, state: &str) -> (Vec<f64>, serde_json::Value) {
    let d = engine.decide(on_state(state)).await.expect("decision");
    let a = d.answers["pick"].as_ref().expect("answered");
    let json = a.to_chat_json();
    (a.aggregate.mean.clone(), json["order_sensitivity"].clone())
}

#[tokio::test]
async fn prior_learns_the_policy_prior_from_the_first_decisions_then_reads_once() {
    let b = ScriptedBackend::new(biased_by_position_and_state);
    let prior = debiasing(b.clone(), OrderDebias::parse("prior").expect("parses"));
    let cyclic = debiasing(b.clone(), OrderDebias::default());
    let learn = [
        "favour low, one",
        "favour high, two",
        "favour medium, three",
    ];
    // A repeated state teaches nothing new: still learning after it.
    for state in [learn[0], learn[0], learn[1], learn[2]] {
        let (p, order) = read_state(&prior, state).await;
        assert_eq!(order["method"], "cyclic", "{state}: {order}");
        assert_eq!(order["orders"], 3);
        let (want, _) = read_state(&cyclic, state).await;
        assert_eq!(p, want, "a learning decision is the cyclic one");
    }
    // Learned from three distinct states: one read of the canonical listing
    // (high, low, medium: position bias 0.6, 0.3, 0.1), divided by the
    // learned prior.
    let canonical = |named: usize| -> Vec<f64> {
        // Own order low, medium, high.
        let bias = [0.3, 0.1, 0.6];
        let raw: Vec<f64> = (0..3)
            .map(|i| bias[i] * if i == named { 0.6 } else { 0.2 })
            .collect();
        let total: f64 = raw.iter().sum();
        raw.iter().map(|x| x / total).collect()
    };
    // The mean of the three reads with one uniform pseudo-decision mixed in
    // (`policy_prior::PSEUDO_DECISIONS`).
    let mean: Vec<f64> = (0..3)
        .map(|i| ((0..3).map(|o| canonical(o)[i]).sum::<f64>() + 1.0 / 3.0) / 4.0)
        .collect();
    let high = canonical(2);
    let divided: Vec<f64> = high.iter().zip(&mean).map(|(p, m)| p / m).collect();
    let total: f64 = divided.iter().sum();
    let calls = b.calls();
    let (p, order) = read_state(&prior, "favour high, four").await;
    assert_eq!(b.calls() - calls, 1, "one model call");
    assert_eq!(order["method"], "policy_prior");
    assert_eq!(order["orders"], 1);
    for (a, w) in p.iter().zip(&divided) {
        assert!((a - w / total).abs() < 1e-9, "{p:?} vs {divided:?}");
    }
    assert!(p[2] > 0.5, "high, the named option, wins: {p:?}");
    // The bias alone would have picked it too; a state naming the option
    // listed last (medium, bias 0.1) is still read as medium.
    let (p, _) = read_state(&prior, "favour medium, five").await;
    assert!(p[1] > p[0] && p[1] > p[2], "{p:?}");
}

#[tokio::test]
async fn a_learned_policy_prior_is_kept_for_the_next_process() {
    let dir = std::env::temp_dir().join(format!("dgem-learned-prior-{}", std::process::id()));
    let engine = |b: Arc<ScriptedBackend>| {
        Engine::new(
            b,
            EngineConfig {
                calibration: CalibrationMode::Off,
                order_debias: OrderDebias::parse("prior").expect("parses"),
                calibration_store: Some(dir.join("priors.json")),
                ..EngineConfig::default()
            },
        )
    };
    let first = engine(ScriptedBackend::new(biased_by_position_and_state));
    for state in ["favour low, a", "favour medium, b", "favour high, c"] {
        read_state(&first, state).await;
    }
    assert!(dir.join("priors.policy.json").exists());
    let again = engine(ScriptedBackend::new(biased_by_position_and_state));
    let (_, order) = read_state(&again, "favour low, d").await;
    assert_eq!(order["method"], "policy_prior", "{order}");
    // Another policy wording learns afresh.
    let other = DecideRequest {
        state: json!("favour low, e"),
        ..req(&["low", "medium", "high", "none"])
    };
    let d = again.decide(other).await.expect("decision");
    let a = d.answers["pick"].as_ref().expect("answered");
    assert_eq!(a.to_chat_json()["order_sensitivity"]["method"], "cyclic");
    let _ = std::fs::remove_dir_all(dir);
}

/// Regression (review): a sample read in a shuffled listing was divided by
/// the prior option by option, so the canonical listing's position bias was
/// removed from the wrong options. Divided position by position, every
/// sample of a pure position bias gives the same numbers to whatever it
/// listed first, second and third.
#[tokio::test]
async fn samples_in_shuffled_listings_are_corrected_where_their_options_were_listed() {
    use dgem_core::slots::{python_random, python_randrange, READ_SEED_STRIDE};
    let b = ScriptedBackend::new(first_listed);
    let prior = debiasing(b, OrderDebias::parse("prior").expect("parses"));
    for state in ["one", "two", "three"] {
        read_state(&prior, state).await;
    }
    let (samples, seed) = (4u32, 42i64);
    let v = json!({"samples": samples, "questions": [
        {"id": "pick", "type": "choice", "options": ["low", "medium", "high"]}
    ]});
    let d = prior
        .decide(DecideRequest {
            schema: ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid"),
            state: json!("four"),
            seed,
        })
        .await
        .expect("decision");
    let a = d.answers["pick"].as_ref().expect("answered");
    assert_eq!(
        a.to_chat_json()["order_sensitivity"]["method"],
        "policy_prior"
    );
    // The canonical listing is high, low, medium (own indices 2, 0, 1); each
    // sample shuffles it with the engine's seeded permutation.
    let canonical = [2usize, 0, 1];
    let listings: Vec<Vec<usize>> = (0..samples)
        .map(|r| {
            let mut perm: Vec<usize> = (0..3).collect();
            if r > 0 {
                let mut rng = python_random(seed + READ_SEED_STRIDE * i64::from(r));
                for i in (1..3).rev() {
                    let j = python_randrange(&mut rng, (i + 1) as u32) as usize;
                    perm.swap(i, j);
                }
            }
            perm.iter().map(|&i| canonical[i]).collect()
        })
        .collect();
    assert!(
        listings.iter().any(|l| l[0] != 2),
        "a sample lists another option first: {listings:?}"
    );
    // Learned prior: (3 reads of 0.8 / 0.1 / 0.1 + one uniform) / 4, by
    // canonical position; each sample's read divided by it position by position.
    let by_position = [
        (2.4 + 1.0 / 3.0) / 4.0,
        (0.3 + 1.0 / 3.0) / 4.0,
        (0.3 + 1.0 / 3.0) / 4.0,
    ];
    let divided: Vec<f64> = [0.8, 0.1, 0.1]
        .iter()
        .zip(by_position)
        .map(|(p, q)| p / q)
        .collect();
    let total: f64 = divided.iter().sum();
    let mut want = [0.0; 3];
    for l in &listings {
        for (pos, &o) in l.iter().enumerate() {
            want[o] += divided[pos] / total / f64::from(samples);
        }
    }
    for (got, w) in a.aggregate.mean.iter().zip(want) {
        assert!((got - w).abs() < 1e-9, "{:?} vs {want:?}", a.aggregate.mean);
    }
}

/// Regression: the learned prior was stored in the option order of the
/// policy that learned it, under a key that does not depend on that order
/// (the prompt lists the canonical order), so a second policy listing the
/// same options in another order divided its read by the prior of the wrong
/// options. It is now stored by position of the canonical listing.
#[tokio::test]
async fn a_prior_learned_under_one_option_order_serves_another_order_of_the_same_options() {
    let b = ScriptedBackend::new(biased_by_position_and_state);
    let engine = debiasing(b, OrderDebias::parse("prior").expect("parses"));
    for state in [
        "favour low, one",
        "favour high, two",
        "favour medium, three",
    ] {
        read_state(&engine, state).await;
    }
    let by_name = |options: &[&str], state: &str| {
        let r = DecideRequest {
            state: json!(state),
            ..req(options)
        };
        let engine = &engine;
        let options: Vec<String> = options.iter().map(|s| (*s).to_string()).collect();
        async move {
            let d = engine.decide(r).await.expect("decision");
            let a = d.answers["pick"].as_ref().expect("answered");
            let json = a.to_chat_json();
            assert_eq!(
                json["order_sensitivity"]["method"], "policy_prior",
                "{json}"
            );
            let mut p: Vec<(String, f64)> = options
                .into_iter()
                .zip(a.aggregate.mean.iter().copied())
                .collect();
            p.sort_by(|x, y| x.0.cmp(&y.0));
            p
        }
    };
    for state in [
        "favour high, four",
        "favour medium, five",
        "favour low, six",
    ] {
        let own = by_name(&["low", "medium", "high"], state).await;
        for other in [["high", "low", "medium"], ["medium", "high", "low"]] {
            let p = by_name(&other, state).await;
            assert_eq!(p, own, "{state}: options listed as {other:?}");
        }
    }
}
