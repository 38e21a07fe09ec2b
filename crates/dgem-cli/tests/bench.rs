//! End-to-end tests of the `dgem bench*` commands.
//!
//! The real-model test needs `DGEM_TEST_MODEL` (set by `scripts/test`); under CI
//! a missing model fails it instead of skipping it.

#![allow(clippy::print_stderr)]

use serde_json::{json, Value};

mod common;
use common::{dgem, model};

fn receipt(items: &[(&str, bool)], acc: f64) -> Value {
    json!({
        "format": "dgem.bench.receipt/v1", "suite": "bench", "created_unix": 0,
        "dataset": {"path": "d.jsonl", "sha256": "00", "rows": items.len(), "skipped": []},
        "model": {"id": "toy", "sha256": null, "backend": "scripted", "label_mode": "words", "calibration": false},
        "dgem": {"version": "0", "git_revision": "unknown"}, "seed": 42, "settings": {},
        "run": {"workers": 1, "resumed": 0, "ran": items.len(), "elapsed_s": 1.0, "decisions_per_s": 1.0},
        "metrics": {"item_accuracy": acc}, "breakdown": {},
        "items": items.iter().map(|(id, ok)| json!({"id": id, "correct": ok, "error": null})).collect::<Vec<_>>(),
    })
}

#[test]
fn compare_reports_flips_mcnemar_and_gates_exit_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    let ids = ["1", "2", "3", "4", "5", "6", "7"];
    // A right on 1..3; B right on 1 and 4..7: discordant 2 (A only) vs 4 (B only).
    let ra: Vec<(&str, bool)> = ids
        .iter()
        .map(|i| (*i, ["1", "2", "3"].contains(i)))
        .collect();
    let rb: Vec<(&str, bool)> = ids.iter().map(|i| (*i, !["2", "3"].contains(i))).collect();
    std::fs::write(&a, receipt(&ra, 3.0 / 7.0).to_string()).expect("write");
    std::fs::write(&b, receipt(&rb, 5.0 / 7.0).to_string()).expect("write");
    let (sa, sb) = (a.to_str().expect("utf8"), b.to_str().expect("utf8"));
    let o = dgem(&["bench-compare", sa, sb, "--format", "json"], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["metrics"]["a_only_correct"], 2.0);
    assert_eq!(v["metrics"]["b_only_correct"], 4.0);
    // Exact: 2·P(X ≤ 2 | n = 6) = 2·(1 + 6 + 15)/64 = 44/64.
    let p = v["metrics"]["mcnemar_p"].as_f64().expect("p");
    assert!((p - 44.0 / 64.0).abs() < 1e-12, "{p}");
    assert!((v["metrics"]["delta.item_accuracy"].as_f64().expect("d") - 2.0 / 7.0).abs() < 1e-12);
    let o = dgem(
        &["bench-compare", sa, sb, "--fail-under", "mcnemar_p=0.9"],
        None,
    );
    assert_eq!(o.status.code(), Some(3));
    let o = dgem(&["bench-compare", sa, sb, "--format", "github"], None);
    assert!(String::from_utf8_lossy(&o.stdout).contains("::notice title=dgem mcnemar_p::"));
}

#[test]
fn strict_malformed_row_exits_1_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().join("d.jsonl");
    std::fs::write(&d, "{\"id\":\"a\",\"template\":\"support_triage\",\"expected\":{\"team\":\"billing\"}}\n{oops\n").expect("write");
    let o = dgem(
        &["bench", "-d", d.to_str().expect("utf8"), "--strict"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("d.jsonl:2: malformed row"), "{err}");
}

#[test]
fn bench_on_the_real_model_writes_a_full_receipt() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.json");
    let o = dgem(
        &[
            "bench",
            "-n",
            "2",
            "-w",
            "2",
            "-o",
            out.to_str().expect("utf8"),
            "--format",
            "json",
        ],
        Some(&m),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("receipt")).expect("json");
    assert_eq!(
        r["dataset"]["sha256"],
        "cd1900081406350a1efa72afce1518b481381effb04cf74f3fdd452b49f918ad"
    );
    assert_eq!(r["items"].as_array().map(Vec::len), Some(2));
    assert!(r["model"]["id"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(r["dgem"]["git_revision"].as_str().is_some());
    for item in r["items"].as_array().expect("items") {
        for slot in item["slots"].as_object().expect("slots").values() {
            let total: f64 = slot["probabilities"]
                .as_object()
                .expect("probs")
                .values()
                .filter_map(Value::as_f64)
                .sum();
            assert!((total - 1.0).abs() < 1e-6, "{total}");
        }
        assert!(item["wall_ms"].as_f64().is_some_and(|w| w > 0.0));
    }
    assert!(
        !dir.path().join("r.json.partial").exists(),
        "partial removed after a finished run"
    );
}

#[test]
fn missing_bench_dataset_exits_1_naming_the_flag() {
    // Regression: a dataset path that does not exist exited 2 (internal).
    for cmd in ["bench", "bench-intents", "bench-permutation"] {
        let o = common::dgem(&[cmd, "-d", "/nonexistent/rows.jsonl"], None);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", common::stderr(&o));
        let e = common::stderr(&o);
        assert!(
            e.contains("`--dataset` must be a JSON Lines file. Given: `/nonexistent/rows.jsonl` (no such file)"),
            "{cmd}: {e}"
        );
    }
}
