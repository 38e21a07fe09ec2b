use dgem_core::envelope::{BracketDiagnostics, QuestionDiagnostics};

use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

fn slot(
    path: ScoringPath,
    kind: &'static str,
    probabilities: &[f64],
    gold: usize,
    hesitation: f64,
) -> ScoredSlot {
    let top = probabilities
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    ScoredSlot {
        path: Some(path),
        kind: Some(kind),
        probabilities: probabilities.to_vec(),
        gold: Some(gold),
        confidence: probabilities[top],
        correct: top == gold,
        hesitation,
    }
}

/// Two first-token yes/no slots (sure of themselves, at chance) and two
/// sequence-scored choices of three options (unsure, above chance).
fn four() -> Vec<ScoredSlot> {
    use ScoringPath::{FirstToken, Sequence};
    vec![
        slot(FirstToken, "boolean", &[0.9, 0.1], 0, 0.2),
        slot(FirstToken, "boolean", &[0.8, 0.2], 1, 0.4),
        slot(Sequence, "choice", &[0.5, 0.25, 0.25], 0, 0.9),
        slot(Sequence, "choice", &[0.7, 0.2, 0.1], 2, 0.6),
    ]
}

#[test]
fn groups_hand_computed() {
    let r = report(&four());
    let g = &r.groups;
    // first_token: Brier (0.1² + 0.1²) = 0.02 and (0.8² + 0.8²) = 1.28 → 0.65;
    // uniform 1 − 1/2 = 0.5 each; excess 0.15. Accuracy 1/2 = chance 1/2 and
    // mean hesitation 0.3 < 0.5: overconfident. ECE: bin 9 gap 0.1, bin 8
    // gap 0.8 → 0.45.
    assert_eq!(g["slots_first_token"], 2.0);
    assert!(close(g["brier_first_token"], 0.65));
    assert!(close(g["brier_uniform_first_token"], 0.5));
    assert!(close(g["brier_excess_first_token"], 0.15));
    assert!(close(g["slot_accuracy_first_token"], 0.5));
    assert!(close(g["chance_first_token"], 0.5));
    assert!(close(g["ece_10bin_first_token"], 0.45));
    assert!(close(g["mean_hesitation_first_token"], 0.3));
    assert_eq!(g["overconfidence_error_first_token"], 1.0);
    // sequence: Brier 0.25 + 2·0.0625 = 0.375 and 0.49 + 0.04 + 0.81 = 1.34 →
    // 0.8575; uniform 1 − 1/3; accuracy 1/2 is 16.7 points over chance 1/3.
    assert!(close(g["brier_sequence"], 0.8575));
    assert!(close(g["brier_uniform_sequence"], 2.0 / 3.0));
    assert!(close(g["brier_excess_sequence"], 0.8575 - 2.0 / 3.0));
    assert!(close(g["chance_sequence"], 1.0 / 3.0));
    assert!(close(g["ece_10bin_sequence"], 0.6));
    assert!(close(g["mean_hesitation_sequence"], 0.75));
    assert_eq!(g["overconfidence_error_sequence"], 0.0);
    // The types hold the same slots here.
    assert!(close(g["brier_boolean"], g["brier_first_token"]));
    assert!(close(g["brier_choice"], g["brier_sequence"]));
    // Empty gated groups say 0 slots and nothing else; canvas is not gated.
    assert_eq!(g["slots_brackets"], 0.0);
    assert_eq!(g["slots_score"], 0.0);
    assert!(!g.contains_key("brier_excess_brackets"));
    assert!(!g.keys().any(|k| k.ends_with("canvas")));
    // All four: Brier 3.015/4, uniform (0.5 + 0.5 + 2/3 + 2/3)/4 = 7/12,
    // chance 5/12, accuracy 1/2 (8.3 points over), hesitation 0.525.
    let o = &r.overall;
    assert!(close(o["brier"], 0.75375));
    assert!(close(o["brier_uniform"], 7.0 / 12.0));
    assert!(close(o["brier_excess"], 0.75375 - 7.0 / 12.0));
    assert!(close(o["chance_baseline"], 5.0 / 12.0));
    assert_eq!(o["overconfidence_error"], 0.0);
    let all = r.all.expect("figures");
    assert!(close(all.mean_hesitation, 0.525));
    assert!(close(all.ece_10bin, 0.525));
}

