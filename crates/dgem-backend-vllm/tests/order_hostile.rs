//! Adversarial tests of option-order debiasing on the vLLM reader
//! (`VllmConfig::order_debias`): mixed widths in one group, samples policies,
//! chained prompts in every format, images, brackets, failures mid-way.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use dgem_backend::{BackendError, DecideError, DecideRequest, Decider as _, Decision};
use dgem_backend_vllm::VllmDecider;
use dgem_core::order::OrderDebias;
use dgem_core::tokenizer::Tokenizer as _;
use dgem_fake_vllm::{scripts, Failure, FakeVllm, ReadView, Recorded};
use serde_json::{json, Value};

/// A 1×1 PNG as a data URL.
const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAACklEQVR4nGMAAQAABQABDQottAAAAABJRU5ErkJggg==";

type Weight = dyn Fn(&ReadView, u32) -> f64 + Send + Sync;

/// A fake whose constrained reads weigh each requested label id by
/// `weight(view, id)` at every canvas position.
async fn fake_by(weight: Arc<Weight>, thought: Vec<u32>) -> FakeVllm {
    fake_scripted(
        scripts::by_label(move |view: &ReadView, id| weight(view, id)),
        thought,
    )
    .await
}

/// A pure position prior: the first letter (`▁A`) and the first digit (`▁1`)
/// weigh 4×, everything else 1×.
async fn position_fake(ids: &Ids) -> FakeVllm {
    let (a, one) = (ids.tok.id("▁A"), ids.tok.id("▁1"));
    fake_by(
        Arc::new(move |_, id| if id == a || id == one { 4.0 } else { 1.0 }),
        Vec::new(),
    )
    .await
}

fn cyclic(fake: &FakeVllm) -> dgem_backend_vllm::VllmConfig {
    let mut cfg = config(fake);
    cfg.order_debias = OrderDebias::default();
    cfg
}

/// The text of a recorded read: chat messages as JSON text, a token prompt decoded.
fn prompt_text(ids: &Ids, r: &Recorded) -> String {
    if r.path.ends_with("/v1/completions") {
        let toks: Vec<u32> = r.body["prompt"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| u32::try_from(v.as_u64().unwrap()).unwrap())
            .collect();
        ids.tok.decode(&toks)
    } else {
        r.body["messages"].to_string()
    }
}

/// Reads (not thoughts) among the recorded requests: they carry a seeded canvas.
fn reads(fake: &FakeVllm) -> Vec<Recorded> {
    fake.requests()
        .into_iter()
        .filter(|r| r.body["vllm_xargs"].get("diffusion_seed_canvas").is_some())
        .collect()
}

fn thoughts(fake: &FakeVllm) -> usize {
    fake.requests().len() - reads(fake).len()
}

/// Every answer a distribution in [0, 1] summing to 1; every spread in [0, 1].
fn check_answers(e: &Value) {
    let answers = e["answers"].as_object().unwrap();
    assert!(!answers.is_empty(), "{e}");
    for (id, a) in answers {
        if a.is_null() {
            continue;
        }
        let ps: Vec<f64> = a["probabilities"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_f64().unwrap())
            .collect();
        assert!(
            ps.iter().all(|p| (0.0..=1.0).contains(p) && p.is_finite()),
            "{id}: {ps:?}"
        );
        let s: f64 = ps.iter().sum();
        assert!((s - 1.0).abs() < 1e-9, "{id}: sums to {s}");
        let c = a["confidence"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&c), "{id}: confidence {c}");
        if let Some(o) = a.get("order_sensitivity") {
            if let Some(sp) = o["spread"].as_f64() {
                assert!((0.0..=1.0).contains(&sp), "{id}: spread {sp}");
            }
        }
    }
}

/// Every probability of question `q` is `1 / k`: the position prior cancelled.
fn assert_uniform(e: &Value, q: &str, k: f64) {
    for (n, p) in probs(e, q) {
        assert!((p - 1.0 / k).abs() < 1e-9, "{q}/{n}: {p}");
    }
}

fn orders(e: &Value, q: &str) -> u64 {
    e["answers"][q]["order_sensitivity"]["orders"]
        .as_u64()
        .unwrap_or_else(|| panic!("{q}: no order_sensitivity in {e}"))
}

async fn with_timeout<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("the decision hung")
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:02}")).collect()
}

