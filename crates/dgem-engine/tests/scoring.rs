//! Option scoring and isolation on the scripted backend: multi-token options are
//! scored by their whole tokenization, and `isolate` gives questions prompts of
//! their own (every question under `document_first`, the canvas rule under
//! `schema_first`). Numbers come from the script, so they are exact.

use std::sync::{Arc, Mutex};

use dgem_core::envelope::Scoring;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::DecideRequest;
use dgem_testkit::{ScriptedBackend, SlotContext};
use serde_json::json;

fn schema(v: serde_json::Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
}

fn req(v: serde_json::Value) -> DecideRequest {
    DecideRequest {
        schema: schema(v),
        state: json!("a case"),
        seed: 42,
    }
}

/// Per-token probabilities by the token's text; anything else gets 0.5.
fn tokens(ctx: &SlotContext) -> Vec<f64> {
    ctx.labels
        .iter()
        .map(|l| match l.as_str() {
            "all" => 0.6,
            "some" => 0.2,
            _ => 0.5,
        })
        .collect()
}

#[tokio::test]
async fn options_sharing_a_first_token_are_scored_by_their_whole_tokenization() {
    let b = ScriptedBackend::new(tokens);
    let d = dgem_testkit::engine(b.clone())
        .decide(req(json!({"questions": [
            {"id": "scope", "type": "choice", "options": ["approve all", "approve some", "reject"]}]})))
        .await
        .expect("decision");
    let a = d.answers["scope"].as_ref().expect("answered");
    // Tokens "approve", "all"/"some", newline: ll(approve all) = ln .5 + ln .6 + ln .5,
    // ll(approve some) = ln .5 + ln .2 + ln .5, ll(reject) = ln .5 + ln .5; the
    // restricted softmax over the three.
    let raw = [0.5 * 0.6 * 0.5, 0.5 * 0.2 * 0.5, 0.5 * 0.5];
    let z: f64 = raw.iter().sum();
    for (p, r) in a.aggregate.mean.iter().zip(raw) {
        assert!((p - r / z).abs() < 1e-9, "{:?}", a.aggregate.mean);
    }
    assert!((a.aggregate.mean.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    let q = &d.diagnostics.questions["scope"];
    assert_eq!(q.scoring, Scoring::Sequence);
    // Each option is read in four spellings (with and without the space after
    // the cue, lower-case and capitalised), each as likely as the first under
    // this script: the mass is P(one option written in full, any spelling),
    // 4z = 1.8 here (the script is no distribution), clamped to 1.
    assert!(
        (q.label_mass.expect("sequence scoring reads the vocabulary") - (4.0 * z).min(1.0)).abs()
            < 1e-9,
        "P(one option written in full)"
    );
    assert_eq!(b.calls(), 1, "all option sequences go in one backend call");
}

#[tokio::test]
async fn single_token_options_keep_the_one_row_read() {
    let b = ScriptedBackend::new(|ctx: &SlotContext| {
        ctx.labels
            .iter()
            .map(|l| if l == "billing" { 0.6 } else { 0.2 })
            .collect()
    });
    let d = dgem_testkit::engine(b)
        .decide(req(json!({"questions": [
            {"id": "team", "type": "choice", "options": ["billing", "support"]}]})))
        .await
        .expect("decision");
    let a = d.answers["team"].as_ref().expect("answered");
    assert!((a.aggregate.mean[0] - 0.75).abs() < 1e-12);
    assert_eq!(d.diagnostics.questions["team"].scoring, Scoring::FirstToken);
}

#[tokio::test]
async fn isolate_auto_gives_every_question_its_own_prompt_under_document_first() {
    // Record the prompt each slot was read after.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let b = ScriptedBackend::new(move |ctx: &SlotContext| {
        log.lock().expect("lock").push(ctx.prefix.clone());
        vec![0.5; ctx.labels.len()]
    });
    let policy = json!({"questions": [
        {"id": "urgent", "type": "noul", "instructions": "Is it urgent?"},
        {"id": "refund", "type": "noul", "instructions": "Is a refund asked for?"},
        {"id": "team", "type": "choice", "options": ["billing", "support"], "instructions": "Which team?"}]});
    let d = dgem_testkit::engine(b.clone())
        .decide(req(policy.clone()))
        .await
        .expect("decision");
    // A causal read under `document_first` reads every question apart.
    assert_eq!(d.diagnostics.isolated, ["urgent", "refund", "team"]);
    assert_eq!(
        d.diagnostics.chunks,
        [vec!["urgent"], vec!["refund"], vec!["team"]]
    );
    assert_eq!(d.diagnostics.timing.reads, 3);
    assert_eq!(d.diagnostics.chunk_prompt.as_str(), "own");
    let prompts = seen.lock().expect("lock").clone();
    assert_eq!(prompts.len(), 3);
    assert!(prompts[0].contains("Is it urgent?") && !prompts[0].contains("Which team?"));
    assert!(prompts[1].contains("Is a refund asked for?") && !prompts[1].contains("Is it urgent?"));
    assert!(prompts[2].contains("Which team?") && !prompts[2].contains("Is it urgent?"));
    // Under `schema_first`, `auto` keeps the canvas rule: the two yes/no
    // questions alone, the choice on a prompt of the rest (itself).
    let mut sf = policy.clone();
    sf["layout"] = json!("schema_first");
    seen.lock().expect("lock").clear();
    let d = dgem_testkit::engine(b.clone())
        .decide(req(sf))
        .await
        .expect("decision");
    assert_eq!(d.diagnostics.isolated, ["urgent", "refund"]);
    assert_eq!(d.diagnostics.chunks.len(), 3);
    // isolate: none reads them jointly, from one prompt listing all three.
    let mut none = policy;
    none["isolate"] = json!("none");
    seen.lock().expect("lock").clear();
    let d = dgem_testkit::engine(b)
        .decide(req(none))
        .await
        .expect("decision");
    assert!(d.diagnostics.isolated.is_empty());
    assert_eq!(d.diagnostics.chunks.len(), 1);
    let prompts = seen.lock().expect("lock").clone();
    assert!(prompts
        .iter()
        .all(|p| p.contains("Is it urgent?") && p.contains("Which team?")));
}

