//! `dgem bench-permutation` (reference.md §8.7): option-order sensitivity. Each
//! item is decided K times with its K options cyclically shifted; the answers are
//! mapped back to option names and compared.
//!
//! * flip rate: share of items whose winner is not the same under every shift;
//! * total variation distance ½·Σ|p − q| between the distributions of two shifts:
//!   the maximum over all pairs, and the mean against the canonical order;
//! * JSD over shifts (BALD decomposition, H(mean) − mean H);
//! * canonical accuracy (shift 0) and the accuracy of the mean over shifts;
//! * what each decision cost: the option listings it read (`mean_listings`,
//!   and `one_read_share`, the share of decisions that read one listing).
//!
//! With `learn` states (`dgem bench-permutation --learn N`) the item's
//! question is first decided on N other states, as a policy's earlier
//! decisions, before its shifts are read. Under `--order-debias prior` a
//! question's first three distinct states are read in every listing and
//! teach it its prior; later decisions read one listing. Each item has one
//! state of its own, so without learning states every shift is such a
//! learning decision; with three, every shift is a one-read decision.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{item_error, probabilities, Decider, Summary};
use crate::dataset::Row;
use crate::metrics::{self, stats::mean_distribution};
use crate::report::{fmt_metric, pct, Table};
use crate::BenchError;

/// One option.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptionSpec {
    /// Option name (the answer).
    pub name: String,
    /// What it means.
    #[serde(default)]
    pub description: String,
}

/// One dataset row.
#[derive(Debug, Clone, Deserialize)]
pub struct PermutationRow {
    /// Unique id.
    pub id: String,
    /// Regime (grouping).
    #[serde(default)]
    pub regime: String,
    /// The case: text, or a JSON object (see [`crate::mapping::state`]).
    #[serde(deserialize_with = "crate::mapping::de_state")]
    pub state: Value,
    /// The question.
    pub instructions: String,
    /// Options in canonical order.
    pub options: Vec<OptionSpec>,
    /// Expected option name.
    pub expected: String,
}

impl Row for PermutationRow {
    fn id(&self) -> &str {
        &self.id
    }
    fn check(&self) -> Result<(), String> {
        if !(2..=26).contains(&self.options.len()) {
            return Err(format!(
                "`options` must hold 2 to 26 options. Given: {}",
                self.options.len()
            ));
        }
        if !self.options.iter().any(|o| o.name == self.expected) {
            return Err(format!(
                "`expected` `{}` is not one of the options",
                self.expected
            ));
        }
        Ok(())
    }
}

/// One shift's reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShiftOut {
    /// Shift s: the option listed first is canonical option s.
    pub shift: usize,
    /// Winner name.
    pub winner: String,
    /// Probabilities in canonical option order.
    pub probs: Vec<f64>,
    /// Wall time, ms.
    pub wall_ms: f64,
    /// Option listings the decision read (1: one read; `cyclic` reads every
    /// rotation); 0 in receipts written before it was recorded.
    #[serde(default)]
    pub listings: usize,
}

/// One item's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermutationItem {
    /// Row id.
    pub id: String,
    /// Regime.
    pub regime: String,
    /// Expected option.
    pub expected: String,
    /// Canonical option names.
    pub options: Vec<String>,
    /// Per shift.
    pub shifts: Vec<ShiftOut>,
    /// Canonical (shift 0) answer right.
    pub correct: bool,
    /// The mean over shifts picks the expected option.
    pub ensemble_correct: bool,
    /// Winners differ between shifts.
    pub flipped: bool,
    /// Number of distinct winners.
    pub distinct_winners: usize,
    /// Largest TVD between any two shifts.
    pub max_tvd: f64,
    /// Mean TVD of shifts 1.. against shift 0.
    pub mean_tvd_vs_canonical: f64,
    /// JSD over shifts, nats.
    pub jsd: f64,
    /// Other states the question was decided on before its shifts
    /// (`--learn`).
    #[serde(default)]
    pub learned_from: usize,
    /// Error, if the item could not be decided.
    pub error: Option<String>,
}

fn argmax(p: &[f64]) -> usize {
    let mut best = 0;
    for (i, x) in p.iter().enumerate() {
        if *x > p[best] {
            best = i;
        }
    }
    best
}

/// Order statistics of an item from its shift readings.
pub fn score_shifts(item: &mut PermutationItem) {
    let dists: Vec<Vec<f64>> = item.shifts.iter().map(|s| s.probs.clone()).collect();
    let mut winners: Vec<&str> = item.shifts.iter().map(|s| s.winner.as_str()).collect();
    item.correct = winners.first().is_some_and(|w| *w == item.expected);
    winners.sort_unstable();
    winners.dedup();
    item.distinct_winners = winners.len();
    item.flipped = winners.len() > 1;
    let ens = mean_distribution(&dists);
    item.ensemble_correct = item.options.get(argmax(&ens)) == Some(&item.expected);
    let mut max_tvd: f64 = 0.0;
    for i in 0..dists.len() {
        for j in i + 1..dists.len() {
            max_tvd = max_tvd.max(metrics::tvd(&dists[i], &dists[j]));
        }
    }
    item.max_tvd = max_tvd;
    item.mean_tvd_vs_canonical = metrics::mean(
        &dists
            .iter()
            .skip(1)
            .map(|d| metrics::tvd(&dists[0], d))
            .collect::<Vec<_>>(),
    );
    item.jsd = metrics::jsd(&dists);
}

