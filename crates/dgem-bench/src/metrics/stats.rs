//! Summary statistics: latency percentiles, distribution distances and
//! McNemar's test.

use serde::{Deserialize, Serialize};

/// Arithmetic mean; 0 for none.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// The `p`-percentile (p in [0, 1]) by linear interpolation between order
/// statistics at position p·(n − 1) (reference.md §8.1; NumPy's default
/// "linear" method). 0 for no values.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = p.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// Shannon entropy in nats (0·ln 0 = 0).
pub fn entropy(p: &[f64]) -> f64 {
    -p.iter()
        .filter(|&&x| x > 0.0)
        .map(|&x| x * x.ln())
        .sum::<f64>()
}

/// Total variation distance ½·Σ|p_k − q_k| between two distributions over the
/// same alternatives (missing entries count as 0).
pub fn tvd(p: &[f64], q: &[f64]) -> f64 {
    let n = p.len().max(q.len());
    0.5 * (0..n)
        .map(|k| (p.get(k).copied().unwrap_or(0.0) - q.get(k).copied().unwrap_or(0.0)).abs())
        .sum::<f64>()
}

/// The element-wise mean of several distributions of equal length.
pub fn mean_distribution(ds: &[Vec<f64>]) -> Vec<f64> {
    let k = ds.iter().map(Vec::len).max().unwrap_or(0);
    let mut m = vec![0.0; k];
    for d in ds {
        for (i, p) in d.iter().enumerate() {
            m[i] += p / ds.len() as f64;
        }
    }
    m
}

/// Generalized Jensen–Shannon divergence of several reads, the BALD
/// "mutual information" term (Houlsby et al. 2011): H(mean) − mean(H), in nats, ≥ 0.
pub fn jsd(ds: &[Vec<f64>]) -> f64 {
    if ds.is_empty() {
        return 0.0;
    }
    let hs: Vec<f64> = ds.iter().map(|d| entropy(d)).collect();
    (entropy(&mean_distribution(ds)) - mean(&hs)).max(0.0)
}

/// McNemar's test on paired correct/wrong outcomes of two runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McNemar {
    /// Items right in A and wrong in B.
    pub a_only: u64,
    /// Items wrong in A and right in B.
    pub b_only: u64,
    /// Two-sided p-value.
    pub p_value: f64,
    /// Always `exact_binomial`: the exact two-sided binomial test of
    /// min(b, c) under Binomial(b + c, ½) (McNemar 1947; exact form recommended
    /// for small discordant counts, e.g. Fagerland et al. 2013).
    pub method: String,
}

/// McNemar's exact test: p = min(1, 2·Σ_{i ≤ min(b,c)} C(b+c, i)·2^−(b+c)).
/// With no discordant pairs p = 1.
pub fn mcnemar(a_only: u64, b_only: u64) -> McNemar {
    let n = a_only + b_only;
    let k = a_only.min(b_only);
    // Σ_{i=0..k} C(n, i) / 2^n, accumulated in log space for large n.
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_c = 0.0f64; // ln C(n, 0)
    let mut tail = 0.0f64;
    for i in 0..=k {
        if i > 0 {
            ln_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_c + ln_half_n).exp();
    }
    McNemar {
        a_only,
        b_only,
        p_value: (2.0 * tail).min(1.0),
        method: "exact_binomial".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_interpolates() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        // position 0.9·4 = 3.6 → 4 + 0.6·(5 − 4) = 4.6
        assert!((percentile(&v, 0.9) - 4.6).abs() < 1e-12);
        assert!((percentile(&[10.0, 20.0], 0.99) - 19.9).abs() < 1e-12);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn mcnemar_hand_computed() {
        // b = 1, c = 5: P(X ≤ 1 | n = 6) = (1 + 6)/64 = 7/64; two-sided 14/64.
        let m = mcnemar(1, 5);
        assert!((m.p_value - 14.0 / 64.0).abs() < 1e-12, "{}", m.p_value);
        // b = 0, c = 10: 2/1024.
        assert!((mcnemar(0, 10).p_value - 2.0 / 1024.0).abs() < 1e-12);
        assert_eq!(mcnemar(0, 0).p_value, 1.0);
        assert_eq!(mcnemar(3, 3).p_value, 1.0);
    }

    #[test]
    fn distances() {
        assert!((tvd(&[0.5, 0.5], &[0.9, 0.1]) - 0.4).abs() < 1e-12);
        assert_eq!(jsd(&[vec![1.0, 0.0], vec![1.0, 0.0]]), 0.0);
        // Two opposite certain reads: H(mean) = ln 2, mean H = 0.
        assert!((jsd(&[vec![1.0, 0.0], vec![0.0, 1.0]]) - 2f64.ln()).abs() < 1e-12);
    }
}