// ---------------------------------------------------------------------------
// Mixed widths in one group.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn mixed_widths_share_one_group_and_each_answer_reports_its_own_orders() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"isolate": "none", "questions": [
        {"id": "u", "type": "boolean"},
        {"id": "team", "type": "choice", "options": ["eng", "billing", "sales", "legal", "ops"]},
        {"id": "sev", "type": "score", "levels": ["calm", "frustrated", "furious"]}]});
    let dec = with_timeout(decide(&d, policy)).await.unwrap();
    let e = env(&dec);
    check_answers(&e);
    // One group, read in as many listings as its widest question (5).
    assert_eq!(
        e["diagnostics"]["chunks"].as_array().unwrap().len(),
        1,
        "{e}"
    );
    assert_eq!(fake.requests().len(), 5);
    assert_eq!(orders(&e, "u"), 2);
    assert_eq!(orders(&e, "team"), 5);
    // A score labelled by digits keeps its scale: one listing.
    assert_eq!(orders(&e, "sev"), 1);
    // The position prior cancels for every rotated question over its own
    // full cycle.
    for (q, k) in [("team", 5.0), ("u", 2.0)] {
        for (n, p) in probs(&e, q) {
            assert!((p - 1.0 / k).abs() < 1e-9, "{q}/{n}: {p}");
        }
    }
    // The digit scale is read as listed, so the fake's 4× on `1` (its first
    // level) stays: calm 4/6. On a scale a preference for its low end cannot
    // be told from a position prior without relabelling the levels.
    let sev = probs(&e, "sev");
    assert!(
        sev.iter()
            .any(|(n, p)| n == "calm" && (p - 4.0 / 6.0).abs() < 1e-9),
        "{sev:?}"
    );
    // Each option of `team` is listed first exactly once.
    let mut firsts: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| {
            let p = prompt_text(&ids, r);
            listed_first(&p, &["eng", "billing", "sales", "legal", "ops"]).unwrap()
        })
        .collect();
    firsts.sort();
    assert_eq!(firsts, ["billing", "eng", "legal", "ops", "sales"]);
    // Every listing read the same seeded canvas.
    let pos = dec.diagnostics.questions["team"].pos;
    let cells: Vec<u64> = fake.requests().iter().map(|r| canvas(r)[pos]).collect();
    assert!(cells.windows(2).all(|w| w[0] == w[1]), "{cells:?}");
}

// ---------------------------------------------------------------------------
// Samples policies.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn fixed_three_samples_read_every_listing_three_times_and_stay_uniform() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"samples": 3, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(fake.requests().len(), 9);
    assert_uniform(&e, "tier", 3.0);
    assert_eq!(e["diagnostics"]["samples"]["n"], 3, "{e}");
    assert_eq!(e["diagnostics"]["samples"]["policy"]["mode"], "fixed");
    assert_eq!(
        e["answers"]["tier"]["order_sensitivity"]["method"],
        "cyclic"
    );
}

#[tokio::test]
async fn fixed_three_samples_report_three_orders_not_nine() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"samples": 3, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    // `OrderSensitivity::orders` is documented as "Listings read".
    assert_eq!(orders(&e, "tier"), 3, "{e}");
}

/// Weights for the uneven-extension probes: when `high` is listed first the
/// read is near-certain of it (low entropy, no extension); otherwise a pure
/// position prior (first letter 4×; entropy above the threshold, extends).
fn uneven(ids: &Ids) -> Arc<Weight> {
    let tok = ids.tok.clone();
    let a = tok.id("▁A");
    Arc::new(move |view: &ReadView, id| {
        let high_first = letter_of(&view.prompt, "high").as_deref() == Some("A");
        match (high_first, id == a) {
            (true, true) => 98.0,
            (true, false) => 1.0,
            (false, true) => 4.0,
            (false, false) => 1.0,
        }
    })
}

fn auto_policy() -> Value {
    json!({"samples": "auto", "auto_max": 3, "auto_threshold": 0.5, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]}]})
}

#[tokio::test]
async fn auto_samples_extend_some_listings_and_not_others_without_breaking_the_answer() {
    let ids = ids();
    let fake = fake_by(uneven(&ids), Vec::new()).await;
    let d = decider(&ids, cyclic(&fake));
    let e = env(&with_timeout(decide(&d, auto_policy())).await.unwrap());
    check_answers(&e);
    // Listing 0 (canonical: high, low, medium) would stop at one read and
    // listings 1 and 2 extend: so every listing reads the policy's maximum
    // (3), and the policy block says so.
    assert_eq!(fake.requests().len(), 3 * 3);
    let policy = &e["diagnostics"]["samples"]["policy"];
    assert_eq!(policy["mode"], "fixed", "{e}");
    assert_eq!(policy["n"], 3, "{e}");
    assert_eq!(e["diagnostics"]["samples"]["n"], 3, "{e}");
}

#[tokio::test]
async fn auto_extension_of_some_listings_must_not_reintroduce_the_position_prior() {
    let ids = ids();
    let fake = fake_by(uneven(&ids), Vec::new()).await;
    let d = decider(&ids, cyclic(&fake));
    let e = env(&with_timeout(decide(&d, auto_policy())).await.unwrap());
    // Every listing favours `high` over the option at its own position
    // prior, except through position: pooled per listing first, `high` wins.
    assert_eq!(e["answers"]["tier"]["choice"], "high", "{e}");
}

