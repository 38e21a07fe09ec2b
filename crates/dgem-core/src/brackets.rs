//! Bracket routing: choice questions with more options than one slot can hold.
//!
//! One slot reads at most [`MAX_ALTERNATIVES`] (26) labels. A choice question
//! with 27..=[`MAX_BRACKET_OPTIONS`] options is answered in two rounds, as the
//! original project's Decision Index adapter does:
//!
//! 1. **Brackets.** The options are split into `ceil(K / 20)` balanced brackets
//!    ([`split`]: sizes differ by at most one, so there is never a one-option
//!    tail). Each bracket is a choice sub-question over its own options
//!    ([`bracket_question`]); up to [`BRACKETS_PER_PASS`] of them are read per
//!    decision.
//! 2. **Final.** Each bracket's two most probable options go to a final round
//!    ([`finalists`], at most `26 − 2` of them, the most probable kept), read as
//!    one choice question ([`final_question`]).
//!
//! [`fuse`] then spreads probability over all K options: a bracket gets the
//! final-round mass of its finalists, its other options share that mass in
//! proportion to their round-1 probabilities, finalists keep their final-round
//! share of what is left, no non-finalist may beat the best finalist, and the
//! result sums to 1.

use std::ops::Range;

use crate::schema::{Question, QuestionKind, MAX_ALTERNATIVES};

/// Most options one routed choice question may hold.
pub const MAX_BRACKET_OPTIONS: usize = 300;
/// Largest bracket (the original adapter's default `bracket_size`).
pub const BRACKET_SIZE: usize = 20;
/// Bracket sub-questions read per decision (round 1).
pub const BRACKETS_PER_PASS: usize = 8;
/// Options each bracket sends to the final.
pub const FINALISTS_PER_BRACKET: usize = 2;
/// Most finalists (the slot limit less two, as the original adapter keeps).
pub const MAX_FINALISTS: usize = MAX_ALTERNATIVES - 2;
/// Smallest probability any option keeps after fusion.
pub const FUSED_FLOOR: f64 = 1e-12;

/// Whether `q` needs bracket routing (a choice with more than 26 options).
pub fn needs_brackets(q: &Question) -> bool {
    q.kind == QuestionKind::Choice && q.alternatives.len() > MAX_ALTERNATIVES
}

/// Split `k` options into `ceil(k / size)` contiguous brackets whose sizes
/// differ by at most one. `size` 0 is treated as 1; `k` 0 gives no bracket.
pub fn split(k: usize, size: usize) -> Vec<Range<usize>> {
    if k == 0 {
        return Vec::new();
    }
    let n = k.div_ceil(size.max(1));
    let (base, extra) = (k / n, k % n);
    let mut out = Vec::with_capacity(n);
    let mut at = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        out.push(at..at + len);
        at += len;
    }
    out
}

fn sub_question(q: &Question, id: String, indices: &[usize]) -> Question {
    Question {
        id,
        kind: QuestionKind::Choice,
        instructions: q.instructions.clone(),
        alternatives: indices
            .iter()
            .filter_map(|&i| q.alternatives.get(i).cloned())
            .collect(),
        depends_on: Vec::new(),
        ask_if: indexmap::IndexMap::new(),
        alone: None,
        alone_auto: false,
        none_option: None,
        select: None,
    }
}

/// The round-1 sub-question of bracket `b` of `q`: id `"<id>__b<b>"`, the same
/// instructions, the bracket's options in order.
pub fn bracket_question(q: &Question, b: usize, range: Range<usize>) -> Question {
    let indices: Vec<usize> = range.collect();
    sub_question(q, format!("{}__b{b}", q.id), &indices)
}

/// The final-round question of `q` over `finalists` (option indices): id
/// `"<id>__final"`.
pub fn final_question(q: &Question, finalists: &[usize]) -> Question {
    sub_question(q, format!("{}__final", q.id), finalists)
}

/// The finalists, as option indices in option order: each bracket's
/// [`FINALISTS_PER_BRACKET`] most probable options (`round1[b]` is bracket `b`'s
/// distribution over its own options), then, when more than [`MAX_FINALISTS`],
/// the most probable of them by round-1 probability.
pub fn finalists(brackets: &[Range<usize>], round1: &[Vec<f64>]) -> Vec<usize> {
    let mut picked: Vec<(usize, f64)> = Vec::new();
    for (range, probs) in brackets.iter().zip(round1) {
        let mut local: Vec<(usize, f64)> = range.clone().zip(probs.iter().copied()).collect();
        local.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        picked.extend(local.into_iter().take(FINALISTS_PER_BRACKET));
    }
    if picked.len() > MAX_FINALISTS {
        picked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        picked.truncate(MAX_FINALISTS);
    }
    let mut idx: Vec<usize> = picked.into_iter().map(|(i, _)| i).collect();
    idx.sort_unstable();
    idx
}

