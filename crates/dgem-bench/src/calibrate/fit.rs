//! Fitting one temperature and scoring it held out.
//!
//! **The fit.** For slots `(p_i, g_i)` of one question type, T minimizes the
//! mean negative log-likelihood of the scaled distribution
//! `NLL(T) = (1/n) Σ_i −ln softmax(ln max(p_i, 1e-12) / T)[g_i]` over
//! T ∈ [0.05, 20] — temperature scaling (Guo et al. 2017, "On Calibration of
//! Modern Neural Networks", §4.2), with the read's log-probabilities as logits,
//! exactly as [`dgem_core::after::temperature::scale`] applies it.
//! With β = 1/T the logits are linear in β and log-sum-exp is convex, so NLL
//! is convex in β, hence unimodal in ln T; a golden-section search on ln T
//! (Kiefer 1953) over the bracket therefore finds the global minimum on it,
//! to [`LN_T_TOLERANCE`]. A minimum at an end of the bracket is reported as a
//! note. An objective flat to 1e-12 (every read uniform) gives T = 1.
//!
//! **Held out.** Each row's fold is a stable hash of its id ([`fold_of`]), so
//! every slot of a row lands in the same fold and reruns are identical. Fold j
//! is scored with the T fitted on the other k − 1 folds; the out-of-fold
//! predictions of all folds are then scored together: 10-bin ECE of the top
//! answer's confidence against its correctness, multi-class Brier and NLL
//! ([`crate::metrics`]), before (T = 1) and after. Intervals are 95%
//! percentile-bootstrap intervals (Efron & Tibshirani 1993, ch. 13): slots are
//! resampled with replacement, the same resample scoring before, after and
//! their difference (paired), drawn from an MT19937 seeded like Python's
//! `random.Random(seed)`, so they are reproducible.
//!
//! **Kept or dropped.** A cross-validated temperature is kept only when it
//! does not raise the out-of-fold Brier score or NLL, the two proper scoring
//! rules; ECE is reported beside them but is not a proper scoring rule and is
//! too noisy on a few dozen slots to decide.

use std::collections::BTreeSet;

use dgem_core::after::calibration::{
    Compared, Estimate, Scores, TypeCalibration, MIN_FITTED_TEMPERATURE,
};
use dgem_core::after::temperature::{scale, MAX_TEMPERATURE};
use dgem_core::readout::PROB_FLOOR;
use dgem_core::slots::{python_random, python_randrange};
use sha2::{Digest, Sha256};

use crate::metrics::{self, percentile};

/// Golden-section search stops when the bracket on ln T is narrower than this.
pub const LN_T_TOLERANCE: f64 = 1e-7;

/// Labelled slots needed per fold: fewer than `2·k` slots of a type leave it unset.
pub const MIN_SLOTS_PER_FOLD: usize = 2;

/// Labelled slots an in-sample fit needs.
pub const MIN_IN_SAMPLE_SLOTS: usize = 2;

/// How much a kept temperature may raise an out-of-fold figure (Brier,
/// NLL in nats): the search's own precision, so T = 1 on a calibrated model is
/// not dropped for noise.
pub const HELD_OUT_TOLERANCE: f64 = 1e-6;

/// One labelled slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The row's id (decides the fold).
    pub row: String,
    /// Probability per alternative, as read (T = 1).
    pub probabilities: Vec<f64>,
    /// Index of the expected answer among the alternatives.
    pub gold: usize,
}

/// How figures are obtained: k-fold cross-validation or in-sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// `k ≥ 2` folds: fit on k − 1, score on the one left out.
    Folds(usize),
    /// Fit and score on the same slots (optimistic).
    InSample,
}

/// The fold (0..k) of a row: the first 8 bytes of sha256(id), big-endian, mod k.
/// `k = 0` is treated as 1.
pub fn fold_of(id: &str, k: usize) -> usize {
    let d = Sha256::digest(id.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    (u64::from_be_bytes(b) % k.max(1) as u64) as usize
}

/// Mean NLL (nats) of `samples` at temperature `t` > 0, computed as
/// log-sum-exp − logit of gold (no probability floor on the result); 0 for none.
pub fn mean_nll(samples: &[Sample], t: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let total: f64 = samples
        .iter()
        .map(|s| {
            let z: Vec<f64> = s
                .probabilities
                .iter()
                .map(|&p| p.max(PROB_FLOOR).ln() / t)
                .collect();
            let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + z.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            lse - z.get(s.gold).copied().unwrap_or(f64::NEG_INFINITY)
        })
        .sum();
    total / samples.len() as f64
}

/// The temperature in [0.05, 20] that minimizes [`mean_nll`] (see the module
/// docs); 1 for no samples or a flat objective.
pub fn fit_temperature(samples: &[Sample]) -> f64 {
    let f = |x: f64| mean_nll(samples, x.exp());
    let (mut a, mut b) = (MIN_FITTED_TEMPERATURE.ln(), MAX_TEMPERATURE.ln());
    let (fa, fb, f1) = (f(a), f(b), f(0.0));
    if samples.is_empty() || fa.max(fb).max(f1) - fa.min(fb).min(f1) < 1e-12 {
        return 1.0;
    }
    let inv_phi = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = b - inv_phi * (b - a);
    let mut d = a + inv_phi * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    while b - a > LN_T_TOLERANCE {
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - inv_phi * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + inv_phi * (b - a);
            fd = f(d);
        }
    }
    // The search never lands on an end of the bracket; snap to one that is at
    // least as good, so a minimum on the bound reads as the bound itself.
    let x = (a + b) / 2.0;
    let fx = f(x);
    let best = if fa <= fx && fa <= fb {
        MIN_FITTED_TEMPERATURE
    } else if fb <= fx {
        MAX_TEMPERATURE
    } else {
        x.exp()
    };
    best.clamp(MIN_FITTED_TEMPERATURE, MAX_TEMPERATURE)
}

