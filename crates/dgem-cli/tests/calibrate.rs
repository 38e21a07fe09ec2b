//! End-to-end tests of `dgem calibrate`.
//!
//! Without a model: refits from a hand-made receipt, and the input errors
//! (exit 1). The real-model test needs `DGEM_TEST_MODEL` (set by
//! `scripts/test`); under CI a missing model fails it instead of skipping it.

#![allow(clippy::print_stderr)]

use serde_json::{json, Value};

mod common;
use common::{dgem, model, stderr};

/// A `dgem calibrate` receipt of `n` rows: `urgent` read at 0.9 and right on
/// 60% of rows, `team` at 0.7 and right on 70%.
fn receipt(n: usize) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let slot = |probs: Value, gold: usize| {
                json!({"expected": "x", "answer": "x", "correct": gold == 0, "confidence": 0.9,
                       "hesitation": 0.4, "probabilities": probs, "gold": gold})
            };
            json!({
                "item": {"id": format!("r{i}"), "line": i + 1, "domain": "", "tier": "", "correct": false,
                         "slots": {
                             "urgent": slot(json!({"yes": 0.9, "no": 0.1}), usize::from(i % 5 >= 3)),
                             "team": slot(json!({"billing": 0.7, "support": 0.2, "engineering": 0.1}), usize::from(i % 10 >= 7)),
                         },
                         "wall_ms": 1.0, "reads": 1, "extended": null, "error": null},
                "template": "templates/support_triage.json.tmpl",
                "policy_hash": "feed",
                "kinds": {"urgent": "boolean", "team": "choice"},
            })
        })
        .collect();
    json!({
        "format": "dgem.bench.receipt/v1", "suite": "calibrate", "created_unix": 0,
        "dataset": {"path": "d.jsonl", "sha256": "00", "rows": n, "skipped": []},
        "model": {"id": "toy", "sha256": "ab".repeat(32), "backend": "scripted", "label_mode": "words", "calibration": false},
        "dgem": {"version": "0", "git_revision": "unknown"}, "seed": 42, "settings": {},
        "run": {"workers": 1, "resumed": 0, "ran": n, "elapsed_s": 1.0, "decisions_per_s": 1.0},
        "metrics": {}, "breakdown": {}, "items": items,
    })
}

fn read(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("file")).expect("json")
}

#[test]
fn refits_from_a_receipt_and_reports_too_few_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = dir.path().join("r.json");
    std::fs::write(&r, receipt(40).to_string()).expect("write");
    let out = dir.path().join("cal.json");
    let svg = dir.path().join("cal.svg");
    let (rs, os, ss) = (
        r.to_str().expect("utf8"),
        out.to_str().expect("utf8"),
        svg.to_str().expect("utf8"),
    );
    let o = dgem(
        &[
            "calibrate",
            "--from-receipt",
            rs,
            "-o",
            os,
            "--svg",
            ss,
            "--bootstrap",
            "200",
        ],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("5-fold cross-validation"), "{table}");
    assert!(
        table.contains("ece_10bin") && table.contains("T per fold"),
        "{table}"
    );
    let f = read(&out);
    assert_eq!(f["format"], "dgem-calibration/1");
    assert_eq!(f["model_sha256"], "ab".repeat(32));
    assert_eq!(
        f["policies"],
        json!([{"template": "templates/support_triage.json.tmpl", "policy_hash": "feed"}])
    );
    assert_eq!((f["k"].as_u64(), f["rows"].as_u64()), (Some(5), Some(40)));
    // Over-confident reads: the fit flattens them.
    assert!(
        f["temperature"]["boolean"]
            .as_f64()
            .is_some_and(|t| t > 1.0),
        "{f}"
    );
    assert!(f["temperature"]["score"].is_null());
    assert_eq!(
        f["held_out"]["boolean"]["fold_temperatures"]
            .as_array()
            .map(Vec::len),
        Some(5)
    );
    assert!(f["held_out"]["score"]["unset_reason"].as_str().is_some());
    assert!(std::fs::read_to_string(&svg)
        .expect("svg")
        .starts_with("<svg"));
    assert!(
        stderr(&o).contains("left unset (no temperature applied): score"),
        "{}",
        stderr(&o)
    );

    // 40 rows cannot make 25 folds of 2 slots: reported, exit 1, no file.
    let out2 = dir.path().join("none.json");
    let o = dgem(
        &[
            "calibrate",
            "--from-receipt",
            rs,
            "-k",
            "25",
            "-o",
            out2.to_str().expect("utf8"),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("no question type could be fitted"), "{e}");
    assert!(
        e.contains("boolean: only 40 labelled slot(s); 25-fold cross-validation needs at least 50"),
        "{e}"
    );
    assert!(!out2.exists());

    // In-sample is labelled as such.
    let o = dgem(
        &["calibrate", "--from-receipt", rs, "--in-sample", "-o", os],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("IN-SAMPLE"));
    assert_eq!(read(&out)["held_out"]["method"], "in_sample");
}

