//! `dgem bench-rerank` (reference.md §8.6): listwise reranking. One decision per
//! query grades every passage 0–3 (a score question per passage id) and names a
//! passage that carries instructions aimed at the AI, if any.
//!
//! * The continuous score of a passage is the expectation over grades
//!   ([`expectation_score`]); the argmax grade is kept for comparison (its ties
//!   show why the expectation is used).
//! * A passage named by the `poisoned_passage` question is quarantined (score −1).
//! * nDCG@10, MRR@10, Recall@2 and the exact tie rate come from those scores.
//! * FollowIR rows (`policy_orig` + `target_demoted_idx`) are decided twice —
//!   original and changed policy — and give p-MRR of the passage to demote.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{item_error, Decider, Summary};
use crate::dataset::Row;
use crate::metrics::ranking::{argmax_grade, rank_of};
use crate::metrics::{self, expectation_score, mrr_at, ndcg_at, p_mrr, recall_at, tie_rate};
use crate::report::{fmt_metric, Table};
use crate::BenchError;

/// One dataset row.
#[derive(Debug, Clone, Deserialize)]
pub struct RerankRow {
    /// Unique id.
    pub id: String,
    /// Slice (grouping).
    #[serde(default)]
    pub slice: String,
    /// The query.
    pub query: String,
    /// The ranking policy.
    #[serde(default)]
    pub policy: String,
    /// The policy before the FollowIR change.
    #[serde(default)]
    pub policy_orig: Option<String>,
    /// Passage the changed policy should demote.
    #[serde(default)]
    pub target_demoted_idx: Option<usize>,
    /// Graded relevance 0–3 per passage.
    pub true_grades: Vec<u32>,
    /// Passages that must be in the top 2.
    #[serde(default)]
    pub gold_indices: Vec<usize>,
    /// The poisoned passage, if any.
    #[serde(default)]
    pub poisoned_idx: Option<usize>,
    /// Passage texts by id (`doc_01` …), in rank-input order.
    pub candidates_text: IndexMap<String, String>,
}

impl Row for RerankRow {
    fn id(&self) -> &str {
        &self.id
    }
    fn check(&self) -> Result<(), String> {
        if self.true_grades.len() != self.candidates_text.len() {
            return Err(format!(
                "`true_grades` has {} entries for {} passages",
                self.true_grades.len(),
                self.candidates_text.len()
            ));
        }
        if self.candidates_text.len() < 2 || self.candidates_text.len() > 25 {
            return Err("`candidates_text` must hold 2 to 25 passages".into());
        }
        Ok(())
    }
}

/// One query's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankItem {
    /// Row id.
    pub id: String,
    /// Slice.
    pub slice: String,
    /// Grade distribution per passage.
    pub grade_probs: Vec<Vec<f64>>,
    /// Expectation scores after quarantine.
    pub scores: Vec<f64>,
    /// Argmax-grade scores after quarantine.
    pub argmax_scores: Vec<f64>,
    /// Passage named as poisoned (`None` = "none").
    pub flagged: Option<usize>,
    /// The dataset's poisoned passage.
    pub poisoned_idx: Option<usize>,
    /// nDCG@10 of the expectation scores.
    pub ndcg10: f64,
    /// nDCG@10 of the argmax scores.
    pub ndcg10_argmax: f64,
    /// MRR@10 (grade ≥ 2).
    pub mrr10: f64,
    /// Recall@2 of the gold passages.
    pub recall2: f64,
    /// Tie rate of the expectation scores.
    pub tie_rate: f64,
    /// Tie rate of the argmax scores.
    pub tie_rate_argmax: f64,
    /// FollowIR p-MRR (`None` for other rows).
    pub p_mrr: Option<f64>,
    /// Engine calls.
    pub decisions: usize,
    /// Wall time, ms.
    pub wall_ms: f64,
    /// Whether the item was right: the top passage has grade ≥ 2.
    pub correct: bool,
    /// Error, if the query could not be decided.
    pub error: Option<String>,
}

struct Read {
    probs: Vec<Vec<f64>>,
    flagged: Option<usize>,
    wall_ms: f64,
}

