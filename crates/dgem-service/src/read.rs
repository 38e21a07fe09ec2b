//! How a decision is read: the seed, the reads to average and the prompt
//! layout. Like [`crate::AfterOptions`], [`ReadOptions`] is declared once and
//! its derives give the JSON keys (serde), the MCP schema (schemars), the
//! OpenAPI schema (utoipa) and the `dgem decide` flags (clap: `--seed`,
//! `--samples`, `--layout`). Values are checked by [`ReadOptions::samples`]
//! and [`ReadOptions::layout`], whichever surface they came from.

use clap::Args;
use dgem_core::schema::{
    Isolate, Layout, SamplePolicy, DEFAULT_AUTO_MAX, DEFAULT_AUTO_THRESHOLD, MAX_SAMPLES,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::error::ServiceError;
use crate::options::{json_or_string, word_flag};
use crate::request::shown;

/// `layout` as advertised: `document_first` (the state, then the questions)
/// or `schema_first` (the questions first, so that one policy's prompt prefix
/// is shared across states). Variants carry no doc comments so that schemars
/// writes a plain string `enum`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum LayoutValue {
    DocumentFirst,
    SchemaFirst,
}

/// `isolate` as advertised: which questions are read alone, on their own
/// canvas (`auto`: the yes/no questions when there are 2 or 3 questions
/// (`ISOLATE_AUTO_MAX`) and at least two are yes/no; `noul`: every yes/no
/// question; `none`; `all`; `noul` and `all` only in policies of 2 to 8
/// questions, `ISOLATE_MAX_QUESTIONS`).
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum IsolateValue {
    Auto,
    Noul,
    None,
    All,
}

/// The read keys of one decision request (see the module docs). `None`
/// leaves the policy's own setting (the seed defaults to 42).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema, Args)]
pub struct ReadOptions {
    /// Base seed for the reads (default 42): the same request with the same
    /// seed gets the same probabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub seed: Option<i64>,
    /// Reads to average: a count from 1 to 32, or "auto" (one read, and up
    /// to 4 when an answer's entropy exceeds 0.1 nats). Wins over the
    /// policy's `samples`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "samples_schema")]
    #[schema(value_type = Option<Value>)]
    #[arg(long, value_name = "N|auto", value_parser = json_or_string)]
    pub samples: Option<Value>,
    /// Prompt layout: "document_first" (the state, then the questions) or
    /// "schema_first" (the questions first, so that one policy's prompt
    /// prefix is shared, and cached, across states). Wins over the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<LayoutValue>")]
    #[schema(value_type = Option<LayoutValue>)]
    #[arg(long, value_name = "LAYOUT", value_parser = word_flag)]
    pub layout: Option<Value>,
    /// Which questions are read alone, each on its own canvas: "auto"
    /// (default: the yes/no questions of a policy of 2 or 3 questions with
    /// at least two of them), "noul" (every yes/no question), "none" or
    /// "all"; "noul" and "all" apply to policies of 2 to 8 questions.
    /// Reading alone costs a read per question and keeps one answer from
    /// leaning on another. Wins over the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<IsolateValue>")]
    #[schema(value_type = Option<IsolateValue>)]
    #[arg(long, value_name = "RULE", value_parser = word_flag)]
    pub isolate: Option<Value>,
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

impl ReadOptions {
    /// The read keys of `obj` (`null` is "not given"). The seed's type is
    /// checked here; `samples` and `layout` when the request is prepared
    /// ([`ReadOptions::samples`], [`ReadOptions::layout`]), whichever surface
    /// built it.
    ///
    /// # Errors
    /// [`ServiceError::Field`] for a `seed` that is not an integer.
    pub fn from_object(obj: &Map<String, Value>) -> Result<Self, ServiceError> {
        let given = |k: &str| obj.get(k).filter(|v| !v.is_null());
        let seed = match given("seed") {
            None => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| {
                let what = if v.is_u64() {
                    // An integer, just not one a seed can be.
                    format!("an integer from {} to {}", i64::MIN, i64::MAX)
                } else {
                    "an integer".to_string()
                };
                ServiceError::field(
                    "seed",
                    format!("`seed` must be {what}. Given: {}", shown(v)),
                )
            })?),
        };
        Ok(Self {
            seed,
            samples: given("samples").cloned(),
            layout: given("layout").cloned(),
            isolate: given("isolate").cloned(),
        })
    }

    /// The sample policy `samples` asks for, `None` when not given.
    ///
    /// # Errors
    /// [`ServiceError::Field`] naming `samples`, what it must be and the
    /// value given.
    pub fn samples(&self) -> Result<Option<SamplePolicy>, ServiceError> {
        let Some(v) = self.samples.as_ref().filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        if v.as_str()
            .is_some_and(|s| s.trim().eq_ignore_ascii_case("auto"))
        {
            return Ok(Some(SamplePolicy::Auto {
                max: DEFAULT_AUTO_MAX,
                threshold: DEFAULT_AUTO_THRESHOLD,
            }));
        }
        // A count written `3.0` is the count 3 (some clients write every
        // number as a float); `2.5` is not a count.
        let whole = v
            .as_f64()
            .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x <= f64::from(u32::MAX))
            .map(|x| x as u64);
        match v.as_u64().or(whole).and_then(|n| u32::try_from(n).ok()) {
            Some(n) if (1..=MAX_SAMPLES).contains(&n) => Ok(Some(SamplePolicy::Fixed { n })),
            _ => Err(ServiceError::field(
                "samples",
                format!(
                    "`samples` must be a count from 1 to {MAX_SAMPLES} or `auto`. Given: {}",
                    shown(v)
                ),
            )),
        }
    }

    /// The count `samples` asks for, when it is a count (a template may read
    /// it as its variable `samples`).
    pub fn count(&self) -> Option<u32> {
        match self.samples() {
            Ok(Some(SamplePolicy::Fixed { n })) => Some(n),
            _ => None,
        }
    }

    /// The layout `layout` asks for, `None` when not given.
    ///
    /// # Errors
    /// [`ServiceError::Field`] naming `layout`, its allowed values and the
    /// value given.
    pub fn layout(&self) -> Result<Option<Layout>, ServiceError> {
        match self.layout.as_ref().filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => match v.as_str().map(|s| s.trim().to_ascii_lowercase()).as_deref() {
                Some("document_first") => Ok(Some(Layout::DocumentFirst)),
                Some("schema_first") => Ok(Some(Layout::SchemaFirst)),
                _ => Err(ServiceError::field(
                    "layout",
                    format!(
                        "`layout` must be one of [document_first, schema_first]. Given: {}",
                        shown(v)
                    ),
                )),
            },
        }
    }
}

