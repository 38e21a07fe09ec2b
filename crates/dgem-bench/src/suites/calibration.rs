//! `dgem bench-calibration` (reference.md §8.3 metrics, §8.1 definitions): how
//! well the engine's probabilities match its hit rate, over every expected slot
//! of a `bench`-format dataset (run live, or re-scored from a `bench` receipt).
//!
//! Reports accuracy, chance-corrected accuracy, 10-bin ECE with the reliability
//! bins, multi-class Brier, NLL, AUROC of confidence for correctness, and
//! hesitation-gated coverage: at each threshold τ on hesitation (normalized
//! entropy), the share of slots at or under τ and their accuracy.

use std::collections::BTreeMap;

use serde_json::json;

use super::bench::{BenchItem, SlotOut};
use super::Summary;
use crate::metrics::{self, ReliabilityBin};
use crate::report::{fmt_metric, pct, Table};

/// Hesitation thresholds of the coverage table.
pub const COVERAGE_THRESHOLDS: [f64; 12] =
    [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0];

/// Calibration metrics of every slot of `items` (items with errors are left out);
/// also returns the reliability bins for the diagram.
pub fn summarize(items: &[BenchItem]) -> (Summary, Vec<ReliabilityBin>) {
    let slots: Vec<&SlotOut> = items
        .iter()
        .filter(|i| i.error.is_none())
        .flat_map(|i| i.slots.values())
        .collect();
    let cc: Vec<(f64, bool)> = slots.iter().map(|s| (s.confidence, s.correct)).collect();
    let hc: Vec<(f64, bool)> = slots.iter().map(|s| (s.hesitation, s.correct)).collect();
    let probs = |s: &SlotOut| s.probabilities.values().copied().collect::<Vec<f64>>();
    let accuracy = cc.iter().filter(|x| x.1).count() as f64 / cc.len().max(1) as f64;
    let chance = metrics::mean(
        &slots
            .iter()
            .map(|s| 1.0 / s.probabilities.len().max(1) as f64)
            .collect::<Vec<_>>(),
    );
    let bins = metrics::reliability_bins(&cc);
    let mut m = BTreeMap::new();
    m.insert("slots".into(), slots.len() as f64);
    m.insert("accuracy".into(), accuracy);
    m.insert("chance_baseline".into(), chance);
    m.insert(
        "chance_corrected_accuracy".into(),
        metrics::chance_corrected(accuracy, chance),
    );
    m.insert("ece_10bin".into(), metrics::ece_10bin(&cc));
    m.insert(
        "brier".into(),
        metrics::mean(
            &slots
                .iter()
                .map(|s| metrics::brier(&probs(s), s.gold))
                .collect::<Vec<_>>(),
        ),
    );
    m.insert(
        "nll".into(),
        metrics::mean(
            &slots
                .iter()
                .map(|s| metrics::nll(&probs(s), s.gold))
                .collect::<Vec<_>>(),
        ),
    );
    if let Some(a) = metrics::auroc(&cc) {
        m.insert("auroc_confidence".into(), a);
    }
    m.insert(
        "mean_confidence".into(),
        metrics::mean(&cc.iter().map(|x| x.0).collect::<Vec<_>>()),
    );
    m.insert(
        "mean_hesitation".into(),
        metrics::mean(&hc.iter().map(|x| x.0).collect::<Vec<_>>()),
    );
    if let Some(auc) = metrics::selective_accuracy_auc(&hc) {
        m.insert("selective_accuracy_auc".into(), auc);
    }
    let curve = metrics::coverage_curve(&hc, &COVERAGE_THRESHOLDS);
    for p in &curve {
        m.insert(format!("coverage.h{:.2}", p.threshold), p.coverage);
    }

    let mut rel = Table::new(
        "Reliability (10 bins of top-label confidence)",
        &["Bin", "Count", "Avg conf", "Accuracy", "|Gap|"],
    );
    for b in &bins {
        rel.push(vec![
            b.range_label.clone(),
            b.count.to_string(),
            format!("{:.3}", b.avg_confidence),
            format!("{:.3}", b.empirical_accuracy),
            format!("{:.3}", b.abs_gap),
        ]);
    }
    let mut cov = Table::new(
        "Hesitation-gated coverage (answer when hesitation ≤ τ, escalate the rest)",
        &["τ", "Coverage", "Accuracy when answered", "Escalated"],
    );
    for p in &curve {
        cov.push(vec![
            format!("{:.2}", p.threshold),
            pct(p.coverage),
            p.accuracy.map_or("-".into(), pct),
            pct(p.escalated),
        ]);
    }
    let mut sum = Table::new("Calibration summary", &["Metric", "Value"]);
    for (k, v) in &m {
        if !k.contains('.') {
            sum.push(vec![k.clone(), fmt_metric(*v)]);
        }
    }
    let summary = Summary {
        metrics: m,
        breakdown: json!({"reliability_bins": bins, "coverage": curve}),
        tables: vec![sum, rel, cov],
    };
    (summary, bins)
}

