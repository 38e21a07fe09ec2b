//! JevBench's scoring: the four axes (intelligence, calibration, speed, cost)
//! and the two composite scores, as JevBench v1.3.1 and v1.4 define them.
//! Every axis is a score in [0, 100].
//!
//! - **Intelligence** (v1.3.1, weighted): items are put in buckets by tier —
//!   `easy`/`low-entropy` → easy (weight 0.14); `standard`/`original`/
//!   `held-out`/`out-of-scope` → standard (0.28); `localization` → judge
//!   (0.28); everything else (`hard`, `adversarial`, `ambiguous`,
//!   `high-entropy`) → hard (0.30). Accuracy is chance-corrected within each
//!   non-empty bucket, max(0, (acc − chance)/(1 − chance)) on the bucket's
//!   means, and the weighted mean over the non-empty buckets (weights
//!   renormalized) is ×100.
//! - **Calibration** = ½·[100·max(0, 1 − ECE/0.5) + 100·max(0, 1 − mean soft
//!   TVD)], with the 10-bin ECE of the top-label confidence. The soft TVD is
//!   computed on items with a human split only: the gold answer's share of
//!   human votes is 0.92 for a ChaosNLI low-entropy item, 0.40 for a
//!   high-entropy one and 0.75 for any `ambiguous` tier; TVD = |p(gold) −
//!   share| with p(gold) = confidence when right, else 1 − confidence. A run
//!   with no such item has no fidelity term: calibration is then the ECE term.
//! - **Speed**: s(t) = clamp(100 − 20·log10(t / 0.1 s), 0, 100), the mean of
//!   s(p50) and s(p95) of the per-item latency; a self-hosted endpoint
//!   (`cpu`, `gpu`) is first charged t → 2t + 0.15 s, an `api` one is not.
//! - **Cost**: clamp(100 − 30·log10(usd / 0.001), 0, 100) for the USD per
//!   1,000 decisions (dgem's list figure is $0.0260).
//! - **Composite v1.3.1**: the geometric mean of the four axes, each clamped
//!   to [1, 100], times (I/50)² when intelligence I < 50.
//! - **Composite v1.4**: the harmonic mean 4 / (1/I + 1/Cal + 1/S + 1/Cost)
//!   (0 when an axis is ≤ 0), times (x/50)² for each of I, S and Cost below
//!   50. With no sealed split it is the public-only estimate.

use super::calibration::chance_corrected;

/// USD per 1,000 decisions for dgem when no figure is given.
pub const DGEM_USD_PER_1K: f64 = 0.0260;

/// One item as the scores see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The item's tier.
    pub tier: String,
    /// Whether the answer was right.
    pub correct: bool,
    /// 1 / number of allowed answers.
    pub chance: f64,
    /// Probability of the chosen answer.
    pub confidence: f64,
}

/// The bucket (and its weight) a tier counts in for intelligence.
pub fn bucket(tier: &str) -> (&'static str, f64) {
    match tier.trim().to_ascii_lowercase().as_str() {
        "easy" | "low-entropy" | "low_entropy" => ("easy", 0.14),
        "standard" | "original" | "held-out" | "held_out" | "out-of-scope" | "out_of_scope" => {
            ("standard", 0.28)
        }
        "localization" | "judge" => ("judge", 0.28),
        _ => ("hard", 0.30),
    }
}

/// Weighted, chance-corrected intelligence in [0, 100] (`NaN` for no items).
pub fn intelligence(items: &[Scored]) -> f64 {
    let mut buckets: Vec<(&str, f64, usize, f64, f64)> = Vec::new();
    for it in items {
        let (name, w) = bucket(&it.tier);
        let b = match buckets.iter_mut().find(|b| b.0 == name) {
            Some(b) => b,
            None => {
                buckets.push((name, w, 0, 0.0, 0.0));
                let last = buckets.len() - 1;
                &mut buckets[last]
            }
        };
        b.2 += 1;
        b.3 += f64::from(u8::from(it.correct));
        b.4 += it.chance;
    }
    let weight: f64 = buckets.iter().map(|b| b.1).sum();
    if buckets.is_empty() || weight <= 0.0 {
        return f64::NAN;
    }
    let score: f64 = buckets
        .iter()
        .map(|(_, w, n, ok, chance)| {
            let n = *n as f64;
            w * chance_corrected(ok / n, chance / n)
        })
        .sum();
    100.0 * score / weight
}

/// The gold answer's share of human votes for an item with a human split, by
/// tier (see the module docs); `None` when the item has none.
pub fn human_gold_share(tier: &str) -> Option<f64> {
    let t = tier.trim().to_ascii_lowercase();
    if t.contains("ambiguous") {
        Some(0.75)
    } else if t.contains("chaosnli") && t.contains("low") {
        Some(0.92)
    } else if t.contains("chaosnli") && t.contains("high") {
        Some(0.40)
    } else {
        None
    }
}

/// Soft TVD of one item with a human split.
pub fn soft_tvd(correct: bool, confidence: f64, gold_share: f64) -> f64 {
    let p_gold = if correct {
        confidence
    } else {
        1.0 - confidence
    };
    (p_gold - gold_share).abs()
}

