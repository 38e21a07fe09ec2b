//! `dgem serve --config FILE` (issue 16, item 7): a TOML file sets what the
//! environment would, flags and the environment win over it, and a bad file
//! stops the server naming the file and the key. The served run uses the
//! real model (`DGEM_TEST_MODEL`; under CI a missing model fails).
#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;
#[path = "common/server.rs"]
mod server;

use std::time::Duration;

use common::{dgem, model, stderr};

#[test]
fn a_bad_config_file_exits_1_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("serve.toml");
    std::fs::write(&f, "max_inflite = 3\n").unwrap();
    let o = dgem(&["serve", "--config", f.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("unknown key `max_inflite`") && e.contains("max_inflight"),
        "{e}"
    );
    std::fs::write(&f, "port = \"eighty\"\n").unwrap();
    let o = dgem(&["serve", "--config", f.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("serve.toml") && e.contains("`port`") && e.contains("eighty"),
        "{e}"
    );
    std::fs::write(&f, "studio = \"yes\"\n").unwrap();
    let o = dgem(&["serve", "--config", f.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("`studio` must be true or false"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_come_from_the_file_and_the_environment_wins() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("serve.toml");
    std::fs::write(
        &f,
        "served_model = \"from-file\"\nstudio = true\nwarmup = false\ncors_origins = [\"https://app.example.com\"]\nmax_body_bytes = 1000\n",
    )
    .unwrap();
    let served = server::serve_with_env(
        &m,
        &["--config", f.to_str().unwrap()],
        &[("MAX_BODY_BYTES", "2000")],
        Duration::from_secs(120),
    )
    .await;
    let http = reqwest::Client::new();
    let models = server::get_json(&http, &format!("{}/v1/models", served.base)).await;
    assert_eq!(models["data"][0]["id"], "from-file");
    // `studio = true`: the page is served.
    let r = http
        .get(format!("{}/studio", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // CORS from the file.
    let r = http
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/v1/chat/completions", served.base),
        )
        .header("Origin", "https://app.example.com")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    // MAX_BODY_BYTES from the environment (2000) wins over the file (1000).
    let body = format!("{{\"pad\": \"{}\"}}", "x".repeat(1500));
    let r = http
        .post(format!("{}/v1/chat/completions", served.base))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        400,
        "a 1.5 kB body is read (then refused as a bad request), not 413"
    );
}

/// A policy whose question writes the `claim` variable: its content-free
/// prompts differ per request, so `--warm-priors` must leave it out.
const CLAIM_TEMPLATE: &str = r#"{
  "schema": {"questions": [{"id": "holds", "type": "boolean",
    "instructions": {{ printf "Does the text support the claim: %s?" (default "the claim" .claim) | toJson }}}]},
  "state": {"text": {{ default "No text was given." .text | toJson }}}
}"#;

/// `--warm-priors` (issue 14, first decision of a policy): after start-up the
/// first decision of a warmed template reads no content-free prompt
/// (`calibration_ms` 0) and the priors are on disk; a template whose policy
/// text depends on a variable is left out, and its first decision still
/// reads them (so the counter is not always 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_priors_caches_the_priors_of_fixed_policies_before_ready() {
    let Some(m) = model() else { return };
    let templates = tempfile::tempdir().unwrap();
    let root = common::root();
    std::fs::copy(
        root.join("templates/support_triage.json.tmpl"),
        templates.path().join("support_triage.json.tmpl"),
    )
    .unwrap();
    std::fs::write(templates.path().join("claim.json.tmpl"), CLAIM_TEMPLATE).unwrap();
    // A priors store of its own: nothing cached by earlier runs.
    let store = tempfile::tempdir().unwrap();
    let served = server::serve_templates(
        &m,
        templates.path(),
        &["--warm-priors", "--studio"],
        &[
            ("DGEM_MODEL_DIR", store.path().to_str().unwrap()),
            ("DGEM_MODEL_PATH", m.as_str()),
        ],
        Duration::from_secs(300),
    )
    .await;
    let http = reqwest::Client::new();
    let health = server::get_json(&http, &format!("{}/health", served.base)).await;
    assert_eq!(health["phase"], "ready", "{health}");
    assert_eq!(health["priors_warmed"], 1, "{health}");
    let stored: Vec<_> = std::fs::read_dir(store.path().join("priors"))
        .unwrap()
        .collect();
    assert_eq!(stored.len(), 1, "one priors file for the model");

    let decide = |template: &str, variables: serde_json::Value| {
        let (http, base) = (http.clone(), served.base.clone());
        let body = serde_json::json!({"template": template, "variables": variables});
        async move {
            let r = http
                .post(format!("{base}/api/decide"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let v: serde_json::Value = r.json().await.unwrap();
            v["diagnostics"]["timing"]["calibration_ms"]
                .as_f64()
                .unwrap_or_else(|| panic!("no calibration_ms in {v}"))
        }
    };
    let warmed = decide(
        "support_triage",
        serde_json::json!({"ticket": "The export button does nothing since this morning."}),
    )
    .await;
    assert_eq!(warmed, 0.0, "the warmed policy read content-free prompts");
    let cold = decide(
        "claim",
        serde_json::json!({"claim": "the sky is green", "text": "The sky was blue all day."}),
    )
    .await;
    assert!(cold > 0.0, "the skipped policy read no priors: {cold}");
}

#[test]
fn warm_priors_with_no_warmup_calibration_off_or_vllm_exits_1() {
    let o = dgem(&["serve", "--warm-priors", "--no-warmup"], None);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("drop `--no-warmup`"), "{}", stderr(&o));
    let o = dgem(&["serve", "--warm-priors", "--calibration", "off"], None);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("`--calibration off`"), "{}", stderr(&o));
    let o = dgem(
        &[
            "serve",
            "--warm-priors",
            "--backend",
            "vllm=http://127.0.0.1:9",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("embedded model"), "{}", stderr(&o));
}
