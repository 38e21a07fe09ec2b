//! `dgem calibrate`: fit a post-hoc temperature per question type on labelled
//! rows, report held-out calibration before and after, and build the
//! calibration file that `decide`/`serve` load
//! ([`dgem_core::after::calibration`]).
//!
//! The rows are `dgem bench` rows ([`BenchRow`]); each is decided by
//! [`bench::run_item`] through the shared runner (so a killed run resumes from
//! its partial file), and [`run_row`] adds what a fit needs: the question type
//! of every expected slot and the [`policy_hash`] of the rendered schema.
//! [`collect`] turns finished rows into labelled slots per type, [`calibrate`]
//! fits each type ([`fit`] has the method and its sources), and
//! [`calibration_file`] assembles the file. [`report`] prints it.

pub mod fit;
pub mod report;
pub mod svg;

use std::path::Path;

use dgem_core::after::calibration::{
    policy_hash, CalibrationFile, Evaluation, HeldOut, PolicyRef, CALIBRATION_FORMAT,
};
use dgem_core::schema::{ByKind, QuestionKind};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

pub use fit::{calibrate_type, fit_temperature, fold_of, mean_nll, Sample, Split, TypeFit};

use crate::receipt::ModelInfo;
use crate::suites::bench::{self, BenchItem, BenchRow};
use crate::suites::{read_template, resolve_template, Decider};
use crate::BenchError;

/// Folds when `-k` is not given.
pub const DEFAULT_FOLDS: usize = 5;
/// Most folds accepted.
pub const MAX_FOLDS: usize = 100;
/// Bootstrap resamples when not given.
pub const DEFAULT_RESAMPLES: usize = 1000;
/// Most bootstrap resamples accepted.
pub const MAX_RESAMPLES: usize = 100_000;
/// Seed of the bootstrap when not given.
pub const DEFAULT_BOOTSTRAP_SEED: i64 = 42;
/// Coverage of the bootstrap intervals.
pub const CONFIDENCE_LEVEL: f64 = 0.95;

/// Receipt suite name of a `dgem calibrate` run.
pub const SUITE: &str = "calibrate";

/// How to fit and score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitOptions {
    /// Cross-validation folds or in-sample.
    pub split: Split,
    /// Bootstrap resamples per interval.
    pub resamples: usize,
    /// Bootstrap seed.
    pub seed: i64,
}

impl FitOptions {
    /// Check `-k` (2..=100 unless `in_sample`) and the resample count (1..=100000).
    ///
    /// # Errors
    /// [`BenchError::Invalid`] naming the flag, its allowed values and the value
    /// given; `k < 2` without `in_sample` is refused because it would fit and
    /// score on the same rows.
    pub fn new(k: usize, in_sample: bool, resamples: usize, seed: i64) -> Result<Self, BenchError> {
        let split = if in_sample {
            Split::InSample
        } else if k < 2 {
            return Err(BenchError::Invalid(format!(
                "`-k` must be from 2 to {MAX_FOLDS}: with fewer folds the temperature would be fitted and scored on the same rows; pass `--in-sample` to do that knowingly (its figures are labelled in-sample). Given: {k}"
            )));
        } else if k > MAX_FOLDS {
            return Err(BenchError::Invalid(format!(
                "`-k` must be from 2 to {MAX_FOLDS}. Given: {k}"
            )));
        } else {
            Split::Folds(k)
        };
        if !(1..=MAX_RESAMPLES).contains(&resamples) {
            return Err(BenchError::Invalid(format!(
                "`--bootstrap` must be from 1 to {MAX_RESAMPLES} resamples. Given: {resamples}"
            )));
        }
        Ok(Self {
            split,
            resamples,
            seed,
        })
    }

    /// Folds as the file records them: k, or 1 in-sample.
    pub fn k(&self) -> usize {
        match self.split {
            Split::Folds(k) => k,
            Split::InSample => 1,
        }
    }
}

/// One decided row: the `dgem bench` item plus the policy it was asked under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrateItem {
    /// The row's outcome (answers, probabilities, gold index per slot).
    pub item: BenchItem,
    /// The template as the row names it.
    pub template: String,
    /// [`policy_hash`] of the rendered schema (`None` when it did not render).
    pub policy_hash: Option<String>,
    /// Question type (`boolean`, `choice`, `score`) per expected slot.
    pub kinds: IndexMap<String, String>,
}

/// Policy hash and expected-slot types of `row`, when its template renders.
fn describe(
    d: &Decider,
    dataset: &Path,
    row: &BenchRow,
) -> Option<(String, IndexMap<String, String>)> {
    let path = resolve_template(&row.template, dataset)?;
    let text = read_template(&path).ok()?;
    let name = path.display().to_string();
    let (schema, _) = d.prepare(&row.id, &name, &text, &row.variables).ok()?;
    let kinds = row
        .expected
        .keys()
        .filter_map(|slot| {
            let q = schema.question(slot)?;
            Some((slot.clone(), q.kind.as_str().to_owned()))
        })
        .collect();
    Some((policy_hash(&schema), kinds))
}

/// Decide one row (see the module docs). A row that cannot be rendered or
/// scored is an item error inside the result, as in `dgem bench`.
///
/// # Errors
/// Only engine failures that should stop the run.
pub async fn run_row(
    d: &Decider,
    dataset: &Path,
    line: usize,
    row: BenchRow,
) -> Result<CalibrateItem, BenchError> {
    let template = row.template.display().to_string();
    let (policy_hash, kinds) = describe(d, dataset, &row).unzip();
    let item = bench::run_item(d, dataset, line, row).await?;
    Ok(CalibrateItem {
        item,
        template,
        policy_hash,
        kinds: kinds.unwrap_or_default(),
    })
}

