//! Regression: `dgem plan -d rows.jsonl` and `dgem bench-jev` skipped the
//! JevBench rows they could not map (a score row whose `expected` is an
//! integer, a row whose `state` is a JSON object) and reported `refused 0`.
//! Those rows are now mapped; what still cannot be mapped is refused with its
//! id and reason, counted and listed in every report.

use std::path::Path;
use std::sync::Arc;

use dgem_bench::dataset::{self, Dataset};
use dgem_bench::receipt::DatasetInfo;
use dgem_bench::report::{self, Format};
use dgem_bench::runner::{self, NoProgress, RunConfig};
use dgem_bench::suites::jev::JevRow;
use dgem_bench::suites::jev_plan::plan_rows;
use dgem_bench::suites::jev_run::{self, JevScoring};
use dgem_bench::suites::{Decider, REFUSED_TABLE};
use dgem_testkit::{scripts, ScriptedBackend};
use serde_json::{json, Value};

/// Six rows: four JevBench could write (two with an integer `expected`, one
/// with an object state), two that cannot be mapped.
fn rows() -> Vec<Value> {
    let q = |kind: &str| json!({"type": kind, "instructions": "Decide."});
    vec![
        json!({"id": "choice", "tier": "easy", "state": "please want_b", "question": q("choice"),
               "labels": ["a", "b"], "expected": "b"}),
        json!({"id": "age-int", "tier": "easy", "state": "want_22", "question": q("score"),
               "labels": ["20", "21", "22", "23", "24"], "expected": 22}),
        json!({"id": "sev-int", "tier": "hard", "state": "want_low", "question": q("score"),
               "labels": ["none", "low", "medium", "high", "critical"], "expected": 2}),
        json!({"id": "obj-state", "tier": "hard", "state": {"ticket": "want_yes", "plan": "pro"},
               "question": q("noul"), "labels": ["yes", "no"], "expected": "yes"}),
        json!({"id": "list-state", "state": ["a"], "question": q("noul"),
               "labels": ["yes", "no"], "expected": "no"}),
        json!({"id": "sev-9", "state": "s", "question": q("score"),
               "labels": ["none", "low", "medium", "high", "critical"], "expected": 9}),
    ]
}

fn load(dir: &Path, rows: &[Value]) -> Dataset<JevRow> {
    let path = dir.join("rows.jsonl");
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).expect("write dataset");
    dataset::load::<JevRow>(&path, false).expect("loads")
}

fn refusals(ds_refused: &[dataset::Refused]) -> Vec<(usize, Option<&str>, &str)> {
    ds_refused
        .iter()
        .map(|r| (r.line, r.id.as_deref(), r.reason.as_str()))
        .collect()
}

const LIST_STATE: &str = "`state`: must be a string or a JSON object. Given: `[\"a\"]`";
const SEV_9: &str = "`expected` must be one of the levels [\"none\", \"low\", \"medium\", \"high\", \"critical\"] or its 1-based position 1..=5. Given: `9`";

#[test]
fn plan_counts_integer_score_expected_as_mapped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(dir.path(), &rows());
    let engine = dgem_testkit::engine(ScriptedBackend::new(scripts::want_marker(0.9)));
    let report = plan_rows(&engine, &ds, true).expect("plans");
    assert_eq!(report.items, 6);
    assert_eq!(report.planned, 4);
    assert_eq!(report.refused, 2);
    assert_eq!(
        refusals(&report.refusals),
        [
            (5, Some("list-state"), LIST_STATE),
            (6, Some("sev-9"), SEV_9)
        ]
    );
    let planned: Vec<&str> = report
        .rows
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(planned, ["choice", "age-int", "sev-int", "obj-state"]);
    assert_eq!(report.scoring.first_token + report.scoring.sequence, 4);
    // The object state reaches the prompt as JSON (the toy tokenizer's
    // decoding moves the spaces), as `dgem decide` writes it.
    let prompt = report.rows[3]["plan"]["stages"][0][0]["prompt"]
        .as_str()
        .expect("prompt");
    assert!(
        prompt.contains("{\"ticket\":\" want_yes\",\" plan\":\" pro\"}"),
        "{prompt}"
    );
}

