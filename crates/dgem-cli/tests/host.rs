//! `dgem host` end to end on the real model: a second `dgem decide` is
//! answered by the warm host, with the bytes the in-process path prints.
#![allow(clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

mod common;

/// `dgem` with the model's folder as its cache and `dir` as its host
/// folder. `DGEM_HOST` is `dgem serve`'s bind address, as the CPU image
/// sets it: it must not reach `decide`'s host switch (it once did).
fn dgem(args: &[&str], model: &str, dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(common::root())
        .args(args)
        .env("DGEM_MODEL_PATH", common::SMALL_MODEL)
        .env_remove("DGEM_USE_HOST")
        .env("DGEM_HOST", "0.0.0.0")
        .env("DGEM_MODEL_DIR", Path::new(model).parent().unwrap())
        .env("DGEM_HOST_DIR", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Stops the host however the test ends.
struct Stop<'a>(&'a str, &'a Path);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        let _ = dgem(&["host", "stop"], self.0, self.1);
    }
}

/// The envelope without its timings and `cached_tokens`: both say what the
/// caches held, not what was decided. (With no calibration priors on disk,
/// the first decision computes them and finds less in the KV cache than the
/// second: 830 against 2,814 cached tokens, every answer bit-identical; the
/// test failed on a fresh model folder for that alone.)
fn timeless(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "timing" | "cached_tokens"))
                .map(|(k, x)| (k.clone(), timeless(x)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn a_second_decide_is_answered_by_the_warm_host_as_the_process_would() {
    let Some(model) = common::model() else { return };
    let _one = common::one_model_run();
    let dir = tempfile::tempdir().unwrap();
    // A host folder must be closed to others (dgem never chmods one it did
    // not make).
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let decide = [
        "decide",
        "-t",
        "support_triage",
        "-v",
        "ticket=The app crashes when I upload a photo",
        "--json",
    ];
    // In this process, never a host.
    let mut alone: Vec<&str> = decide.to_vec();
    alone.extend(["--host", "off"]);
    let o = dgem(&alone, &model, dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let in_process: Value = serde_json::from_slice(&o.stdout).unwrap();

    let o = dgem(
        &["host", "start", "--idle-timeout", "120"],
        &model,
        dir.path(),
    );
    let _stop = Stop(&model, dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("ready at"),
        "{}",
        common::stderr(&o)
    );
    let o = dgem(&["host", "status"], &model, dir.path());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("running at"));
    // Only the owner may reach the socket.
    let socket = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("a socket");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    let o = dgem(&decide, &model, dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let via_host: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(timeless(&via_host), timeless(&in_process));
    // The table too, and a second (warm) call: the same answers.
    let table = [
        "decide",
        "-t",
        "support_triage",
        "-v",
        "ticket=The app crashes when I upload a photo",
    ];
    let mut table_alone: Vec<&str> = table.to_vec();
    table_alone.extend(["--host", "off"]);
    let here = dgem(&table_alone, &model, dir.path());
    let there = dgem(&table, &model, dir.path());
    assert_eq!(there.status.code(), Some(0), "{}", common::stderr(&there));
    assert_eq!(
        String::from_utf8_lossy(&there.stdout),
        String::from_utf8_lossy(&here.stdout)
    );
    let log = std::fs::read_to_string(socket.with_extension("log")).unwrap();
    assert!(
        log.contains("decided `support_triage`"),
        "the host decided it: {log}"
    );

    // A variable the policy does not read is refused before any host is
    // asked, as without one: exit 1, naming it.
    let o = dgem(
        &["decide", "-t", "support_triage", "-v", "tickt=x"],
        &model,
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        common::stderr(&o).contains("did you mean `ticket`"),
        "{}",
        common::stderr(&o)
    );

    let o = dgem(&["host", "stop"], &model, dir.path());
    assert!(
        common::stderr(&o).contains("stopped"),
        "{}",
        common::stderr(&o)
    );
    // It exits within moments of the stop, releasing its lock.
    let gone = (0..50).any(|_| {
        let o = dgem(&["host", "status"], &model, dir.path());
        let said = String::from_utf8_lossy(&o.stdout).starts_with("not running");
        if !said {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        said
    });
    assert!(gone, "the host still runs after `dgem host stop`");
    assert!(!socket.exists(), "the host removed its socket");
}

/// A `decide` that finds no host leaves nothing behind: no host folder is
/// made by merely looking for one.
#[test]
fn looking_for_a_host_makes_no_folder() {
    let Some(model) = common::model() else { return };
    let _one = common::one_model_run();
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    let o = dgem(
        &[
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=hello",
            "--json",
        ],
        &model,
        &hosts,
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(!hosts.exists(), "{} was made", hosts.display());
}

/// `host stop` returned while the host was still on its way out, so a
/// `host start` right after it found the lock held, spawned nothing and
/// waited for a host that never came (2 of 6 tries hung in a black-box run).
/// Now `stop` returns once the host has exited, and `start` spawns its own
/// host as soon as the lock is free.
#[test]
fn a_start_right_after_a_stop_gets_a_host() {
    let Some(model) = common::model() else { return };
    let _one = common::one_model_run();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let _stop = Stop(&model, dir.path());
    for round in 0..3 {
        let o = dgem(&["host", "start"], &model, dir.path());
        assert_eq!(
            o.status.code(),
            Some(0),
            "round {round}: {}",
            common::stderr(&o)
        );
        let o = dgem(&["host", "stop"], &model, dir.path());
        assert!(
            common::stderr(&o).contains("stopped"),
            "{}",
            common::stderr(&o)
        );
        let o = dgem(&["host", "status"], &model, dir.path());
        let said = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(said.starts_with("not running"), "round {round}: {said}");
    }
}

/// A bad `--idle-timeout` was only in the host's log: `host start` said
/// "the host exited … before it was ready". It is refused up front, naming
/// the flag, the range and the value.
#[test]
fn host_start_names_a_bad_idle_timeout() {
    // Refused before any model is looked at: no model needed.
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("none.gguf").display().to_string();
    let o = dgem(
        &["host", "start", "--idle-timeout", "0"],
        &model,
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let err = common::stderr(&o);
    assert!(
        err.contains("`--idle-timeout` must be a number of seconds above 0")
            && err.contains("Given: `0`"),
        "{err}"
    );
}
