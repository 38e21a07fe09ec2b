//! End-to-end runs of the harnesses on a scripted backend with known answers,
//! and a run that dies mid-way and is resumed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dgem_bench::dataset;
use dgem_bench::runner::{self, NoProgress, RunConfig};
use dgem_bench::suites::bench::{self, BenchItem, BenchRow};
use dgem_bench::suites::quality::ScoringPath;
use dgem_bench::suites::Decider;
use dgem_bench::BenchError;
use dgem_testkit::{scripts, ScriptedBackend};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Six support tickets. The scripted model answers what the `want_*` markers in
/// the ticket say with p = 0.8; the dataset's expectations agree on four items
/// and disagree on one slot of two items, so item accuracy must be 4/6 and slot
/// accuracy 10/12.
fn dataset_text() -> String {
    let t = root().join("templates/support_triage.json.tmpl");
    let t = t.display();
    let row = |id: &str,
               team: &str,
               urgent: &str,
               exp_team: &str,
               exp_urgent: &str,
               domain: &str| {
        format!(
            "{{\"id\":\"{id}\",\"domain\":\"{domain}\",\"tier\":\"t\",\"template\":\"{t}\",\"variables\":{{\"ticket\":\"please want_{team} and want_{urgent}\"}},\"expected\":{{\"team\":\"{exp_team}\",\"urgent\":\"{exp_urgent}\"}}}}\n"
        )
    };
    [
        row("a", "billing", "yes", "billing", "true", "d1"),
        row("b", "support", "no", "support", "no", "d1"),
        row("c", "engineering", "yes", "engineering", "yes", "d1"),
        row("d", "billing", "no", "support", "no", "d2"),
        row("e", "support", "yes", "support", "false", "d2"),
        row("f", "engineering", "no", "ENGINEERING", "No", "d2"),
    ]
    .concat()
        + "{\"id\": \"broken\"\n"
}

fn decider(backend: Arc<ScriptedBackend>) -> Decider {
    Decider {
        engine: Arc::new(dgem_testkit::engine(backend)),
        samples: None,
        layout: None,
        seed: 42,
    }
}

fn load(dir: &tempfile::TempDir) -> dataset::Dataset<BenchRow> {
    let path = dir.path().join("ds.jsonl");
    std::fs::write(&path, dataset_text()).expect("write dataset");
    dataset::load::<BenchRow>(&path, false).expect("loads")
}

