//! In-process MCP client ↔ server over `tokio::io::duplex`, on the testkit's
//! scripted backend: tool list and schemas, decisions, and tool errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use dgem_core::schema::QuestionKind;
use dgem_mcp::{has_null_union, DecisionServer, TemplateDir};
use dgem_testkit::{scripts, ScriptedBackend};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::ServiceExt as _;
use serde_json::{json, Value};

fn templates() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

async fn connect(dir: PathBuf) -> RunningService<RoleClient, ()> {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let engine = Arc::new(dgem_testkit::engine(backend));
    let server = DecisionServer::new(engine, TemplateDir::new(dir));
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let _ = dgem_mcp::serve_transport(server, server_io).await;
    });
    ().serve(client_io).await.expect("client initializes")
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &'static str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
        .await
        .expect("a tool result, not a protocol error")
}

fn text_of(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn lists_five_tools_with_plain_schemas() {
    let client = connect(templates()).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "decide_custom_questions",
            "decide_policy",
            "get_health_and_gpu_status",
            "list_policy_templates",
            "warmup_gpu"
        ]
    );
    for t in &tools {
        let schema = t.schema_as_json_value();
        assert_eq!(schema["type"], "object", "{}: {schema}", t.name);
        assert!(
            !has_null_union(&schema),
            "{} has a nullable union: {schema}",
            t.name
        );
        let text = schema.to_string();
        assert!(!text.contains("\"null\""), "{}: {text}", t.name);
        assert!(!text.contains("$ref"), "{}: {text}", t.name);
    }
    let decide = tools.iter().find(|t| t.name == "decide_policy").unwrap();
    let schema = decide.schema_as_json_value();
    assert_eq!(schema["properties"]["template"]["type"], "string");
    assert_eq!(schema["properties"]["variables"]["type"], "object");
    let custom = tools
        .iter()
        .find(|t| t.name == "decide_custom_questions")
        .unwrap();
    let q = &custom.schema_as_json_value()["properties"]["questions"]["items"];
    assert_eq!(
        q["properties"]["type"]["enum"],
        json!(QuestionKind::ALL.map(QuestionKind::wire_name))
    );
    // No tool schema uses what Gemini-backed clients refuse.
    for t in &tools {
        let problems = dgem_mcp::schema_lint(&t.schema_as_json_value());
        assert!(problems.is_empty(), "{}: {problems:?}", t.name);
    }
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn decide_policy_on_support_triage() {
    let client = connect(templates()).await;
    let r = call(
        &client,
        "decide_policy",
        json!({"template": "support_triage", "variables": {"ticket": "I was charged twice, want_billing want_yes"}}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text_of(&r));
    let s = r.structured_content.clone().expect("structured content");
    assert_eq!(s["template"], "support_triage");
    let answers = s["answers"].as_object().expect("answers");
    assert_eq!(
        answers.keys().collect::<Vec<_>>(),
        ["urgent", "team", "sentiment"]
    );
    for (id, a) in answers {
        let sum: f64 = a["probabilities"]
            .as_object()
            .expect("probabilities")
            .values()
            .map(|p| p.as_f64().unwrap())
            .sum();
        assert!((sum - 1.0).abs() < 1e-6, "{id}: {sum}");
        let h = a["normalized_entropy"]
            .as_f64()
            .expect("normalized_entropy");
        assert!((0.0..=1.0 + 1e-9).contains(&h));
        assert!(a["confidence"].is_f64());
        assert!(a["entropy"].is_f64());
    }
    assert_eq!(answers["team"]["choice"], "billing");
    let max = s["max_normalized_entropy"].as_f64().expect("max");
    let expected = answers
        .values()
        .map(|a| a["normalized_entropy"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!((max - expected).abs() < 1e-12);
    assert!(s["most_hesitant_question"].is_string());
    assert!(s["elapsed_ms"].is_f64());
    let text = text_of(&r);
    assert!(text.contains("team: billing"), "{text}");
    assert!(text.contains("Maximum hesitation"), "{text}");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn decide_custom_questions_systemone_shape() {
    let client = connect(templates()).await;
    let r = call(
        &client,
        "decide_custom_questions",
        json!({
            "state": "The server is down want_engineering want_furious",
            "questions": {
                "urgent": {"type": "noul", "instructions": "Does it need someone today?"},
                "team": {"type": "choice", "instructions": "Which team?",
                         "criteria": {"billing": "money", "engineering": "outages"}},
                "mood": {"type": "score", "instructions": "How upset?", "levels": ["calm", "annoyed", "furious"]},
                "tone": {"type": "score", "criteria": ["calm", "furious"]}
            }
        }),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text_of(&r));
    let s = r.structured_content.expect("structured");
    assert_eq!(s["template"], "custom_questions");
    assert_eq!(s["answers"]["team"]["choice"], "engineering");
    assert_eq!(s["answers"]["mood"]["level"], "furious");
    assert_eq!(s["answers"]["tone"]["level"], "furious");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn bad_arguments_are_tool_errors() {
    let client = connect(templates()).await;
    let cases = [
        (
            "decide_policy",
            json!({"template": "no_such_policy"}),
            "template",
        ),
        (
            "decide_policy",
            json!({"template": "../etc/passwd"}),
            "template",
        ),
        (
            "decide_policy",
            json!({"template": "/etc/passwd"}),
            "template",
        ),
        ("decide_policy", json!({"template": 5}), "template"),
        ("decide_policy", json!({"variables": "ticket"}), "variables"),
        // Regression: a misspelled variable rendered the placeholder and decided.
        (
            "decide_policy",
            json!({"template": "support_triage", "variables": {"tikcet": "x"}}),
            "did you mean `ticket`?",
        ),
        (
            "decide_custom_questions",
            json!({"state": "x", "questions": {}}),
            "questions",
        ),
        (
            "decide_custom_questions",
            json!({"state": "x", "questions": {"q": {"type": "maybe"}}}),
            "questions.q.type",
        ),
        (
            "decide_custom_questions",
            json!({"state": "x", "questions": {"q": {"type": "choice"}}}),
            "questions",
        ),
        // Images: checked first, then refused by a model without vision
        // (never read as the JSON text of their parts).
        (
            "decide_custom_questions",
            json!({"state": "x", "questions": {"q": {"type": "noul"}},
                   "images": ["https://example.com/cat.png"]}),
            "images[0]: a data:image/... URL",
        ),
        (
            "decide_policy",
            json!({"template": "support_triage", "variables": {"ticket": "see the photo"},
                   "images": ["data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAACklEQVR4nGMAAQAABQABDQottAAAAABJRU5ErkJggg=="]}),
            "has no vision and cannot read images",
        ),
        // Regression (hostile run): a misspelled argument was dropped and the
        // decision made without it.
        (
            "decide_custom_questions",
            json!({"state": "x", "questions": {"q": {"type": "noul"}}, "imges": []}),
            "unknown argument `imges`; did you mean `images`?",
        ),
    ];
    for (tool, args, needle) in cases {
        let r = call(&client, tool, args.clone()).await;
        assert_eq!(r.is_error, Some(true), "{tool} {args}");
        let text = text_of(&r);
        assert!(text.contains(needle), "{tool} {args}: {text}");
    }
    // An unknown tool is a protocol error, -32602 (MCP spec, "Error Handling").
    let err = client
        .call_tool(
            CallToolRequestParams::new("no_such_tool").with_arguments(serde_json::Map::new()),
        )
        .await
        .expect_err("an unknown tool is a JSON-RPC error");
    let text = err.to_string();
    assert!(text.contains("unknown tool `no_such_tool`"), "{text}");
    assert!(text.contains("-32602") || text.contains("nvalid"), "{text}");
    // The session survives the errors.
    let ok = call(&client, "get_health_and_gpu_status", json!({})).await;
    assert_eq!(ok.is_error, Some(false));
    client.cancel().await.expect("close");
}

#[cfg(unix)]
#[tokio::test]
async fn symlink_outside_the_folder_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let target = outside.path().join("evil.json.tmpl");
    std::fs::copy(templates().join("support_triage.json.tmpl"), &target).expect("copy");
    std::os::unix::fs::symlink(&target, dir.path().join("evil.json.tmpl")).expect("symlink");
    std::fs::copy(
        templates().join("support_triage.json.tmpl"),
        dir.path().join("inside.json.tmpl"),
    )
    .expect("copy");
    let client = connect(dir.path().to_path_buf()).await;
    let r = call(&client, "decide_policy", json!({"template": "evil"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text_of(&r).contains("outside"), "{}", text_of(&r));
    let r = call(
        &client,
        "decide_policy",
        json!({"template": "inside", "variables": {"ticket": "refund me"}}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text_of(&r));
    // Regression (issue 12): no variables decided on the placeholder text.
    let r = call(&client, "decide_policy", json!({"template": "inside"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text_of(&r).contains("needs its state: give at least one of [ticket]"),
        "{}",
        text_of(&r)
    );
    client.cancel().await.expect("close");
}

/// Issue 27 item 6: a variable the template reads with no default, left
/// unset, rendered `null` into the state and was decided on. It is refused
/// now, naming it and the variables given, unless `allow_missing_vars`.
#[tokio::test]
async fn an_unset_variable_without_a_default_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("two_fields.json.tmpl"),
        r#"{"schema": {"questions": [{"id": "urgent", "type": "boolean"}]},
 "state": {"ticket": {{ .ticket | toJson }}, "customer": {{ .customer | toJson }}}}"#,
    )
    .expect("write template");
    let client = connect(dir.path().to_path_buf()).await;
    let args = json!({"template": "two_fields", "variables": {"ticket": "refund me"}});
    let r = call(&client, "decide_policy", args.clone()).await;
    assert_eq!(r.is_error, Some(true), "{}", text_of(&r));
    assert_eq!(
        text_of(&r),
        "variables: template `two_fields.json.tmpl` reads `customer`, which was not given and \
         has no `default` there, so the policy would be decided on a placeholder (<no value>, \
         or null through toJson); the variables given are [ticket]; give it in `variables`, or \
         set `allow_missing_vars: true` to decide on the placeholder"
    );
    let mut allowed = args;
    allowed["allow_missing_vars"] = json!(true);
    let r = call(&client, "decide_policy", allowed).await;
    assert_eq!(r.is_error, Some(false), "{}", text_of(&r));
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn catalog_health_and_warmup() {
    let client = connect(templates()).await;
    let r = call(&client, "list_policy_templates", json!({})).await;
    assert_eq!(r.is_error, Some(false), "{}", text_of(&r));
    let s = r.structured_content.expect("structured");
    let list = s["templates"].as_array().expect("templates");
    let triage = list
        .iter()
        .find(|t| t["name"] == "support_triage")
        .expect("support_triage listed");
    assert_eq!(triage["variables"], json!(["samples", "ticket"]));
    assert_eq!(
        triage["questions"][1],
        json!({"id": "team", "type": "choice"})
    );
    assert_eq!(s["count"].as_u64(), Some(list.len() as u64));

    let h = call(&client, "get_health_and_gpu_status", json!({})).await;
    let hs = h.structured_content.clone().expect("structured");
    assert_eq!(hs["engine"], "scripted");
    assert_eq!(hs["healthy"], true);
    assert_eq!(hs["gpu_available"], false);
    assert!(text_of(&h).contains("no GPU"));

    let w = call(&client, "warmup_gpu", json!({})).await;
    assert_eq!(w.is_error, Some(false), "{}", text_of(&w));
    let ws = w.structured_content.expect("structured");
    assert_eq!(ws["status"], "warm_and_ready");
    assert!(ws["elapsed_ms"].as_f64().expect("ms") >= 0.0);
    client.cancel().await.expect("close");
}

/// Issue 15: `decide_policy` takes the post-read arguments: temperature,
/// abstention and the cascade (here with no Stage-2 provider configured).
#[tokio::test]
async fn decide_policy_applies_temperature_abstention_and_cascade() {
    let client = connect(templates()).await;
    let r = call(
        &client,
        "decide_policy",
        json!({
            "template": "support_triage",
            "variables": {"ticket": "I was charged twice, want_billing want_yes"},
            "temperature": 2.0,
            "abstain_above": {"sentiment": 0.0},
            "cascade_mode": "entropy"
        }),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text_of(&r));
    let s = r.structured_content.clone().expect("structured content");
    assert_eq!(s["answers"]["team"]["temperature"], 2.0);
    assert_eq!(s["answers"]["sentiment"]["abstained"], true);
    assert!(s["answers"]["team"].get("abstained").is_none());
    assert!(s["cascade"]["error"]
        .as_str()
        .unwrap()
        .contains("configured"));
    let text = text_of(&r);
    assert!(text.contains("ABSTAINED"), "{text}");
    assert!(text.contains("Cascade (entropy)"), "{text}");
    let bad = call(
        &client,
        "decide_policy",
        json!({"template": "support_triage", "variables": {"ticket": "x y z"}, "temperature": 99}),
    )
    .await;
    assert_eq!(bad.is_error, Some(true));
    let msg = text_of(&bad);
    assert!(
        msg.contains("`temperature`") && msg.contains("0 to 20"),
        "{msg}"
    );
}

/// Issue 29: a server started where there is no templates folder (an MCP
/// desktop client starts `dgem mcp` in `$HOME`) lists and decides the
/// built-in policies, names no path of its own, and still refuses a call
/// without the policy's state.
#[tokio::test]
async fn a_missing_templates_folder_serves_the_built_in_policies() {
    let gone = PathBuf::from("/nonexistent/dgem-mcp/templates");
    let client = connect(gone).await;
    let r = call(&client, "list_policy_templates", json!({})).await;
    assert_eq!(r.is_error, Some(false), "{}", text_of(&r));
    assert!(!text_of(&r).contains("/nonexistent"), "{}", text_of(&r));
    let s = r.structured_content.expect("structured");
    assert!(!s.to_string().contains("/nonexistent"), "{s}");
    let names: Vec<&str> = s["templates"]
        .as_array()
        .expect("templates")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for n in ["support_triage", "code_review", "bench/intent_select"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let r = call(
        &client,
        "decide_policy",
        json!({"template": "support_triage", "variables": {"ticket": "refund me"}}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text_of(&r));
    let r = call(
        &client,
        "decide_policy",
        json!({"template": "support_triage"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text_of(&r).contains("needs its state: give at least one of [ticket]"),
        "{}",
        text_of(&r)
    );
    client.cancel().await.expect("close");
}