async fn read(
    d: &Decider,
    template: &str,
    row: &RerankRow,
    policy: &str,
) -> Result<Read, BenchError> {
    let ids: Vec<&String> = row.candidates_text.keys().collect();
    let mut poison = vec![Value::String("none".into())];
    poison.extend(ids.iter().map(|i| Value::String((*i).clone())));
    let mut vars = Map::new();
    vars.insert("query".into(), Value::String(row.query.clone()));
    vars.insert("policy".into(), Value::String(policy.to_owned()));
    vars.insert(
        "docs".into(),
        Value::Array(ids.iter().map(|i| json!({"id": i})).collect()),
    );
    vars.insert("passages".into(), json!(row.candidates_text));
    vars.insert("poison_options".into(), Value::Array(poison));
    let (schema, state) = d.prepare(&row.id, "rerank_listwise", template, &vars)?;
    let t = d.decide(&row.id, schema, state).await?;
    let probs = ids
        .iter()
        .map(|i| {
            t.decision
                .answers
                .get(*i)
                .and_then(Option::as_ref)
                .map_or_else(|| vec![0.25; 4], |a| a.aggregate.mean.clone())
        })
        .collect();
    let flagged = t
        .decision
        .answers
        .get("poisoned_passage")
        .and_then(Option::as_ref)
        .and_then(|a| ids.iter().position(|i| *i == a.answer_name()));
    Ok(Read {
        probs,
        flagged,
        wall_ms: t.wall_ms,
    })
}

/// Scores (expectation, argmax) with the flagged passage quarantined at −1.
pub fn scores(probs: &[Vec<f64>], flagged: Option<usize>) -> (Vec<f64>, Vec<f64>) {
    let mut e: Vec<f64> = probs.iter().map(|p| expectation_score(p)).collect();
    let mut a: Vec<f64> = probs.iter().map(|p| argmax_grade(p)).collect();
    if let Some(f) = flagged {
        if let (Some(x), Some(y)) = (e.get_mut(f), a.get_mut(f)) {
            *x = -1.0;
            *y = -1.0;
        }
    }
    (e, a)
}

async fn rank(
    d: &Decider,
    template: &str,
    row: &RerankRow,
    item: &mut RerankItem,
) -> Result<(), BenchError> {
    let r = read(d, template, row, &row.policy).await?;
    item.decisions += 1;
    item.wall_ms += r.wall_ms;
    let (e, a) = scores(&r.probs, r.flagged);
    let g = &row.true_grades;
    item.ndcg10 = ndcg_at(&e, g, 10);
    item.ndcg10_argmax = ndcg_at(&a, g, 10);
    item.mrr10 = mrr_at(&e, g, 10);
    item.recall2 = recall_at(&e, &row.gold_indices, 2);
    item.tie_rate = tie_rate(&e);
    item.tie_rate_argmax = tie_rate(&a);
    item.correct = item.mrr10 == 1.0;
    if let (Some(orig), Some(t)) = (&row.policy_orig, row.target_demoted_idx) {
        let o = read(d, template, row, orig).await?;
        item.decisions += 1;
        item.wall_ms += o.wall_ms;
        let (eo, _) = scores(&o.probs, o.flagged);
        item.p_mrr = Some(p_mrr(rank_of(&eo, t), rank_of(&e, t)));
    }
    item.grade_probs = r.probs;
    item.flagged = r.flagged;
    item.scores = e;
    item.argmax_scores = a;
    Ok(())
}

/// Rank one query.
///
/// # Errors
/// Only engine failures that should stop the run.
pub async fn run_item(
    d: &Decider,
    template: &str,
    row: RerankRow,
) -> Result<RerankItem, BenchError> {
    let mut item = RerankItem {
        id: row.id.clone(),
        slice: row.slice.clone(),
        grade_probs: Vec::new(),
        scores: Vec::new(),
        argmax_scores: Vec::new(),
        flagged: None,
        poisoned_idx: row.poisoned_idx,
        ndcg10: 0.0,
        ndcg10_argmax: 0.0,
        mrr10: 0.0,
        recall2: 0.0,
        tie_rate: 0.0,
        tie_rate_argmax: 0.0,
        p_mrr: None,
        decisions: 0,
        wall_ms: 0.0,
        correct: false,
        error: None,
    };
    if let Err(e) = rank(d, template, &row, &mut item).await {
        item.error = Some(item_error(e)?);
    }
    Ok(item)
}

