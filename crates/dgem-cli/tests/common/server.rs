//! A `dgem serve` child process on a free loopback port, for tests that talk to
//! the real binary over HTTP (MCP clients, the browser). Killed on drop.
#![allow(dead_code, clippy::print_stderr)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `dgem` binary under test: `DGEM_BIN` when set (a binary built in
/// another target folder), else the one cargo built for this test.
pub fn dgem_bin() -> PathBuf {
    match std::env::var("DGEM_BIN") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_dgem")),
    }
}

/// Whether `CI` is set to something true (then missing tools fail tests).
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Whether the real `python3 -m pip` is here; outside CI its absence skips
/// the test that asks, under CI it fails it (CI installs pip: it pulls the
/// model with it).
pub fn pip_available() -> bool {
    let ok = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(!ci(), "CI must have python3 with pip");
        eprintln!("skipping: python3 -m pip is not available");
    }
    ok
}

/// A port nobody listens on right now (bound, read, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `GET url`, its body parsed as JSON (panics on a failed request or a body
/// that is not JSON).
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    http.get(url)
        .send()
        .await
        .expect("GET answers")
        .json()
        .await
        .expect("a JSON body")
}

/// A running `dgem serve`.
#[derive(Debug)]
pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Served {
    /// The child's process id (to send it a signal).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `127.0.0.1:PORT`, for raw TCP clients.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// Wait up to `within` for the process to exit on its own; `None` while it
    /// still runs.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if started.elapsed() >= within {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `dgem serve` on the real model with `extra` arguments, and wait (up to
/// `ready_within`) until `GET /ready` answers 200: `/health` answers as soon as
/// the port is bound, while the model is still loading.
pub async fn serve(model: &str, extra: &[&str], ready_within: Duration) -> Served {
    serve_with_env(model, extra, &[], ready_within).await
}

/// [`serve`] with `env` set in the child's environment (limits such as
/// `MAX_CONNECTIONS` or `API_KEY`, which `dgem serve` reads only from there).
pub async fn serve_with_env(
    model: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    ready_within: Duration,
) -> Served {
    let templates = crate::common::root().join("templates");
    serve_templates(model, &templates, extra, env, ready_within).await
}

/// [`serve_with_env`] on the policy folder `templates` instead of the repo's.
pub async fn serve_templates(
    model: &str,
    templates: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &str)],
    ready_within: Duration,
) -> Served {
    let port = free_port();
    let root = crate::common::root();
    let child = Command::new(dgem_bin())
        .current_dir(&root)
        .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
        .arg("--templates")
        .arg(templates)
        .args(extra)
        // The small catalogued model from the cache folder, as a user names
        // it (`--model gemma3-270m`): the embedded model's plain-words note
        // is then part of every decision. The default model (the 1.1 GB
        // qwen2.5-coder-1.5b) is never fetched by the suite.
        .env("DGEM_MODEL_PATH", crate::common::SMALL_MODEL)
        .env(
            "DGEM_MODEL_DIR",
            std::path::Path::new(model)
                .parent()
                .expect("model has a folder"),
        )
        .env("DGEM_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn dgem serve");
    let served = Served {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{}/ready", served.base)).send().await {
            if r.status().is_success() {
                break;
            }
        }
        assert!(
            started.elapsed() < ready_within,
            "dgem serve was not ready within {ready_within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    served
}
