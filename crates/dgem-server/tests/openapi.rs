//! `GET /openapi.json` (issue 16, item 6): an OpenAPI 3.1 document whose
//! paths are the server's routes (each documented path answers on the real
//! router; each route is documented) and whose request shapes list exactly
//! the top-level fields the handlers read. When `openapi-spec-validator` is
//! importable (always under CI) the document is also checked against the
//! OpenAPI 3.1 schema by that independent validator.
#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::process::Stdio;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use common::{call, config, state};
use dgem_engine::templates::TemplateDir;
use dgem_server::openapi::{self, properties_of};
use serde_json::Value;

fn app() -> axum::Router {
    let backend = common::backend();
    let api = dgem_server::api::local_routes(
        Arc::new(dgem_testkit::engine(backend.clone())),
        dgem_service::Service::new(dgem_service::Catalogue::new(TemplateDir::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../templates"
        )))),
    );
    dgem_server::router_with(state(backend, config()), api)
}

async fn document() -> Value {
    let r = call(&app(), common::get("/openapi.json")).await;
    assert_eq!(r.status, StatusCode::OK);
    r.body
}

/// Routes mounted by other crates (`dgem-mcp`, `dgem-studio`) in `dgem serve`.
const MOUNTED_ELSEWHERE: &[&str] = &["/mcp", "/studio"];

#[tokio::test]
async fn the_document_is_openapi_3_1_and_every_path_answers() {
    let doc = document().await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    let app = app();
    let mut checked = 0;
    for (path, item) in paths {
        if MOUNTED_ELSEWHERE.contains(&path.as_str()) {
            continue;
        }
        let concrete = path.replace("{template}", "support_triage");
        for method in item.as_object().unwrap().keys() {
            let req = match method.as_str() {
                "get" => common::get(&concrete),
                "post" => Request::post(&concrete)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from("{}"))
                    .unwrap(),
                other => panic!("{path}: unexpected method {other}"),
            };
            let r = call(&app, req).await;
            // Not the router's 404 for an unknown route (a 404 naming a
            // missing template would say so in its message).
            let unrouted = r.status == StatusCode::NOT_FOUND && r.text.contains("unknown route");
            assert!(
                !unrouted && r.status != StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}: {} {}",
                r.status,
                r.text
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked}");
}

#[tokio::test]
async fn every_route_of_the_server_is_documented() {
    let doc = document().await;
    let paths = doc["paths"].as_object().unwrap();
    let mut routes: Vec<String> = Vec::new();
    for prefix in ["", "/invoke"] {
        for p in dgem_server::CHAT_PATHS {
            routes.push(format!("{prefix}{p}"));
        }
        routes.push(format!("{prefix}/v1/systemone"));
        routes.push(format!("{prefix}/v1/raw/chat/completions"));
        routes.push(format!("{prefix}/v1/models"));
        routes.push(format!("{prefix}/health"));
    }
    for r in [
        "/ready",
        "/metrics",
        "/openapi.json",
        "/api/templates",
        "/api/decide",
        "/api/decide/{template}",
        "/api/health",
        "/api/backends",
        "/mcp",
        "/studio",
    ] {
        routes.push(r.to_string());
    }
    let missing: Vec<&String> = routes.iter().filter(|r| !paths.contains_key(*r)).collect();
    assert!(missing.is_empty(), "not documented: {missing:?}");
}

#[tokio::test]
async fn documented_request_fields_are_the_fields_the_handlers_read() {
    let doc = document().await;
    let mut chat: Vec<String> = dgem_server::chat::READ_FIELDS
        .iter()
        .chain(dgem_server::chat::NO_EFFECT_FIELDS)
        .map(|s| (*s).to_string())
        .chain(dgem_server::chat::after_fields().iter().cloned())
        .collect();
    chat.sort();
    chat.dedup();
    assert_eq!(properties_of(&doc, "ChatCompletionRequest"), chat);
    let mut api: Vec<String> = dgem_server::api::request::api_keys().to_vec();
    api.sort();
    assert_eq!(properties_of(&doc, "DecisionRequest"), api);
    // The bearer scheme is there for the POST routes.
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(openapi::document(), doc);
}

#[tokio::test]
async fn an_independent_validator_accepts_the_document() {
    let importable = std::process::Command::new("python3")
        .args(["-c", "import openapi_spec_validator"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !importable {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(!ci, "CI is set but python3 cannot import openapi_spec_validator (pip install openapi-spec-validator)");
        eprintln!("SKIP an_independent_validator_accepts_the_document: pip install openapi-spec-validator; CI is unset");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("openapi.json");
    std::fs::write(&path, document().await.to_string()).unwrap();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import json,sys; from openapi_spec_validator import validate; from openapi_spec_validator.validation import OpenAPIV31SpecValidator as V; validate(json.load(open(sys.argv[1])), cls=V); print('valid')",
        ])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains("valid"), "{text}");
}
