//! Quality figures by **scoring path** and by **question type**, the ones
//! `scripts/quality` gates on (docs/benchmarks.md, "Quality gate").
//!
//! Every answered slot is read one way ([`ScoringPath`]: its first token, its
//! whole token sequence, bracket rounds for more than 26 options, or one
//! canvas position) and has a question type (`boolean`, `choice`, `score`).
//! For each group G of slots that has any, [`report`] gives the flat metrics
//!
//! * `slots_G`, `slot_accuracy_G`, `chance_G` = mean of 1/K (K options),
//! * `ece_10bin_G` (10-bin ECE, [`metrics::ece_10bin`]),
//! * `brier_G` = mean multi-class Brier Σ_k (p_k − y_k)² ([`metrics::brier`],
//!   Brier 1950), `brier_uniform_G` = the same for the uniform guess 1/K
//!   (1 − 1/K per slot when the gold answer is an option), and
//!   `brier_excess_G` = `brier_G` − `brier_uniform_G`: above 0, the
//!   probabilities score worse than knowing nothing,
//! * `mean_hesitation_G` (mean normalized entropy H / ln K),
//! * `overconfidence_error_G`: 1 when the slots are sure of themselves
//!   (mean hesitation < [`OVERCONFIDENT_HESITATION`]) while their accuracy is
//!   less than [`NEAR_CHANCE_MARGIN`] above chance, else 0;
//!
//! and the same over all slots without the suffix (`brier`, `brier_uniform`,
//! `brier_excess`, `overconfidence_error`, `chance_baseline`). The gated groups
//! ([`is_gated`]) always report `slots_G`, 0 when there are none, so a
//! `--fail-under` on a metric of an empty group is skipped rather than failed
//! ([`crate::report::evaluate_gates`]).

use std::collections::BTreeMap;

use dgem_core::envelope::{Diagnostics, Scoring};
use dgem_core::schema::QuestionKind;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::metrics;
use crate::report::{fmt_metric, pct, Table};

/// Mean hesitation under which a group counts as sure of its answers.
pub const OVERCONFIDENT_HESITATION: f64 = 0.5;

/// Accuracy over chance (absolute, 0.05 = 5 points) under which a group
/// counts as near chance.
pub const NEAR_CHANCE_MARGIN: f64 = 0.05;

/// Title of the report table.
pub const TABLE_TITLE: &str = "By scoring path and type";

/// How a slot's options were scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoringPath {
    /// Each option by the probability of its first token ([`Scoring::FirstToken`]).
    FirstToken,
    /// Each option by the likelihood of its whole tokenization ([`Scoring::Sequence`]).
    Sequence,
    /// More than 26 options, answered through bracket rounds
    /// (diagnostics `brackets[id]`).
    Brackets,
    /// One canvas position read jointly ([`Scoring::Canvas`]).
    Canvas,
}

impl ScoringPath {
    /// Every path, in report order.
    pub const ALL: [ScoringPath; 4] = [
        Self::FirstToken,
        Self::Sequence,
        Self::Brackets,
        Self::Canvas,
    ];

    /// The name used in metrics and receipts (`first_token`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstToken => "first_token",
            Self::Sequence => "sequence",
            Self::Brackets => "brackets",
            Self::Canvas => "canvas",
        }
    }

    /// The path question `id` was answered through, from a decision's
    /// diagnostics: `brackets` when `brackets[id]` is present, else
    /// `questions[id].scoring`; `None` when the question was not read.
    pub fn of(diagnostics: &Diagnostics, id: &str) -> Option<Self> {
        if diagnostics.brackets.contains_key(id) {
            return Some(Self::Brackets);
        }
        diagnostics.questions.get(id).map(|q| match q.scoring {
            Scoring::FirstToken => Self::FirstToken,
            Scoring::Sequence => Self::Sequence,
            Scoring::Canvas => Self::Canvas,
        })
    }
}

/// The question types, in report order: every [`QuestionKind`]'s canonical
/// name (`boolean`, `choice`, `score`), so a new kind gets its group.
pub fn types() -> [&'static str; QuestionKind::ALL.len()] {
    QuestionKind::ALL.map(QuestionKind::as_str)
}

