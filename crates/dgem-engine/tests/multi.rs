//! `multi` questions, "none of these" and rules between answers on the
//! scripted backend (issue 40): a multi question is read as one yes/no
//! question per option, folded back into one answer, and rules change the
//! answers they tie by the restricted, renormalised product.

use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideRequest, Engine};
use dgem_testkit::{ScriptedBackend, SlotContext};
use serde_json::{json, Value};

fn schema(v: Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
}

async fn decide(e: &Engine, schema: ValidSchema) -> dgem_backend::Decision {
    e.decide(DecideRequest {
        schema,
        state: json!("I was charged twice and want my money back."),
        seed: 42,
    })
    .await
    .expect("decision")
}

/// p(yes) by the question whose answer line the slot is on: the text after
/// the last "\n" of the prompt names it.
fn by_question(ctx: &SlotContext) -> Vec<f64> {
    let line = ctx.prefix.rsplit('\n').next().unwrap_or_default();
    let yes = if line.contains("tags__refund") {
        0.9
    } else if line.contains("tags__outage") {
        0.2
    } else if line.contains("tags__none") {
        0.1
    } else if line.contains("urgent") {
        0.7
    } else {
        0.6
    };
    ctx.labels
        .iter()
        .map(|l| if l == "yes" { yes } else { 1.0 - yes })
        .collect()
}

fn tags() -> Value {
    json!({"id": "tags", "type": "multi", "instructions": "Which topics does it raise?",
           "options": ["refund", "outage"], "none_of_these": true})
}

#[tokio::test]
async fn a_multi_question_reads_each_option_as_its_own_yes_no_slot() {
    let e = dgem_testkit::engine(ScriptedBackend::new(by_question));
    let s = schema(json!({"questions": [tags()]}));
    let d = decide(&e, s.clone()).await;
    let a = d.answers["tags"].as_ref().expect("answered");
    let env = a.to_chat_json();
    assert_eq!(env["type"], "multi");
    assert_eq!(env["multi"], json!(["refund"]));
    let p = |o: &str| env["probabilities"][o].as_f64().expect("number");
    assert!((p("refund") - 0.9).abs() < 1e-9, "{env}");
    assert!((p("outage") - 0.2).abs() < 1e-9, "{env}");
    assert!((p("none") - 0.1).abs() < 1e-9, "{env}");
    assert!((a.aggregate.confidence - 0.9 * 0.8 * 0.9).abs() < 1e-9);
    assert_eq!(
        d.diagnostics.multi["tags"],
        ["tags__refund", "tags__outage", "tags__none"]
    );
    // The same numbers as reading the option questions directly.
    let plain = dgem_core::multi::expand(&s).expect("expands");
    let direct = decide(&e, plain.schema).await;
    let refund = direct.answers["tags__refund"].as_ref().expect("read");
    assert!((refund.aggregate.mean[0] - p("refund")).abs() < 1e-12);
    // The plan shows the reads: one slot per option.
    let plan = e
        .plan(&DecideRequest {
            schema: s,
            state: json!("a case"),
            seed: 42,
        })
        .expect("plan");
    let planned = serde_json::to_string(&plan).expect("json");
    assert!(planned.contains("tags__outage"), "{planned}");
}

#[tokio::test]
async fn nothing_applies_answers_none_of_these() {
    let e = dgem_testkit::engine(ScriptedBackend::new(|ctx: &SlotContext| {
        ctx.labels
            .iter()
            .map(|l| if l == "yes" { 0.1 } else { 0.9 })
            .collect()
    }));
    let d = decide(&e, schema(json!({"questions": [tags()]}))).await;
    let env = d.answers["tags"].as_ref().expect("answered").to_chat_json();
    assert_eq!(env["multi"], json!(["none"]));
    assert_eq!(env["none_of_these"], true);
}

#[tokio::test]
async fn rules_restrict_the_answers_they_tie_after_the_read() {
    let e = dgem_testkit::engine(ScriptedBackend::new(by_question));
    let s = schema(json!({"questions": [
        tags(),
        {"id": "urgent", "type": "noul"},
        {"id": "page", "type": "noul"}],
        "isolate": "none",
        "rules": [{"if": {"urgent": "yes"}, "not": {"page": "yes"}}]}));
    let d = decide(&e, s).await;
    // urgent 0.7, page 0.6: the rule removes 0.7 · 0.6 = 0.42.
    let urgent = d.answers["urgent"].as_ref().expect("urgent");
    assert_eq!(urgent.constrained.map(|x| (x * 1e9).round()), Some(0.42e9));
    assert!((urgent.aggregate.mean[0] - 0.7 * 0.4 / 0.58).abs() < 1e-9);
    let page = d.answers["page"].as_ref().expect("page");
    assert!((page.aggregate.mean[0] - 0.3 * 0.6 / 0.58).abs() < 1e-9);
    assert_eq!(page.answer_name(), "no");
    assert!(d.answers["tags"]
        .as_ref()
        .expect("tags")
        .constrained
        .is_none());
    assert_eq!(d.diagnostics.constraints.len(), 1);
    assert_eq!(d.diagnostics.constraints[0].questions, ["urgent", "page"]);
    let env = d.envelope();
    assert_eq!(env["answers"]["page"]["constrained"], true);
    assert_eq!(env["diagnostics"]["constraints"][0]["rules"], json!([0]));
}
