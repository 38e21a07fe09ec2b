//! Readout math: from label log-probabilities to answer distributions.
//!
//! Formulas follow serving.md §6: the restricted softmax over a question's labels
//! (§6.1), averaging over reads with agreement and standard error (§6.3), the
//! `"auto"` sample policy (§6.4) and hesitation = normalized entropy H/ln K
//! (§6.5). Contextual calibration divides by the distribution read on
//! content-free states and renormalizes (Zhao et al. 2021, "Calibrate Before Use").
//! Entropies are in nats; probabilities are in [0, 1] and sum to 1.

use std::collections::HashMap;

use serde::Serialize;

use crate::schema::SamplePolicy;
use crate::tokenizer::TokenId;

/// Smallest probability kept when dividing by a calibration prior, so a label the
/// prior never saw cannot blow up (a floor, not a tuning knob).
pub const PROB_FLOOR: f64 = 1e-12;

/// Hesitation below this is "clear" (serving.md §6.5; the EXP-05b cascade gate).
pub const HESITATION_CLEAR: f64 = 0.16;
/// Hesitation above this is "very unsure" (serving.md §6.5).
pub const HESITATION_VERY_UNSURE: f64 = 0.50;

/// Softmax of `logits` restricted to these entries (temperature 1).
///
/// Returns a distribution of the same length that sums to 1; an empty input gives
/// an empty output. Non-finite inputs are treated as a very low logit.
pub fn restricted_softmax(logits: &[f64]) -> Vec<f64> {
    if logits.is_empty() {
        return Vec::new();
    }
    let clean: Vec<f64> = logits
        .iter()
        .map(|&x| if x.is_finite() { x } else { -1e30 })
        .collect();
    let max = clean.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = clean.iter().map(|&x| (x - max).exp()).collect();
    let sum = order_free_sum(&exps);
    exps.iter().map(|e| e / sum).collect()
}

/// The sum of `xs` added smallest first, so that it is the same to the last
/// bit whatever order `xs` comes in: every renormalisation of a distribution
/// over options goes through it, so that a policy listing the same options in
/// another order gets the same numbers, permuted (a left-to-right sum of
/// three or more terms can differ in the last bit between orders).
pub fn order_free_sum(xs: &[f64]) -> f64 {
    let mut terms = xs.to_vec();
    terms.sort_by(f64::total_cmp);
    terms.iter().sum()
}

/// `ln Σ exp(x)` over the finite entries of `xs`, computed stably (the largest
/// is factored out); `-inf` when there is none.
pub fn log_sum_exp(xs: &[f64]) -> f64 {
    let max = xs
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return f64::NEG_INFINITY;
    }
    max + xs
        .iter()
        .filter(|x| x.is_finite())
        .map(|x| (x - max).exp())
        .sum::<f64>()
        .ln()
}

/// Shannon entropy of `p` in nats (terms with p ≤ 0 contribute 0).
pub fn entropy(p: &[f64]) -> f64 {
    p.iter()
        .filter(|&&x| x > 0.0)
        .map(|&x| -x * x.ln())
        .sum::<f64>()
        .max(0.0)
        // `-0.0` (a sum of `-0.0` terms, from p = 1) is written as 0.
        + 0.0
}

/// Normalized entropy ("hesitation") `H(p) / ln K`, clipped to [0, 1]; 0 when K < 2.
pub fn normalized_entropy(p: &[f64]) -> f64 {
    if p.len() < 2 {
        return 0.0;
    }
    (entropy(p) / (p.len() as f64).ln()).clamp(0.0, 1.0)
}

/// Hesitation band of a normalized entropy (serving.md §6.5).
pub fn hesitation_band(h: f64) -> &'static str {
    if h < HESITATION_CLEAR {
        "clear"
    } else if h <= HESITATION_VERY_UNSURE {
        "unsure"
    } else {
        "very_unsure"
    }
}

