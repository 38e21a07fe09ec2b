//! From logits to a slot reading: the labels' restricted log-softmax, and
//! the full-vocabulary log-softmax at one output row, pooled per label.

use dgem_backend::{SlotLogits, VocabRead};
use dgem_core::readout::log_sum_exp;
use dgem_core::tokenizer::TokenId;

/// Finite floor for label log-probabilities (a backend never returns `-inf`).
pub const LOGPROB_FLOOR: f64 = -1.0e4;

/// Distinct ids of one label, sorted (an id listed twice pools once).
fn distinct(ids: &[TokenId]) -> Vec<TokenId> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Each label's logit: the log-sum-exp of its distinct ids' logits, as
/// `logit(id)` gives them (`None`: an id without a logit, left out; a label
/// left with none gets `-inf`).
///
/// # Errors
/// The first error `logit` returns.
pub(crate) fn pooled_label_logits<E>(
    labels: &[Vec<TokenId>],
    mut logit: impl FnMut(TokenId) -> Result<Option<f64>, E>,
) -> Result<Vec<f64>, E> {
    let mut out = Vec::with_capacity(labels.len());
    for ids in labels {
        let mut of_ids = Vec::with_capacity(ids.len());
        for id in distinct(ids) {
            if let Some(l) = logit(id)? {
                of_ids.push(l);
            }
        }
        out.push(log_sum_exp(&of_ids));
    }
    Ok(out)
}

/// The restricted log-softmax of per-label logits (a label's logit is the
/// log-sum-exp of its ids' logits; `-inf` for a label without one): each
/// `logit - ln Σ exp(logits)`, clamped to [`LOGPROB_FLOOR`]`..=0`. When no
/// label has a finite logit, every label gets the floor.
pub fn restricted_logprobs(label_logits: &[f64]) -> Vec<f64> {
    let z = log_sum_exp(label_logits);
    label_logits
        .iter()
        .map(|&l| {
            let lp = l - z;
            if lp.is_nan() {
                LOGPROB_FLOOR
            } else {
                lp.clamp(LOGPROB_FLOOR, 0.0)
            }
        })
        .collect()
}

/// Read one slot over the full vocabulary from a row of raw logits (one per
/// vocabulary id).
///
/// Accumulates in `f64`: `log Z = max + ln Σ exp(l - max)`; each label gets the log
/// of the **sum** of its (deduplicated) ids' probabilities, clamped to
/// [`LOGPROB_FLOOR`]`..=0`; the entropy is `log Z - Σ p·l` in nats. Ids outside the
/// row and labels without ids get the floor. Non-finite logits count as `-inf`.
pub fn read_vocab(logits: &[f32], labels: &[Vec<TokenId>]) -> VocabRead {
    let mut max = f64::NEG_INFINITY;
    let mut argmax = 0usize;
    for (i, &l) in logits.iter().enumerate() {
        let l = f64::from(l);
        if l.is_finite() && l > max {
            max = l;
            argmax = i;
        }
    }
    if !max.is_finite() {
        // Degenerate row (empty or all non-finite): nothing can be said.
        return VocabRead {
            label_logprobs: vec![LOGPROB_FLOOR; labels.len()],
            entropy: 0.0,
            argmax_token: 0,
        };
    }
    let mut sum = 0.0f64;
    let mut weighted = 0.0f64;
    for &l in logits {
        let l = f64::from(l);
        if l.is_finite() {
            let e = (l - max).exp();
            sum += e;
            weighted += e * (l - max);
        }
    }
    // log Z relative to max; entropy = ln(sum) - E[l - max].
    let log_sum = sum.ln();
    let entropy = (log_sum - weighted / sum).max(0.0);
    let label_logprobs = labels
        .iter()
        .map(|ids| {
            let p: f64 = distinct(ids)
                .iter()
                .filter_map(|&i| logits.get(i as usize))
                .map(|&l| f64::from(l))
                .filter(|l| l.is_finite())
                .map(|l| (l - max - log_sum).exp())
                .sum();
            let lp = p.ln();
            if lp.is_nan() {
                LOGPROB_FLOOR
            } else {
                lp.clamp(LOGPROB_FLOOR, 0.0)
            }
        })
        .collect();
    VocabRead {
        label_logprobs,
        entropy,
        argmax_token: u32::try_from(argmax).unwrap_or(0),
    }
}