fn unset(slots: usize, rows: usize, reason: String) -> TypeCalibration {
    TypeCalibration {
        slots,
        rows,
        temperature: None,
        unset_reason: Some(reason),
        fold_temperatures: Vec::new(),
        note: None,
        scores: None,
    }
}

/// A fitted type with the `(confidence, correct)` pairs of its scored slots
/// before and after, for the reliability diagram.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeFit {
    /// The figures written to the calibration file.
    pub figures: TypeCalibration,
    /// Top-answer confidence and correctness as read.
    pub before: Vec<(f64, bool)>,
    /// The same after the (out-of-fold) temperature.
    pub after: Vec<(f64, bool)>,
}

/// Fit one question type's `samples` and score the fit as `split` says, with
/// `resamples` bootstrap resamples drawn from `seed`.
///
/// A type with no samples, fewer than `2·k` samples, or an empty fold (with
/// [`Split::Folds`]), or fewer than [`MIN_IN_SAMPLE_SLOTS`] in-sample, is left
/// unset with the reason; the caller must have checked `k ≥ 2`.
pub fn calibrate_type(samples: &[Sample], split: Split, resamples: usize, seed: i64) -> TypeFit {
    let n = samples.len();
    let rows = samples
        .iter()
        .map(|s| s.row.as_str())
        .collect::<BTreeSet<_>>()
        .len();
    let empty = |reason: String| TypeFit {
        figures: unset(n, rows, reason),
        before: Vec::new(),
        after: Vec::new(),
    };
    if n == 0 {
        return empty("no labelled slots of this type".to_owned());
    }
    let (t_of_slot, fold_temperatures) = match split {
        Split::Folds(k) => {
            let need = MIN_SLOTS_PER_FOLD * k;
            if n < need {
                return empty(format!(
                    "only {n} labelled slot(s); {k}-fold cross-validation needs at least {need} ({MIN_SLOTS_PER_FOLD} per fold): lower `-k`, label more rows, or pass `--in-sample`"
                ));
            }
            let folds: Vec<usize> = samples.iter().map(|s| fold_of(&s.row, k)).collect();
            if let Some(j) = (0..k).find(|j| !folds.contains(j)) {
                return empty(format!(
                    "fold {} of {k} holds no row of this type ({rows} row(s); folds are assigned by a hash of the row id): lower `-k` or label more rows",
                    j + 1
                ));
            }
            let ts: Vec<f64> = (0..k)
                .map(|j| {
                    let train: Vec<Sample> = samples
                        .iter()
                        .zip(&folds)
                        .filter(|(_, f)| **f != j)
                        .map(|(s, _)| s.clone())
                        .collect();
                    fit_temperature(&train)
                })
                .collect();
            (folds.iter().map(|f| ts[*f]).collect::<Vec<_>>(), ts)
        }
        Split::InSample => {
            if n < MIN_IN_SAMPLE_SLOTS {
                return empty(format!(
                    "only {n} labelled slot(s); an in-sample fit needs at least {MIN_IN_SAMPLE_SLOTS}"
                ));
            }
            (vec![fit_temperature(samples); n], Vec::new())
        }
    };
    let t = fit_temperature(samples);
    let after: Vec<Vec<f64>> = samples
        .iter()
        .zip(&t_of_slot)
        .map(|(s, t)| scale(&s.probabilities, *t))
        .collect();
    let (scores, before_cc, after_cc) = score(samples, &after, resamples, seed);
    let note = notes(t, &scores);
    // Cross-validated, a temperature is dropped when it made a held-out proper
    // scoring rule worse (point estimates of out-of-fold Brier or NLL; NLL is
    // what it was fitted to lower): a temperature that does not carry over to
    // unseen rows would make the numbers less honest, not more. Its figures
    // stay in the report. ECE is reported but does not decide: it is not a
    // proper scoring rule (a reader that always states the base rate has ECE
    // 0 and no skill) and on a few dozen slots it moves by several hundredths
    // between equally calibrated readers (see `dgem bench`'s gate notes).
    // `HELD_OUT_TOLERANCE` absorbs the search's own precision.
    let worse: Vec<String> = [("Brier", scores.brier), ("NLL", scores.nll)]
        .iter()
        .filter(|(_, c)| c.after.value > c.before.value + HELD_OUT_TOLERANCE)
        .map(|(name, c)| format!("{name} {:.4} -> {:.4}", c.before.value, c.after.value))
        .collect();
    let carries = matches!(split, Split::InSample) || worse.is_empty();
    TypeFit {
        figures: TypeCalibration {
            slots: n,
            rows,
            temperature: carries.then_some(t),
            unset_reason: (!carries).then(|| {
                format!(
                    "the fitted T = {t:.3} made held-out figures worse ({}): it does not carry over to unseen rows, so none is applied",
                    worse.join(", ")
                )
            }),
            fold_temperatures,
            note,
            scores: Some(scores),
        },
        before: before_cc,
        after: after_cc,
    }
}