/// `--from-receipt` twice fits the rows of both receipts together; a row id in
/// both, or receipts of two models, is refused naming both files.
#[test]
fn refits_from_several_receipts_together() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf8").to_owned();
    let (a, b, dup, other) = (
        path("a.json"),
        path("b.json"),
        path("dup.json"),
        path("other.json"),
    );
    let mut second = receipt(20);
    for item in second["items"].as_array_mut().expect("items") {
        let id = item["item"]["id"].as_str().expect("id").replace('r', "s");
        item["item"]["id"] = json!(id);
    }
    std::fs::write(&a, receipt(20).to_string()).expect("write");
    std::fs::write(&b, second.to_string()).expect("write");
    std::fs::write(&dup, receipt(20).to_string()).expect("write");
    let mut foreign = second.clone();
    foreign["model"]["sha256"] = json!("cd".repeat(32));
    std::fs::write(&other, foreign.to_string()).expect("write");
    let out = path("cal.json");
    let args = |x: &str, y: &str| {
        vec![
            "calibrate".to_owned(),
            "--from-receipt".to_owned(),
            x.to_owned(),
            "--from-receipt".to_owned(),
            y.to_owned(),
            "-o".to_owned(),
            out.clone(),
            "--bootstrap".to_owned(),
            "50".to_owned(),
        ]
    };
    let run = |v: Vec<String>| dgem(&v.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let o = run(args(&a, &b));
    assert!(o.status.success(), "{}", stderr(&o));
    let f = read(std::path::Path::new(&out));
    assert_eq!(f["rows"].as_u64(), Some(40), "{f}");
    assert_eq!(f["held_out"]["boolean"]["slots"].as_u64(), Some(40), "{f}");

    let o = run(args(&a, &dup));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("row id `r0` is in both") && e.contains("dup.json"),
        "{e}"
    );

    let o = run(args(&a, &other));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("must come from one model") && e.contains(&"cd".repeat(32)),
        "{e}"
    );
}

