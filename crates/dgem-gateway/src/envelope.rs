//! Tolerant parsing of a remote dgem's reply (reference.md §2.3): the OpenAI
//! wrapper with `content` as a string or an object, a bare envelope, fenced or
//! chatty text around the JSON, entropy as a number or a per-sample list, and
//! answers recomputed from their probabilities (issue #121).

use serde_json::{json, Map, Value};

/// Why a reply could not be read as a decision.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("failed to parse structured decision output: {0}")]
pub struct EnvelopeError(pub String);

/// Extract the `{answers, diagnostics}` envelope from a reply body.
///
/// Order of attempts: a bare envelope (`answers` at the top); the OpenAI
/// wrapper's `choices[0].message.content` as an object or as text (strict JSON,
/// then the body of a fenced block, then the first `{` to the last `}`); a flat
/// `{slot: value}` map becomes answers of `type: "auto"`.
///
/// # Errors
/// [`EnvelopeError`] naming what was missing.
pub fn parse_reply(body: &[u8]) -> Result<Value, EnvelopeError> {
    let v: Value = dgem_core::json::parse_strict_slice(body)
        .map_err(|e| EnvelopeError(format!("reply is not JSON: {e}")))?;
    parse_reply_value(v)
}

/// [`parse_reply`] of a reply already parsed as JSON.
///
/// # Errors
/// As [`parse_reply`], but for the JSON parse.
pub fn parse_reply_value(v: Value) -> Result<Value, EnvelopeError> {
    if has_answers(&v) {
        return Ok(normalize(v));
    }
    let content = v
        .pointer("/choices/0/message/content")
        .ok_or_else(|| EnvelopeError("no `answers` and no `choices[0].message.content`".into()))?;
    let inner = match content {
        Value::String(s) => parse_text(s)?,
        Value::Object(_) => content.clone(),
        other => {
            return Err(EnvelopeError(format!(
                "`choices[0].message.content` must be a string or an object (got {other})"
            )))
        }
    };
    if has_answers(&inner) {
        return Ok(normalize(inner));
    }
    match inner {
        Value::Object(flat) if !flat.is_empty() => Ok(from_flat(flat)),
        _ => Err(EnvelopeError("content has no `answers`".into())),
    }
}

fn has_answers(v: &Value) -> bool {
    v.get("answers")
        .and_then(Value::as_object)
        .is_some_and(|a| !a.is_empty())
}

fn parse_text(s: &str) -> Result<Value, EnvelopeError> {
    if let Ok(v) = dgem_core::json::parse_strict(s) {
        return Ok(v);
    }
    let cleaned = cleaned(s);
    dgem_core::json::parse_strict(cleaned)
        .map_err(|e| EnvelopeError(format!("content is not JSON even after cleaning: {e}")))
}

/// The body of the first ```` ```json ```` fence, else of the first plain fence,
/// else the span from the first `{` to the last `}`.
fn cleaned(s: &str) -> &str {
    for opener in ["```json", "```"] {
        if let Some(start) = s.find(opener) {
            let rest = &s[start + opener.len()..];
            if let Some(end) = rest.find("```") {
                return rest[..end].trim();
            }
        }
    }
    match (s.find('{'), s.rfind('}')) {
        (Some(a), Some(b)) if b > a => &s[a..=b],
        _ => s,
    }
}

/// A flat `{slot: value}` map (plain model JSON output) as `auto` answers.
fn from_flat(flat: Map<String, Value>) -> Value {
    let answers: Map<String, Value> = flat
        .into_iter()
        .map(|(k, v)| {
            let label = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            (
                k,
                json!({"type": "auto", "label": label, "confidence": Value::Null, "probabilities": {}}),
            )
        })
        .collect();
    json!({"answers": answers, "diagnostics": {}})
}

