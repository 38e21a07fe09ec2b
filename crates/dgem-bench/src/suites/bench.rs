//! `dgem bench` (reference.md §8.2): a labelled multi-domain dataset of
//! templated items; per-slot and per-item accuracy by domain and tier, latency
//! percentiles, throughput and how often adaptive sampling extended a decision.
//!
//! An item is correct iff **every** expected slot's answer equals the expected
//! value (case-insensitive, `yes≡true`, `no≡false`). A `multi` question's
//! expected value is the list of options that apply; it is scored as one
//! yes/no label slot per option, with per-label F1 ([`multilabel`]).
//!
//! Each slot records its question type and the path its options were scored
//! by, and the report adds the per-path and per-type figures of
//! [`super::quality`] (table "By scoring path and type").

pub mod multilabel;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::quality::{self, ScoredSlot, ScoringPath};
use super::{
    extended, item_error, normalize_answer, probabilities, resolve_template, Decider, Summary,
};
use crate::dataset::Row;
use crate::metrics::{self, stats::percentile};
use crate::report::{fmt_metric, pct, Table};
use crate::BenchError;

/// One dataset row: `{id, domain, template, variables, expected, tier}`.
#[derive(Debug, Clone, Deserialize)]
pub struct BenchRow {
    /// Unique id.
    pub id: String,
    /// Domain (grouping).
    #[serde(default)]
    pub domain: String,
    /// Template path or name.
    pub template: PathBuf,
    /// Template variables.
    #[serde(default)]
    pub variables: Map<String, Value>,
    /// Expected answer per slot id: an option name (or `true`/`false`, a
    /// number), or for a `multi` question the list of options that apply.
    pub expected: IndexMap<String, Value>,
    /// Difficulty tier (grouping).
    #[serde(default)]
    pub tier: String,
}

impl Row for BenchRow {
    fn id(&self) -> &str {
        &self.id
    }
    fn check(&self) -> Result<(), String> {
        if self.expected.is_empty() {
            return Err("`expected` must name at least one slot".into());
        }
        Ok(())
    }
}

/// One slot's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotOut {
    /// Expected answer (as written in the dataset).
    pub expected: String,
    /// The engine's answer (`None` when the question was skipped or missing).
    pub answer: Option<String>,
    /// Whether they match.
    pub correct: bool,
    /// Probability of the chosen answer.
    pub confidence: f64,
    /// Normalized entropy (hesitation).
    pub hesitation: f64,
    /// Probability per alternative.
    pub probabilities: IndexMap<String, f64>,
    /// Index of the expected answer among the alternatives, if it is one.
    pub gold: Option<usize>,
    /// The question's type: `boolean`, `choice` or `score` (absent in
    /// receipts written before types were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_type: Option<String>,
    /// How its options were scored (absent when the question was not read, and
    /// in receipts written before paths were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring: Option<ScoringPath>,
    /// For a label slot of a `multi` question (`multilabel`): that
    /// question's id; absent for every other slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi: Option<String>,
}

impl SlotOut {
    /// The slot as the per-path and per-type groups see it.
    pub fn scored(&self) -> ScoredSlot {
        ScoredSlot {
            path: self.scoring,
            kind: self.question_type.as_deref().and_then(quality::type_group),
            probabilities: self.probabilities.values().copied().collect(),
            gold: self.gold,
            confidence: self.confidence,
            correct: self.correct,
            hesitation: self.hesitation,
        }
    }
}

/// One item's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchItem {
    /// Row id.
    pub id: String,
    /// Dataset line.
    pub line: usize,
    /// Domain.
    pub domain: String,
    /// Tier.
    pub tier: String,
    /// Every expected slot right.
    pub correct: bool,
    /// Per expected slot.
    pub slots: IndexMap<String, SlotOut>,
    /// Wall time of the decision, ms.
    pub wall_ms: f64,
    /// Reads averaged.
    pub reads: u32,
    /// Whether the auto-samples policy extended (`None` for fixed samples).
    pub extended: Option<bool>,
    /// The item's error, if it could not be decided.
    pub error: Option<String>,
}

