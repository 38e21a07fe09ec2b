//! The cascade's request keys and what they make.
//!
//! The keys are `cascade_mode`, `cascade_threshold`,
//! `cascade_threshold_mode`, `cascade_model`, `stage2_prior` and
//! `expected_answers`, with the spellings the original dgem cascade
//! accepted (word values compare case-insensitively). Their types and
//! serde parses are here; they are read as fields of
//! [`crate::AfterOptions`], and [`crate::AfterOptions::cascade`] makes the
//! cascade they ask for.

use std::time::Duration;

use dgem_core::after::by_key::{self, Checks, OneOrByKey};
use dgem_core::schema::ValidSchema;
use dgem_core::words::{self, Word};
use indexmap::IndexMap;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::CascadeError;

/// Default threshold in nats for [`ThresholdMode::Nats`] (the original cascade's default).
pub const DEFAULT_THRESHOLD_NATS: f64 = 0.35;
/// Default threshold on H/ln K for [`ThresholdMode::Normalized`]: the "clear"
/// hesitation bound of serving.md §6.5 (EXP-05b).
pub const DEFAULT_THRESHOLD_NORMALIZED: f64 = 0.16;
/// Stage-2 deadline for a text-only call, whole call included (25 s).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(25);
/// Stage-2 deadline when images are sent (90 s): image calls are slower.
pub const DEFAULT_IMAGE_DEADLINE: Duration = Duration::from_secs(90);

/// Values of `expected_answers` that state no expectation.
const NO_EXPECTATION: [&str; 3] = ["", "—", "-"];

/// `cascade_mode` as a request writes it: whether and when Stage-1 answers
/// are escalated. Besides the names, the original cascade's spellings are
/// accepted (`none`, `false` and `""` for off; `auto`, `true` and
/// `prior_guided` for entropy; `miss` for on_miss) and JSON `true`/`false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CascadeSwitch {
    /// No cascade (default).
    #[default]
    Off,
    /// [`CascadeMode::Entropy`].
    Entropy,
    /// [`CascadeMode::OnMiss`].
    OnMiss,
}

impl Word for CascadeSwitch {
    const ALL: &'static [Self] = &[Self::Off, Self::Entropy, Self::OnMiss];

    fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Entropy => "entropy",
            Self::OnMiss => "on_miss",
        }
    }

    fn aliases(self) -> &'static [&'static str] {
        match self {
            Self::Off => &["none", "false", ""],
            Self::Entropy => &["auto", "true", "prior_guided"],
            Self::OnMiss => &["miss"],
        }
    }

    fn from_bool(b: bool) -> Option<Self> {
        Some(if b { Self::Entropy } else { Self::Off })
    }

    fn expected() -> String {
        format!(
            "one of [{}] (or true/false)",
            words::names::<Self>().join(", ")
        )
    }
}

dgem_core::word_serde!(
    CascadeSwitch,
    "CascadeModeValue",
    "When Stage-1 answers are escalated to a Stage-2 model: `off`, `entropy` (when an answer's entropy reaches the threshold) or `on_miss` (when it differs from `expected_answers`; the entropy gate elsewhere). `true`/`false` are taken too."
);

impl CascadeSwitch {
    /// The gate this asks for, `None` when off.
    pub fn mode(self) -> Option<CascadeMode> {
        match self {
            Self::Off => None,
            Self::Entropy => Some(CascadeMode::Entropy),
            Self::OnMiss => Some(CascadeMode::OnMiss),
        }
    }
}

/// When a Stage-1 answer is escalated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CascadeMode {
    /// When the answer's entropy reaches the threshold.
    Entropy,
    /// When the answer differs from `expected_answers` (evaluation runs); slots
    /// without an expectation use the entropy gate.
    OnMiss,
}

impl CascadeMode {
    /// The wire name (`entropy`, `on_miss`).
    pub fn as_str(self) -> &'static str {
        let switch = match self {
            Self::Entropy => CascadeSwitch::Entropy,
            Self::OnMiss => CascadeSwitch::OnMiss,
        };
        switch.name()
    }
}

/// What the threshold is compared with (`cascade_threshold_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThresholdMode {
    /// The answer entropy H, in nats (default; alias `raw`).
    #[default]
    Nats,
    /// Hesitation H / ln K, in [0, 1] (aliases `normalised`, `hesitation`).
    Normalized,
}

