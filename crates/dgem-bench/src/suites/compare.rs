//! `dgem bench-compare A.json B.json`: per-metric deltas between two receipts and
//! the items whose correctness flipped, with McNemar's exact test on the paired
//! item outcomes ([`crate::metrics::mcnemar`]).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::Summary;
use crate::metrics::mcnemar;
use crate::receipt::Receipt;
use crate::report::{fmt_metric, Table};

fn outcomes(r: &Receipt) -> HashMap<String, bool> {
    r.items
        .iter()
        .filter(|i| i.get("error").is_none_or(Value::is_null))
        .filter_map(|i| {
            let id = i.get("id")?.as_str()?.to_owned();
            let ok = i.get("correct")?.as_bool()?;
            Some((id, ok))
        })
        .collect()
}

/// Compare two receipts (B relative to A).
pub fn compare(a: &Receipt, b: &Receipt) -> Summary {
    let mut deltas = Table::new("Metrics (B − A)", &["Metric", "A", "B", "Δ"]);
    let mut m = BTreeMap::new();
    for (k, va) in &a.metrics {
        if let Some(vb) = b.metrics.get(k) {
            deltas.push(vec![
                k.clone(),
                fmt_metric(*va),
                fmt_metric(*vb),
                format!("{:+.4}", vb - va),
            ]);
            m.insert(format!("delta.{k}"), vb - va);
        }
    }
    let oa = outcomes(a);
    let ob = outcomes(b);
    let mut flips = Table::new("Flipped items", &["ID", "A", "B"]);
    let (mut a_only, mut b_only, mut paired) = (0u64, 0u64, 0u64);
    let mut ids: Vec<&String> = oa.keys().filter(|k| ob.contains_key(*k)).collect();
    ids.sort();
    let mut flipped = Vec::new();
    for id in ids {
        paired += 1;
        let (x, y) = (oa[id], ob[id]);
        if x != y {
            if x {
                a_only += 1;
            } else {
                b_only += 1;
            }
            let w = |c: bool| if c { "right" } else { "wrong" }.to_owned();
            flips.push(vec![id.clone(), w(x), w(y)]);
            flipped.push(json!({"id": id, "a": x, "b": y}));
        }
    }
    let t = mcnemar(a_only, b_only);
    m.insert("paired_items".into(), paired as f64);
    m.insert("a_only_correct".into(), a_only as f64);
    m.insert("b_only_correct".into(), b_only as f64);
    m.insert("mcnemar_p".into(), t.p_value);
    let mut test = Table::new(
        "McNemar's exact test on paired items",
        &[
            "Paired",
            "A right only",
            "B right only",
            "p (two-sided, exact binomial)",
        ],
    );
    test.push(vec![
        paired.to_string(),
        a_only.to_string(),
        b_only.to_string(),
        format!("{:.4}", t.p_value),
    ]);
    let mut warn = Vec::new();
    if a.dataset.sha256 != b.dataset.sha256 {
        warn.push("the receipts were made on different datasets");
    }
    if a.suite != b.suite {
        warn.push("the receipts come from different harnesses");
    }
    Summary {
        metrics: m,
        breakdown: json!({"mcnemar": t, "flipped": flipped, "warnings": warn,
            "a": {"model": a.model, "dgem": a.dgem}, "b": {"model": b.model, "dgem": b.dgem}}),
        tables: vec![deltas, test, flips],
    }
}
