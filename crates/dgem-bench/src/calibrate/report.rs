//! The report of a `dgem calibrate` run: a table of the fitted temperatures, a
//! table of held-out ECE / Brier / NLL before → after with their intervals, and
//! flat metrics (`<type>.<metric>.before|after|change`) for receipts and gates.

use std::collections::BTreeMap;

use dgem_core::after::calibration::{CalibrationFile, Compared, Estimate};
use dgem_core::schema::QuestionKind;
use serde_json::json;

use super::{Fitted, Split};
use crate::report::{fmt_metric, pct, Table};
use crate::suites::Summary;

/// `value [low, high]`, 4 decimals.
pub fn fmt_estimate(e: &Estimate) -> String {
    format!("{:.4} [{:.4}, {:.4}]", e.value, e.low, e.high)
}

/// How the held-out figures were obtained, in words (the second table's title).
pub fn method_line(fitted: &Fitted) -> String {
    let o = &fitted.options;
    match o.split {
        Split::Folds(k) => format!(
            "Held-out calibration: {k}-fold cross-validation, out-of-fold predictions (95% bootstrap intervals, {} resamples, seed {})",
            o.resamples, o.seed
        ),
        Split::InSample => format!(
            "IN-SAMPLE calibration: fitted and scored on the same rows, optimistic (95% bootstrap intervals, {} resamples, seed {})",
            o.resamples, o.seed
        ),
    }
}

/// Tables, flat metrics and breakdown (the calibration file's `held_out`) of a fit.
pub fn summarize(fitted: &Fitted, file: &CalibrationFile) -> Summary {
    let mut types = Table::new(
        "Temperature per question type (T: fit on all rows; per fold: fit without that fold)",
        &[
            "Type",
            "Slots",
            "Rows",
            "Accuracy",
            "T per fold",
            "T",
            "Note",
        ],
    );
    let mut held = Table::new(
        method_line(fitted),
        &[
            "Type",
            "Metric",
            "Before",
            "After",
            "Change (after − before)",
        ],
    );
    let mut m = BTreeMap::new();
    for kind in QuestionKind::SLOT_KINDS {
        let name = kind.as_str();
        let f = &fitted.of(kind).figures;
        m.insert(format!("{name}.slots"), f.slots as f64);
        let folds = f
            .fold_temperatures
            .iter()
            .map(|t| format!("{t:.3}"))
            .collect::<Vec<_>>()
            .join(" ");
        types.push(vec![
            name.to_owned(),
            f.slots.to_string(),
            f.rows.to_string(),
            f.scores.map_or_else(|| "-".into(), |s| pct(s.accuracy)),
            if folds.is_empty() { "-".into() } else { folds },
            f.temperature
                .map_or_else(|| "unset".into(), |t| format!("{t:.3}")),
            f.unset_reason
                .clone()
                .or_else(|| f.note.clone())
                .unwrap_or_default(),
        ]);
        let (Some(t), Some(s)) = (f.temperature, f.scores) else {
            continue;
        };
        m.insert(format!("{name}.temperature"), t);
        m.insert(format!("{name}.accuracy"), s.accuracy);
        let rows: [(&str, &Compared); 3] = [
            ("ece_10bin", &s.ece_10bin),
            ("brier", &s.brier),
            ("nll", &s.nll),
        ];
        for (metric, c) in rows {
            held.push(vec![
                name.to_owned(),
                metric.to_owned(),
                fmt_estimate(&c.before),
                fmt_estimate(&c.after),
                fmt_estimate(&c.change),
            ]);
            m.insert(format!("{name}.{metric}.before"), c.before.value);
            m.insert(format!("{name}.{metric}.after"), c.after.value);
            m.insert(format!("{name}.{metric}.change"), c.change.value);
        }
    }
    let mut tables = vec![types];
    if !held.rows.is_empty() {
        tables.push(held);
    }
    let mut summary = Table::new("Summary", &["Metric", "Value"]);
    summary.push(vec!["rows".into(), file.rows.to_string()]);
    summary.push(vec!["k".into(), file.k.to_string()]);
    summary.push(vec!["policies".into(), file.policies.len().to_string()]);
    summary.push(vec!["model".into(), file.model_id.clone()]);
    for (k, v) in &m {
        if k.ends_with(".temperature") {
            summary.push(vec![k.clone(), fmt_metric(*v)]);
        }
    }
    tables.push(summary);
    m.insert("rows".into(), file.rows as f64);
    m.insert("k".into(), file.k as f64);
    Summary {
        metrics: m,
        breakdown: json!({
            "temperature": file.temperature,
            "policies": file.policies,
            "held_out": file.held_out,
        }),
        tables,
    }
}
