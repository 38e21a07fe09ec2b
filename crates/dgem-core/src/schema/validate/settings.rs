//! Schema-level settings: serving.md §3.1 rules 4 and 8–15.
//!
//! An absent key or an explicit `null` takes the default. Where Python would
//! raise a non-schema `ValueError`/`TypeError` (a non-numeric `steps`,
//! `auto_max` or `auto_threshold`), we return a [`SchemaError`] naming the field.

use serde_json::{Map, Value};

use super::text::{py_repr, shown};
use crate::error::SchemaError;
use crate::schema::{
    ChunkPrompt, Isolate, Layout, Question, SamplePolicy, SchemaDefaults, DEFAULT_AUTO_MAX,
    DEFAULT_AUTO_THRESHOLD, MAX_SAMPLES, MAX_THINK,
};
use crate::words::{names, parse_exact, quoted_or};

/// Most denoise steps per read.
const MAX_STEPS: i64 = 8;
/// Fewest canvas rows per chunk.
const MIN_CHUNK_ROWS: u64 = 8;

/// The value of `key`, treating an explicit `null` as absent.
fn get<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// Python `int(v)`: integers, floats truncated, and integer strings.
fn python_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite())
                    .map(|f| f.trunc() as i64)
            }),
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

/// Rule 4: `isolate` must be one of `auto`, `noul`, `none`, `all`; absent takes
/// the deployment default.
pub(super) fn isolate(
    obj: &Map<String, Value>,
    defaults: &SchemaDefaults,
) -> Result<Isolate, SchemaError> {
    let Some(raw) = get(obj, "isolate") else {
        return Ok(defaults.isolate);
    };
    raw.as_str()
        .and_then(parse_exact::<Isolate>)
        .ok_or_else(|| {
            SchemaError::new(
                "isolate",
                format!(
                    "schema: isolate must be {} (got {})",
                    quoted_or(&names::<Isolate>()),
                    shown(raw)
                ),
            )
        })
}

/// Rule 8: the sample policy.
pub(super) fn samples(
    obj: &Map<String, Value>,
    defaults: &SchemaDefaults,
) -> Result<SamplePolicy, SchemaError> {
    let Some(raw) = get(obj, "samples") else {
        return Ok(defaults.samples);
    };
    let bad = || {
        SchemaError::new(
            "samples",
            format!(
                "schema: samples must be a positive count or \"auto\" (got {})",
                shown(raw)
            ),
        )
    };
    let count = match raw {
        Value::String(s) if s.trim() == "auto" => return auto_policy(obj),
        Value::String(s)
            if !s.trim().is_empty() && s.trim().bytes().all(|b| b.is_ascii_digit()) =>
        {
            // A long digit string saturates; it is clamped to 32 anyway.
            s.trim().parse::<u64>().unwrap_or(u64::MAX)
        }
        Value::Number(n) => n.as_u64().ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if count == 0 {
        return Err(bad());
    }
    let n = u32::try_from(count.min(u64::from(MAX_SAMPLES))).unwrap_or(MAX_SAMPLES);
    Ok(SamplePolicy::Fixed { n })
}

/// `samples: "auto"`: read `auto_max` and `auto_threshold`.
fn auto_policy(obj: &Map<String, Value>) -> Result<SamplePolicy, SchemaError> {
    let max = match obj.get("auto_max") {
        None => i64::from(DEFAULT_AUTO_MAX),
        Some(v) => python_int(v).ok_or_else(|| {
            SchemaError::new(
                "auto_max",
                format!(
                    "schema: auto_max must be a whole number of reads, 1 to {MAX_SAMPLES} (got {})",
                    shown(v)
                ),
            )
        })?,
    };
    let threshold = match obj.get("auto_threshold") {
        None => DEFAULT_AUTO_THRESHOLD,
        Some(v) => {
            let t = match v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => s.trim().parse::<f64>().ok(),
                _ => None,
            };
            t.filter(|t| t.is_finite()).ok_or_else(|| {
                SchemaError::new(
                    "auto_threshold",
                    format!(
                        "schema: auto_threshold must be an entropy in nats, a number (got {})",
                        shown(v)
                    ),
                )
            })?
        }
    };
    let max = u32::try_from(max.clamp(1, i64::from(MAX_SAMPLES))).unwrap_or(1);
    Ok(SamplePolicy::Auto { max, threshold })
}

/// Rule 9: `ask` lists known ids and includes every dependency. Duplicates
/// are dropped; the given order is kept.
pub(super) fn ask(
    obj: &Map<String, Value>,
    questions: &[Question],
) -> Result<Option<Vec<String>>, SchemaError> {
    let Some(raw) = get(obj, "ask") else {
        return Ok(None);
    };
    let err = |why: String| {
        SchemaError::new(
            "ask",
            format!("schema: ask must list question ids from this schema ({why})"),
        )
    };
    let items = match raw {
        Value::Array(items) if !items.is_empty() => items,
        Value::Array(_) => return Err(err("got an empty list".into())),
        other => return Err(err(format!("got {}", shown(other)))),
    };
    let mut ids: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Some(id) = item
            .as_str()
            .filter(|s| questions.iter().any(|q| q.id == *s))
        else {
            return Err(err(format!("unknown id {}", shown(item))));
        };
        if !ids.iter().any(|i| i == id) {
            ids.push(id.to_string());
        }
    }
    for q in questions.iter().filter(|q| ids.contains(&q.id)) {
        if let Some(missing) = q.depends_on.iter().find(|d| !ids.contains(d)) {
            return Err(SchemaError::new(
                "ask",
                format!(
                    "schema: ask names {} but not everything it depends on (missing {})",
                    py_repr(&q.id),
                    py_repr(missing)
                ),
            ));
        }
    }
    Ok(Some(ids))
}

