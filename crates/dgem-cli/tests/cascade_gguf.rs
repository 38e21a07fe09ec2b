//! The cascade with no network: `dgem decide` on the embedded model (Stage 1)
//! escalates to a second GGUF run in-process (`--cascade-provider gguf:PATH`,
//! Stage 2). The 270M model stands in for the larger one, so the test checks
//! the plumbing: exit 0, and every escalated answer either written back with
//! an allowed value or reported with an error.

#![allow(clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;
use common::{model, root, stderr};

fn decide(provider: &str, model: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(root())
        .args([
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=I was charged twice for my renewal, please refund the duplicate",
            "--model",
            model,
            "--cascade",
            "entropy",
            "--cascade-threshold",
            "0.01",
            "--cascade-provider",
            provider,
            "--json",
        ])
        .env_remove("DGEM_CASCADE_PROVIDER")
        .output()
        .expect("run dgem")
}

#[test]
fn decide_cascades_to_a_local_gguf_stage2() {
    let Some(model) = model() else { return };
    let o = decide(&format!("gguf:{model}"), &model);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).expect("json");
    let c = &out["cascade"];
    assert_eq!(c["error"], "", "{c}");
    assert!(c["escalated_count"].as_u64().unwrap() >= 1, "{c}");
    let stem = std::path::Path::new(&model)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(c["model"], stem.as_str());
    let slots = c["slots"].as_object().expect("slots");
    let mut written = 0;
    for (id, slot) in slots {
        if slot["escalated"] != true {
            continue;
        }
        let answer = &out["answers"][id];
        match answer.get("resolved_by") {
            Some(by) => {
                assert_eq!(by, stem.as_str(), "{id}: {answer}");
                let value = slot["stage2_value"].as_str().expect("stage2_value");
                // The allowed values are the keys of the answer's distribution.
                let allowed: Vec<&str> = answer["probabilities"]
                    .as_object()
                    .expect("probabilities")
                    .keys()
                    .map(String::as_str)
                    .collect();
                assert!(allowed.contains(&value), "{id}: {value} not in {allowed:?}");
                written += 1;
            }
            None => assert!(
                slot["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{id}: escalated, neither written back nor reported: {slot}"
            ),
        }
    }
    eprintln!(
        "gguf cascade: {written} of {} escalated answers written back in {} ms",
        c["escalated_count"], c["latency_ms"]
    );
}

#[test]
fn a_gguf_spec_that_does_not_load_exits_1_naming_the_flag_and_path() {
    let o = decide("gguf:/nonexistent/stage2.gguf", "/nonexistent/stage1.gguf");
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--cascade-provider") && err.contains("/nonexistent/stage2.gguf"),
        "{err}"
    );
}
