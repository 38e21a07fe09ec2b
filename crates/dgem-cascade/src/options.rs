//! The cascade's request keys.
//!
//! Read from the decision request object, with the spellings the original
//! dgem cascade accepted: `cascade_mode`, `cascade_threshold`,
//! `cascade_threshold_mode`, `cascade_model`, `stage2_prior` and
//! `expected_answers`. String values compare case-insensitively.

use std::time::Duration;

use dgem_core::json::shown;
use dgem_core::schema::ValidSchema;
use dgem_core::words::{self, Word};
use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Map, Value};

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

    /// Read the cascade keys of a request object. `Ok(None)` when
    /// `cascade_mode` is absent, `null` or one of `off`, `none`, `false`, `""`
    /// (JSON `false` too); the other keys are then not read.
    ///
    /// # Errors
    /// [`CascadeError::Invalid`] naming the key, its allowed values and the
    /// value received.
    pub fn from_object(obj: &Map<String, Value>) -> Result<Option<Self>, CascadeError> {
        // Every key is checked, cascade on or off: a wrong type is refused
        // even where it would not be used (`cascade_threshold: "abc"` without
        // `cascade_mode` was accepted; issue 38).
        let mode = word::<CascadeSwitch>("cascade_mode", obj.get("cascade_mode"))?
            .and_then(CascadeSwitch::mode);
        let threshold_mode =
            word::<ThresholdMode>("cascade_threshold_mode", obj.get("cascade_threshold_mode"))?
                .unwrap_or_default();
        let threshold = match obj.get("cascade_threshold") {
            None | Some(Value::Null) => threshold_mode.default_threshold(),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(t) if t > 0.0 && t.is_finite() => t,
                _ => threshold_mode.default_threshold(),
            },
            Some(other) => {
                return Err(CascadeError::invalid(
                    "cascade_threshold",
                    "a number (≤ 0 or absent uses the mode default)",
                    other.to_string(),
                ))
            }
        };
        let model = match obj.get("cascade_model") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.trim().to_string(),
            Some(other) => {
                return Err(CascadeError::invalid(
                    "cascade_model",
                    "a model name string",
                    other.to_string(),
                ))
            }
        };
        let prior = word::<PriorMode>("stage2_prior", obj.get("stage2_prior"))?.unwrap_or_default();
        let expected = parse_expected(obj.get("expected_answers"))?;
        Ok(mode.map(|mode| Self {
            mode,
            threshold,
            threshold_mode,
            model,
            prior,
            expected,
            deadline: None,
        }))
    }

    /// Check the settings against the policy: every `expected_answers` key
    /// must be a question id.
    ///
    /// # Errors
    /// [`CascadeError::Invalid`] on field `expected_answers`, listing the
    /// question ids and the unknown keys.
    pub fn check(&self, schema: &ValidSchema) -> Result<(), CascadeError> {
        let unknown: Vec<&str> = self
            .expected
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
        for (slot, want) in &self.expected {
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

    /// The whole-call deadline for a call sending `image_count` images.
    pub fn deadline_for(&self, image_count: usize) -> Duration {
        self.deadline.unwrap_or(if image_count > 0 {
            DEFAULT_IMAGE_DEADLINE
        } else {
            DEFAULT_DEADLINE
        })
    }
}

/// The value of word-valued key `field` (`None` when absent or `null`),
/// through the type's one parse ([`words::from_value`], which its serde
/// implementation calls too).
fn word<T: Word>(field: &str, v: Option<&Value>) -> Result<Option<T>, CascadeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => words::from_value::<T>(v)
            .map(Some)
            .map_err(|_| CascadeError::invalid(field, T::expected(), shown(v))),
    }
}

fn parse_expected(v: Option<&Value>) -> Result<IndexMap<String, String>, CascadeError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(IndexMap::new()),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(CascadeError::invalid(
                "expected_answers",
                "an object of question id → expected answer",
                other.to_string(),
            ))
        }
    };
    let mut out = IndexMap::new();
    for (slot, value) in obj {
        let answer = match value {
            Value::Null => continue,
            Value::Bool(true) => "yes".to_string(),
            Value::Bool(false) => "no".to_string(),
            Value::String(s) => s.trim().to_string(),
            other => {
                return Err(CascadeError::invalid(
                    format!("expected_answers.{slot}"),
                    "an answer name string, true/false, or \"\"/\"—\"/\"-\" for none",
                    other.to_string(),
                ))
            }
        };
        if !NO_EXPECTATION.contains(&answer.as_str()) {
            out.insert(slot.clone(), answer);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
