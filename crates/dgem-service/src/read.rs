//! How a decision is read: the seed, the reads to average, the prompt layout
//! and which questions are read alone. Like [`crate::AfterOptions`],
//! [`ReadOptions`] is declared once and its derives give the JSON keys
//! (serde), the MCP schema (schemars), the OpenAPI schema (utoipa) and the
//! `dgem decide` flags (clap: `--seed`, `--samples`, `--layout`,
//! `--isolate`).
//!
//! Each value is its core type ([`SamplePolicy`], [`Layout`], [`Isolate`]),
//! and each type's one parse is what serde, the schemas and the flags use:
//! [`dgem_core::words`] for the word-valued ones,
//! [`dgem_core::schema::request_samples`] for `samples`.

use std::sync::OnceLock;

use clap::Args;
use dgem_core::json::shown;
use dgem_core::schema::{request_samples, Isolate, Layout, SamplePolicy, MAX_SAMPLES};
use dgem_core::words;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::error::ServiceError;

/// The read keys of one decision request (see the module docs). `None`
/// leaves the policy's own setting (the seed defaults to 42).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema, Args)]
pub struct ReadOptions {
    /// Base seed for the reads (default 42): the same request with the same
    /// seed gets the same probabilities.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "seed"
    )]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub seed: Option<i64>,
    /// Reads to average: a count from 1 to 32, or "auto" (one read, and up
    /// to 4 when an answer's entropy exceeds 0.1 nats). Wins over the
    /// policy's `samples`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "request_samples"
    )]
    #[schemars(schema_with = "samples_schema")]
    #[schema(value_type = Option<Value>)]
    #[arg(long, value_name = "N|auto", value_parser = request_samples::from_flag)]
    pub samples: Option<SamplePolicy>,
    /// Prompt layout: "document_first" (the state, then the questions) or
    /// "schema_first" (the questions first, so that one policy's prompt
    /// prefix is shared, and cached, across states). Wins over the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "LAYOUT", value_parser = words::flag::<Layout>())]
    pub layout: Option<Layout>,
    /// Which questions are read alone, each on a prompt (embedded model) or
    /// canvas (vLLM) of its own: "auto" (default: the yes/no questions of a
    /// policy of 2 or 3 questions with at least two of them; on the embedded
    /// model under document_first, every question of a policy that is not
    /// chained), "noul" (every yes/no question, policies of 2 to 8
    /// questions), "none" or "all" (every question; at most 8 on the vLLM
    /// canvas). Reading alone keeps one answer from leaning on another; under
    /// document_first it costs each question's own text, elsewhere a read per
    /// question. Wins over the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "RULE", value_parser = words::flag::<Isolate>())]
    pub isolate: Option<Isolate>,
}

/// `samples` as the MCP schema advertises it: a count from 1 to 32. The
/// plain schema small-schema clients take cannot say "integer or the word
/// auto" (no unions, no type arrays), so "auto" is in the description and
/// accepted by the parser.
fn samples_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_SAMPLES,
        "description": "Reads to average: a count from 1 to 32 (\"auto\" is accepted too: one read, and up to 4 when an answer's entropy exceeds 0.1 nats). Wins over the policy's `samples`."
    })
}

/// serde `deserialize_with` for `seed`: an integer, refused naming what it
/// must be and the value given (`null` is "not given").
fn seed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    seed_value(&Value::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// The one parse of a request's `seed`, on every surface (`/api`, MCP, the
/// chat route, `/v1/systemone`): `null` is "not given"; an integer is the
/// seed, and so is a whole float (`7.0`, how some clients write integers);
/// a fraction, a boolean or a string is refused rather than truncated or
/// coerced (the original server's `int(...)` read `true` as 1 and `"7"` as
/// 7, a reading a client never meant).
///
/// # Errors
/// "must be an integer. Given: …" (or the range, for an integer too large
/// for a seed), to follow the key's name.
pub fn seed_value(v: &Value) -> Result<Option<i64>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let whole = || {
        v.as_f64()
            .filter(|f| v.is_f64() && f.is_finite() && f.abs() < 9.2e18 && f.fract() == 0.0)
            .map(|f| f as i64)
    };
    v.as_i64().or_else(whole).map(Some).ok_or_else(|| {
        let what = if v.is_u64() {
            // An integer, just not one a seed can be.
            format!("an integer from {} to {}", i64::MIN, i64::MAX)
        } else {
            "an integer".to_string()
        };
        format!("must be {what}. Given: {}", shown(v))
    })
}

