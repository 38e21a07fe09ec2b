use serde_json::json;

use super::*;
use dgem_core::schema::{SchemaDefaults, ValidSchema};

fn question() -> Question {
    let s = ValidSchema::from_value(
        &json!({"questions": [{"id": "tags", "type": "multi", "options": ["billing", "urgent", "bug"]}]}),
        &SchemaDefaults::default(),
    )
    .expect("valid");
    s.questions[0].clone()
}

fn item(id: &str, gold: &[usize], p: [f64; 3]) -> BenchItem {
    let q = question();
    let a = dgem_core::multi::collapse_probabilities(&q, &p);
    BenchItem {
        id: id.into(),
        line: 1,
        domain: String::new(),
        tier: String::new(),
        correct: false,
        slots: label_slots(&q, gold, Some(&a), &Diagnostics::default())
            .into_iter()
            .collect(),
        wall_ms: 0.0,
        reads: 1,
        extended: None,
        error: None,
    }
}

#[test]
fn expected_lists_are_checked_against_the_options() {
    let q = question();
    assert_eq!(
        expected_set(&q, &json!(["Urgent", "billing"])),
        Ok(vec![1, 0])
    );
    let e = expected_set(&q, &json!(["sales"])).expect_err("refused");
    assert!(
        e.contains("\"billing\", \"urgent\", \"bug\"") && e.contains("sales"),
        "{e}"
    );
    let e = expected_set(&q, &json!("billing")).expect_err("refused");
    assert!(e.contains("list of options"), "{e}");
}

#[test]
fn each_option_is_a_yes_no_label_slot() {
    let it = item("a", &[0, 1], [0.9, 0.3, 0.2]);
    let keys: Vec<&String> = it.slots.keys().collect();
    assert_eq!(keys, ["tags/billing", "tags/urgent", "tags/bug"]);
    let urgent = &it.slots["tags/urgent"];
    assert_eq!(
        (urgent.expected.as_str(), urgent.answer.as_deref()),
        ("yes", Some("no"))
    );
    assert!(!urgent.correct);
    assert!((urgent.confidence - 0.7).abs() < 1e-12, "p(not selected)");
    assert_eq!(urgent.gold, Some(0));
    assert_eq!(it.slots["tags/bug"].gold, Some(1));
    assert!(it.slots["tags/bug"].correct);
}

#[test]
fn f1_exact_match_and_the_select_everything_baseline() {
    // a: gold {billing, urgent}, selected {billing}: TP 1, FN 1.
    // b: gold {bug}, selected {bug, urgent}: TP 1, FP 1.
    let a = item("a", &[0, 1], [0.9, 0.3, 0.2]);
    let b = item("b", &[2], [0.1, 0.6, 0.8]);
    let c = item("c", &[2], [0.1, 0.2, 0.8]);
    let (m, t) = figures(&[&a, &b, &c]).expect("figures");
    // TP 3 (billing a, bug b, bug c), FP 1, FN 1: micro F1 = 6 / 8.
    assert!((m["multilabel_micro_f1"] - 0.75).abs() < 1e-12);
    assert!((m["multilabel_exact_match"] - 1.0 / 3.0).abs() < 1e-12);
    // Per label: billing 2/2 = 1, urgent 0/(0+1+1) = 0, bug 4/4 = 1.
    assert!((m["multilabel_macro_f1"] - 2.0 / 3.0).abs() < 1e-12);
    // Selecting everything: TP 4 gold positives, FP 5 negatives: 8 / 13.
    assert!((m["multilabel_f1_all_selected"] - 8.0 / 13.0).abs() < 1e-12);
    assert_eq!(t.rows.len(), 5);
}
