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
    let models: serde_json::Value = http
        .get(format!("{}/v1/models", served.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
