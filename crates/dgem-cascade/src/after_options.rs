//! What a decision asks for after the read: post-hoc temperature, abstention,
//! the cascade to a Stage-2 model and taxonomy expansion.
//!
//! [`AfterOptions`] is declared once, and its derives give every surface its
//! view of the same keys:
//! - serde: the JSON keys of `/api/decide` and the MCP decision tools;
//! - schemars: the MCP tool input schema (plain: no nullable unions);
//! - utoipa: the OpenAPI schema of `/api/decide`;
//! - clap: the flags of `dgem decide` (`--cascade`, `--temperature`, …).
//!
//! The word-valued keys are their cascade types ([`CascadeSwitch`],
//! [`ThresholdMode`], [`PriorMode`]), read by each type's one parse
//! ([`dgem_core::words`]) whichever surface they come from. The others stay
//! JSON here: a temperature is a number or an object by question type, an
//! abstention floor a number or an object by question id, and their checks
//! need the policy; [`crate::AfterRequest::from_object`] reads and
//! checks them, with messages naming the key, the allowed values and the
//! value received.

use std::sync::OnceLock;

use crate::options::{CascadeSwitch, PriorMode, ThresholdMode};
use clap::Args;
use dgem_core::words;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use dgem_core::SchemaError;

/// `s` as JSON when it parses (a number, an object), else as a JSON string:
/// the value of a flag that takes a number or JSON (`--temperature 1.4`,
/// `--temperature '{"choice": 1.4}'`).
///
/// # Errors
/// Never; the `Result` is clap's value-parser shape.
pub fn json_or_string(s: &str) -> Result<Value, String> {
    // `null` would read as "not given" and drop the flag without a word: it
    // stays the word, for the option's check to refuse naming the flag.
    Ok(match serde_json::from_str(s) {
        Ok(Value::Null) | Err(_) => Value::String(s.to_string()),
        Ok(v) => v,
    })
}

/// A flag's value that is a name (`--cascade-model gpt-4.1`): always the
/// text given, never read as JSON, so a model named `1.5` or `null` stays
/// that name.
///
/// # Errors
/// Never; the `Result` is clap's value-parser shape.
pub fn word_flag(s: &str) -> Result<Value, String> {
    Ok(Value::String(s.to_string()))
}

/// A flag's value that must be a number: a finite number becomes a JSON
/// number; anything else (`inf`, `NaN`, `abc`) is kept as the text given, so
/// that the command refuses it naming the flag, with its own exit code, as
/// the request parser refuses a string there (JSON has no infinity or NaN:
/// serde would write `null`, read as "not set").
///
/// # Errors
/// Never; the `Result` is clap's value-parser shape.
pub fn number_flag(s: &str) -> Result<Value, String> {
    let number = s
        .trim()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64);
    Ok(number.map_or_else(|| Value::String(s.to_string()), Value::Number))
}

/// The post-read keys of one decision request (see the module docs). Every
/// field is optional; `None` leaves the policy's own setting (or none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema, Args)]
pub struct AfterOptions {
    /// Post-hoc temperature: a number for every question (T > 1 flattens an
    /// over-confident distribution, T < 1 sharpens, 0 = not set, range 0–20),
    /// or an object by question type, e.g. {"choice": 1.4}. Wins over the
    /// policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "T|JSON", value_parser = json_or_string)]
    pub temperature: Option<Value>,
    /// Abstain when an answer's confidence is below this (0–1), or an object
    /// by question id ("*" for the rest), e.g. {"team": 0.6, "*": 0.4}. An
    /// abstained answer keeps its probabilities and is marked `abstained`
    /// with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "P|JSON", value_parser = json_or_string)]
    pub abstain_below: Option<Value>,
    /// Abstain when an answer's hesitation (entropy / ln K, 0–1) is at or
    /// above this, or an object by question id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "H|JSON", value_parser = json_or_string)]
    pub abstain_above: Option<Value>,
    /// Escalate hesitant answers to a Stage-2 model: "off" (default),
    /// "entropy" (gate on entropy), or "on_miss" (answers differing from
    /// expected_answers, else the entropy gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long = "cascade", value_name = "MODE", value_parser = words::flag::<CascadeSwitch>())]
    pub cascade_mode: Option<CascadeSwitch>,
    /// Gate threshold: an entropy in nats (default 0.35) or, with
    /// cascade_threshold_mode "normalized", a hesitation in [0, 1] (default
    /// 0.16). Escalates at or above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<f64>")]
    #[schema(value_type = Option<f64>)]
    #[arg(long, value_name = "X", value_parser = number_flag)]
    pub cascade_threshold: Option<Value>,
    /// What cascade_threshold is compared with: "nats" (default) or
    /// "normalized" (entropy / ln K).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "MODE", value_parser = words::flag::<ThresholdMode>())]
    pub cascade_threshold_mode: Option<ThresholdMode>,
    /// Stage-2 model name (default: the provider's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    #[schema(value_type = Option<String>)]
    #[arg(long, value_name = "NAME", value_parser = word_flag)]
    pub cascade_model: Option<Value>,
    /// How much of Stage 1 the Stage-2 prompt shows: "soft" (default),
    /// "none", "full".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "MODE", value_parser = words::flag::<PriorMode>())]
    pub stage2_prior: Option<PriorMode>,
    /// Expected answers for cascade_mode "on_miss", by question id, e.g.
    /// {"urgent": "yes"}. (On the command line: `--expect QUESTION=VALUE`,
    /// repeatable.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(skip)]
    pub expected_answers: Option<Value>,
    /// Taxonomy expansion: add an "other_unclassified" option to choice
    /// questions without a catch-all and propose a new option where the
    /// answer is that catch-all or hesitant (reply key
    /// `suggested_expansions`; Stage 2 names it when a provider is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<bool>")]
    #[schema(value_type = Option<bool>)]
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL",
        value_parser = json_or_string
    )]
    pub suggest_expansions: Option<Value>,
    /// Entropy in nats at or above which a choice answer asks for a new
    /// option (default 0.35).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<f64>")]
    #[schema(value_type = Option<f64>)]
    #[arg(long, value_name = "NATS", value_parser = number_flag)]
    pub expansion_entropy: Option<Value>,
}