#[test]
fn plan_refuses_a_row_the_engine_refuses_with_its_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Labels sharing their first token are scored by sequence, which checks
    // the prompt against the context.
    let long = "word ".repeat(200);
    let ds = load(
        dir.path(),
        &[
            json!({"id": "long", "state": long, "question": {"type": "choice"},
                   "labels": ["refund_full", "refund_partial"], "expected": "refund_full"}),
        ],
    );
    let engine = dgem_testkit::engine(ScriptedBackend::with_context(64, scripts::want_marker(0.9)));
    let report = plan_rows(&engine, &ds, false).expect("plans");
    assert_eq!((report.items, report.planned, report.refused), (1, 0, 1));
    let r = &report.refusals[0];
    assert_eq!((r.line, r.id.as_deref()), (1, Some("long")));
    assert!(r.reason.contains("the context holds 64"), "{}", r.reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_jev_refuses_unmappable_row_instead_of_skipping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(dir.path(), &rows());
    assert_eq!(ds.rows.len(), 4);
    assert_eq!(
        refusals(&ds.refused),
        [
            (5, Some("list-state"), LIST_STATE),
            (6, Some("sev-9"), SEV_9)
        ]
    );
    let d = Decider {
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
    // The mapped rows are decided and scored against their mapped labels.
    let got: Vec<(&str, &str, Option<&str>, bool)> = out
        .rows
        .iter()
        .map(|i| {
            (
                i.id.as_str(),
                i.expected.as_str(),
                i.actual.as_deref(),
                i.accurate,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("choice", "b", Some("b"), true),
            ("age-int", "22", Some("22"), true),
            ("sev-int", "low", Some("low"), true),
            ("obj-state", "yes", Some("yes"), true),
        ]
    );
    let mut s = jev_run::summarize(&out.rows, 1.0, JevScoring::default());
    s.record_refused(&ds.refused);
    assert_eq!(s.metrics["total_cases"], 4.0);
    assert_eq!(s.metrics["accuracy"], 1.0);
    assert_eq!(s.metrics["refused"], 2.0);
    // Table and Markdown: `refused 2` in the summary, each refusal listed.
    let table = report::render(Format::Table, &s.tables, &s.metrics, &s.breakdown, &[]);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["refused", "|", "2"]),
        "{table}"
    );
    let listed = s
        .tables
        .iter()
        .find(|t| t.title == REFUSED_TABLE)
        .expect("a table of refused rows");
    assert_eq!(
        listed.rows,
        [
            vec![
                "5".to_owned(),
                "list-state".to_owned(),
                LIST_STATE.to_owned()
            ],
            vec!["6".to_owned(), "sev-9".to_owned(), SEV_9.to_owned()],
        ]
    );
    let md = report::render(Format::Md, &s.tables, &s.metrics, &s.breakdown, &[]);
    assert!(md.contains("| refused | 2 |"), "{md}");
    assert!(md.contains("| 6 | sev-9 |"), "{md}");
    // JSON report and receipt.
    let js: Value = serde_json::from_str(&report::render(
        Format::Json,
        &s.tables,
        &s.metrics,
        &s.breakdown,
        &[],
    ))
    .expect("json");
    assert_eq!(js["metrics"]["refused"], 2.0);
    assert_eq!(js["breakdown"]["refused"][1]["id"], "sev-9");
    assert_eq!(js["breakdown"]["refused"][1]["reason"], SEV_9);
    let info = serde_json::to_value(DatasetInfo::of(&ds)).expect("json");
    assert_eq!(info["rows"], 4);
    assert_eq!(info["refused"][0]["id"], "list-state");
    assert_eq!(info["refused"][0]["line"], 5);
}

#[test]
fn a_clean_run_reports_refused_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = load(dir.path(), &rows()[..4]);
    assert!(ds.refused.is_empty());
    let mut s = jev_run::summarize(&[], 1.0, JevScoring::default());
    s.record_refused(&ds.refused);
    assert_eq!(s.metrics["refused"], 0.0);
    assert!(s.tables.iter().all(|t| t.title != REFUSED_TABLE));
    assert_eq!(s.breakdown["refused"], json!([]));
}
