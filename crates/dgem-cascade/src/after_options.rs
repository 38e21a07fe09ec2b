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
//! Every value is its core type, and its one parse is that type's serde
//! implementation: the words are [`CascadeSwitch`], [`ThresholdMode`] and
//! [`PriorMode`] ([`dgem_core::words`]); `temperature` is a
//! [`TemperatureValue`] (a number, or an object by question type);
//! `abstain_below` / `abstain_above` are [`AbstainBelow`] / [`AbstainAbove`]
//! (a number, or an object by question id, the ids checked against the
//! policy later); `expected_answers` is [`ExpectedAnswers`]; the numbers,
//! the model name and the expansion switch are read by small serde
//! functions with the same messages. Every refusal names the key, the
//! allowed values and the value received ("`cascade_threshold` must be a
//! number (≤ 0 or absent uses the mode default). Given: \"abc\""), and a
//! flag's value parser is the same parse, so `--temperature 50` is refused
//! with the words the request key gets.
//!
//! The JSON Schema and OpenAPI schema of the values that are numbers or
//! objects are given by `with`/`value_type` (as before: the key's prose
//! says what it takes), so the advertised documents did not change when the
//! values became typed.

use std::sync::OnceLock;

use crate::expand::{
    entropy_allowed, entropy_value, switch_value, switch_word, ExpansionOptions,
    DEFAULT_EXPANSION_ENTROPY, ENTROPY_VALUES,
};
use crate::options::{
    model_name, threshold_value, CascadeOptions, CascadeSwitch, ExpectedAnswers, PriorMode,
    ThresholdMode,
};
use clap::Args;
use dgem_core::after::{AbstainAbove, AbstainBelow, TemperatureValue};
use dgem_core::words;
use dgem_core::SchemaError;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `s` as JSON when it parses (a number, an object), else as a JSON string:
/// the text of a flag that takes a number or JSON (`--temperature 1.4`,
/// `--temperature '{"choice": 1.4}'`). `null` stays the word, for the
/// value's parse to refuse naming the flag (it would read as "not given").
fn json_or_string(s: &str) -> Value {
    match serde_json::from_str(s) {
        Ok(Value::Null) | Err(_) => Value::String(s.to_string()),
        Ok(v) => v,
    }
}

/// A flag's value read by `T`'s serde parse, refused with that parse's
/// "must be …. Given: …" (which the command line prints after the flag's
/// name).
fn flag_value<T: DeserializeOwned>(s: &str) -> Result<T, String> {
    let v = json_or_string(s);
    // A bad value inside an object is named by its key: "key `team` must be
    // …", as the request path names `abstain_above.team`.
    serde_path_to_error::deserialize(&v).map_err(|e| {
        if e.path().iter().next().is_none() {
            e.inner().to_string()
        } else {
            format!("key `{}` {}", e.path(), e.inner())
        }
    })
}

/// `--temperature`: a number, or JSON by question type.
///
/// # Errors
/// The key's message, e.g. "must be a number from 0 to 20 (…). Given: 50".
pub fn temperature_flag(s: &str) -> Result<TemperatureValue, String> {
    flag_value(s)
}

/// `--abstain-below`: a number, or JSON by question id.
///
/// # Errors
/// The key's message.
pub fn abstain_below_flag(s: &str) -> Result<AbstainBelow, String> {
    flag_value(s)
}

/// `--abstain-above`: a number, or JSON by question id.
///
/// # Errors
/// The key's message.
pub fn abstain_above_flag(s: &str) -> Result<AbstainAbove, String> {
    flag_value(s)
}

/// A number flag: a finite number (JSON has no infinity or NaN, so a
/// request can never send one).
///
/// # Errors
/// "must be a finite number. Given: `inf`".
pub fn finite_flag(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("must be a finite number. Given: `{s}`"))
}

