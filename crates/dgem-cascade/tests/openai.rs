//! `OpenAiChat` against a fake `/v1/chat/completions` server: the request
//! field by field, the write-back, failures and the key's secrecy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{decision, schema, serve, team_answer, Answer};
use dgem_cascade::provider::openai::OpenAiChat;
use dgem_cascade::{cascade, CascadeOptions, Secret};
use serde_json::{json, Value};

fn completion(model: &str, content: &str) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}]
    })
}

#[tokio::test]
async fn request_shape_images_first_and_write_back() {
    let content = format!("```json\n{}\n```", team_answer());
    let (base, log) = serve(move |_| Answer::json(200, completion("served-model", &content))).await;
    let provider =
        OpenAiChat::new(&format!("{base}/v1/")).with_key(Some(Secret::new("sk-test-123")));
    let s = schema();
    let mut d = decision(&s);
    let mut opts = CascadeOptions::entropy();
    opts.model = "asked-model".into();
    let images = vec![
        "data:image/png;base64,iVBORw0KGgo=".to_string(),
        "https://img.test/scan.jpg".to_string(),
    ];
    let state = json!({"subject": "login broken"});
    let sum = cascade(&mut d, &s, &state, &images, &opts, &provider).await;

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.authorization.as_deref(), Some("Bearer sk-test-123"));
    let b = &req.body;
    assert_eq!(b["model"], "asked-model");
    assert_eq!(b["temperature"], 0);
    let rf = &b["response_format"];
    assert_eq!(rf["type"], "json_schema");
    assert_eq!(rf["json_schema"]["name"], "stage2_decision");
    assert_eq!(rf["json_schema"]["strict"], true);
    let schema = &rf["json_schema"]["schema"];
    assert_eq!(schema["required"], json!(["team"]));
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(
        schema["properties"]["team"]["properties"]["decision"]["enum"],
        json!(["billing", "engineering", "sales"])
    );
    let msgs = b["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0]["role"], "user");
    let parts = msgs[0]["content"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(
        parts[0],
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}})
    );
    assert_eq!(
        parts[1],
        json!({"type": "image_url", "image_url": {"url": "https://img.test/scan.jpg"}})
    );
    assert_eq!(parts[2]["type"], "text");
    let text = parts[2]["text"].as_str().unwrap();
    assert!(text.contains("{\"subject\": \"login broken\"}"), "{text}");
    assert!(text.contains("- team (choice): Which team?"), "{text}");
    assert!(
        !text.contains("- urgent"),
        "only escalated slots are asked: {text}"
    );

    assert_eq!(sum.error, "");
    assert_eq!(sum.model, "served-model");
    assert_eq!(sum.image_count, 2);
    assert_eq!(
        sum.slots["team"].stage2_value.as_deref(),
        Some("engineering")
    );
    let team = d.answers["team"].as_ref().unwrap();
    assert_eq!(team.answer_name(), "engineering");
    assert_eq!(team.aggregate.confidence, 0.9);
    assert_eq!(team.resolved.as_ref().unwrap().model, "served-model");
    let chat = team.to_chat_json();
    assert_eq!(chat["choice"], "engineering");
    assert_eq!(chat["resolved_by"], "served-model");
}

#[tokio::test]
async fn text_only_without_key_sends_plain_content_and_no_auth() {
    let content = team_answer().to_string();
    let (base, log) = serve(move |_| Answer::json(200, completion("", &content))).await;
    let provider = OpenAiChat::new(&format!("{base}/v1")).with_default_model("local-model");
    let s = schema();
    let mut d = decision(&s);
    let sum = cascade(
        &mut d,
        &s,
        &json!("text"),
        &[],
        &CascadeOptions::entropy(),
        &provider,
    )
    .await;
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen[0].authorization, None);
    assert_eq!(seen[0].body["model"], "local-model");
    assert!(seen[0].body["messages"][0]["content"].is_string());
    // The reply named no model: the one asked is reported.
    assert_eq!(sum.model, "local-model");
    assert_eq!(
        d.answers["team"].as_ref().unwrap().answer_name(),
        "engineering"
    );
}

