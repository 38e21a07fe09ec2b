//! Real-model tests of the honesty invariants (small fixed inputs; they
//! assert invariants, not times or accuracies):
//! - the same options written with or without a leading space, or in another
//!   case, give the same distribution (whole-option `sequence` scoring too);
//! - a choice answer does not depend on the order the policy lists its
//!   options in, and every answer says how order-sensitive it was;
//! - `--labels letters` reports the option's name as `label`, the letter as
//!   `slot_label`, and calibrates letter reads like word reads;
//! - the shipped temperatures apply to the small model (gemma3-270m) and are
//!   reported.
//!
//! They need `DGEM_TEST_MODEL` (set by `scripts/test`).

use serde_json::{json, Value};

mod common;
use common::{json_out as decide, model, policy};

/// `(lower-case trimmed option name, probability)`, sorted by name.
fn by_name(answer: &Value) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = answer["probabilities"]
        .as_object()
        .expect("probabilities")
        .iter()
        .map(|(k, p)| (k.trim().to_lowercase(), p.as_f64().expect("number")))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn dish_policy(dir: &tempfile::TempDir, name: &str, options: Value) -> String {
    policy(
        dir,
        name,
        &json!({
            "schema": {"questions": [{"id": "dish", "type": "choice",
                "instructions": "Which dish does the guest order?", "options": options}]},
            "state": "I would like the baked pasta with extra cheese, please."
        }),
    )
}

#[test]
fn real_model_spacing_and_case_variants_read_the_same() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    // `pasta` and `pasta_bake` share a first token: whole-option scoring.
    let read = |name: &str, options: Value| {
        let t = dish_policy(&dir, name, options);
        decide(&["decide", "-t", &t, "--json"], &m)
    };
    let plain = read("plain", json!(["pasta", "pasta_bake", "soup"]));
    assert_eq!(
        plain["diagnostics"]["questions"]["dish"]["scoring"],
        "sequence"
    );
    let p = by_name(&plain["answers"]["dish"]);
    let sum: f64 = p.iter().map(|x| x.1).sum();
    assert!((sum - 1.0).abs() < 1e-9, "sums to 1: {p:?}");
    for (name, options) in [
        ("spaced", json!([" pasta", " pasta_bake", "soup "])),
        ("cased", json!(["Pasta", "Pasta_bake", "Soup"])),
    ] {
        let v = read(name, options);
        let q = by_name(&v["answers"]["dish"]);
        for ((a, x), (b, y)) in p.iter().zip(&q) {
            assert_eq!(a, b);
            assert!((x - y).abs() <= 0.02, "{name}: {a} {x} vs {y}");
        }
    }
}

#[test]
fn real_model_choice_answers_do_not_depend_on_the_option_order() {
    let Some(m) = model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let orders = [
        json!(["low", "medium", "high"]),
        json!(["high", "medium", "low"]),
        json!(["medium", "high", "low"]),
    ];
    for (si, state) in [
        "Routine password reset request from a known employee.",
        "Attacker exfiltrated the customer database and is demanding ransom.",
    ]
    .iter()
    .enumerate()
    {
        let mut first: Option<Vec<(String, f64)>> = None;
        for (oi, options) in orders.iter().enumerate() {
            let t = policy(
                &dir,
                &format!("risk_{si}_{oi}"),
                &json!({"schema": {"questions": [{"id": "risk_tier", "type": "choice",
                    "instructions": "How risky is this event?", "options": options}]},
                    "state": state}),
            );
            let v = decide(&["decide", "-t", &t, "--json"], &m);
            let a = &v["answers"]["risk_tier"];
            let order = &a["order_sensitivity"];
            assert_eq!(order["orders"], 3, "{a}");
            assert_eq!(order["method"], "cyclic");
            let spread = order["spread"].as_f64().expect("spread");
            assert!((0.0..=1.0).contains(&spread));
            let p = by_name(a);
            match &first {
                None => first = Some(p),
                Some(f) => assert_eq!(&p, f, "state {si}, order {options}"),
            }
        }
    }
}

#[test]
fn real_model_letters_report_the_option_name_and_are_calibrated() {
    let Some(m) = model() else { return };
    let v = decide(
        &[
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=I was charged twice for my renewal",
            "--labels",
            "letters",
            "--json",
        ],
        &m,
    );
    let team = &v["answers"]["team"];
    let choice = team["choice"].as_str().expect("choice");
    assert_eq!(team["label"], choice, "label is the option's name: {team}");
    let slot = team["slot_label"].as_str().expect("the letter read");
    assert!(
        slot.len() == 1 && slot.chars().all(|c| c.is_ascii_uppercase()),
        "{slot}"
    );
    let cal = &v["diagnostics"]["calibration"];
    assert_eq!(cal["contextual"].as_array().map(Vec::len), Some(3), "{cal}");
    // A boolean's label is its own name; there is no slot label to add.
    assert!(v["answers"]["urgent"].get("slot_label").is_none());
}

#[test]
fn real_model_shipped_temperatures_are_reported_and_can_be_turned_off() {
    let Some(m) = model() else { return };
    let args = [
        "decide",
        "-t",
        "support_triage",
        "-v",
        "ticket=The app crashes when I upload a photo",
        "--json",
    ];
    let on = decide(&args, &m);
    let cal = &on["diagnostics"]["calibration"];
    assert_eq!(
        cal["sha256"], "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "{cal}"
    );
    assert!(cal["fitted_on"]
        .as_str()
        .expect("fitted_on")
        .contains("rows"));
    assert!(cal["temperature"].is_object(), "{cal}");
    let mut off_args = args.to_vec();
    off_args.extend(["--model-calibration", "off"]);
    let off = decide(&off_args, &m);
    assert!(off["diagnostics"]["calibration"]["temperature"].is_null());
    // A temperature never changes the answer, only how sure it is.
    for id in ["urgent", "team", "sentiment"] {
        assert_eq!(
            on["answers"][id]["label"], off["answers"][id]["label"],
            "{id}"
        );
    }
}

/// Regression: the help of `--order-debias` was printed under
/// `--model-calibration` (the doc comment sat above the wrong field), so
/// `--order-debias` had no help and `--model-calibration` described both.
#[test]
fn order_debias_and_model_calibration_each_have_their_own_help() {
    let o = common::dgem(&["decide", "--help"], None);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let help = String::from_utf8_lossy(&o.stdout).into_owned();
    // A flag's help: its own line and the lines under it, up to the next flag.
    let section = |flag: &str| -> String {
        let lines: Vec<&str> = help.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("{flag} in help"));
        let end = lines[start + 1..]
            .iter()
            .position(|l| l.trim_start().starts_with('-'))
            .map_or(lines.len(), |i| start + 1 + i);
        lines[start..end].join("\n")
    };
    let debias = section("--order-debias");
    assert!(debias.contains("Option-order debiasing"), "{debias}");
    assert!(!debias.contains("Temperatures shipped"), "{debias}");
    let shipped = section("--model-calibration");
    assert!(shipped.contains("Temperatures shipped"), "{shipped}");
    assert!(!shipped.contains("Option-order"), "{shipped}");
}
