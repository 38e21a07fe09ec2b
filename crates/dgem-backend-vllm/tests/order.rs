//! Option-order debiasing on the vLLM reader (`VllmConfig::order_debias`),
//! against a fake vLLM whose reads carry a pure position prior (the first
//! listed letter weighs 4× the others) and, where a test says so, a content
//! signal (the option `high` weighs 3×, whatever its letter).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use dgem_core::order::OrderDebias;
use dgem_fake_vllm::{scripts, FakeVllm, ReadView};
use serde_json::{json, Value};

/// A fake whose constrained reads weigh `▁A` 4× (position) and the letter of
/// `high` in the read's own prompt `content`× (content; 1 = none).
async fn biased_fake(ids: &Ids, content: f64) -> FakeVllm {
    let tok = ids.tok.clone();
    let a = tok.id("▁A");
    let script = scripts::by_label(move |view: &ReadView, id| {
        let high = letter_of(&view.prompt, "high").map(|l| tok.id(&format!("▁{l}")));
        let pos = if id == a { 4.0 } else { 1.0 };
        let c = if Some(id) == high { content } else { 1.0 };
        pos * c
    });
    fake_scripted(script, Vec::new()).await
}

fn tier(options: &[&str]) -> Value {
    json!({"questions": [{"id": "tier", "type": "choice", "options": options}]})
}

#[tokio::test]
async fn off_reads_the_policys_own_order_once_and_the_first_listed_option_wins() {
    let ids = ids();
    let fake = biased_fake(&ids, 1.0).await;
    let d = decider(&ids, config(&fake));
    assert_eq!(d.config().order_debias, OrderDebias::Off);
    for (options, first) in [
        (["low", "medium", "high"], "low"),
        (["high", "low", "medium"], "high"),
    ] {
        let e = env(&decide(&d, tier(&options)).await.unwrap());
        assert_eq!(e["answers"]["tier"]["choice"], first);
        assert!(close(
            e["answers"]["tier"]["confidence"].as_f64().unwrap(),
            4.0 / 6.0
        ));
        // Nothing was measured about order: no key, as the original reader.
        assert!(e["answers"]["tier"].get("order_sensitivity").is_none());
    }
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn a_pure_position_prior_comes_out_uniform_with_cyclic_listings() {
    let ids = ids();
    let fake = biased_fake(&ids, 1.0).await;
    let mut cfg = config(&fake);
    cfg.order_debias = OrderDebias::default();
    let d = decider(&ids, cfg);
    let e = env(&decide(&d, tier(&["low", "medium", "high"])).await.unwrap());
    // Three options: three listings, one read each.
    assert_eq!(fake.requests().len(), 3);
    for (_, p) in probs(&e, "tier") {
        assert!((p - 1.0 / 3.0).abs() < 1e-9, "{p}");
    }
    let o = &e["answers"]["tier"]["order_sensitivity"];
    assert_eq!(o["orders"], 3);
    assert_eq!(o["method"], "cyclic");
    assert_eq!(o["fragile"], true);
    assert!(close(o["spread"].as_f64().unwrap(), 4.0 / 6.0 - 1.0 / 6.0));
    // Each option was listed first exactly once.
    let mut firsts: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| {
            let p = r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_owned();
            listed_first(&p, &["low", "medium", "high"]).unwrap()
        })
        .collect();
    firsts.sort();
    assert_eq!(firsts, ["high", "low", "medium"]);
}

#[tokio::test]
async fn content_survives_debiasing_and_the_policys_order_no_longer_matters() {
    let ids = ids();
    let fake = biased_fake(&ids, 3.0).await;
    let mut cfg = config(&fake);
    cfg.order_debias = OrderDebias::default();
    let d = decider(&ids, cfg);
    let mut seen = Vec::new();
    for options in [
        ["low", "medium", "high"],
        ["high", "low", "medium"],
        ["medium", "high", "low"],
    ] {
        let e = env(&decide(&d, tier(&options)).await.unwrap());
        assert_eq!(e["answers"]["tier"]["choice"], "high");
        // The position prior cancels over the cycle: high 3 : 1 : 1.
        assert!(close(
            e["answers"]["tier"]["confidence"].as_f64().unwrap(),
            0.6
        ));
        seen.push(probs(&e, "tier"));
    }
    // The same requests in every case (the canonical listing); only the
    // final renormalization sums in the policy's own order (last bit).
    let same = |a: &[(String, f64)], b: &[(String, f64)]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && (x.1 - y.1).abs() < 1e-12)
    };
    assert!(seen.windows(2).all(|w| same(&w[0], &w[1])), "{seen:?}");
}

#[tokio::test]
async fn chained_reads_prefill_each_listings_own_letter_for_an_earlier_answer() {
    let ids = ids();
    let fake = biased_fake(&ids, 3.0).await;
    let mut cfg = config(&fake);
    cfg.order_debias = OrderDebias::default();
    let d = decider(&ids, cfg);
    let policy = json!({"questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]},
        {"id": "page", "type": "boolean", "ask_if": {"tier": ["high"]}}]});
    let e = env(&decide(&d, policy).await.unwrap());
    assert_eq!(e["answers"]["tier"]["choice"], "high");
    assert!(e["answers"]["page"].is_object(), "{e}");
    // Stage 2 (`page`, 2 listings) continues a token prompt holding the
    // question block of its listing and the earlier answer `tier: <letter>`.
    let later: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/v1/completions"))
        .map(|r| {
            let toks: Vec<u32> = r.body["prompt"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| u32::try_from(v.as_u64().unwrap()).unwrap())
                .collect();
            dgem_core::tokenizer::Tokenizer::decode(ids.tok.as_ref(), &toks)
        })
        .collect();
    assert_eq!(later.len(), 2, "{later:?}");
    for p in &later {
        let letter = letter_of(p, "high").unwrap();
        assert!(p.contains(&format!("tier: {letter}")), "{p}");
    }
    // The two listings list `high` under different letters.
    assert_ne!(letter_of(&later[0], "high"), letter_of(&later[1], "high"));
}