impl ThresholdMode {
    /// The wire name (`nats`, `normalized`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Nats => "nats",
            Self::Normalized => "normalized",
        }
    }

    /// The threshold used when none (or one ≤ 0) is given.
    pub fn default_threshold(self) -> f64 {
        match self {
            Self::Nats => DEFAULT_THRESHOLD_NATS,
            Self::Normalized => DEFAULT_THRESHOLD_NORMALIZED,
        }
    }
}

/// How much of the Stage-1 reading the Stage-2 prompt shows
/// (`stage2_prior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PriorMode {
    /// The Stage-1 lean, as a hint to weigh, not follow (default).
    #[default]
    Soft,
    /// Nothing from Stage 1: the question alone.
    None,
    /// Candidate, confidence, entropy, escalation reason and the whole distribution.
    Full,
}

impl PriorMode {
    /// The wire name (`soft`, `none`, `full`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Soft => "soft",
            Self::None => "none",
            Self::Full => "full",
        }
    }
}

impl Word for PriorMode {
    const ALL: &'static [Self] = &[Self::Soft, Self::None, Self::Full];

    fn name(self) -> &'static str {
        self.as_str()
    }

    fn aliases(self) -> &'static [&'static str] {
        match self {
            Self::Soft => &[""],
            _ => &[],
        }
    }
}

dgem_core::word_serde!(
    PriorMode,
    "Stage2PriorValue",
    "How much of Stage 1 the Stage-2 prompt shows: `soft` (the answer and its confidence, as a hint), `none`, or `full` (the whole distribution)."
);

impl Word for ThresholdMode {
    const ALL: &'static [Self] = &[Self::Nats, Self::Normalized];

    fn name(self) -> &'static str {
        self.as_str()
    }

    fn aliases(self) -> &'static [&'static str] {
        match self {
            Self::Nats => &["raw", ""],
            Self::Normalized => &["normalised", "hesitation"],
        }
    }
}

dgem_core::word_serde!(
    ThresholdMode,
    "ThresholdModeValue",
    "What the cascade threshold is compared with: `nats` (the entropy) or `normalized` (entropy / ln K, in [0, 1])."
);

/// Cascade settings of one decision request.
#[derive(Debug, Clone, PartialEq)]
pub struct CascadeOptions {
    /// The gate.
    pub mode: CascadeMode,
    /// Escalate at or above this: nats, or H/ln K in [0, 1] (see `threshold_mode`).
    pub threshold: f64,
    /// What `threshold` is compared with.
    pub threshold_mode: ThresholdMode,
    /// Stage-2 model asked for; empty lets the provider choose.
    pub model: String,
    /// How much of Stage 1 the prompt shows.
    pub prior: PriorMode,
    /// Slot id → expected answer name (`true`/`false` already read as `yes`/`no`).
    pub expected: IndexMap<String, String>,
    /// Whole-call deadline; `None` uses [`DEFAULT_DEADLINE`] or, with images,
    /// [`DEFAULT_IMAGE_DEADLINE`]. Not a request key: set by the deployment.
    pub deadline: Option<Duration>,
}

impl CascadeOptions {
    /// Entropy-gated options with every default (0.35 nats, soft prior).
    pub fn entropy() -> Self {
        Self {
            mode: CascadeMode::Entropy,
            threshold: DEFAULT_THRESHOLD_NATS,
            threshold_mode: ThresholdMode::Nats,
            model: String::new(),
            prior: PriorMode::Soft,
            expected: IndexMap::new(),
            deadline: None,
        }
    }

    /// Check the settings against the policy: every `expected_answers` key
    /// must be a question id.
    ///
    /// # Errors
    /// [`CascadeError::Invalid`] on field `expected_answers`, listing the
    /// question ids and the unknown keys.
    pub fn check(&self, schema: &ValidSchema) -> Result<(), CascadeError> {
        check_expected(&self.expected, schema)
    }

    /// The whole-call deadline for a call sending `image_count` images.
    pub fn deadline_for(&self, image_count: usize) -> Duration {
        self.deadline.unwrap_or(if image_count > 0 {
            DEFAULT_IMAGE_DEADLINE
        } else {
            DEFAULT_DEADLINE
        })
    }
}