/// Labelled slots by type and the policies they came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labelled {
    /// Slots of each question type, in [`QuestionKind::SLOT_KINDS`]'s order
    /// (`boolean`, `choice`, `score`).
    pub by_kind: [Vec<Sample>; QuestionKind::SLOT_KINDS.len()],
    /// Distinct `(template, policy hash)` pairs, in first-seen order.
    pub policies: Vec<PolicyRef>,
    /// Rows that gave at least one labelled slot.
    pub rows: usize,
    /// What was left out and why (`row `id`: …`).
    pub skipped: Vec<String>,
}

/// The position of `kind` in [`QuestionKind::SLOT_KINDS`], the order every per-type
/// array here is in.
fn kind_index(kind: QuestionKind) -> usize {
    QuestionKind::SLOT_KINDS
        .iter()
        .position(|k| *k == kind.slot_kind())
        .unwrap_or_default()
}

impl Labelled {
    /// The slots of `kind`.
    pub fn of(&self, kind: QuestionKind) -> &[Sample] {
        &self.by_kind[kind_index(kind)]
    }
}

/// The labelled slots of finished rows: rows with an error, slots without an
/// answer or whose expected answer is not an alternative are left out (listed
/// in `skipped`).
pub fn collect(items: &[CalibrateItem]) -> Labelled {
    let mut out = Labelled::default();
    for it in items {
        let id = &it.item.id;
        if let Some(e) = &it.item.error {
            out.skipped.push(format!("row `{id}`: {e}"));
            continue;
        }
        let Some(hash) = &it.policy_hash else {
            out.skipped
                .push(format!("row `{id}`: its template did not render"));
            continue;
        };
        let mut used = false;
        for (slot, s) in &it.item.slots {
            // A multi question's label slots are yes/no reads of its options.
            let kind = match &s.multi {
                Some(_) => Some(QuestionKind::Multi),
                None => it.kinds.get(slot).and_then(|k| QuestionKind::parse(k)),
            };
            let (Some(kind), Some(gold)) = (kind, s.gold) else {
                out.skipped
                    .push(format!("row `{id}`: slot `{slot}` has no answer to score"));
                continue;
            };
            if s.probabilities.is_empty() || gold >= s.probabilities.len() {
                out.skipped
                    .push(format!("row `{id}`: slot `{slot}` has no answer to score"));
                continue;
            }
            out.by_kind[kind_index(kind)].push(Sample {
                row: id.clone(),
                probabilities: s.probabilities.values().copied().collect(),
                gold,
            });
            used = true;
        }
        if used {
            out.rows += 1;
            let p = PolicyRef {
                template: it.template.clone(),
                policy_hash: hash.clone(),
            };
            if !out.policies.contains(&p) {
                out.policies.push(p);
            }
        }
    }
    out
}

/// The fit of every type, in [`QuestionKind::SLOT_KINDS`] order.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// `boolean`, `choice`, `score`.
    pub types: [TypeFit; QuestionKind::SLOT_KINDS.len()],
    /// The options used.
    pub options: FitOptions,
}

impl Fitted {
    /// The fit of `kind`.
    pub fn of(&self, kind: QuestionKind) -> &TypeFit {
        &self.types[kind_index(kind)]
    }

    /// Whether any type was fitted and scored on held-out rows, even if its
    /// temperature was then dropped for making them worse: such a file is
    /// still worth writing, since it records that no temperature carries over.
    pub fn scored(&self) -> bool {
        self.types.iter().any(|t| t.figures.scores.is_some())
    }
}

/// Fit and score every type of `labelled` (see [`fit`]).
pub fn calibrate(labelled: &Labelled, options: FitOptions) -> Fitted {
    let one = |k| {
        calibrate_type(
            labelled.of(k),
            options.split,
            options.resamples,
            options.seed,
        )
    };
    Fitted {
        types: QuestionKind::SLOT_KINDS.map(one),
        options,
    }
}

/// The calibration file of a fit on `model`'s reads, made at `fitted_at_unix`.
pub fn calibration_file(
    model: &ModelInfo,
    labelled: &Labelled,
    fitted: &Fitted,
    fitted_at_unix: u64,
) -> CalibrationFile {
    let t = |k| fitted.of(k).figures.temperature;
    let fig = |k| fitted.of(k).figures.clone();
    CalibrationFile {
        format: CALIBRATION_FORMAT.to_owned(),
        model_id: model.id.clone(),
        model_sha256: model.sha256.clone(),
        policies: labelled.policies.clone(),
        temperature: dgem_core::after::Temperature(ByKind::from_fn(t)),
        k: fitted.options.k(),
        rows: labelled.rows,
        fitted_at_unix,
        held_out: HeldOut {
            method: match fitted.options.split {
                Split::Folds(_) => Evaluation::CrossValidated,
                Split::InSample => Evaluation::InSample,
            },
            bootstrap_resamples: fitted.options.resamples,
            bootstrap_seed: fitted.options.seed,
            confidence_level: CONFIDENCE_LEVEL,
            types: ByKind::from_fn(fig),
        },
    }
}
