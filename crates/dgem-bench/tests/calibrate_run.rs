//! `dgem calibrate` rows through the shared runner on a scripted backend: the
//! policy hash and slot types are recorded, a model whose confidence equals its
//! hit rate gets T = 1, and a killed run resumes to the same fit.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dgem_bench::calibrate::{self, CalibrateItem, FitOptions};
use dgem_bench::dataset;
use dgem_bench::runner::{self, NoProgress, RunConfig};
use dgem_bench::suites::bench::BenchRow;
use dgem_bench::suites::Decider;
use dgem_bench::BenchError;
use dgem_core::after::calibration::policy_hash;
use dgem_core::schema::QuestionKind;
use dgem_testkit::{scripts, ScriptedBackend};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const TEAMS: [&str; 3] = ["billing", "support", "engineering"];

/// 20 tickets; the scripted model gives 0.8 to the marked answer, and the
/// expectation agrees with the marker on 16 of them: confidence 0.8, hit rate 0.8.
fn dataset_text() -> String {
    let t = root().join("templates/support_triage.json.tmpl");
    (0..20)
        .map(|i| {
            let team = TEAMS[i % 3];
            let urgent = if i % 2 == 0 { "yes" } else { "no" };
            let (exp_team, exp_urgent) = if i % 5 == 0 {
                (TEAMS[(i + 1) % 3], if urgent == "yes" { "no" } else { "yes" })
            } else {
                (team, urgent)
            };
            format!(
                "{{\"id\":\"r{i:02}\",\"template\":\"{}\",\"variables\":{{\"ticket\":\"please want_{team} and want_{urgent}\"}},\"expected\":{{\"team\":\"{exp_team}\",\"urgent\":\"{exp_urgent}\"}}}}\n",
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

type Items = Vec<(String, (usize, BenchRow))>;

fn load(dir: &tempfile::TempDir) -> (dataset::Dataset<BenchRow>, Items) {
    let path = dir.path().join("ds.jsonl");
    std::fs::write(&path, dataset_text()).expect("write dataset");
    let ds = dataset::load::<BenchRow>(&path, true).expect("loads");
    let items = ds
        .rows
        .iter()
        .map(|(l, r)| (r.id.clone(), (*l, r.clone())))
        .collect();
    (ds, items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calibrated_model_gets_t_1_and_a_killed_run_resumes_to_the_same_fit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ds, items) = load(&dir);
    let d = decider();
    let path = ds.path.clone();
    let cfg = RunConfig {
        workers: 2,
        partial: None,
        resume: false,
        fingerprint: "fp".into(),
    };
    let job = |d: Decider, path: PathBuf| {
        move |(line, row): (usize, BenchRow)| {
            let (d, path) = (d.clone(), path.clone());
            async move { calibrate::run_row(&d, &path, line, row).await }
        }
    };
    let full = runner::run(
        items.clone(),
        &cfg,
        &NoProgress,
        job(d.clone(), path.clone()),
    )
    .await
    .expect("runs");
    let rows: Vec<CalibrateItem> = full.rows;
    assert_eq!(rows.len(), 20);
    // The recorded hash is the hash of the rendered schema.
    let text = std::fs::read_to_string(root().join("templates/support_triage.json.tmpl"))
        .expect("template");
    let r0 = &ds.rows[0].1;
    let (schema, _) = d
        .prepare(
            &r0.id,
            &r0.template.display().to_string(),
            &text,
            &r0.variables,
        )
        .expect("renders");
    assert_eq!(
        rows[0].policy_hash.as_deref(),
        Some(policy_hash(&schema).as_str())
    );
    assert_eq!(rows[0].kinds["urgent"], "boolean");
    assert_eq!(rows[0].kinds["team"], "choice");

    let labelled = calibrate::collect(&rows);
    assert_eq!(
        labelled.policies.len(),
        1,
        "one policy: the state is not hashed"
    );
    assert_eq!(labelled.of(QuestionKind::Boolean).len(), 20);
    let fitted = calibrate::calibrate(&labelled, FitOptions::new(2, false, 200, 42).expect("k"));
    for kind in [QuestionKind::Boolean, QuestionKind::Choice] {
        let f = &fitted.of(kind).figures;
        // Confidence 0.8 on every slot and 80% right: already calibrated, so
        // the fit is T = 1, or, when its two folds' fits raise the held-out
        // NLL (they differ by which rows are right), no temperature at all;
        // either leaves the numbers as read.
        if let Some(t) = f.temperature {
            assert!((t - 1.0).abs() < 1e-4, "{kind:?}: T = {t}");
        } else {
            let why = f.unset_reason.as_deref().unwrap_or_default();
            assert!(
                why.contains("T = 1.000 made held-out figures worse"),
                "{kind:?}: {why}"
            );
        }
        assert!((f.scores.expect("scores").accuracy - 0.8).abs() < 1e-12);
    }
    assert!(fitted.of(QuestionKind::Score).figures.temperature.is_none());

    // Kill the run after 5 rows, then resume.
    let partial = dir.path().join("r.json.partial");
    let cfg = RunConfig {
        workers: 1,
        partial: Some(partial.clone()),
        ..cfg
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let (d2, p2) = (d.clone(), path.clone());
    let first = runner::run(items.clone(), &cfg, &NoProgress, move |(line, row)| {
        let (d, path, c) = (d2.clone(), p2.clone(), c.clone());
        async move {
            if c.fetch_add(1, Ordering::SeqCst) == 5 {
                return Err(BenchError::Worker("killed".into()));
            }
            calibrate::run_row(&d, &path, line, row).await
        }
    })
    .await;
    assert!(first.is_err());
    let resume = RunConfig {
        resume: true,
        ..cfg
    };
    let out = runner::run(items, &resume, &NoProgress, job(d, path))
        .await
        .expect("resumes");
    assert_eq!((out.resumed, out.ran), (5, 15));
    let again = calibrate::calibrate(
        &calibrate::collect(&out.rows),
        FitOptions::new(2, false, 200, 42).expect("k"),
    );
    assert_eq!(
        again, fitted,
        "the resumed run fits exactly as the full one"
    );
}