impl AfterOptions {
    /// The keys given, as the request object
    /// [`crate::AfterRequest::from_object`] and
    /// [`crate::inject_if_asked`] read.
    pub fn to_object(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        }
    }

    /// The options read from the post-read keys of `obj` (other keys are
    /// ignored; `null` is "not given"). The word-valued keys are checked
    /// here; the JSON-valued ones later, against the policy, by
    /// [`crate::AfterRequest::from_object`].
    ///
    /// # Errors
    /// [`SchemaError`] naming the key, its allowed values and the value
    /// given, e.g. "`stage2_prior` must be one of [soft, none, full].
    /// Given: \"strong\"".
    pub fn from_object(obj: &Map<String, Value>) -> Result<Self, SchemaError> {
        static KEYS: OnceLock<Vec<String>> = OnceLock::new();
        dgem_core::keys::from_keys(obj, KEYS.get_or_init(Self::keys))
    }

    /// The JSON keys of these options, as the derived schema names them.
    pub fn keys() -> Vec<String> {
        dgem_core::keys::properties::<Self>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        after: AfterOptions,
    }

    #[test]
    fn flags_become_the_same_json_keys_the_routes_take() {
        let cli = Cli::try_parse_from([
            "dgem",
            "--temperature",
            r#"{"choice": 1.4}"#,
            "--abstain-below",
            "0.4",
            "--cascade",
            "entropy",
            "--cascade-threshold",
            "0.2",
            "--stage2-prior",
            "none",
            "--suggest-expansions",
        ])
        .expect("parses");
        let obj = cli.after.to_object();
        assert_eq!(
            Value::Object(obj.clone()),
            serde_json::json!({
                "temperature": {"choice": 1.4},
                "abstain_below": 0.4,
                "cascade_mode": "entropy",
                "cascade_threshold": 0.2,
                "stage2_prior": "none",
                "suggest_expansions": true,
            })
        );
        assert_eq!(AfterOptions::from_object(&obj).expect("parses"), cli.after);
    }

    #[test]
    fn a_threshold_flag_that_is_not_a_finite_number_is_kept_as_text_for_the_command_to_refuse() {
        for bad in ["inf", "NaN", "abc"] {
            let cli = Cli::try_parse_from(["dgem", "--cascade-threshold", bad]).expect("parses");
            assert_eq!(cli.after.cascade_threshold, Some(Value::String(bad.into())));
        }
        let cli = Cli::try_parse_from(["dgem", "--expansion-entropy", "0.5"]).expect("parses");
        assert_eq!(cli.after.expansion_entropy, Some(serde_json::json!(0.5)));
    }

    /// Regression: the word flags went through the JSON reader, so a
    /// Stage-2 model named `1.5` became a number and was refused (the
    /// command line had always sent it as a name).
    #[test]
    fn a_model_name_that_reads_as_json_stays_a_name() {
        let cli = Cli::try_parse_from(["dgem", "--cascade-model", "1.5", "--cascade", "true"])
            .expect("parses");
        assert_eq!(cli.after.cascade_model, Some(Value::String("1.5".into())));
        assert_eq!(cli.after.cascade_mode, Some(CascadeSwitch::Entropy));
    }

    #[test]
    fn suggest_expansions_takes_an_explicit_value_only_after_an_equals_sign() {
        let off = Cli::try_parse_from(["dgem", "--suggest-expansions=false"]).expect("parses");
        assert_eq!(off.after.suggest_expansions, Some(Value::Bool(false)));
        let none = Cli::try_parse_from(["dgem"]).expect("parses");
        assert_eq!(none.after, AfterOptions::default());
    }

    #[test]
    fn the_keys_are_the_eleven_post_read_keys() {
        assert_eq!(
            AfterOptions::keys(),
            [
                "temperature",
                "abstain_below",
                "abstain_above",
                "cascade_mode",
                "cascade_threshold",
                "cascade_threshold_mode",
                "cascade_model",
                "stage2_prior",
                "expected_answers",
                "suggest_expansions",
                "expansion_entropy",
            ]
        );
    }
}
