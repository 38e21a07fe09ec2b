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
            "--fail-under",
            "brier_excess_brackets=0",
        ],
        Some(&m),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // No choice of more than 26 options: the brackets gate holds vacuously.
    assert!(
        common::stderr(&o)
            .contains("gate skipped: brier_excess_brackets: no slots (slots_brackets = 0)"),
        "{}",
        common::stderr(&o)
    );
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("receipt")).expect("json");
    let paths = ["first_token", "sequence"];
    let slots = |g: &str| r["metrics"][format!("slots_{g}")].as_f64().unwrap_or(-1.0);
    assert_eq!(
        slots("first_token") + slots("sequence"),
        4.0,
        "{}",
        r["metrics"]
    );
    assert_eq!(slots("boolean") + slots("choice"), 4.0, "{}", r["metrics"]);
    assert!(r["metrics"]["brier_excess"].is_f64());
    assert!(r["breakdown"]["by_path_type"]["all"]["slots"] == 4);
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
            assert!(
                paths.contains(&slot["scoring"].as_str().unwrap_or("")),
                "{slot}"
            );
            assert!(["boolean", "choice"].contains(&slot["question_type"].as_str().unwrap_or("")));
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

/// JevBench rows: a plain choice row, a score row whose `expected` is an
/// integer, a row whose `state` is a JSON object, and (`bad`) one whose
/// `state` is a list, which cannot be mapped.
fn jev_rows(dir: &std::path::Path, with_bad: bool) -> String {
    let q = |kind: &str| json!({"type": kind, "instructions": "Decide."});
    let mut rows = vec![
        json!({"id": "choice", "state": "A refund, please.", "question": q("choice"),
               "labels": ["refund", "replacement"], "expected": "refund"}),
        json!({"id": "sev-int", "state": "The logo is misaligned.", "question": q("score"),
               "labels": ["none", "low", "medium", "high", "critical"], "expected": 2}),
        json!({"id": "obj-state", "state": {"ticket": "charged twice", "plan": "pro"},
               "question": q("noul"), "labels": ["yes", "no"], "expected": true}),
    ];
    if with_bad {
        rows.push(json!({"id": "bad", "state": [1], "question": q("noul"),
                         "labels": ["yes", "no"], "expected": "no"}));
    }
    write_jsonl(dir, "rows.jsonl", &rows)
}

/// `rows` as a JSON Lines file `name` in `dir`; its path.
fn write_jsonl(dir: &std::path::Path, name: &str, rows: &[Value]) -> String {
    let path = dir.join(name);
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf8").to_owned()
}

/// `dgem bench-jev` on the real model records each row's scoring path and
/// reports the per-path and per-type metrics the quality gate reads.
#[test]
fn bench_jev_on_the_real_model_reports_paths_and_types() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = jev_rows(dir.path(), false);
    let out = dir.path().join("r.json");
    let o = dgem(
        &[
            "bench-jev",
            "-d",
            &d,
            "-o",
            out.to_str().expect("utf8"),
            "--format",
            "md",
            "--fail-under",
            "brier_excess_brackets=0",
        ],
        Some(&m),
    );
    let err = common::stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("gate skipped: brier_excess_brackets: no slots"),
        "{err}"
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("**By scoring path and type**"), "{text}");
    assert!(text.contains("| type: score | 1 |"), "{text}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("receipt")).expect("json");
    for item in r["items"].as_array().expect("items") {
        let path = item["scoring"].as_str().unwrap_or("");
        assert!(["first_token", "sequence"].contains(&path), "{item}");
    }
    let metric = |k: &str| r["metrics"][k].as_f64().unwrap_or(-1.0);
    for t in ["boolean", "choice", "score"] {
        assert_eq!(metric(&format!("slots_{t}")), 1.0, "{t}");
    }
    assert_eq!(metric("slots_first_token") + metric("slots_sequence"), 3.0);
    assert_eq!(metric("slots_brackets"), 0.0);
}

const BAD_STATE: &str = "`state`: must be a string or a JSON object. Given: `[1]`";

