//! `--shard I/N` and `bench-merge` on a scripted backend: three shards of a
//! `dgem bench` run, merged, give the rows and metrics of the single-process
//! run (all but the run's speed and the wall times, which are each run's own).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dgem_bench::dataset::{self, Dataset};
use dgem_bench::merge;
use dgem_bench::receipt::{
    DatasetInfo, ModelInfo, Receipt, RunInfo, ShardPlan, VersionInfo, RECEIPT_FORMAT,
};
use dgem_bench::runner::{self, NoProgress, RunConfig};
use dgem_bench::shard::Shard;
use dgem_bench::suites::bench::{self, BenchItem, BenchRow};
use dgem_bench::suites::Decider;
use dgem_testkit::{scripts, ScriptedBackend};
use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const TEAMS: [&str; 3] = ["billing", "support", "engineering"];

/// 24 tickets with answers marked for the scripted model; every fourth
/// expectation disagrees with the marker, so accuracy is not 1.
fn dataset_text() -> String {
    let t = root().join("templates/support_triage.json.tmpl");
    (0..24)
        .map(|i| {
            let team = TEAMS[i % 3];
            let urgent = if i % 2 == 0 { "yes" } else { "no" };
            let exp_team = if i % 4 == 0 { TEAMS[(i + 1) % 3] } else { team };
            format!(
                "{{\"id\":\"t{i:02}\",\"domain\":\"d{}\",\"template\":\"{}\",\"variables\":{{\"ticket\":\"please want_{team} and want_{urgent}\"}},\"expected\":{{\"team\":\"{exp_team}\",\"urgent\":\"{urgent}\"}}}}\n",
                i % 2,
                t.display()
            )
        })
        .collect()
}

fn decider() -> Decider {
    Decider {
        engine: Arc::new(dgem_testkit::engine(ScriptedBackend::new(
            scripts::want_marker(0.8),
        ))),
        samples: None,
        layout: None,
        seed: 42,
    }
}

/// Run `rows` and write the receipt a `dgem bench` process would.
async fn run(ds: &Dataset<BenchRow>, rows: &[(usize, BenchRow)], shard: Option<Shard>) -> Receipt {
    let d = decider();
    let path = ds.path.clone();
    let items: Vec<(String, (usize, BenchRow))> = rows
        .iter()
        .map(|(l, r)| (r.id.clone(), (*l, r.clone())))
        .collect();
    let cfg = RunConfig {
        workers: 2,
        partial: None,
        resume: false,
        fingerprint: "fp".into(),
    };
    let outcome = runner::run(items, &cfg, &NoProgress, |(line, row)| {
        let (d, path) = (d.clone(), path.clone());
        async move { bench::run_item(&d, &path, line, row).await }
    })
    .await
    .expect("runs");
    let dps = outcome.ran as f64 / outcome.elapsed_s.max(1e-9);
    // The shard's refused lines, as `dgem bench --shard` keeps them.
    let mut part = ds.clone();
    if let Some(sh) = shard {
        part.keep_shard(sh);
    }
    let mut info = DatasetInfo::of(&part);
    info.rows = rows.len();
    let mut s = bench::summarize(&outcome.rows, dps);
    s.record_refused(&info.refused);
    let mut settings = json!({"workers": 2});
    if let Some(sh) = shard {
        settings["shard"] = json!(sh.to_string());
    }
    Receipt {
        format: RECEIPT_FORMAT.into(),
        suite: "bench".into(),
        created_unix: 0,
        dataset: info,
        model: ModelInfo::of(&d.engine),
        dgem: VersionInfo {
            version: "test".into(),
            git_revision: "unknown".into(),
            git_dirty: None,
        },
        seed: 42,
        settings,
        run: RunInfo {
            workers: 2,
            resumed: 0,
            ran: outcome.ran,
            elapsed_s: outcome.elapsed_s,
            decisions_per_s: dps,
            failed: vec![],
        },
        metrics: s.metrics,
        breakdown: s.breakdown,
        items: outcome
            .rows
            .iter()
            .map(|i| serde_json::to_value(i).expect("item"))
            .collect(),
        shard: shard.map(|sh| ShardPlan {
            index: sh.index,
            count: sh.count,
            rows: rows.iter().map(|(l, r)| (r.id.clone(), *l)).collect(),
        }),
    }
}

fn without_timing(items: &[Value]) -> Vec<BenchItem> {
    items
        .iter()
        .map(|v| {
            let mut i: BenchItem = serde_json::from_value(v.clone()).expect("bench item");
            i.wall_ms = 0.0;
            i
        })
        .collect()
}

fn load(dir: &Path) -> Dataset<BenchRow> {
    let path = dir.join("ds.jsonl");
    std::fs::write(&path, dataset_text()).expect("write dataset");
    dataset::load::<BenchRow>(&path, true).expect("loads")
}

