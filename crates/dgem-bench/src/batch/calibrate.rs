//! Batch calibration: once every row of a run is read, estimate the
//! model's lean toward each option from the whole run, remove it from every
//! row in log space, and renormalize.
//!
//! For question `q` with options `o`, over the `N` rows that answered it:
//!
//! ```text
//! b_q(o)   = (1/N) Σ_r p_r(o)                       the run's mean probability
//! p'_r(o)  = exp(ln p_r(o) − ln b_q(o)) / Σ_o' exp(ln p_r(o') − ln b_q(o'))
//! ```
//!
//! This is Batch Calibration (Zhou et al., "Batch Calibration: Rethinking
//! Calibration for In-Context Learning and Prompt Engineering", ICLR 2024):
//! the mean over the batch estimates the contextual bias `p(y | context)`
//! whatever the input, and dividing it out leaves what the input adds. The
//! bias is the mean of the probabilities, as in the paper, not the mean of
//! the log-probabilities (a geometric mean): one row that reads an option
//! near 0 would drag a log mean down by `ln p / N` nats and multiply that
//! option in every other row.
//!
//! Rows are grouped by the question's id and its option names in order, so
//! a policy whose options depend on the row gets one estimate per option
//! set. A group of fewer than [`MIN_ROWS`] rows is left as read: with one
//! row the estimate is the row itself, and dividing it out would make every
//! answer uniform. Probabilities are floored at [`FLOOR`] before the log.

use std::collections::HashMap;

/// Rows a group needs before its mean is removed (below it, the estimate of
/// the bias is mostly the rows' own content).
pub const MIN_ROWS: usize = 8;
/// Smallest probability taken into a log (a read's exact zero, or an
/// option no row gave any weight, would make the log −∞).
pub const FLOOR: f64 = 1e-12;

/// The per-option probability sums of each (question, options) group.
#[derive(Debug, Clone, Default)]
pub struct BatchPrior {
    groups: HashMap<(String, Vec<String>), (Vec<f64>, usize)>,
}

/// What a group's correction is.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPrior {
    /// Rows that answered the question with these options.
    pub rows: usize,
    /// `b_q(o)`, the run's mean probability of each option, in option
    /// order; empty when the group is too small.
    pub bias: Vec<f64>,
}

impl BatchPrior {
    /// Count one row's distribution `dist` (in `options` order) of
    /// `question`. A distribution of the wrong length is ignored.
    pub fn add(&mut self, question: &str, options: &[String], dist: &[f64]) {
        if dist.len() != options.len() || dist.is_empty() {
            return;
        }
        let entry = self
            .groups
            .entry((question.to_string(), options.to_vec()))
            .or_insert_with(|| (vec![0.0; dist.len()], 0));
        for (s, p) in entry.0.iter_mut().zip(dist) {
            *s += p;
        }
        entry.1 += 1;
    }

    /// The group of `question` with `options`: its row count and, when it
    /// has at least [`MIN_ROWS`] rows, its bias.
    pub fn group(&self, question: &str, options: &[String]) -> GroupPrior {
        match self.groups.get(&(question.to_string(), options.to_vec())) {
            Some((sums, n)) if *n >= MIN_ROWS => GroupPrior {
                rows: *n,
                bias: sums.iter().map(|s| s / *n as f64).collect(),
            },
            Some((_, n)) => GroupPrior {
                rows: *n,
                bias: Vec::new(),
            },
            None => GroupPrior {
                rows: 0,
                bias: Vec::new(),
            },
        }
    }

    /// `dist` with its group's bias removed and renormalized; `None` when
    /// the group is too small (the row stays as read).
    pub fn apply(&self, question: &str, options: &[String], dist: &[f64]) -> Option<Vec<f64>> {
        let g = self.group(question, options);
        if g.bias.len() != dist.len() {
            return None;
        }
        let logits: Vec<f64> = dist
            .iter()
            .zip(&g.bias)
            .map(|(p, b)| p.max(FLOOR).ln() - b.max(FLOOR).ln())
            .collect();
        let top = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let exp: Vec<f64> = logits.iter().map(|l| (l - top).exp()).collect();
        let z: f64 = exp.iter().sum();
        Some(exp.iter().map(|e| e / z).collect())
    }