/// The scoring paths whose groups always report `slots_G` (0 when empty);
/// with [`types`], the groups gates may be set on ([`is_gated`]).
pub const GATED_PATHS: [&str; 3] = ["first_token", "sequence", "brackets"];

/// Whether group `name` always reports `slots_G` (0 when empty), so gates
/// on it can be skipped rather than fail as unreported: a scoring path of
/// [`GATED_PATHS`] or a question type.
pub fn is_gated(name: &str) -> bool {
    GATED_PATHS.contains(&name) || types().contains(&name)
}

/// The type group of a question type as written, in any case (`noul`, `bool`
/// and `boolean` are `boolean`: [`QuestionKind::aliases`]); `None` for
/// anything else.
pub fn type_group(kind: &str) -> Option<&'static str> {
    QuestionKind::parse(&kind.trim().to_ascii_lowercase()).map(QuestionKind::as_str)
}

/// One scored slot, as the groups see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredSlot {
    /// How it was scored (`None`: not read, or a receipt from before paths were recorded).
    pub path: Option<ScoringPath>,
    /// Its type group ([`type_group`]).
    pub kind: Option<&'static str>,
    /// Probability of every option, in option order (empty when unanswered).
    pub probabilities: Vec<f64>,
    /// Index of the expected answer among the options.
    pub gold: Option<usize>,
    /// Probability of the chosen answer.
    pub confidence: f64,
    /// Whether the answer was the expected one.
    pub correct: bool,
    /// Normalized entropy H / ln K, in [0, 1].
    pub hesitation: f64,
}

/// Brier score of the uniform guess 1/K over `k` options ([`metrics::brier`]):
/// 1 − 1/K when `gold` is an option, 1 + 1/K when it is not. With no options
/// (an unanswered slot, whose own Brier is that of no distribution) it is
/// that same 1, so such a slot scores level with the uniform guess.
pub fn uniform_brier(k: usize, gold: Option<usize>) -> f64 {
    if k == 0 {
        return metrics::brier(&[], gold);
    }
    metrics::brier(&vec![1.0 / k as f64; k], gold)
}

/// The figures of one group of slots (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupFigures {
    /// Slots in the group.
    pub slots: usize,
    /// Share answered right.
    pub accuracy: f64,
    /// Mean 1/K.
    pub chance: f64,
    /// 10-bin expected calibration error of the confidences.
    pub ece_10bin: f64,
    /// Mean multi-class Brier score, in [0, 2].
    pub brier: f64,
    /// Mean Brier score of the uniform guess.
    pub brier_uniform: f64,
    /// `brier − brier_uniform` (above 0: worse than the uniform guess).
    pub brier_excess: f64,
    /// Mean hesitation.
    pub mean_hesitation: f64,
    /// Sure of itself (mean hesitation < 0.5) while within 5 points of chance.
    pub overconfident: bool,
}

impl GroupFigures {
    /// The figures of `slots`; `None` when there are none.
    pub fn of(slots: &[&ScoredSlot]) -> Option<Self> {
        if slots.is_empty() {
            return None;
        }
        let col = |f: &dyn Fn(&ScoredSlot) -> f64| -> f64 {
            metrics::mean(&slots.iter().map(|s| f(s)).collect::<Vec<_>>())
        };
        let accuracy = col(&|s| f64::from(u8::from(s.correct)));
        // An unanswered slot (no probabilities) counts K = 1, as
        // `bench-calibration` counts it.
        let chance = col(&|s| 1.0 / s.probabilities.len().max(1) as f64);
        let brier = col(&|s| metrics::brier(&s.probabilities, s.gold));
        let brier_uniform = col(&|s| uniform_brier(s.probabilities.len(), s.gold));
        let mean_hesitation = col(&|s| s.hesitation);
        let cc: Vec<(f64, bool)> = slots.iter().map(|s| (s.confidence, s.correct)).collect();
        Some(Self {
            slots: slots.len(),
            accuracy,
            chance,
            ece_10bin: metrics::ece_10bin(&cc),
            brier,
            brier_uniform,
            brier_excess: brier - brier_uniform,
            mean_hesitation,
            overconfident: mean_hesitation < OVERCONFIDENT_HESITATION
                && accuracy - chance < NEAR_CHANCE_MARGIN,
        })
    }