/// `--expansion-entropy`: a finite number of nats above 0.
///
/// # Errors
/// "must be a finite number" or the key's "must be a number of nats above
/// 0 (…)".
pub fn expansion_entropy_flag(s: &str) -> Result<f64, String> {
    let x = finite_flag(s)?;
    if entropy_allowed(x) {
        Ok(x)
    } else {
        Err(format!(
            "must be {ENTROPY_VALUES}. Given: {}",
            Value::from(x)
        ))
    }
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
    #[schemars(with = "Option<Value>")]
    #[schema(value_type = Option<Value>)]
    #[arg(long, value_name = "T|JSON", value_parser = temperature_flag, allow_negative_numbers = true)]
    pub temperature: Option<TemperatureValue>,
    /// Abstain when an answer's confidence is below this (0–1), or an object
    /// by question id ("*" for the rest), e.g. {"team": 0.6, "*": 0.4}. An
    /// abstained answer keeps its probabilities and is marked `abstained`
    /// with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    #[schema(value_type = Option<Value>)]
    #[arg(long, value_name = "P|JSON", value_parser = abstain_below_flag, allow_negative_numbers = true)]
    pub abstain_below: Option<AbstainBelow>,
    /// Abstain when an answer's hesitation (entropy / ln K, 0–1) is at or
    /// above this, or an object by question id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    #[schema(value_type = Option<Value>)]
    #[arg(long, value_name = "H|JSON", value_parser = abstain_above_flag, allow_negative_numbers = true)]
    pub abstain_above: Option<AbstainAbove>,
    /// Escalate hesitant answers to a Stage-2 model: "off" (default),
    /// "entropy" (gate on entropy), or "on_miss" (answers differing from
    /// expected_answers, else the entropy gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long = "cascade", value_name = "MODE", value_parser = words::flag::<CascadeSwitch>())]
    pub cascade_mode: Option<CascadeSwitch>,
    /// Gate threshold: an entropy in nats (default 0.35) or, with
    /// cascade_threshold_mode "normalized", a hesitation in [0, 1] (default
    /// 0.16). Escalates at or above it.
    #[serde(
        default,
        deserialize_with = "threshold_value",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<f64>")]
    #[schema(value_type = Option<f64>)]
    #[arg(long, value_name = "X", value_parser = finite_flag, allow_negative_numbers = true)]
    pub cascade_threshold: Option<f64>,
    /// What cascade_threshold is compared with: "nats" (default) or
    /// "normalized" (entropy / ln K).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "MODE", value_parser = words::flag::<ThresholdMode>())]
    pub cascade_threshold_mode: Option<ThresholdMode>,
    /// Stage-2 model name (default: the provider's).
    #[serde(
        default,
        deserialize_with = "model_name",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    #[schema(value_type = Option<String>)]
    #[arg(long, value_name = "NAME")]
    pub cascade_model: Option<String>,
    /// How much of Stage 1 the Stage-2 prompt shows: "soft" (default),
    /// "none", "full".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "MODE", value_parser = words::flag::<PriorMode>())]
    pub stage2_prior: Option<PriorMode>,
    /// Expected answers for cascade_mode "on_miss", by question id, e.g.
    /// {"urgent": "yes"}. (On the command line: `--expect QUESTION=VALUE`,
    /// repeatable.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    #[schema(value_type = Option<Value>)]
    #[arg(skip)]
    pub expected_answers: Option<ExpectedAnswers>,
    /// Taxonomy expansion: add an "other_unclassified" option to choice
    /// questions without a catch-all and propose a new option where the
    /// answer is that catch-all or hesitant (reply key
    /// `suggested_expansions`; Stage 2 names it when a provider is set).
    #[serde(
        default,
        deserialize_with = "switch_value",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<bool>")]
    #[schema(value_type = Option<bool>)]
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL",
        value_parser = switch_word
    )]
    pub suggest_expansions: Option<bool>,
    /// Entropy in nats at or above which a choice answer asks for a new
    /// option (default 0.35).
    #[serde(
        default,
        deserialize_with = "entropy_value",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<f64>")]
    #[schema(value_type = Option<f64>)]
    #[arg(long, value_name = "NATS", value_parser = expansion_entropy_flag)]
    pub expansion_entropy: Option<f64>,
}

