//! `samples` as a decision request writes it: a count from 1 to
//! [`MAX_SAMPLES`] or the word `auto` (one read, and up to
//! [`DEFAULT_AUTO_MAX`] when an answer's entropy exceeds
//! [`DEFAULT_AUTO_THRESHOLD`] nats).
//!
//! The request's form is narrower than the policy's (a policy may also set
//! `auto_max` and `auto_threshold`, and reads a digit string as a count), so
//! it has its own parse. This module is the serde `with` module of a request
//! field of type `Option<SamplePolicy>`; [`from_value`] and [`from_flag`] are
//! the one parse behind it and behind `dgem decide --samples`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::json::shown;
use crate::schema::{SamplePolicy, DEFAULT_AUTO_MAX, DEFAULT_AUTO_THRESHOLD, MAX_SAMPLES};

/// The sample policy a request value asks for: a count (a whole number
/// written `3` or `3.0`) from 1 to [`MAX_SAMPLES`], or `"auto"` (trimmed,
/// any case).
///
/// # Errors
/// The message without the field: `must be a count from 1 to 32 or `auto`.
/// Given: 0`.
pub fn from_value(v: &Value) -> Result<SamplePolicy, String> {
    if v.as_str()
        .is_some_and(|s| s.trim().eq_ignore_ascii_case("auto"))
    {
        return Ok(SamplePolicy::Auto {
            max: DEFAULT_AUTO_MAX,
            threshold: DEFAULT_AUTO_THRESHOLD,
        });
    }
    // A count written `3.0` is the count 3 (some clients write every number
    // as a float); `2.5` is not a count.
    let whole = v
        .as_f64()
        .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x <= f64::from(u32::MAX))
        .map(|x| x as u64);
    match v.as_u64().or(whole).and_then(|n| u32::try_from(n).ok()) {
        Some(n) if (1..=MAX_SAMPLES).contains(&n) => Ok(SamplePolicy::Fixed { n }),
        _ => Err(format!(
            "must be a count from 1 to {MAX_SAMPLES} or `auto`. Given: {}",
            shown(v)
        )),
    }
}

/// The sample policy of a command-line flag: the text read as JSON when it
/// is a number, else as a word, then [`from_value`].
///
/// # Errors
/// As [`from_value`].
pub fn from_flag(s: &str) -> Result<SamplePolicy, String> {
    let v = match serde_json::from_str::<Value>(s) {
        Ok(n @ Value::Number(_)) => n,
        _ => Value::String(s.to_string()),
    };
    from_value(&v)
}

/// The request value of a policy: its count, or `"auto"`.
pub fn to_value(p: &SamplePolicy) -> Value {
    match p {
        SamplePolicy::Fixed { n } => Value::from(*n),
        SamplePolicy::Auto { .. } => Value::from("auto"),
    }
}

/// serde `with`: write an `Option<SamplePolicy>` as the request writes it.
///
/// # Errors
/// The serializer's.
pub fn serialize<S: Serializer>(p: &Option<SamplePolicy>, s: S) -> Result<S::Ok, S::Error> {
    p.as_ref().map(to_value).serialize(s)
}

/// serde `with`: read an `Option<SamplePolicy>` through [`from_value`]
/// (`null` is `None`).
///
/// # Errors
/// [`from_value`]'s message.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SamplePolicy>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => from_value(&v).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_count_or_auto_is_taken_and_anything_else_refused_showing_it() {
        assert_eq!(from_value(&json!(3)), Ok(SamplePolicy::Fixed { n: 3 }));
        assert_eq!(from_value(&json!(3.0)), Ok(SamplePolicy::Fixed { n: 3 }));
        assert_eq!(
            from_value(&json!(" AUTO ")),
            Ok(SamplePolicy::Auto {
                max: 4,
                threshold: 0.1
            })
        );
        for (bad, shown) in [
            (json!(0), "0"),
            (json!(33), "33"),
            (json!(2.5), "2.5"),
            (json!("often"), "\"often\""),
            (json!("3"), "\"3\""),
        ] {
            assert_eq!(
                from_value(&bad),
                Err(format!(
                    "must be a count from 1 to 32 or `auto`. Given: {shown}"
                ))
            );
        }
        assert_eq!(from_flag("5"), Ok(SamplePolicy::Fixed { n: 5 }));
        assert!(from_flag("auto").is_ok());
        assert_eq!(
            from_flag("0"),
            Err("must be a count from 1 to 32 or `auto`. Given: 0".into())
        );
    }

    #[test]
    fn the_request_form_round_trips() {
        for p in [
            SamplePolicy::Fixed { n: 7 },
            SamplePolicy::Auto {
                max: 4,
                threshold: 0.1,
            },
        ] {
            assert_eq!(from_value(&to_value(&p)), Ok(p));
        }
    }
}
