//! The state text a read sends: a JSON string state is its text exactly, quotes
//! and all (issue 27, item 6a).
#![allow(clippy::unwrap_used)]

mod common;

use common::{config, decider, fake_with, ids, schema};
use dgem_backend::{DecideRequest, Decider};
use serde_json::{json, Value};

async fn sent_messages(layout: &str, state: Value) -> Value {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    d.decide(DecideRequest {
        schema: schema(json!({"layout": layout, "questions": [{"id": "u", "type": "noul"}]})),
        state,
        seed: 42,
    })
    .await
    .unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    reqs[0].body["messages"].clone()
}

#[tokio::test]
async fn a_json_string_state_keeps_its_quotes_on_the_vllm_path() {
    // The state is the JSON string whose text is `"hello"`, quotes included.
    let quoted = json!("\"hello\"");
    let m = sent_messages("schema_first", quoted.clone()).await;
    assert_eq!(m[1]["role"], "user");
    assert_eq!(m[1]["content"], "\"hello\"", "sent as is, quotes kept");
    let m = sent_messages("document_first", quoted).await;
    let content = m[0]["content"].as_str().unwrap();
    assert!(
        content.starts_with("<user_text>\n\"hello\"\n</user_text>"),
        "{content}"
    );
    // A plain string state is its text; a JSON value is written Python-style.
    let m = sent_messages("schema_first", json!("hello")).await;
    assert_eq!(m[1]["content"], "hello");
    let m = sent_messages("schema_first", json!({"t": "\"hi\""})).await;
    assert_eq!(m[1]["content"], r#"{"t": "\"hi\""}"#);
}
