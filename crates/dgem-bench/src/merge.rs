//! `dgem bench-merge`: join the receipts of the shards of one run
//! ([`crate::shard`]) into the receipt a single process would have written.
//!
//! The shards must be one run: the same suite, dataset (by sha256), model,
//! dgem version, seed and settings (all but `shard`), the same shard count,
//! and every index from 0 to N−1 exactly once. The items are put back in
//! dataset order (each shard receipt lists the id and line of every row it
//! was given) and every metric and breakdown is computed again from them by
//! the suite's own `summarize`, so accuracy, ECE, Brier, nDCG and the latency
//! percentiles (from each item's own wall time) equal a single-process run
//! over the same answers. Only the run accounting is the shards' together:
//! `ran` and `resumed` add up, `elapsed_s` is the longest shard (they run at
//! once), `decisions_per_s` is the sum of the shards' rates. The refused
//! dataset lines are the shards' together, reported as a single run reports
//! them ([`Summary::record_refused`]).

use std::collections::{BTreeMap, HashMap};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::receipt::{now_unix, Receipt, RunInfo};
use crate::suites::{self, Summary};
use crate::BenchError;

fn invalid(message: String) -> BenchError {
    BenchError::Invalid(message)
}

/// Settings without the shard, for comparing shards.
fn common_settings(s: &Value) -> Value {
    let mut s = s.clone();
    if let Some(o) = s.as_object_mut() {
        o.remove("shard");
    }
    s
}

fn items_of<T: DeserializeOwned>(suite: &str, items: &[Value]) -> Result<Vec<T>, BenchError> {
    items
        .iter()
        .map(|v| {
            serde_json::from_value(v.clone())
                .map_err(|e| BenchError::json(format!("a `{suite}` item"), e))
        })
        .collect()
}

/// The suite's summary of `items` (the same function its command runs);
/// `settings` are the run's (`bench-jev` reads its scoring from them).
///
/// # Errors
/// [`BenchError::Invalid`] for a suite that has no items to merge;
/// [`BenchError::Json`] when an item is not that suite's.
pub fn summarize(
    suite: &str,
    items: &[Value],
    decisions_per_s: f64,
    settings: &Value,
) -> Result<Summary, BenchError> {
    Ok(match suite {
        "jev" => {
            let scoring = settings
                .get("scoring")
                .cloned()
                .map(serde_json::from_value)
                .transpose()
                .map_err(|e| BenchError::json("settings.scoring", e))?
                .unwrap_or_default();
            suites::jev_run::summarize(&items_of(suite, items)?, decisions_per_s, scoring)
        }
        "bench" => suites::bench::summarize(&items_of(suite, items)?, decisions_per_s),
        "calibration" => suites::calibration::summarize(&items_of(suite, items)?).0,
        "intents" => suites::intents::summarize(&items_of(suite, items)?, decisions_per_s),
        "rerank" => suites::rerank::summarize(&items_of(suite, items)?, decisions_per_s),
        "permutation" => {
            suites::permutation::summarize(&items_of(suite, items)?, decisions_per_s)
        }
        other => {
            return Err(invalid(format!(
                "suite `{other}` cannot be merged: the sharded suites are [bench, calibration, intents, rerank, permutation, jev]"
            )))
        }
    })
}