/// The reading of one slot in one read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotRead {
    /// Restricted-softmax distribution over the question's labels.
    pub probs: Vec<f64>,
    /// Share of the model's distribution that fell on the labels, in [0, 1];
    /// `None` when the backend read the label tokens only (no full softmax).
    pub label_mass: Option<f64>,
    /// Entropy in nats of the distribution the backend returned: the full
    /// vocabulary when it was read, the top-k set for vLLM, else the labels
    /// (then it equals the entropy of `probs`).
    pub entropy: f64,
    /// Whether the single most likely token was one of the labels; `None`
    /// when the backend read the label tokens only.
    pub argmax_is_label: Option<bool>,
}

impl SlotRead {
    /// Build a read from per-label log-probabilities over the full vocabulary.
    pub fn from_label_logprobs(
        label_logprobs: &[f64],
        vocab_entropy: f64,
        argmax_is_label: bool,
    ) -> Self {
        Self {
            probs: restricted_softmax(label_logprobs),
            label_mass: Some(label_mass(label_logprobs)),
            entropy: vocab_entropy,
            argmax_is_label: Some(argmax_is_label),
        }
    }

    /// Build a read from per-label log-probabilities known only up to a
    /// constant (the label tokens' logits, or their restricted log-softmax):
    /// `probs` is their restricted softmax, `entropy` its entropy, and the
    /// full-vocabulary fields are `None` until [`Self::with_vocab`].
    pub fn from_label_logits(label_logits: &[f64]) -> Self {
        let probs = restricted_softmax(label_logits);
        Self {
            entropy: entropy(&probs),
            probs,
            label_mass: None,
            argmax_is_label: None,
        }
    }

    /// Add the full-vocabulary reading of the same slot without touching
    /// `probs`: `label_mass = Σ exp(full_logprobs)` (clamped to [0, 1]), the
    /// vocabulary entropy (nats) and whether the argmax token is a label.
    pub fn with_vocab(
        mut self,
        full_logprobs: &[f64],
        vocab_entropy: f64,
        argmax_is_label: bool,
    ) -> Self {
        self.label_mass = Some(label_mass(full_logprobs));
        self.entropy = vocab_entropy;
        self.argmax_is_label = Some(argmax_is_label);
        self
    }
    /// Build a read from a returned top-logprob set (serving.md §6.1): a label
    /// missing from `top` gets `min(top) - 5`; entropy is over the returned set.
    pub fn from_top_logprobs(top: &HashMap<TokenId, f64>, label_ids: &[TokenId]) -> Self {
        let floor = top.values().copied().fold(f64::INFINITY, f64::min) - 5.0;
        let floor = if floor.is_finite() { floor } else { -1e4 };
        let lp: Vec<f64> = label_ids
            .iter()
            .map(|id| *top.get(id).unwrap_or(&floor))
            .collect();
        let argmax = top
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(id, _)| *id);
        Self {
            probs: restricted_softmax(&lp),
            label_mass: Some(label_mass(&lp)),
            entropy: top.values().map(|v| -v.exp() * v).sum::<f64>().max(0.0),
            argmax_is_label: Some(argmax.is_some_and(|a| label_ids.contains(&a))),
        }
    }
}

/// `Σ exp(lp)` over full-vocabulary label log-probabilities, clamped to [0, 1].
fn label_mass(lp: &[f64]) -> f64 {
    lp.iter().map(|v| v.exp()).sum::<f64>().clamp(0.0, 1.0)
}

/// Divide `p` by a calibration `prior` element-wise and renormalize
/// (contextual calibration, Zhao et al. 2021). Lengths must match; a prior entry
/// below [`PROB_FLOOR`] is floored. Returns `p` unchanged if lengths differ.
pub fn calibrate(p: &[f64], prior: &[f64]) -> Vec<f64> {
    if p.len() != prior.len() || p.is_empty() {
        return p.to_vec();
    }
    let raw: Vec<f64> = p
        .iter()
        .zip(prior)
        .map(|(a, b)| a / b.max(PROB_FLOOR))
        .collect();
    let sum = order_free_sum(&raw);
    if sum > 0.0 && sum.is_finite() {
        raw.iter().map(|x| x / sum).collect()
    } else {
        p.to_vec()
    }
}