// ---------------------------------------------------------------------------
// Wider than the cap; max_orders.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn eight_options_are_read_in_six_evenly_spaced_listings() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let opts = names("o", 8);
    // Listed backwards by the policy: the canonical listing sorts them.
    let rev: Vec<&String> = opts.iter().rev().collect();
    let policy = json!({"questions": [{"id": "pick", "type": "choice", "options": rev}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(fake.requests().len(), 6);
    assert_eq!(orders(&e, "pick"), 6);
    // Shifts ⌊t·8/6⌋ = 0, 1, 2, 4, 5, 6 of the canonical (sorted) listing.
    let firsts: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| {
            let p = prompt_text(&ids, r);
            listed_first(&p, &opts).unwrap()
        })
        .collect();
    let mut sorted = firsts.clone();
    sorted.sort();
    assert_eq!(sorted, ["o00", "o01", "o02", "o04", "o05", "o06"]);
    // Partial cancellation: o03 and o07 were never listed first.
    let p = probs(&e, "pick");
    let at = |n: &str| p.iter().find(|(k, _)| k == n).unwrap().1;
    assert!(at("o03") < at("o00"), "{p:?}");
    assert!(close(at("o03"), at("o07")), "{p:?}");
}

#[tokio::test]
async fn max_orders_two_reads_two_listings_of_a_three_option_choice() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let mut cfg = config(&fake);
    cfg.order_debias = OrderDebias::Cyclic { max_orders: 2 };
    let d = decider(&ids, cfg);
    let policy = json!({"questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]},
        {"id": "u", "type": "boolean"}], "isolate": "none"});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(orders(&e, "tier"), 2);
    assert_eq!(orders(&e, "u"), 2);
    // Shifts 0 and ⌊3/2⌋ = 1 of [high, low, medium]: high, then low first.
    let firsts: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| {
            let p = prompt_text(&ids, r);
            listed_first(&p, &["low", "medium", "high"]).unwrap()
        })
        .collect();
    let mut s = firsts.clone();
    s.sort();
    assert_eq!(s, ["high", "low"]);
    // medium was never first: pooled 1/6·1/6 vs high/low 4/6·1/6.
    let p = probs(&e, "tier");
    assert!(p[2].1 < p[0].1 && close(p[0].1, p[1].1), "{p:?}");
}

#[tokio::test]
async fn max_orders_zero_or_one_reads_one_canonical_listing_without_panicking() {
    let ids = ids();
    for m in [0usize, 1] {
        let fake = position_fake(&ids).await;
        let mut cfg = config(&fake);
        cfg.order_debias = OrderDebias::Cyclic { max_orders: m };
        let d = decider(&ids, cfg);
        let policy = json!({"questions": [
            {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]}]});
        let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
        check_answers(&e);
        assert_eq!(fake.requests().len(), 1);
        // The canonical listing: `high` is listed first and wins by position.
        assert_eq!(e["answers"]["tier"]["choice"], "high", "{e}");
        assert_eq!(e["answers"]["tier"]["order_sensitivity"]["orders"], 1);
        assert_eq!(
            e["answers"]["tier"]["order_sensitivity"]["method"],
            "single_order"
        );
    }
}

// ---------------------------------------------------------------------------
// Chained decisions.
// ---------------------------------------------------------------------------

fn three_stages() -> Value {
    json!({"questions": [
        {"id": "urgent", "type": "boolean"},
        {"id": "team", "type": "choice", "options": ["support", "billing", "eng", "legal"],
         "ask_if": {"urgent": ["yes"]}},
        {"id": "sev", "type": "score", "levels": ["calm", "frustrated", "furious"],
         "ask_if": {"team": ["support", "billing", "eng", "legal"]}}]})
}

/// Position prior plus `yes` 3× (so `urgent` is yes).
async fn chained_fake(ids: &Ids, thought: Vec<u32>) -> FakeVllm {
    let (a, one, yes) = (ids.tok.id("▁A"), ids.tok.id("▁1"), ids.yes);
    fake_by(
        Arc::new(move |_, id| {
            if id == a || id == one || id == yes {
                4.0
            } else {
                1.0
            }
        }),
        thought,
    )
    .await
}

/// Each later read carries `id<sep><letter>` with the letter its own block
/// gives the chosen answer `name`.
fn assert_prefilled_in_own_letters(ids: &Ids, fake: &FakeVllm, id: &str, name: &str, sep: &str) {
    let later: Vec<String> = reads(fake)
        .iter()
        .filter(|r| r.path.ends_with("/v1/completions"))
        .map(|r| prompt_text(ids, r))
        .filter(|p| p.contains(&format!("{id}{sep}")) && letter_of(p, name).is_some())
        .collect();
    assert!(!later.is_empty());
    for p in &later {
        let letter = letter_of(p, name).unwrap();
        assert!(
            p.contains(&format!("{id}{sep}{letter}")),
            "{id}{sep}{letter} in {p}"
        );
    }
}

