//! The chat, `/api/decide` and MCP rows of `bad_inputs.rs` (builders in
//! `rows.rs`).

use serde_json::{json, Value};

use crate::rows::{
    api, api_questions, call, chat, chat_at, chat_body, chat_extra, chat_state, mcp, messages,
    names, one, post, q, raw, schema, with, STATE,
};
use crate::Row;

pub fn chat_rows() -> Vec<Row> {
    const CHAT: &str = "/v1/chat/completions";
    let ok = one(json!({})).to_string();
    let user = json!({"role": "user", "content": STATE});
    let system = json!({"role": "system", "content": ok});
    let image = json!([
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
        {"type": "text", "text": "look"}
    ]);
    let b_after_urgent = q(json!({"id": "b", "depends_on": ["urgent"]}));
    let two = |b: Value| schema(vec![q(json!({})), b], json!({}));
    vec![
        raw("chat_not_json", CHAT, "{").is(400, &["invalid body"]),
        raw("chat_empty_body", CHAT, "").is(400, &["invalid body"]),
        raw("chat_bad_utf8", CHAT, b"{\"model\": \"\xff\"}".to_vec()).is(400, &["utf-8"]),
        raw("chat_no_messages", CHAT, "{}").is(400, &["two messages"]),
        raw("chat_list_body", CHAT, "[]").is(400, &["two messages"]),
        raw("chat_deep_body", CHAT, "[".repeat(100_000)).is(400, &["recursion limit"]),
        raw(
            "chat_duplicate_body_key",
            CHAT,
            r#"{"model": "a", "model": "b"}"#,
        )
        .is(422, &["duplicate key `model`"]),
        raw("chat_multipart_no_boundary", CHAT, "x")
            .content_type("multipart/form-data")
            .is(400, &["boundary"]),
        messages("chat_messages_string", json!("hi")).is(400, &["two messages"]),
        messages("chat_one_message", json!([user])).is(400, &["two messages"]),
        messages("chat_three_messages", json!([system, user, user])).is(400, &["two messages"]),
        messages("chat_roles_swapped", json!([user, system])).is(400, &["system", "user"]),
        messages(
            "chat_role_assistant",
            json!([{"role": "assistant", "content": ok}, user]),
        )
        .is(400, &["system", "user"]),
        messages(
            "chat_content_number",
            json!([{"role": "system", "content": 5}, user]),
        )
        .is(400, &["schema"]),
        messages(
            "chat_image_unsupported",
            json!([system, {"role": "user", "content": image}]),
        )
        // A backend without vision: 422 on every route, as on systemone.
        .is(422, &["images", "cannot read images"]),
        post("chat_schema_not_json", CHAT, &chat_body("hello", STATE)).is(400, &["schema"]),
        post(
            "chat_deep_schema",
            CHAT,
            &chat_body(&"[".repeat(100_000), STATE),
        )
        .is(400, &["recursion limit"]),
        post(
            "chat_duplicate_schema_key",
            CHAT,
            &chat_body(r#"{"questions": [{"id": "a", "id": "b"}]}"#, STATE),
        )
        .is(422, &["schema", "duplicate key `id`"]),
        chat("chat_schema_list", &json!([])).is(400, &["questions", "a list"]),
        chat("chat_schema_empty", &json!({})).is(400, &["`questions` is missing"]),
        chat("chat_questions_empty", &json!({"questions": []})).is(400, &["empty list"]),
        chat("chat_questions_string", &json!({"questions": "x"})).is(400, &["a string"]),
        chat("chat_questions_map", &json!({"questions": {"u": {}}})).is(400, &["an object"]),
        chat(
            "chat_65_questions",
            &schema(
                (0..65).map(|i| q(json!({"id": format!("q{i}")}))).collect(),
                json!({}),
            ),
        )
        .is(400, &["at most 64 questions", "65"]),
        chat("chat_question_not_object", &json!({"questions": [1]})).is(400, &["questions[0]"]),
        chat("chat_id_missing", &json!({"questions": [{"type": "noul"}]}))
            .is(400, &["question id", "non-empty"]),
        chat("chat_id_object", &one(json!({"id": {}}))).is(400, &["question id", "string"]),
        chat("chat_id_colon", &one(json!({"id": "a:b"}))).is(400, &["'a:b'", "':'"]),
        chat("chat_id_space", &one(json!({"id": "my id"}))).is(400, &["'my id'", "'my_id'"]),
        chat("chat_id_tab", &one(json!({"id": "my\tid"}))).is(400, &[r"my\tid", "whitespace"]),
        chat("chat_id_nul", &one(json!({"id": "a\u{0}b"}))).is(400, &[r"a\x00b"]),
        chat("chat_id_zero_width", &one(json!({"id": "ur\u{200B}gent"})))
            .is(400, &["invisible", "7 characters"]),
        chat(
            "chat_id_byte_order_mark",
            &one(json!({"id": "\u{FEFF}urgent"})),
        )
        .is(400, &["invisible"]),
        chat("chat_id_soft_hyphen", &one(json!({"id": "ur\u{AD}gent"}))).is(400, &["invisible"]),
        chat("chat_id_bidi_override", &one(json!({"id": "a\u{202E}b"}))).is(400, &["invisible"]),
        chat(
            "chat_id_invisible_separator",
            &one(json!({"id": "a\u{2063}b"})),
        )
        .is(400, &["invisible"]),
        chat("chat_id_101_chars", &one(json!({"id": "a".repeat(101)})))
            .is(400, &["100 characters", "101"]),
        chat("chat_id_duplicate", &two(q(json!({})))).is(400, &["duplicate question id 'urgent'"]),
        chat("chat_type_missing", &json!({"questions": [{"id": "a"}]}))
            .is(400, &["`type` is missing"]),
        chat("chat_type_unknown", &one(json!({"type": "maybe"}))).is(400, &["'maybe'", "noul"]),
        chat("chat_type_number", &one(json!({"type": 5}))).is(400, &["type '5'"]),
        chat(
            "chat_choice_one_option",
            &one(json!({"type": "choice", "options": ["only"]})),
        )
        .is(400, &["at least two", "got 1"]),
        chat("chat_choice_no_options", &one(json!({"type": "choice"})))
            .is(400, &["at least two", "got 0"]),
        chat(
            "chat_choice_301_options",
            &one(json!({"type": "choice", "options": names(301)})),
        )
        .is(400, &["at most 300", "301"]),
        chat(
            "chat_options_not_list",
            &one(json!({"type": "choice", "options": "a,b"})),
        )
        .is(400, &["options must be a list"]),
        chat(
            "chat_option_without_name",
            &one(json!({"type": "choice", "options": [{"description": "d"}, "b"]})),
        )
        .is(400, &["options[0]", "`name`"]),
        chat(
            "chat_option_duplicate",
            &one(json!({"type": "choice", "options": ["a", "a"]})),
        )
        .is(400, &["unique", "'a'"]),
        chat(
            "chat_option_blank",
            &one(json!({"type": "choice", "options": ["a", "  "]})),
        )
        .is(400, &["alternative 1", "non-empty"]),
        chat(
            "chat_option_newline",
            &one(json!({"type": "choice", "options": ["a", "b\nc"]})),
        )
        .is(400, &["alternative 1", "one line"]),
        chat(
            "chat_score_one_level",
            &one(json!({"type": "score", "levels": ["low"]})),
        )
        .is(400, &["at least two"]),
        chat(
            "chat_score_27_levels",
            &one(json!({"type": "score", "levels": names(27)})),
        )
        .is(400, &["at most 26", "27"]),
        chat(
            "chat_levels_not_list",
            &one(json!({"type": "score", "levels": "low-high"})),
        )
        .is(400, &["levels must be a list"]),
        chat(
            "chat_score_duplicate_levels",
            &one(json!({"type": "score", "levels": ["low", "low"]})),
        )
        .is(400, &["unique", "'low'"]),
        chat("chat_criteria_list", &one(json!({"criteria": ["y", "n"]}))).is(400, &["criteria"]),
        chat(
            "chat_depends_on_string",
            &two(q(json!({"id": "b", "depends_on": "urgent"}))),
        )
        .is(400, &["'b'", "depends_on"]),
        chat(
            "chat_depends_on_unknown",
            &one(json!({"depends_on": ["zzz"]})),
        )
        .is(400, &["'zzz'"]),
        chat(
            "chat_depends_on_itself",
            &one(json!({"depends_on": ["urgent"]})),
        )
        .is(400, &["itself"]),
        chat(
            "chat_dependency_cycle",
            &schema(
                vec![q(json!({"depends_on": ["b"]})), b_after_urgent.clone()],
                json!({}),
            ),
        )
        .is(400, &["cycle", "urgent"]),
        chat(
            "chat_ask_if_not_list",
            &two(q(json!({"id": "b", "ask_if": {"urgent": "yes"}}))),
        )
        .is(400, &["ask_if"]),
        chat(
            "chat_ask_if_unknown_answer",
            &two(q(json!({"id": "b", "ask_if": {"urgent": ["maybe"]}}))),
        )
        .is(400, &["ask_if", "maybe"]),
        chat("chat_alone_string", &one(json!({"alone": "yes"}))).is(400, &["alone"]),
        chat(
            "chat_ask_missing_dependency",
            &schema(vec![q(json!({})), b_after_urgent], json!({"ask": ["b"]})),
        )
        .is(400, &["ask", "'urgent'"]),
        chat_extra("chat_seed_fraction", json!({"seed": 1.5})).is(400, &["`seed`", "1.5"]),
        chat_extra("chat_seed_word", json!({"seed": "abc"})).is(400, &["`seed`", "abc"]),
        chat_extra("chat_seed_object", json!({"seed": {}})).is(400, &["`seed`"]),
        chat_extra("chat_seed_huge", json!({"seed": 1e20})).is(400, &["`seed`"]),
        // Issue 16: OpenAI fields a decision cannot honour were ignored silently.
        chat_extra("chat_tools", json!({"tools": [{"type": "function"}]}))
            .is(400, &["`tools`", "choice"]),
        chat_extra(
            "chat_response_format",
            json!({"response_format": {"type": "json_object"}}),
        )
        .is(400, &["`response_format.type`", "json_schema"]),
        // Issue 16: a `json_schema` response format is a decision; a property
        // that is not one (free text, a nested object) is refused by path.
        chat_extra(
            "chat_response_format_free_text",
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "t",
                "schema": {"type": "object", "properties": {"why": {"type": "string"}}}}}}),
        )
        .is(400, &["properties.why", "free text", "enum"]),
        chat_extra(
            "chat_response_format_nested",
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "t",
                "schema": {"type": "object", "properties": {"x": {"type": "object"}}}}}}),
        )
        .is(400, &["properties.x", "nested object"]),
        chat_extra(
            "chat_response_format_no_schema",
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "t"}}}),
        )
        .is(400, &["`response_format.json_schema.schema` is missing"]),
        chat_extra("chat_logprobs", json!({"logprobs": true})).is(400, &["`logprobs`"]),
        chat_extra("chat_n_two", json!({"n": 2})).is(400, &["`n` must be 1"]),
        chat_extra("chat_unknown_field", json!({"temprature": 0.5}))
            .is(400, &["`temprature`", "model, messages, seed"]),
        chat_extra("chat_stream_word", json!({"stream": "yes"}))
            .is(400, &["`stream`", "true or false"]),
        raw(
            "chat_seed_out_of_range",
            CHAT,
            r#"{"seed": 1e400, "messages": []}"#,
        )
        .is(400, &["number out of range"]),
        chat_state("chat_state_empty", "").is(400, &["state", "nothing to decide on"]),
        chat_state("chat_state_blank", "   ").is(400, &["state", "nothing to decide on"]),
        chat_state("chat_state_empty_object", "{}").is(400, &["state", "nothing to decide on"]),
        chat_state("chat_state_null", "null").is(400, &["state", "nothing to decide on"]),
        chat_state("chat_state_empty_values", r#"{"ticket": ""}"#)
            .is(400, &["state", "nothing to decide on"]),
        chat_state("chat_state_not_json", "hello there").is(400, &["user", "state"]),
        chat_state("chat_duplicate_state_key", r#"{"a": 1, "a": 2}"#)
            .is(422, &["state", "duplicate key `a`"]),
        chat_state("chat_deep_state", &"[".repeat(100_000)).is(400, &["recursion limit"]),
        chat_state(
            "chat_state_too_long",
            &json!({"t": "word ".repeat(60_000)}).to_string(),
        )
        .is(400, &["state is", "bytes"]),
        raw("predict_no_messages", "/predict", "{}").is(400, &["two messages"]),
        chat_at(
            "raw_predict_no_questions",
            "/rawPredict",
            &json!({"questions": []}),
            STATE,
        )
        .is(400, &["questions"]),
        raw(
            "invoke_chat_bad_json",
            "/invoke/v1/chat/completions",
            "{nope",
        )
        .is(400, &["invalid body"]),
        chat_at(
            "invoke_predict_id_space",
            "/invoke/predict",
            &one(json!({"id": "my id"})),
            STATE,
        )
        .is(400, &["'my id'"]),
        chat_at(
            "invoke_raw_predict_state_empty",
            "/invoke/rawPredict",
            &one(json!({})),
            "{}",
        )
        .is(400, &["state", "nothing to decide on"]),
    ]
}