#[tokio::test]
async fn plan_resolves_reads_without_calling_the_backend() {
    let b = ScriptedBackend::new(tokens);
    let e = dgem_testkit::engine(b.clone());
    let plan = e
        .plan(&req(json!({"questions": [
            {"id": "scope", "type": "choice", "options": ["approve all", "approve some"]},
            {"id": "ok", "type": "noul"},
            {"id": "next", "type": "noul", "depends_on": ["ok"]}], "isolate": "none"})))
        .expect("plan");
    assert_eq!(b.calls(), 0, "plan mode runs no model");
    assert_eq!(plan.stages.len(), 2);
    let first = &plan.stages[0][0];
    assert_eq!(first.slots[0].scoring, Scoring::Sequence);
    // Two options, four spellings each.
    assert_eq!(first.slots[0].sequences, 8);
    assert_eq!(first.slots[1].scoring, Scoring::FirstToken);
    assert_eq!(first.sequences_per_read, 9);
    assert_eq!(
        first.listings, 1,
        "order debiasing is off in the testkit engine"
    );
    assert_eq!(plan.forward_calls, 2);
    // The later stage sees the earlier answers prefilled.
    assert!(plan.stages[1][0].prompt.contains("ok: yes"));
}

#[tokio::test]
async fn sixty_options_are_answered_through_brackets_with_all_options_scored() {
    let b = ScriptedBackend::new(dgem_testkit::scripts::favour("opt42", 0.99));
    let options: Vec<String> = (0..60).map(|i| format!("opt{i}")).collect();
    let d = dgem_testkit::engine(b.clone())
        .decide(req(json!({"questions": [
            {"id": "urgent", "type": "noul"},
            {"id": "intent", "type": "choice", "options": options}]})))
        .await
        .expect("decision");
    let keys: Vec<&String> = d.answers.keys().collect();
    assert_eq!(keys, ["urgent", "intent"], "schema order");
    let a = d.answers["intent"].as_ref().expect("answered");
    assert_eq!(a.aggregate.mean.len(), 60);
    assert!((a.aggregate.mean.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    assert_eq!(a.answer_name(), "opt42");
    assert!(a.aggregate.confidence > 0.95, "{}", a.aggregate.confidence);
    let br = &d.diagnostics.brackets["intent"];
    assert_eq!(br.brackets, [20, 20, 20]);
    assert_eq!(br.finalists.len(), 6);
    assert!(br.finalists.contains(&"opt42".to_owned()));
    // One decision for `urgent`, one round-1 pass over 3 brackets (each
    // bracket read apart: 3 calls), one final.
    assert_eq!(b.calls(), 5);
    assert_eq!(d.diagnostics.timing.reads, 5);
    let ids: Vec<&String> = d.diagnostics.questions.keys().collect();
    assert_eq!(ids, ["urgent", "intent"], "sub-questions stay internal");
    let env = d.envelope();
    assert_eq!(env["diagnostics"]["brackets"]["intent"]["rounds"], 2);
    assert_eq!(
        env["answers"]["intent"]["probabilities"]
            .as_object()
            .expect("probs")
            .len(),
        60
    );
}

#[tokio::test]
async fn a_bracket_routed_question_cannot_take_part_in_dependencies() {
    let b = ScriptedBackend::new(dgem_testkit::scripts::favour("opt1", 0.9));
    let options: Vec<String> = (0..30).map(|i| format!("opt{i}")).collect();
    let err = dgem_testkit::engine(b)
        .decide(req(json!({"questions": [
            {"id": "intent", "type": "choice", "options": options},
            {"id": "refund", "type": "noul", "ask_if": {"intent": ["opt1"]}}]})))
        .await
        .expect_err("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("question 'intent' is a dependency of 'refund'"),
        "{msg}"
    );
    assert!(err.is_user_error());
}

#[tokio::test]
async fn a_bidirectional_backend_is_read_jointly_from_one_canvas_per_group() {
    // Record each slot's reading context: one backend call, one canvas, every slot.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let b = ScriptedBackend::bidirectional(move |ctx: &SlotContext| {
        log.lock().expect("lock").push(ctx.prefix.clone());
        ctx.labels
            .iter()
            .map(|l| match l.as_str() {
                "yes" | "engineering" => 0.7,
                _ => 0.1,
            })
            .collect()
    });
    let d = dgem_testkit::engine(b.clone())
        .decide(req(json!({"questions": [
            {"id": "urgent", "type": "noul"},
            {"id": "team", "type": "choice", "options": ["billing", "engineering", "support"]}]})))
        .await
        .expect("decision");
    assert_eq!(d.diagnostics.slot_reading.as_str(), "joint");
    assert_eq!(b.calls(), 1, "one pass for the whole group");
    assert_eq!(d.diagnostics.chunks, [vec!["urgent", "team"]]);
    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "engineering");
    assert!((team.aggregate.confidence - 0.7 / 0.9).abs() < 1e-9);
    let urgent = d.answers["urgent"].as_ref().expect("answered");
    assert!((urgent.aggregate.mean[0] - 0.875).abs() < 1e-9);
    assert_eq!(d.diagnostics.questions["team"].scoring, Scoring::Canvas);
    // Both slots were read from the same canvas: the later slot sees the
    // earlier one's answer line in the text before it.
    let prefixes = seen.lock().expect("lock").clone();
    assert_eq!(prefixes.len(), 2);
    assert!(prefixes[1].starts_with(&prefixes[0]));
    assert!(prefixes[1][prefixes[0].len()..].contains("team"));
}

