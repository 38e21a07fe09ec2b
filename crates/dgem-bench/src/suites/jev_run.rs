//! `dgem bench-jev`: JevBench rows ([`super::jev::JevRow`], one question
//! each) decided one by one, scored as JevBench scores them
//! ([`crate::metrics::jevbench`]): accuracy, chance baseline and
//! chance-corrected accuracy, 10-bin ECE, Brier, the four axes and the v1.3.1
//! and v1.4 composites, with breakdowns by tier, family and topic.

use std::collections::BTreeMap;

use dgem_core::schema::{SchemaDefaults, ValidSchema};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::jev::{JevRow, JEV_SLOT_ID};
use super::quality::{self, ScoredSlot, ScoringPath};
use super::{item_error, probabilities, Decider, Summary};
use crate::metrics::jevbench::{self, Scored};
use crate::metrics::{self, stats::percentile};
use crate::report::{fmt_metric, pct, Table};
use crate::BenchError;

/// Scoring options of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JevScoring {
    /// `cpu`/`gpu` (self-hosted: latency charged 2t + 0.15 s) or `api`.
    pub self_hosted: bool,
    /// USD per 1,000 decisions.
    pub usd_per_1k: f64,
}

impl Default for JevScoring {
    fn default() -> Self {
        Self {
            self_hosted: true,
            usd_per_1k: jevbench::DGEM_USD_PER_1K,
        }
    }
}

/// One scored row (the receipt's `items`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JevItem {
    /// Row id.
    pub id: String,
    /// Tier.
    pub tier: String,
    /// Family.
    pub family: String,
    /// Topic.
    pub topic: String,
    /// `choice`, `noul` or `score`.
    pub question_type: String,
    /// Number of allowed answers.
    pub vocab_cardinality: usize,
    /// 1 / `vocab_cardinality`.
    pub chance_baseline: f64,
    /// The expected label.
    pub expected: String,
    /// The answer (`None` on an error).
    pub actual: Option<String>,
    /// Whether it matches.
    pub accurate: bool,
    /// Probability of the answer.
    pub confidence: f64,
    /// Entropy, nats.
    pub entropy_nats: f64,
    /// Hesitation H / ln K.
    pub normalized_entropy: f64,
    /// Multi-class Brier Σ (p_k − y_k)².
    pub brier_score: f64,
    /// Soft TVD, for items with a human split.
    pub tvd_gold: Option<f64>,
    /// Probability per label.
    pub probabilities: IndexMap<String, f64>,
    /// How the labels were scored (absent when the row was not decided, and in
    /// receipts written before paths were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring: Option<ScoringPath>,
    /// Wall time, ms.
    pub wall_time_ms: f64,
    /// Why the row could not be decided.
    pub error: Option<String>,
}

/// Decide one row.
///
/// # Errors
/// Only engine failures that stop the run; an item problem is recorded.
pub async fn run_item(d: &Decider, row: JevRow) -> Result<JevItem, BenchError> {
    let k = row.labels.len().max(1);
    let mut item = JevItem {
        id: row.id.clone(),
        tier: row.tier.clone(),
        family: row.family.clone(),
        topic: row.topic.clone(),
        question_type: row.question.kind.clone(),
        vocab_cardinality: row.labels.len(),
        chance_baseline: 1.0 / k as f64,
        expected: row.expected.clone(),
        actual: None,
        accurate: false,
        confidence: 0.0,
        entropy_nats: 0.0,
        normalized_entropy: 1.0,
        brier_score: 0.0,
        tvd_gold: None,
        probabilities: IndexMap::new(),
        scoring: None,
        wall_time_ms: 0.0,
        error: None,
    };
    let mut schema = match ValidSchema::from_value(&row.schema(), &SchemaDefaults::default()) {
        Ok(s) => s,
        Err(e) => {
            item.error = Some(format!("item `{}`: {e}", row.id));
            return Ok(item);
        }
    };
    if let Some(s) = d.samples {
        schema = schema.with_samples(s);
    }
    if let Some(l) = d.layout {
        schema = schema.with_layout(l);
    }
    match d.decide(&row.id, schema, row.state_value()).await {
        Ok(t) => {
            item.wall_time_ms = t.wall_ms;
            if let Some(Some(a)) = t.decision.answers.get(JEV_SLOT_ID) {
                let probs = probabilities(a);
                let gold = probs.keys().position(|l| l == &row.expected);
                let mean: Vec<f64> = probs.values().copied().collect();
                item.brier_score = metrics::brier(&mean, gold);
                item.actual = Some(a.answer_name().to_owned());
                item.accurate = item.actual.as_deref() == Some(row.expected.as_str());
                item.confidence = a.aggregate.confidence;
                item.entropy_nats = a.aggregate.entropy;
                item.normalized_entropy = a.aggregate.normalized_entropy;
                item.tvd_gold = jevbench::human_gold_share(&row.tier)
                    .map(|share| jevbench::soft_tvd(item.accurate, item.confidence, share));
                item.probabilities = probs;
                item.scoring = ScoringPath::of(&t.decision.diagnostics, JEV_SLOT_ID);
            }
        }
        Err(e) => item.error = Some(item_error(e)?),
    }
    Ok(item)
}

