//! One property of a structured-output JSON Schema: what kind of question it
//! is (see the mapping table in the parent module), after following local
//! `$ref`s.

use serde_json::Value;

use super::{invalid, MAX_INTEGER_LEVELS};
use crate::error::ApiError;

/// What kind of value a property takes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    /// `true` / `false`.
    Boolean,
    /// One of these JSON values (their text are the option names, in order).
    Enum(Vec<Value>),
    /// An integer in `min..=min + count - 1`.
    Integer {
        /// The lowest level.
        min: i64,
    },
    /// Any of these JSON values (an array of enum values): a `multi`
    /// question, with `minItems` / `maxItems` as its `min` / `max`.
    Multi {
        /// The allowed values, in order.
        values: Vec<Value>,
        /// `minItems`, when given.
        min: Option<i64>,
        /// `maxItems`, when given.
        max: Option<i64>,
    },
}

/// Follow a local `$ref` and a one-element `allOf`, at most 8 times (a cycle
/// of references is refused).
pub(super) fn resolve<'a>(
    root: &'a Value,
    mut v: &'a Value,
    path: &str,
) -> Result<&'a Value, ApiError> {
    for _ in 0..8 {
        if let Some(r) = v.get("$ref") {
            let target = r.as_str().and_then(|r| {
                let name = r
                    .strip_prefix("#/$defs/")
                    .map(|n| ("$defs", n))
                    .or_else(|| r.strip_prefix("#/definitions/").map(|n| ("definitions", n)))?;
                root.get(name.0)?.get(name.1)
            });
            v = target.ok_or_else(|| {
                invalid(
                    format!("{path}: `$ref` {r} does not name an entry of `$defs` (only local `#/$defs/NAME` references are followed)"),
                    format!("{path}.$ref"),
                )
            })?;
            continue;
        }
        match v.get("allOf").and_then(Value::as_array) {
            Some(all) if all.len() == 1 => v = &all[0],
            _ => return Ok(v),
        }
    }
    Err(invalid(
        format!("{path}: references nest more than 8 deep (a cycle?)"),
        path.to_string(),
    ))
}

pub(super) fn integer_bound(v: &Value, key: &str, path: &str) -> Result<Option<i64>, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                    .map(|f| f as i64)
            })
            .map(Some)
            .ok_or_else(|| {
                invalid(
                    format!("{path}.{key} must be a whole number. Given: {n}"),
                    format!("{path}.{key}"),
                )
            }),
    }
}

const ALLOWED: &str = "{\"type\": \"boolean\"}, {\"enum\": [...]}, {\"type\": \"integer\", \"minimum\": A, \"maximum\": B} or {\"type\": \"array\", \"items\": {\"enum\": [...]}}";

/// The enum values of `v` (strings, numbers or booleans), checked.
fn enum_values(values: &Value, path: &str) -> Result<Vec<Value>, ApiError> {
    let Some(values) = values.as_array() else {
        return Err(invalid(
            format!("{path}: `enum` must be a list. Given: {values}; a property of a decision is {ALLOWED}"),
            path.to_string(),
        ));
    };
    if let Some((i, bad)) = values
        .iter()
        .enumerate()
        .find(|(_, e)| !(e.is_string() || e.is_number() || e.is_boolean()))
    {
        return Err(invalid(
            format!(
                "{path}.enum[{i}]: an enum value must be a string, number or boolean. Given: {bad}"
            ),
            format!("{path}.enum[{i}]"),
        ));
    }
    Ok(values.clone())
}

/// An array property: `items` (followed through `$ref`) must hold an
/// `enum`; the property is then a `multi` question over those values.
fn multi_of(root: &Value, v: &Value, path: &str) -> Result<Kind, ApiError> {
    let ipath = format!("{path}.items");
    let Some(items) = v.get("items") else {
        return Err(invalid(
            format!("{path}: an array property is read as multi-select and needs `items` with an `enum` of the values it may hold; a property of a decision is {ALLOWED}"),
            ipath,
        ));
    };
    let items = resolve(root, items, &ipath)?;
    let Some(values) = items.get("enum") else {
        return Err(invalid(
            format!("{ipath}: an array of anything but enum values (free text, objects) is not a decision: list the allowed values in `items.enum`. Given: {items}"),
            ipath,
        ));
    };
    Ok(Kind::Multi {
        values: enum_values(values, &ipath)?,
        min: integer_bound(v, "minItems", path)?,
        max: integer_bound(v, "maxItems", path)?,
    })
}

/// One property's kind, or why it cannot be a question.
pub(super) fn kind_of(root: &Value, v: &Value, path: &str) -> Result<Kind, ApiError> {
    let refuse = |why: &str| {
        invalid(
            format!("{path}: {why}; a property of a decision is {ALLOWED}"),
            path.to_string(),
        )
    };
    if !v.is_object() {
        return Err(refuse(&format!("must be a schema object. Given: {v}")));
    }
    if v.get("anyOf").is_some() || v.get("oneOf").is_some() {
        return Err(refuse(
            "`anyOf`/`oneOf` (such as a nullable field) is not a decision: every property gets an answer",
        ));
    }
    let ty = match v.get("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(ts)) if ts.len() == 1 => ts[0].as_str(),
        Some(other) => {
            return Err(refuse(&format!(
                "`type` must be one type (a nullable field is not a decision). Given: {other}"
            )))
        }
    };
    if let Some(values) = v.get("enum") {
        return Ok(Kind::Enum(enum_values(values, path)?));
    }
    if ty == Some("array") {
        return multi_of(root, v, path);
    }
    if let Some(c) = v.get("const") {
        return Err(refuse(&format!(
            "`const` {c} has one value: there is nothing to decide"
        )));
    }
    match ty {
        Some("boolean") => Ok(Kind::Boolean),
        Some("integer") => {
            let lo = integer_bound(v, "minimum", path)?
                .or(integer_bound(v, "exclusiveMinimum", path)?.map(|m| m + 1));
            let hi = integer_bound(v, "maximum", path)?
                .or(integer_bound(v, "exclusiveMaximum", path)?.map(|m| m - 1));
            match (lo, hi) {
                (Some(lo), Some(hi)) if hi > lo && hi - lo < MAX_INTEGER_LEVELS => {
                    Ok(Kind::Integer { min: lo })
                }
                (Some(lo), Some(hi)) => Err(refuse(&format!(
                    "an integer property needs 2 to {MAX_INTEGER_LEVELS} values between `minimum` and `maximum`. Given: {lo}..={hi}"
                ))),
                _ => Err(refuse(
                    "an integer property needs both `minimum` and `maximum` (its levels)",
                )),
            }
        }
        Some("string") => Err(refuse(
            "free text (a string without `enum`) is not a decision: list the allowed values in `enum`",
        )),
        Some("number") => Err(refuse(
            "a real number is not a decision: use an integer with `minimum` and `maximum`, or an `enum`",
        )),
        Some("object") => Err(refuse(
            "a nested object is not read: flatten it into properties of the top-level object",
        )),
        Some(other) => Err(refuse(&format!("`type` {other:?} is not a decision"))),
        None => Err(refuse("it has no `type` and no `enum`")),
    }
}