impl ReadOptions {
    /// The read keys of `obj` (`null` is "not given"; other keys are
    /// ignored).
    ///
    /// # Errors
    /// [`ServiceError::Field`] naming the key, what it must be and the value
    /// given, e.g. "`samples` must be a count from 1 to 32 or `auto`. Given:
    /// 0".
    pub fn from_object(obj: &Map<String, Value>) -> Result<Self, ServiceError> {
        static KEYS: OnceLock<Vec<String>> = OnceLock::new();
        crate::keys::from_keys(obj, KEYS.get_or_init(crate::keys::properties::<Self>))
    }

    /// The count `samples` asks for, when it is a count (a template may read
    /// it as its variable `samples`).
    pub fn count(&self) -> Option<u32> {
        match self.samples {
            Some(SamplePolicy::Fixed { n }) => Some(n),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<ReadOptions, ServiceError> {
        match v {
            Value::Object(m) => ReadOptions::from_object(&m),
            _ => Ok(ReadOptions::default()),
        }
    }

    #[test]
    fn samples_take_a_count_or_auto_and_layout_its_two_names() {
        let r = read(json!({"samples": 3, "layout": "schema_first", "other": 1})).expect("ok");
        assert_eq!(r.samples, Some(SamplePolicy::Fixed { n: 3 }));
        assert_eq!(r.count(), Some(3));
        assert_eq!(r.layout, Some(Layout::SchemaFirst));
        let r = read(json!({"samples": "AUTO", "layout": " Document_First ", "seed": null}))
            .expect("ok");
        assert_eq!(
            r.samples,
            Some(SamplePolicy::Auto {
                max: 4,
                threshold: 0.1
            })
        );
        assert_eq!(r.layout, Some(Layout::DocumentFirst));
        assert_eq!(r.count(), None);
        assert_eq!(r.seed, None);
        assert_eq!(read(json!({})).expect("ok"), ReadOptions::default());
    }

    #[test]
    fn isolate_takes_the_four_rules_and_refuses_others_naming_them() {
        let r = |v: Value| read(json!({ "isolate": v }));
        assert_eq!(r(json!("all")).expect("ok").isolate, Some(Isolate::All));
        assert_eq!(r(json!("none")).expect("ok").isolate, Some(Isolate::None));
        let e = r(json!(true)).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "`isolate` must be one of [auto, noul, none, all]. Given: true"
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_field_the_allowed_values_and_the_value() {
        for (bad, want) in [
            (
                json!(0),
                "`samples` must be a count from 1 to 32 or `auto`. Given: 0",
            ),
            (json!(33), "Given: 33"),
            (json!("often"), "Given: \"often\""),
            (json!(2.5), "Given: 2.5"),
        ] {
            let e = read(json!({ "samples": bad })).expect_err("refused");
            assert!(e.to_string().contains(want), "{e}");
        }
        match read(json!({"layout": "sideways"})) {
            Err(ServiceError::Field { field, message }) => {
                assert_eq!(field, "layout");
                assert_eq!(
                    message,
                    "`layout` must be one of [document_first, schema_first]. Given: \"sideways\""
                );
            }
            other => panic!("{other:?}"),
        }
        let e = read(json!({"seed": "x"})).expect_err("refused");
        assert_eq!(e.to_string(), "`seed` must be an integer. Given: \"x\"");
        // A whole float is the integer it names; a fraction is refused.
        assert_eq!(read(json!({"seed": 7.0})).expect("whole").seed, Some(7));
        let e = read(json!({"seed": 1.5})).expect_err("fraction");
        assert_eq!(e.to_string(), "`seed` must be an integer. Given: 1.5");
    }

    /// The request keys written back are the ones read: a count, `auto`,
    /// and the names.
    #[test]
    fn the_options_round_trip_through_their_json() {
        let r = read(
            json!({"seed": -3, "samples": "auto", "layout": "schema_first", "isolate": "noul"}),
        )
        .expect("ok");
        let back = serde_json::to_value(&r).expect("json");
        assert_eq!(
            back,
            json!({"seed": -3, "samples": "auto", "layout": "schema_first", "isolate": "noul"})
        );
        assert_eq!(read(back).expect("ok"), r);
    }
}