#[tokio::test]
async fn http_errors_are_reported_bounded_and_stage_one_stays() {
    let long = "x".repeat(5000);
    let (base, _log) = serve(move |_| Answer {
        status: 500,
        body: long.clone(),
        delay: Duration::ZERO,
    })
    .await;
    let provider = OpenAiChat::new(&format!("{base}/v1")).with_default_model("m");
    let s = schema();
    let mut d = decision(&s);
    let before = d.answers.clone();
    let sum = cascade(
        &mut d,
        &s,
        &json!("t"),
        &[],
        &CascadeOptions::entropy(),
        &provider,
    )
    .await;
    assert!(
        sum.error
            .starts_with("openai: model m answered HTTP 500: xxx"),
        "{}",
        sum.error
    );
    assert!(
        sum.error.len() < 400,
        "body excerpt is bounded: {}",
        sum.error.len()
    );
    assert_eq!(sum.failed_slots(), ["team"]);
    assert_eq!(d.answers, before);
}

#[tokio::test]
async fn a_hanging_server_hits_the_deadline() {
    let (base, _log) = serve(|_| Answer {
        status: 200,
        body: "{}".into(),
        delay: Duration::from_secs(30),
    })
    .await;
    let provider = OpenAiChat::new(&format!("{base}/v1")).with_default_model("m");
    let s = schema();
    let mut d = decision(&s);
    let before = d.answers.clone();
    let mut opts = CascadeOptions::entropy();
    opts.deadline = Some(Duration::from_millis(300));
    let sum = cascade(&mut d, &s, &json!("t"), &[], &opts, &provider).await;
    assert!(
        sum.error == "stage-2 call timed out after 300 ms (deadline)"
            || sum.error.contains("request to"),
        "{}",
        sum.error
    );
    assert!(sum.latency_ms < 5_000);
    assert_eq!(d.answers, before);
}

#[tokio::test]
async fn bad_content_is_an_error() {
    let (base, _log) = serve(|_| Answer::json(200, completion("m", "I think billing."))).await;
    let provider = OpenAiChat::new(&format!("{base}/v1")).with_default_model("m");
    let s = schema();
    let mut d = decision(&s);
    let sum = cascade(
        &mut d,
        &s,
        &json!("t"),
        &[],
        &CascadeOptions::entropy(),
        &provider,
    )
    .await;
    assert_eq!(
        sum.error,
        "openai: `choices[0].message.content` of the reply must be a JSON object; got I think billing."
    );
}

#[tokio::test]
async fn the_key_stays_secret() {
    // A variable name no other test reads.
    std::env::set_var("DGEM_CASCADE_TEST_KEY_OPENAI", "sk-very-secret-42");
    let (base, log) = serve(|_| Answer::json(401, json!({"error": "bad key"}))).await;
    let provider =
        OpenAiChat::from_env(&format!("{base}/v1"), Some("DGEM_CASCADE_TEST_KEY_OPENAI"))
            .with_default_model("m");
    let dbg = format!("{provider:?}");
    assert!(!dbg.contains("sk-very-secret-42"), "{dbg}");
    assert!(dbg.contains("<redacted>"), "{dbg}");
    let s = schema();
    let mut d = decision(&s);
    let sum = cascade(
        &mut d,
        &s,
        &json!("t"),
        &[],
        &CascadeOptions::entropy(),
        &provider,
    )
    .await;
    assert_eq!(
        log.lock().unwrap()[0].authorization.as_deref(),
        Some("Bearer sk-very-secret-42")
    );
    assert!(sum.error.contains("HTTP 401"), "{}", sum.error);
    assert!(!sum.error.contains("sk-very-secret-42"));
    assert!(!format!("{sum:?}").contains("sk-very-secret-42"));
}
