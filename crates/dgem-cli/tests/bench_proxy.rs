//! `dgem bench-proxy` with tiny counts: the receipt has its shape and every
//! decision and every baseline replay succeeded. No time is asserted: the
//! machine is shared.
#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use common::{dgem, stderr};
use serde_json::Value;

/// A WordLevel `tokenizer.json` holding the bench policy's labels (`yes`,
/// `no`, the letters of its 4 options, the digits of its 3 levels); every
/// other word is `[UNK]`.
const TINY_TOKENIZER: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null, "decoder": null,
  "model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "yes": 1, "no": 2,
            "A": 3, "B": 4, "C": 5, "D": 6, "1": 7, "2": 8, "3": 9}}
}"#;

/// Run `bench-proxy` with tiny counts at 1 and 4 clients; its receipt.
fn run(extra: &[&str], model: Option<&str>) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("proxy.json");
    let mut args = vec![
        "bench-proxy",
        "--clients",
        "1,4",
        "--requests",
        "12",
        "--warmup",
        "2",
        "--seconds",
        "60",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = dgem(&args, model);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    let receipt: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    (receipt, table)
}

/// Every level measured both sides, all items succeeded, figures add up.
fn check(v: &Value, table: &str) {
    assert_eq!(v["format"], "dgem.bench.proxy/v1", "{v}");
    assert_eq!(v["suite"], "proxy");
    assert!(v["dgem"]["version"].is_string() && v["dgem"]["git_revision"].is_string());
    assert!(["debug", "release"].contains(&v["build"].as_str().unwrap()));
    assert_eq!(v["settings"]["clients"], serde_json::json!([1, 4]));
    assert_eq!(v["settings"]["requests"], 12);
    assert!(
        v["settings"]["vllm_requests_per_decision"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    let levels = v["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 2, "{v}");
    for (l, clients) in levels.iter().zip([1, 4]) {
        assert_eq!(l["clients"], clients);
        for side in ["dgem", "baseline"] {
            let s = &l[side];
            assert_eq!(s["items"], 12, "{side}: {l}");
            assert_eq!(s["failed"], 0, "{side}: {l}");
            assert!(s["first_failure"].is_null(), "{side}: {l}");
            assert!(s["p50_ms"].as_f64().unwrap() > 0.0, "{side}: {l}");
            assert!(s["p99_ms"].as_f64().unwrap() >= s["p50_ms"].as_f64().unwrap());
            assert!(s["per_s"].as_f64().unwrap() > 0.0);
        }
        let p50 = |side: &str| l[side]["p50_ms"].as_f64().unwrap();
        let overhead = l["overhead_p50_ms"].as_f64().unwrap();
        assert!(
            (overhead - (p50("dgem") - p50("baseline"))).abs() < 1e-9,
            "{l}"
        );
        let ratio =
            l["decisions_per_s"].as_f64().unwrap() / l["baseline_requests_per_s"].as_f64().unwrap();
        assert!(
            (l["throughput_ratio"].as_f64().unwrap() - ratio).abs() < 1e-9,
            "{l}"
        );
    }
    // The goal is read at 64 clients, which this run did not measure.
    assert_eq!(v["goal"]["clients"], 64);
    assert!(v["goal"]["overhead_met"].is_null(), "{v}");
    assert!(
        table.contains("goal at 64 clients") && table.contains("not measured"),
        "{table}"
    );
    assert!(table.contains("ovh p50 ms"), "{table}");
}

#[test]
fn bench_proxy_measures_both_sides_at_every_level() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("tokenizer.json");
    std::fs::write(&tok, TINY_TOKENIZER).unwrap();
    let (v, table) = run(&["--tokenizer", tok.to_str().unwrap()], None);
    check(&v, &table);
    assert_eq!(v["settings"]["tokenizer"], tok.to_str().unwrap());
}

/// The default tokenizer: the embedded GGUF's Gemma vocabulary (needs
/// `DGEM_TEST_MODEL`; under CI a missing model fails).
#[test]
fn bench_proxy_reads_with_the_default_tokenizer() {
    let Some(m) = common::model() else { return };
    let (v, table) = run(&[], Some(&m));
    check(&v, &table);
    assert_eq!(v["settings"]["tokenizer"], "embedded GGUF (default)");
}

#[test]
fn bad_counts_exit_1_naming_the_flag() {
    for (flag, value) in [("--clients", "0"), ("--requests", "0"), ("--seconds", "0")] {
        let o = dgem(&["bench-proxy", flag, value], None);
        assert_eq!(o.status.code(), Some(1), "{flag}: {}", stderr(&o));
        assert!(stderr(&o).contains(flag), "{flag}: {}", stderr(&o));
    }
}