    /// The flat metrics of this group, each name ending in `suffix` (`""` for
    /// all slots, which name their accuracy and chance as the suites do).
    fn metrics(&self, suffix: &str, m: &mut BTreeMap<String, f64>) {
        let overall = suffix.is_empty();
        let mut put = |name: &str, v: f64| {
            m.insert(format!("{name}{suffix}"), v);
        };
        if !overall {
            put("slots", self.slots as f64);
            put("slot_accuracy", self.accuracy);
            put("chance", self.chance);
            put("ece_10bin", self.ece_10bin);
            put("mean_hesitation", self.mean_hesitation);
        }
        put("brier", self.brier);
        put("brier_uniform", self.brier_uniform);
        put("brier_excess", self.brier_excess);
        put(
            "overconfidence_error",
            f64::from(u8::from(self.overconfident)),
        );
    }
}

/// What [`report`] gives a suite.
#[derive(Debug, Clone, PartialEq)]
pub struct PathTypeReport {
    /// Figures over all slots (`None` when there are none).
    pub all: Option<GroupFigures>,
    /// Overall metrics: `brier`, `brier_uniform`, `brier_excess`,
    /// `overconfidence_error`, `chance_baseline`.
    pub overall: BTreeMap<String, f64>,
    /// Per-group metrics, names ending in `_G` (see the module docs).
    pub groups: BTreeMap<String, f64>,
    /// The [`TABLE_TITLE`] table: all slots, then each path, then each type.
    pub table: Table,
    /// `{all, scoring: {G: figures|null}, type: {G: figures|null}}`.
    pub breakdown: Value,
}

fn row(label: &str, f: Option<&GroupFigures>) -> Vec<String> {
    match f {
        Some(f) => vec![
            label.to_owned(),
            f.slots.to_string(),
            pct(f.accuracy),
            pct(f.chance),
            fmt_metric(f.ece_10bin),
            fmt_metric(f.brier),
            fmt_metric(f.brier_uniform),
            fmt_metric(f.mean_hesitation),
            if f.overconfident { "yes" } else { "no" }.into(),
        ],
        None => {
            let mut r = vec![label.to_owned(), "0".into()];
            r.extend(std::iter::repeat_n("-".to_owned(), 7));
            r
        }
    }
}

/// Figures over all of `slots`, per scoring path and per question type (see
/// the module docs for the metric names).
pub fn report(slots: &[ScoredSlot]) -> PathTypeReport {
    let all_refs: Vec<&ScoredSlot> = slots.iter().collect();
    let all = GroupFigures::of(&all_refs);
    let mut overall = BTreeMap::new();
    if let Some(f) = &all {
        f.metrics("", &mut overall);
        overall.insert("chance_baseline".into(), f.chance);
    }
    let mut table = Table::new(
        TABLE_TITLE,
        &[
            "Group",
            "Slots",
            "Accuracy",
            "Chance",
            "ECE",
            "Brier",
            "Uniform Brier",
            "Mean hesitation",
            "Overconfident",
        ],
    );
    table.push(row("all", all.as_ref()));
    let mut groups = BTreeMap::new();
    let mut by_path = Map::new();
    let mut by_type = Map::new();
    let paths = ScoringPath::ALL.map(|p| {
        let of: Vec<&ScoredSlot> = slots.iter().filter(|s| s.path == Some(p)).collect();
        (p.as_str(), "scoring", GroupFigures::of(&of))
    });
    let types = types().map(|t| {
        let of: Vec<&ScoredSlot> = slots.iter().filter(|s| s.kind == Some(t)).collect();
        (t, "type", GroupFigures::of(&of))
    });
    for (name, kind, figures) in paths.iter().chain(types.iter()) {
        let gated = is_gated(name);
        match figures {
            Some(f) => f.metrics(&format!("_{name}"), &mut groups),
            None if gated => {
                groups.insert(format!("slots_{name}"), 0.0);
            }
            None => continue,
        }
        table.push(row(&format!("{kind}: {name}"), figures.as_ref()));
        let out = if *kind == "scoring" {
            &mut by_path
        } else {
            &mut by_type
        };
        out.insert((*name).to_owned(), json!(figures));
    }
    PathTypeReport {
        all,
        overall,
        groups,
        table,
        breakdown: json!({"all": all, "scoring": by_path, "type": by_type}),
    }
}

#[cfg(test)]
mod tests;
