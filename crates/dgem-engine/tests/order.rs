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