/// Merge shard receipts, each with a label for errors (its path).
///
/// # Errors
/// [`BenchError::Invalid`] naming the receipt and field that differ, the
/// missing or repeated shard indices, or an item outside its shard's rows.
pub fn merge(shards: &[(String, Receipt)]) -> Result<(Receipt, Summary), BenchError> {
    let Some((first_name, first)) = shards.first() else {
        return Err(invalid(
            "bench-merge needs at least one shard receipt".into(),
        ));
    };
    let plan_of = |name: &str, r: &Receipt| {
        r.shard.clone().ok_or_else(|| {
            invalid(format!(
                "`{name}` is not the receipt of a shard (it has no `shard`; run the bench with `--shard I/N`)"
            ))
        })
    };
    let count = plan_of(first_name, first)?.count;
    let base_settings = common_settings(&first.settings);
    let mut seen: Vec<Option<&str>> = vec![None; count];
    let mut lines: HashMap<String, usize> = HashMap::new();
    for (name, r) in shards {
        let plan = plan_of(name, r)?;
        let differs = |field: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            invalid(format!(
                "`{name}` is not a shard of the same run as `{first_name}`: `{field}` differs ({b:?} vs {a:?})"
            ))
        };
        if plan.count != count {
            return Err(differs("shard.count", &count, &plan.count));
        }
        for (field, a, b) in [
            ("suite", &first.suite, &r.suite),
            ("dataset.sha256", &first.dataset.sha256, &r.dataset.sha256),
            ("model.id", &first.model.id, &r.model.id),
            ("model.backend", &first.model.backend, &r.model.backend),
            (
                "model.label_mode",
                &first.model.label_mode,
                &r.model.label_mode,
            ),
            ("dgem.version", &first.dgem.version, &r.dgem.version),
        ] {
            if a != b {
                return Err(differs(field, a, b));
            }
        }
        if first.model.sha256 != r.model.sha256 {
            return Err(differs(
                "model.sha256",
                &first.model.sha256,
                &r.model.sha256,
            ));
        }
        if first.model.calibration != r.model.calibration {
            return Err(differs(
                "model.calibration",
                &first.model.calibration,
                &r.model.calibration,
            ));
        }
        if first.seed != r.seed {
            return Err(differs("seed", &first.seed, &r.seed));
        }
        let settings = common_settings(&r.settings);
        if settings != base_settings {
            return Err(differs(
                "settings",
                &base_settings.to_string(),
                &settings.to_string(),
            ));
        }
        match seen.get_mut(plan.index) {
            Some(Some(other)) => {
                return Err(invalid(format!(
                    "shard {}/{count} is given twice: `{other}` and `{name}`",
                    plan.index
                )))
            }
            Some(slot) => *slot = Some(name.as_str()),
            None => {
                return Err(invalid(format!(
                    "`{name}`: shard index {} is not below the count {count}",
                    plan.index
                )))
            }
        }
        for (id, line) in &plan.rows {
            if lines.insert(id.clone(), *line).is_some() {
                return Err(invalid(format!(
                    "item `{id}` is in two shards (one of them `{name}`): the shards split different datasets"
                )));
            }
        }
        for item in &r.items {
            let id = item.get("id").and_then(Value::as_str).unwrap_or_default();
            if !plan.rows.iter().any(|(p, _)| p == id) {
                return Err(invalid(format!(
                    "`{name}`: item `{id}` is not one of the rows of shard {}/{count}",
                    plan.index
                )));
            }
        }
    }
    let missing: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(i, _)| i.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(invalid(format!(
            "shard(s) [{}] of {count} are missing: give one receipt per shard",
            missing.join(", ")
        )));
    }
    let line_of = |v: &Value| {
        v.get("id")
            .and_then(Value::as_str)
            .and_then(|id| lines.get(id))
            .copied()
            .unwrap_or(usize::MAX)
    };
    let mut items: Vec<Value> = shards.iter().flat_map(|(_, r)| r.items.clone()).collect();
    items.sort_by_key(line_of);
    let mut failed: Vec<_> = shards
        .iter()
        .flat_map(|(_, r)| r.run.failed.clone())
        .collect();
    failed.sort_by_key(|f| lines.get(&f.id).copied().unwrap_or(usize::MAX));
    let decisions_per_s: f64 = shards.iter().map(|(_, r)| r.run.decisions_per_s).sum();
    let mut dataset = first.dataset.clone();
    dataset.rows = shards.iter().map(|(_, r)| r.dataset.rows).sum();
    // Each shard lists the refused lines of its ids (and shard 0 those without
    // an id), so together they are the file's, once each.
    let mut refused: Vec<_> = shards
        .iter()
        .flat_map(|(_, r)| r.dataset.refused.clone())
        .collect();
    refused.sort_by_key(|r| r.line);
    refused.dedup_by_key(|r| r.line);
    dataset.refused = refused;
    let mut summary = summarize(&first.suite, &items, decisions_per_s, &first.settings)?;
    summary.record_refused(&dataset.refused);
    let mut settings = base_settings;
    if let Some(o) = settings.as_object_mut() {
        o.insert("merged_shards".into(), Value::from(count));
    }
    let receipt = Receipt {
        format: first.format.clone(),
        suite: first.suite.clone(),
        created_unix: now_unix(),
        dataset,
        model: first.model.clone(),
        dgem: first.dgem.clone(),
        seed: first.seed,
        settings,
        run: RunInfo {
            workers: first.run.workers,
            resumed: shards.iter().map(|(_, r)| r.run.resumed).sum(),
            ran: shards.iter().map(|(_, r)| r.run.ran).sum(),
            elapsed_s: shards
                .iter()
                .map(|(_, r)| r.run.elapsed_s)
                .fold(0.0, f64::max),
            decisions_per_s,
            failed,
        },
        metrics: summary.metrics.clone(),
        breakdown: summary.breakdown.clone(),
        items,
        shard: None,
    };
    Ok((receipt, summary))
}

/// Metrics of `a` and `b` that differ, ignoring the run's speed
/// (`decisions_per_s`): what a merged run and a single-process run over the
/// same answers must agree on.
pub fn differing_metrics(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> Vec<String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| k.as_str() != "decisions_per_s")
        .filter(|k| a.get(*k).map(|v| v.to_bits()) != b.get(*k).map(|v| v.to_bits()))
        .map(|k| format!("{k}: {:?} vs {:?}", a.get(k), b.get(k)))
        .collect()
}
