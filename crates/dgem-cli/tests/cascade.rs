//! Issue 15 end to end through the real binary: `dgem decide` on the
//! embedded model (Stage 1) escalates hesitant answers to a local fake
//! OpenAI-compatible server (Stage 2), writes its answers back, applies the
//! temperature and abstains where asked. The fake checks the request it gets.

#![allow(clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

mod common;
use common::{model, root, stderr};

/// One request the fake received: its `Authorization` header and JSON body.
type Received = (Option<String>, Value);

#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<Received>>>,
}

async fn chat(
    State(seen): State<Seen>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap_or_default().to_string());
    seen.requests.lock().unwrap().push((auth, body));
    let content = json!({
        "urgent": {"decision": "no", "confidence": 0.9, "explanation": "a refund can wait a day\n* team: forged line\u{1b}[31m"},
        "team": {"decision": "billing", "confidence": 0.97, "explanation": "a duplicate charge"},
        "sentiment": {"decision": "livid", "confidence": 0.8, "explanation": "not a level"}
    });
    Json(json!({
        "id": "x", "object": "chat.completion", "model": "fake-large",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content.to_string()}}]
    }))
}

/// A fake Stage 2 on a thread of its own; returns its base URL.
fn fake_stage2(seen: Seen) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let app = Router::new()
                .route("/v1/chat/completions", post(chat))
                .with_state(seen);
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{}/v1", rx.recv().unwrap())
}

fn decide(model: &str, base: &str, extra: &[&str]) -> std::process::Output {
    let provider = format!("openai:{base}");
    let mut args = vec![
        "decide",
        "-t",
        "support_triage",
        "-v",
        "ticket=I was charged twice for my renewal, please refund the duplicate",
        "--model",
        model,
        "--cascade",
        "entropy",
        "--cascade-threshold",
        "0.01",
        "--cascade-model",
        "fake-large",
        "--cascade-provider",
        &provider,
    ];
    args.extend_from_slice(extra);
    std::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(root())
        .args(&args)
        .env("DGEM_CASCADE_API_KEY", "test-key-123")
        .env_remove("DGEM_CASCADE_PROVIDER")
        .output()
        .expect("run dgem")
}

#[test]
fn decide_escalates_to_an_openai_compatible_stage2_and_writes_back() {
    let Some(model) = model() else { return };
    let seen = Seen::default();
    let base = fake_stage2(seen.clone());
    let o = decide(&model, &base, &["--json", "--abstain-below", "0.85"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).expect("json");
    // What Stage 2 received: the key, the model, a strict JSON schema whose
    // enums are each question's allowed values, and the ticket in the prompt.
    let requests = seen.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "one call for every escalated answer");
    let (auth, req) = &requests[0];
    assert_eq!(auth.as_deref(), Some("Bearer test-key-123"));
    assert_eq!(req["model"], "fake-large");
    assert_eq!(req["temperature"], 0);
    let schema = &req["response_format"]["json_schema"]["schema"];
    assert_eq!(req["response_format"]["type"], "json_schema");
    assert_eq!(
        schema["properties"]["team"]["properties"]["decision"]["enum"],
        json!(["billing", "support", "engineering"])
    );
    assert_eq!(
        schema["properties"]["urgent"]["properties"]["decision"]["enum"],
        json!(["yes", "no"])
    );
    let prompt = req["messages"][0]["content"].as_str().expect("text prompt");
    assert!(prompt.contains("charged twice"), "{prompt}");
    // Write-back: Stage-2 answers with their confidence; Stage-1 probabilities kept.
    let urgent = &out["answers"]["urgent"];
    assert_eq!(urgent["label"], "no");
    assert_eq!(urgent["confidence"], 0.9);
    assert!((urgent["noul"].as_f64().unwrap() - 0.1).abs() < 1e-12);
    assert_eq!(urgent["resolved_by"], "fake-large");
    assert_eq!(out["answers"]["team"]["choice"], "billing");
    assert!(out["answers"]["team"].get("abstained").is_none());
    // An answer outside the allowed values is refused and reported; the
    // Stage-1 answer stays and, under `--abstain-below 0.85`, is withheld
    // because the 270M model is far from 85% sure.
    let sentiment = &out["answers"]["sentiment"];
    assert!(sentiment.get("resolved_by").is_none());
    let slot = &out["cascade"]["slots"]["sentiment"];
    assert!(slot["error"].as_str().unwrap().contains("livid"), "{slot}");
    assert_eq!(sentiment["abstained"], true, "{sentiment}");
    let c = &out["cascade"];
    assert_eq!(c["escalated_count"], 3);
    assert_eq!(c["model"], "fake-large");
    assert_eq!(c["error"], "");
    assert!(c["slots"]["team"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("entropy (H="));
}

#[test]
fn decide_table_marks_stage2_and_abstained_answers() {
    let Some(model) = model() else { return };
    let base = fake_stage2(Seen::default());
    let o = decide(&model, &base, &["--abstain-below", "0.85"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("billing*"), "{text}");
    // Regression: Stage-2 text went to the terminal raw, so a steered
    // explanation could forge table lines and recolour the terminal.
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("* team: forged")),
        "{text}"
    );
    assert!(
        text.contains("* team: answered by stage 2 (fake-large"),
        "{text}"
    );
    assert!(
        text.contains("? sentiment: abstained (cascade failed)"),
        "{text}"
    );
    assert!(
        text.contains("cascade: escalated 3 of 3 answers to fake-large"),
        "{text}"
    );
}

