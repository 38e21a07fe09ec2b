//! `scripts/quality-gate`, the quality gate's ceilings and verdicts: a metric
//! that meets its bar is held to the bar; one that misses it is held to its
//! accepted figure plus the tolerance (a ratchet). Runs the script with
//! `python3` on a gate file in a temporary folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/quality-gate")
}

fn gate(dir: &Path, args: &[&str]) -> Output {
    Command::new("python3")
        .arg(script())
        .args(args)
        .env("DGEM_QUALITY_GATE", dir.join("gate.json"))
        .output()
        .expect("python3 runs")
}

fn setup(dir: &Path, metrics: serde_json::Value) -> String {
    let cfg = json!({
        "bars": {"ece_10bin": 0.10, "brier_excess_first_token": 0.0, "brier_excess_sequence": 0.0},
        "tolerance": {"ece_10bin": 0.02, "brier_excess_first_token": 0.005, "brier_excess_sequence": 0.005},
        "accepted": {"eval": {"ece_10bin": 0.15, "brier_excess_first_token": -0.02}}
    });
    std::fs::write(dir.join("gate.json"), cfg.to_string()).expect("write gate");
    let receipt = dir.join("receipt.json");
    std::fs::write(&receipt, json!({ "metrics": metrics }).to_string()).expect("write receipt");
    receipt.to_str().expect("utf8").to_owned()
}

#[test]
fn a_missed_bar_is_held_to_the_accepted_figure_and_a_met_bar_to_the_bar() {
    let dir = tempfile::tempdir().expect("tempdir");
    setup(dir.path(), json!({}));
    let o = gate(dir.path(), &["ceilings", "eval"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        // ECE misses its bar (accepted 0.15): 0.15 + 0.02. Brier on
        // first_token meets it (-0.02): held to 0. No accepted sequence
        // figure: the bar.
        "--fail-under ece_10bin=0.17 --fail-under brier_excess_first_token=0 --fail-under brier_excess_sequence=0"
    );
}

#[test]
fn the_verdict_fails_a_regression_and_says_which_bars_are_missed() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Within the ratchet: ECE misses the bar but is no worse than accepted.
    let r = setup(
        dir.path(),
        json!({"ece_10bin": 0.16, "brier_excess_first_token": -0.01}),
    );
    let o = gate(dir.path(), &["verdict", "eval", &r]);
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{table}");
    assert!(
        table.contains(
            "| ece_10bin | 0.1600 | 0.1 | 0.1700 | MISSES the bar; no worse than accepted 0.1500 |"
        ),
        "{table}"
    );
    assert!(
        table.contains("| brier_excess_first_token | -0.0100 | 0 | 0.0000 | meets the bar |"),
        "{table}"
    );
    assert!(table.contains("| brier_excess_sequence | - |"), "{table}");

    // A metric that met its bar and no longer does fails, as does one past
    // its accepted figure plus the tolerance.
    let r = setup(
        dir.path(),
        json!({"ece_10bin": 0.18, "brier_excess_first_token": 0.001}),
    );
    let o = gate(dir.path(), &["verdict", "eval", &r]);
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(3), "{table}");
    assert!(
        table.contains("| ece_10bin | 0.1800 | 0.1 | 0.1700 | FAILED: worse than accepted |"),
        "{table}"
    );
    assert!(
        table.contains("| brier_excess_first_token | 0.0010 | 0 | 0.0000 | FAILED |"),
        "{table}"
    );
}

#[test]
fn accept_writes_the_run_figures_for_that_dataset_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = setup(
        dir.path(),
        json!({"ece_10bin": 0.123456, "brier_excess_first_token": -0.03, "slot_accuracy": 0.5}),
    );
    let o = gate(dir.path(), &["accept", "slice", &r]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("gate.json")).expect("read"))
            .expect("json");
    assert_eq!(
        cfg["accepted"]["slice"],
        json!({"ece_10bin": 0.1235, "brier_excess_first_token": -0.03})
    );
    assert_eq!(cfg["accepted"]["eval"]["ece_10bin"], 0.15);
}

/// A receipt that is missing, not JSON, or has no `metrics` is exit 1 with a
/// line naming the file or the key, not a Python traceback.
#[test]
fn bad_inputs_exit_1_naming_the_file_or_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    setup(dir.path(), json!({}));
    let missing = dir.path().join("missing.json");
    let not_json = dir.path().join("not.json");
    std::fs::write(&not_json, "x").expect("write");
    let no_metrics = dir.path().join("empty.json");
    std::fs::write(&no_metrics, "{}").expect("write");
    for (path, expect) in [
        (&missing, "No such file"),
        (&not_json, "not.json is not JSON"),
        (&no_metrics, "lacks the key 'metrics'"),
    ] {
        let o = gate(
            dir.path(),
            &["verdict", "eval", path.to_str().expect("utf8")],
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.starts_with("quality-gate: ") && err.contains(expect),
            "{err}"
        );
        assert!(!err.contains("Traceback"), "{err}");
    }
}