/// Regression: integer `expected` and object states made rows that were
/// skipped; they now map (`--strict` gets past the dataset to the model).
/// No model is needed: a missing `--model` file stops the run after the dataset.
#[test]
fn bench_jev_maps_integer_expected_and_object_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = jev_rows(dir.path(), false);
    let o = dgem(
        &[
            "bench-jev",
            "-d",
            &d,
            "--strict",
            "--model",
            "/nonexistent/m.gguf",
        ],
        None,
    );
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("`--model` must be a catalogued model (qwen2.5-coder-1.5b, gemma3-270m, ")
            && err.contains("an existing GGUF file")
            && err.contains("Given: `/nonexistent/m.gguf`"),
        "{err}"
    );
    assert!(!err.contains("refused"), "{err}");
}

/// Regression: `dgem bench-jev` skipped a row it could not map, silently.
/// It is now named with its line, id and reason before anything runs, and
/// `--strict` stops on it. No model needed (see above).
#[test]
fn bench_jev_names_an_unmappable_row_before_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = jev_rows(dir.path(), true);
    let o = dgem(
        &["bench-jev", "-d", &d, "--model", "/nonexistent/m.gguf"],
        None,
    );
    let err = common::stderr(&o);
    assert!(
        err.contains(&format!("refused: {d}:4: row `bad`: {BAD_STATE}")),
        "{err}"
    );
    let o = dgem(
        &[
            "bench-jev",
            "-d",
            &d,
            "--strict",
            "--model",
            "/nonexistent/m.gguf",
        ],
        None,
    );
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{d}:4: malformed row: {BAD_STATE}")),
        "{err}"
    );
}

/// Regression: `dgem bench-jev` reported `refused 0` and exited 0 with a row
/// it could not map. Real model: the three mappable rows run, the fourth is
/// counted, listed in the report and the receipt, and the run exits 1 —
/// or 0 with `--allow-refused`.
#[test]
fn bench_jev_refuses_unmappable_row_instead_of_skipping() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = jev_rows(dir.path(), true);
    let out = dir.path().join("r.json");
    let out_s = out.to_str().expect("utf8");
    let o = dgem(
        &["bench-jev", "-d", &d, "-o", out_s, "--format", "json"],
        Some(&m),
    );
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("1 dataset row(s) refused and not run (first: line 4, `bad`"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("json report");
    assert_eq!(v["metrics"]["total_cases"], 3.0);
    assert_eq!(v["metrics"]["errors"], 0.0);
    assert_eq!(v["metrics"]["refused"], 1.0);
    assert_eq!(v["breakdown"]["refused"][0]["id"], "bad");
    assert_eq!(v["breakdown"]["refused"][0]["reason"], BAD_STATE);
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("receipt")).expect("json");
    assert_eq!(r["dataset"]["refused"][0]["line"], 4);
    let items = r["items"].as_array().expect("items");
    let ids: Vec<&str> = items.iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(ids, ["choice", "sev-int", "obj-state"]);
    assert_eq!(items[1]["expected"], "low", "2 is the 2nd named level");
    assert_eq!(items[2]["expected"], "yes");
    let o = dgem(
        &["bench-jev", "-d", &d, "--allow-refused", "--format", "md"],
        Some(&m),
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(md.contains("| refused | 1 |"), "{md}");
    assert!(
        md.contains(&format!("| 4 | bad | {} |", BAD_STATE.replace('|', "\\|"))),
        "{md}"
    );
}

/// Regression: `dgem plan -d` counted `refused 0` and exited 0 while it
/// skipped rows. Real model (for its tokenizer): the integer-`expected` and
/// object-state rows are planned, the list-state row is refused, exit 1.
#[test]
fn plan_counts_integer_score_expected_as_mapped() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = jev_rows(dir.path(), true);
    let o = dgem(&["plan", "-d", &d], Some(&m));
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("1 of 4 row(s) refused (first: line 4, `bad`"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["items"], 4);
    assert_eq!(v["planned"], 3);
    assert_eq!(v["refused"], 1);
    assert_eq!(v["refusals"][0]["id"], "bad");
    assert_eq!(v["refusals"][0]["line"], 4);
    assert_eq!(v["refusals"][0]["reason"], BAD_STATE);
    let o = dgem(&["plan", "-d", &d, "--allow-refused"], Some(&m));
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
}