/// Probabilities over all `k` options from both rounds (see the module docs).
/// `round1[b]` is bracket `b`'s distribution, `p_final` the final round's over
/// `finalists` (in the same order). The result has `k` entries, each at least
/// [`FUSED_FLOOR`], summing to 1.
pub fn fuse(
    k: usize,
    brackets: &[Range<usize>],
    round1: &[Vec<f64>],
    finalists: &[usize],
    p_final: &[f64],
) -> Vec<f64> {
    let mut out = vec![0.0; k];
    let final_total: f64 = p_final.iter().sum();
    let share = |i: usize| -> f64 {
        let p = p_final.get(i).copied().unwrap_or(0.0);
        if final_total > 0.0 {
            p / final_total
        } else {
            0.0
        }
    };
    let is_finalist = |o: usize| finalists.binary_search(&o).is_ok();
    let mut non_finalist_mass = 0.0;
    for (range, probs) in brackets.iter().zip(round1) {
        let bracket_mass: f64 = finalists
            .iter()
            .enumerate()
            .filter(|(_, f)| range.contains(f))
            .map(|(i, _)| share(i))
            .sum();
        let local_total: f64 = probs.iter().sum();
        for (o, p) in range.clone().zip(probs) {
            if is_finalist(o) || local_total <= 0.0 {
                continue;
            }
            let v = bracket_mass * p / local_total;
            out[o] = v;
            non_finalist_mass += v;
        }
    }
    let rest = (1.0 - non_finalist_mass).max(0.0);
    let mut best = 0.0f64;
    for (i, &f) in finalists.iter().enumerate() {
        if let Some(slot) = out.get_mut(f) {
            *slot = share(i) * rest;
            best = best.max(*slot);
        }
    }
    for (o, v) in out.iter_mut().enumerate() {
        if !is_finalist(o) && *v >= best {
            *v = best * 0.999;
        }
        *v = v.max(FUSED_FLOOR);
    }
    let total: f64 = out.iter().sum();
    if total > 0.0 {
        out.iter_mut().for_each(|v| *v /= total);
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::schema::{SchemaDefaults, ValidSchema};

    #[test]
    fn split_is_balanced_and_never_leaves_a_singleton() {
        let sizes = |k| split(k, 20).iter().map(|r| r.len()).collect::<Vec<_>>();
        assert_eq!(sizes(27), [14, 13]);
        assert_eq!(sizes(41), [14, 14, 13]);
        assert_eq!(sizes(40), [20, 20]);
        assert_eq!(sizes(77), [20, 19, 19, 19]);
        assert_eq!(split(300, 20).len(), 15);
    }

    #[test]
    fn finalists_take_two_per_bracket_in_option_order() {
        let b = split(27, 20);
        let r1 = vec![
            (0..14)
                .map(|i| {
                    if i == 3 {
                        0.5
                    } else if i == 9 {
                        0.3
                    } else {
                        0.2 / 12.0
                    }
                })
                .collect(),
            (0..13)
                .map(|i| if i == 0 { 0.6 } else { 0.4 / 12.0 })
                .collect::<Vec<f64>>(),
        ];
        // Bracket 1's second place is a tie among equals: the lowest index wins.
        assert_eq!(finalists(&b, &r1), vec![3, 9, 14, 15]);
    }

    #[test]
    fn fused_distribution_covers_all_options_and_an_obvious_answer_stays_obvious() {
        let b = split(60, 20);
        // Option 42 (bracket 2, local index 2) is clearly right.
        let r1: Vec<Vec<f64>> = (0..3)
            .map(|bi| {
                (0..20)
                    .map(|i| match (bi, i) {
                        (2, 2) => 0.97,
                        (2, _) => 0.03 / 19.0,
                        (_, 0) => 0.4,
                        _ => 0.6 / 19.0,
                    })
                    .collect()
            })
            .collect();
        let f = finalists(&b, &r1);
        assert_eq!(f.len(), 6);
        assert!(f.contains(&42));
        let p_final: Vec<f64> = f
            .iter()
            .map(|&o| if o == 42 { 0.99 } else { 0.002 })
            .collect();
        let fused = fuse(60, &b, &r1, &f, &p_final);
        assert_eq!(fused.len(), 60);
        assert!((fused.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(fused[42] > 0.95, "obvious answer kept: {}", fused[42]);
        let top = crate::readout::argmax(&fused);
        assert_eq!(top, 42);
    }

    #[test]
    fn routed_questions_are_choices_over_their_bracket() {
        let opts: Vec<String> = (0..30).map(|i| format!("intent_{i}")).collect();
        let s = ValidSchema::from_value(
            &json!({"questions": [{"id": "intent", "type": "choice", "options": opts, "instructions": "Which?"}]}),
            &SchemaDefaults::default(),
        )
        .expect("valid");
        let q = &s.questions[0];
        assert!(needs_brackets(q));
        let b = bracket_question(q, 1, 15..30);
        assert_eq!(b.id, "intent__b1");
        assert_eq!(b.alternatives.len(), 15);
        assert_eq!(b.alternatives[0].name, "intent_15");
        assert_eq!(b.instructions, "Which?");
        let f = final_question(q, &[2, 20]);
        assert_eq!(f.id, "intent__final");
        assert_eq!(f.alternatives[1].name, "intent_20");
    }

    proptest! {
        /// Whatever the reads, fusion gives a distribution over all K options
        /// whose argmax is a finalist.
        #[test]
        fn fusion_sums_to_one(k in 27usize..300, seed in any::<u64>()) {
            let b = split(k, BRACKET_SIZE);
            let mut x = seed | 1;
            let mut rnd = move || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; (x % 1000) as f64 + 1.0 };
            let r1: Vec<Vec<f64>> = b.iter().map(|r| {
                let raw: Vec<f64> = r.clone().map(|_| rnd()).collect();
                let s: f64 = raw.iter().sum();
                raw.into_iter().map(|v| v / s).collect()
            }).collect();
            let f = finalists(&b, &r1);
            prop_assert!(f.len() <= MAX_FINALISTS && f.len() >= 2);
            let raw: Vec<f64> = f.iter().map(|_| rnd()).collect();
            let s: f64 = raw.iter().sum();
            let p_final: Vec<f64> = raw.into_iter().map(|v| v / s).collect();
            let fused = fuse(k, &b, &r1, &f, &p_final);
            prop_assert_eq!(fused.len(), k);
            prop_assert!((fused.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            prop_assert!(fused.iter().all(|&v| v >= FUSED_FLOOR / 2.0));
            prop_assert!(f.contains(&crate::readout::argmax(&fused)));
        }
    }
}