/// Ensure `diagnostics` is an object and recompute each answer's `entropy` and
/// `normalized_entropy` from its probabilities.
fn normalize(mut v: Value) -> Value {
    if let Some(obj) = v.as_object_mut() {
        if !obj.get("diagnostics").is_some_and(Value::is_object) {
            obj.insert("diagnostics".into(), json!({}));
        }
        if let Some(Value::Object(answers)) = obj.get_mut("answers") {
            for a in answers.values_mut() {
                let Some(a) = a.as_object_mut() else { continue };
                let Some(probs) = a.get("probabilities").and_then(Value::as_object) else {
                    continue;
                };
                let ps: Vec<f64> = probs.values().filter_map(Value::as_f64).collect();
                if ps.is_empty() {
                    continue;
                }
                let (h, hn) = entropy(&ps);
                a.insert("entropy".into(), json!(h));
                a.insert("normalized_entropy".into(), json!(hn));
            }
        }
    }
    v
}

/// Entropy (nats) of `ps` renormalized (NaN and ≤ 0 ignored; degenerate → 0),
/// and the same divided by `ln K` (K = number of answers, ≥ 2), clipped to 1.
pub fn entropy(ps: &[f64]) -> (f64, f64) {
    let good: Vec<f64> = ps
        .iter()
        .copied()
        .filter(|p| p.is_finite() && *p > 0.0)
        .collect();
    let total: f64 = good.iter().sum();
    if total <= 0.0 {
        return (0.0, 0.0);
    }
    let h: f64 = good
        .iter()
        .map(|p| p / total)
        .map(|p| -p * p.ln())
        .sum::<f64>()
        .max(0.0);
    let k = ps.len().max(2) as f64;
    (h, (h / k.ln()).min(1.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const ENV: &str = r#"{"answers": {"urgent": {"type": "noul", "label": "yes", "probabilities": {"yes": 0.5, "no": 0.5}, "entropy": 9.0}, "gated": null}, "diagnostics": {"questions": {"urgent": {"entropy": [0.2, 1.5]}}}}"#;

    #[test]
    fn content_as_string_object_fenced_and_bare() {
        let wrapped = json!({"choices": [{"message": {"content": ENV}}]});
        let as_obj = json!({"choices": [{"message": {"content": serde_json::from_str::<Value>(ENV).unwrap_or_default()}}]});
        let fenced = json!({"choices": [{"message": {"content": format!("Sure!\n```json\n{ENV}\n```\nbye")}}]});
        for body in [
            wrapped,
            as_obj,
            fenced,
            serde_json::from_str(ENV).unwrap_or_default(),
        ] {
            let env = parse_reply(body.to_string().as_bytes()).expect("parses");
            let a = &env["answers"]["urgent"];
            assert_eq!(a["label"], "yes");
            // Recomputed from probabilities, not the reported 9.0.
            assert!((a["entropy"].as_f64().unwrap_or(0.0) - 2f64.ln()).abs() < 1e-12);
            assert!((a["normalized_entropy"].as_f64().unwrap_or(0.0) - 1.0).abs() < 1e-12);
            assert!(env["answers"]["gated"].is_null());
        }
    }

    #[test]
    fn flat_map_and_errors() {
        let body = json!({"choices": [{"message": {"content": "{\"team\": \"billing\"}"}}]});
        let env = parse_reply(body.to_string().as_bytes()).expect("flat");
        assert_eq!(env["answers"]["team"]["label"], "billing");
        assert_eq!(env["answers"]["team"]["type"], "auto");
        let err = parse_reply(b"{\"choices\": [{\"message\": {\"content\": 3}}]}").unwrap_err();
        assert!(err.0.contains("string or an object"), "{err}");
        assert!(parse_reply(b"<html>").is_err());
    }

    #[test]
    fn entropy_ignores_bad_values() {
        assert_eq!(entropy(&[1.0, 0.0]), (0.0, 0.0));
        assert_eq!(entropy(&[f64::NAN, -1.0]), (0.0, 0.0));
        let (h, hn) = entropy(&[0.25, 0.25, 0.25, 0.25]);
        assert!((h - 4f64.ln()).abs() < 1e-12 && (hn - 1.0).abs() < 1e-12);
    }
}
