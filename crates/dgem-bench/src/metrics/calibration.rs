//! Calibration metrics over answered slots (reference.md §8.1).
//!
//! * 10-bin ECE (Guo et al. 2017, "On Calibration of Modern Neural Networks"):
//!   the top-label confidence `c` is clipped to [0, 1] and binned by `floor(10c)`
//!   (`c = 1` goes to bin 9), so the bins are `[0.0,0.1) … [0.9,1.0]`;
//!   ECE = Σ_b (n_b/N)·|acc_b − conf_b|.
//! * Multi-class Brier score (Brier 1950): Σ_k (p_k − y_k)² over the full answer
//!   distribution, so it lies in [0, 2].
//! * Negative log-likelihood: −ln p_gold, with p floored at 1e-12.
//! * AUROC of confidence for correctness: the Mann–Whitney U statistic divided by
//!   n_correct·n_wrong, ties counted ½ — the probability that a random correct
//!   answer carries more confidence than a random wrong one.
//! * Chance-corrected accuracy: max(0, (acc − chance)/(1 − chance)) with chance the
//!   mean of 1/|V| over items (reference.md §8.1, reported there ×100).

use serde::{Deserialize, Serialize};

/// Probability floor for the log-likelihood.
pub const NLL_FLOOR: f64 = 1e-12;

/// One reliability-diagram bin (reference.md §8.1 key names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    /// 0..=9.
    pub bin_index: usize,
    /// e.g. `[0.3,0.4)`; the last bin is closed: `[0.9,1.0]`.
    pub range_label: String,
    /// Lower edge.
    pub lower: f64,
    /// Upper edge.
    pub upper: f64,
    /// Slots in the bin.
    pub count: usize,
    /// Mean confidence of the bin (0 when empty).
    pub avg_confidence: f64,
    /// Share of correct slots in the bin (0 when empty).
    pub empirical_accuracy: f64,
    /// |accuracy − confidence|.
    pub abs_gap: f64,
}

/// The 10 reliability bins of `(confidence, correct)` pairs.
pub fn reliability_bins(xs: &[(f64, bool)]) -> Vec<ReliabilityBin> {
    const B: usize = 10;
    let mut count = [0usize; B];
    let mut conf = [0.0f64; B];
    let mut hits = [0.0f64; B];
    for &(c, ok) in xs {
        let c = if c.is_nan() { 0.0 } else { c.clamp(0.0, 1.0) };
        let b = ((c * B as f64).floor() as usize).min(B - 1);
        count[b] += 1;
        conf[b] += c;
        hits[b] += f64::from(u8::from(ok));
    }
    (0..B)
        .map(|b| {
            let lower = b as f64 / B as f64;
            let upper = (b + 1) as f64 / B as f64;
            let n = count[b];
            let (avg_confidence, empirical_accuracy) = if n == 0 {
                (0.0, 0.0)
            } else {
                (conf[b] / n as f64, hits[b] / n as f64)
            };
            let close = if b == B - 1 { ']' } else { ')' };
            ReliabilityBin {
                bin_index: b,
                range_label: format!("[{lower:.1},{upper:.1}{close}"),
                lower,
                upper,
                count: n,
                avg_confidence,
                empirical_accuracy,
                abs_gap: (empirical_accuracy - avg_confidence).abs(),
            }
        })
        .collect()
}

/// 10-bin expected calibration error; 0 for no slots.
pub fn ece_10bin(xs: &[(f64, bool)]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let n = xs.len() as f64;
    reliability_bins(xs)
        .iter()
        .map(|b| b.count as f64 / n * b.abs_gap)
        .sum()
}

/// Multi-class Brier score Σ_k (p_k − y_k)² of one answer.
///
/// `gold = None` (the expected answer is not among the alternatives) scores the
/// distribution against an unseen class: 1 + Σ_k p_k².
pub fn brier(probs: &[f64], gold: Option<usize>) -> f64 {
    let mut s: f64 = probs
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            let y = if Some(k) == gold { 1.0 } else { 0.0 };
            (p - y).powi(2)
        })
        .sum();
    if gold.is_none_or(|g| g >= probs.len()) {
        s += 1.0;
    }
    s
}

