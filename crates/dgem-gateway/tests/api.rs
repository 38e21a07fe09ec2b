//! The `/api/*` contract over one in-process decider (`local_api`): catalog,
//! decisions from templates and ad-hoc questions, health, backends, errors and
//! path traversal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::StatusCode;
use common::send;
use dgem_mcp::TemplateDir;
use dgem_testkit::{scripts, ScriptedBackend};
use serde_json::json;

fn templates() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

fn app() -> axum::Router {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let engine = Arc::new(dgem_testkit::engine(backend));
    dgem_gateway::local_api(engine, TemplateDir::new(templates()))
}

#[tokio::test]
async fn catalog_lists_core_and_subfolder_templates() {
    let (status, _, body) = send(&app(), "GET", "/api/templates", &[], None).await;
    assert_eq!(status, StatusCode::OK);
    let list = body["templates"].as_array().unwrap();
    assert_eq!(body["count"].as_u64().unwrap() as usize, list.len());
    let triage = list
        .iter()
        .find(|t| t["id"] == "support_triage")
        .expect("support_triage listed");
    assert_eq!(triage["category"], "core");
    assert_eq!(triage["name"], "support_triage");
    assert_eq!(triage["variables"], json!(["samples", "ticket"]));
    assert!(triage["sample_vars"]["ticket"]
        .as_str()
        .unwrap()
        .contains("charged twice"));
    assert!(triage["description"]
        .as_str()
        .unwrap()
        .starts_with("Route an incoming customer ticket"));
    assert_eq!(
        triage["questions"],
        json!([
            {"id": "urgent", "type": "boolean", "options": ["yes", "no"]},
            {"id": "team", "type": "choice", "options": ["billing", "support", "engineering"]},
            {"id": "sentiment", "type": "score", "options": ["calm", "annoyed", "frustrated", "furious"]}
        ])
    );
    let bench = list
        .iter()
        .find(|t| t["id"] == "bench/intent_select")
        .expect("subfolder listed");
    assert_eq!(bench["category"], "bench");
}

#[tokio::test]
async fn decides_a_template_with_the_full_reply() {
    let body = json!({"variables": {"ticket": "I was charged twice"}, "seed": 42});
    let (status, used, r) = send(
        &app(),
        "POST",
        "/api/decide/support_triage",
        &[],
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(used.as_deref(), Some("local"));
    assert_eq!(r["template"], "support_triage");
    assert_eq!(r["backend_target"], "local");
    assert_eq!(r["upstream_url"], "in-process");
    assert_eq!(r["warmup_attempts"], 1);
    assert_eq!(r["answers"], r["decision"]["answers"]);
    let urgent = &r["answers"]["urgent"];
    let p_yes = urgent["probabilities"]["yes"].as_f64().unwrap();
    let p_no = urgent["probabilities"]["no"].as_f64().unwrap();
    assert!((p_yes + p_no - 1.0).abs() < 1e-9);
    assert!(urgent["normalized_entropy"].as_f64().unwrap() <= 1.0);
    let max_h = r["max_entropy"].as_f64().unwrap();
    let team_h = r["answers"]["team"]["entropy"].as_f64().unwrap();
    assert!(max_h >= team_h && max_h > 0.0);
    for k in ["queue_ms", "forward_ms", "total_ms"] {
        assert!(
            r["diagnostics"]["timing"][k].is_number(),
            "timing.{k} missing"
        );
    }
    assert!(
        r["wall_time_ms"].as_f64().unwrap() >= r["gpu_forward_ms"].as_f64().unwrap() - 1e-6
            || r["cold_start_wait_ms"].as_f64().unwrap() >= 0.0
    );
}

#[tokio::test]
async fn decides_ad_hoc_questions_on_plain_decide() {
    let body = json!({"state": "The checkout page returns 500 for every user.",
        "questions": [{"id": "outage", "type": "boolean", "question": "Is this an outage?"},
                      {"id": "team", "type": "choice", "question": "Who owns it?", "options": ["web", "db"]}]});
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["template"], "custom_questions");
    let team = r["answers"]["team"]["probabilities"].as_object().unwrap();
    assert_eq!(team.keys().collect::<Vec<_>>(), ["web", "db"]);
}

#[tokio::test]
async fn errors_are_400_with_a_named_field() {
    let app = app();
    let cases = [
        (
            "/api/decide",
            Some(json!({"template": "nope"})),
            "`template` `nope`",
        ),
        (
            "/api/decide/../../Cargo.toml",
            Some(json!({})),
            "`template`",
        ),
        (
            "/api/decide",
            Some(json!({"template": "/etc/passwd"})),
            "absolute path",
        ),
        (
            "/api/decide",
            Some(json!({"template": "../README"})),
            "no `..`",
        ),
        (
            "/api/decide",
            Some(json!({"backend": "vertex"})),
            "backend `vertex` is not available on this gateway; allowed: [local]",
        ),
        (
            "/api/decide",
            Some(json!({"samples": 99})),
            "`samples` must be an integer from 1 to 32. Given: 99",
        ),
    ];
    for (uri, body, want) in cases {
        let (status, _, r) = send(&app, "POST", uri, &[], body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {r}");
        let msg = r["error"].as_str().unwrap();
        assert!(msg.contains(want), "{msg} !~ {want}");
    }
    let (status, _, r) = send(
        &app,
        "POST",
        "/api/decide",
        &[("x-dgem-backend", "cloudrun")],
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(r["error"].as_str().unwrap().contains("`cloudrun`"));
}

#[tokio::test]
async fn health_and_backends() {
    let app = app();
    let (status, _, h) = send(&app, "GET", "/api/health", &[], None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h["status"], "ok");
    assert_eq!(h["default_backend"], "local");
    assert_eq!(
        h["backends"],
        json!([{"name": "local", "kind": "local", "url": "in-process", "phase": "ready", "ready": true, "breaker": "closed"}])
    );
    let (_, _, b) = send(&app, "GET", "/api/backends", &[], None).await;
    assert_eq!(b, json!({"default": "local", "available": ["local"]}));
}

#[tokio::test]
async fn symlink_out_of_the_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.json.tmpl");
    std::fs::copy(templates().join("support_triage.json.tmpl"), &secret).unwrap();
    std::os::unix::fs::symlink(&secret, dir.path().join("leak.json.tmpl")).unwrap();
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let engine = Arc::new(dgem_testkit::engine(backend));
    let app = dgem_gateway::local_api(engine, TemplateDir::new(dir.path()));
    let (status, _, r) = send(&app, "POST", "/api/decide/leak", &[], Some(json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("outside the templates folder"),
        "{r}"
    );
}
