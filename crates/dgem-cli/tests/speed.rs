//! `dgem bench-speed` on the real model: every scenario is measured and each
//! ratio is taken against the scenario it names (no time is asserted: the
//! machine is shared). Needs `DGEM_TEST_MODEL` (under CI a missing model fails).
#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use common::{dgem, model, stderr};
use serde_json::Value;

/// One round of `dgem bench-speed` at 2 threads with `extra` flags on the
/// test model: its table (stdout) and its receipt.
fn one_round(m: &str, extra: &[&str]) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("speed.json");
    let mut args = vec!["bench-speed", "--rounds", "1", "--threads", "2"];
    args.extend_from_slice(extra);
    args.extend(["-o", out.to_str().unwrap()]);
    let o = dgem(&args, Some(m));
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    (table, v)
}

#[test]
fn bench_speed_measures_every_scenario_against_its_baseline() {
    let Some(m) = model() else { return };
    let (table, v) = one_round(&m, &[]);
    assert!(
        table.contains("of baseline") && table.contains("of q1"),
        "{table}"
    );
    assert_eq!(v["rounds"], 1);
    assert!(v["prompt_tokens"].as_u64().unwrap() > 100, "{v}");
    let s = &v["scenarios"];
    for (name, to) in [
        ("cold", "baseline"),
        ("warm", "baseline"),
        ("first_of_policy", "baseline"),
        ("q8", "q1"),
        ("schema_first_cached", "schema_first_cold"),
        ("schema_first_first_of_policy", "schema_first_cold"),
        ("prior_schema_first_cached", "new_tokens"),
    ] {
        assert_eq!(s[name]["ratio_to"], to, "{name}: {v}");
        let ratio = s[name]["ratio"]["median"].as_f64().unwrap();
        let expect = s[name]["median_ms"].as_f64().unwrap() / s[to]["median_ms"].as_f64().unwrap();
        assert!((ratio - expect).abs() < 1e-9, "{name}: {ratio} vs {expect}");
    }
    assert!(s["baseline"]["median_ms"].as_f64().unwrap() > 0.0);
    // 16 callers, one round: 16 overhead samples.
    assert_eq!(s["overhead_16"]["ms"].as_array().unwrap().len(), 16);
    // Throughput: decisions/s at 16 callers over 1 = serial ms over concurrent ms.
    let per = |k: &str| s[k]["median_ms"].as_f64().unwrap();
    let t = s["throughput_16"]["ratio"]["median"].as_f64().unwrap();
    assert!(
        (t - per("serial_16") / per("concurrent_16")).abs() < 1e-9,
        "{v}"
    );
    assert_eq!(s["throughput_16"]["goal"], 1.5);
    assert!(table.contains("throughput_16"), "{table}");
    // The receipt names the build that made it.
    assert!(
        v["dgem"]["git_revision"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{v}"
    );
    assert!(v["dgem"]["git_dirty"].is_boolean(), "{v}");
    // Without `--one-read` the disk store is off: the cold rows stay cold.
    assert!(s["prior_schema_first_from_disk"].is_null(), "{v}");
}

#[test]
fn one_read_measures_the_known_policy_rows_only() {
    let Some(m) = model() else { return };
    let (_, v) = one_round(&m, &["--one-read"]);
    let s = &v["scenarios"];
    for (name, to) in [
        ("prior_cold", "baseline"),
        ("prior_first_of_policy", "prior_cold"),
        ("prior_schema_first_cached", "new_tokens"),
        ("prior_schema_first_from_disk", "new_tokens"),
        ("concurrent_16", "serial_16"),
    ] {
        assert_eq!(s[name]["ratio_to"], to, "{name}: {v}");
        assert!(s[name]["median_ms"].as_f64().unwrap() > 0.0, "{name}: {v}");
    }
    assert_eq!(s["prior_schema_first_cached"]["goal"], 1.2, "{v}");
    for cyclic in ["cold", "warm", "q8", "contended_1", "tokenize"] {
        assert!(s[cyclic].is_null(), "{cyclic} is not a one-read row: {v}");
    }
}

#[test]
fn bad_kv_chunk_exits_1_naming_the_flag() {
    let o = dgem(&["bench-speed", "--kv-chunk", "0"], None);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`--kv-chunk` must be between 1"),
        "{}",
        stderr(&o)
    );
    let o = dgem(
        &["decide", "-t", "support_triage", "--batch-reads", "maybe"],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("[on, off]"), "{}", stderr(&o));
}
