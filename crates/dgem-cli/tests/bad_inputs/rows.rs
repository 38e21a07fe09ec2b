//! The rows of `bad_inputs.rs` (routes, auth, limits, schema settings,
//! `/v1/systemone`, the gateway; `decide_rows.rs` has the chat, `/api/decide`
//! and MCP rows) and the builders both files use: one bad request each, with
//! the status it must get and words its error message must contain. The
//! needles are what the real binary was seen to answer where its answer was
//! right; where it was not (a 5xx, a 200 for a bad request, a message that
//! names nothing), the row states the right answer and fails until the server
//! gives it.

use reqwest::Method;
use serde_json::{json, Value};

use crate::{decide_rows, Row, KEY};

pub const STATE: &str = r#"{"ticket": "I was charged twice"}"#;
pub const BOUNDARY: &str = "dgemBadInputs";

pub fn bare(name: &'static str, method: Method, path: &str) -> Row {
    Row::new(name, method, path, None)
}

pub fn raw(name: &'static str, path: &str, body: impl Into<Vec<u8>>) -> Row {
    Row::new(name, Method::POST, path, Some(body.into()))
}

pub fn post(name: &'static str, path: &str, body: &Value) -> Row {
    raw(name, path, body.to_string())
}

/// `base` with the keys of the object `extra` added or replaced.
pub fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// The yes/no question `urgent`, with `extra` fields.
pub fn q(extra: Value) -> Value {
    with(json!({"id": "urgent", "type": "noul"}), extra)
}

/// A schema of `questions` with the schema-level `extra` fields.
pub fn schema(questions: Vec<Value>, extra: Value) -> Value {
    with(json!({ "questions": questions }), extra)
}

/// A schema of the one question `q(extra)`.
pub fn one(extra: Value) -> Value {
    schema(vec![q(extra)], json!({}))
}

pub fn chat_body(schema_text: &str, state: &str) -> Value {
    json!({"messages": [
        {"role": "system", "content": schema_text},
        {"role": "user", "content": state}
    ]})
}

/// A chat request at `path`: `schema` as the system message, `state` as the user's.
pub fn chat_at(name: &'static str, path: &str, schema: &Value, state: &str) -> Row {
    post(name, path, &chat_body(&schema.to_string(), state))
}

pub fn chat(name: &'static str, schema: &Value) -> Row {
    chat_at(name, "/v1/chat/completions", schema, STATE)
}

/// A chat request whose schema is one valid question plus the setting `extra`.
pub fn setting(name: &'static str, extra: Value) -> Row {
    chat(name, &schema(vec![q(json!({}))], extra))
}

pub fn chat_state(name: &'static str, state: &str) -> Row {
    chat_at(name, "/v1/chat/completions", &one(json!({})), state)
}

/// A valid chat request with the top-level `extra` fields.
pub fn chat_extra(name: &'static str, extra: Value) -> Row {
    let body = chat_body(&one(json!({})).to_string(), STATE);
    post(name, "/v1/chat/completions", &with(body, extra))
}

pub fn messages(name: &'static str, messages: Value) -> Row {
    post(
        name,
        "/v1/chat/completions",
        &json!({ "messages": messages }),
    )
}

pub fn so(name: &'static str, body: Value) -> Row {
    post(name, "/v1/systemone", &body)
}

/// A valid systemone body (one yes/no question) with the `extra` fields.
pub fn so_with(name: &'static str, extra: Value) -> Row {
    let base = json!({"state": "the build is red", "questions": {"urgent": {"type": "noul"}}});
    so(name, with(base, extra))
}

pub fn so_questions(name: &'static str, questions: Value) -> Row {
    so(
        name,
        json!({"state": "the build is red", "questions": questions}),
    )
}

/// A multipart `/v1/systemone` body of `(part name, content type, data)` parts.
pub fn so_multipart(name: &'static str, parts: &[(&str, &str, &str)]) -> Row {
    let mut body = String::new();
    for (part, ctype, data) in parts {
        body.push_str(&format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{part}\""
        ));
        if ctype.starts_with("image/") {
            body.push_str(&format!("; filename=\"{part}.png\""));
        }
        if !ctype.is_empty() {
            body.push_str(&format!("\r\nContent-Type: {ctype}"));
        }
        body.push_str(&format!("\r\n\r\n{data}\r\n"));
    }
    body.push_str(&format!("--{BOUNDARY}--\r\n"));
    raw(name, "/v1/systemone", body)
        .content_type(&format!("multipart/form-data; boundary={BOUNDARY}"))
}

