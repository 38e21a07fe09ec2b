//! Reading the `/api/decide` reply off a decision envelope: the largest
//! answer entropy and the timing block.

use serde_json::{json, Value};

/// The largest answer entropy (nats) of an envelope: the maximum over
/// `answers[].entropy` only, each the entropy of the restricted softmax over
/// the question's allowed labels (recomputed from `probabilities` by the
/// reply reader). An answer whose `entropy` is a per-sample list counts with
/// the **mean** of that list. `diagnostics.questions[].entropy` (the
/// whole-vocabulary entropy of the first token) is never used: it is on another
/// scale and would dwarf the answers' entropies.
pub fn max_entropy(envelope: &Value) -> f64 {
    envelope
        .get("answers")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|a| a.values())
        .filter_map(|a| a.get("entropy"))
        .filter_map(|e| match e {
            Value::Array(xs) => {
                let vals: Vec<f64> = xs.iter().filter_map(Value::as_f64).collect();
                (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
            }
            other => other.as_f64(),
        })
        .filter(|h| h.is_finite())
        .fold(0.0, f64::max)
}

/// `diagnostics.timing.total_ms`, falling back to `timing.forward_ms`, then to
/// `fallback_ms` (the client's wall time), written back so it is always present.
pub fn fill_timing(envelope: &mut Value, fallback_ms: f64) -> f64 {
    let timing = envelope
        .pointer("/diagnostics/timing")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let total = timing
        .get("total_ms")
        .and_then(Value::as_f64)
        .or_else(|| timing.get("forward_ms").and_then(Value::as_f64))
        .unwrap_or(fallback_ms);
    if let Some(d) = envelope
        .get_mut("diagnostics")
        .and_then(Value::as_object_mut)
    {
        let t = d.entry("timing").or_insert_with(|| json!({}));
        if let Some(t) = t.as_object_mut() {
            t.entry("total_ms").or_insert(json!(total));
            t.entry("forward_ms").or_insert(json!(total));
            t.entry("queue_ms").or_insert(json!(0.0));
        }
    }
    total
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const ENV: &str = r#"{"answers": {"urgent": {"type": "noul", "label": "yes", "probabilities": {"yes": 0.5, "no": 0.5}, "entropy": 0.6931471805599453}, "gated": null}, "diagnostics": {"questions": {"urgent": {"entropy": [0.2, 1.5]}}}}"#;

    #[test]
    fn max_entropy_reads_numbers_and_lists() {
        let env: Value = serde_json::from_str(ENV).expect("env");
        // The answer's ln 2, not the diagnostics' whole-vocabulary 1.5.
        assert!((max_entropy(&env) - 2f64.ln()).abs() < 1e-12);
        let mut env = env;
        assert!((fill_timing(&mut env, 12.5) - 12.5).abs() < 1e-12);
        assert_eq!(env["diagnostics"]["timing"]["total_ms"], 12.5);
        assert_eq!(env["diagnostics"]["timing"]["queue_ms"], 0.0);
    }

    #[test]
    fn max_entropy_ignores_whole_vocabulary_diagnostics_entropy() {
        let env = json!({
            "answers": {
                "a": {"label": "x", "entropy": 0.69},
                "b": {"label": "y", "entropy": 1.07},
                "c": {"label": "z", "entropy": 1.37},
            },
            "diagnostics": {"questions": {"a": {"entropy": 5.90}, "b": {"entropy": [4.0, 5.9]}}}
        });
        assert!((max_entropy(&env) - 1.37).abs() < 1e-12);
        // A per-sample list counts with its mean.
        let env = json!({"answers": {"a": {"entropy": [0.2, 1.0]}, "b": {"entropy": 0.5}}});
        assert!((max_entropy(&env) - 0.6).abs() < 1e-12);
    }
}
