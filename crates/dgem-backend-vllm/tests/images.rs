//! The image path against the fake vLLM, request field by field: image parts
//! forwarded as chat content parts, the text restated for later stages (no
//! token prefill), `isolate: "auto"` undone, the image thought seeded into the
//! canvas, and clear refusals of bad images.
#![allow(clippy::unwrap_used)]

mod common;

use common::{canvas, config, decider, fake_with, ids, schema};
use dgem_backend::{DecideError, DecideRequest, Decider as _, Decision};
use dgem_backend_vllm::VllmDecider;
use dgem_core::tokenizer::Tokenizer as _;
use serde_json::{json, Value};

/// A 1×1 PNG as a data URL.
const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAACklEQVR4nGMAAQAABQABDQottAAAAABJRU5ErkJggg==";

fn image_state(text: &str) -> Value {
    json!([
        {"type": "image_url", "image_url": {"url": PNG}},
        {"type": "text", "text": text},
    ])
}

async fn decide_image(d: &VllmDecider, s: Value, state: Value) -> Result<Decision, DecideError> {
    d.decide(DecideRequest {
        schema: schema(s),
        state,
        seed: 42,
    })
    .await
}

#[tokio::test]
async fn image_parts_go_first_then_one_text_part_and_auto_isolation_is_undone() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    // Two yes/no questions: `isolate: "auto"` would read each alone, but each
    // read would repeat the image, so they share one read.
    let s = json!({"questions": [{"id": "cat", "type": "noul"}, {"id": "dog", "type": "noul"}]});
    let dec = decide_image(&d, s, image_state("a photo from the shelter"))
        .await
        .unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1, "one read for both questions");
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(
        r.body["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    let msgs = r.body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1);
    let parts = msgs[0]["content"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(
        parts[0],
        json!({"type": "image_url", "image_url": {"url": PNG}})
    );
    assert_eq!(parts[1]["type"], "text");
    let text = parts[1]["text"].as_str().unwrap();
    assert!(text.starts_with("<user_text>\na photo from the shelter\n</user_text>"));
    assert!(text.contains("Question cat") && text.ends_with("</instructions>"));
    assert!(dec.diagnostics.isolated.is_empty(), "auto isolation undone");
    assert_eq!(dec.diagnostics.conditioning, None);
    assert!(dec.answers["cat"].is_some() && dec.answers["dog"].is_some());
}

#[tokio::test]
async fn a_later_stage_restates_earlier_answers_in_the_text_on_the_chat_route() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let s = json!({"questions": [
        {"id": "urgent", "type": "noul"},
        {"id": "refund", "type": "noul", "ask_if": {"urgent": ["yes"]}},
    ]});
    let dec = decide_image(&d, s, image_state("receipt attached"))
        .await
        .unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs.iter().all(|r| r.path == "/v1/chat/completions"),
        "no token prefill with images"
    );
    let text = |r: &dgem_fake_vllm::Recorded| {
        let parts = r.body["messages"][0]["content"].as_array().unwrap().clone();
        assert_eq!(parts[0]["type"], "image_url", "image first");
        parts[1]["text"].as_str().unwrap().to_owned()
    };
    let first = text(&reqs[0]);
    let second = text(&reqs[1]);
    assert!(first.starts_with("<user_text>\nreceipt attached\n</user_text>"));
    assert!(
        second.starts_with(
            "<user_text>\nreceipt attached\n\nAnswers so far:\nurgent: yes\n</user_text>"
        ),
        "{second}"
    );
    // Chained: both reads list every question and say a reply may cover some.
    for t in [&first, &second] {
        assert!(t.contains("Question urgent") && t.contains("Question refund"));
        assert!(t.contains("Some questions may be missing"));
    }
    assert_eq!(dec.diagnostics.conditioning.as_deref(), Some("restated"));
}

#[tokio::test]
async fn schema_first_sends_the_image_state_as_it_came() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    let state = json!([
        {"type": "text", "text": "before"},
        {"type": "image_url", "image_url": {"url": PNG}},
        {"type": "text", "text": "after"},
    ]);
    decide_image(
        &d,
        json!({"layout": "schema_first", "questions": [{"id": "u", "type": "noul"}]}),
        state.clone(),
    )
    .await
    .unwrap();
    let msgs = fake.requests()[0].body["messages"].clone();
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(msgs[1], json!({"role": "user", "content": state}));
}

