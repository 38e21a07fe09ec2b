//! Multi-label rows of `dgem bench`: a `multi` question whose `expected`
//! value is the list of options that apply.
//!
//! Each option of such a question is scored as a yes/no label slot of its
//! own, keyed `<question>/<option>`: gold `yes` when the option is in the
//! expected list, the answer `yes` when the decision selected it, its
//! probabilities `[p(applies), 1 − p(applies)]`. The label slots join every
//! other figure (accuracy, ECE and Brier against the uniform guess, per
//! scoring path and under the type `multi`), so a multi-label run is
//! calibrated per label like any yes/no read. On top, [`figures`] reports:
//! - `multilabel_exact_match`: share of (item, question) pairs whose selected
//!   set is exactly the expected one;
//! - `multilabel_micro_f1`: `2·TP / (2·TP + FP + FN)` over every label;
//! - `multilabel_macro_f1`: the mean of each label's own F1 (a label is one
//!   option of one question across the run; labels never expected nor
//!   selected have no F1 and are left out);
//! - `multilabel_f1_all_selected`: the micro F1 of selecting every option,
//!   the baseline a reader must beat (it has perfect recall).

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde_json::Value;

use dgem_core::envelope::{AnswerOut, Diagnostics};
use dgem_core::schema::{Question, QuestionKind};

use super::super::normalize_answer;
use super::super::quality::ScoringPath;
use super::{BenchItem, SlotOut};
use crate::report::{fmt_metric, pct, Table};

/// Separator between a `multi` question's id and an option in a label slot's key.
pub const LABEL_SEPARATOR: char = '/';

/// The expected option names of a multi-label row's `expected` value,
/// checked against `q`'s options (matched as [`normalize_answer`] does). An
/// empty list on a question with a "none" option expects that option; the
/// "none" option may not be expected with others (it is selected alone).
///
/// # Errors
/// A message naming the allowed options and the value given when `want` is
/// not a list of option names, or `q` is not a `multi` question.
pub fn expected_set(q: &Question, want: &Value) -> Result<Vec<usize>, String> {
    let names: Vec<&str> = q.alternatives.iter().map(|a| a.name.as_str()).collect();
    if q.kind != QuestionKind::Multi {
        return Err(format!(
            "a list is expected only for a multi question; `{}` is {} and takes one of {names:?}. Given: {want}",
            q.id,
            q.kind.as_str()
        ));
    }
    let Some(list) = want.as_array() else {
        return Err(format!(
            "`{}` is a multi question: give the list of options that apply, each one of {names:?}. Given: {want}",
            q.id
        ));
    };
    // Nothing applies: on a question with a "none" option, that is its answer.
    if list.is_empty() {
        return Ok(q.none_option.into_iter().collect());
    }
    let mut out = Vec::with_capacity(list.len());
    for v in list {
        let given = v.as_str().unwrap_or_default();
        let Some(i) = names
            .iter()
            .position(|n| !given.is_empty() && normalize_answer(n) == normalize_answer(given))
        else {
            return Err(format!(
                "each expected option of `{}` must be one of {names:?}. Given: {v}",
                q.id
            ));
        };
        if !out.contains(&i) {
            out.push(i);
        }
    }
    if let Some(n) = q.none_option.filter(|n| out.contains(n) && out.len() > 1) {
        return Err(format!(
            "`{}`'s \"{}\" option is selected alone; it cannot be expected with other options. Given: {want}",
            q.id, q.alternatives[n].name
        ));
    }
    Ok(out)
}

