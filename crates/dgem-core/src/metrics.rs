//! Evaluation metrics over answered slots.
//!
//! ECE is the 10-bin expected calibration error of Guo et al. 2017 ("On
//! Calibration of Modern Neural Networks"): slots are binned by confidence into
//! equal-width bins over [0, 1]; ECE = Σ_b (n_b / N) · |acc_b − conf_b|.

/// One scored slot: the confidence of the chosen answer (in [0, 1]), whether it
/// was right, and its hesitation (normalized entropy in [0, 1]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// Probability of the chosen answer.
    pub confidence: f64,
    /// Whether the chosen answer equals the expected one.
    pub correct: bool,
    /// Normalized entropy of the answer distribution.
    pub hesitation: f64,
}

/// Share of correct slots, in [0, 1]; 0 for no slots.
pub fn accuracy(s: &[Scored]) -> f64 {
    if s.is_empty() {
        return 0.0;
    }
    s.iter().filter(|x| x.correct).count() as f64 / s.len() as f64
}

/// Expected calibration error with `bins` equal-width bins (use 10).
pub fn ece(s: &[Scored], bins: usize) -> f64 {
    if s.is_empty() || bins == 0 {
        return 0.0;
    }
    let mut count = vec![0usize; bins];
    let mut conf = vec![0.0; bins];
    let mut acc = vec![0.0; bins];
    for x in s {
        let c = x.confidence.clamp(0.0, 1.0);
        // Bin b holds (b/B, (b+1)/B]; confidence 0 goes to the first bin.
        let b = ((c * bins as f64).ceil() as usize)
            .saturating_sub(1)
            .min(bins - 1);
        count[b] += 1;
        conf[b] += c;
        acc[b] += f64::from(u8::from(x.correct));
    }
    let n = s.len() as f64;
    (0..bins)
        .filter(|&b| count[b] > 0)
        .map(|b| {
            let k = count[b] as f64;
            (k / n) * (acc[b] / k - conf[b] / k).abs()
        })
        .sum()
}

/// Mean hesitation (normalized entropy) over slots.
pub fn mean_hesitation(s: &[Scored]) -> f64 {
    if s.is_empty() {
        return 0.0;
    }
    s.iter().map(|x| x.hesitation).sum::<f64>() / s.len() as f64
}

/// The `q`-quantile (0..=1) of `values` by nearest rank; 0 for none.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(confidence: f64, correct: bool) -> Scored {
        Scored {
            confidence,
            correct,
            hesitation: 0.5,
        }
    }

    #[test]
    fn ece_hand_computed() {
        // Bin (0.5,0.6]: confs 0.55, 0.55, one right → |0.5-0.55| = 0.05, weight 2/4.
        // Bin (0.9,1.0]: confs 0.95, 0.95, both right → |1-0.95| = 0.05, weight 2/4.
        let xs = [s(0.55, true), s(0.55, false), s(0.95, true), s(0.95, true)];
        assert!((ece(&xs, 10) - 0.05).abs() < 1e-12);
        assert!((accuracy(&xs) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn perfectly_calibrated_is_zero() {
        let xs = [s(1.0, true), s(1.0, true)];
        assert!(ece(&xs, 10).abs() < 1e-12);
        assert_eq!(ece(&[], 10), 0.0);
    }

    #[test]
    fn quantile_nearest_rank() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 0.9), 5.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
    }
}