/// The engine's configured wording reaches every prompt it reads, its hash
/// is echoed on the decision, and without one the prompts keep dgem's own
/// sentences (the small model's reads are unchanged).
#[tokio::test]
async fn a_configured_wording_is_the_one_every_prompt_is_written_in() {
    use dgem_core::prompt::Wording;
    let ask = || {
        req(json!({"questions": [
            {"id": "mood", "type": "score", "levels": ["calm", "annoyed", "furious"]}]}))
    };
    // Record the text before every slot read, every listing included.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let b = ScriptedBackend::new(move |ctx: &SlotContext| {
        log.lock().expect("lock").push(ctx.prefix.clone());
        vec![0.5; ctx.labels.len()]
    });
    let compact = dgem_engine::Engine::new(
        b,
        dgem_engine::EngineConfig {
            calibration: dgem_engine::CalibrationMode::Off,
            order_debias: dgem_core::order::OrderDebias::Cyclic { max_orders: 3 },
            wording: Some(Wording::compact()),
            ..dgem_engine::EngineConfig::default()
        },
    );
    let plan = compact.plan(&ask()).expect("plan");
    let prompt = &plan.stages[0][0].prompt;
    // (The toy tokenizer's decode respaces the text a little.)
    let lead_end = "one line per question in the order given, written as";
    assert!(prompt.contains(lead_end), "{prompt}");
    assert!(prompt.contains("furious\n\nAnswer now."), "{prompt}");
    assert!(
        !prompt.contains(&Wording::default().format_lines[..20]),
        "{prompt}"
    );
    let d = compact.decide(ask()).await.expect("decision");
    assert_eq!(
        d.diagnostics.prompt_wording.as_deref(),
        Some(Wording::compact().hash().as_str())
    );
    let prompts = seen.lock().expect("lock").clone();
    assert_eq!(prompts.len(), 3, "three listings, one slot each");
    assert!(prompts
        .iter()
        .all(|p| p.contains("\n\nAnswer now.") && p.contains(lead_end)));

    // Eleven questions read together are answered in the `indexed` format,
    // which the compact lead (it asks for lines) would contradict: that read
    // keeps dgem's own sentences and says no other wording.
    let many: Vec<serde_json::Value> = (0..11)
        .map(|i| json!({"id": format!("q{i}"), "type": "noul"}))
        .collect();
    let joint = || req(json!({"questions": many, "isolate": "none"}));
    let plan = compact.plan(&joint()).expect("plan");
    let prompt = &plan.stages[0][0].prompt;
    assert!(!prompt.contains(lead_end), "{prompt}");
    assert!(!prompt.contains("Answer now."), "{prompt}");
    assert!(prompt.contains("Answer on a single line"), "{prompt}");
    let d = compact.decide(joint()).await.expect("decision");
    assert_eq!(d.diagnostics.prompt_wording, None);

    let standard = dgem_testkit::engine(ScriptedBackend::new(tokens));
    let plan = standard.plan(&ask()).expect("plan");
    let prompt = &plan.stages[0][0].prompt;
    assert!(!prompt.contains(lead_end), "{prompt}");
    assert!(
        prompt.contains("furious\n\nAnswer with one line per question"),
        "{prompt}"
    );
    let d = standard.decide(ask()).await.expect("decision");
    assert_eq!(d.diagnostics.prompt_wording, None);
}
