//! Helpers shared by the `dgem` binary's integration tests.
#![allow(dead_code, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The catalogue name of the small model the suite runs (`DGEM_TEST_MODEL` is
/// its file).
pub const SMALL_MODEL: &str = dgem_model::SMALL_MODEL_NAME;

/// The repository root (templates and data are resolved from there).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The real model's path from `DGEM_TEST_MODEL`; `None` skips the test locally,
/// but under CI a missing model fails it, so a green CI means it ran.
pub fn model() -> Option<String> {
    match std::env::var("DGEM_TEST_MODEL") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                std::env::var("CI").is_err(),
                "CI must set DGEM_TEST_MODEL (scripts/test does)"
            );
            eprintln!("skipping: DGEM_TEST_MODEL is not set");
            None
        }
    }
}

/// One model process at a time per test binary. The test harness runs tests
/// on parallel threads; several `dgem` processes each running llama.cpp on
/// every core oversubscribe a small machine so badly that a single model call
/// ran past the backend's 120 s model timeout on the 2-core CI runner
/// (`real_model_samples_report_agreement`, with the default six listings per
/// question). Model-free runs do not take the lock.
static MODEL_RUNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Hold this while a test's own `dgem` process runs the model (see
/// [`MODEL_RUNS`]); a panicking holder does not wedge the rest.
pub fn one_model_run() -> std::sync::MutexGuard<'static, ()> {
    MODEL_RUNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Run `dgem` from the repository root. With a model, the cache dir points at the
/// model's folder and `DGEM_MODEL_PATH` (what `--model` reads) names the small
/// catalogued model, so the catalogue path is exercised as a user runs it
/// (`--model gemma3-270m`; the default model is the 1.1 GB qwen2.5-coder-1.5b,
/// which the suite never fetches); without, at a folder that does not exist
/// (commands that need no model must not touch it). Runs with a model are
/// serialized by [`MODEL_RUNS`].
pub fn dgem(args: &[&str], model: Option<&str>) -> Output {
    let _one_at_a_time = model.map(|_| one_model_run());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dgem"));
    cmd.current_dir(root())
        .args(args)
        .env_remove("DGEM_MODEL_PATH");
    match model {
        Some(m) => cmd
            .env(
                "DGEM_MODEL_DIR",
                Path::new(m).parent().expect("model has a folder"),
            )
            .env("DGEM_MODEL_PATH", SMALL_MODEL),
        None => cmd.env("DGEM_MODEL_DIR", "/nonexistent/dgem-test-cache"),
    };
    cmd.output().expect("run dgem")
}

/// A process's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Write `body` as `<name>.json.tmpl` in `dir` (a policy template that renders
/// to itself) and return its path.
pub fn policy(dir: &tempfile::TempDir, name: &str, body: &serde_json::Value) -> String {
    let p = dir.path().join(format!("{name}.json.tmpl"));
    std::fs::write(&p, body.to_string()).expect("write");
    p.to_str().expect("utf8").to_owned()
}

/// Run `dgem ARGS` on the model `m`, expect success, and parse its stdout as JSON.
pub fn json_out(args: &[&str], m: &str) -> serde_json::Value {
    let o = dgem(args, Some(m));
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("json")
}

/// A WordLevel `tokenizer.json` for the fake vLLM backend: `yes` = 1,
/// `no` = 2, everything else `[UNK]`.
pub const TINY_TOKENIZER: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null, "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "yes": 1, "no": 2}, "unk_token": "[UNK]"}
}"#;
