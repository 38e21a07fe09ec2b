//! `--shard I/N` (flag and the batch engines' variables), `dgem bench-merge`
//! and `dgem bench-jev` through the real binary. The runs use the real model
//! (`DGEM_TEST_MODEL`; under CI a missing model fails).
#![allow(clippy::print_stderr)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{dgem, model, one_model_run, root, stderr};

fn dgem_env(args: &[&str], m: &str, env: &[(&str, &str)]) -> Output {
    let _one_at_a_time = one_model_run();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dgem"));
    cmd.current_dir(root())
        .args(args)
        .env("DGEM_MODEL_PATH", common::SMALL_MODEL)
        .env("DGEM_MODEL_DIR", Path::new(m).parent().expect("folder"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run dgem")
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("receipt")).expect("json")
}

fn ids(r: &Value) -> Vec<String> {
    r["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn two_shards_merge_into_the_rows_of_one_run() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let (s0, s1, merged, full) = (p("s0.json"), p("s1.json"), p("m.json"), p("full.json"));
    // Shard 0 from the flag, shard 1 from Cloud Run Jobs' variables.
    let o = dgem_env(&["bench", "-n", "6", "--shard", "0/2", "-o", &s0], &m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("shard 0/2:"), "{}", stderr(&o));
    let o = dgem_env(
        &["bench", "-n", "6", "-o", &s1],
        &m,
        &[("CLOUD_RUN_TASK_INDEX", "1"), ("CLOUD_RUN_TASK_COUNT", "2")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (r0, r1) = (read(Path::new(&s0)), read(Path::new(&s1)));
    assert_eq!(r0["shard"]["index"], 0);
    assert_eq!(r1["shard"]["index"], 1);
    assert_eq!(r1["settings"]["shard"], "1/2");
    let n0 = r0["items"].as_array().map_or(0, Vec::len);
    let n1 = r1["items"].as_array().map_or(0, Vec::len);
    assert_eq!(n0 + n1, 6, "each row in exactly one shard");

    let o = dgem(
        &["bench-merge", &s1, &s0, "-o", &merged, "--format", "json"],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).expect("json report");
    let mr = read(Path::new(&merged));
    assert_eq!(
        report["metrics"],
        serde_json::to_value(&mr["metrics"]).expect("metrics")
    );
    assert_eq!(mr["metrics"]["items"], 6.0);
    assert!(mr.get("shard").is_none());

    let o = dgem_env(&["bench", "-n", "6", "-o", &full], &m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fr = read(Path::new(&full));
    // The same rows in the same (dataset) order as one process.
    assert_eq!(ids(&mr), ids(&fr));

    // One shard alone is refused, naming the missing one.
    let o = dgem(&["bench-merge", &s0], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("[1]") && stderr(&o).contains("missing"),
        "{}",
        stderr(&o)
    );
    // A bad shard is a user error naming the variable.
    let o = dgem_env(&["bench", "-n", "1"], &m, &[("JOB_COMPLETION_INDEX", "0")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("DGEM_SHARD_COUNT"), "{}", stderr(&o));
}

#[test]
fn bench_jev_scores_rows_with_the_jevbench_metrics() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("jev.json");
    let csv = dir.path().join("csv");
    let o = dgem_env(
        &[
            "bench-jev",
            "-n",
            "4",
            "-o",
            out.to_str().expect("utf8"),
            "--csv-dir",
            csv.to_str().expect("utf8"),
        ],
        &m,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = read(&out);
    assert_eq!(r["suite"], "jev");
    assert_eq!(r["metrics"]["total_cases"], 4.0);
    for k in [
        "chance_corrected_accuracy",
        "ece_10bin",
        "brier",
        "composite_v131",
        "composite_v14",
    ] {
        assert!(r["metrics"][k].is_number(), "{k}: {}", r["metrics"]);
    }
    for item in r["items"].as_array().expect("items") {
        let total: f64 = item["probabilities"]
            .as_object()
            .expect("probs")
            .values()
            .filter_map(Value::as_f64)
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
    }
    // One CSV file per report table, each a single table.
    let mut names: Vec<String> = std::fs::read_dir(&csv)
        .expect("csv dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "by_family.csv",
            "by_scoring_path_and_type.csv",
            "by_tier.csv",
            "by_topic.csv",
            "jevbench.csv"
        ]
    );
    let text = std::fs::read_to_string(csv.join("jevbench.csv")).expect("csv");
    assert!(
        text.starts_with("Metric,Value\n") && !text.contains("\n\n"),
        "{text}"
    );
    // Counts are integers in the report.
    assert!(text.contains("total_cases,4\n"), "{text}");
}