impl AfterOptions {
    /// The options read from the post-read keys of `obj` (other keys are
    /// ignored; `null` is "not given"), each value by its type's parse, in
    /// the order the keys are declared. What needs the policy (question ids
    /// in `expected_answers`, `abstain_below`, `abstain_above`) is checked
    /// by [`crate::AfterRequest::from_options`].
    ///
    /// # Errors
    /// [`SchemaError`] naming the key, its allowed values and the value
    /// given, e.g. "`stage2_prior` must be one of [soft, none, full].
    /// Given: \"strong\"".
    pub fn from_object(obj: &Map<String, Value>) -> Result<Self, SchemaError> {
        static KEYS: OnceLock<Vec<String>> = OnceLock::new();
        dgem_core::keys::from_keys(obj, KEYS.get_or_init(Self::keys))
    }

    /// The cascade these keys ask for, `None` when `cascade_mode` is absent
    /// or off. Every value was checked when it was read: a threshold ≤ 0
    /// uses the mode's default, and the model name is trimmed.
    pub fn cascade(&self) -> Option<CascadeOptions> {
        let mode = self.cascade_mode.and_then(CascadeSwitch::mode)?;
        let threshold_mode = self.cascade_threshold_mode.unwrap_or_default();
        let threshold = self
            .cascade_threshold
            .filter(|t| *t > 0.0 && t.is_finite())
            .unwrap_or_else(|| threshold_mode.default_threshold());
        Some(CascadeOptions {
            mode,
            threshold,
            threshold_mode,
            model: self.stage2_model(),
            prior: self.stage2_prior.unwrap_or_default(),
            expected: self
                .expected_answers
                .as_ref()
                .map(|e| e.0.clone())
                .unwrap_or_default(),
            deadline: None,
        })
    }

    /// The taxonomy expansion these keys ask for: `None` unless
    /// `suggest_expansions` is true; `expansion_entropy` absent is
    /// [`DEFAULT_EXPANSION_ENTROPY`], and `cascade_model` names the Stage-2
    /// model of the expansion call too, with or without a cascade.
    pub fn expansion(&self) -> Option<ExpansionOptions> {
        if self.suggest_expansions != Some(true) {
            return None;
        }
        Some(ExpansionOptions {
            entropy: self.expansion_entropy.unwrap_or(DEFAULT_EXPANSION_ENTROPY),
            model: self.stage2_model(),
        })
    }

    /// The Stage-2 model `cascade_model` names, trimmed; empty lets the
    /// provider choose. It names the model of the cascade and of the
    /// expansion call alike.
    pub fn stage2_model(&self) -> String {
        self.cascade_model
            .as_deref()
            .unwrap_or("")
            .trim()
            .to_string()
    }