#[tokio::test]
async fn three_chained_stages_read_each_stage_in_its_own_listings() {
    let ids = ids();
    let fake = chained_fake(&ids, Vec::new()).await;
    let d = decider(&ids, cyclic(&fake));
    let e = env(&with_timeout(decide(&d, three_stages())).await.unwrap());
    check_answers(&e);
    assert_eq!(e["answers"]["urgent"]["label"], "yes", "{e}");
    assert!(
        e["answers"]["team"].is_object() && e["answers"]["sev"].is_object(),
        "{e}"
    );
    // 2 + 4 + 1 listings (the digit-labelled score keeps its scale), no thoughts.
    assert_eq!(reads(&fake).len(), 7);
    assert_eq!(thoughts(&fake), 0);
    assert_eq!(orders(&e, "urgent"), 2);
    assert_eq!(orders(&e, "team"), 4);
    assert_eq!(orders(&e, "sev"), 1);
    // A pure position prior: team uniform (tie broken on the policy's first).
    for (_, p) in probs(&e, "team") {
        assert!((p - 0.25).abs() < 1e-9, "{p}");
    }
    let team = e["answers"]["team"]["choice"].as_str().unwrap().to_owned();
    // Stage 3 sees `team: <its own letter>` in its one listing.
    assert_prefilled_in_own_letters(&ids, &fake, "team", &team, ": ");
    let stage3: Vec<String> = reads(&fake)
        .iter()
        .filter(|r| r.path.ends_with("/v1/completions"))
        .map(|r| prompt_text(&ids, r))
        .filter(|p| p.contains("team: "))
        .collect();
    assert_eq!(stage3.len(), 1, "{stage3:?}");
    // Stage 2 and 3 also see `urgent: yes` (a boolean keeps its name).
    let with_urgent = reads(&fake)
        .iter()
        .map(|r| prompt_text(&ids, r))
        .filter(|p| p.contains("urgent: yes"))
        .count();
    assert_eq!(with_urgent, 4 + 1);
}

#[tokio::test]
async fn sequential_groups_see_earlier_groups_in_their_own_letters() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"sequential": true, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"], "alone": true},
        {"id": "team", "type": "choice", "options": ["support", "billing"], "alone": true}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(
        e["diagnostics"]["chunks"].as_array().unwrap().len(),
        2,
        "{e}"
    );
    assert_eq!(reads(&fake).len(), 3 + 2);
    let tier = e["answers"]["tier"]["choice"].as_str().unwrap().to_owned();
    assert_prefilled_in_own_letters(&ids, &fake, "tier", &tier, ": ");
    let later: Vec<String> = reads(&fake)
        .iter()
        .filter(|r| r.path.ends_with("/v1/completions"))
        .map(|r| prompt_text(&ids, r))
        .filter(|p| p.contains("tier: "))
        .collect();
    assert_eq!(later.len(), 2);
    // The two listings of `team` list `tier` in different orders.
    assert_ne!(letter_of(&later[0], "low"), letter_of(&later[1], "low"));
}

#[tokio::test]
async fn indexed_format_prefills_each_listings_own_letter() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    // More than 10 questions: the indexed format (`idlabel` joined by spaces).
    let mut qs =
        vec![json!({"id": "tier", "type": "choice", "options": ["low", "medium", "high"]})];
    qs.push(
        json!({"id": "team", "type": "choice", "options": ["support", "billing", "eng"],
         "depends_on": ["tier"]}),
    );
    for i in 0..9 {
        qs.push(json!({"id": format!("f{i}"), "type": "boolean", "depends_on": ["tier"]}));
    }
    let policy = json!({"questions": qs});
    let dec = with_timeout(decide(&d, policy)).await.unwrap();
    assert_eq!(
        dec.diagnostics.chunks.len(),
        2,
        "{:?}",
        dec.diagnostics.chunks
    );
    let e = env(&dec);
    check_answers(&e);
    assert_eq!(reads(&fake).len(), 3 + 3);
    let tier = e["answers"]["tier"]["choice"].as_str().unwrap().to_owned();
    assert_prefilled_in_own_letters(&ids, &fake, "tier", &tier, "");
    let later: Vec<String> = reads(&fake)
        .iter()
        .filter(|r| r.path.ends_with("/v1/completions"))
        .map(|r| prompt_text(&ids, r))
        .collect();
    assert_eq!(later.len(), 3);
    let letters: Vec<String> = later.iter().map(|p| letter_of(p, &tier).unwrap()).collect();
    let mut uniq = letters.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), 3, "{letters:?}");
}

#[tokio::test]
async fn chained_thoughts_are_written_once_per_listing() {
    let ids = ids();
    let th = vec![ids.tok.id("▁hmm"), ids.tok.id("▁ok")];
    let fake = chained_fake(&ids, th).await;
    let d = decider(&ids, cyclic(&fake));
    let mut policy = three_stages();
    policy["think"] = json!(16);
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    // The chained prefix holds a thought per listing of the widest question (4).
    assert_eq!(thoughts(&fake), 4);
    assert_eq!(reads(&fake).len(), 7);
    assert!(e["diagnostics"]["thought"].is_object(), "{e}");
    let team = e["answers"]["team"]["choice"].as_str().unwrap().to_owned();
    assert_prefilled_in_own_letters(&ids, &fake, "team", &team, ": ");
    // Every read continues a prefix that holds the thought.
    for r in reads(&fake) {
        assert!(r.path.ends_with("/v1/completions"));
        assert!(prompt_text(&ids, &r).contains("hmm"));
    }
}