/// Shards of a dataset with refused lines: the merged receipt and report
/// hold each refused line once, as the single-process run does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_shards_report_the_files_refused_rows_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ds.jsonl");
    let bad = "{\"id\":\"no-expected\",\"template\":\"t\",\"expected\":{}}\nnot json\n{\"id\":\"x9\",\"template\":7,\"expected\":{\"a\":\"b\"}}\n";
    std::fs::write(&path, dataset_text() + bad).expect("write dataset");
    let ds = dataset::load::<BenchRow>(&path, false).expect("loads");
    assert_eq!((ds.rows.len(), ds.refused.len()), (24, 3));
    let single = run(&ds, &ds.rows, None).await;
    let mut shards = Vec::new();
    for i in 0..3 {
        let sh = Shard::new(i, 3).expect("shard");
        let rows: Vec<(usize, BenchRow)> = ds
            .rows
            .iter()
            .filter(|(_, r)| sh.contains(&r.id))
            .cloned()
            .collect();
        shards.push((format!("shard-{i}.json"), run(&ds, &rows, Some(sh)).await));
    }
    let (merged, summary) = merge::merge(&shards).expect("merges");
    assert_eq!(merged.dataset.refused, single.dataset.refused);
    let lines: Vec<usize> = merged.dataset.refused.iter().map(|r| r.line).collect();
    assert_eq!(lines, [25, 26, 27]);
    assert_eq!(
        merged.dataset.refused[2].reason,
        "`template`: invalid type: integer `7`, expected path string"
    );
    assert_eq!(merged.metrics["refused"], 3.0);
    assert_eq!(summary.breakdown["refused"], single.breakdown["refused"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_merged_equal_one_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(dir.path());
    let single = run(&ds, &ds.rows, None).await;

    let mut shards = Vec::new();
    for i in [2, 0, 1] {
        let sh = Shard::new(i, 3).expect("shard");
        let rows: Vec<(usize, BenchRow)> = ds
            .rows
            .iter()
            .filter(|(_, r)| sh.contains(&r.id))
            .cloned()
            .collect();
        assert!(!rows.is_empty(), "shard {sh} is empty");
        shards.push((format!("shard-{i}.json"), run(&ds, &rows, Some(sh)).await));
    }
    let (merged, summary) = merge::merge(&shards).expect("merges");

    // The same rows, in dataset order, with the same answers.
    assert_eq!(merged.items.len(), 24);
    assert_eq!(without_timing(&merged.items), without_timing(&single.items));
    // The same metrics, but for the ones that time the run.
    let timing = |k: &str| k.ends_with("_ms") || k == "decisions_per_s";
    let diffs: Vec<String> = merge::differing_metrics(&single.metrics, &merged.metrics)
        .into_iter()
        .filter(|d| !timing(d.split(':').next().unwrap_or_default()))
        .collect();
    assert!(diffs.is_empty(), "{diffs:?}");
    assert!(single.metrics["item_accuracy"] < 1.0 && single.metrics["item_accuracy"] > 0.5);
    // The latency percentiles are the merged items' own (computed again, not averaged).
    let mut again = bench::summarize(
        &merged
            .items
            .iter()
            .map(|v| serde_json::from_value(v.clone()).expect("item"))
            .collect::<Vec<BenchItem>>(),
        merged.run.decisions_per_s,
    );
    again.record_refused(&merged.dataset.refused);
    assert_eq!(again.metrics, merged.metrics);
    assert_eq!(summary.metrics, merged.metrics);
    // The bench breakdown (accuracy by domain and tier) holds no timing.
    assert_eq!(merged.breakdown, single.breakdown);
    assert!(merged.shard.is_none());
    assert_eq!(merged.dataset.rows, 24);
    assert_eq!(merged.run.ran, 24);
    assert_eq!(merged.settings["merged_shards"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_repeated_or_foreign_shard_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(dir.path());
    let part = |i: usize, n: usize| {
        let sh = Shard::new(i, n).expect("shard");
        let rows: Vec<(usize, BenchRow)> = ds
            .rows
            .iter()
            .filter(|(_, r)| sh.contains(&r.id))
            .cloned()
            .collect();
        (sh, rows)
    };
    let (s0, r0) = part(0, 2);
    let (s1, r1) = part(1, 2);
    let a = ("a.json".to_string(), run(&ds, &r0, Some(s0)).await);
    let b = ("b.json".to_string(), run(&ds, &r1, Some(s1)).await);
    let e = merge::merge(std::slice::from_ref(&a))
        .unwrap_err()
        .to_string();
    assert!(e.contains("[1]") && e.contains("missing"), "{e}");
    let e = merge::merge(&[a.clone(), a.clone()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("given twice"), "{e}");
    let mut other_seed = b.clone();
    other_seed.1.seed = 7;
    let e = merge::merge(&[a.clone(), other_seed])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`seed` differs") && e.contains("b.json"), "{e}");
    let mut single = b.clone();
    single.1.shard = None;
    let e = merge::merge(&[a.clone(), single]).unwrap_err().to_string();
    assert!(e.contains("not the receipt of a shard"), "{e}");
    let (s, r) = part(1, 3);
    let c = ("c.json".to_string(), run(&ds, &r, Some(s)).await);
    let e = merge::merge(&[a, c]).unwrap_err().to_string();
    assert!(e.contains("`shard.count` differs"), "{e}");
}