/// Remarks on a fit: a bound reached, held-out figures made worse.
fn notes(t: f64, s: &Scores) -> Option<String> {
    let mut notes = Vec::new();
    if t <= MIN_FITTED_TEMPERATURE {
        notes.push(format!("the fit reached the lower bound T = {MIN_FITTED_TEMPERATURE}: sharper answers kept lowering NLL (the top answers are almost all right); treat it as over-fit"));
    } else if t >= MAX_TEMPERATURE {
        notes.push(format!("the fit reached the upper bound T = {MAX_TEMPERATURE}: the probabilities carry almost no information about the gold answers"));
    }
    let worse: Vec<&str> = [("ECE", s.ece_10bin), ("Brier", s.brier), ("NLL", s.nll)]
        .iter()
        .filter(|(_, c)| c.change.low > 0.0)
        .map(|(name, _)| *name)
        .collect();
    if !worse.is_empty() {
        notes.push(format!(
            "held-out {} got worse with the fitted T (its change interval lies above 0): the fit does not carry over to unseen rows; label more rows before relying on it",
            worse.join(", ")
        ));
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// Index of the largest entry (the first on ties); 0 for an empty slice.
fn argmax(p: &[f64]) -> usize {
    let mut best = 0;
    for (i, x) in p.iter().enumerate() {
        if *x > p[best] {
            best = i;
        }
    }
    best
}

/// Per-slot `(confidence, correct, brier, nll)`.
fn per_slot(p: &[f64], gold: usize) -> (f64, bool, f64, f64) {
    let top = argmax(p);
    let conf = p.get(top).copied().unwrap_or(0.0);
    (
        conf,
        top == gold,
        metrics::brier(p, Some(gold)),
        metrics::nll(p, Some(gold)),
    )
}

/// ECE, mean Brier, mean NLL of the slots at `idx`.
fn figures(xs: &[(f64, bool, f64, f64)], idx: &[usize]) -> [f64; 3] {
    let cc: Vec<(f64, bool)> = idx.iter().map(|&i| (xs[i].0, xs[i].1)).collect();
    let m = idx.len().max(1) as f64;
    [
        metrics::ece_10bin(&cc),
        idx.iter().map(|&i| xs[i].2).sum::<f64>() / m,
        idx.iter().map(|&i| xs[i].3).sum::<f64>() / m,
    ]
}

type Scored = (Scores, Vec<(f64, bool)>, Vec<(f64, bool)>);

fn score(samples: &[Sample], after: &[Vec<f64>], resamples: usize, seed: i64) -> Scored {
    let b: Vec<_> = samples
        .iter()
        .map(|s| per_slot(&s.probabilities, s.gold))
        .collect();
    let a: Vec<_> = after
        .iter()
        .zip(samples)
        .map(|(p, s)| per_slot(p, s.gold))
        .collect();
    let n = samples.len();
    let all: Vec<usize> = (0..n).collect();
    let (pb, pa) = (figures(&b, &all), figures(&a, &all));
    let mut draws: [[Vec<f64>; 3]; 3] = Default::default();
    let mut rng = python_random(seed);
    let bound = u32::try_from(n).unwrap_or(u32::MAX);
    for _ in 0..resamples {
        let idx: Vec<usize> = (0..n)
            .map(|_| python_randrange(&mut rng, bound) as usize)
            .collect();
        let (fb, fa) = (figures(&b, &idx), figures(&a, &idx));
        for m in 0..3 {
            draws[m][0].push(fb[m]);
            draws[m][1].push(fa[m]);
            draws[m][2].push(fa[m] - fb[m]);
        }
    }
    let est = |value: f64, d: &[f64]| Estimate {
        value,
        low: if d.is_empty() {
            value
        } else {
            percentile(d, 0.025)
        },
        high: if d.is_empty() {
            value
        } else {
            percentile(d, 0.975)
        },
    };
    let cmp = |m: usize| Compared {
        before: est(pb[m], &draws[m][0]),
        after: est(pa[m], &draws[m][1]),
        change: est(pa[m] - pb[m], &draws[m][2]),
    };
    let accuracy = b.iter().filter(|x| x.1).count() as f64 / n.max(1) as f64;
    let scores = Scores {
        accuracy,
        ece_10bin: cmp(0),
        brier: cmp(1),
        nll: cmp(2),
    };
    let cc = |xs: &[(f64, bool, f64, f64)]| xs.iter().map(|x| (x.0, x.1)).collect();
    (scores, cc(&b), cc(&a))
}
