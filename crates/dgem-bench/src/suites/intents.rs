//! `dgem bench-intents` (reference.md §8.4): wide intent sets. Each row is one
//! decision: a choice over all candidate intents (plus the domain question when
//! the row has domains). When there are more than 26 candidates (the most one
//! slot reads), the engine answers through the same bracket routing every
//! surface uses (`dgem_backend::brackets`: balanced brackets of at most 20, each
//! bracket's top 2 to a final round, probabilities fused over all candidates);
//! the item records the finalists from `diagnostics.brackets`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{item_error, probabilities, Decider, Summary};
use crate::dataset::Row;
use crate::metrics;
use crate::report::{fmt_metric, pct, Table};
use crate::BenchError;

pub use dgem_core::brackets::{BRACKET_SIZE, FINALISTS_PER_BRACKET};

/// One dataset row (Banking77 / CLINC150 samples).
#[derive(Debug, Clone, Deserialize)]
pub struct IntentRow {
    /// Unique id.
    pub id: String,
    /// Source dataset name.
    #[serde(default)]
    pub dataset: String,
    /// The customer's message.
    pub text: String,
    /// Expected intent.
    pub expected_intent: String,
    /// Candidate intents.
    pub options: Vec<String>,
    /// Expected domain (CLINC).
    #[serde(default)]
    pub expected_domain: Option<String>,
    /// Out-of-scope item (CLINC).
    #[serde(default)]
    pub is_oos: bool,
    /// Candidate domains (CLINC).
    #[serde(default)]
    pub domains: Option<Vec<String>>,
}

impl Row for IntentRow {
    fn id(&self) -> &str {
        &self.id
    }
    fn check(&self) -> Result<(), String> {
        if self.options.len() < 2 {
            return Err("`options` must hold at least 2 intents".into());
        }
        if !self.options.contains(&self.expected_intent) {
            return Err(format!(
                "`expected_intent` `{}` is not one of the options",
                self.expected_intent
            ));
        }
        Ok(())
    }
}

/// The `k` most probable names (stable on ties), most probable first.
pub fn top_k(probs: &[(String, f64)], k: usize) -> Vec<String> {
    let mut v: Vec<&(String, f64)> = probs.iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.into_iter().take(k).map(|(n, _)| n.clone()).collect()
}

/// One item's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentItem {
    /// Row id.
    pub id: String,
    /// Source dataset.
    pub dataset: String,
    /// Expected intent.
    pub expected_intent: String,
    /// Final answer.
    pub intent: Option<String>,
    /// Intent right.
    pub correct: bool,
    /// Confidence of the final answer.
    pub confidence: f64,
    /// Hesitation of the final answer.
    pub hesitation: f64,
    /// Top final-round probabilities (up to 5).
    pub top_probabilities: Vec<(String, f64)>,
    /// Expected domain, if any.
    pub expected_domain: Option<String>,
    /// Domain answer, if asked.
    pub domain: Option<String>,
    /// Domain right (`None` when not asked).
    pub domain_correct: Option<bool>,
    /// Out-of-scope item.
    pub is_oos: bool,
    /// Candidates.
    pub candidates: usize,
    /// Bracket rounds before the final (0 when ≤ 26 candidates, else 1).
    pub bracket_rounds: usize,
    /// Survivors that reached the final.
    pub finalists: Vec<String>,
    /// Whether the expected intent reached the final.
    pub expected_in_final: bool,
    /// Engine calls.
    pub decisions: usize,
    /// Wall time of all rounds, ms.
    pub wall_ms: f64,
    /// Error, if the item could not be decided.
    pub error: Option<String>,
}