#[test]
fn decide_refuses_bad_post_read_flags_naming_them() {
    for (args, needle) in [
        (vec!["--temperature", "50"], "`--temperature`"),
        (vec!["--abstain-above", "{\"tem\": 0.5}"], "tem"),
        (vec!["--cascade", "sometimes"], "`--cascade`"),
        (
            vec!["--cascade", "on_miss", "--expect", "urgent"],
            "QUESTION=VALUE",
        ),
        (
            vec![
                "--cascade",
                "entropy",
                "--cascade-provider",
                "carrier-pigeon:x",
            ],
            "`--cascade-provider`",
        ),
        // Regression: `inf` became JSON null, i.e. the default gate.
        (
            vec!["--cascade", "entropy", "--cascade-threshold", "inf"],
            "finite",
        ),
        (
            vec!["--cascade", "on_miss", "--expect", "team=bogus"],
            "billing, support, engineering",
        ),
    ] {
        let mut all = vec!["decide", "-t", "support_triage", "-v", "ticket=hi there"];
        all.extend(args);
        let o = common::dgem(&all, None);
        assert_eq!(o.status.code(), Some(1), "{all:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{all:?}: {}", stderr(&o));
    }
}

/// Taxonomy expansion through the binary: the catch-all is read as an
/// option, and the hesitant `team` answer gets a (placeholder) proposal.
#[test]
fn decide_suggests_a_new_option_for_a_hesitant_choice() {
    let Some(model) = model() else { return };
    let run = |extra: &[&str]| {
        let mut args = vec![
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=Our office plants keep dying, can you help?",
            "--model",
            &model,
            "--suggest-expansions",
        ];
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
            .current_dir(root())
            .args(&args)
            .env_remove("DGEM_CASCADE_PROVIDER")
            .output()
            .expect("run dgem")
    };
    let o = run(&["--json"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(out["answers"]["team"]["probabilities"]["other_unclassified"].is_f64());
    let s = out["suggested_expansions"]
        .as_array()
        .expect("list")
        .iter()
        .find(|s| s["question_id"] == "team")
        .expect("the 270M model hesitates on `team`");
    assert_eq!(s["source"], "fallback");
    assert!(
        s["trigger_reason"]
            .as_str()
            .unwrap()
            .contains("nats >= 0.35")
            || s["trigger_reason"]
                .as_str()
                .unwrap()
                .starts_with("selected catch-all")
    );
    let table = run(&[]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("SUGGESTED TAXONOMY EXPANSIONS:"), "{text}");
    assert!(text.contains("questions[id=\"team\"].options"), "{text}");
}

/// `vertex` takes its token the way the gateway does; with no credentials
/// anywhere the cascade reports that and the Stage-1 answers stand.
#[test]
fn vertex_without_credentials_reports_it_and_keeps_stage1() {
    let Some(model) = model() else { return };
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(root())
        .args([
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=I was charged twice",
            "--model",
            &model,
            "--cascade",
            "entropy",
            "--cascade-provider",
            "vertex:test-project",
            "--json",
        ])
        .env_remove("GOOGLE_OAUTH_ACCESS_TOKEN")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env("GCE_METADATA_HOST", "127.0.0.1:9")
        .env("PATH", "/nonexistent")
        .output()
        .expect("run dgem");
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).expect("json");
    let err = out["cascade"]["error"].as_str().unwrap();
    assert!(err.contains("Google credentials"), "{err}");
    assert!(out["answers"]["team"].get("resolved_by").is_none());
}

/// Regression: a provider spec was built (and a GGUF loaded) even for a
/// decision that asks for no cascade, so an exported DGEM_CASCADE_PROVIDER
/// broke every plain `decide`.
#[test]
fn an_unused_provider_spec_is_not_loaded() {
    let Some(model) = model() else { return };
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(root())
        .args([
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=hi there",
            "--model",
            &model,
            "--cascade-provider",
            "gguf:/nope",
        ])
        .output()
        .expect("run dgem");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `--cascade` with no provider read the state, printed "escalated 3 of 3
/// answers to stage 2" and exited 0 with the Stage-1 answers (found by a
/// black-box run). It is refused before the read, naming the flags.
#[test]
fn a_cascade_without_a_provider_is_refused_before_the_read() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(root())
        .args([
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=charged twice",
            "--cascade",
            "entropy",
            "--model",
            "/nonexistent/never-loaded.gguf",
        ])
        .env_remove("DGEM_CASCADE_PROVIDER")
        .output()
        .expect("run dgem");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("`--cascade` needs a Stage-2 provider: `--cascade-provider")
            && err.contains("Given: none"),
        "{err}"
    );
}
