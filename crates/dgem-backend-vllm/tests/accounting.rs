//! Contract tests against the fake vLLM for what the original structured
//! server's clients index: the `schema_first` messages and the continuation
//! prompt built from them, output-row accounting (`completion_tokens`), the
//! reported prompt tokens, and the per-part `samples` shape.
#![allow(clippy::unwrap_used)]

mod common;

use common::{config, decide, decider, env, fake_with, ids};
use dgem_core::prompt::gemma_chat_prompt;
use dgem_core::schema::Layout;
use dgem_core::tokenizer::Tokenizer as _;
use serde_json::{json, Value};

/// `max_tokens` of a recorded read: its answer template's length + 1.
fn max_tokens(r: &dgem_fake_vllm::Recorded) -> usize {
    usize::try_from(r.body["max_tokens"].as_u64().unwrap()).unwrap()
}

fn two_stage(samples: u32, layout: &str) -> Value {
    json!({"samples": samples, "layout": layout, "questions": [
        {"id": "urgent", "type": "noul"},
        {"id": "refund", "type": "noul", "ask_if": {"urgent": ["yes"]}},
    ]})
}

#[tokio::test]
async fn schema_first_sends_system_then_user_and_continues_from_their_chat_turn() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(&d, two_stage(1, "schema_first")).await.unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "urgent said yes: refund is read in stage 2");
    // Stage 1: the chat route with [system: question block, user: state].
    let msgs = reqs[0].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(msgs[1]["role"], "user");
    let sys = msgs[0]["content"].as_str().unwrap();
    assert!(sys.contains("Question urgent") && sys.contains("Question refund"));
    assert!(!sys.contains("<instructions>"), "no tags in schema_first");
    let state = msgs[1]["content"].as_str().unwrap();
    assert_eq!(state, r#"{"ticket": "the card was charged twice"}"#);
    // Stage 2: the token prompt is that chat turn as Gemma's template writes
    // it (system, blank line, user), the empty thought, then stage 1's line.
    assert_eq!(reqs[1].path, "/v1/completions");
    let prompt: Vec<u32> = reqs[1].body["prompt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| u32::try_from(v.as_u64().unwrap()).unwrap())
        .collect();
    let turn = gemma_chat_prompt(Layout::SchemaFirst, sys, state);
    assert!(turn.contains(&format!("{sys}\n\n{state}<end_of_turn>")));
    let want = ids
        .tok
        .encode(&format!("{turn}<|channel>thought\n<channel|>urgent: yes"))
        .unwrap();
    assert_eq!(prompt[0], 2, "BOS first");
    assert_eq!(prompt[1..], want[..], "continuation prompt");
    assert_eq!(env(&dec)["diagnostics"]["layout"], "schema_first");
}

#[tokio::test]
async fn document_first_is_one_user_message() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    decide(&d, json!({"questions": [{"id": "u", "type": "noul"}]}))
        .await
        .unwrap();
    let msgs = fake.requests()[0].body["messages"].clone();
    assert_eq!(msgs.as_array().map(Vec::len), Some(1));
    assert_eq!(msgs[0]["role"], "user");
    let content = msgs[0]["content"].as_str().unwrap();
    assert!(content.starts_with("<user_text>\n{\"ticket\""));
    assert!(content.ends_with("</instructions>"));
}

#[tokio::test]
async fn completion_tokens_count_canvas_rows_and_samples_are_listed_per_part() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(&d, two_stage(2, "document_first")).await.unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4, "two parts × two samples");
    // Rows: each part's template + 1, once per part however many samples.
    let per_part: Vec<usize> = [&reqs[0], &reqs[2]].into_iter().map(max_tokens).collect();
    assert_eq!(max_tokens(&reqs[1]), per_part[0]);
    assert_eq!(dec.diagnostics.rows, per_part.iter().sum::<usize>());
    assert!(
        dec.diagnostics.rows < 2 * 2 * 16,
        "not reads × canvas width"
    );
    // prompt_tokens: the longest prompt vLLM reported.
    let e = env(&dec);
    let diag = &e["diagnostics"];
    assert!(diag["prompt_tokens"].as_u64().unwrap() > 0);
    // Two parts: n, tops and policy are lists with one entry per part.
    assert_eq!(diag["samples"]["n"], json!([2, 2]));
    let tops = diag["samples"]["tops"].as_array().unwrap();
    assert_eq!(tops.len(), 2);
    assert_eq!(tops[0].as_array().map(Vec::len), Some(2), "two reads");
    assert_eq!(tops[0][0]["urgent"][0], "yes");
    assert!(tops[0][0].get("refund").is_none());
    assert_eq!(tops[1][1]["refund"][0], "yes");
    assert_eq!(diag["samples"]["policy"][1]["mode"], "fixed");
    assert_eq!(diag["conditioning"], "prefill");
}