#[test]
fn table_lists_every_gated_group_and_breakdown_matches() {
    let r = report(&four());
    let labels: Vec<&str> = r.table.rows.iter().map(|r| r[0].as_str()).collect();
    // A group per question type, in QuestionKind::ALL's order (the type
    // names are pinned by dgem-core's kinds tests).
    let types: Vec<String> = super::types()
        .iter()
        .map(|t| format!("type: {t}"))
        .collect();
    let mut want = vec![
        "all",
        "scoring: first_token",
        "scoring: sequence",
        "scoring: brackets",
    ];
    want.extend(types.iter().map(String::as_str));
    assert_eq!(labels, want);
    assert_eq!(
        r.table.rows[1],
        [
            "scoring: first_token",
            "2",
            "50.0%",
            "50.0%",
            "0.4500",
            "0.6500",
            "0.5000",
            "0.3000",
            "yes"
        ]
    );
    assert_eq!(r.table.rows[3][1..3], ["0".to_owned(), "-".to_owned()]);
    assert_eq!(r.table.columns.len(), r.table.rows[3].len());
    assert_eq!(r.breakdown["scoring"]["sequence"]["slots"], 2);
    assert!(r.breakdown["scoring"]["brackets"].is_null());
    assert_eq!(r.breakdown["type"]["boolean"]["overconfident"], true);
}

#[test]
fn overconfidence_needs_both_sureness_and_chance_accuracy() {
    use ScoringPath::FirstToken;
    // Sure and right: accuracy 1 is 50 points over chance.
    let right = [slot(FirstToken, "boolean", &[0.9, 0.1], 0, 0.3)];
    assert_eq!(report(&right).overall["overconfidence_error"], 0.0);
    // Sure and wrong: below chance.
    let wrong = [slot(FirstToken, "boolean", &[0.9, 0.1], 1, 0.3)];
    assert_eq!(report(&wrong).overall["overconfidence_error"], 1.0);
    // Unsure and wrong: honest.
    let unsure = [slot(FirstToken, "boolean", &[0.55, 0.45], 1, 0.99)];
    assert_eq!(report(&unsure).overall["overconfidence_error"], 0.0);
    // Nothing at all: no overall metrics, every gated group at 0 slots.
    let none = report(&[]);
    assert!(none.overall.is_empty());
    assert_eq!(none.groups.len(), GATED_PATHS.len() + types().len());
    assert!(none.groups.values().all(|v| *v == 0.0));
}

#[test]
fn uniform_brier_and_type_groups() {
    assert!(close(uniform_brier(4, Some(1)), 0.75));
    assert!(close(uniform_brier(2, None), 1.5));
    // No options: the Brier of no distribution, as the slot's own.
    assert!(close(uniform_brier(0, None), metrics::brier(&[], None)));
    assert!(close(uniform_brier(0, None), 1.0));
    assert_eq!(type_group("noul"), Some("boolean"));
    assert_eq!(type_group("Bool"), Some("boolean"));
    assert_eq!(type_group("score"), Some("score"));
    assert_eq!(type_group("rank"), None);
}

#[test]
fn path_comes_from_the_diagnostics() {
    let mut d = Diagnostics::default();
    for (id, scoring) in [("a", Scoring::Sequence), ("b", Scoring::FirstToken)] {
        d.questions.insert(
            id.into(),
            QuestionDiagnostics {
                scoring,
                ..QuestionDiagnostics::default()
            },
        );
    }
    d.brackets.insert(
        "b".into(),
        BracketDiagnostics {
            options: 40,
            brackets: vec![20, 20],
            finalists: vec!["x".into(), "y".into()],
            rounds: 2,
        },
    );
    assert_eq!(ScoringPath::of(&d, "a"), Some(ScoringPath::Sequence));
    assert_eq!(ScoringPath::of(&d, "b"), Some(ScoringPath::Brackets));
    assert_eq!(ScoringPath::of(&d, "c"), None);
    assert_eq!(
        serde_json::to_value(ScoringPath::FirstToken).expect("json"),
        json!("first_token")
    );
}