async fn round(
    d: &Decider,
    template: &str,
    row: &IntentRow,
    groups: &[Vec<String>],
    domains: Option<&Vec<String>>,
    item: &mut IntentItem,
) -> Result<dgem_engine::Decision, BenchError> {
    let mut vars = Map::new();
    vars.insert("text".into(), Value::String(row.text.clone()));
    vars.insert("groups".into(), json!(groups));
    if let Some(ds) = domains {
        vars.insert("domains".into(), json!(ds));
    }
    let (schema, state) = d.prepare(&row.id, "intent_select", template, &vars)?;
    let t = d.decide(&row.id, schema, state).await?;
    item.decisions += 1;
    item.wall_ms += t.wall_ms;
    Ok(t.decision)
}

async fn route(
    d: &Decider,
    template: &str,
    row: &IntentRow,
    item: &mut IntentItem,
) -> Result<(), BenchError> {
    let dec = round(
        d,
        template,
        row,
        std::slice::from_ref(&row.options),
        row.domains.as_ref(),
        item,
    )
    .await?;
    match dec.diagnostics.brackets.get("intent_0") {
        Some(b) => {
            item.bracket_rounds = 1;
            item.finalists = b.finalists.clone();
        }
        None => item.finalists = row.options.clone(),
    }
    item.expected_in_final = item.finalists.contains(&row.expected_intent);
    if let Some(Some(a)) = dec.answers.get("intent_0") {
        let probs: Vec<(String, f64)> = probabilities(a).into_iter().collect();
        let top = top_k(&probs, 5);
        item.top_probabilities = top
            .iter()
            .filter_map(|n| probs.iter().find(|(m, _)| m == n).cloned())
            .collect();
        item.intent = Some(a.answer_name().to_owned());
        item.correct = item.intent.as_deref() == Some(row.expected_intent.as_str());
        item.confidence = a.aggregate.confidence;
        item.hesitation = a.aggregate.normalized_entropy;
    }
    if let Some(Some(a)) = dec.answers.get("domain") {
        item.domain = Some(a.answer_name().to_owned());
        item.domain_correct = row.expected_domain.as_ref().map(|e| e == a.answer_name());
    }
    Ok(())
}

/// Decide one row (with bracket routing when it has more than 26 candidates).
///
/// # Errors
/// Only engine failures that should stop the run.
pub async fn run_item(
    d: &Decider,
    template: &str,
    row: IntentRow,
) -> Result<IntentItem, BenchError> {
    let mut item = IntentItem {
        id: row.id.clone(),
        dataset: row.dataset.clone(),
        expected_intent: row.expected_intent.clone(),
        intent: None,
        correct: false,
        confidence: 0.0,
        hesitation: 1.0,
        top_probabilities: Vec::new(),
        expected_domain: row.expected_domain.clone(),
        domain: None,
        domain_correct: None,
        is_oos: row.is_oos,
        candidates: row.options.len(),
        bracket_rounds: 0,
        finalists: Vec::new(),
        expected_in_final: false,
        decisions: 0,
        wall_ms: 0.0,
        error: None,
    };
    if let Err(e) = route(d, template, &row, &mut item).await {
        item.error = Some(item_error(e)?);
    }
    Ok(item)
}

