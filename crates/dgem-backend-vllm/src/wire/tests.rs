#![allow(clippy::unwrap_used)]

use dgem_core::slots::{canvas_width, seed_canvas, CanvasTokens, ResolvedTemplate};
use serde_json::json;

use super::*;

fn template() -> ResolvedTemplate {
    ResolvedTemplate {
        tokens: vec![900, 901, 902, 1000],
        slots: vec![CanvasSlot {
            id: "urgent".into(),
            pos: 3,
            label_ids: vec![1000, 1001],
        }],
    }
}

const IDS: CanvasTokens = CanvasTokens {
    turn_close: 106,
    pad: 0,
    vocab: 262_144,
};

/// Golden body of one chat read. The slot token 58369 is CPython's
/// `random.Random(42).randrange(262144)`.
#[test]
fn chat_read_golden_json() {
    let t = template();
    let width = canvas_width(t.tokens.len(), 128, 16);
    assert_eq!(width, 16);
    let canvas = seed_canvas(&t, width, 42, IDS);
    let prompt = Prompt::Chat {
        messages: json!([{"role": "user", "content": "hi"}]),
        enable_thinking: false,
    };
    let ids = label_id_set(&t.slots).unwrap();
    let body = read_body(&ReadSpec {
        model: "dgemma",
        prompt: &prompt,
        template_len: t.tokens.len(),
        canvas: &canvas,
        label_ids: &ids,
        steps: 1,
        pinned: None,
        constrained: true,
    });
    assert_eq!(
        body,
        json!({
            "model": "dgemma",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 5,
            "logprobs": true,
            "top_logprobs": 20,
            "logprob_token_ids": [1000, 1001],
            "return_tokens_as_token_ids": true,
            "chat_template_kwargs": {"enable_thinking": false},
            "vllm_xargs": {
                "diffusion_seed_canvas": [900, 901, 902, 58369, 106, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                "diffusion_canvas_length": 16,
                "diffusion_max_steps": 1,
                "diffusion_read_only": true,
                "diffusion_constrained": true
            }
        })
    );
    assert_eq!(prompt.path(), CHAT_PATH);
}

#[test]
fn continuation_read_and_pinning() {
    let t = template();
    let canvas = seed_canvas(&t, 16, 43, IDS);
    // CPython: random.Random(43).randrange(262144) == 20212.
    assert_eq!(canvas[3], 20212);
    let pinned = pinned_positions(16, &t.slots);
    assert_eq!(pinned.len(), 15);
    assert!(!pinned.contains(&3));
    let prompt = Prompt::Tokens(vec![2, 5, 6]);
    let body = read_body(&ReadSpec {
        model: "dgemma",
        prompt: &prompt,
        template_len: 4,
        canvas: &canvas,
        label_ids: &[1000, 1001],
        steps: 3,
        pinned: Some(&pinned),
        constrained: false,
    });
    assert_eq!(prompt.path(), COMPLETIONS_PATH);
    assert_eq!(body["prompt"], json!([2, 5, 6]));
    assert_eq!(body["logprobs"], 20);
    assert!(body.get("messages").is_none() && body.get("top_logprobs").is_none());
    assert_eq!(body["vllm_xargs"]["diffusion_max_steps"], 3);
    assert_eq!(body["vllm_xargs"]["diffusion_pinned"], json!(pinned));
    assert!(body["vllm_xargs"].get("diffusion_constrained").is_none());
}

#[test]
fn label_ids_are_sorted_distinct_and_capped() {
    let slots = vec![
        CanvasSlot {
            id: "a".into(),
            pos: 1,
            label_ids: vec![9, 3],
        },
        CanvasSlot {
            id: "b".into(),
            pos: 2,
            label_ids: vec![3, 7],
        },
    ];
    assert_eq!(label_id_set(&slots).unwrap(), vec![3, 7, 9]);
    let many = vec![CanvasSlot {
        id: "w".into(),
        pos: 1,
        label_ids: (0..129).collect(),
    }];
    let err = label_id_set(&many).unwrap_err();
    assert!(err.message.contains("129 label ids"), "{}", err.message);
    assert!(err.message.contains("at most 128"), "{}", err.message);
}

#[test]
fn parses_chat_rows_and_completion_dicts() {
    let chat = json!({"choices": [{"logprobs": {"content": [
        {"token": "token_id:1", "logprob": 0.0, "top_logprobs": []},
        {"token": "token_id:7", "logprob": -0.1, "top_logprobs": [
            {"token": "token_id:7", "logprob": -0.1}, {"token": "token_id:8", "logprob": -2.4}]}
    ]}}], "usage": {"prompt_tokens": 33}});
    let r = parse_read(CHAT_PATH, &chat, &[1]).unwrap();
    assert_eq!(r.tops[0][&7], -0.1);
    assert_eq!(r.tops[0][&8], -2.4);
    assert_eq!(r.prompt_tokens, Some(33));
    let comp = json!({"choices": [{"logprobs": {"top_logprobs": [
        {"token_id:4": -0.5}, {"token_id:7": -0.2, "token_id:8": -1.7}]}}]});
    let r = parse_read(COMPLETIONS_PATH, &comp, &[1]).unwrap();
    assert_eq!(r.tops[0][&8], -1.7);
    assert_eq!(r.prompt_tokens, None);
}

#[test]
fn malformed_replies_are_errors_naming_the_field() {
    let cases = [
        (json!({"choices": []}), "`choices[0].logprobs` is missing"),
        (
            json!({"choices": [{"logprobs": {}}]}),
            "`choices[0].logprobs.content` is missing",
        ),
        (
            json!({"choices": [{"logprobs": {"content": []}}]}),
            "slot position 0 but only 0 rows",
        ),
        (
            json!({"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "yes", "logprob": -1.0}]}]}}]}),
            "`token_id:<N>`, got `yes`",
        ),
        (
            json!({"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "token_id:3", "logprob": "x"}]}]}}]}),
            "must be a number",
        ),
        (
            json!({"choices": [{"logprobs": {"content": [{"top_logprobs": []}]}}]}),
            "returned no logprobs",
        ),
    ];
    for (reply, want) in cases {
        let err = parse_read(CHAT_PATH, &reply, &[0]).unwrap_err();
        assert!(matches!(err, BackendError::Model(_)), "{err:?}");
        assert!(!err.is_retryable());
        assert!(
            err.to_string().contains(want),
            "{err} should contain {want}"
        );
    }
}

#[test]
fn thought_tokens_cut_at_the_close_tag() {
    let reply = json!({"choices": [{"logprobs": {"tokens": ["token_id:11", "token_id:12", "token_id:99", "token_id:13"]}}]});
    assert_eq!(parse_think(&reply, Some(99)).unwrap(), (vec![11, 12], true));
    assert_eq!(
        parse_think(&reply, Some(5)).unwrap(),
        (vec![11, 12, 99, 13], false)
    );
    let body = think_body("dgemma", &[2, 3], 64, &[99]);
    assert_eq!(
        body,
        json!({"model": "dgemma", "prompt": [2, 3], "max_tokens": 64, "logprobs": 0,
               "return_tokens_as_token_ids": true, "stop_token_ids": [99]})
    );
    assert!(parse_think(&json!({"choices": [{}]}), Some(99)).is_err());
}