/// Negative log-likelihood −ln max(p_gold, 1e-12) of one answer.
pub fn nll(probs: &[f64], gold: Option<usize>) -> f64 {
    let p = gold.and_then(|g| probs.get(g)).copied().unwrap_or(0.0);
    -p.max(NLL_FLOOR).ln()
}

/// AUROC of `score` for separating correct (`true`) from wrong answers; `None`
/// when either class is empty.
pub fn auroc(xs: &[(f64, bool)]) -> Option<f64> {
    let pos: Vec<f64> = xs.iter().filter(|x| x.1).map(|x| x.0).collect();
    let neg: Vec<f64> = xs.iter().filter(|x| !x.1).map(|x| x.0).collect();
    if pos.is_empty() || neg.is_empty() {
        return None;
    }
    let mut u = 0.0;
    for &p in &pos {
        for &q in &neg {
            u += if p > q {
                1.0
            } else if p == q {
                0.5
            } else {
                0.0
            };
        }
    }
    Some(u / (pos.len() * neg.len()) as f64)
}

/// Chance-corrected accuracy max(0, (acc − chance)/(1 − chance)), in [0, 1].
pub fn chance_corrected(accuracy: f64, chance: f64) -> f64 {
    if chance >= 1.0 {
        return 0.0;
    }
    ((accuracy - chance) / (1.0 - chance)).max(0.0)
}

/// One point of the hesitation-gated coverage curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoveragePoint {
    /// Hesitation threshold τ: slots with hesitation ≤ τ are answered automatically.
    pub threshold: f64,
    /// Share of slots at or under τ (answered).
    pub coverage: f64,
    /// Accuracy over those slots (`None` when none are answered).
    pub accuracy: Option<f64>,
    /// Share of slots above τ (escalated to a human or a bigger model).
    pub escalated: f64,
}

/// Accuracy and coverage when slots whose hesitation (normalized entropy) exceeds
/// a threshold are escalated, at each of `thresholds`.
pub fn coverage_curve(xs: &[(f64, bool)], thresholds: &[f64]) -> Vec<CoveragePoint> {
    let n = xs.len().max(1) as f64;
    thresholds
        .iter()
        .map(|&t| {
            let kept: Vec<bool> = xs.iter().filter(|x| x.0 <= t).map(|x| x.1).collect();
            let coverage = kept.len() as f64 / n;
            let accuracy = (!kept.is_empty())
                .then(|| kept.iter().filter(|&&c| c).count() as f64 / kept.len() as f64);
            CoveragePoint {
                threshold: t,
                coverage,
                accuracy,
                escalated: 1.0 - coverage,
            }
        })
        .collect()
}