/// Decide one row.
///
/// # Errors
/// Only engine failures that should stop the run.
pub async fn run_item(
    d: &Decider,
    dataset: &Path,
    line: usize,
    row: BenchRow,
) -> Result<BenchItem, BenchError> {
    let mut item = BenchItem {
        id: row.id.clone(),
        line,
        domain: row.domain.clone(),
        tier: row.tier.clone(),
        correct: false,
        slots: IndexMap::new(),
        wall_ms: 0.0,
        reads: 0,
        extended: None,
        error: None,
    };
    match decide_row(d, dataset, &row, &mut item).await {
        Ok(()) => {}
        Err(e) => item.error = Some(item_error(e)?),
    }
    Ok(item)
}

/// Every expected slot must be a question of the rendered schema and every gold
/// value one of its answers; otherwise the row cannot be scored and is an item
/// error (it would silently count as wrong).
fn check_expected(
    row: &BenchRow,
    schema: &dgem_core::schema::ValidSchema,
) -> Result<(), BenchError> {
    for (slot, want) in &row.expected {
        let Some(q) = schema.question(slot) else {
            let ids: Vec<&str> = schema.questions.iter().map(|q| q.id.as_str()).collect();
            return Err(BenchError::Item {
                id: row.id.clone(),
                message: format!("`expected` names `{slot}`, which is not a question of the template; questions are {ids:?}"),
            });
        };
        if want.is_array() || !q.kind.picks_one() {
            multilabel::expected_set(q, want).map_err(|message| BenchError::Item {
                id: row.id.clone(),
                message: format!("`expected.{slot}`: {message}"),
            })?;
            continue;
        }
        let want = match want {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let names: Vec<&str> = q.alternatives.iter().map(|a| a.name.as_str()).collect();
        if !names
            .iter()
            .any(|n| normalize_answer(n) == normalize_answer(&want))
        {
            return Err(BenchError::Item {
                id: row.id.clone(),
                message: format!("`expected.{slot}` must be one of {names:?}. Given: `{want}`"),
            });
        }
    }
    Ok(())
}

async fn decide_row(
    d: &Decider,
    dataset: &Path,
    row: &BenchRow,
    item: &mut BenchItem,
) -> Result<(), BenchError> {
    let path = resolve_template(&row.template, dataset).ok_or_else(|| BenchError::Item {
        id: row.id.clone(),
        message: format!("`template` `{}` not found", row.template.display()),
    })?;
    let text = super::read_template(&path)?;
    let (schema, state) = d.prepare(&row.id, &path.display().to_string(), &text, &row.variables)?;
    check_expected(row, &schema)?;
    let kinds: IndexMap<String, String> = schema
        .questions
        .iter()
        .map(|q| (q.id.clone(), q.kind.as_str().to_owned()))
        .collect();
    let multis: IndexMap<String, dgem_core::schema::Question> = schema
        .questions
        .iter()
        .filter(|q| !q.kind.picks_one())
        .map(|q| (q.id.clone(), q.clone()))
        .collect();
    let t = d.decide(&row.id, schema, state).await?;
    item.wall_ms = t.wall_ms;
    item.reads = t.decision.diagnostics.samples.max_n();
    item.extended = extended(&t.decision);
    for (slot, want) in &row.expected {
        if let Some(q) = multis.get(slot) {
            // One yes/no label slot per option (`multilabel`).
            let gold = multilabel::expected_set(q, want).unwrap_or_default();
            let a = t.decision.answers.get(slot).and_then(Option::as_ref);
            let labels = multilabel::label_slots(q, &gold, a, &t.decision.diagnostics);
            item.slots.extend(labels);
            continue;
        }
        let expected = match want {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let a = t.decision.answers.get(slot).and_then(Option::as_ref);
        let question_type = kinds.get(slot).cloned();
        let scoring = a.and_then(|_| ScoringPath::of(&t.decision.diagnostics, slot));
        let out = match a {
            Some(a) => {
                let probs = probabilities(a);
                let gold = probs
                    .keys()
                    .position(|k| normalize_answer(k) == normalize_answer(&expected));
                let answer = a.answer_name().to_owned();
                SlotOut {
                    correct: normalize_answer(&answer) == normalize_answer(&expected),
                    answer: Some(answer),
                    confidence: a.aggregate.confidence,
                    hesitation: a.aggregate.normalized_entropy,
                    probabilities: probs,
                    gold,
                    expected,
                    question_type,
                    scoring,
                    multi: None,
                }
            }
            None => SlotOut {
                expected,
                answer: None,
                correct: false,
                confidence: 0.0,
                hesitation: 1.0,
                probabilities: IndexMap::new(),
                gold: None,
                question_type,
                scoring,
                multi: None,
            },
        };
        item.slots.insert(slot.clone(), out);
    }
    item.correct = item.slots.values().all(|s| s.correct);
    Ok(())
}

#[derive(Default)]
struct Group {
    items: usize,
    items_ok: usize,
    slots: usize,
    slots_ok: usize,
}

impl Group {
    fn add(&mut self, it: &BenchItem) {
        self.items += 1;
        self.items_ok += usize::from(it.correct);
        self.slots += it.slots.len();
        self.slots_ok += it.slots.values().filter(|s| s.correct).count();
    }
    fn item_acc(&self) -> f64 {
        self.items_ok as f64 / self.items.max(1) as f64
    }
    fn slot_acc(&self) -> f64 {
        self.slots_ok as f64 / self.slots.max(1) as f64
    }
}

/// Metrics, breakdown and tables of a finished run. `decisions_per_s` comes from
/// the runner (decisions of this session / its wall time).
pub fn summarize(items: &[BenchItem], decisions_per_s: f64) -> Summary {
    let ok: Vec<&BenchItem> = items.iter().filter(|i| i.error.is_none()).collect();
    let mut m = BTreeMap::new();
    let mut all = Group::default();
    let mut by: BTreeMap<(String, String), Group> = BTreeMap::new();
    for it in &ok {
        all.add(it);
        by.entry(("domain".into(), it.domain.clone()))
            .or_default()
            .add(it);
        by.entry(("tier".into(), it.tier.clone()))
            .or_default()
            .add(it);
    }
    let slots: Vec<&SlotOut> = ok.iter().flat_map(|i| i.slots.values()).collect();
    let cc: Vec<(f64, bool)> = slots.iter().map(|s| (s.confidence, s.correct)).collect();
    let lat: Vec<f64> = ok.iter().map(|i| i.wall_ms).collect();
    let auto: Vec<bool> = ok.iter().filter_map(|i| i.extended).collect();
    m.insert("items".into(), items.len() as f64);
    m.insert("errors".into(), (items.len() - ok.len()) as f64);
    m.insert("item_accuracy".into(), all.item_acc());
    m.insert("slot_accuracy".into(), all.slot_acc());
    m.insert("latency_p50_ms".into(), percentile(&lat, 0.5));
    m.insert("latency_p90_ms".into(), percentile(&lat, 0.9));
    m.insert("latency_p99_ms".into(), percentile(&lat, 0.99));
    m.insert("latency_mean_ms".into(), metrics::mean(&lat));
    m.insert("decisions_per_s".into(), decisions_per_s);
    m.insert(
        "mean_reads".into(),
        metrics::mean(&ok.iter().map(|i| f64::from(i.reads)).collect::<Vec<_>>()),
    );
    m.insert("adaptive_items".into(), auto.len() as f64);
    m.insert(
        "adaptive_trigger_rate".into(),
        auto.iter().filter(|&&e| e).count() as f64 / auto.len().max(1) as f64,
    );
    m.insert("ece_10bin".into(), metrics::ece_10bin(&cc));
    m.insert(
        "mean_confidence".into(),
        metrics::mean(&slots.iter().map(|s| s.confidence).collect::<Vec<_>>()),
    );
    m.insert(
        "mean_hesitation".into(),
        metrics::mean(&slots.iter().map(|s| s.hesitation).collect::<Vec<_>>()),
    );
    // Selective prediction: answer the least hesitant first (abstain on the
    // rest); the area under accuracy vs coverage says how well hesitation
    // sorts right answers ahead of wrong ones.
    let hc: Vec<(f64, bool)> = slots.iter().map(|s| (s.hesitation, s.correct)).collect();
    if let Some(auc) = metrics::selective_accuracy_auc(&hc) {
        m.insert("selective_accuracy_auc".into(), auc);
    }
    let quality = quality::report(&slots.iter().map(|s| s.scored()).collect::<Vec<_>>());
    m.extend(quality.overall.clone());
    let multilabel = multilabel::figures(&ok);
    if let Some((figures, _)) = &multilabel {
        m.extend(figures.clone());
    }
    for ((kind, name), g) in &by {
        m.insert(format!("item_accuracy.{kind}.{name}"), g.item_acc());
        m.insert(format!("slot_accuracy.{kind}.{name}"), g.slot_acc());
    }

    let mut items_t = Table::new(
        "Items",
        &[
            "ID", "Domain", "Tier", "Match", "Reads", "Wall ms", "Answers",
        ],
    );
    for it in items {
        let answers = it
            .slots
            .iter()
            .map(|(k, s)| {
                let mark = if s.correct { "" } else { "✗" };
                format!("{k}={}{mark}", s.answer.as_deref().unwrap_or("-"))
            })
            .collect::<Vec<_>>()
            .join(" ");
        let status = match (&it.error, it.correct) {
            (Some(_), _) => "ERR",
            (None, true) => "PASS",
            (None, false) => "FAIL",
        };
        items_t.push(vec![
            it.id.clone(),
            it.domain.clone(),
            it.tier.clone(),
            status.into(),
            format!(
                "{}{}",
                it.reads,
                if it.extended == Some(true) { "+" } else { "" }
            ),
            format!("{:.0}", it.wall_ms),
            it.error.clone().unwrap_or(answers),
        ]);
    }
    let mut groups_t = Table::new(
        "Accuracy by group",
        &["Group", "Items", "Item acc", "Slots", "Slot acc"],
    );
    let mut breakdown = Map::new();
    let mut push = |label: String, g: &Group, t: &mut Table| {
        t.push(vec![
            label.clone(),
            g.items.to_string(),
            pct(g.item_acc()),
            g.slots.to_string(),
            pct(g.slot_acc()),
        ]);
        breakdown.insert(
            label,
            json!({"items": g.items, "item_correct": g.items_ok, "item_accuracy": g.item_acc(),
                   "slots": g.slots, "slot_correct": g.slots_ok, "slot_accuracy": g.slot_acc()}),
        );
    };
    push("all".into(), &all, &mut groups_t);
    for ((kind, name), g) in &by {
        push(format!("{kind}:{name}"), g, &mut groups_t);
    }
    let mut summary_t = Table::new("Summary", &["Metric", "Value"]);
    for (k, v) in &m {
        if !k.contains('.') {
            summary_t.push(vec![k.clone(), fmt_metric(*v)]);
        }
    }
    // The per-path and per-type metrics are in their own table, not the summary.
    m.extend(quality.groups);
    let mut tables = vec![items_t, groups_t, quality.table];
    tables.extend(multilabel.map(|(_, t)| t));
    tables.push(summary_t);
    Summary {
        metrics: m,
        breakdown: json!({ "groups": breakdown, "by_path_type": quality.breakdown }),
        tables,
    }
}