#[tokio::test]
async fn unchained_thoughts_are_written_per_listing() {
    let ids = ids();
    let th = vec![ids.tok.id("▁hmm")];
    let fake = chained_fake(&ids, th).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"think": 16, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(thoughts(&fake), 3);
    assert_eq!(reads(&fake).len(), 3);
    assert_uniform(&e, "tier", 3.0);
}

#[tokio::test]
async fn a_shared_prompt_lists_every_question_in_the_reads_own_listing() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"chunk_prompt": "shared", "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"], "alone": true},
        {"id": "team", "type": "choice", "options": ["support", "billing"], "alone": true}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(reads(&fake).len(), 3 + 2);
    for r in reads(&fake) {
        let p = prompt_text(&ids, &r);
        // Both questions are listed in every read.
        assert!(
            p.contains("Question tier") && p.contains("Question team"),
            "{p}"
        );
    }
    assert_uniform(&e, "tier", 3.0);
    for (_, p) in probs(&e, "team") {
        assert!((p - 0.5).abs() < 1e-9, "{p}");
    }
}

// ---------------------------------------------------------------------------
// Image states.
// ---------------------------------------------------------------------------

async fn decide_image(d: &VllmDecider, s: Value) -> Result<Decision, DecideError> {
    d.decide(DecideRequest {
        schema: schema(s),
        state: json!([
            {"type": "image_url", "image_url": {"url": PNG}},
            {"type": "text", "text": "a parcel on a doorstep"},
        ]),
        seed: 42,
    })
    .await
}

#[tokio::test]
async fn image_states_are_read_in_every_listing_on_the_chat_route() {
    let ids = ids();
    let fake = chained_fake(&ids, Vec::new()).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]},
        {"id": "damaged", "type": "boolean", "depends_on": ["tier"]}]});
    let e = env(&with_timeout(decide_image(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(reads(&fake).len(), 3 + 2);
    for r in reads(&fake) {
        assert_eq!(r.path, "/v1/chat/completions");
        let parts = r.body["messages"].to_string();
        assert!(parts.contains("image_url"), "{parts}");
    }
    assert_uniform(&e, "tier", 3.0);
    // The later stage restates the earlier answer by name (no letters).
    let tier = e["answers"]["tier"]["choice"].as_str().unwrap().to_owned();
    let restated = reads(&fake)
        .iter()
        .filter(|r| {
            r.body["messages"]
                .to_string()
                .contains(&format!("tier: {tier}"))
        })
        .count();
    assert_eq!(restated, 2, "{e}");
}

// ---------------------------------------------------------------------------
// Scores.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_rotated_score_keeps_each_levels_own_digit() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"questions": [
        {"id": "sev", "type": "score", "levels": [1, 2, 3, 4, 5]}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    // Its scale is its canonical listing: one read, digits beside their levels.
    assert_eq!(reads(&fake).len(), 1);
    assert_eq!(orders(&e, "sev"), 1);
    for r in reads(&fake) {
        let p = prompt_text(&ids, &r);
        for lvl in ["1", "2", "3", "4", "5"] {
            assert_eq!(letter_of(&p, lvl).as_deref(), Some(lvl), "{p}");
        }
    }
}

// ---------------------------------------------------------------------------
// Brackets (choices wider than 26).
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_thirty_option_choice_goes_through_brackets_with_a_bounded_number_of_reads() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let opts = names("opt", 30);
    let policy = json!({"questions": [{"id": "intent", "type": "choice", "options": opts}]});
    let dec = with_timeout(decide(&d, policy)).await.unwrap();
    let e = env(&dec);
    check_answers(&e);
    let n = fake.requests().len();
    // Round 1: two brackets of 15 in one group, 6 listings; final: 4 finalists, 4 listings.
    assert_eq!(n, 6 + 4, "{n} requests");
    assert!(dec.diagnostics.brackets.contains_key("intent"));
}