/// Element-wise mean of several distributions of equal length, renormalized.
pub fn mean_distribution(dists: &[Vec<f64>]) -> Vec<f64> {
    let Some(first) = dists.first() else {
        return Vec::new();
    };
    let n = dists.len() as f64;
    let mut mean = vec![0.0; first.len()];
    for d in dists {
        for (m, x) in mean.iter_mut().zip(d) {
            *m += x / n;
        }
    }
    let sum = order_free_sum(&mean);
    if sum > 0.0 {
        mean.iter_mut().for_each(|m| *m /= sum);
    }
    mean
}

/// Index of the largest value (first one on ties).
pub fn argmax(p: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in p.iter().enumerate() {
        if x > p[best] {
            best = i;
        }
    }
    best
}

/// The averaged answer of one question over `n` reads (serving.md §6.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Aggregate {
    /// Mean distribution over labels.
    pub mean: Vec<f64>,
    /// Index of the chosen label.
    pub top: usize,
    /// `mean[top]`.
    pub confidence: f64,
    /// Entropy of `mean`, nats.
    pub entropy: f64,
    /// `entropy / ln K` in [0, 1].
    pub normalized_entropy: f64,
    /// Standard error of `p[top]` over reads (`sqrt(var/n)`, sample variance); `None` when n = 1.
    pub stderr: Option<f64>,
    /// Share of reads whose own argmax equals `top`; `None` when n = 1.
    pub agreement: Option<f64>,
}

/// Average the per-read distributions of one question.
pub fn aggregate(reads: &[Vec<f64>]) -> Aggregate {
    let mean = mean_distribution(reads);
    let top = argmax(&mean);
    let confidence = mean.get(top).copied().unwrap_or(0.0);
    let n = reads.len();
    let (stderr, agreement) = if n > 1 {
        let var = reads
            .iter()
            .map(|r| (r.get(top).copied().unwrap_or(0.0) - confidence).powi(2))
            .sum::<f64>()
            / (n as f64 - 1.0);
        let agree = reads.iter().filter(|r| argmax(r) == top).count() as f64 / n as f64;
        (Some((var / n as f64).sqrt()), Some(agree))
    } else {
        (None, None)
    };
    Aggregate {
        entropy: entropy(&mean),
        normalized_entropy: normalized_entropy(&mean),
        mean,
        top,
        confidence,
        stderr,
        agreement,
    }
}

/// 1-based expected level `Σ (i+1)·p_i` of a score distribution (chat route).
pub fn score_expectation(p: &[f64]) -> f64 {
    p.iter()
        .enumerate()
        .map(|(i, x)| (i as f64 + 1.0) * x)
        .sum()
}

/// The numeric value of every level, when **all** level names parse as finite
/// numbers (`"1".."5"`, `"20".."24"`, `"0.5"`); `None` otherwise (word levels).
pub fn level_values<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<Vec<f64>> {
    names
        .into_iter()
        .map(|n| n.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect()
}

/// Expected level value `Σ v_i·p_i` of a score distribution over levels whose
/// names are the numbers `values` (levels `"1".."5"` with most mass on `"4"`
/// read close to 4.0, whatever their positions). Lengths must match; extra
/// entries of either are ignored.
pub fn score_value(p: &[f64], values: &[f64]) -> f64 {
    p.iter().zip(values).map(|(x, v)| x * v).sum()
}

/// Reads to run first and, given the first read's per-question entropies (nats),
/// whether to extend (serving.md §6.4). Returns `(first_batch, extra_if_extended)`.
pub fn sample_plan(policy: SamplePolicy) -> (u32, u32) {
    match policy {
        SamplePolicy::Fixed { n } => (n.max(1), 0),
        SamplePolicy::Auto { max, .. } => (1, max.saturating_sub(1)),
    }
}

/// Whether an `"auto"` policy extends after the first read: the largest
/// first-read entropy (nats) exceeds the threshold and `max > 1`.
pub fn auto_extends(policy: SamplePolicy, first_read_entropies: &[f64]) -> bool {
    match policy {
        SamplePolicy::Fixed { .. } => false,
        SamplePolicy::Auto { max, threshold } => {
            let worst = first_read_entropies
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
            max > 1 && worst > threshold
        }
    }
}

#[cfg(test)]
mod tests;