/// The variables of `row`'s template with its options rotated left by
/// `shift` and `state` as the case.
fn variables(row: &PermutationRow, shift: usize, state: &Value) -> Map<String, Value> {
    let mut opts = row.options.clone();
    opts.rotate_left(shift);
    let mut vars = Map::new();
    vars.insert("state".into(), state.clone());
    vars.insert(
        "instructions".into(),
        Value::String(row.instructions.clone()),
    );
    vars.insert("options".into(), json!(opts));
    vars
}

/// Decide one row under every cyclic shift of its options, after deciding
/// its question (canonical order) on each of `learn` (other rows' states;
/// see the module docs).
///
/// # Errors
/// Only engine failures that should stop the run.
pub async fn run_item(
    d: &Decider,
    template: &str,
    row: PermutationRow,
    learn: &[Value],
) -> Result<PermutationItem, BenchError> {
    let mut item = PermutationItem {
        id: row.id.clone(),
        regime: row.regime.clone(),
        expected: row.expected.clone(),
        options: row.options.iter().map(|o| o.name.clone()).collect(),
        shifts: Vec::new(),
        correct: false,
        ensemble_correct: false,
        flipped: false,
        distinct_winners: 0,
        max_tvd: 0.0,
        mean_tvd_vs_canonical: 0.0,
        jsd: 0.0,
        learned_from: 0,
        error: None,
    };
    let id = row.id.as_str();
    let decide = |vars: Map<String, Value>| async move {
        let (schema, state) = d.prepare(id, "option_select", template, &vars)?;
        d.decide(id, schema, state).await
    };
    for state in learn {
        if let Err(e) = decide(variables(&row, 0, state)).await {
            item.error = Some(item_error(e)?);
            return Ok(item);
        }
        item.learned_from += 1;
    }
    let k = row.options.len();
    for shift in 0..k {
        let outcome = decide(variables(&row, shift, &row.state)).await;
        let t = match outcome {
            Ok(t) => t,
            Err(e) => {
                item.error = Some(item_error(e)?);
                return Ok(item);
            }
        };
        let Some(Some(a)) = t.decision.answers.get("decision") else {
            item.error = Some("the engine returned no `decision` answer".into());
            return Ok(item);
        };
        let by_name = probabilities(a);
        let probs: Vec<f64> = item
            .options
            .iter()
            .map(|n| by_name.get(n).copied().unwrap_or(0.0))
            .collect();
        item.shifts.push(ShiftOut {
            shift,
            winner: a.answer_name().to_owned(),
            probs,
            wall_ms: t.wall_ms,
            listings: a.order.as_ref().map_or(1, |o| o.orders),
        });
    }
    score_shifts(&mut item);
    Ok(item)
}

/// Mean of `g` over an item's shifts (0 when it has none).
fn mean_of(item: &PermutationItem, g: impl Fn(&ShiftOut) -> f64) -> f64 {
    metrics::mean(&item.shifts.iter().map(g).collect::<Vec<_>>())
}