    /// Whether no post-read key is given.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
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
    use dgem_core::after::{AbstainLimit, Temperature};
    use dgem_core::schema::QuestionKind;
    use serde_json::json;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        after: AfterOptions,
    }

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn flags_read_as_the_same_typed_values_as_the_request_keys() {
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
        let keys = AfterOptions::from_object(&object(json!({
            "temperature": {"choice": 1.4},
            "abstain_below": 0.4,
            "cascade_mode": "entropy",
            "cascade_threshold": 0.2,
            "stage2_prior": "none",
            "suggest_expansions": true,
        })))
        .expect("parses");
        assert_eq!(keys, cli.after);
        assert_eq!(
            keys.temperature.map(|t| t.0),
            Some(Temperature::default().with(QuestionKind::Choice, Some(1.4)))
        );
        assert_eq!(
            keys.abstain_below.map(|b| b.0),
            Some(AbstainLimit::All(0.4))
        );
        assert_eq!(keys.cascade_threshold, Some(0.2));
        assert_eq!(keys.suggest_expansions, Some(true));
    }

    #[test]
    fn a_number_flag_that_is_not_a_finite_number_is_refused_with_the_keys_words() {
        for bad in ["inf", "NaN", "abc"] {
            let e = Cli::try_parse_from(["dgem", "--cascade-threshold", bad]).expect_err("refused");
            let why = std::error::Error::source(&e).map(ToString::to_string);
            assert_eq!(
                why,
                Some(format!("must be a finite number. Given: `{bad}`"))
            );
        }
        let cli = Cli::try_parse_from(["dgem", "--expansion-entropy", "0.5"]).expect("parses");
        assert_eq!(cli.after.expansion_entropy, Some(0.5));
        let e = Cli::try_parse_from(["dgem", "--expansion-entropy=-1"]).expect_err("refused");
        assert_eq!(
            std::error::Error::source(&e).map(ToString::to_string),
            Some("must be a number of nats above 0 (absent uses 0.35). Given: -1.0".into())
        );
    }

    /// Regression: the word flags went through the JSON reader, so a
    /// Stage-2 model named `1.5` became a number and was refused (the
    /// command line had always sent it as a name).
    #[test]
    fn a_model_name_that_reads_as_json_stays_a_name() {
        let cli = Cli::try_parse_from(["dgem", "--cascade-model", "1.5", "--cascade", "true"])
            .expect("parses");
        assert_eq!(cli.after.cascade_model.as_deref(), Some("1.5"));
        assert_eq!(cli.after.cascade_mode, Some(CascadeSwitch::Entropy));
    }

    #[test]
    fn suggest_expansions_takes_an_explicit_value_only_after_an_equals_sign() {
        let off = Cli::try_parse_from(["dgem", "--suggest-expansions=false"]).expect("parses");
        assert_eq!(off.after.suggest_expansions, Some(false));
        let none = Cli::try_parse_from(["dgem"]).expect("parses");
        assert_eq!(none.after, AfterOptions::default());
        assert!(none.after.is_empty());
    }

    #[test]
    fn each_bad_value_is_refused_naming_its_key_the_allowed_values_and_the_value() {
        for (v, message) in [
            (
                json!({"cascade_threshold": "abc"}),
                "`cascade_threshold` must be a number (≤ 0 or absent uses the mode default). Given: \"abc\"",
            ),
            (
                json!({"cascade_model": 5}),
                "`cascade_model` must be a model name string. Given: 5",
            ),
            (
                json!({"suggest_expansions": "yes"}),
                "`suggest_expansions` must be true or false (or one of \"true\", \"1\", \"false\", \"0\"). Given: \"yes\"",
            ),
            (
                json!({"expansion_entropy": 0}),
                "`expansion_entropy` must be a number of nats above 0 (absent uses 0.35). Given: 0",
            ),
            (
                json!({"temperature": {"choice": 50}}),
                "`temperature.choice` must be a number from 0 to 20 (0 = not set, 1 = no change). Given: 50",
            ),
            (
                json!({"abstain_above": {"team": 2}}),
                "`abstain_above.team` must be a number from 0 to 1 (abstain when the answer's hesitation, H / ln K, is at or above it). Given: 2",
            ),
            (
                json!({"expected_answers": {"urgent": 3}}),
                "`expected_answers.urgent` must be an answer name string, true/false, or \"\"/\"—\"/\"-\" for none. Given: 3",
            ),
            (
                json!({"expected_answers": ["yes"]}),
                "`expected_answers` must be an object of question id → expected answer. Given: [\"yes\"]",
            ),
        ] {
            let e = AfterOptions::from_object(&object(v.clone())).expect_err("refused");
            assert_eq!(e.message, message, "{v}");
        }
    }

    /// What a warm host receives and a batch run's fingerprint records: the
    /// typed values written back as JSON read back as the same values.
    #[test]
    fn typed_values_written_as_json_read_back_the_same() {
        for v in [
            json!({"temperature": 1.4, "abstain_below": 0.3}),
            json!({
                "temperature": {"choice": 1.4, "YesNo": 2},
                "abstain_above": {"team": 0.5, "*": 0.7},
                "cascade_mode": "on_miss",
                "cascade_threshold": -1,
                "cascade_model": " m ",
                "expected_answers": {"urgent": true, "team": " billing ", "x": "-"},
                "suggest_expansions": "1",
                "expansion_entropy": 0.5,
            }),
        ] {
            let keys = AfterOptions::from_object(&object(v.clone())).expect("parses");
            let written = serde_json::to_value(&keys).expect("writes");
            let back = AfterOptions::from_object(&object(written.clone())).expect("reads back");
            assert_eq!(back, keys, "{v} -> {written}");
        }
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