pub fn api_rows() -> Vec<Row> {
    let urgent = || json!([{"id": "urgent", "type": "noul", "question": "Urgent?"}]);
    let ticket = |t: &str| json!({"template": "support_triage", "variables": {"ticket": t}});
    let triage = "/api/decide/support_triage";
    vec![
        raw("api_not_json", "/api/decide", "{").is(400, &["json"]),
        raw("api_string_body", "/api/decide", r#""hello""#).is(400, &["json object"]),
        raw("api_list_body", "/api/decide", "[1]").is(400, &["json object"]),
        raw("api_bad_utf8", "/api/decide", b"{\"a\": \"\xff\"}".to_vec()).is(400, &["utf-8"]),
        raw(
            "api_duplicate_key",
            "/api/decide",
            r#"{"template": "support_triage", "template": "pr_risk"}"#,
        )
        .is(422, &["duplicate key `template`"]),
        raw(
            "api_duplicate_variable",
            "/api/decide",
            r#"{"variables": {"ticket": "a", "ticket": "b"}}"#,
        )
        .is(422, &["duplicate key `ticket`"]),
        raw("api_deep_body", "/api/decide", "[".repeat(100_000)).is(400, &["recursion limit"]),
        api("api_backend_number", json!({"backend": 5})).is(400, &["`backend`"]),
        api(
            "api_backend_unknown",
            with(ticket("x"), json!({"backend": "gpu-9"})),
        )
        .is(400, &["gpu-9", "local"]),
        api("api_backend_header_unknown", ticket("x"))
            .header("x-dgem-backend", "gpu-9")
            .is(400, &["gpu-9"]),
        api("api_seed_word", json!({"seed": "x"})).is(400, &["`seed`"]),
        api("api_seed_fraction", json!({"seed": 1.5})).is(400, &["`seed`", "1.5"]),
        api("api_samples_zero", json!({"samples": 0})).is(400, &["`samples`", "1 to 32"]),
        api("api_samples_33", json!({"samples": 33})).is(400, &["`samples`", "33"]),
        api("api_samples_negative", json!({"samples": -2})).is(400, &["`samples`", "-2"]),
        api(
            "api_template_and_questions",
            json!({"template": "support_triage", "questions": urgent(), "state": "x"}),
        )
        .is(400, &["`template`", "`questions`", "not both"]),
        api("api_template_number", json!({"template": 5})).is(400, &["`template`"]),
        api("api_template_unknown", json!({"template": "nope"}))
            .is(400, &["nope", "/api/templates"]),
        api(
            "api_template_traversal",
            json!({"template": "../Cargo.toml"}),
        )
        .is(400, &["`template`", ".."]),
        api("api_template_absolute", json!({"template": "/etc/passwd"})).is(400, &["absolute"]),
        api("api_variables_list", json!({"variables": [1]})).is(400, &["`variables`"]),
        api(
            "api_variable_misspelt",
            json!({"template": "support_triage", "variables": {"tikcet": "x"}}),
        )
        .is(400, &["tikcet", "did you mean `ticket`"]),
        post(
            "api_path_variable_misspelt",
            triage,
            &json!({"variables": {"tikcet": "x"}}),
        )
        .is(400, &["tikcet", "did you mean `ticket`"]),
        api("api_empty_object", json!({})).is(400, &["ticket"]),
        api(
            "api_variables_empty",
            json!({"template": "support_triage", "variables": {}}),
        )
        .is(400, &["ticket"]),
        api("api_ticket_blank", ticket("   ")).is(400, &["ticket"]),
        post(
            "api_path_unknown",
            "/api/decide/nope",
            &json!({"variables": {"ticket": "x"}}),
        )
        .is(400, &["nope"]),
        post(
            "api_path_traversal",
            "/api/decide/..%2FCargo.toml",
            &json!({}),
        )
        .is(400, &[".."]),
        api(
            "api_questions_without_state",
            json!({"questions": urgent()}),
        )
        .is(400, &["`state`", "required"]),
        api_questions("api_questions_empty", json!([]), json!("x")).is(400, &["questions"]),
        api_questions("api_questions_string", json!("urgent?"), json!("x")).is(400, &["questions"]),
        api_questions(
            "api_question_type_unknown",
            json!([{"id": "a", "type": "maybe"}]),
            json!("x"),
        )
        .is(400, &["questions[0].type", "maybe"]),
        api_questions(
            "api_question_id_space",
            json!([{"id": "my id", "type": "noul"}]),
            json!("x"),
        )
        .is(400, &["'my id'"]),
        api_questions(
            "api_question_id_zero_width",
            json!([{"id": "a\u{200B}b", "type": "noul"}]),
            json!("x"),
        )
        .is(400, &["invisible"]),
        api_questions(
            "api_question_id_101_chars",
            json!([{"id": "z".repeat(101), "type": "noul"}]),
            json!("x"),
        )
        .is(400, &["100 characters"]),
        api_questions(
            "api_choice_one_option",
            json!([{"id": "team", "type": "choice", "options": ["infra"]}]),
            json!("x"),
        )
        .is(400, &["'team'", "at least two"]),
        api_questions(
            "api_score_27_levels",
            json!([{"id": "sev", "type": "score", "levels": names(27)}]),
            json!("x"),
        )
        .is(400, &["at most 26"]),
        api_questions(
            "api_score_levels_string",
            json!([{"id": "sev", "type": "score", "levels": "low"}]),
            json!("x"),
        )
        .is(400, &["levels"]),
        api_questions(
            "api_question_ids_repeat",
            json!([{"id": "a", "type": "noul"}, {"id": "a", "type": "noul"}]),
            json!("x"),
        )
        .is(400, &["duplicate question id 'a'"]),
        api_questions("api_state_empty", urgent(), json!(""))
            .is(400, &["state", "nothing to decide on"]),
        api_questions("api_state_blank", urgent(), json!("   "))
            .is(400, &["state", "nothing to decide on"]),
        api_questions("api_state_empty_object", urgent(), json!({}))
            .is(400, &["state", "nothing to decide on"]),
        api_questions(
            "api_state_too_long",
            urgent(),
            json!("word ".repeat(60_000)),
        )
        .is(400, &["state is", "bytes"]),
    ]
}

pub fn mcp_rows() -> Vec<Row> {
    let rpc = |method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
    };
    let noul = || json!([{"id": "a", "type": "noul"}]);
    let custom = |state: Value| json!({"state": state, "questions": noul()});
    let triage = |vars: Value| json!({"template": "support_triage", "variables": vars});
    vec![
        mcp("mcp_not_json", "{").rpc(400, &[-32700], &[]),
        mcp("mcp_empty_body", "").rpc(400, &[-32700], &[]),
        mcp("mcp_deep_body", &"[".repeat(100_000)).rpc(400, &[-32700], &[]),
        mcp("mcp_empty_batch", "[]").rpc(400, &[-32600], &[]),
        mcp("mcp_not_json_rpc", r#"{"hello": 1}"#).rpc(400, &[-32600], &[]),
        mcp(
            "mcp_wrong_version",
            r#"{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}"#,
        )
        .rpc(400, &[-32600], &[]),
        mcp(
            "mcp_duplicate_key",
            r#"{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "tools/list"}"#,
        )
        .rpc(400, &[-32700, -32600], &["id"]),
        mcp("mcp_params_number", &rpc("tools/call", json!(5))).rpc(200, &[-32602], &["`params`"]),
        mcp("mcp_text_content_type", &rpc("tools/list", json!({})))
            .content_type("text/plain")
            .rpc(415, &[-32600], &["content-type", "application/json"]),
        mcp("mcp_unknown_method", &rpc("tools/explode", json!({}))).rpc(
            200,
            &[-32601],
            &["tools/explode"],
        ),
        mcp(
            "mcp_call_without_name",
            &rpc("tools/call", json!({"arguments": {}})),
        )
        .rpc(200, &[-32602], &["name"]),
        // An unknown tool is a protocol error (MCP spec): -32602, not a tool result.
        call("mcp_unknown_tool", "explode", json!({})).rpc(
            200,
            &[-32602],
            &["explode", "tools/list"],
        ),
        call(
            "mcp_seed_word",
            "decide_policy",
            with(triage(json!({"ticket": "x"})), json!({"seed": "abc"})),
        )
        .tool(&["`seed`", "abc"]),
        call(
            "mcp_variables_list",
            "decide_policy",
            json!({"variables": [1]}),
        )
        .tool(&["`variables`"]),
        call(
            "mcp_template_unknown",
            "decide_policy",
            json!({"template": "nope", "variables": {"ticket": "x"}}),
        )
        .tool(&["template", "nope"]),
        call(
            "mcp_template_traversal",
            "decide_policy",
            json!({"template": "../Cargo.toml"}),
        )
        .tool(&["template", ".."]),
        call(
            "mcp_variable_misspelt",
            "decide_policy",
            triage(json!({"tikcet": "x"})),
        )
        .tool(&["tikcet", "did you mean `ticket`"]),
        call("mcp_variables_empty", "decide_policy", triage(json!({}))).tool(&["ticket"]),
        call(
            "mcp_ticket_blank",
            "decide_policy",
            triage(json!({"ticket": "   "})),
        )
        .tool(&["ticket"]),
        call(
            "mcp_backend_unknown",
            "decide_policy",
            with(triage(json!({"ticket": "x"})), json!({"backend": "gpu"})),
        )
        .tool(&["`backend`", "gpu"]),
        call(
            "mcp_custom_without_state",
            "decide_custom_questions",
            json!({"questions": noul()}),
        )
        .tool(&["`state`"]),
        call(
            "mcp_custom_without_questions",
            "decide_custom_questions",
            json!({"state": "x"}),
        )
        .tool(&["`questions`"]),
        call(
            "mcp_custom_questions_empty",
            "decide_custom_questions",
            json!({"state": "x", "questions": []}),
        )
        .tool(&["questions", "non-empty"]),
        call(
            "mcp_custom_type_unknown",
            "decide_custom_questions",
            json!({"state": "x", "questions": [{"id": "a", "type": "maybe"}]}),
        )
        .tool(&["maybe"]),
        call(
            "mcp_custom_id_space",
            "decide_custom_questions",
            json!({"state": "x", "questions": [{"id": "my id", "type": "noul"}]}),
        )
        .tool(&["'my id'"]),
        call(
            "mcp_custom_choice_one_option",
            "decide_custom_questions",
            json!({"state": "x", "questions": [{"id": "t", "type": "choice", "options": ["a"]}]}),
        )
        .tool(&["at least two"]),
        call(
            "mcp_custom_state_empty",
            "decide_custom_questions",
            custom(json!("")),
        )
        .tool(&["state", "nothing to decide on"]),
        call(
            "mcp_custom_state_blank",
            "decide_custom_questions",
            custom(json!("  ")),
        )
        .tool(&["state", "nothing to decide on"]),
        call(
            "mcp_custom_state_object",
            "decide_custom_questions",
            custom(json!({})),
        )
        .tool(&["state", "nothing to decide on"]),
        call(
            "mcp_custom_seed_fraction",
            "decide_custom_questions",
            with(custom(json!("x")), json!({"seed": 1.5})),
        )
        .tool(&["`seed`"]),
    ]
}