#[tokio::test]
async fn an_image_thought_is_written_on_the_chat_route_and_seeded_into_the_canvas() {
    let ids = ids();
    let tok = ids.tok.clone();
    let thought: Vec<u32> = tok.encode("striped fur").unwrap();
    let fake = common::fake_thinking(thought.clone()).await;
    let d = decider(&ids, config(&fake));
    let dec = decide_image(
        &d,
        json!({"think": 500, "questions": [{"id": "cat", "type": "noul"}]}),
        image_state("who is this"),
    )
    .await
    .unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "one thought, one read");
    let think = &reqs[0].body;
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(
        think["chat_template_kwargs"],
        json!({"enable_thinking": true})
    );
    assert_eq!(think["top_logprobs"], 0);
    let open = tok.encode("<|channel>thought\n").unwrap();
    let close = tok.encode("<channel|>").unwrap();
    assert_eq!(think["stop_token_ids"], json!(close));
    // The budget is what the 64-token canvas leaves beside the answer.
    let answer = tok.encode("cat: yes").unwrap().len();
    let fits = 64 - 1 - open.len() - close.len() - answer;
    assert_eq!(think["max_tokens"], fits);
    let read = &reqs[1];
    assert_eq!(read.path, "/v1/chat/completions");
    assert_eq!(
        read.body["chat_template_kwargs"],
        json!({"enable_thinking": true})
    );
    let c = canvas(read);
    let mut head: Vec<u64> = open.iter().map(|&t| u64::from(t)).collect();
    head.extend(thought.iter().map(|&t| u64::from(t)));
    head.extend(close.iter().map(|&t| u64::from(t)));
    assert_eq!(
        c[..head.len()],
        head[..],
        "thought seeded ahead of the answer"
    );
    let th = dec.diagnostics.thought.clone().unwrap();
    assert_eq!(th["tokens"], thought.len());
    assert_eq!(th["budget"], fits);
    assert_eq!(th["closed"], true);
    let template = usize::try_from(read.body["max_tokens"].as_u64().unwrap()).unwrap();
    assert_eq!(
        dec.diagnostics.rows, template,
        "the thought is in the template"
    );
}

#[tokio::test]
async fn a_canvas_too_small_for_an_image_thought_is_refused_on_think() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let mut cfg = config(&fake);
    cfg.canvas_len = 16;
    cfg.canvas_step = 16;
    cfg.profile = None;
    let d = decider(&ids, cfg);
    let err = decide_image(
        &d,
        json!({"think": 64, "questions": [{"id": "cat", "type": "noul"}, {"id": "dog", "type": "noul"}]}),
        image_state("x"),
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("think: a thought about images"), "{msg}");
    assert!(msg.contains("at least 8 are needed"), "{msg}");
    assert!(fake.requests().is_empty(), "refused before any call");
}

#[tokio::test]
async fn remote_and_malformed_images_are_refused_before_any_call() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    let s = json!({"questions": [{"id": "u", "type": "noul"}]});
    for (url, needle) in [
        (
            "https://example.com/cat.png",
            "state[0]: remote image URLs are not fetched",
        ),
        (
            "data:image/bmp;base64,Qk0=",
            "image type must be one of [image/png",
        ),
        (
            "data:image/png;base64,aGVsbG8=",
            "the bytes are not a supported image",
        ),
    ] {
        let state = json!([{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "t"}]);
        let err = decide_image(&d, s.clone(), state).await.unwrap_err();
        assert!(err.to_string().contains(needle), "{url}: {err}");
    }
    assert!(fake.requests().is_empty());
}

/// Regression (hostile run): beside one valid image, a `video_url` part went to
/// vLLM verbatim (which would fetch it), and the `image` / string `image_url`
/// forms were sent un-normalized and failed upstream.
#[tokio::test]
async fn only_rebuilt_text_and_image_parts_are_sent() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    let s = json!({"questions": [{"id": "u", "type": "noul"}]});
    let bad = json!([
        {"type": "image_url", "image_url": {"url": PNG}},
        {"type": "video_url", "video_url": {"url": "http://169.254.169.254/latest/meta-data/"}},
    ]);
    let err = decide_image(&d, s.clone(), bad).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("state[1]: a part must be `text` or an image"),
        "{err}"
    );
    assert!(fake.requests().is_empty(), "refused before any call");
    let forms = json!([
        {"type": "image", "image": PNG},
        {"type": "image_url", "image_url": PNG, "video_url": {"url": "http://evil/"}},
        {"type": "text", "text": "two photos", "extra": 1},
    ]);
    decide_image(&d, s, forms).await.unwrap();
    let parts = fake.requests()[0].body["messages"][0]["content"].clone();
    let want = json!({"type": "image_url", "image_url": {"url": PNG}});
    assert_eq!(parts[0], want);
    assert_eq!(parts[1], want);
    assert_eq!(parts.as_array().map(Vec::len), Some(3));
    assert!(parts[2]["text"].as_str().unwrap().contains("two photos"));
}

/// Issue 27 item 6: a policy that declares `requires_image` is refused on
/// `images` when the state holds none, before anything is sent upstream;
/// with an image it is read as usual.
#[tokio::test]
async fn a_policy_that_requires_an_image_is_refused_without_one_before_any_request() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let s = json!({"requires_image": true, "questions": [{"id": "damaged", "type": "noul"}]});
    let err = decide_image(&d, s.clone(), json!("the parcel arrived"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, DecideError::Schema(ref e) if e.field == "images"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("declares `requires_image: true`, but the state holds no image"),
        "{err}"
    );
    assert!(fake.requests().is_empty(), "nothing was sent upstream");
    let dec = decide_image(&d, s, image_state("the parcel arrived"))
        .await
        .unwrap();
    assert!(dec.answers["damaged"].is_some());
}