/// Calibration score in [0, 100] from the 10-bin ECE and the mean soft TVD
/// (`None`: no item with a human split).
pub fn calibration(ece: f64, mean_soft_tvd: Option<f64>) -> f64 {
    let ece_term = 100.0 * (1.0 - ece / 0.5).max(0.0);
    match mean_soft_tvd {
        Some(tvd) => 0.5 * (ece_term + (100.0 * (1.0 - tvd)).max(0.0)),
        None => ece_term,
    }
}

/// Speed of one latency (seconds), in [0, 100].
pub fn speed_of(t_s: f64) -> f64 {
    if t_s <= 0.1 {
        return 100.0;
    }
    (100.0 - 20.0 * (t_s / 0.1).log10()).clamp(0.0, 100.0)
}

/// Speed score from the p50 and p95 latencies (seconds); `self_hosted`
/// charges t → 2t + 0.15 s first.
pub fn speed(p50_s: f64, p95_s: f64, self_hosted: bool) -> f64 {
    let adjust = |t: f64| if self_hosted { 2.0 * t + 0.15 } else { t };
    0.5 * (speed_of(adjust(p50_s)) + speed_of(adjust(p95_s)))
}

/// Cost score for USD per 1,000 decisions, in [0, 100].
pub fn cost(usd_per_1k: f64) -> f64 {
    if usd_per_1k <= 0.0 {
        return 100.0;
    }
    (100.0 - 30.0 * (usd_per_1k / 0.001).log10()).clamp(0.0, 100.0)
}

/// Composite v1.3.1.
pub fn composite_v131(i: f64, cal: f64, s: f64, c: f64) -> f64 {
    let axes = [i, cal, s, c].map(|x| x.clamp(1.0, 100.0));
    let geo = axes.iter().map(|x| x.ln()).sum::<f64>() / 4.0;
    let mut v = geo.exp();
    if i < 50.0 {
        v *= (i.max(0.0) / 50.0).powi(2);
    }
    v
}

/// Composite v1.4 (public-only estimate).
pub fn composite_v14(i: f64, cal: f64, s: f64, c: f64) -> f64 {
    if [i, cal, s, c].iter().any(|x| *x <= 0.0 || x.is_nan()) {
        return 0.0;
    }
    let mut v = 4.0 / (1.0 / i + 1.0 / cal + 1.0 / s + 1.0 / c);
    for x in [i, s, c] {
        if x < 50.0 {
            v *= (x / 50.0).powi(2);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(tier: &str, correct: bool, chance: f64) -> Scored {
        Scored {
            tier: tier.into(),
            correct,
            chance,
            confidence: 0.5,
        }
    }

    #[test]
    fn intelligence_is_chance_corrected_per_bucket_and_weighted() {
        // easy: 2/2 right at chance 0.5 → 1.0; hard: 1/2 right at chance 0.5 → 0.0.
        let items = [
            item("easy", true, 0.5),
            item("easy", true, 0.5),
            item("hard", true, 0.5),
            item("hard", false, 0.5),
        ];
        let expected = 100.0 * (0.14 * 1.0 + 0.30 * 0.0) / (0.14 + 0.30);
        assert!((intelligence(&items) - expected).abs() < 1e-12);
        assert!(intelligence(&[]).is_nan());
        // At chance everywhere: 0, never negative.
        assert_eq!(intelligence(&[item("standard", false, 0.25)]), 0.0);
    }

    #[test]
    fn the_axes_follow_their_formulas() {
        assert_eq!(speed_of(0.05), 100.0);
        assert!((speed_of(1.0) - 80.0).abs() < 1e-12);
        // Self-hosted: 0.1 s → 0.35 s → 100 − 20·log10(3.5).
        assert!((speed(0.1, 0.1, true) - (100.0 - 20.0 * 3.5f64.log10())).abs() < 1e-12);
        assert!((cost(0.001) - 100.0).abs() < 1e-12);
        assert!((cost(DGEM_USD_PER_1K) - (100.0 - 30.0 * 26f64.log10())).abs() < 1e-12);
        assert_eq!(calibration(0.0, Some(0.0)), 100.0);
        assert_eq!(calibration(0.25, None), 50.0);
        assert!((calibration(0.25, Some(0.5)) - 50.0).abs() < 1e-12);
        assert!((soft_tvd(true, 0.8, 0.75) - 0.05).abs() < 1e-12);
        assert_eq!(human_gold_share("ambiguous"), Some(0.75));
        assert_eq!(human_gold_share("hard"), None);
    }

    #[test]
    fn the_composites_penalize_weak_axes() {
        assert!((composite_v131(100.0, 100.0, 100.0, 100.0) - 100.0).abs() < 1e-9);
        // I = 25 < 50: geometric mean × (25/50)².
        let geo = (25.0f64 * 100.0 * 100.0 * 100.0).powf(0.25);
        assert!((composite_v131(25.0, 100.0, 100.0, 100.0) - geo * 0.25).abs() < 1e-9);
        assert!((composite_v14(100.0, 100.0, 100.0, 100.0) - 100.0).abs() < 1e-9);
        assert_eq!(composite_v14(0.0, 100.0, 100.0, 100.0), 0.0);
        let h = 4.0 / (1.0 / 40.0 + 3.0 / 100.0);
        assert!((composite_v14(40.0, 100.0, 100.0, 100.0) - h * 0.64).abs() < 1e-9);
    }
}