/// Rule 10: `chunk_rows` is an integer of at least 8.
pub(super) fn chunk_rows(obj: &Map<String, Value>) -> Result<Option<usize>, SchemaError> {
    let Some(raw) = get(obj, "chunk_rows") else {
        return Ok(None);
    };
    match raw.as_u64() {
        Some(n) if n >= MIN_CHUNK_ROWS => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        _ => Err(SchemaError::new(
            "chunk_rows",
            format!(
                "schema: chunk_rows must be an integer of at least {MIN_CHUNK_ROWS} (got {})",
                shown(raw)
            ),
        )),
    }
}

/// Rule 11: `chunk_prompt` is `shared` or `own` (default `own`).
pub(super) fn chunk_prompt(obj: &Map<String, Value>) -> Result<ChunkPrompt, SchemaError> {
    match get(obj, "chunk_prompt") {
        None => Ok(ChunkPrompt::Own),
        Some(Value::String(s)) if s == "own" => Ok(ChunkPrompt::Own),
        Some(Value::String(s)) if s == "shared" => Ok(ChunkPrompt::Shared),
        Some(other) => Err(SchemaError::new(
            "chunk_prompt",
            format!(
                "schema: chunk_prompt must be \"shared\" or \"own\" (got {})",
                shown(other)
            ),
        )),
    }
}

/// Rule 12: `sequential` is a boolean (numbers count by truthiness, as in
/// Python; strings are refused because `"false"` would be true there).
pub(super) fn sequential(obj: &Map<String, Value>) -> Result<bool, SchemaError> {
    match get(obj, "sequential") {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::Number(n)) => Ok(n.as_f64().is_some_and(|f| f != 0.0)),
        Some(other) => Err(SchemaError::new(
            "sequential",
            format!(
                "schema: sequential must be true or false (got {})",
                shown(other)
            ),
        )),
    }
}

/// Rule 13: `layout` is `schema_first` or `document_first`.
pub(super) fn layout(
    obj: &Map<String, Value>,
    defaults: &SchemaDefaults,
) -> Result<Layout, SchemaError> {
    match get(obj, "layout") {
        None => Ok(defaults.layout),
        Some(raw) => raw.as_str().and_then(parse_exact::<Layout>).ok_or_else(|| {
            // The original server's message names schema_first first.
            let mut listed = names::<Layout>();
            listed.reverse();
            SchemaError::new(
                "layout",
                format!(
                    "schema: layout must be {} (got {})",
                    quoted_or(&listed),
                    shown(raw)
                ),
            )
        }),
    }
}

/// Rule 14: `think` is an integer (not a boolean) in 0..=4096.
pub(super) fn think(obj: &Map<String, Value>) -> Result<u32, SchemaError> {
    let Some(raw) = get(obj, "think") else {
        return Ok(0);
    };
    match raw.as_u64() {
        Some(n) if n <= u64::from(MAX_THINK) => Ok(u32::try_from(n).unwrap_or(MAX_THINK)),
        _ => Err(SchemaError::new(
            "think",
            format!(
                "schema: think must be a thought budget in tokens, 0 to {MAX_THINK} (got {})",
                shown(raw)
            ),
        )),
    }
}

/// Rule 15: `steps = clamp(int(steps), 1, 8)`; non-numeric values are an error.
pub(super) fn steps(obj: &Map<String, Value>) -> Result<u32, SchemaError> {
    let Some(raw) = obj.get("steps") else {
        return Ok(1);
    };
    let n = python_int(raw).ok_or_else(|| {
        SchemaError::new(
            "steps",
            format!(
                "schema: steps must be a whole number of denoise steps, 1 to {MAX_STEPS} (got {})",
                shown(raw)
            ),
        )
    })?;
    Ok(u32::try_from(n.clamp(1, MAX_STEPS)).unwrap_or(1))
}

/// Rule 17 (dgem-rs): `think_optional` is `true` or `false` (default false).
/// With it, a backend that cannot think answers without the thought and says
/// so in `diagnostics.warnings`, instead of refusing `think`.
pub(super) fn think_optional(obj: &Map<String, Value>) -> Result<bool, SchemaError> {
    switch("think_optional", get(obj, "think_optional"))
}

/// Rule 18 (dgem-rs): `requires_image` is `true` or `false` (default false).
/// With it, the policy reads an image of the state, and a decision whose
/// state holds none is refused ([`crate::images::check_required`]).
pub(super) fn requires_image(obj: &Map<String, Value>) -> Result<bool, SchemaError> {
    switch("requires_image", get(obj, "requires_image"))
}

/// A dgem-rs switch: `true` or `false` only (absent or `null`: false). No
/// Python server reads these keys, so no truthiness is borrowed from one.
fn switch(key: &str, raw: Option<&Value>) -> Result<bool, SchemaError> {
    match raw {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(SchemaError::new(
            key,
            format!("schema: {key} must be true or false (got {})", shown(other)),
        )),
    }
}
