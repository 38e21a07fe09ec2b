//! Issue 16 item 3: the shipped policies are built in, `-t` suggests a near
//! name, and `dgem templates list | show | init` (no model needed).

#![allow(clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::stderr;

/// Run `dgem` in `cwd` with `DGEM_TEMPLATES` unset (or set to `templates`).
fn dgem_in(cwd: &Path, args: &[&str], templates: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dgem"));
    cmd.current_dir(cwd).args(args).env_remove("DGEM_TEMPLATES");
    if let Some(t) = templates {
        cmd.env("DGEM_TEMPLATES", t);
    }
    cmd.output().expect("run dgem")
}

#[test]
fn shipped_policies_work_from_any_folder() {
    let dir = tempfile::tempdir().unwrap();
    let o = dgem_in(
        dir.path(),
        &["render", "-t", "support_triage", "-v", "ticket=refund me"],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["state"]["ticket"], "refund me");
    assert_eq!(out["schema"]["questions"][1]["id"], "team");
}

#[test]
fn a_misspelled_name_gets_the_closest_one() {
    let dir = tempfile::tempdir().unwrap();
    let o = dgem_in(dir.path(), &["render", "-t", "suport_triage"], None);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("Did you mean `support_triage`?"), "{e}");
    assert!(
        e.contains("Given: `suport_triage`") && e.contains("dgem templates list"),
        "{e}"
    );
}

#[test]
fn a_folder_copy_wins_over_the_built_in_one() {
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("mine");
    std::fs::create_dir(&own).unwrap();
    std::fs::write(
        own.join("support_triage.json.tmpl"),
        r#"{"schema": {"questions": [{"id": "mine", "type": "noul"}]}, "state": {"t": "x"}}"#,
    )
    .unwrap();
    let o = dgem_in(dir.path(), &["render", "-t", "support_triage"], Some(&own));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["schema"]["questions"][0]["id"], "mine");
    let list = dgem_in(dir.path(), &["templates", "list", "--json"], Some(&own));
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    let triage: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "support_triage")
        .collect();
    assert_eq!(triage.len(), 1, "shadowed built-in listed once: {rows}");
    assert!(triage[0]["origin"]
        .as_str()
        .unwrap()
        .ends_with("support_triage.json.tmpl"));
}

#[test]
fn list_and_show_the_built_in_policies() {
    let dir = tempfile::tempdir().unwrap();
    let o = dgem_in(dir.path(), &["templates", "list", "--json"], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for n in [
        "support_triage",
        "code_review",
        "prompt_injection",
        "bench/intent_select",
    ] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let triage = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "support_triage")
        .unwrap();
    assert_eq!(triage["origin"], "built-in");
    assert_eq!(
        triage["variables"],
        serde_json::json!(["samples", "ticket"])
    );
    assert!(triage["description"]
        .as_str()
        .unwrap()
        .starts_with("Route an incoming"));
    let show = dgem_in(dir.path(), &["templates", "show", "code_review"], None);
    assert_eq!(show.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&show.stdout).contains("\"questions\""));
}

#[test]
fn init_writes_a_starter_that_renders_to_a_valid_policy() {
    let dir = tempfile::tempdir().unwrap();
    let o = dgem_in(dir.path(), &["templates", "init", "my_policy"], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let path = dir.path().join("templates/my_policy.json.tmpl");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with("{{- /* my_policy: a starter policy."),
        "{text}"
    );
    // Found by name from the templates folder, rendered, and valid.
    let r = dgem_in(
        dir.path(),
        &[
            "render",
            "-t",
            "my_policy",
            "-v",
            "text=the printer is on fire",
        ],
        None,
    );
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let out: Value = serde_json::from_slice(&r.stdout).unwrap();
    let schema = dgem_core::schema::ValidSchema::from_value(
        &out["schema"],
        &dgem_core::schema::SchemaDefaults::default(),
    )
    .expect("the starter is a valid policy");
    let kinds: Vec<&str> = schema.questions.iter().map(|q| q.kind.as_str()).collect();
    assert_eq!(kinds, ["boolean", "choice", "score", "multi"]);
    assert_eq!(schema.rules.0.len(), 1);
    assert_eq!(out["state"]["text"], "the printer is on fire");
    // No silent overwrite; names are checked.
    let again = dgem_in(dir.path(), &["templates", "init", "my_policy"], None);
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("--force"), "{}", stderr(&again));
    let bad = dgem_in(dir.path(), &["templates", "init", "My Policy"], None);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("Given: `My Policy`"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn completions_are_printed_for_each_shell() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let o = dgem_in(dir.path(), &["completions", shell], None);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("decide") && text.contains("templates"),
            "{shell}"
        );
    }
    let bad = dgem_in(dir.path(), &["completions", "cmd.exe"], None);
    assert_eq!(bad.status.code(), Some(1));
}

/// Regression: `dgem … | head` made the next print panic ("failed printing
/// to stdout: Broken pipe", exit 101). A reader that stops early is a success.
#[test]
fn broken_pipe_is_a_quiet_success() {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    // A 400 kB state: far more than a pipe buffer, so dgem is still writing
    // when the reader goes away.
    let vars = dir.path().join("vars.json");
    let big = serde_json::json!({"ticket": "refund ".repeat(60_000)});
    std::fs::write(&vars, big.to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(dir.path())
        .args(["render", "-t", "support_triage", "-d", "vars.json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Regression: `dgem completions bash | head -1` panicked (clap_complete's
/// own "failed to write completion file: … BrokenPipe", exit 101).
#[test]
fn completions_into_a_closed_pipe_exit_quietly() {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(dir.path())
        .args(["completions", "zsh"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 8];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_templates_folder_that_does_not_exist_is_refused_not_ignored() {
    // Issue 38: `DGEM_TEMPLATES=/nope dgem templates list` listed the
    // built-ins in silence.
    let dir = tempfile::tempdir().unwrap();
    let nope = dir.path().join("nope");
    for args in [
        &["templates", "list"][..],
        &["render", "-t", "support_triage"][..],
    ] {
        let o = dgem_in(dir.path(), args, Some(&nope));
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("`DGEM_TEMPLATES` must name a folder") && e.contains("which does not exist"),
            "{e}"
        );
    }
}

#[test]
fn a_missing_absolute_template_path_is_called_missing() {
    // Issue 38: it was refused as "not an absolute path".
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gone.json.tmpl");
    let missing = missing.to_str().unwrap();
    let o = dgem_in(dir.path(), &["render", "-t", missing], None);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("a path that does not exist"), "{e}");
    assert!(!e.contains("not an absolute path"), "{e}");
}

#[test]
fn a_variables_file_with_a_duplicate_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let vars = dir.path().join("v.json");
    std::fs::write(&vars, r#"{"ticket": "refund me", "ticket": "never mind"}"#).unwrap();
    let o = dgem_in(
        dir.path(),
        &[
            "render",
            "-t",
            "support_triage",
            "-d",
            vars.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("duplicate key `ticket`"),
        "{}",
        stderr(&o)
    );
}