pub fn api(name: &'static str, body: Value) -> Row {
    post(name, "/api/decide", &body)
}

pub fn api_questions(name: &'static str, questions: Value, state: Value) -> Row {
    api(name, json!({"questions": questions, "state": state}))
}

pub fn mcp(name: &'static str, body: &str) -> Row {
    raw(name, "/mcp", body)
}

pub fn call(name: &'static str, tool: &str, arguments: Value) -> Row {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
    mcp(name, &body.to_string())
}

/// `n` distinct option names.
pub fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("o{i}")).collect()
}

/// Every row for `dgem serve --studio` with `API_KEY` and `MAX_BODY_BYTES` set.
pub fn serve_rows() -> Vec<Row> {
    [
        route_rows(),
        decide_rows::chat_rows(),
        setting_rows(),
        systemone_rows(),
        decide_rows::api_rows(),
        decide_rows::mcp_rows(),
    ]
    .concat()
}

fn route_rows() -> Vec<Row> {
    use Method as M;
    // Over the table server's 400,000-byte limit.
    let oversize = |name: &'static str, path: &'static str| {
        bare(name, M::POST, path)
            .declares(450_000)
            .is(413, &["size limit"])
    };
    vec![
        bare("get_chat", M::GET, "/v1/chat/completions").not_allowed("POST"),
        bare("get_invoke_chat", M::GET, "/invoke/v1/chat/completions").not_allowed("POST"),
        bare("put_systemone", M::PUT, "/v1/systemone").not_allowed("POST"),
        bare("delete_predict", M::DELETE, "/predict").not_allowed("POST"),
        bare("patch_raw_predict", M::PATCH, "/rawPredict").not_allowed("POST"),
        bare("get_invoke_systemone", M::GET, "/invoke/v1/systemone").not_allowed("POST"),
        raw("post_health", "/health", "{}").not_allowed("GET, HEAD"),
        raw("post_ready", "/ready", "{}").not_allowed("GET, HEAD"),
        raw("post_metrics", "/metrics", "{}").not_allowed("GET, HEAD"),
        bare("delete_invoke_health", M::DELETE, "/invoke/health").not_allowed("GET, HEAD"),
        raw("post_studio_page", "/", "{}").not_allowed("GET, HEAD"),
        bare("get_api_decide", M::GET, "/api/decide").not_allowed("POST"),
        bare("get_api_decide_named", M::GET, "/api/decide/support_triage").not_allowed("POST"),
        raw("post_api_templates", "/api/templates", "{}").not_allowed("GET, HEAD"),
        raw("post_api_health", "/api/health", "{}").not_allowed("GET, HEAD"),
        bare("delete_api_backends", M::DELETE, "/api/backends").not_allowed("GET, HEAD"),
        bare("get_mcp", M::GET, "/mcp").not_allowed("POST"),
        bare("delete_mcp", M::DELETE, "/mcp").not_allowed("POST"),
        bare("get_unknown", M::GET, "/nope").is(404, &["unknown route"]),
        bare("get_v1_unknown", M::GET, "/v1/chat").is(404, &["unknown route"]),
        bare("get_api_unknown", M::GET, "/api/nope").is(404, &["unknown route"]),
        raw("post_unknown", "/v2/chat/completions", "{}").is(404, &["unknown route"]),
        raw("post_unknown_bad_json", "/v2/chat", "{").is(400, &["invalid body"]),
        raw("post_api_decide_slash", "/api/decide/", "{}").is(404, &["unknown route"]),
        raw("raw_route_removed", "/v1/raw/chat/completions", "{}").is(410, &["/v1/systemone"]),
        raw(
            "invoke_raw_removed",
            "/invoke/v1/raw/chat/completions",
            "{}",
        )
        .is(410, &["decisions"]),
        raw("auth_missing", "/v1/chat/completions", "{}")
            .no_key()
            .is(401, &["token"]),
        raw("auth_wrong_bearer", "/v1/chat/completions", "{}")
            .no_key()
            .header("authorization", "Bearer nope")
            .is(401, &["token"]),
        raw("auth_basic_scheme", "/v1/systemone", "{}")
            .no_key()
            .header("authorization", &format!("Basic {KEY}"))
            .is(401, &["token"]),
        raw("auth_empty_bearer", "/v1/systemone", "{}")
            .no_key()
            .header("authorization", "Bearer ")
            .is(401, &["token"]),
        raw("auth_key_prefix", "/predict", "{}")
            .no_key()
            .header("x-dgem-key", &KEY[..KEY.len() - 1])
            .is(401, &["token"]),
        raw("auth_missing_api", "/api/decide", "{}")
            .no_key()
            .is(401, &["token"]),
        raw("auth_missing_mcp", "/mcp", "{}")
            .no_key()
            .is(401, &["token"]),
        raw("auth_missing_unknown_route", "/nope", "{}")
            .no_key()
            .is(401, &["token"]),
        oversize("oversize_chat", "/v1/chat/completions"),
        oversize("oversize_systemone", "/v1/systemone"),
        oversize("oversize_api", "/api/decide"),
        oversize("oversize_mcp", "/mcp"),
        oversize("oversize_unknown_route", "/nope"),
    ]
}