#[tokio::test]
async fn a_bracket_routed_choice_reports_its_order_sensitivity() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let opts = names("opt", 30);
    let policy = json!({"questions": [{"id": "intent", "type": "choice", "options": opts}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    assert!(
        e["answers"]["intent"].get("order_sensitivity").is_some(),
        "{}",
        e["answers"]["intent"]
    );
}

// ---------------------------------------------------------------------------
// Failures mid-way.
// ---------------------------------------------------------------------------

fn backend_err(e: DecideError) -> BackendError {
    match e {
        DecideError::Backend(b) => b,
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_500_while_listings_are_in_flight_fails_the_decision_clearly() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"samples": 2, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high", "urgent", "none"]}]});
    // Health first, so the failure hits a read.
    assert_eq!(d.health().await, dgem_backend::Health::Ready);
    fake.fail_next(Failure::Status(500, "engine dead".into()), 1);
    let err = with_timeout(decide(&d, policy.clone())).await.unwrap_err();
    assert_eq!(
        backend_err(err),
        BackendError::Upstream {
            status: 500,
            body: "engine dead".into()
        }
    );
    // The decider still works afterwards.
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
}

#[tokio::test]
async fn a_failure_in_a_later_chained_stage_fails_the_decision() {
    let ids = ids();
    let fake = chained_fake(&ids, Vec::new()).await;
    let d = decider(&ids, cyclic(&fake));
    assert_eq!(d.health().await, dgem_backend::Health::Ready);
    // Let stage 1 (2 listings) through, then fail the third request onward once.
    let first = with_timeout(decide(&d, three_stages())).await.unwrap();
    check_answers(&env(&first));
    let before = fake.requests().len();
    assert_eq!(before, 7);
    // Fail several at once: every listing of a stage.
    fake.fail_next(Failure::MalformedJson, 4);
    let err = with_timeout(decide(&d, three_stages())).await.unwrap_err();
    assert!(matches!(err, DecideError::Backend(_)), "{err:?}");
}

#[tokio::test]
async fn a_dropped_connection_among_thoughts_fails_the_decision() {
    let ids = ids();
    let th = vec![ids.tok.id("▁hmm")];
    let fake = chained_fake(&ids, th).await;
    let d = decider(&ids, cyclic(&fake));
    assert_eq!(d.health().await, dgem_backend::Health::Ready);
    let mut policy = three_stages();
    policy["think"] = json!(8);
    fake.fail_next(Failure::DropConnection, 1);
    let err = with_timeout(decide(&d, policy)).await.unwrap_err();
    assert!(matches!(backend_err(err), BackendError::Connection(_)));
}

// ---------------------------------------------------------------------------
// Off: the original requests.
// ---------------------------------------------------------------------------

// CPython `random.Random(s).randrange(262144)` for seed 42 (tests/decide.rs).
const CELL_42: u64 = 58369;
const CELL_K1: u64 = 220_972; // group 1: 42 + 104729

#[tokio::test]
async fn off_sends_one_request_per_group_in_the_policys_order_with_the_original_seeds() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, config(&fake));
    assert_eq!(d.config().order_debias, OrderDebias::Off);
    let policy = json!({"questions": [
        {"id": "tier", "type": "choice", "options": ["zeta", "alpha", "mid"], "alone": true},
        {"id": "u", "type": "boolean", "alone": true}]});
    let dec = with_timeout(decide(&d, policy.clone())).await.unwrap();
    let e = env(&dec);
    check_answers(&e);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    // Listed as the policy wrote it, and the first listed wins by position.
    let tier_req = reqs
        .iter()
        .find(|r| r.body["messages"].to_string().contains("Question tier"))
        .unwrap();
    let p = prompt_text(&ids, tier_req);
    assert_eq!(letter_of(&p, "zeta").as_deref(), Some("A"), "{p}");
    assert_eq!(e["answers"]["tier"]["choice"], "zeta");
    for q in ["tier", "u"] {
        assert!(e["answers"][q].get("order_sensitivity").is_none(), "{e}");
    }
    let cells: Vec<u64> = reqs
        .iter()
        .map(|r| {
            let q = if r.body["messages"].to_string().contains("Question tier") {
                "tier"
            } else {
                "u"
            };
            canvas(r)[dec.diagnostics.questions[q].pos]
        })
        .collect();
    let mut sorted = cells.clone();
    sorted.sort_unstable();
    let mut want = vec![CELL_42, CELL_K1];
    want.sort_unstable();
    assert_eq!(sorted, want);
    // Off with explicit setting sends byte-identical requests to the default.
    let fake2 = position_fake(&ids).await;
    let mut cfg = config(&fake2);
    cfg.order_debias = OrderDebias::Off;
    let d2 = decider(&ids, cfg);
    let _ = with_timeout(decide(&d2, policy)).await.unwrap();
    let mut a: Vec<String> = reqs.iter().map(|r| r.body.to_string()).collect();
    let mut b: Vec<String> = fake2
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

#[tokio::test]
async fn cyclic_listings_differ_only_in_option_order_and_share_seeds() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"questions": [
        {"id": "tier", "type": "choice", "options": ["zeta", "alpha", "mid"]}]});
    let dec = with_timeout(decide(&d, policy)).await.unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    let pos = dec.diagnostics.questions["tier"].pos;
    for r in &reqs {
        assert_eq!(canvas(r)[pos], CELL_42);
        assert_eq!(canvas(r), canvas(&reqs[0]));
        assert_eq!(
            r.body["logprob_token_ids"],
            reqs[0].body["logprob_token_ids"]
        );
    }
    // Canonical listing 0 is sorted: alpha first.
    let firsts: Vec<Option<String>> = reqs
        .iter()
        .map(|r| letter_of(&prompt_text(&ids, r), "alpha"))
        .collect();
    assert!(firsts.contains(&Some("A".into())), "{firsts:?}");
}

