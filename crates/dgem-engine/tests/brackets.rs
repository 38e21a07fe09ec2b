//! Bracket routing's samples and usage on the scripted backend (issue 27,
//! item 6b): a choice over more than 26 options reports the tops of its final
//! read, and its usage counts every read, the final one included.

use dgem_backend::Decision;
use dgem_core::brackets::{bracket_question, final_question, split, BRACKET_SIZE};
use dgem_core::schema::{Question, SchemaDefaults, ValidSchema};
use dgem_engine::{DecideRequest, Engine};
use dgem_testkit::ScriptedBackend;
use serde_json::{json, Value};

fn options() -> Vec<String> {
    (0..60).map(|i| format!("opt{i}")).collect()
}

fn schema(v: Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
}

async fn decide(e: &Engine, schema: ValidSchema) -> Decision {
    e.decide(DecideRequest {
        schema,
        state: json!("a case"),
        seed: 42,
    })
    .await
    .expect("decision")
}

/// The sub-decisions bracket routing makes for `intent` (round 1 in one pass,
/// then the final), decided directly.
async fn parts_of_intent(e: &Engine, s: &ValidSchema, d: &Decision) -> (Decision, Decision) {
    let q = s
        .questions
        .iter()
        .find(|q| q.id == "intent")
        .expect("intent");
    let subs: Vec<Question> = split(q.alternatives.len(), BRACKET_SIZE)
        .into_iter()
        .enumerate()
        .map(|(b, r)| bracket_question(q, b, r))
        .collect();
    let round1 = decide(e, s.with_questions(subs).expect("round 1")).await;
    let picked: Vec<usize> = d.diagnostics.brackets["intent"]
        .finalists
        .iter()
        .map(|f| options().iter().position(|o| o == f).expect("an option"))
        .collect();
    let fq = final_question(q, &picked);
    let fin = decide(e, s.with_questions(vec![fq]).expect("final")).await;
    (round1, fin)
}

#[tokio::test]
async fn a_bracketed_choice_reports_the_tops_of_its_final_read_not_an_empty_map() {
    let b = ScriptedBackend::new(dgem_testkit::scripts::favour("opt42", 0.99));
    let e = dgem_testkit::engine(b);
    let s =
        schema(json!({"questions": [{"id": "intent", "type": "choice", "options": options()}]}));
    let d = decide(&e, s.clone()).await;
    let (_, fin) = parts_of_intent(&e, &s, &d).await;
    let env = d.envelope();
    let samples = &env["diagnostics"]["samples"];
    // One schema part (the final read): the flat shape, one entry per read.
    assert_eq!(samples["n"], 1, "{samples}");
    let want = &fin.envelope()["diagnostics"]["samples"]["tops"][0]["intent__final"];
    assert_eq!(samples["tops"], json!([{"intent": want}]), "{samples}");
    assert_eq!(samples["tops"][0]["intent"][0], "opt42");
    let p = samples["tops"][0]["intent"][1].as_f64().expect("p");
    assert!(p > 0.5 && p <= 1.0, "{p}");
}

#[tokio::test]
async fn a_bracketed_choice_counts_its_final_read_in_usage() {
    let b = ScriptedBackend::new(dgem_testkit::scripts::favour("opt42", 0.99));
    let e = dgem_testkit::engine(b);
    let s = schema(json!({"questions": [
        {"id": "urgent", "type": "noul"},
        {"id": "intent", "type": "choice", "options": options()}]}));
    let d = decide(&e, s.clone()).await;
    let urgent = s.questions.iter().find(|q| q.id == "urgent").cloned();
    let narrow = decide(
        &e,
        s.with_questions(urgent.into_iter().collect())
            .expect("narrow"),
    )
    .await;
    let (round1, fin) = parts_of_intent(&e, &s, &d).await;
    let parts = [&narrow, &round1, &fin];
    // usage.completion_tokens / output_tokens: every part's rows.
    let rows: usize = parts.iter().map(|p| p.diagnostics.rows).sum();
    assert!(fin.diagnostics.rows > 0);
    assert_eq!(
        d.diagnostics.rows, rows,
        "rows of every read, the final included"
    );
    // usage.prompt_tokens: the longest prompt read.
    let longest = parts
        .iter()
        .filter_map(|p| p.diagnostics.prompt_tokens)
        .max();
    assert_eq!(d.diagnostics.prompt_tokens, longest);
    // Samples: the schema's parts, the routed question's final read under its id.
    let env = d.envelope();
    let samples = &env["diagnostics"]["samples"];
    assert_eq!(samples["n"], json!([1, 1]), "{samples}");
    assert!(samples["tops"][0][0]["urgent"].is_array(), "{samples}");
    assert_eq!(samples["tops"][1][0]["intent"][0], "opt42", "{samples}");
}
