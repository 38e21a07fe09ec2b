//! Row fields whose JSON form varies between datasets, mapped to what the
//! harnesses run: a state given as text or as a JSON object, and a score row's
//! `expected` given as a level name or as an integer. A value that cannot be
//! mapped is refused (see [`crate::dataset`]) with a reason naming the field,
//! the allowed values and the value received.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

pub use dgem_core::json::{shown, SHOWN_CHARS};

/// A row's state as the engine receives it: a string as is, a JSON object as
/// the object. The engine accepts JSON states and writes an object into the
/// prompt as JSON (`dgem_core::prompt::state_text`), exactly as `dgem decide`
/// does with a template whose `state` is an object.
///
/// # Errors
/// The reason, for any other JSON value (`null`, a number, a list, …).
pub fn state(v: Value) -> Result<Value, String> {
    match v {
        Value::String(_) | Value::Object(_) => Ok(v),
        other => Err(format!(
            "must be a string or a JSON object. Given: `{}`",
            shown(&other)
        )),
    }
}

/// serde `deserialize_with` for a state field (see [`state`]); the error is
/// reported under the field's name.
///
/// # Errors
/// The deserializer's error with the reason of [`state`].
pub fn de_state<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    state(Value::deserialize(d)?).map_err(D::Error::custom)
}

/// The level a score row's integer `expected` stands for.
///
/// * When every level name is a number (`["20", …, "24"]`, `["1", …, "5"]`),
///   the integer is the level's **value**: `22` is level `"22"`, and `3`
///   against `"20".."24"` is refused rather than read as the third level.
/// * Otherwise (named levels such as `["none", "low", …, "critical"]`) it is
///   the level's **1-based position**: `2` is `"low"`.
///
/// These are the two readings dgem gives a score answer itself: `value` (the
/// level value) only when every level is a number, else `score`, the 1-based
/// position (`dgem_core::envelope::AnswerOut::to_chat_json`). JevBench writes
/// `expected` as the label string (every score row of
/// `data/jevbench_style.jsonl` does), so an integer only comes from a dataset
/// that numbered its levels, and a numeric level is named by its number.
///
/// # Errors
/// The reason, naming `expected`, the allowed values and the value given.
pub fn score_level(levels: &[String], expected: &Value) -> Result<String, String> {
    let Some(n) = expected
        .as_i64()
        .map(|n| n as f64)
        .or_else(|| expected.as_u64().map(|n| n as f64))
    else {
        return Err(format!(
            "`expected` must be one of the levels {levels:?}, or an integer. Given: `{}`",
            shown(expected)
        ));
    };
    // Every level a number: the test dgem itself applies before it reports a
    // score answer's numeric `value` (`dgem_core::readout::level_values`).
    if let Some(values) = dgem_core::readout::level_values(levels.iter().map(String::as_str))
        .filter(|v| !v.is_empty())
    {
        return values
            .iter()
            .position(|v| *v == n)
            .and_then(|i| levels.get(i))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "`expected` must be one of the levels {levels:?} (an integer is a level value, since every level is a number). Given: `{}`",
                    shown(expected)
                )
            });
    }
    let pos = expected.as_u64().and_then(|p| usize::try_from(p).ok());
    pos.filter(|p| *p >= 1)
        .and_then(|p| levels.get(p - 1))
        .cloned()
        .ok_or_else(|| {
            format!(
                "`expected` must be one of the levels {levels:?} or its 1-based position 1..={}. Given: `{}`",
                levels.len(),
                shown(expected)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn levels(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn an_integer_is_a_level_value_when_every_level_is_a_number() {
        let ages = levels(&["20", "21", "22", "23", "24"]);
        assert_eq!(score_level(&ages, &json!(22)).as_deref(), Ok("22"));
        let e = score_level(&ages, &json!(3)).expect_err("3 is no level value");
        assert!(e.contains("`expected` must be one of the levels"), "{e}");
        assert!(e.contains("\"20\", \"21\""), "{e}");
        assert!(e.ends_with("Given: `3`"), "{e}");
        let stars = levels(&["1", "2", "3", "4", "5"]);
        assert_eq!(score_level(&stars, &json!(4)).as_deref(), Ok("4"));
    }

    #[test]
    fn an_integer_is_a_1_based_position_for_named_levels() {
        let sev = levels(&["none", "low", "medium", "high", "critical"]);
        assert_eq!(score_level(&sev, &json!(1)).as_deref(), Ok("none"));
        assert_eq!(score_level(&sev, &json!(2)).as_deref(), Ok("low"));
        assert_eq!(score_level(&sev, &json!(5)).as_deref(), Ok("critical"));
        for bad in [json!(0), json!(6), json!(-1)] {
            let e = score_level(&sev, &bad).expect_err("out of range");
            assert!(e.contains("1-based position 1..=5"), "{e}");
            assert!(e.ends_with(&format!("Given: `{bad}`")), "{e}");
        }
        let e = score_level(&sev, &json!(2.5)).expect_err("not an integer");
        assert!(e.contains("or an integer. Given: `2.5`"), "{e}");
    }

    #[test]
    fn a_state_is_a_string_or_an_object() {
        assert_eq!(state(json!("text")), Ok(json!("text")));
        assert_eq!(state(json!({"a": 1})), Ok(json!({"a": 1})));
        let e = state(json!([1, 2])).expect_err("a list");
        assert_eq!(e, "must be a string or a JSON object. Given: `[1,2]`");
        let long = json!("x".repeat(200));
        assert_eq!(shown(&long).chars().count(), SHOWN_CHARS + 1);
    }
}