// ---------------------------------------------------------------------------
// Odd option names.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn options_differing_only_in_case_and_space_are_pooled_to_their_own_names() {
    let ids = ids();
    // Content signal: the option written `B` (exactly) is 3× wherever listed.
    let tok = ids.tok.clone();
    let a = tok.id("▁A");
    let fake = fake_by(
        Arc::new(move |view: &ReadView, id| {
            let b = letter_of(&view.prompt, "B").map(|l| tok.id(&format!("▁{l}")));
            let pos = if id == a { 4.0 } else { 1.0 };
            let c = if Some(id) == b { 3.0 } else { 1.0 };
            pos * c
        }),
        Vec::new(),
    )
    .await;
    let d = decider(&ids, cyclic(&fake));
    for opts in [["b", "B", "a"], ["B", "a", "b"], ["a", "b", "B"]] {
        let policy = json!({"questions": [{"id": "x", "type": "choice", "options": opts}]});
        // Names unique as written are accepted, though equal ignoring case.
        let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
        check_answers(&e);
        assert_eq!(e["answers"]["x"]["choice"], "B", "{opts:?}: {e}");
        assert!(close(
            e["answers"]["x"]["confidence"].as_f64().unwrap(),
            0.6
        ));
    }
}

// ---------------------------------------------------------------------------
// Accounting, skips, concurrency, steps.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn timing_reads_counts_samples_and_orders_count_listings() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"samples": 3, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]}]});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    // 3 listings × 3 samples sent; `timing.reads` counts the samples (a read
    // covers every listing, as documented), `orders` the listings.
    assert_eq!(fake.requests().len(), 9);
    assert_eq!(e["diagnostics"]["timing"]["reads"], 3, "{e}");
    assert_eq!(orders(&e, "tier"), 3, "{e}");
}

#[tokio::test]
async fn output_rows_add_up_over_listings() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let policy = json!({"questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]}]});
    let off = decider(&ids, config(&fake));
    let e_off = env(&with_timeout(decide(&off, policy.clone())).await.unwrap());
    let on = decider(&ids, cyclic(&fake));
    let e_on = env(&with_timeout(decide(&on, policy)).await.unwrap());
    let rows = |e: &Value| e["diagnostics"]["rows"].as_u64().unwrap();
    assert_eq!(rows(&e_on), 3 * rows(&e_off), "{e_on}");
}

#[tokio::test]
async fn a_skipped_stage_sends_nothing_for_its_listings() {
    let ids = ids();
    let (a, no) = (ids.tok.id("▁A"), ids.no);
    let fake = fake_by(
        Arc::new(move |_, id| if id == a || id == no { 4.0 } else { 1.0 }),
        Vec::new(),
    )
    .await;
    let d = decider(&ids, cyclic(&fake));
    let e = env(&with_timeout(decide(&d, three_stages())).await.unwrap());
    check_answers(&e);
    assert_eq!(e["answers"]["urgent"]["label"], "no", "{e}");
    assert!(
        e["answers"]["team"].is_null() && e["answers"]["sev"].is_null(),
        "{e}"
    );
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(orders(&e, "urgent"), 2);
}

#[tokio::test]
async fn many_parallel_groups_with_one_connection_do_not_deadlock() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let mut cfg = cyclic(&fake);
    cfg.max_concurrent = 1;
    let d = decider(&ids, cfg);
    let qs: Vec<Value> = (0..18)
        .map(|i| {
            json!({"id": format!("q{i}"), "type": "choice",
                   "options": ["a1", "b2", "c3", "d4", "e5", "f6"], "alone": true})
        })
        .collect();
    let policy = json!({"samples": 2, "questions": qs});
    let dec = with_timeout(decide(&d, policy)).await.unwrap();
    let e = env(&dec);
    check_answers(&e);
    assert_eq!(dec.diagnostics.chunks.len(), 18);
    assert_eq!(fake.requests().len(), 18 * 6 * 2);
    for i in 0..18 {
        assert_eq!(
            e["answers"][format!("q{i}")]["order_sensitivity"]["method"],
            "cyclic"
        );
        for (_, p) in probs(&e, &format!("q{i}")) {
            assert!((p - 1.0 / 6.0).abs() < 1e-9, "{p}");
        }
    }
}

#[tokio::test]
async fn pinned_steps_read_every_listing() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"steps": 3, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]},
        {"id": "u", "type": "boolean"}], "isolate": "none"});
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(fake.requests().len(), 3);
    let pinned: Vec<Value> = fake
        .requests()
        .iter()
        .map(|r| r.body["vllm_xargs"]["diffusion_pinned"].clone())
        .collect();
    assert!(
        pinned.iter().all(|p| !p.is_null() && *p == pinned[0]),
        "{pinned:?}"
    );
}