/// Four permutation items, each asking its own question (the text carries
/// `nonce`, so priors learned by an earlier run of the test are not found).
fn permutation_rows(dir: &std::path::Path, nonce: &str) -> String {
    let rows: Vec<Value> = (0..4)
        .map(|i| {
            json!({
                "id": format!("p{i}"), "regime": "consensus",
                "state": format!("Ticket {i}: the checkout page returns 502 errors since the deploy."),
                "instructions": format!("Pick the next step for case {i} ({nonce})."),
                "options": [{"name": "roll_back", "description": "undo the deploy"},
                            {"name": "wait", "description": "do nothing for now"},
                            {"name": "close", "description": "close the ticket"}],
                "expected": "roll_back"})
        })
        .collect();
    write_jsonl(dir, "perm.jsonl", &rows)
}

/// `bench-permutation --learn 3` under `--order-debias prior`: each item's
/// question is first decided on three other items' states, so it has
/// learned its prior and every shift reads one listing (the canonical one,
/// whatever the shift: no answer flips). Without `--learn` every shift is a
/// learning decision, read in all three listings. `--learn` must leave an
/// item states other than its own.
#[test]
fn permutation_with_learning_states_reads_each_shift_once() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let nonce = dir
        .path()
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("run")
        .to_owned();
    let d = permutation_rows(dir.path(), &nonce);
    let run = |d: &str, learn: &str, n: &str, out: &str| {
        let out = dir.path().join(out);
        let o = dgem(
            &[
                "bench-permutation",
                "-d",
                d,
                "-n",
                n,
                "--learn",
                learn,
                "--order-debias",
                "prior",
                "--calibration",
                "off",
                "-o",
                out.to_str().expect("utf8"),
            ],
            Some(&m),
        );
        let receipt = std::fs::read_to_string(&out)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok());
        (o, receipt)
    };
    let (o, r) = run(&d, "4", "4", "refused.json");
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains(
            "`--learn` must be below the number of items this run reads (4), so that every item learns from other items' states. Given: 4"
        ),
        "{}",
        common::stderr(&o)
    );
    assert!(r.is_none());
    // The learning states of a sharded run would depend on the split.
    let o = dgem(
        &[
            "bench-permutation",
            "-d",
            &d,
            "--learn",
            "1",
            "--shard",
            "0/2",
        ],
        Some(&m),
    );
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains(
            "`--learn` cannot be combined with `--shard`: an item's learning states would depend on the split. Given: --learn 1 --shard 0/2"
        ),
        "{}",
        common::stderr(&o)
    );

    let (o, r) = run(&d, "3", "4", "learned.json");
    assert!(o.status.success(), "{}", common::stderr(&o));
    let r = r.expect("receipt");
    let metric = |r: &Value, k: &str| r["metrics"][k].as_f64().unwrap_or(-1.0);
    assert_eq!(metric(&r, "one_read_share"), 1.0);
    assert_eq!(metric(&r, "mean_listings"), 1.0);
    assert_eq!(metric(&r, "flip_rate"), 0.0);
    assert_eq!(r["settings"]["learn"], 3);
    for item in r["items"].as_array().expect("items") {
        assert_eq!(item["learned_from"], 3, "{item}");
        assert_eq!(item["shifts"].as_array().map(Vec::len), Some(3), "{item}");
    }

    // The same questions with another nonce: nothing learned, every shift
    // reads all three listings.
    // (`--learn 0` is the default.)
    let again = permutation_rows(dir.path(), &format!("{nonce}-again"));
    let (o, r) = run(&again, "0", "2", "learning.json");
    assert!(o.status.success(), "{}", common::stderr(&o));
    let r = r.expect("receipt");
    assert_eq!(metric(&r, "mean_listings"), 3.0);
    assert_eq!(metric(&r, "one_read_share"), 0.0);
    assert_eq!(metric(&r, "flip_rate"), 0.0);
}