/// Metrics and tables.
pub fn summarize(items: &[IntentItem], decisions_per_s: f64) -> Summary {
    let ok: Vec<&IntentItem> = items.iter().filter(|i| i.error.is_none()).collect();
    let n = ok.len().max(1) as f64;
    let share = |f: &dyn Fn(&IntentItem) -> bool, xs: &[&IntentItem]| {
        xs.iter().filter(|i| f(i)).count() as f64 / xs.len().max(1) as f64
    };
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    m.insert("items".into(), ok.len() as f64);
    m.insert("errors".into(), (items.len() - ok.len()) as f64);
    m.insert("intent_accuracy".into(), share(&|i| i.correct, &ok));
    let cc: Vec<(f64, bool)> = ok.iter().map(|i| (i.confidence, i.correct)).collect();
    m.insert("ece_10bin".into(), metrics::ece_10bin(&cc));
    m.insert(
        "mean_confidence".into(),
        cc.iter().map(|x| x.0).sum::<f64>() / n,
    );
    let chance = metrics::mean(
        &ok.iter()
            .map(|i| 1.0 / i.candidates.max(1) as f64)
            .collect::<Vec<_>>(),
    );
    m.insert("chance_baseline".into(), chance);
    m.insert(
        "chance_corrected_accuracy".into(),
        metrics::chance_corrected(share(&|i| i.correct, &ok), chance),
    );
    let bracketed: Vec<&IntentItem> = ok
        .iter()
        .copied()
        .filter(|i| i.bracket_rounds > 0)
        .collect();
    m.insert("bracketed_items".into(), bracketed.len() as f64);
    if !bracketed.is_empty() {
        m.insert(
            "bracket_recall".into(),
            share(&|i| i.expected_in_final, &bracketed),
        );
    }
    let with_domain: Vec<&IntentItem> = ok
        .iter()
        .copied()
        .filter(|i| i.domain_correct.is_some())
        .collect();
    if !with_domain.is_empty() {
        m.insert(
            "domain_accuracy".into(),
            share(&|i| i.domain_correct == Some(true), &with_domain),
        );
    }
    let oos: Vec<&IntentItem> = ok.iter().copied().filter(|i| i.is_oos).collect();
    if !oos.is_empty() {
        m.insert("oos_rejection_rate".into(), share(&|i| i.correct, &oos));
        let ins: Vec<&IntentItem> = ok.iter().copied().filter(|i| !i.is_oos).collect();
        m.insert("in_scope_accuracy".into(), share(&|i| i.correct, &ins));
    }
    let lat: Vec<f64> = ok.iter().map(|i| i.wall_ms).collect();
    m.insert("latency_p50_ms".into(), metrics::percentile(&lat, 0.5));
    m.insert("latency_p90_ms".into(), metrics::percentile(&lat, 0.9));
    m.insert("decisions_per_s".into(), decisions_per_s);
    let mut items_t = Table::new(
        "Items",
        &[
            "ID", "Expected", "Answer", "Conf", "Cands", "Rounds", "Wall ms", "Status",
        ],
    );
    for i in items {
        items_t.push(vec![
            i.id.clone(),
            i.expected_intent.clone(),
            i.intent.clone().unwrap_or_else(|| "-".into()),
            format!("{:.3}", i.confidence),
            i.candidates.to_string(),
            i.bracket_rounds.to_string(),
            format!("{:.0}", i.wall_ms),
            i.error.clone().unwrap_or_else(|| {
                if i.correct {
                    "PASS".into()
                } else {
                    "FAIL".into()
                }
            }),
        ]);
    }
    let mut sum = Table::new("Summary", &["Metric", "Value"]);
    for (k, v) in &m {
        sum.push(vec![k.clone(), fmt_metric(*v)]);
    }
    let acc = pct(share(&|i| i.correct, &ok));
    Summary {
        metrics: m,
        breakdown: json!({"intent_accuracy_pct": acc}),
        tables: vec![items_t, sum],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_are_balanced() {
        // The shared bracket split (dgem_core::brackets::split) the engine uses.
        let sizes = |k| {
            dgem_core::brackets::split(k, BRACKET_SIZE)
                .iter()
                .map(|r| r.len())
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(30), vec![15, 15]);
        assert_eq!(sizes(77), vec![20, 19, 19, 19]);
        assert_eq!(sizes(151), vec![19, 19, 19, 19, 19, 19, 19, 18]);
    }

    #[test]
    fn top_k_keeps_the_most_probable_first() {
        let p: Vec<(String, f64)> = [("a", 0.1), ("b", 0.5), ("c", 0.1), ("d", 0.3)]
            .iter()
            .map(|(n, x)| ((*n).to_owned(), *x))
            .collect();
        assert_eq!(top_k(&p, 3), ["b", "d", "a"]);
    }
}