/// Schema-level settings, on the chat route.
fn setting_rows() -> Vec<Row> {
    vec![
        setting("chat_isolate_bad", json!({"isolate": "sometimes"})).is(400, &["isolate"]),
        setting("chat_samples_zero", json!({"samples": 0})).is(400, &["samples", "got 0"]),
        setting("chat_samples_negative", json!({"samples": -1})).is(400, &["samples", "-1"]),
        setting("chat_samples_word", json!({"samples": "many"})).is(400, &["samples", "many"]),
        setting("chat_samples_fraction", json!({"samples": 1.5})).is(400, &["samples", "1.5"]),
        setting(
            "chat_auto_max_word",
            json!({"samples": "auto", "auto_max": "x"}),
        )
        .is(400, &["auto_max"]),
        setting(
            "chat_auto_threshold_word",
            json!({"samples": "auto", "auto_threshold": "hot"}),
        )
        .is(400, &["auto_threshold", "hot"]),
        setting("chat_ask_empty", json!({"ask": []})).is(400, &["ask", "empty list"]),
        setting("chat_ask_unknown", json!({"ask": ["nope"]})).is(400, &["ask", "nope"]),
        setting("chat_chunk_rows_small", json!({"chunk_rows": 4})).is(400, &["chunk_rows"]),
        setting("chat_chunk_prompt_bad", json!({"chunk_prompt": "both"}))
            .is(400, &["chunk_prompt", "both"]),
        setting("chat_sequential_string", json!({"sequential": "false"})).is(400, &["sequential"]),
        setting("chat_layout_bad", json!({"layout": "sideways"})).is(400, &["layout", "sideways"]),
        setting("chat_think_too_big", json!({"think": 5000})).is(400, &["think", "5000"]),
        setting("chat_think_boolean", json!({"think": true})).is(400, &["think", "true"]),
        setting("chat_steps_word", json!({"steps": "many"})).is(400, &["steps", "many"]),
    ]
}

