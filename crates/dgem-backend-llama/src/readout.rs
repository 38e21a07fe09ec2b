//! Full-vocabulary log-softmax at one output row, pooled per label.

use dgem_backend::SlotLogits;
use dgem_core::tokenizer::TokenId;

/// Finite floor for label log-probabilities (a backend never returns `-inf`).
pub const LOGPROB_FLOOR: f64 = -1.0e4;

/// Read one slot from a row of raw logits (one per vocabulary id).
///
/// Accumulates in `f64`: `log Z = max + ln Σ exp(l - max)`; each label gets the log
/// of the **sum** of its (deduplicated) ids' probabilities, clamped to
/// [`LOGPROB_FLOOR`]`..=0`; the entropy is `log Z - Σ p·l` in nats. Ids outside the
/// row and labels without ids get the floor. Non-finite logits count as `-inf`.
pub fn read_slot(logits: &[f32], labels: &[Vec<TokenId>]) -> SlotLogits {
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
        return SlotLogits {
            label_logprobs: vec![LOGPROB_FLOOR; labels.len()],
            vocab_entropy: 0.0,
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
    let vocab_entropy = (log_sum - weighted / sum).max(0.0);
    let label_logprobs = labels
        .iter()
        .map(|ids| {
            let mut ids: Vec<usize> = ids.iter().map(|&id| id as usize).collect();
            ids.sort_unstable();
            ids.dedup();
            let p: f64 = ids
                .iter()
                .filter_map(|&i| logits.get(i))
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
    SlotLogits {
        label_logprobs,
        vocab_entropy,
        argmax_token: u32::try_from(argmax).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_row_has_log_n_entropy_and_pools_labels() {
        let row = vec![0.0f32; 4];
        let s = read_slot(&row, &[vec![0], vec![1, 2], vec![3, 3], vec![]]);
        assert!((s.vocab_entropy - 4f64.ln()).abs() < 1e-12);
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
        let s = read_slot(&row, &[vec![3], vec![0], vec![99]]);
        assert_eq!(s.argmax_token, 3);
        assert!(s.label_logprobs[0].abs() < 1e-9);
        assert_eq!(s.label_logprobs[1], LOGPROB_FLOOR);
        assert_eq!(s.label_logprobs[2], LOGPROB_FLOOR);
        assert!(s.vocab_entropy.abs() < 1e-9);
    }

    #[test]
    fn non_finite_rows_stay_finite() {
        let s = read_slot(&[f32::NAN, f32::NEG_INFINITY], &[vec![0]]);
        assert_eq!(s.label_logprobs, vec![LOGPROB_FLOOR]);
        assert!(s.vocab_entropy.is_finite());
    }
}