impl JevItem {
    /// The item's one slot as the per-path and per-type groups see it.
    pub fn scored(&self) -> ScoredSlot {
        ScoredSlot {
            path: self.scoring,
            kind: quality::type_group(&self.question_type),
            probabilities: self.probabilities.values().copied().collect(),
            gold: self.probabilities.keys().position(|l| l == &self.expected),
            confidence: self.confidence,
            correct: self.accurate,
            hesitation: self.normalized_entropy,
        }
    }
}

fn group_table(
    title: &str,
    key: &str,
    ok: &[&JevItem],
    by: impl Fn(&JevItem) -> &str,
    m: &mut BTreeMap<String, f64>,
    breakdown: &mut Map<String, Value>,
) -> Table {
    let mut groups: BTreeMap<String, (usize, usize, f64)> = BTreeMap::new();
    for it in ok {
        let g = groups.entry(by(it).to_string()).or_default();
        g.0 += 1;
        g.1 += usize::from(it.accurate);
        g.2 += it.chance_baseline;
    }
    let mut t = Table::new(
        title,
        &[key, "Items", "Correct", "Accuracy", "Chance-corrected"],
    );
    let mut out = Map::new();
    for (name, (n, ok, chance)) in &groups {
        let acc = *ok as f64 / *n as f64;
        let cc = metrics::chance_corrected(acc, chance / *n as f64);
        m.insert(format!("accuracy.{key}.{name}"), acc);
        t.push(vec![
            name.clone(),
            n.to_string(),
            ok.to_string(),
            pct(acc),
            pct(cc),
        ]);
        out.insert(
            name.clone(),
            json!({"items": n, "correct": ok, "accuracy": acc, "chance_corrected_accuracy": cc}),
        );
    }
    breakdown.insert(key.to_string(), Value::Object(out));
    t
}