#[tokio::test]
async fn an_image_thought_is_written_in_every_listing() {
    let ids = ids();
    let th = vec![ids.tok.id("▁hmm")];
    let fake = chained_fake(&ids, th).await;
    let d = decider(&ids, cyclic(&fake));
    let policy = json!({"think": 16, "questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]}]});
    let e = env(&with_timeout(decide_image(&d, policy)).await.unwrap());
    check_answers(&e);
    assert_eq!(thoughts(&fake), 3);
    assert_eq!(reads(&fake).len(), 3);
    assert_uniform(&e, "tier", 3.0);
}

#[tokio::test]
async fn a_wide_choice_beside_ordinary_questions_counts_its_reads() {
    let ids = ids();
    let fake = position_fake(&ids).await;
    let d = decider(&ids, cyclic(&fake));
    let opts = names("opt", 60);
    let policy = json!({"questions": [
        {"id": "tier", "type": "choice", "options": ["low", "medium", "high"]},
        {"id": "intent", "type": "choice", "options": opts}]});
    let dec = with_timeout(decide(&d, policy)).await.unwrap();
    let e = env(&dec);
    check_answers(&e);
    // tier: 3 listings. intent: 3 brackets of 20 (6 listings per group the
    // brackets fit in), then 6 finalists in 6 listings.
    let n = fake.requests().len();
    assert_eq!(n, 3 + 6 + 6, "{n} requests");
    assert_eq!(orders(&e, "tier"), 3);
    // The final round's listings give the routed answer its order sensitivity.
    assert_eq!(orders(&e, "intent"), 6);
}

#[tokio::test]
async fn chained_prefix_thoughts_are_written_concurrently() {
    let ids = ids();
    let th = vec![ids.tok.id("▁hmm")];
    let fake = chained_fake(&ids, th).await;
    let d = decider(&ids, cyclic(&fake));
    assert_eq!(d.health().await, dgem_backend::Health::Ready);
    let mut policy = three_stages();
    policy["think"] = json!(8);
    // The first 4 POSTs are the 4 listings' prefix thoughts: each takes 400 ms.
    fake.fail_next(Failure::Slow(Duration::from_millis(400)), 4);
    let started = std::time::Instant::now();
    let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
    check_answers(&e);
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1200), "took {took:?}");
}

// ---------------------------------------------------------------------------
// Order invariance through a chained decision.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_chained_decision_does_not_depend_on_the_policys_option_order() {
    let ids = ids();
    let tok = ids.tok.clone();
    let a = tok.id("▁A");
    // Position prior 4× on A; content 3× on `high` and on `billing`, found in
    // the read's own question block (a token prompt decoded).
    let weight: Arc<Weight> = Arc::new(move |view: &ReadView, id| {
        let text = if view.path.ends_with("/v1/completions") {
            let toks: Vec<u32> = view.prompt.split(' ').map(|t| t.parse().unwrap()).collect();
            tok.decode(&toks)
        } else {
            view.prompt.clone()
        };
        let fav: Vec<u32> = ["high", "billing"]
            .iter()
            .filter_map(|n| letter_of(&text, n))
            .map(|l| tok.id(&format!("▁{l}")))
            .collect();
        // Both blocks are listed: stage 1 (chat) reads tier, stage 2 (a token
        // prompt continuing `tier: <letter>`) reads team.
        let fav = if view.path.ends_with("/v1/completions") {
            fav.get(1).copied()
        } else {
            fav.first().copied()
        };
        let pos = if id == a { 4.0 } else { 1.0 };
        pos * if Some(id) == fav { 3.0 } else { 1.0 }
    });
    let fake = fake_by(weight, Vec::new()).await;
    let d = decider(&ids, cyclic(&fake));
    type Probs = Vec<(String, f64)>;
    let mut seen: Vec<(Probs, Probs)> = Vec::new();
    for (tiers, teams) in [
        (
            ["low", "medium", "high"],
            ["support", "billing", "eng", "legal"],
        ),
        (
            ["high", "low", "medium"],
            ["legal", "eng", "billing", "support"],
        ),
        (
            ["medium", "high", "low"],
            ["billing", "legal", "support", "eng"],
        ),
    ] {
        let policy = json!({"questions": [
            {"id": "tier", "type": "choice", "options": tiers},
            {"id": "team", "type": "choice", "options": teams, "depends_on": ["tier"]}]});
        let e = env(&with_timeout(decide(&d, policy)).await.unwrap());
        check_answers(&e);
        assert_eq!(e["answers"]["tier"]["choice"], "high", "{e}");
        assert!(
            close(e["answers"]["tier"]["confidence"].as_f64().unwrap(), 0.6),
            "{e}"
        );
        assert_eq!(e["answers"]["team"]["choice"], "billing", "{e}");
        assert!(
            close(e["answers"]["team"]["confidence"].as_f64().unwrap(), 0.5),
            "{e}"
        );
        seen.push((probs(&e, "tier"), probs(&e, "team")));
    }
    let same = |a: &[(String, f64)], b: &[(String, f64)]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && (x.1 - y.1).abs() < 1e-12)
    };
    for w in seen.windows(2) {
        assert!(same(&w[0].0, &w[1].0) && same(&w[0].1, &w[1].1), "{seen:?}");
    }
    // 3 + 4 reads per decision, 3 decisions.
    assert_eq!(fake.requests().len(), 3 * 7);
}
