//! Contract tests of `POST /v1/systemone` (serving.md §3.3, §8.4).
#![allow(clippy::unwrap_used)]

mod common;

use common::{app, call, normalize, post, post_raw};
use serde_json::{json, Value};

fn jev() -> Value {
    json!({
        "model": "ignored-by-the-server",
        "state": {"ticket": "want_billing want_no want_high"},
        "questions": {
            "urgent": {"type": "noul", "instructions": "Is it urgent?", "criteria": {"true": "outage", "false": "can wait"}},
            "route": {"type": "choice", "instructions": "Route it", "criteria": {"billing": "money", "technical": null}},
            "grade": {"type": "score", "instructions": {"rubric": "severity"}, "criteria": ["low", "mid", "high"]},
            "gated": {"type": "noul", "ask_if": {"urgent": ["yes"]}}
        }
    })
}

#[tokio::test]
async fn jev_shapes_zero_based_score_and_usage() {
    let (app, _) = app();
    let r = call(&app, post("/v1/systemone", &jev())).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["model"], "dgemma",
        "the server's model, not the request's"
    );
    let a = &r.body["answers"];
    assert_eq!(a["urgent"]["type"], "noul");
    assert!((a["urgent"]["noul"].as_f64().unwrap() - 0.2).abs() < 1e-9);
    assert!((a["urgent"]["probabilities"]["false"].as_f64().unwrap() - 0.8).abs() < 1e-9);
    assert!((a["urgent"]["confidence"].as_f64().unwrap() - 0.8).abs() < 1e-9);
    assert_eq!(a["route"]["choice"], "billing");
    assert_eq!(
        a["grade"]["legend"],
        json!({"0": "low", "1": "mid", "2": "high"})
    );
    // 0-based: 0.1·0 + 0.1·1 + 0.8·2
    assert!((a["grade"]["score"].as_f64().unwrap() - 1.7).abs() < 1e-9);
    assert!(a["gated"].is_null(), "skipped by ask_if");
    assert_eq!(
        r.body["diagnostics"]["skipped"]["gated"]["because"],
        "urgent"
    );
    assert_eq!(r.body["usage"]["output_tokens"], 3);
    assert!(r.body["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(r.headers["server-timing"]
        .to_str()
        .unwrap()
        .starts_with("decide;dur="));
    insta::assert_json_snapshot!("systemone_success", normalize(&r.body));
}