    /// Every group as `(question, options, prior)`, sorted by question then
    /// options (for a report).
    pub fn groups(&self) -> Vec<(String, Vec<String>, GroupPrior)> {
        let mut out: Vec<_> = self
            .groups
            .keys()
            .map(|(q, o)| (q.clone(), o.clone(), self.group(q, o)))
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn opts() -> Vec<String> {
        vec!["yes".into(), "no".into()]
    }

    #[test]
    fn a_constant_bias_is_removed() {
        // A model that leans to `yes` whatever the row: half the rows are
        // read 0.9/0.1 (content says yes), half 0.5/0.5 (content says no).
        let mut prior = BatchPrior::default();
        for i in 0..10 {
            let d = if i % 2 == 0 { [0.9, 0.1] } else { [0.5, 0.5] };
            prior.add("urgent", &opts(), &d);
        }
        let g = prior.group("urgent", &opts());
        assert_eq!(g.rows, 10);
        // b(yes) = (0.9 + 0.5)/2 = 0.7, b(no) = 0.3.
        assert!((g.bias[0] - 0.7).abs() < 1e-12 && (g.bias[1] - 0.3).abs() < 1e-12);
        // The 0.5/0.5 row was below the run's lean to yes: it now says no,
        // p'(yes) = (0.5/0.7) / (0.5/0.7 + 0.5/0.3) = 0.3.
        let even = prior.apply("urgent", &opts(), &[0.5, 0.5]).unwrap();
        assert!((even[0] - 0.3).abs() < 1e-12, "{even:?}");
        // p'(yes) = (0.9/0.7) / (0.9/0.7 + 0.1/0.3) = 27/34.
        let high = prior.apply("urgent", &opts(), &[0.9, 0.1]).unwrap();
        assert!((high[0] - 27.0 / 34.0).abs() < 1e-12, "{high:?}");
    }

    #[test]
    fn one_row_near_zero_does_not_swing_the_others() {
        // Nine rows 0.6/0.4 and one that reads `no` at 1e-9: the bias is
        // the mean probability, so `no` stays about 0.36, not near 0.
        let mut prior = BatchPrior::default();
        for _ in 0..9 {
            prior.add("urgent", &opts(), &[0.6, 0.4]);
        }
        prior.add("urgent", &opts(), &[1.0 - 1e-9, 1e-9]);
        let d = prior.apply("urgent", &opts(), &[0.6, 0.4]).unwrap();
        assert!((d[0] - 0.5).abs() < 0.05, "{d:?}");
    }

    #[test]
    fn a_small_group_is_left_as_read() {
        let mut prior = BatchPrior::default();
        for _ in 0..MIN_ROWS - 1 {
            prior.add("urgent", &opts(), &[0.7, 0.3]);
        }
        assert_eq!(prior.apply("urgent", &opts(), &[0.7, 0.3]), None);
        assert_eq!(prior.group("urgent", &opts()).rows, MIN_ROWS - 1);
        prior.add("urgent", &opts(), &[0.7, 0.3]);
        // Every row read alike: the bias is all there is, so it is uniform.
        let d = prior.apply("urgent", &opts(), &[0.7, 0.3]).unwrap();
        assert!((d[0] - 0.5).abs() < 1e-12, "{d:?}");
    }

    #[test]
    fn options_in_another_order_are_another_group_and_zeros_are_floored() {
        let mut prior = BatchPrior::default();
        let flipped = vec!["no".to_string(), "yes".to_string()];
        for _ in 0..MIN_ROWS {
            prior.add("urgent", &opts(), &[1.0, 0.0]);
            prior.add("urgent", &flipped, &[0.2, 0.8]);
        }
        assert_eq!(prior.groups().len(), 2);
        let d = prior.apply("urgent", &opts(), &[1.0, 0.0]).unwrap();
        assert!(d.iter().all(|p| p.is_finite()), "{d:?}");
        assert!(
            prior.apply("urgent", &opts(), &[1.0]).is_none(),
            "wrong length"
        );
    }
}
