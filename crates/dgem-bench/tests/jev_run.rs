//! `dgem bench-jev` rows on a scripted backend: every row is decided, the
//! JevBench metrics are the formulas over the items, and a uniform model
//! scores at chance (chance-corrected accuracy and intelligence 0 or near).

use std::path::PathBuf;
use std::sync::Arc;

use dgem_bench::dataset;
use dgem_bench::runner::{self, NoProgress, RunConfig};
use dgem_bench::suites::jev::JevRow;
use dgem_bench::suites::jev_run::{self, JevScoring};
use dgem_bench::suites::Decider;
use dgem_testkit::{scripts, ScriptedBackend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jev_rows_are_scored_as_jevbench_scores_them() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/jevbench_style.jsonl");
    let mut ds = dataset::load::<JevRow>(&path, true).expect("loads");
    ds.window(0, Some(16));
    let d = Decider {
        // No markers in these states: every answer is uniform.
        engine: Arc::new(dgem_testkit::engine(ScriptedBackend::new(
            scripts::want_marker(0.9),
        ))),
        samples: None,
        layout: None,
        seed: 42,
    };
    let items: Vec<(String, JevRow)> = ds
        .rows
        .iter()
        .map(|(_, r)| (r.id.clone(), r.clone()))
        .collect();
    let cfg = RunConfig {
        workers: 2,
        partial: None,
        resume: false,
        fingerprint: "fp".into(),
    };
    let out = runner::run(items, &cfg, &NoProgress, |row| {
        let d = d.clone();
        async move { jev_run::run_item(&d, row).await }
    })
    .await
    .expect("runs");
    assert_eq!(out.rows.len(), 16);
    for it in &out.rows {
        assert!(it.error.is_none(), "{}: {:?}", it.id, it.error);
        assert_eq!(it.probabilities.len(), it.vocab_cardinality);
        assert!(
            (it.confidence - it.chance_baseline).abs() < 1e-9,
            "{}",
            it.id
        );
        assert!((it.normalized_entropy - 1.0).abs() < 1e-9);
        // Uniform over K: Brier = (1 − 1/K)² + (K − 1)/K².
        let k = it.vocab_cardinality as f64;
        let brier = (1.0 - 1.0 / k).powi(2) + (k - 1.0) / (k * k);
        assert!((it.brier_score - brier).abs() < 1e-9, "{}", it.id);
    }
    let s = jev_run::summarize(&out.rows, 1.0, JevScoring::default());
    let chance = out.rows.iter().map(|i| i.chance_baseline).sum::<f64>() / 16.0;
    assert!((s.metrics["chance_baseline"] - chance).abs() < 1e-12);
    assert_eq!(s.metrics["total_cases"], 16.0);
    let cost = s.metrics["cost_score"];
    assert!(
        (cost - (100.0 - 30.0 * 26f64.log10())).abs() < 1e-9,
        "{cost}"
    );
    for k in [
        "intelligence_score",
        "calibration_score",
        "speed_score",
        "composite_v131",
        "composite_v14",
    ] {
        let v = s.metrics[k];
        assert!((0.0..=100.0).contains(&v), "{k} = {v}");
    }
    // A uniform model scores exactly the uniform guess on every path and
    // type (Brier excess 0) and is not overconfident (hesitation 1).
    assert!(out.rows.iter().all(|i| i.scoring.is_some()));
    for (k, v) in &s.metrics {
        if k.starts_with("brier_excess") {
            assert!(v.abs() < 1e-9, "{k} = {v}");
        }
        if k.starts_with("overconfidence_error") {
            assert_eq!(*v, 0.0, "{k}");
        }
    }
    let slots = |g: &str| s.metrics[&format!("slots_{g}")];
    assert_eq!(slots("first_token") + slots("sequence"), 16.0);
    assert_eq!(slots("boolean") + slots("choice") + slots("score"), 16.0);
    assert_eq!(slots("brackets"), 0.0);
    assert!((s.metrics["mean_hesitation_choice"] - 1.0).abs() < 1e-9);
    // The breakdown has every tier of the rows.
    let tiers: std::collections::BTreeSet<&str> =
        out.rows.iter().map(|i| i.tier.as_str()).collect();
    for t in tiers {
        assert!(s.metrics.contains_key(&format!("accuracy.tier.{t}")), "{t}");
    }
}