impl ReadOptions {
    /// The isolation rule `isolate` asks for, `None` when not given.
    ///
    /// # Errors
    /// [`ServiceError::Field`] naming `isolate`, its allowed values and the
    /// value given.
    pub fn isolate(&self) -> Result<Option<Isolate>, ServiceError> {
        let Some(v) = self.isolate.as_ref().filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        match v
            .as_str()
            .map(|s| s.trim().to_ascii_lowercase())
            .and_then(|s| Isolate::parse(&s))
        {
            Some(rule) => Ok(Some(rule)),
            None => Err(ServiceError::field(
                "isolate",
                format!(
                    "`isolate` must be one of [auto, noul, none, all]. Given: {}",
                    shown(v)
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(samples: Value, layout: Value) -> ReadOptions {
        ReadOptions {
            samples: Some(samples),
            layout: Some(layout),
            ..ReadOptions::default()
        }
    }

    #[test]
    fn samples_take_a_count_or_auto_and_layout_its_two_names() {
        let r = read(json!(3), json!("schema_first"));
        assert_eq!(r.samples().expect("ok"), Some(SamplePolicy::Fixed { n: 3 }));
        assert_eq!(r.count(), Some(3));
        assert_eq!(r.layout().expect("ok"), Some(Layout::SchemaFirst));
        let r = read(json!("AUTO"), json!("document_first"));
        assert_eq!(
            r.samples().expect("ok"),
            Some(SamplePolicy::Auto {
                max: 4,
                threshold: 0.1
            })
        );
        assert_eq!(r.count(), None);
        assert_eq!(ReadOptions::default().samples().expect("ok"), None);
    }

    #[test]
    fn isolate_takes_the_four_rules_and_refuses_others_naming_them() {
        let r = |v: Value| ReadOptions {
            isolate: Some(v),
            ..ReadOptions::default()
        };
        assert_eq!(r(json!("all")).isolate().expect("ok"), Some(Isolate::All));
        assert_eq!(r(json!("none")).isolate().expect("ok"), Some(Isolate::None));
        let e = r(json!(true)).isolate().expect_err("refused");
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
            let e = read(bad, json!(null)).samples().expect_err("refused");
            assert!(e.to_string().contains(want), "{e}");
        }
        let e = read(json!(1), json!("sideways"))
            .layout()
            .expect_err("refused");
        assert_eq!(
            e.to_string(),
            "`layout` must be one of [document_first, schema_first]. Given: \"sideways\""
        );
    }
}