#[tokio::test]
async fn extension_keys_and_string_state_are_used() {
    let (app, _) = app();
    let mut body = jev();
    body["samples"] = json!(2);
    body["layout"] = json!("schema_first");
    body["state"] = json!("plain text want_technical");
    body["seed"] = json!(3);
    let r = call(&app, post("/v1/systemone", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // `gated` is asked in a second stage: two parts, so samples are listed per part.
    assert_eq!(r.body["diagnostics"]["samples"]["n"], json!([2, 2]));
    assert_eq!(r.body["diagnostics"]["layout"], "schema_first");
    assert_eq!(r.body["answers"]["route"]["choice"], "technical");
    let r = call(&app, post("/invoke/v1/systemone", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

/// Issue 27 item 6: `think_optional` and `requires_image` are read from the
/// body like `think`: a thought the embedded engine cannot write becomes a
/// warning, and a policy about an image with none is a 422 on `images`.
#[tokio::test]
async fn think_optional_and_requires_image_are_read_from_the_body() {
    let (app, _) = app();
    let mut body = jev();
    body["think"] = json!(32);
    let r = call(&app, post("/v1/systemone", &body)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["error"]["param"], "think", "{}", r.text);
    body["think_optional"] = json!(true);
    let r = call(&app, post("/v1/systemone", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["diagnostics"]["warnings"],
        json!([dgem_engine::think_skipped(32)])
    );
    let mut body = jev();
    body["requires_image"] = json!(true);
    let r = call(&app, post("/v1/systemone", &body)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["error"]["param"], "images", "{}", r.text);
    assert!(
        r.text.contains("declares `requires_image: true`"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn score_answers_carry_value_as_on_the_chat_route() {
    let (app, _) = app();
    let state = json!({"ticket": "want_22"});
    let levels = json!(["20", "21", "22"]);
    let body = json!({
        "state": state,
        "questions": {
            "n": {"type": "score", "instructions": "How many?", "criteria": levels},
            "grade": {"type": "score", "instructions": "How bad?", "criteria": ["low", "mid", "high"]}
        }
    });
    let r = call(&app, post("/v1/systemone", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let schema = json!({"questions": [
        {"id": "n", "type": "score", "instructions": "How many?", "levels": levels},
        {"id": "grade", "type": "score", "instructions": "How bad?", "levels": ["low", "mid", "high"]}
    ]});
    let c = call(
        &app,
        post("/v1/chat/completions", &common::chat(&schema, &state)),
    )
    .await;
    assert_eq!(c.status, 200, "{}", c.text);
    let chat = common::envelope(&c.body)["answers"].clone();
    let one = &r.body["answers"];
    // Numeric levels: the expected level value 0.1·20 + 0.1·21 + 0.8·22.
    let v = one["n"]["value"].as_f64().expect("systemone value");
    assert!((v - 21.7).abs() < 1e-9, "{v}");
    assert_eq!(one["n"]["value"], chat["n"]["value"], "same value as chat");
    // The Jev score stays 0-based: 0.1·0 + 0.1·1 + 0.8·2.
    assert!((one["n"]["score"].as_f64().unwrap() - 1.7).abs() < 1e-9);
    // Word levels have no value on either route.
    assert!(one["grade"].get("value").is_none(), "{}", one["grade"]);
    assert!(chat["grade"].get("value").is_none(), "{}", chat["grade"]);
}

fn with(f: impl FnOnce(&mut Value)) -> Value {
    let mut b = jev();
    f(&mut b);
    b
}

fn cases() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "questions_missing",
            with(|b| {
                b.as_object_mut().unwrap().remove("questions");
            }),
            "questions: needs a non-empty map of id -> question",
        ),
        (
            "questions_empty",
            with(|b| b["questions"] = json!({})),
            "questions: needs a non-empty map of id -> question",
        ),
        (
            "question_not_object",
            with(|b| b["questions"] = json!({"a": "noul"})),
            "question 'a': must be an object",
        ),
        (
            "noul_criteria",
            with(|b| b["questions"] = json!({"a": {"type": "noul", "criteria": ["x"]}})),
            "question 'a': noul criteria must be an object with true and false",
        ),
        (
            "choice_criteria_empty",
            with(|b| b["questions"] = json!({"a": {"type": "choice", "criteria": {}}})),
            "question 'a': choice criteria must map option names to descriptions",
        ),
        (
            "score_criteria",
            with(|b| b["questions"] = json!({"a": {"type": "score", "criteria": {"low": 1}}})),
            "question 'a': score criteria must be an ordered list of levels",
        ),
        (
            "type_missing",
            with(|b| b["questions"] = json!({"a": {}})),
            "question 'a': unknown type 'None'",
        ),
        (
            "one_option",
            with(|b| b["questions"] = json!({"a": {"type": "choice", "criteria": {"only": "x"}}})),
            "question 'a': needs at least two alternatives",
        ),
        (
            "bad_extension",
            with(|b| b["layout"] = json!("sideways")),
            "schema: layout must be \"schema_first\" or \"document_first\"",
        ),
        (
            "state_missing",
            with(|b| {
                b.as_object_mut().unwrap().remove("state");
            }),
            "state: required",
        ),
        (
            "state_null",
            with(|b| b["state"] = Value::Null),
            "state: required",
        ),
        (
            "seed_bad",
            with(|b| b["seed"] = json!("abc")),
            "`seed` must be an integer",
        ),
        (
            "image_entry_bad",
            with(|b| b["images"] = json!(["https://example.invalid/cat.png"])),
            "images[0]: a data:image/... URL or an object with content_type and base64",
        ),
        (
            "image_object_bad",
            with(|b| b["images"] = json!([{"content_type": "image/png"}])),
            "images[0]: a data:image/... URL or an object with content_type and base64",
        ),
        (
            "images_unsupported",
            with(
                |b| b["images"] = json!(["data:image/png;base64,AAAA", {"content_type": "image/jpeg", "base64": "BBBB"}]),
            ),
            "images: this backend (scripted, model toy) has no vision and cannot read images",
        ),
    ]
}

/// Every surface takes the same question forms (`dgem_core::adhoc`): a list of
/// questions with ids, the `bool` alias, and a choice's options as a list of
/// names, all of which the original `/v1/systemone` refused.
#[tokio::test]
async fn the_shared_question_forms_are_accepted() {
    let (app, _) = app();
    for (case, questions) in [
        ("questions_list", json!([{"id": "a", "type": "noul"}])),
        ("bool_alias", json!({"a": {"type": "bool"}})),
        (
            "choice_criteria_list",
            json!({"a": {"type": "choice", "criteria": ["x", "y"]}}),
        ),
    ] {
        let body = with(|b| b["questions"] = questions.clone());
        let r = call(&app, post("/v1/systemone", &body)).await;
        assert_eq!(r.status, 200, "{case}: {}", r.text);
        assert!(r.body["answers"]["a"].is_object(), "{case}: {}", r.text);
    }
}

#[tokio::test]
async fn every_validation_error_is_422() {
    let (app, backend) = app();
    let mut table = serde_json::Map::new();
    for (case, body, prefix) in cases() {
        let r = call(&app, post("/v1/systemone", &body)).await;
        assert_eq!(r.status, 422, "{case}: {}", r.text);
        assert_eq!(r.body["error"]["type"], "validation_error", "{case}");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(prefix), "{case}: {msg}");
        table.insert(case.into(), json!(msg));
    }
    assert_eq!(backend.calls(), 0);
    insta::assert_json_snapshot!("systemone_errors", table);
}

fn multipart(parts: &[(&str, Option<&str>, &str)]) -> String {
    let mut s = String::new();
    for (name, ctype, data) in parts {
        s.push_str(&format!(
            "--BOUND\r\nContent-Disposition: form-data; name=\"{name}\""
        ));
        if ctype.is_some() {
            s.push_str(&format!("; filename=\"{name}.bin\""));
        }
        s.push_str("\r\n");
        if let Some(c) = ctype {
            s.push_str(&format!("Content-Type: {c}\r\n"));
        }
        s.push_str(&format!("\r\n{data}\r\n"));
    }
    s.push_str("--BOUND--\r\n");
    s
}

const MP: &str = "multipart/form-data; boundary=BOUND";

#[tokio::test]
async fn multipart_bodies() {
    let (app, _) = app();
    let req = jev().to_string();
    let r = call(
        &app,
        post_raw(
            "/v1/systemone",
            MP,
            multipart(&[("request", Some("application/json"), &req)]),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["answers"]["route"]["choice"], "billing");

    let r = call(
        &app,
        post_raw(
            "/v1/systemone",
            MP,
            multipart(&[
                ("request", None, &req),
                ("photo", Some("image/png"), "PNGDATA"),
            ]),
        ),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot read images"));

    let r = call(
        &app,
        post_raw(
            "/v1/systemone",
            MP,
            multipart(&[("request", None, &req), ("notes", Some("text/plain"), "hi")]),
        ),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        json!({"error": {"message": "invalid body: part 'notes': neither the request JSON nor an image", "type": "invalid_request_error"}})
    );

    let r = call(
        &app,
        post_raw(
            "/v1/systemone",
            MP,
            multipart(&[("photo", Some("image/png"), "PNG")]),
        ),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["error"]["message"],
        "invalid body: multipart needs a part named request holding the JSON body"
    );

    let r = call(&app, post_raw("/v1/systemone", "application/json", "[1, 2")).await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("invalid body: "));
    let r = call(&app, post("/v1/systemone", &json!([1]))).await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn decide_errors_are_422_or_502() {
    let b =
        dgem_testkit::ScriptedBackend::with_context(400, dgem_testkit::scripts::favour("yes", 0.9));
    let app = dgem_server::router(common::state(b.clone(), common::config()));
    let long = with(|x| x["state"] = json!("word ".repeat(500)));
    let r = call(&app, post("/v1/systemone", &long)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "validation_error");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("context"),
        "{}",
        r.text
    );
    b.fail_next(1);
    let short = with(|x| x["state"] = json!("short"));
    let r = call(&app, post("/v1/systemone", &short)).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "server_error");
}

/// Regression: `{"questions": {"u": …, "u": …}}` was answered with one question
/// (the last key silently won). A repeated key is a 422 naming it.
#[tokio::test]
async fn duplicate_question_ids_in_the_body_are_refused() {
    let (app, backend) = app();
    let body = r#"{"questions": {"u": {"type": "noul"}, "u": {"type": "noul"}}, "state": "s"}"#;
    let r = call(&app, post_raw("/v1/systemone", "application/json", body)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("duplicate key `u` in `questions`"), "{msg}");
    assert_eq!(backend.calls(), 0);
}

/// Issue 40 on `/v1/systemone`, as dgem-rs extensions: a multi question
/// answers its selected options, `rules` reach the schema and mark the
/// answers they change, and a near miss of `rules` is a 422, not dropped.
#[tokio::test]
async fn multi_questions_and_rules_are_extensions() {
    let (app, _) = app();
    let body = json!({
        "state": "want_billing",
        "questions": {
            "tags": {"type": "multi", "criteria": ["billing", "technical"], "none_of_these": true},
            "urgent": {"type": "noul"},
            "page": {"type": "noul"}
        },
        "isolate": "none",
        "rules": [{"if": {"urgent": "yes"}, "not": {"page": "yes"}}]
    });
    let r = call(&app, post("/v1/systemone", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let a = &r.body["answers"];
    assert_eq!(a["tags"]["type"], "multi");
    assert!(a["tags"]["multi"].is_array(), "{}", a["tags"]);
    assert_eq!(
        a["tags"]["probabilities"].as_object().unwrap().len(),
        3,
        "billing, technical and none: {}",
        a["tags"]
    );
    // Both yes/no questions read 0.5: the rule removes 0.25.
    assert_eq!(a["urgent"]["constrained"], true, "{}", a["urgent"]);
    assert!((a["urgent"]["constraint_mass_removed"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    assert!((a["page"]["noul"].as_f64().unwrap() - 0.25 / 0.75).abs() < 1e-9);
    let mut typo = body.clone();
    let rules = typo.as_object_mut().unwrap().remove("rules").unwrap();
    typo["rule"] = rules;
    let r = call(&app, post("/v1/systemone", &typo)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("did you mean `rules`"), "{msg}");
}

/// Regression (issue 39): a key this route does not read was dropped in
/// silence (`{"temprature_by_type": …}` far from any key, `{"foo": 1}`); it
/// is a 422 naming it and the keys the route reads. The gateway's routing
/// keys, forwarded with the body, are still accepted.
#[tokio::test]
async fn a_key_the_route_does_not_read_is_refused_naming_it() {
    let (app, _) = app();
    let mut body = jev();
    body["foo"] = json!(1);
    let r = call(&app, post("/v1/systemone", &body)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["error"]["param"], "foo");
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("`foo` is not read; this route reads state, questions, images, seed, model and instructions, samples"),
        "{msg}"
    );
    // A policy's post-read key is refused saying where it applies.
    let mut post_read = jev();
    post_read["abstain_below"] = json!(0.9);
    let r = call(&app, post("/v1/systemone", &post_read)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["error"]["param"], "abstain_below");
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("is not applied on this route") && msg.contains("/api/decide"),
        "{msg}"
    );
    let mut routed = jev();
    routed["backend"] = json!("local");
    routed["vertex_url"] = json!("https://example.invalid");
    let r = call(&app, post("/v1/systemone", &routed)).await;
    assert_eq!(r.status, 200, "{}", r.text);
}