#[tokio::test]
async fn one_part_with_every_later_stage_skipped_has_null_conditioning_and_listed_samples() {
    let ids = ids();
    let no = ids.no;
    let fake = fake_with(&ids, move |_, id| if id == no { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(&d, two_stage(1, "document_first")).await.unwrap();
    assert_eq!(fake.requests().len(), 1, "refund skipped");
    let e = env(&dec);
    let diag = &e["diagnostics"];
    assert_eq!(diag["conditioning"], Value::Null);
    assert_eq!(e["answers"]["refund"], Value::Null);
    // One part, but with a skip: the list shape.
    assert_eq!(diag["samples"]["n"], json!([1]));
    assert_eq!(dec.diagnostics.rows, max_tokens(&fake.requests()[0]));
}

#[tokio::test]
async fn one_part_without_skips_keeps_the_flat_samples_shape() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        json!({"samples": 3, "isolate": "none", "questions": [{"id": "a", "type": "noul"}, {"id": "b", "type": "noul"}]}),
    )
    .await
    .unwrap();
    let e = env(&dec);
    assert_eq!(e["diagnostics"]["samples"]["n"], 3);
    assert_eq!(e["diagnostics"]["samples"]["policy"]["n"], 3);
    assert_eq!(
        dec.diagnostics.rows,
        max_tokens(&fake.requests()[0]),
        "one part, three samples: rows once"
    );
}

#[tokio::test]
async fn a_thought_adds_its_tokens_to_the_rows() {
    let ids = ids();
    let thought: Vec<u32> = ids.tok.encode("the customer wants money back").unwrap();
    let fake = common::fake_thinking(thought.clone()).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        json!({"think": 32, "questions": [{"id": "u", "type": "noul"}]}),
    )
    .await
    .unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "one thought, one read");
    assert_eq!(
        dec.diagnostics.rows,
        max_tokens(&reqs[1]) + thought.len(),
        "template + 1 + thought tokens"
    );
}

#[tokio::test]
async fn a_wide_schema_is_chunked_at_the_profile_canvas() {
    use dgem_backend_vllm::CanvasProfile;
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let qs: Vec<Value> = (0..8)
        .map(|i| json!({"id": format!("q{i}"), "type": "choice", "options": ["a", "b", "c"]}))
        .collect();
    let schema = json!({"isolate": "none", "questions": qs});
    let mut chunks = Vec::new();
    for profile in [CanvasProfile::L4, CanvasProfile::RtxPro6000] {
        let mut cfg = config(&fake);
        cfg.canvas_len = profile.canvas_len();
        cfg.profile = Some(profile);
        let d = decider(&ids, cfg);
        let dec = decide(&d, schema.clone()).await.unwrap();
        chunks.push(dec.diagnostics.chunks.len());
    }
    assert!(
        chunks[0] > 1,
        "32-token canvas splits 8 questions: {chunks:?}"
    );
    assert_eq!(chunks[1], 1, "128-token canvas holds them: {chunks:?}");
}

#[tokio::test]
async fn an_operator_wording_reaches_the_prompt_and_its_hash_the_diagnostics() {
    use dgem_core::prompt::Wording;
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let default_hash = Wording::default().hash();
    let mut cfg = config(&fake);
    cfg.wording = Wording::from_json(
        r#"{"lead": "Answer a fixed set of questions about the state the user provides.",
            "format_lines": "Reply with one line per question, formatted as \"id: {label}\"."}"#,
    )
    .unwrap();
    let hash = cfg.wording.hash();
    let d = decider(&ids, cfg);
    let dec = decide(&d, json!({"questions": [{"id": "u", "type": "noul"}]}))
        .await
        .unwrap();
    let content = fake.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(content.contains(
        "<instructions>\nAnswer a fixed set of questions about the state the user provides.\n"
    ));
    assert!(content.contains(
        "Reply with one line per question, formatted as \"id: label\".\n</instructions>"
    ));
    assert!(
        !content.contains("Decide a fixed list"),
        "dgem's lead is replaced"
    );
    assert_eq!(
        dec.diagnostics.prompt_wording.as_deref(),
        Some(hash.as_str())
    );
    assert_ne!(hash, default_hash);
    // The default wording is echoed too, so every vLLM decision says which it used.
    let d = decider(&ids, config(&fake));
    let dec = decide(&d, json!({"questions": [{"id": "u", "type": "noul"}]}))
        .await
        .unwrap();
    assert_eq!(
        env(&dec)["diagnostics"]["prompt_wording"],
        default_hash.as_str()
    );
}
