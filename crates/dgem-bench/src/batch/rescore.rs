//! Batch calibration ([`super::calibrate`]) applied to a benchmark run's
//! items, so the quality gate's figures can be reported with and without it
//! (`dgem bench-calibration --calibrate batch`, `dgem bench-jev --calibrate
//! batch`).
//!
//! Every slot is first counted into the run's [`BatchPrior`], then each is
//! re-read from its corrected distribution: the answer is the new argmax,
//! and confidence, entropy, hesitation, correctness and Brier follow from
//! the new numbers by the same formulas as a live read
//! ([`dgem_core::readout::aggregate`], [`crate::metrics::brier`]).
//!
//! Groups: a `dgem bench` slot is grouped by its item's domain (each
//! domain is one policy), its slot id and its option names, as a batch run
//! of one policy groups its questions.
//! A JevBench-style row is its own question, so the slice has no question
//! asked of many inputs; its rows are grouped by question type and label
//! names (the yes/no rows of every family form one group), the closest it
//! has to one task over a batch.

use dgem_core::readout::aggregate;
use indexmap::IndexMap;

use super::calibrate::BatchPrior;
use crate::metrics::{self, jevbench};
use crate::suites::bench::{BenchItem, SlotOut};
use crate::suites::jev_run::JevItem;

/// What a rescoring did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// Slots with a distribution.
    pub slots: usize,
    /// Slots whose group was large enough to be corrected.
    pub corrected: usize,
    /// Slots whose answer changed.
    pub flipped: usize,
}

fn options(p: &IndexMap<String, f64>) -> Vec<String> {
    p.keys().cloned().collect()
}

/// Apply batch calibration to every slot of `items` (a `dgem bench` run).
pub fn bench_items(items: &mut [BenchItem]) -> Applied {
    let key = |domain: &str, slot: &str| format!("{domain}/{slot}");
    let mut prior = BatchPrior::default();
    for item in items.iter() {
        for (id, s) in &item.slots {
            let dist: Vec<f64> = s.probabilities.values().copied().collect();
            prior.add(&key(&item.domain, id), &options(&s.probabilities), &dist);
        }
    }
    let mut applied = Applied::default();
    for item in items.iter_mut() {
        let domain = item.domain.clone();
        for (id, s) in item.slots.iter_mut() {
            if s.probabilities.is_empty() {
                continue;
            }
            applied.slots += 1;
            let opts = options(&s.probabilities);
            let dist: Vec<f64> = s.probabilities.values().copied().collect();
            let Some(new) = prior.apply(&key(&domain, id), &opts, &dist) else {
                continue;
            };
            applied.corrected += 1;
            let before = s.answer.clone();
            reread_slot(s, &opts, &new);
            if s.answer != before {
                applied.flipped += 1;
            }
        }
        item.correct = item.error.is_none() && item.slots.values().all(|s| s.correct);
    }
    applied
}

fn reread_slot(s: &mut SlotOut, opts: &[String], new: &[f64]) {
    let a = aggregate(&[new.to_vec()]);
    s.probabilities = opts.iter().cloned().zip(new.iter().copied()).collect();
    s.answer = opts.get(a.top).cloned();
    s.correct = s.gold == Some(a.top);
    s.confidence = a.confidence;
    s.hesitation = a.normalized_entropy;
}

/// Apply batch calibration to every row of `items` (a `dgem bench-jev` run).
pub fn jev_items(items: &mut [JevItem]) -> Applied {
    let key = |i: &JevItem| i.question_type.clone();
    let mut prior = BatchPrior::default();
    for i in items.iter() {
        let dist: Vec<f64> = i.probabilities.values().copied().collect();
        prior.add(&key(i), &options(&i.probabilities), &dist);
    }
    let mut applied = Applied::default();
    for i in items.iter_mut() {
        if i.probabilities.is_empty() {
            continue;
        }
        applied.slots += 1;
        let opts = options(&i.probabilities);
        let dist: Vec<f64> = i.probabilities.values().copied().collect();
        let Some(new) = prior.apply(&key(i), &opts, &dist) else {
            continue;
        };
        applied.corrected += 1;
        let a = aggregate(std::slice::from_ref(&new));
        let before = i.actual.clone();
        let gold = opts.iter().position(|o| o == &i.expected);
        i.actual = opts.get(a.top).cloned();
        i.accurate = i.actual.as_deref() == Some(i.expected.as_str());
        i.confidence = a.confidence;
        i.entropy_nats = a.entropy;
        i.normalized_entropy = a.normalized_entropy;
        i.brier_score = metrics::brier(&new, gold);
        i.tvd_gold = jevbench::human_gold_share(&i.tier)
            .map(|share| jevbench::soft_tvd(i.accurate, i.confidence, share));
        i.probabilities = opts.into_iter().zip(new).collect();
        if i.actual != before {
            applied.flipped += 1;
        }
    }
    applied
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::batch::calibrate::MIN_ROWS;

    fn slot(p_yes: f64, gold: usize) -> SlotOut {
        let probabilities: IndexMap<String, f64> =
            [("yes".to_string(), p_yes), ("no".to_string(), 1.0 - p_yes)]
                .into_iter()
                .collect();
        let top = usize::from(p_yes < 0.5);
        SlotOut {
            expected: ["yes", "no"][gold].into(),
            answer: Some(["yes", "no"][top].into()),
            correct: top == gold,
            confidence: p_yes.max(1.0 - p_yes),
            hesitation: 0.9,
            probabilities,
            gold: Some(gold),
            question_type: Some("boolean".into()),
            scoring: None,
            multi: None,
        }
    }

    fn item(id: usize, s: SlotOut) -> BenchItem {
        BenchItem {
            id: format!("i{id}"),
            line: id + 1,
            domain: "d".into(),
            tier: "t".into(),
            correct: s.correct,
            slots: [("urgent".to_string(), s)].into_iter().collect(),
            wall_ms: 1.0,
            reads: 1,
            extended: None,
            error: None,
        }
    }

    #[test]
    fn a_model_that_says_yes_to_everything_is_corrected_and_rescored() {
        // Gold alternates; the model reads 0.8 where the answer is yes and
        // 0.6 where it is no: always `yes`, right half the time.
        let mut items: Vec<BenchItem> = (0..2 * MIN_ROWS)
            .map(|i| item(i, slot(if i % 2 == 0 { 0.8 } else { 0.6 }, i % 2)))
            .collect();
        assert_eq!(items.iter().filter(|i| i.correct).count(), MIN_ROWS);
        let applied = bench_items(&mut items);
        assert_eq!(applied.slots, 2 * MIN_ROWS);
        assert_eq!(applied.corrected, 2 * MIN_ROWS);
        assert_eq!(applied.flipped, MIN_ROWS, "the 0.6 rows now say no");
        assert!(items.iter().all(|i| i.correct));
        let s = &items[1].slots["urgent"];
        assert_eq!(s.answer.as_deref(), Some("no"));
        assert!((s.probabilities.values().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((s.confidence - s.probabilities["no"]).abs() < 1e-12);
    }
}