/// Read one slot from a full row of raw logits: the labels' restricted
/// log-softmax (label logits pooled from the row) and the full-vocabulary
/// reading ([`read_vocab`]).
pub fn read_slot(logits: &[f32], labels: &[Vec<TokenId>]) -> SlotLogits {
    let Ok(label_logits) = pooled_label_logits(labels, |id| {
        Ok::<_, std::convert::Infallible>(logits.get(id as usize).map(|&l| f64::from(l)))
    });
    SlotLogits {
        label_logprobs: restricted_logprobs(&label_logits),
        vocab: Some(read_vocab(logits, labels)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_row_has_log_n_entropy_and_pools_labels() {
        let row = vec![0.0f32; 4];
        let s = read_vocab(&row, &[vec![0], vec![1, 2], vec![3, 3], vec![]]);
        assert!((s.entropy - 4f64.ln()).abs() < 1e-12);
        assert!((s.label_logprobs[0] - 0.25f64.ln()).abs() < 1e-12);
        assert!((s.label_logprobs[1] - 0.5f64.ln()).abs() < 1e-12);
        assert!(
            (s.label_logprobs[2] - 0.25f64.ln()).abs() < 1e-12,
            "duplicate ids pool once"
        );
        assert_eq!(s.label_logprobs[3], LOGPROB_FLOOR);
    }

    #[test]
    fn peaked_row_clamps_to_floor_and_finds_argmax() {
        let mut row = vec![-1.0e6f32; 5];
        row[3] = 10.0;
        let s = read_vocab(&row, &[vec![3], vec![0], vec![99]]);
        assert_eq!(s.argmax_token, 3);
        assert!(s.label_logprobs[0].abs() < 1e-9);
        assert_eq!(s.label_logprobs[1], LOGPROB_FLOOR);
        assert_eq!(s.label_logprobs[2], LOGPROB_FLOOR);
        assert!(s.entropy.abs() < 1e-9);
    }

    #[test]
    fn non_finite_rows_stay_finite() {
        let s = read_slot(&[f32::NAN, f32::NEG_INFINITY], &[vec![0]]);
        assert_eq!(s.label_logprobs, vec![LOGPROB_FLOOR]);
        let v = s.vocab.expect("read_slot reads the vocabulary");
        assert_eq!(v.label_logprobs, vec![LOGPROB_FLOOR]);
        assert!(v.entropy.is_finite());
    }

    #[test]
    fn restricted_logprobs_renormalize_over_the_labels_only() {
        // Labels at full-vocabulary probabilities 0.1 and 0.3 (+ a third
        // label whose ids are all outside the row).
        let mut row = vec![0.0f32; 10];
        row[1] = (0.1f64 / 0.6 * 9.0).ln() as f32;
        let s = read_slot(&row, &[vec![1], vec![2, 3, 3], vec![42]]);
        let p: Vec<f64> = s.label_logprobs.iter().map(|l| l.exp()).collect();
        let (a, b) = (f64::from(row[1]).exp(), 2.0);
        assert!((p[0] - a / (a + b)).abs() < 1e-6, "{p:?}");
        assert!((p[1] - b / (a + b)).abs() < 1e-6, "{p:?}");
        assert_eq!(s.label_logprobs[2], LOGPROB_FLOOR);
        assert_eq!(
            restricted_logprobs(&[f64::NEG_INFINITY; 2]),
            vec![LOGPROB_FLOOR; 2]
        );
    }
}
