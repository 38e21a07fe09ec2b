//! The fake rejects what vLLM rejects (serving.md §5.4), with 400 and a
//! message naming the field, and records only what it accepted.
#![allow(clippy::unwrap_used)]

use dgem_fake_vllm::{FakeConfig, FakeVllm};
use serde_json::{json, Value};

fn read() -> Value {
    json!({
        "model": "dgemma",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "logprobs": true,
        "top_logprobs": 20,
        "logprob_token_ids": [7, 9],
        "return_tokens_as_token_ids": true,
        "chat_template_kwargs": {"enable_thinking": false},
        "vllm_xargs": {
            "diffusion_seed_canvas": [1, 2, 3, 77, 106, 0, 0, 0],
            "diffusion_canvas_length": 8,
            "diffusion_max_steps": 1,
            "diffusion_read_only": true,
            "diffusion_constrained": true
        }
    })
}

type Mutation = Box<dyn Fn(&mut Value)>;

async fn post(fake: &FakeVllm, path: &str, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", fake.url()))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn a_valid_read_gets_one_row_per_canvas_position() {
    let fake = FakeVllm::start(FakeConfig::default()).await.unwrap();
    let (status, reply) = post(&fake, "/v1/chat/completions", &read()).await;
    assert_eq!(status, 200, "{reply}");
    let rows = reply["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(rows.len(), 8);
    // Default script: uniform over the requested ids, normalized over them.
    let top = rows[3]["top_logprobs"].as_array().unwrap();
    assert_eq!(top.len(), 2);
    assert!(top[0]["token"].as_str().unwrap().starts_with("token_id:"));
    assert!((top[0]["logprob"].as_f64().unwrap() - 0.5f64.ln()).abs() < 1e-12);
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn every_bad_field_is_a_400_naming_it() {
    let fake = FakeVllm::start(FakeConfig::default()).await.unwrap();
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|b| b["temperature"] = json!(0)),
            "unknown field `temperature`",
        ),
        (
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("model");
            }),
            "`model` is required",
        ),
        (Box::new(|b| b["model"] = json!("other")), "does not exist"),
        (
            Box::new(|b| b["top_logprobs"] = json!(40)),
            "exceed --max-logprobs 32",
        ),
        (
            Box::new(|b| b["logprob_token_ids"] = json!((0..129).collect::<Vec<u32>>())),
            "at most 128 ids",
        ),
        (
            Box::new(|b| b["vllm_xargs"]["diffusion_seed_canvas"] = json!([1, 2, 3])),
            "exactly 8 ids, got 3",
        ),
        (
            Box::new(|b| b["vllm_xargs"]["diffusion_seed_canvas"][0] = json!(262_144)),
            "ids must be in [0, 262144)",
        ),
        (
            Box::new(|b| b["vllm_xargs"]["diffusion_canvas_length"] = json!(256)),
            "no larger than the served canvas 128",
        ),
        (
            Box::new(|b| b["vllm_xargs"]["diffusion_max_steps"] = json!(true)),
            "`diffusion_max_steps` must be a positive integer",
        ),
        (
            Box::new(|b| b["vllm_xargs"]["diffusion_read_only"] = json!("yes")),
            "`diffusion_read_only` must be a boolean",
        ),
        (
            Box::new(|b| b["vllm_xargs"]["diffusion_pinned"] = json!([8])),
            "`diffusion_pinned` positions must lie in [0, 8)",
        ),
        (
            Box::new(|b| b["vllm_xargs"]["diffusion_samples"] = json!(2)),
            "unknown diffusion argument `diffusion_samples`",
        ),
        (
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("logprob_token_ids");
            }),
            "`diffusion_constrained` requires `logprob_token_ids`",
        ),
        (
            Box::new(|b| b["return_tokens_as_token_ids"] = json!(false)),
            "`return_tokens_as_token_ids`",
        ),
        (
            Box::new(|b| b["messages"][0]["role"] = json!("tool")),
            "`messages[0].role`",
        ),
        (
            Box::new(|b| b["max_tokens"] = json!(9)),
            "`max_tokens` 9 exceeds the canvas 8",
        ),
    ];
    for (mutate, want) in cases {
        let mut body = read();
        mutate(&mut body);
        let (status, reply) = post(&fake, "/v1/chat/completions", &body).await;
        assert_eq!(status, 400, "{want}: {reply}");
        let msg = reply["message"].as_str().unwrap();
        assert!(msg.contains(want), "`{msg}` should contain `{want}`");
    }
    assert!(
        fake.requests().is_empty(),
        "rejected requests are not recorded"
    );
}

#[tokio::test]
async fn completions_reads_return_dicts_keyed_by_token_id() {
    let fake = FakeVllm::start(FakeConfig::default()).await.unwrap();
    let mut body = read();
    let obj = body.as_object_mut().unwrap();
    obj.remove("messages");
    obj.remove("top_logprobs");
    obj.remove("chat_template_kwargs");
    obj.insert("prompt".into(), json!([2, 5, 6]));
    obj.insert("logprobs".into(), json!(20));
    let (status, reply) = post(&fake, "/v1/completions", &body).await;
    assert_eq!(status, 200, "{reply}");
    let tops = reply["choices"][0]["logprobs"]["top_logprobs"]
        .as_array()
        .unwrap();
    assert_eq!(tops.len(), 8);
    assert!(tops[3].as_object().unwrap().contains_key("token_id:7"));
    // The chat-only field is unknown on the completions route.
    body["top_logprobs"] = json!(20);
    let (status, reply) = post(&fake, "/v1/completions", &body).await;
    assert_eq!(status, 400);
    assert!(reply["message"]
        .as_str()
        .unwrap()
        .contains("unknown field `top_logprobs`"));
}

#[tokio::test]
async fn keep_requests_keeps_the_first_n_and_counts_them_all() {
    let fake = FakeVllm::start(FakeConfig {
        keep_requests: Some(2),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    for _ in 0..5 {
        let (status, reply) = post(&fake, "/v1/chat/completions", &read()).await;
        assert_eq!(status, 200, "{reply}");
    }
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(fake.accepted(), 5);
    // A refused request is neither kept nor counted.
    let mut bad = read();
    bad["temperature"] = json!(0);
    assert_eq!(post(&fake, "/v1/chat/completions", &bad).await.0, 400);
    assert_eq!(fake.accepted(), 5);
}