/// Metrics, breakdown by regime, and tables.
pub fn summarize(items: &[PermutationItem], decisions_per_s: f64) -> Summary {
    let ok: Vec<&PermutationItem> = items.iter().filter(|i| i.error.is_none()).collect();
    let stats = |xs: &[&PermutationItem]| -> BTreeMap<String, f64> {
        let n = xs.len().max(1) as f64;
        let f = |g: &dyn Fn(&PermutationItem) -> f64| xs.iter().map(|i| g(i)).sum::<f64>() / n;
        [
            ("items", xs.len() as f64),
            ("flip_rate", f(&|i| f64::from(u8::from(i.flipped)))),
            ("mean_max_tvd", f(&|i| i.max_tvd)),
            ("mean_tvd_vs_canonical", f(&|i| i.mean_tvd_vs_canonical)),
            ("mean_jsd_nats", f(&|i| i.jsd)),
            ("canonical_accuracy", f(&|i| f64::from(u8::from(i.correct)))),
            (
                "ensemble_accuracy",
                f(&|i| f64::from(u8::from(i.ensemble_correct))),
            ),
            ("mean_distinct_winners", f(&|i| i.distinct_winners as f64)),
            ("mean_listings", f(&|i| mean_of(i, |s| s.listings as f64))),
            (
                "one_read_share",
                f(&|i| mean_of(i, |s| f64::from(u8::from(s.listings == 1)))),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    };
    let mut m = stats(&ok);
    m.insert("errors".into(), (items.len() - ok.len()) as f64);
    m.insert("decisions_per_s".into(), decisions_per_s);
    let lat: Vec<f64> = ok
        .iter()
        .flat_map(|i| i.shifts.iter().map(|s| s.wall_ms))
        .collect();
    m.insert("latency_p50_ms".into(), metrics::percentile(&lat, 0.5));
    m.insert("latency_p90_ms".into(), metrics::percentile(&lat, 0.9));
    let mut regimes: BTreeMap<&str, Vec<&PermutationItem>> = BTreeMap::new();
    for i in &ok {
        regimes.entry(i.regime.as_str()).or_default().push(i);
    }
    let mut by_t = Table::new(
        "Option-order sensitivity by regime",
        &[
            "Regime",
            "Items",
            "Flip rate",
            "Max TVD",
            "TVD vs canon",
            "Canon acc",
            "Ensemble acc",
        ],
    );
    let mut breakdown = Map::new();
    let mut row = |name: &str, s: &BTreeMap<String, f64>, t: &mut Table| {
        let g = |k: &str| s.get(k).copied().unwrap_or(0.0);
        t.push(vec![
            name.to_owned(),
            format!("{}", g("items")),
            pct(g("flip_rate")),
            format!("{:.3}", g("mean_max_tvd")),
            format!("{:.3}", g("mean_tvd_vs_canonical")),
            pct(g("canonical_accuracy")),
            pct(g("ensemble_accuracy")),
        ]);
        breakdown.insert(name.to_owned(), json!(s));
    };
    row("all", &m, &mut by_t);
    for (name, xs) in &regimes {
        let s = stats(xs);
        for (k, v) in &s {
            m.insert(format!("{k}.regime.{name}"), *v);
        }
        row(name, &s, &mut by_t);
    }
    let mut items_t = Table::new(
        "Items",
        &[
            "ID",
            "Regime",
            "Expected",
            "Winners by shift",
            "Max TVD",
            "Status",
        ],
    );
    for i in items {
        items_t.push(vec![
            i.id.clone(),
            i.regime.clone(),
            i.expected.clone(),
            i.shifts
                .iter()
                .map(|s| s.winner.as_str())
                .collect::<Vec<_>>()
                .join(" / "),
            format!("{:.3}", i.max_tvd),
            i.error.clone().unwrap_or_else(|| {
                if i.flipped {
                    "FLIP".into()
                } else {
                    "stable".into()
                }
            }),
        ]);
    }
    let mut sum = Table::new("Summary", &["Metric", "Value"]);
    for (k, v) in &m {
        if !k.contains('.') {
            sum.push(vec![k.clone(), fmt_metric(*v)]);
        }
    }
    Summary {
        metrics: m,
        breakdown: json!({"regimes": breakdown}),
        tables: vec![items_t, by_t, sum],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shift_statistics_hand_computed() {
        let mut item = PermutationItem {
            id: "x".into(),
            regime: "r".into(),
            expected: "a".into(),
            options: vec!["a".into(), "b".into()],
            shifts: vec![
                ShiftOut {
                    shift: 0,
                    winner: "a".into(),
                    probs: vec![0.8, 0.2],
                    wall_ms: 1.0,
                    listings: 2,
                },
                ShiftOut {
                    shift: 1,
                    winner: "b".into(),
                    probs: vec![0.3, 0.7],
                    wall_ms: 1.0,
                    listings: 1,
                },
            ],
            correct: false,
            ensemble_correct: false,
            flipped: false,
            distinct_winners: 0,
            max_tvd: 0.0,
            mean_tvd_vs_canonical: 0.0,
            jsd: 0.0,
            learned_from: 0,
            error: None,
        };
        score_shifts(&mut item);
        assert!(item.flipped);
        assert_eq!(item.distinct_winners, 2);
        assert!(item.correct);
        // Mean [0.55, 0.45] → "a".
        assert!(item.ensemble_correct);
        assert!((item.max_tvd - 0.5).abs() < 1e-12);
        assert!((item.mean_tvd_vs_canonical - 0.5).abs() < 1e-12);
        let s = summarize(&[item], 1.0);
        assert_eq!(s.metrics["flip_rate"], 1.0);
        assert_eq!(s.metrics["flip_rate.regime.r"], 1.0);
        // One of the two decisions read one listing, the other two.
        assert_eq!(s.metrics["mean_listings"], 1.5);
        assert_eq!(s.metrics["one_read_share"], 0.5);
    }

    /// A case given as a JSON object is the template's `state` as is; any
    /// other non-text value is refused, naming the field.
    #[test]
    fn an_object_state_is_mapped_and_a_list_refused() {
        let row = |state: Value| {
            json!({"id": "p1", "state": state, "instructions": "Which?",
                   "options": [{"name": "a"}, {"name": "b"}], "expected": "a"})
        };
        let r =
            crate::dataset::map_row::<PermutationRow>(row(json!({"case": "x"}))).expect("mapped");
        assert_eq!(r.state, json!({"case": "x"}));
        let e = crate::dataset::map_row::<PermutationRow>(row(json!([1]))).expect_err("refused");
        assert_eq!(
            e,
            "`state`: must be a string or a JSON object. Given: `[1]`"
        );
    }
}