#[test]
fn bad_inputs_exit_1_naming_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = dgem(&["calibrate", "-d", "/nonexistent/rows.jsonl"], None);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(
        "`--dataset` must be a JSON Lines file. Given: `/nonexistent/rows.jsonl` (no such file)"
    ));

    let o = dgem(
        &["calibrate", "-d", "data/eval_dataset.jsonl", "-k", "1"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("`--in-sample`") && stderr(&o).contains("Given: 1"),
        "{}",
        stderr(&o)
    );

    let d = dir.path().join("d.jsonl");
    std::fs::write(&d, "{\"id\":\"a\",\"template\":\"support_triage\",\"expected\":{\"team\":\"billing\"}}\n{oops\n").expect("write");
    let o = dgem(
        &["calibrate", "-d", d.to_str().expect("utf8"), "--strict"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("d.jsonl:2: malformed row"),
        "{}",
        stderr(&o)
    );

    let o = dgem(
        &["calibrate", "-d", d.to_str().expect("utf8"), "--resume"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("`--resume` needs `--receipt`"),
        "{}",
        stderr(&o)
    );

    let mut bench = receipt(4);
    bench["suite"] = json!("bench");
    let r = dir.path().join("bench.json");
    std::fs::write(&r, bench.to_string()).expect("write");
    let o = dgem(
        &["calibrate", "--from-receipt", r.to_str().expect("utf8")],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("with suite `bench`"), "{}", stderr(&o));

    let o = dgem(&["calibrate"], None);
    assert_eq!(o.status.code(), Some(1), "clap usage errors are the user's");

    // An `--out` that cannot be written is refused before any row is read
    // (it was found only after every read, exit 2). The missing folder is
    // inside this test's own: a fixed path such as /nonexistent may exist
    // where tests run as root.
    let missing = dir.path().join("missing");
    let missing_out = missing.join("x.json").display().to_string();
    let folder_msg = format!("the folder {} does not exist", missing.display());
    let folder = dir.path().display().to_string();
    for (out, needle) in [
        (missing_out.as_str(), folder_msg.as_str()),
        (folder.as_str(), "is a folder"),
    ] {
        let o = dgem(
            &["calibrate", "-d", "data/eval_dataset.jsonl", "-o", out],
            None,
        );
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    }
}

#[test]
fn calibrate_on_the_real_model_writes_the_file_with_the_model_sha() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    // The first six support rows: folds (k = 2) of sup-01…06 are 0,1,1,1,0,1.
    let rows: String = std::fs::read_to_string(common::root().join("data/eval_dataset.jsonl"))
        .expect("dataset")
        .lines()
        .take(6)
        .map(|l| format!("{l}\n"))
        .collect();
    let d = dir.path().join("six.jsonl");
    std::fs::write(&d, rows).expect("write");
    let (out, rec, svg) = (
        dir.path().join("cal.json"),
        dir.path().join("r.json"),
        dir.path().join("c.svg"),
    );
    let s = |p: &std::path::Path| p.to_str().expect("utf8").to_owned();
    let o = dgem(
        &[
            "calibrate",
            "-d",
            &s(&d),
            "-k",
            "2",
            "-w",
            "2",
            "-o",
            &s(&out),
            "--receipt",
            &s(&rec),
            "--svg",
            &s(&svg),
            "--bootstrap",
            "200",
        ],
        Some(&m),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let f = read(&out);
    let sha = f["model_sha256"]
        .as_str()
        .expect("the embedded model has a sha256");
    assert_eq!(sha.len(), 64);
    assert!(f["model_id"].as_str().is_some_and(|s| !s.is_empty()));
    let policies = f["policies"].as_array().expect("policies");
    assert_eq!(policies.len(), 1);
    assert_eq!(
        policies[0]["template"],
        "templates/support_triage.json.tmpl"
    );
    assert_eq!(policies[0]["policy_hash"].as_str().map(str::len), Some(64));
    assert_eq!(f["rows"], 6);
    for t in ["boolean", "choice"] {
        // A temperature in range, or none when it made a held-out figure
        // worse (then the reason says so and the figures are kept).
        match f["temperature"][t].as_f64() {
            Some(v) => assert!((0.05..=20.0).contains(&v), "{f}"),
            None => {
                let why = f["held_out"][t]["unset_reason"]
                    .as_str()
                    .unwrap_or_default();
                assert!(why.contains("made held-out figures worse"), "{f}");
                assert!(f["held_out"][t]["scores"].is_object(), "{f}");
            }
        }
        assert_eq!(f["held_out"][t]["slots"], 6);
    }
    let r = read(&rec);
    assert_eq!(r["suite"], "calibrate");
    assert_eq!(r["model"]["sha256"], sha);
    assert!(!dir.path().join("r.json.partial").exists());
    assert!(svg.exists());

    // Six rows cannot make 5 folds of 2 slots: said plainly, exit 1.
    let o = dgem(
        &[
            "calibrate",
            "--from-receipt",
            &s(&rec),
            "-k",
            "5",
            "-o",
            &s(&dir.path().join("x.json")),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("only 6 labelled slot(s); 5-fold cross-validation needs at least 10"),
        "{e}"
    );
}