fn items(ds: &dataset::Dataset<BenchRow>) -> Vec<(String, (usize, BenchRow))> {
    ds.rows
        .iter()
        .map(|(l, r)| (r.id.clone(), (*l, r.clone())))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_accuracy_comes_out_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(&dir);
    assert_eq!(ds.rows.len(), 6);
    assert_eq!(ds.refused.len(), 1);
    assert_eq!(ds.refused[0].line, 7);
    // Cut short: not JSON, so no id to name it by.
    assert_eq!(ds.refused[0].id, None);
    assert!(ds.refused[0]
        .reason
        .starts_with("the line is not valid JSON"));
    let d = decider(ScriptedBackend::new(scripts::want_marker(0.8)));
    let cfg = RunConfig {
        workers: 3,
        partial: None,
        resume: false,
        fingerprint: "x".into(),
    };
    let path = ds.path.clone();
    let out = runner::run(items(&ds), &cfg, &NoProgress, |(line, row)| {
        let (d, path) = (d.clone(), path.clone());
        async move { bench::run_item(&d, &path, line, row).await }
    })
    .await
    .expect("runs");
    let ids: Vec<&str> = out.rows.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e", "f"]);
    assert!(out.rows.iter().all(|i| i.error.is_none()), "{:?}", out.rows);
    let s = bench::summarize(&out.rows, 1.0);
    assert_eq!(s.metrics["item_accuracy"], 4.0 / 6.0);
    assert_eq!(s.metrics["slot_accuracy"], 10.0 / 12.0);
    assert_eq!(s.metrics["item_accuracy.domain.d1"], 1.0);
    assert_eq!(s.metrics["item_accuracy.domain.d2"], 1.0 / 3.0);
    let a = &out.rows[0].slots["team"];
    assert_eq!(a.answer.as_deref(), Some("billing"));
    // Calibration off: the script's 0.8 on the marked label, 0.1 on the other two.
    assert!((a.confidence - 0.8).abs() < 1e-9, "{}", a.confidence);
    assert!((a.probabilities["support"] - 0.1).abs() < 1e-9);
    // Every slot at confidence 0.8 (team) or 0.8 (urgent: 0.8 vs 0.2): ECE = |10/12 − 0.8|.
    assert!((s.metrics["ece_10bin"] - (10.0 / 12.0 - 0.8)).abs() < 1e-9);
    // Per type and scoring path: each slot records both.
    assert_eq!(a.question_type.as_deref(), Some("choice"));
    assert_eq!(
        out.rows[0].slots["urgent"].question_type.as_deref(),
        Some("boolean")
    );
    assert!(out
        .rows
        .iter()
        .flat_map(|i| i.slots.values())
        .all(|s| s.scoring == Some(ScoringPath::FirstToken)));
    let m = &s.metrics;
    let near = |k: &str, want: f64| assert!((m[k] - want).abs() < 1e-9, "{k} = {}", m[k]);
    // urgent: 5 of 6 right at 0.8/0.2 → Brier (5·2·0.2² + 2·0.8²)/6 = 0.28
    // against the uniform 0.5; team: 5 of 6 at 0.8/0.1/0.1 → right 0.06,
    // wrong 0.8² + 0.9² + 0.1² = 1.46 → (5·0.06 + 1.46)/6 against 1 − 1/3.
    near("slots_boolean", 6.0);
    near("slot_accuracy_boolean", 5.0 / 6.0);
    near("brier_boolean", 0.28);
    near("brier_excess_boolean", 0.28 - 0.5);
    near("brier_choice", 1.76 / 6.0);
    near("brier_uniform_choice", 2.0 / 3.0);
    near("chance_choice", 1.0 / 3.0);
    near("slots_first_token", 12.0);
    near("brier_first_token", (0.28 + 1.76 / 6.0) / 2.0);
    near(
        "brier_excess",
        (0.28 + 1.76 / 6.0) / 2.0 - (0.5 + 2.0 / 3.0) / 2.0,
    );
    // Hesitation H / ln K: 0.7219 for 0.8/0.2, 0.5817 for 0.8/0.1/0.1.
    let h = |p: &[f64]| -p.iter().map(|x| x * x.ln()).sum::<f64>() / (p.len() as f64).ln();
    near("mean_hesitation_boolean", h(&[0.8, 0.2]));
    near("mean_hesitation_choice", h(&[0.8, 0.1, 0.1]));
    near("overconfidence_error", 0.0);
    near("slots_sequence", 0.0);
    assert!(!m.contains_key("brier_excess_sequence"));
    // Calibration over the same rows.
    let (c, bins) = dgem_bench::suites::calibration::summarize(&out.rows);
    assert_eq!(c.metrics["accuracy"], 10.0 / 12.0);
    assert_eq!(bins[8].count, 12);
    let svg = dir.path().join("r.svg");
    dgem_bench::svg::reliability_svg(&bins, "scripted", &svg).expect("draws");
    let text = std::fs::read_to_string(&svg).expect("svg");
    assert!(text.starts_with("<svg") && text.contains("n=12"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_run_resumes_without_losing_or_repeating_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(&dir);
    let partial = dir.path().join("r.json.partial");
    let d = decider(ScriptedBackend::new(scripts::want_marker(0.8)));
    let cfg = RunConfig {
        workers: 1,
        partial: Some(partial.clone()),
        resume: false,
        fingerprint: "fp".into(),
    };
    let path = ds.path.clone();
    // First run: the engine "dies" on the fourth item.
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let first = runner::run(
        items(&ds),
        &cfg,
        &NoProgress,
        |(line, row): (usize, BenchRow)| {
            let (d, path, c) = (d.clone(), path.clone(), c.clone());
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 3 {
                    return Err(BenchError::Worker("killed".into()));
                }
                bench::run_item(&d, &path, line, row).await
            }
        },
    )
    .await;
    assert!(first.is_err());
    let text = std::fs::read_to_string(&partial).expect("partial");
    assert_eq!(
        text.lines().count(),
        1 + 3,
        "header + 3 finished rows:\n{text}"
    );
    // Simulate a kill in the middle of writing a line.
    std::fs::write(&partial, text + "{\"id\":\"d\",\"row\":{\"id\":").expect("cut line");

    // A different fingerprint is refused.
    let wrong = RunConfig {
        resume: true,
        fingerprint: "other".into(),
        ..cfg.clone()
    };
    let r = runner::run(
        items(&ds),
        &wrong,
        &NoProgress,
        |(line, row): (usize, BenchRow)| {
            let (d, path) = (d.clone(), path.clone());
            async move { bench::run_item(&d, &path, line, row).await }
        },
    )
    .await;
    assert!(matches!(r, Err(BenchError::ResumeMismatch { .. })));

    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let resume = RunConfig {
        resume: true,
        workers: 2,
        ..cfg
    };
    let out = runner::run(
        items(&ds),
        &resume,
        &NoProgress,
        |(line, row): (usize, BenchRow)| {
            let (d, path, s2) = (d.clone(), path.clone(), s2.clone());
            async move {
                s2.lock().expect("lock").push(row.id.clone());
                bench::run_item(&d, &path, line, row).await
            }
        },
    )
    .await
    .expect("resumes");
    assert_eq!(out.resumed, 3);
    assert_eq!(out.ran, 3);
    let mut ran = seen.lock().expect("lock").clone();
    ran.sort();
    assert_eq!(ran, ["d", "e", "f"]);
    let ids: Vec<&str> = out.rows.iter().map(|i: &BenchItem| i.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e", "f"]);
    let s = bench::summarize(&out.rows, 1.0);
    assert_eq!(s.metrics["item_accuracy"], 4.0 / 6.0);
    // The partial file now holds each row exactly once.
    let text = std::fs::read_to_string(&partial).expect("partial");
    assert_eq!(text.lines().count(), 1 + 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_errors_are_recorded_and_engine_failures_stop_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(&dir);
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let d = decider(backend.clone());
    let mut row = ds.rows[0].1.clone();
    row.template = PathBuf::from("no/such/template.json.tmpl");
    let item = bench::run_item(&d, &ds.path, 1, row)
        .await
        .expect("recorded");
    assert!(
        item.error
            .as_deref()
            .is_some_and(|e| e.contains("not found")),
        "{:?}",
        item.error
    );
    backend.fail_next(1);
    let r = bench::run_item(&d, &ds.path, 1, ds.rows[0].1.clone()).await;
    assert!(matches!(r, Err(BenchError::Engine { .. })), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unscorable_expected_values_are_item_errors_not_wrong_answers() {
    // Regression: an expected slot that is not a question, or a gold value that is
    // not an allowed answer, was scored as a wrong answer and lowered accuracy.
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(&dir);
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let d = decider(backend.clone());
    let mut unknown_slot = ds.rows[0].1.clone();
    unknown_slot.expected = [("nosuch".to_owned(), serde_json::json!("billing"))]
        .into_iter()
        .collect();
    let item = bench::run_item(&d, &ds.path, 1, unknown_slot)
        .await
        .expect("recorded");
    let e = item.error.expect("item error");
    assert!(e.contains("`expected` names `nosuch`"), "{e}");
    let mut bad_gold = ds.rows[0].1.clone();
    bad_gold.expected = [("team".to_owned(), serde_json::json!("marketing"))]
        .into_iter()
        .collect();
    let item = bench::run_item(&d, &ds.path, 1, bad_gold)
        .await
        .expect("recorded");
    let e = item.error.expect("item error");
    assert!(e.contains("`expected.team` must be one of [\"billing\", \"support\", \"engineering\"]. Given: `marketing`"), "{e}");
    assert!(item.slots.is_empty(), "nothing was scored");
}

/// Issue 12, defect 10: one slow item (a backend timeout) aborted the whole
/// run. It is now recorded as an item failure, the others are scored, and a
/// `--resume` runs only the failed item again; a model failure still stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_timed_out_item_is_recorded_and_the_run_goes_on() {
    use dgem_backend::BackendError;
    use dgem_engine::DecideError;
    let dir = tempfile::tempdir().expect("tempdir");
    let partial = dir.path().join("r.json.partial");
    let cfg = RunConfig {
        workers: 2,
        partial: Some(partial.clone()),
        resume: false,
        fingerprint: "fp".into(),
    };
    let items: Vec<(String, u32)> = (0..5).map(|i| (format!("i{i}"), i)).collect();
    let slow_once = Arc::new(AtomicUsize::new(1));
    let job = |slow: Arc<AtomicUsize>| {
        move |i: u32| {
            let slow = slow.clone();
            async move {
                if i == 2 && slow.fetch_sub(1, Ordering::SeqCst) == 1 {
                    return Err(BenchError::Engine {
                        id: format!("i{i}"),
                        source: DecideError::Backend(BackendError::Timeout(120_000)),
                    });
                }
                Ok(i * 10)
            }
        }
    };
    let out = runner::run(items.clone(), &cfg, &NoProgress, job(slow_once.clone()))
        .await
        .expect("the run goes on");
    assert_eq!(out.rows, vec![0, 10, 30, 40]);
    assert_eq!(out.failed.len(), 1);
    assert_eq!(out.failed[0].id, "i2");
    assert!(
        out.failed[0].error.contains("timed out"),
        "{:?}",
        out.failed
    );
    // Resume: only the failed item runs.
    let out = runner::run(
        items.clone(),
        &RunConfig {
            resume: true,
            ..cfg.clone()
        },
        &NoProgress,
        job(slow_once),
    )
    .await
    .expect("resumed");
    assert_eq!((out.resumed, out.ran), (4, 1));
    assert_eq!(out.rows, vec![0, 10, 20, 30, 40]);
    assert!(out.failed.is_empty());
    // A model failure is not an item's own problem: it stops the run.
    let err = runner::run(items, &cfg, &NoProgress, |i: u32| async move {
        if i == 1 {
            return Err(BenchError::Engine {
                id: "i1".into(),
                source: DecideError::Backend(BackendError::Model("weights gone".into())),
            });
        }
        Ok(i)
    })
    .await
    .expect_err("stops");
    assert!(err.to_string().contains("weights gone"), "{err}");
}
