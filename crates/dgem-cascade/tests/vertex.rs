//! `VertexGemini` against a fake `generateContent` server: the URL, the
//! token, the body field by field, model fallback and the token's secrecy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{decision, schema, serve, team_answer, Answer};
use dgem_cascade::provider::vertex::{StaticToken, VertexGemini};
use dgem_cascade::{cascade, CascadeOptions, Secret};
use serde_json::{json, Value};

const PREFIX: &str = "/v1/projects/proj-1/locations/us-central1/publishers/google/models/";

fn provider(base: &str) -> VertexGemini {
    VertexGemini::new(
        "proj-1",
        Arc::new(StaticToken(Secret::new("ya29.token-xyz"))),
    )
    .with_base(&format!("{base}/"))
    .with_location("us-central1")
}

/// A generateContent reply whose text is split over two parts, after a thought.
fn generated(text: &str) -> Value {
    let (a, b) = text.split_at(text.len() / 2);
    json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "thinking about it", "thought": true},
            {"text": a}, {"text": b}
        ]}, "finishReason": "STOP"}],
        "modelVersion": "ignored"
    })
}

fn model_of(path: &str) -> String {
    path.strip_prefix(PREFIX)
        .and_then(|m| m.strip_suffix(":generateContent"))
        .unwrap_or("?")
        .to_string()
}

fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.contains_key(key) || m.values().any(|x| has_key(x, key)),
        Value::Array(a) => a.iter().any(|x| has_key(x, key)),
        _ => false,
    }
}

#[tokio::test]
async fn request_shape_and_write_back() {
    let text = team_answer().to_string();
    let (base, log) = serve(move |_| Answer::json(200, generated(&text))).await;
    let p = provider(&base);
    let s = schema();
    let mut d = decision(&s);
    let mut opts = CascadeOptions::entropy();
    opts.model = "gemini-3.5-flash".into(); // retired name, asked as gemini-3.7-flash
    let images = vec![
        "data:image/png;base64,iVBORw0KGgo=".to_string(),
        "https://img.test/scan.png".to_string(),
    ];
    let sum = cascade(&mut d, &s, &json!("login broken"), &images, &opts, &p).await;

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].path,
        format!("{PREFIX}gemini-3.7-flash:generateContent")
    );
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Bearer ya29.token-xyz")
    );
    let b = &seen[0].body;
    let contents = b["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 1);
    assert_eq!(contents[0]["role"], "user");
    let parts = contents[0]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(
        parts[0],
        json!({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}})
    );
    assert_eq!(
        parts[1],
        json!({"fileData": {"mimeType": "image/png", "fileUri": "https://img.test/scan.png"}})
    );
    let prompt = parts[2]["text"].as_str().unwrap();
    assert!(
        prompt.contains("login broken") && prompt.contains("- team (choice)"),
        "{prompt}"
    );
    assert!(prompt.contains("2 image(s)"), "{prompt}");
    let gc = &b["generationConfig"];
    assert_eq!(gc["responseMimeType"], "application/json");
    assert_eq!(gc["temperature"], 0);
    let rs = &gc["responseSchema"];
    assert_eq!(rs["type"], "OBJECT");
    assert_eq!(rs["required"], json!(["team"]));
    assert!(!has_key(rs, "additionalProperties"), "{rs}");
    let team = &rs["properties"]["team"];
    assert_eq!(team["type"], "OBJECT");
    assert_eq!(
        team["properties"]["decision"],
        json!({"type": "STRING", "enum": ["billing", "engineering", "sales"]})
    );
    assert_eq!(team["properties"]["confidence"], json!({"type": "NUMBER"}));
    assert_eq!(
        team["required"],
        json!(["decision", "confidence", "explanation"])
    );

    assert_eq!(sum.error, "");
    assert_eq!(sum.model, "gemini-3.7-flash");
    let team = d.answers["team"].as_ref().unwrap();
    assert_eq!(team.answer_name(), "engineering");
    assert_eq!(team.resolved.as_ref().unwrap().model, "gemini-3.7-flash");
    assert_eq!(team.resolved.as_ref().unwrap().explanation, "A crash.");
}

#[tokio::test]
async fn falls_back_after_404_and_429() {
    let text = team_answer().to_string();
    let (base, log) = serve(move |seen| match model_of(&seen.path).as_str() {
        "gemini-3-pro" => Answer::json(404, json!({"error": {"message": "not found"}})),
        "gemini-3.8-flash" => Answer::json(429, json!({"error": {"message": "quota"}})),
        _ => Answer::json(200, generated(&text)),
    })
    .await;
    let p = provider(&base);
    let s = schema();
    let mut d = decision(&s);
    let mut opts = CascadeOptions::entropy();
    opts.model = "gemini-3-pro".into();
    let sum = cascade(&mut d, &s, &json!("t"), &[], &opts, &p).await;
    let tried: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| model_of(&s.path))
        .collect();
    assert_eq!(
        tried,
        ["gemini-3-pro", "gemini-3.8-flash", "gemini-3.7-flash"]
    );
    assert_eq!(sum.error, "");
    assert_eq!(sum.model, "gemini-3.7-flash");
    let team = d.answers["team"].as_ref().unwrap();
    assert_eq!(team.resolved.as_ref().unwrap().model, "gemini-3.7-flash");
    assert_eq!(team.answer_name(), "engineering");
}

#[tokio::test]
async fn a_400_stops_at_once_and_all_failing_keeps_stage_one() {
    let (base, log) = serve(|_| Answer::json(400, json!({"error": "bad schema"}))).await;
    let p = provider(&base);
    let s = schema();
    let mut d = decision(&s);
    let before = d.answers.clone();
    let mut opts = CascadeOptions::entropy();
    opts.model = "gemini-3.8-flash".into();
    let sum = cascade(&mut d, &s, &json!("t"), &[], &opts, &p).await;
    assert_eq!(log.lock().unwrap().len(), 1);
    assert_eq!(
        sum.error,
        "vertex: model gemini-3.8-flash answered HTTP 400: {\"error\":\"bad schema\"}"
    );
    assert_eq!(d.answers, before);

    let (base, log) = serve(|_| Answer::json(503, json!({"error": "down"}))).await;
    let p = provider(&base);
    let mut d = decision(&s);
    let sum = cascade(&mut d, &s, &json!("t"), &[], &opts, &p).await;
    assert_eq!(
        log.lock().unwrap().len(),
        4,
        "every fallback model tried once"
    );
    assert!(
        sum.error
            .contains("gemini-3-flash-preview answered HTTP 503"),
        "{}",
        sum.error
    );
    assert_eq!(
        sum.model, "gemini-3.8-flash",
        "the requested model when none answered"
    );
    assert_eq!(sum.failed_slots(), ["team"]);
    assert_eq!(d.answers, before);
}

#[tokio::test]
async fn the_token_stays_secret() {
    let p = provider("http://127.0.0.1:9");
    let dbg = format!("{p:?}");
    assert!(!dbg.contains("ya29.token-xyz"), "{dbg}");
    assert!(dbg.contains("proj-1"), "{dbg}");
    // An unreachable server: the error names the URL, never the token.
    let s = schema();
    let mut d = decision(&s);
    let mut opts = CascadeOptions::entropy();
    opts.model = "gemini-3.8-flash".into();
    let sum = cascade(&mut d, &s, &json!("t"), &[], &opts, &p).await;
    assert!(
        sum.error
            .starts_with("vertex: request to http://127.0.0.1:9/v1/projects/proj-1/"),
        "{}",
        sum.error
    );
    assert!(!sum.error.contains("ya29"), "{}", sum.error);
}