/// The label slots of one multi question (see the module docs), keyed
/// `<question>/<option>`, in option order. `answer` is `None` when the
/// question was skipped: every label is then unanswered.
pub fn label_slots(
    q: &Question,
    gold: &[usize],
    answer: Option<&AnswerOut>,
    diagnostics: &Diagnostics,
) -> Vec<(String, SlotOut)> {
    let slot_ids = diagnostics.multi.get(&q.id);
    q.alternatives
        .iter()
        .enumerate()
        .map(|(j, alt)| {
            let expected = if gold.contains(&j) { "yes" } else { "no" };
            let scoring = slot_ids
                .and_then(|ids| ids.get(j))
                .and_then(|id| ScoringPath::of(diagnostics, id));
            let read = answer.and_then(|a| a.multi.as_ref().map(|m| (a, m)));
            let out = match read {
                Some((a, m)) => {
                    let p = m
                        .options
                        .get(j)
                        .and_then(|o| o.mean.first())
                        .copied()
                        .unwrap_or(0.0);
                    let selected = m.selected.contains(&j);
                    let said = if selected { "yes" } else { "no" };
                    let h = dgem_core::multi::bernoulli_hesitation(p);
                    SlotOut {
                        expected: expected.into(),
                        answer: Some(said.into()),
                        correct: said == expected,
                        confidence: if selected { p } else { 1.0 - p },
                        hesitation: h,
                        probabilities: IndexMap::from([("yes".into(), p), ("no".into(), 1.0 - p)]),
                        gold: Some(usize::from(expected == "no")),
                        question_type: Some(a.question.kind.as_str().into()),
                        scoring,
                        multi: Some(q.id.clone()),
                    }
                }
                None => SlotOut {
                    expected: expected.into(),
                    answer: None,
                    correct: false,
                    confidence: 0.0,
                    hesitation: 1.0,
                    probabilities: IndexMap::new(),
                    gold: None,
                    question_type: Some(QuestionKind::Multi.as_str().into()),
                    scoring: None,
                    multi: Some(q.id.clone()),
                },
            };
            (format!("{}{LABEL_SEPARATOR}{}", q.id, alt.name), out)
        })
        .collect()
}

#[derive(Default, Clone, Copy)]
struct Counts {
    tp: usize,
    fp: usize,
    fn_: usize,
}

impl Counts {
    fn f1(self) -> Option<f64> {
        let d = 2 * self.tp + self.fp + self.fn_;
        (d > 0).then(|| 2.0 * self.tp as f64 / d as f64)
    }
}

/// The multi-label figures of a run (see the module docs) and their table;
/// `None` when no item has a label slot.
pub fn figures(items: &[&BenchItem]) -> Option<(BTreeMap<String, f64>, Table)> {
    let mut labels: BTreeMap<String, Counts> = BTreeMap::new();
    let mut all_selected = Counts::default();
    let mut sets: BTreeMap<(String, String), bool> = BTreeMap::new();
    for it in items {
        for (key, s) in &it.slots {
            let Some(question) = &s.multi else { continue };
            let ok = sets
                .entry((it.id.clone(), question.clone()))
                .or_insert(true);
            *ok &= s.correct;
            let gold = s.expected == "yes";
            let said = s.answer.as_deref() == Some("yes");
            let c = labels.entry(key.clone()).or_default();
            match (gold, said) {
                (true, true) => c.tp += 1,
                (false, true) => c.fp += 1,
                (true, false) => c.fn_ += 1,
                (false, false) => {}
            }
            if gold {
                all_selected.tp += 1;
            } else {
                all_selected.fp += 1;
            }
        }
    }
    if labels.is_empty() {
        return None;
    }
    let micro = labels.values().fold(Counts::default(), |a, c| Counts {
        tp: a.tp + c.tp,
        fp: a.fp + c.fp,
        fn_: a.fn_ + c.fn_,
    });
    let per: Vec<f64> = labels.values().filter_map(|c| c.f1()).collect();
    let exact = sets.values().filter(|ok| **ok).count() as f64 / sets.len() as f64;
    let mut m = BTreeMap::new();
    m.insert("multilabel_sets".into(), sets.len() as f64);
    m.insert("multilabel_labels".into(), labels.len() as f64);
    m.insert("multilabel_exact_match".into(), exact);
    m.insert("multilabel_micro_f1".into(), micro.f1().unwrap_or(0.0));
    m.insert("multilabel_macro_f1".into(), crate::metrics::mean(&per));
    m.insert(
        "multilabel_f1_all_selected".into(),
        all_selected.f1().unwrap_or(0.0),
    );
    let mut t = Table::new("Multi-label", &["Label", "TP", "FP", "FN", "F1"]);
    for (label, c) in &labels {
        t.push(vec![
            label.clone(),
            c.tp.to_string(),
            c.fp.to_string(),
            c.fn_.to_string(),
            c.f1().map_or_else(|| "-".into(), fmt_metric),
        ]);
    }
    t.push(vec![
        format!("micro (exact sets {})", pct(exact)),
        micro.tp.to_string(),
        micro.fp.to_string(),
        micro.fn_.to_string(),
        fmt_metric(micro.f1().unwrap_or(0.0)),
    ]);
    t.push(vec![
        "baseline: select every option".into(),
        all_selected.tp.to_string(),
        all_selected.fp.to_string(),
        "0".into(),
        fmt_metric(all_selected.f1().unwrap_or(0.0)),
    ]);
    Some((m, t))
}

#[cfg(test)]
mod tests;
