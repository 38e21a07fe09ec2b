//! Real-model tests of option scoring and plan mode (issue: every option scored).
//!
//! Tests marked "real model" run the embedded Gemma 3 270M; they need
//! `DGEM_TEST_MODEL` (set by `scripts/test`).

use serde_json::Value;

mod common;
use common::{dgem, json_out as envelope, model, policy, stderr};

fn probabilities_sum_to_one(a: &Value) {
    let sum: f64 = a["probabilities"]
        .as_object()
        .expect("probabilities")
        .values()
        .map(|p| p.as_f64().expect("number"))
        .sum();
    assert!((sum - 1.0).abs() < 1e-9, "sum {sum}");
}

#[test]
fn real_model_options_sharing_a_first_token_decide() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let t = policy(
        &dir,
        "approvals",
        &serde_json::json!({
            "schema": {"questions": [
                {"id": "scope", "type": "choice", "instructions": "How much of the request is approved?",
                 "options": ["approve_all", "approve_some", "reject"]},
                {"id": "cap", "type": "choice", "instructions": "Which cap applies?",
                 "options": ["capped_12m", "capped_super"]}]},
            "state": "The manager approved every line of the expense report; the 12-month cap applies."
        }),
    );
    let v = envelope(&["decide", "-t", &t, "--json"], &m);
    for id in ["scope", "cap"] {
        let a = &v["answers"][id];
        probabilities_sum_to_one(a);
        let q = &v["diagnostics"]["questions"][id];
        assert_eq!(q["scoring"], "sequence", "{id}: {q}");
        let mass = q["label_mass"].as_f64().expect("label_mass");
        assert!(mass > 0.0 && mass <= 1.0, "{id}: label mass {mass}");
    }
    // The options are told apart: not every option gets the same probability.
    let p = v["answers"]["scope"]["probabilities"]
        .as_object()
        .expect("probs");
    let (a, s) = (p["approve_all"].as_f64(), p["approve_some"].as_f64());
    assert_ne!(a, s, "approve_all and approve_some separated: {p:?}");
}

#[test]
fn real_model_numeric_score_levels_report_the_level_value() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let t = policy(
        &dir,
        "ages",
        &serde_json::json!({
            "schema": {"questions": [
                {"id": "age", "type": "score", "instructions": "How old is the applicant?",
                 "levels": ["20", "21", "22", "23", "24"]},
                {"id": "stars", "type": "score", "instructions": "How many stars did the review give?",
                 "levels": ["1", "2", "3", "4", "5"]}]},
            "state": "The applicant turned 22 last month. The review gave four stars out of five."
        }),
    );
    let v = envelope(&["decide", "-t", &t, "--json"], &m);
    let age = &v["answers"]["age"];
    probabilities_sum_to_one(age);
    assert_eq!(v["diagnostics"]["questions"]["age"]["scoring"], "sequence");
    let value = age["value"].as_f64().expect("value");
    assert!((20.0..=24.0).contains(&value), "value {value}");
    let expected: f64 = ["20", "21", "22", "23", "24"]
        .iter()
        .map(|l| l.parse::<f64>().expect("num") * age["probabilities"][l].as_f64().expect("p"))
        .sum();
    assert!((value - expected).abs() < 1e-9);
    let score = age["score"].as_f64().expect("score");
    assert!((1.0..=5.0).contains(&score), "1-based position {score}");
    let stars = v["answers"]["stars"]["value"].as_f64().expect("value");
    assert!((1.0..=5.0).contains(&stars));
}

#[test]
fn real_model_plan_resolves_every_jevbench_style_item() {
    let Some(m) = model() else { return };
    let o = dgem(&["plan", "-d", "data/jevbench_style.jsonl"], Some(&m));
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["items"], 231);
    assert_eq!(v["refused"], 0, "refusals: {}", v["refusals"]);
    assert_eq!(v["planned"], 231);
    let seq = v["scoring"]["sequence"].as_u64().expect("count");
    assert!(
        seq >= 44,
        "shared-first-token items scored by sequence: {seq}"
    );
}

#[test]
fn real_model_decide_plan_prints_reads_without_running() {
    let Some(m) = model() else { return };
    let o = dgem(
        &[
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=refund please",
            "--plan",
        ],
        Some(&m),
    );
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["slot_reading"], "cloze");
    let groups = v["stages"][0].as_array().expect("groups");
    assert!(!groups.is_empty());
    let slot = &groups[0]["slots"][0];
    assert!(slot["pos"].as_u64().expect("pos") > 0);
    assert!(slot["label_ids"].as_array().expect("ids").len() >= 2);
    assert!(groups[0]["prompt"]
        .as_str()
        .expect("prompt")
        .contains("refund please"));
    assert!(v["forward_calls"].as_u64().expect("calls") >= 1);
    // The plan's slot positions are the decision's (the plan prefilled each
    // question read apart with the stand-in answers of those before it in
    // its stage, which the read does not: 185 against 181; black-box run).
    let o = dgem(
        &[
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=refund please",
            "--json",
        ],
        Some(&m),
    );
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let d: Value = serde_json::from_slice(&o.stdout).expect("json");
    let mut compared = 0;
    for group in groups {
        for slot in group["slots"].as_array().expect("slots") {
            let id = slot["id"].as_str().expect("id");
            assert_eq!(
                slot["pos"], d["diagnostics"]["questions"][id]["pos"],
                "{id}"
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 3);
    // A `--calibration-file` that does not exist is refused as a decision
    // refuses it (the plan exited 0; black-box run).
    let o = dgem(
        &[
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=refund please",
            "--plan",
            "--calibration-file",
            "/nonexistent/cal.json",
        ],
        Some(&m),
    );
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    assert!(
        stderr(&o).contains("`--calibration-file`"),
        "{}",
        stderr(&o)
    );
}