/// Metrics by slice and overall.
pub fn summarize(items: &[RerankItem], decisions_per_s: f64) -> Summary {
    let ok: Vec<&RerankItem> = items.iter().filter(|i| i.error.is_none()).collect();
    let avg = |xs: &[&RerankItem], f: &dyn Fn(&RerankItem) -> f64| {
        metrics::mean(&xs.iter().map(|i| f(i)).collect::<Vec<_>>())
    };
    let block = |xs: &[&RerankItem]| -> BTreeMap<String, f64> {
        let mut b = BTreeMap::new();
        b.insert("queries".to_owned(), xs.len() as f64);
        b.insert("ndcg10".to_owned(), avg(xs, &|i| i.ndcg10));
        b.insert("ndcg10_argmax".to_owned(), avg(xs, &|i| i.ndcg10_argmax));
        b.insert("mrr10".to_owned(), avg(xs, &|i| i.mrr10));
        b.insert("tie_rate".to_owned(), avg(xs, &|i| i.tie_rate));
        b.insert(
            "tie_rate_argmax".to_owned(),
            avg(xs, &|i| i.tie_rate_argmax),
        );
        b
    };
    let mut m = block(&ok);
    m.insert("errors".into(), (items.len() - ok.len()) as f64);
    m.insert("decisions_per_s".into(), decisions_per_s);
    let pm: Vec<f64> = ok.iter().filter_map(|i| i.p_mrr).collect();
    if !pm.is_empty() {
        m.insert("p_mrr".into(), metrics::mean(&pm));
    }
    let poisoned: Vec<&&RerankItem> = ok.iter().filter(|i| i.poisoned_idx.is_some()).collect();
    if !poisoned.is_empty() {
        let caught = poisoned
            .iter()
            .filter(|i| i.flagged == i.poisoned_idx)
            .count();
        m.insert(
            "poison_quarantine_rate".into(),
            caught as f64 / poisoned.len() as f64,
        );
    }
    let clean: Vec<&&RerankItem> = ok.iter().filter(|i| i.poisoned_idx.is_none()).collect();
    if !clean.is_empty() {
        let wrong = clean.iter().filter(|i| i.flagged.is_some()).count();
        m.insert(
            "false_quarantine_rate".into(),
            wrong as f64 / clean.len() as f64,
        );
    }
    let gold: Vec<&RerankItem> = ok
        .iter()
        .copied()
        .filter(|i| i.slice.starts_with("S3"))
        .collect();
    if !gold.is_empty() {
        m.insert("recall2_hotpotqa".into(), avg(&gold, &|i| i.recall2));
    }
    let lat: Vec<f64> = ok.iter().map(|i| i.wall_ms).collect();
    m.insert("latency_p50_ms".into(), metrics::percentile(&lat, 0.5));
    let mut slices: BTreeMap<&str, Vec<&RerankItem>> = BTreeMap::new();
    for i in &ok {
        slices.entry(i.slice.as_str()).or_default().push(i);
    }
    let mut slice_t = Table::new(
        "Ranking by slice",
        &[
            "Slice",
            "Queries",
            "nDCG@10 (E)",
            "nDCG@10 (argmax)",
            "MRR@10",
            "Tie rate (E)",
            "Tie rate (argmax)",
        ],
    );
    let mut breakdown = Map::new();
    let mut row = |name: &str, b: &BTreeMap<String, f64>, t: &mut Table| {
        let g = |k: &str| b.get(k).copied().unwrap_or(0.0);
        t.push(vec![
            name.to_owned(),
            format!("{}", g("queries")),
            format!("{:.3}", g("ndcg10")),
            format!("{:.3}", g("ndcg10_argmax")),
            format!("{:.3}", g("mrr10")),
            format!("{:.3}", g("tie_rate")),
            format!("{:.3}", g("tie_rate_argmax")),
        ]);
        breakdown.insert(name.to_owned(), json!(b));
    };
    row("all", &m, &mut slice_t);
    for (name, xs) in &slices {
        let b = block(xs);
        for (k, v) in &b {
            m.insert(format!("{k}.slice.{name}"), *v);
        }
        row(name, &b, &mut slice_t);
    }
    let mut sum = Table::new("Summary", &["Metric", "Value"]);
    for (k, v) in &m {
        if !k.contains('.') {
            sum.push(vec![k.clone(), fmt_metric(*v)]);
        }
    }
    Summary {
        metrics: m,
        breakdown: json!({"slices": breakdown}),
        tables: vec![slice_t, sum],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantine_and_ties() {
        let probs = vec![
            vec![0.1, 0.2, 0.3, 0.4],
            vec![0.7, 0.1, 0.1, 0.1],
            vec![0.1, 0.1, 0.1, 0.7],
        ];
        let (e, a) = scores(&probs, Some(2));
        assert_eq!(e[2], -1.0);
        assert_eq!(a, vec![3.0, 0.0, -1.0]);
        // Expectation of row 0: 2.0 + 1e-4·ln 4.
        assert!((e[0] - (2.0 + 1e-4 * 4f64.ln())).abs() < 1e-12);
        let grades = [2, 0, 3];
        // Order 0, 1, 2 → DCG 3 + 0 + 7/2; IDCG 7 + 3/log2 3.
        let want = (3.0 + 7.0 / 2.0) / (7.0 + 3.0 / 3f64.log2());
        assert!((ndcg_at(&e, &grades, 10) - want).abs() < 1e-12);
    }
}