/// Check `expected_answers` against the policy: every key must be a
/// question id and every answer one of its question's answers, whether or
/// not a cascade is asked for (an expectation naming no question is a typo
/// the caller should hear about).
///
/// # Errors
/// [`CascadeError::Invalid`] on `expected_answers`, listing the question
/// ids and the unknown keys, or on `expected_answers.ID`, listing the
/// allowed answers.
pub fn check_expected(
    expected: &IndexMap<String, String>,
    schema: &ValidSchema,
) -> Result<(), CascadeError> {
    let unknown: Vec<&str> = expected
        .keys()
        .filter(|k| schema.question(k).is_none())
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        let ids: Vec<&str> = schema.questions.iter().map(|q| q.id.as_str()).collect();
        return Err(CascadeError::invalid(
            "expected_answers",
            format!("keyed by question ids [{}]", ids.join(", ")),
            format!("unknown ids [{}]", unknown.join(", ")),
        ));
    }
    // An expectation no answer can meet would escalate that question on
    // every call: refuse it, naming the allowed answers.
    for (slot, want) in expected {
        let Some(q) = schema.question(slot) else {
            continue;
        };
        if !q
            .alternatives
            .iter()
            .any(|a| a.name.eq_ignore_ascii_case(want))
        {
            let names: Vec<&str> = q.alternatives.iter().map(|a| a.name.as_str()).collect();
            return Err(CascadeError::invalid(
                format!("expected_answers.{slot}"),
                format!("one of [{}]", names.join(", ")),
                format!("`{want}`"),
            ));
        }
    }
    Ok(())
}

/// `expected_answers` as written: an object of question id → expected
/// answer name (trimmed; `true`/`false` read as `yes`/`no`; `null`, `""`,
/// `"—"` and `"-"` state no expectation and are dropped), in the order given.
/// The ids and names are checked against the policy by [`check_expected`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ExpectedAnswers(pub IndexMap<String, String>);

impl<'de> Deserialize<'de> for ExpectedAnswers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let not_an_object = |v: &Value| -> Result<Option<String>, String> {
            Err(format!(
                "must be an object of question id → expected answer. Given: {v}"
            ))
        };
        let answer = |v: &Value| {
            match v {
            Value::Null => Ok(None),
            Value::Bool(true) => Ok(Some("yes".to_string())),
            Value::Bool(false) => Ok(Some("no".to_string())),
            Value::String(s) => Ok(Some(s.trim().to_string())),
            other => Err(format!(
                "must be an answer name string, true/false, or \"\"/\"—\"/\"-\" for none. Given: {other}"
            )),
        }
        };
        let read = by_key::read(
            d,
            &Checks {
                one: &not_an_object,
                key: &|_| Ok(()),
                each: &answer,
            },
        )?;
        let mut out = IndexMap::new();
        if let OneOrByKey::ByKey(list) = read {
            for (slot, want) in list {
                match want {
                    Some(w) if !NO_EXPECTATION.contains(&w.as_str()) => {
                        out.insert(slot, w);
                    }
                    _ => {}
                }
            }
        }
        Ok(Self(out))
    }
}

/// `cascade_threshold` as written: a number (≤ 0 uses the mode's default).
///
/// # Errors
/// The "must be a number …" message for any other value.
pub fn threshold_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number_or(
        d,
        "a number (≤ 0 or absent uses the mode default)",
        |_| true,
    )
}

/// A number key's value (`null` is "not given"), refused with "must be
/// {allowed}. Given: {value}" unless it is a number `ok` accepts.
pub fn number_or<'de, D: Deserializer<'de>>(
    d: D,
    allowed: &str,
    ok: impl Fn(f64) -> bool,
) -> Result<Option<f64>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => match v.as_f64() {
            Some(x) if v.is_number() && ok(x) => Ok(Some(x)),
            _ => Err(de::Error::custom(format!("must be {allowed}. Given: {v}"))),
        },
    }
}

/// `cascade_model` as written: a model name (a string).
///
/// # Errors
/// "must be a model name string" for any other value.
pub fn model_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        v => Err(de::Error::custom(format!(
            "must be a model name string. Given: {v}"
        ))),
    }
}

#[cfg(test)]
mod tests;