/// Metrics, breakdown and tables of a run.
pub fn summarize(items: &[JevItem], decisions_per_s: f64, scoring: JevScoring) -> Summary {
    let ok: Vec<&JevItem> = items.iter().filter(|i| i.error.is_none()).collect();
    let n = ok.len().max(1) as f64;
    let mut m = BTreeMap::new();
    let correct = ok.iter().filter(|i| i.accurate).count();
    let accuracy = correct as f64 / n;
    let chance = metrics::mean(&ok.iter().map(|i| i.chance_baseline).collect::<Vec<_>>());
    let cc: Vec<(f64, bool)> = ok.iter().map(|i| (i.confidence, i.accurate)).collect();
    let ece = metrics::ece_10bin(&cc);
    let tvds: Vec<f64> = ok.iter().filter_map(|i| i.tvd_gold).collect();
    let mean_tvd = (!tvds.is_empty()).then(|| metrics::mean(&tvds));
    let lat_s: Vec<f64> = ok.iter().map(|i| i.wall_time_ms / 1e3).collect();
    let (p50, p95) = (percentile(&lat_s, 0.5), percentile(&lat_s, 0.95));
    let scored: Vec<Scored> = ok
        .iter()
        .map(|i| Scored {
            tier: i.tier.clone(),
            correct: i.accurate,
            chance: i.chance_baseline,
            confidence: i.confidence,
        })
        .collect();
    let intel = jevbench::intelligence(&scored);
    let cal = jevbench::calibration(ece, mean_tvd);
    let speed = jevbench::speed(p50, p95, scoring.self_hosted);
    let cost = jevbench::cost(scoring.usd_per_1k);
    m.insert("total_cases".into(), items.len() as f64);
    m.insert("errors".into(), (items.len() - ok.len()) as f64);
    m.insert("total_correct".into(), correct as f64);
    m.insert("accuracy".into(), accuracy);
    m.insert("chance_baseline".into(), chance);
    m.insert(
        "chance_corrected_accuracy".into(),
        metrics::chance_corrected(accuracy, chance),
    );
    m.insert("ece_10bin".into(), ece);
    m.insert(
        "brier".into(),
        metrics::mean(&ok.iter().map(|i| i.brier_score).collect::<Vec<_>>()),
    );
    m.insert(
        "mean_hesitation".into(),
        metrics::mean(&ok.iter().map(|i| i.normalized_entropy).collect::<Vec<_>>()),
    );
    if let Some(t) = mean_tvd {
        m.insert("mean_soft_tvd".into(), t);
    }
    m.insert("latency_p50_ms".into(), p50 * 1e3);
    m.insert("latency_p95_ms".into(), p95 * 1e3);
    m.insert("decisions_per_s".into(), decisions_per_s);
    m.insert("intelligence_score".into(), intel);
    m.insert("calibration_score".into(), cal);
    m.insert("speed_score".into(), speed);
    m.insert("cost_score".into(), cost);
    m.insert(
        "composite_v131".into(),
        jevbench::composite_v131(intel, cal, speed, cost),
    );
    m.insert(
        "composite_v14".into(),
        jevbench::composite_v14(intel, cal, speed, cost),
    );

    let quality = quality::report(&ok.iter().map(|i| i.scored()).collect::<Vec<_>>());
    // `brier` and `chance_baseline` are the same figures as above; the
    // uniform baseline, the excess and the overconfidence flag are new.
    for k in ["brier_uniform", "brier_excess", "overconfidence_error"] {
        if let Some(v) = quality.overall.get(k) {
            m.insert(k.into(), *v);
        }
    }
    m.extend(quality.groups);
    let mut breakdown = Map::new();
    breakdown.insert("by_path_type".into(), quality.breakdown);
    let mut tables = vec![
        quality.table,
        group_table("By tier", "tier", &ok, |i| &i.tier, &mut m, &mut breakdown),
        group_table(
            "By family",
            "family",
            &ok,
            |i| &i.family,
            &mut m,
            &mut breakdown,
        ),
        group_table(
            "By topic",
            "topic",
            &ok,
            |i| &i.topic,
            &mut m,
            &mut breakdown,
        ),
    ];
    breakdown.insert(
        "scoring".into(),
        json!({"self_hosted": scoring.self_hosted, "usd_per_1k": scoring.usd_per_1k,
               "fidelity_items": tvds.len(), "sealed_accuracy": null,
               "composite_v14_is_public_only_estimate": true}),
    );
    let mut summary = Table::new("JevBench", &["Metric", "Value"]);
    for k in [
        "total_cases",
        "accuracy",
        "chance_baseline",
        "chance_corrected_accuracy",
        "ece_10bin",
        "brier",
        "brier_uniform",
        "brier_excess",
        "mean_hesitation",
        "overconfidence_error",
        "intelligence_score",
        "calibration_score",
        "speed_score",
        "cost_score",
        "composite_v131",
        "composite_v14",
        "latency_p50_ms",
        "latency_p95_ms",
    ] {
        if let Some(v) = m.get(k) {
            summary.push(vec![k.to_string(), fmt_metric(*v)]);
        }
    }
    tables.insert(0, summary);
    Summary {
        metrics: m,
        breakdown: Value::Object(breakdown),
        tables,
    }
}