#[cfg(test)]
mod tests {
    use indexmap::IndexMap;

    use super::*;

    fn slot(p_yes: f64, expected_yes: bool) -> SlotOut {
        let probs: IndexMap<String, f64> =
            [("yes".to_owned(), p_yes), ("no".to_owned(), 1.0 - p_yes)]
                .into_iter()
                .collect();
        let answer = if p_yes >= 0.5 { "yes" } else { "no" };
        let gold = Some(usize::from(!expected_yes));
        SlotOut {
            expected: if expected_yes { "yes" } else { "no" }.into(),
            answer: Some(answer.into()),
            correct: (p_yes >= 0.5) == expected_yes,
            confidence: p_yes.max(1.0 - p_yes),
            hesitation: 0.0,
            probabilities: probs,
            gold,
            question_type: None,
            scoring: None,
            multi: None,
        }
    }

    #[test]
    fn hand_computed_calibration() {
        let items: Vec<BenchItem> = [(0.9, true), (0.8, false), (0.3, false), (0.6, true)]
            .iter()
            .enumerate()
            .map(|(i, &(p, e))| {
                let s = slot(p, e);
                BenchItem {
                    id: format!("i{i}"),
                    line: i + 1,
                    domain: String::new(),
                    tier: String::new(),
                    correct: s.correct,
                    slots: [("q".to_owned(), s)].into_iter().collect(),
                    wall_ms: 1.0,
                    reads: 1,
                    extended: None,
                    error: None,
                }
            })
            .collect();
        let (s, bins) = summarize(&items);
        let m = &s.metrics;
        // Correct: 0.9 (yes), 0.3→"no" right (conf 0.7), 0.6 (yes); wrong: 0.8.
        assert_eq!(m["accuracy"], 0.75);
        assert_eq!(m["chance_baseline"], 0.5);
        assert!((m["chance_corrected_accuracy"] - 0.5).abs() < 1e-12);
        // Brier = 2(1−p_gold)²: 0.02, 2·0.64 = 1.28, 0.18, 0.32 → mean 0.45.
        assert!((m["brier"] - 0.45).abs() < 1e-12, "{}", m["brier"]);
        // NLL = −ln p_gold: 0.9, 0.2, 0.7, 0.6.
        let nll = -(0.9f64.ln() + 0.2f64.ln() + 0.7f64.ln() + 0.6f64.ln()) / 4.0;
        assert!((m["nll"] - nll).abs() < 1e-12);
        // Confidences: right 0.9, 0.7, 0.6; wrong 0.8 → 1 of 3 above → AUROC 1/3.
        assert!((m["auroc_confidence"] - 1.0 / 3.0).abs() < 1e-12);
        // Bins 6 [0.6,0.7) {0.6 ✓}, 7 {0.7 ✓}, 8 {0.8 ✗}, 9 {0.9 ✓}:
        // ECE = ¼(0.4 + 0.3 + 0.8 + 0.1) = 0.4.
        assert!((m["ece_10bin"] - 0.4).abs() < 1e-12);
        assert_eq!(bins[8].count, 1);
        assert_eq!(m["coverage.h0.05"], 1.0);
    }
}
