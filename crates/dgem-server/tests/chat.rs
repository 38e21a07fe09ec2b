//! Contract tests of `POST /v1/chat/completions` and its aliases (serving.md §3.2, §8.3).
#![allow(clippy::unwrap_used)]

mod common;

use common::{app, call, chat, envelope, normalize, post, post_raw, triage};
use serde_json::{json, Value};

const SHAPE: &str =
    "a structured request is exactly two messages: the schema (system) and the state JSON (user)";
const PARSE: &str =
    "system must be a JSON question schema and user must be JSON state or image parts: ";

#[tokio::test]
async fn answers_and_openai_shape() {
    let (app, _) = app();
    let r = call(
        &app,
        post(
            "/v1/chat/completions",
            &chat(
                &triage(),
                &json!({"ticket": "want_engineering want_yes want_furious"}),
            ),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["object"], "chat.completion");
    assert_eq!(r.body["model"], "test-model");
    assert!(r.body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(r.body["choices"][0]["finish_reason"], "stop");
    // Regression (issue 16): `prompt_tokens` was always 0; it is the prompt
    // length of the longest read.
    let prompt = r.body["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 0, "{}", r.body["usage"]);
    assert_eq!(
        r.body["usage"],
        json!({"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3})
    );
    let content = r.body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        content.starts_with("{\n  \"answers\""),
        "pretty JSON: {content}"
    );
    let env = envelope(&r.body);
    let a = &env["answers"];
    assert_eq!(a["urgent"]["label"], "yes");
    assert!((a["urgent"]["noul"].as_f64().unwrap() - 0.8).abs() < 1e-9);
    assert_eq!(a["team"]["choice"], "engineering");
    assert!((a["team"]["confidence"].as_f64().unwrap() - 0.8).abs() < 1e-9);
    assert_eq!(a["tone"]["level"], "furious");
    // 1-based score: 0.1·1 + 0.1·2 + 0.8·3
    assert!((a["tone"]["score"].as_f64().unwrap() - 2.7).abs() < 1e-9);
    let server_timing = r.headers["server-timing"].to_str().unwrap();
    assert!(server_timing.starts_with("decide;dur="), "{server_timing}");
    assert!(server_timing.contains("queue;dur=") && server_timing.contains("forward;dur="));
    assert!(r.headers.contains_key("x-inference-time-ms"));
    let mut snap = normalize(&r.body);
    snap["choices"][0]["message"]["content"] = normalize(&env);
    insta::assert_json_snapshot!("chat_success", snap);
}

#[tokio::test]
async fn aliases_developer_role_and_defaults() {
    let (app, _) = app();
    let mut body = chat(&triage(), &json!("want_billing"));
    body["messages"][0]["role"] = json!("developer");
    body.as_object_mut().unwrap().remove("model");
    for path in [
        "/predict",
        "/rawPredict",
        "/invoke/v1/chat/completions",
        "/invoke/predict",
        "/invoke/rawPredict",
    ] {
        let r = call(&app, post(path, &body)).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        assert_eq!(r.body["model"], "dgemma-structured");
        assert_eq!(
            envelope(&r.body)["answers"]["team"]["choice"],
            "billing",
            "{path}"
        );
    }
    // List content: the text of every part is concatenated.
    let mut parts = chat(&triage(), &json!("x"));
    parts["messages"][0]["content"] = json!([{"type": "text", "text": "{\"questions\": [{\"id\": \"ok\", "}, {"type": "text", "text": "\"type\": \"boolean\"}]}"}]);
    parts["messages"][1]["content"] = json!([{"type": "text", "text": " {\"a\": \"want_no\"} "}]);
    let r = call(&app, post("/v1/chat/completions", &parts)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(envelope(&r.body)["answers"]["ok"]["label"], "no");
}

#[tokio::test]
async fn seed_and_samples_reach_the_engine() {
    let (app, _) = app();
    let mut s = triage();
    s["samples"] = json!("3");
    let mut body = chat(&s, &json!({"t": "want_support"}));
    body["seed"] = json!(7);
    let r = call(&app, post("/v1/chat/completions", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let env = envelope(&r.body);
    // One part per question: the embedded reader reads them apart.
    assert_eq!(env["diagnostics"]["samples"]["n"], json!([3, 3, 3]));
    assert_eq!(env["answers"]["team"]["agreement"], 1.0);
    assert_eq!(r.body["usage"]["completion_tokens"], 9);
}

fn with_schema(schema: Value) -> Value {
    chat(&schema, &json!({"ticket": "t"}))
}

fn q(id: &str, t: &str) -> Value {
    json!({"id": id, "type": t})
}

/// Every error the chat route can produce while parsing, with the status and body.
fn error_cases() -> Vec<(&'static str, Value)> {
    let noul = |id: &str| q(id, "noul");
    let many: Vec<Value> = (0..65).map(|i| noul(&format!("q{i}"))).collect();
    // A choice takes up to 300 options (bracket routing); 301 is refused.
    let options: Vec<String> = (0..301).map(|i| format!("o{i}")).collect();
    let mut one_message = with_schema(triage());
    one_message["messages"].as_array_mut().unwrap().pop();
    let mut three = with_schema(triage());
    three["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "{}"}));
    let mut roles = with_schema(triage());
    roles["messages"][0]["role"] = json!("assistant");
    let mut user_role = with_schema(triage());
    user_role["messages"][1]["role"] = json!("system");
    let mut prose = with_schema(triage());
    prose["messages"][1]["content"] = json!("please triage this ticket");
    let mut not_json = with_schema(triage());
    not_json["messages"][0]["content"] = json!("questions: urgent?");
    let mut bad_seed = with_schema(triage());
    bad_seed["seed"] = json!("abc");
    let mut images = with_schema(triage());
    images["messages"][1]["content"] = json!([
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "{}"}
    ]);
    vec![
        ("no_messages", json!({"model": "m"})),
        ("one_message", one_message),
        ("three_messages", three),
        ("assistant_role", roles),
        ("second_not_user", user_role),
        ("system_not_json", not_json),
        ("user_prose", prose),
        ("schema_not_object", with_schema(json!([1, 2]))),
        ("empty_questions", with_schema(json!({"questions": []}))),
        (
            "too_many_questions",
            with_schema(json!({"questions": many})),
        ),
        ("bad_id", with_schema(json!({"questions": [noul("a:b")]}))),
        (
            "duplicate_id",
            with_schema(json!({"questions": [noul("a"), noul("a")]})),
        ),
        (
            "unknown_type",
            with_schema(json!({"questions": [q("a", "banana")]})),
        ),
        (
            "one_alternative",
            with_schema(json!({"questions": [{"id": "pick", "type": "choice", "options": ["x"]}]})),
        ),
        (
            "too_many_alternatives",
            with_schema(
                json!({"questions": [{"id": "pick", "type": "choice", "options": options}]}),
            ),
        ),
        (
            "depends_on_not_list",
            with_schema(
                json!({"questions": [noul("a"), {"id": "b", "type": "noul", "depends_on": "a"}]}),
            ),
        ),
        (
            "ask_if_bad",
            with_schema(
                json!({"questions": [noul("a"), {"id": "b", "type": "noul", "ask_if": {"a": []}}]}),
            ),
        ),
        (
            "isolate_bad",
            with_schema(json!({"questions": [noul("a")], "isolate": "some"})),
        ),
        (
            "unknown_dependency",
            with_schema(json!({"questions": [{"id": "b", "type": "noul", "depends_on": ["zz"]}]})),
        ),
        (
            "ask_if_value",
            with_schema(
                json!({"questions": [noul("a"), {"id": "b", "type": "noul", "ask_if": {"a": ["maybe"]}}]}),
            ),
        ),
        (
            "cycle",
            with_schema(json!({"questions": [
            {"id": "a", "type": "noul", "depends_on": ["b"]},
            {"id": "b", "type": "noul", "depends_on": ["a"]}]})),
        ),
        (
            "samples_bad",
            with_schema(json!({"questions": [noul("a")], "samples": "many"})),
        ),
        (
            "ask_unknown",
            with_schema(json!({"questions": [noul("a")], "ask": ["zz"]})),
        ),
        (
            "ask_without_dependency",
            with_schema(
                json!({"questions": [noul("a"), {"id": "b", "type": "noul", "depends_on": ["a"]}], "ask": ["b"]}),
            ),
        ),
        (
            "chunk_rows_small",
            with_schema(json!({"questions": [noul("a")], "chunk_rows": 4})),
        ),
        (
            "chunk_prompt_bad",
            with_schema(json!({"questions": [noul("a")], "chunk_prompt": "mine"})),
        ),
        (
            "layout_bad",
            with_schema(json!({"questions": [noul("a")], "layout": "sideways"})),
        ),
        (
            "think_too_big",
            with_schema(json!({"questions": [noul("a")], "think": 5000})),
        ),
        (
            "steps_not_number",
            with_schema(json!({"questions": [noul("a")], "steps": "many"})),
        ),
        ("seed_not_integer", bad_seed),
        ("image_state", images),
    ]
}

/// The serving.md wording each message must start with.
fn expected_prefix(case: &str) -> &'static str {
    match case {
        "no_messages" | "one_message" | "three_messages" | "assistant_role" | "second_not_user" => {
            SHAPE
        }
        "system_not_json" | "user_prose" => PARSE,
        "schema_not_object" | "empty_questions" => "schema: needs a non-empty questions array",
        "too_many_questions" => "schema: at most 64 questions",
        "bad_id" => "question id 'a:b' must be non-empty, no ':' or newline",
        "duplicate_id" => "duplicate question id 'a'",
        "unknown_type" => "question 'a': unknown type 'banana'",
        "one_alternative" => "question 'pick': needs at least two alternatives",
        "too_many_alternatives" => "question 'pick': at most 300 alternatives",
        "depends_on_not_list" => "question 'b': depends_on must be a list of question ids",
        "ask_if_bad" => {
            "question 'b': ask_if must map a question id to a non-empty list of its answers"
        }
        "isolate_bad" => "schema: isolate must be \"auto\", \"noul\", \"none\" or \"all\"",
        "unknown_dependency" => "question 'b': depends on unknown question 'zz'",
        "ask_if_value" => "question 'b': ask_if values for 'a' must be among ['yes', 'no']",
        "cycle" => "schema: dependency cycle among a, b",
        "samples_bad" => "schema: samples must be a positive count or \"auto\"",
        "ask_unknown" => "schema: ask must list question ids from this schema",
        "ask_without_dependency" => "schema: ask names 'b' but not everything it depends on",
        "chunk_rows_small" => "schema: chunk_rows must be an integer of at least 8",
        "chunk_prompt_bad" => "schema: chunk_prompt must be \"shared\" or \"own\"",
        "layout_bad" => "schema: layout must be \"schema_first\" or \"document_first\"",
        "think_too_big" => "schema: think must be a thought budget in tokens, 0 to 4096",
        "steps_not_number" => "schema: steps must be",
        "seed_not_integer" => "`seed` must be an integer",
        "image_state" => {
            "images: this backend (scripted, model toy) has no vision and cannot read images"
        }
        other => panic!("no expectation for {other}"),
    }
}

#[tokio::test]
async fn every_validation_error_is_400_with_its_message() {
    let (app, backend) = app();
    let mut table = serde_json::Map::new();
    for (case, body) in error_cases() {
        let r = call(&app, post("/v1/chat/completions", &body)).await;
        // A backend without vision refuses images with 422 on every route:
        // the request is well formed, this server cannot read it.
        let (status, kind) = if case == "image_state" {
            (422, "validation_error")
        } else {
            (400, "invalid_request_error")
        };
        assert_eq!(r.status, status, "{case}: {}", r.text);
        assert_eq!(r.body["error"]["type"], kind, "{case}");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(expected_prefix(case)), "{case}: {msg}");
        table.insert(case.into(), json!(msg));
    }
    assert_eq!(backend.calls(), 0, "validation happens before any read");
    insta::assert_json_snapshot!("chat_errors", table);
}

#[tokio::test]
async fn unreadable_body_is_400_invalid_body() {
    let (app, _) = app();
    let r = call(
        &app,
        post_raw("/v1/chat/completions", "application/json", "{'a': 1}"),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["type"], "invalid_request_error");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid body: key must be a string"),
        "{}",
        r.text
    );
    let r = call(
        &app,
        post_raw("/v1/chat/completions", "application/json", ""),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("invalid body: "));
}

#[tokio::test]
async fn state_longer_than_the_context_is_400_on_chat() {
    let b =
        dgem_testkit::ScriptedBackend::with_context(64, dgem_testkit::scripts::favour("yes", 0.9));
    let app = dgem_server::router(common::state(b, common::config()));
    let long = json!({"text": "word ".repeat(200)});
    let r = call(&app, post("/v1/chat/completions", &chat(&triage(), &long))).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "invalid_request_error");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("context"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn backend_failure_is_502_server_error() {
    let (app, backend) = app();
    backend.fail_next(1);
    let r = call(
        &app,
        post("/v1/chat/completions", &chat(&triage(), &json!({"a": 1}))),
    )
    .await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"error": {"message": "model failure: scripted failure", "type": "server_error"}})
    );
    // The next call succeeds.
    let r = call(
        &app,
        post("/v1/chat/completions", &chat(&triage(), &json!({"a": 1}))),
    )
    .await;
    assert_eq!(r.status, 200);
}

/// Issue 16: fields with no effect on a readout are named in a reply header
/// (not dropped silently); `stream: true` answers server-sent events that
/// carry the same envelope; `/v1/models` lists the served model.
#[tokio::test]
async fn ignored_fields_are_named_stream_and_models() {
    let (app, _) = app();
    let mut body = chat(&triage(), &json!({"ticket": "want_billing"}));
    body["temperature"] = json!(0.2);
    body["max_tokens"] = json!(16);
    let r = call(&app, post("/v1/chat/completions", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.headers["x-dgem-ignored-fields"],
        "temperature, max_tokens"
    );

    let mut body = chat(&triage(), &json!({"ticket": "want_billing"}));
    body["stream"] = json!(true);
    let r = call(&app, post("/v1/chat/completions", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let data: Vec<&str> = r
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.len(), 3, "{}", r.text);
    assert_eq!(data[2], "[DONE]");
    let first: Value = serde_json::from_str(data[0]).unwrap();
    let content: Value =
        serde_json::from_str(first["choices"][0]["delta"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["answers"]["team"]["choice"], "billing");

    let r = call(&app, common::get("/v1/models")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["object"], "list");
    assert_eq!(r.body["data"][0]["object"], "model");
    assert!(r.body["data"][0]["id"].is_string());
}

/// Issue 15: the chat route's post-read extension keys. `temperature_by_type`
/// rescales (OpenAI's `temperature` stays a no-effect field),
/// `abstain_above` withholds, a cascade with no Stage-2 provider reports so
/// in the envelope's `cascade`; the policy's own `temperature` key is left to
/// the client, as the original structured server leaves it.
#[tokio::test]
async fn chat_extension_keys_run_after_the_read() {
    let (app, _) = app();
    let mut schema = triage();
    schema["temperature"] = json!(5.0);
    let mut body = chat(&schema, &json!({"ticket": "want_engineering want_yes"}));
    body["temperature_by_type"] = json!({"choice": 2.0});
    body["abstain_above"] = json!({"urgent": 0.0});
    body["cascade_mode"] = json!("entropy");
    body["temperature"] = json!(0.2);
    let r = call(&app, post("/v1/chat/completions", &body)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let env = envelope(&r.body);
    let team = &env["answers"]["team"];
    assert_eq!(team["temperature"], 2.0);
    assert_eq!(team["choice"], "engineering");
    assert!(
        team["confidence"].as_f64().unwrap() < 0.8,
        "flattened: {team}"
    );
    assert!(
        env["answers"]["urgent"].get("temperature").is_none(),
        "policy T not applied"
    );
    assert_eq!(env["answers"]["urgent"]["abstained"], true);
    assert!(env["cascade"]["error"]
        .as_str()
        .unwrap()
        .contains("configured"));
    assert_eq!(r.headers["x-dgem-ignored-fields"], "temperature");
    // Without extension keys the envelope is the structured server's, unchanged.
    let plain = call(
        &app,
        post(
            "/v1/chat/completions",
            &chat(&schema, &json!({"ticket": "want_yes"})),
        ),
    )
    .await;
    let env = envelope(&plain.body);
    assert!(env.get("cascade").is_none());
    assert!(env["answers"]["team"].get("temperature").is_none());
}

#[tokio::test]
async fn bad_chat_extension_keys_are_400_naming_them() {
    let (app, _) = app();
    for (key, value, needle) in [
        ("temperature_by_type", json!(40), "temperature_by_type"),
        ("abstain_below", json!({"nobody": 0.5}), "nobody"),
        ("cascade_mode", json!(3), "cascade_mode"),
    ] {
        let mut body = chat(&triage(), &json!({"ticket": "x y z"}));
        body[key] = value;
        let r = call(&app, post("/v1/chat/completions", &body)).await;
        assert_eq!(r.status, 400, "{key}: {}", r.text);
        assert_eq!(
            r.body["error"]["param"].as_str().unwrap().split('.').next(),
            Some(key)
        );
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{key}: {msg}");
    }
}

/// Issue 27 item 6: a user message that is a JSON string literal is the state
/// as sent, quotes included, as the original server puts it in the prompt
/// (the route used to strip them, so `"\"hello\""` was read as `hello`).
#[tokio::test]
async fn a_json_string_state_keeps_its_quotes_on_the_chat_route() {
    let b = dgem_testkit::ScriptedBackend::new(|ctx| {
        let quoted = ctx.prefix.contains("\"want_yes\"");
        let p_yes = if quoted { 0.9 } else { 0.1 };
        ctx.labels
            .iter()
            .map(|l| if l == "yes" { p_yes } else { 1.0 - p_yes })
            .collect()
    });
    let app = dgem_server::router(common::state(b, common::config()));
    let schema = json!({"questions": [{"id": "u", "type": "noul"}]});
    let r = call(
        &app,
        post("/v1/chat/completions", &chat(&schema, &json!("want_yes"))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let p = envelope(&r.body)["answers"]["u"]["probabilities"]["yes"]
        .as_f64()
        .unwrap();
    assert!((p - 0.9).abs() < 1e-6, "the quotes were lost: p(yes) {p}");
}

/// Issue 27 item 6: a `think` budget on an engine that cannot think was a 400
/// on the chat route (422 only on System One); it is a 422 naming `think` on
/// every route: the request is well formed, this backend cannot spend it. A
/// `think` out of range stays a 400 (`think_too_big` in the bad-schema table).
#[tokio::test]
async fn think_on_an_engine_that_cannot_think_is_422_on_the_chat_route() {
    let (app, _) = app();
    let schema = json!({"questions": [{"id": "u", "type": "noul"}], "think": 32});
    let r = call(
        &app,
        post("/v1/chat/completions", &chat(&schema, &json!({"t": "x"}))),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["error"]["param"], "think", "{}", r.text);
    assert!(r.text.contains(dgem_engine::CANNOT_THINK), "{}", r.text);
}