fn systemone_rows() -> Vec<Row> {
    const SO: &str = "/v1/systemone";
    let request = json!({"state": "x", "questions": {"urgent": {"type": "noul"}}}).to_string();
    let request = request.as_str();
    let mut images = vec![("request", "", request)];
    images.extend((0..33).map(|_| ("img", "image/png", "PNG")));
    let noul = || json!({"urgent": {"type": "noul"}});
    let png = "data:image/png;base64,AA";
    let mut long_id = serde_json::Map::new();
    long_id.insert("q".repeat(101), json!({"type": "noul"}));
    let long_id = Value::Object(long_id);
    vec![
        raw("so_not_json", SO, r#"{"state""#).is(400, &["invalid body"]),
        raw("so_list_body", SO, "[1]").is(400, &["json object"]),
        raw(
            "so_duplicate_body_key",
            SO,
            r#"{"state": "a", "state": "b"}"#,
        )
        .is(422, &["duplicate key `state`"]),
        raw(
            "so_duplicate_question",
            SO,
            r#"{"state": "a", "questions": {"u": {"type": "noul"}, "u": {}}}"#,
        )
        .is(422, &["duplicate key `u`", "questions"]),
        raw("so_deep_body", SO, "{\"a\":".repeat(50_000)).is(400, &["recursion limit"]),
        so("so_no_questions", json!({"state": "x"})).is(422, &["questions"]),
        so_questions("so_questions_empty", json!({})).is(422, &["questions", "{}"]),
        so_questions("so_questions_string", json!("urgent?")).is(422, &["questions", "urgent?"]),
        so_questions("so_question_not_object", json!({"urgent": 5})).is(422, &["'urgent'"]),
        so_questions("so_type_unknown", json!({"urgent": {"type": "maybe"}})).is(422, &["'maybe'"]),
        so_questions("so_type_missing", json!({"urgent": {}})).is(422, &["'urgent'", "type"]),
        so_questions("so_choice_no_criteria", json!({"team": {"type": "choice"}}))
            .is(422, &["'team'", "criteria"]),
        so_questions(
            "so_choice_one_option",
            json!({"team": {"type": "choice", "criteria": {"infra": "servers"}}}),
        )
        .is(422, &["'team'", "at least two"]),
        so_questions("so_score_no_levels", json!({"sev": {"type": "score"}}))
            .is(422, &["'sev'", "levels"]),
        so_questions(
            "so_score_levels_map",
            json!({"sev": {"type": "score", "levels": {"a": 1}}}),
        )
        .is(422, &["'sev'", "levels"]),
        so_questions(
            "so_score_27_levels",
            json!({"sev": {"type": "score", "levels": names(27)}}),
        )
        .is(422, &["at most 26"]),
        so_questions(
            "so_noul_criteria_list",
            json!({"urgent": {"type": "noul", "criteria": ["y", "n"]}}),
        )
        .is(422, &["criteria"]),
        so_questions("so_id_space", json!({"my id": {"type": "noul"}})).is(422, &["'my id'"]),
        so_questions(
            "so_id_zero_width",
            json!({"ur\u{200B}gent": {"type": "noul"}}),
        )
        .is(422, &["invisible"]),
        so_questions("so_id_101_chars", long_id).is(422, &["100 characters"]),
        so_questions("so_id_colon", json!({"a:b": {"type": "noul"}})).is(422, &["'a:b'"]),
        so_questions("so_id_empty", json!({"": {"type": "noul"}})).is(422, &["`id`"]),
        so_questions("so_list_without_id", json!([{"type": "noul"}]))
            .is(422, &["questions[0]", "`id`"]),
        so("so_state_missing", json!({"questions": noul()})).is(422, &["state", "required"]),
        so("so_state_null", json!({"state": null, "questions": noul()})).is(422, &["state"]),
        so_with("so_state_empty", json!({"state": ""})).is(422, &["state", "nothing to decide on"]),
        so_with("so_state_blank", json!({"state": "   "})).is(422, &["nothing to decide on"]),
        so_with("so_state_empty_object", json!({"state": {}})).is(422, &["nothing to decide on"]),
        so_with("so_state_empty_list", json!({"state": []})).is(422, &["nothing to decide on"]),
        so_with("so_state_json_text_empty", json!({"state": "{}"}))
            .is(422, &["nothing to decide on"]),
        so_with("so_state_zero_width", json!({"state": "\u{200B}\u{200B}"}))
            .is(422, &["state", "nothing to decide on"]),
        so_with(
            "so_state_too_long",
            json!({"state": "word ".repeat(60_000)}),
        )
        .is(422, &["state is", "bytes"]),
        so_with("so_seed_word", json!({"seed": "abc"})).is(422, &["`seed`", "abc"]),
        so_with("so_seed_fraction", json!({"seed": 2.5})).is(422, &["`seed`", "2.5"]),
        so_with("so_samples_zero", json!({"samples": 0})).is(422, &["samples"]),
        so_with("so_samples_word", json!({"samples": "lots"})).is(422, &["samples", "lots"]),
        so_with("so_layout_bad", json!({"layout": "sideways"})).is(422, &["layout"]),
        so_with("so_isolate_number", json!({"isolate": 3})).is(422, &["isolate"]),
        so_with("so_steps_list", json!({"steps": [1]})).is(422, &["steps"]),
        so_with("so_think_negative", json!({"think": -1})).is(422, &["think", "-1"]),
        so_with("so_images_not_list", json!({"images": "pic"})).is(422, &["images"]),
        so_with(
            "so_image_url_not_data",
            json!({"images": ["http://x/y.png"]}),
        )
        .is(422, &["images[0]"]),
        so_with(
            "so_image_not_image_type",
            json!({"images": [{"content_type": "text/plain", "base64": "AA"}]}),
        )
        .is(422, &["images[0]"]),
        so_with("so_images_unsupported", json!({"images": [png]}))
            .is(422, &["images", "cannot read images"]),
        so_with(
            "so_state_image_parts",
            json!({"state": [{"type": "image_url", "image_url": {"url": png}}]}),
        )
        .is(422, &["images"]),
        so_multipart("so_multipart_no_request", &[("img", "image/png", "PNG")])
            .is(400, &["part named request"]),
        so_multipart(
            "so_multipart_text_part",
            &[("request", "", request), ("notes", "text/plain", "hi")],
        )
        .is(400, &["'notes'"]),
        so_multipart("so_multipart_bad_json", &[("request", "", "{oops")])
            .is(400, &["invalid body"]),
        so_multipart(
            "so_multipart_duplicate_key",
            &[("request", "", r#"{"state": "a", "state": "b"}"#)],
        )
        .is(422, &["duplicate key `state`"]),
        raw("so_multipart_no_boundary", SO, "x")
            .content_type("multipart/form-data")
            .is(400, &["boundary"]),
        raw(
            "so_multipart_truncated",
            SO,
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{{"),
        )
        .content_type(&format!("multipart/form-data; boundary={BOUNDARY}"))
        .is(400, &["request", "incomplete"]),
        so_multipart(
            "so_multipart_image_unsupported",
            &[("request", "", request), ("img", "image/png", "PNG")],
        )
        .is(422, &["images"]),
        so_multipart("so_multipart_33_images", &images).is(400, &["32 image parts"]),
        post(
            "so_invoke_state_missing",
            "/invoke/v1/systemone",
            &json!({"questions": noul()}),
        )
        .is(422, &["state"]),
    ]
}

/// Rows for `dgem gateway` in front of a `dgem serve` (both with `API_KEY`).
pub fn gateway_rows() -> Vec<Row> {
    use Method as M;
    let noul = || json!({"urgent": {"type": "noul"}});
    vec![
        raw("gw_api_not_json", "/api/decide", "{").is(400, &["json"]),
        api("gw_api_template_unknown", json!({"template": "nope"})).is(400, &["nope"]),
        api(
            "gw_api_backend_unknown",
            json!({"backend": "gpu-9", "variables": {"ticket": "x"}}),
        )
        .is(400, &["gpu-9", "local"]),
        api_questions(
            "gw_api_question_id_space",
            json!([{"id": "my id", "type": "noul"}]),
            json!("x"),
        )
        .is(400, &["'my id'"]),
        api_questions(
            "gw_api_state_blank",
            json!([{"id": "a", "type": "noul"}]),
            json!("  "),
        )
        .is(400, &["state", "nothing to decide on"]),
        chat("gw_chat_no_questions", &json!({"questions": []})).is(400, &["questions"]),
        raw("gw_chat_not_json", "/v1/chat/completions", "{").is(400, &["invalid body"]),
        so("gw_systemone_no_state", json!({"questions": noul()})).is(422, &["state", "required"]),
        raw(
            "gw_systemone_duplicate_key",
            "/v1/systemone",
            r#"{"state": "a", "state": "b"}"#,
        )
        .is(422, &["duplicate key `state`"]),
        bare("gw_get_chat", M::GET, "/v1/chat/completions").not_allowed("POST"),
        bare("gw_get_api_decide", M::GET, "/api/decide").not_allowed("POST"),
        raw("gw_post_health", "/health", "{}").not_allowed("GET, HEAD"),
        bare("gw_get_unknown", M::GET, "/nope").is(404, &["unknown route"]),
        // The Vertex alias is routed to the replica like the chat route.
        raw("gw_post_predict", "/predict", "{}").is(400, &["exactly two messages"]),
        raw("gw_auth_missing", "/api/decide", "{}")
            .no_key()
            .is(401, &["token"]),
        mcp("gw_mcp_not_json", "{").rpc(400, &[-32700], &[]),
        call("gw_mcp_unknown_tool", "explode", json!({})).rpc(200, &[-32602], &["explode"]),
    ]
}