/// Area under the selective accuracy–coverage curve (1 − AURC, the area under
/// the risk–coverage curve of Geifman & El-Yaniv 2017, "Selective
/// Classification for Deep Neural Networks"), in [0, 1].
///
/// `xs` are `(hesitation, correct)` pairs. Slots are answered in order of
/// rising hesitation; at each distinct hesitation value the coverage steps up
/// and the accuracy of everything answered so far is the curve's height, so
/// the area is `Σ_j (c_j − c_{j−1}) · acc_j`. Ties enter together (no order is
/// made up inside a tie). A hesitation that ranks answers perfectly scores
/// near 1 when most are right; one that ranks at random scores the plain
/// accuracy. `None` for no slots.
pub fn selective_accuracy_auc(xs: &[(f64, bool)]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut sorted: Vec<(f64, bool)> = xs.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = sorted.len() as f64;
    let (mut area, mut answered, mut right) = (0.0, 0usize, 0usize);
    let mut i = 0;
    while i < sorted.len() {
        let h = sorted[i].0;
        let before = answered;
        while i < sorted.len() && sorted[i].0.total_cmp(&h).is_eq() {
            answered += 1;
            right += usize::from(sorted[i].1);
            i += 1;
        }
        area += (answered - before) as f64 / n * (right as f64 / answered as f64);
    }
    Some(area)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selective_auc_rewards_hesitation_that_ranks_errors_last() {
        // Right answers least hesitant: coverage 1/4 → acc 1, 2/4 → 1, 3/4 → 2/3, 1 → 1/2.
        let good = [(0.1, true), (0.2, true), (0.8, false), (0.9, false)];
        let want = 0.25 * (1.0 + 1.0 + 2.0 / 3.0 + 0.5);
        assert!((selective_accuracy_auc(&good).unwrap_or(0.0) - want).abs() < 1e-12);
        let bad = [(0.9, true), (0.8, true), (0.2, false), (0.1, false)];
        assert!(selective_accuracy_auc(&bad).unwrap_or(1.0) < 0.5);
        // One tie holding everything: the plain accuracy.
        let tie = [(0.5, true), (0.5, false), (0.5, false), (0.5, true)];
        assert!((selective_accuracy_auc(&tie).unwrap_or(0.0) - 0.5).abs() < 1e-12);
        assert_eq!(selective_accuracy_auc(&[]), None);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn ece_hand_computed() {
        // Bin 5 [0.5,0.6): 0.55 right, 0.55 wrong → |0.5 − 0.55| = 0.05, weight 2/5.
        // Bin 9 [0.9,1.0]: 0.9 right, 1.0 right, 0.95 wrong → acc 2/3, conf 0.95,
        // gap 0.283333…, weight 3/5. ECE = 0.02 + 0.17 = 0.19.
        let xs = [
            (0.55, true),
            (0.55, false),
            (0.9, true),
            (1.0, true),
            (0.95, false),
        ];
        assert!(close(ece_10bin(&xs), 0.19), "{}", ece_10bin(&xs));
        let bins = reliability_bins(&xs);
        assert_eq!(bins[9].count, 3);
        assert_eq!(bins[9].range_label, "[0.9,1.0]");
        assert_eq!(bins[5].range_label, "[0.5,0.6)");
        assert!(close(bins[5].abs_gap, 0.05));
        assert_eq!(ece_10bin(&[]), 0.0);
    }

    #[test]
    fn brier_and_nll_hand_computed() {
        // (0.7−1)² + 0.2² + 0.1² = 0.09 + 0.04 + 0.01 = 0.14.
        assert!(close(brier(&[0.7, 0.2, 0.1], Some(0)), 0.14));
        // Binary: 2(1 − p_gold)² = 2·0.16 = 0.32.
        assert!(close(brier(&[0.6, 0.4], Some(0)), 0.32));
        // Gold outside the alternatives: 1 + 0.5² + 0.5² = 1.5.
        assert!(close(brier(&[0.5, 0.5], None), 1.5));
        assert!(close(nll(&[0.25, 0.75], Some(1)), -(0.75f64.ln())));
        assert!(close(nll(&[1.0, 0.0], Some(1)), -(1e-12f64.ln())));
    }

    #[test]
    fn auroc_hand_computed() {
        // Correct: 0.9, 0.6; wrong: 0.7, 0.6. Pairs: (0.9>0.7)=1, (0.9>0.6)=1,
        // (0.6<0.7)=0, (0.6=0.6)=0.5 → 2.5/4.
        let xs = [(0.9, true), (0.6, true), (0.7, false), (0.6, false)];
        assert_eq!(auroc(&xs), Some(0.625));
        assert_eq!(auroc(&[(0.9, true)]), None);
    }

    #[test]
    fn chance_corrected_and_coverage() {
        assert!(close(chance_corrected(0.75, 0.5), 0.5));
        assert_eq!(chance_corrected(0.2, 0.5), 0.0);
        let xs = [(0.1, true), (0.3, false), (0.5, true), (0.9, false)];
        let c = coverage_curve(&xs, &[0.0, 0.3, 1.0]);
        assert_eq!(c[0].coverage, 0.0);
        assert_eq!(c[0].accuracy, None);
        assert!(close(c[1].coverage, 0.5));
        assert_eq!(c[1].accuracy, Some(0.5));
        assert!(close(c[2].escalated, 0.0));
    }
}
