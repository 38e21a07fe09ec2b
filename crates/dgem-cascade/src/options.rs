//! The cascade's request keys.
//!
//! Read from the decision request object, with the spellings the original
//! dgem cascade accepted: `cascade_mode`, `cascade_threshold`,
//! `cascade_threshold_mode`, `cascade_model`, `stage2_prior` and
//! `expected_answers`. String values compare case-insensitively.

use std::time::Duration;

use dgem_core::schema::ValidSchema;
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

/// The `cascade_mode` values every surface documents (the OpenAPI document,
/// the MCP tool schemas): the canonical spelling of each mode. The parser
/// also takes the aliases below and `true`/`false`; a test holds the
/// documents to this list.
pub const CASCADE_MODES: [&str; 3] = ["off", "entropy", "on_miss"];
/// The documented `cascade_threshold_mode` values (aliases: `raw`,
/// `normalised`, `hesitation`).
pub const THRESHOLD_MODES: [&str; 2] = ["nats", "normalized"];
/// The documented `stage2_prior` values: how much of Stage 1 the Stage-2
/// prompt shows.
pub const STAGE2_PRIORS: [&str; 3] = ["soft", "none", "full"];

/// Spellings of `cascade_mode` that turn the cascade off.
const OFF: [&str; 4] = ["off", "none", "false", ""];
/// Spellings of `cascade_mode` for [`CascadeMode::Entropy`].
const ENTROPY: [&str; 4] = ["entropy", "auto", "true", "prior_guided"];
/// Spellings of `cascade_mode` for [`CascadeMode::OnMiss`].
const ON_MISS: [&str; 2] = ["on_miss", "miss"];
/// Values of `expected_answers` that state no expectation.
const NO_EXPECTATION: [&str; 3] = ["", "—", "-"];

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
        match self {
            Self::Entropy => "entropy",
            Self::OnMiss => "on_miss",
        }
    }
}

/// What the threshold is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThresholdMode {
    /// The answer entropy H, in nats (default; alias `raw`).
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

/// How much of the Stage-1 reading the Stage-2 prompt shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
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
        let mode = parse_mode(obj.get("cascade_mode"))?;
        let threshold_mode = parse_threshold_mode(obj.get("cascade_threshold_mode"))?;
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
        let prior = parse_prior(obj.get("stage2_prior"))?;
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

/// Comma-separated quoted list for error messages.
fn listed(names: &[&[&str]]) -> String {
    names
        .iter()
        .flat_map(|n| n.iter())
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_mode(v: Option<&Value>) -> Result<Option<CascadeMode>, CascadeError> {
    let bad = |got: String| {
        CascadeError::invalid(
            "cascade_mode",
            format!(
                "one of {} (or true/false)",
                listed(&[&OFF, &ENTROPY, &ON_MISS])
            ),
            got,
        )
    };
    let s = match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => return Ok(Some(CascadeMode::Entropy)),
        Some(Value::String(s)) => s.trim().to_ascii_lowercase(),
        Some(other) => return Err(bad(other.to_string())),
    };
    if OFF.contains(&s.as_str()) {
        Ok(None)
    } else if ENTROPY.contains(&s.as_str()) {
        Ok(Some(CascadeMode::Entropy))
    } else if ON_MISS.contains(&s.as_str()) {
        Ok(Some(CascadeMode::OnMiss))
    } else {
        Err(bad(v.map(Value::to_string).unwrap_or_default()))
    }
}

fn parse_threshold_mode(v: Option<&Value>) -> Result<ThresholdMode, CascadeError> {
    let bad = || {
        CascadeError::invalid(
            "cascade_threshold_mode",
            "one of \"nats\", \"raw\", \"normalized\", \"normalised\", \"hesitation\"",
            v.map(Value::to_string).unwrap_or_default(),
        )
    };
    match v {
        None | Some(Value::Null) => Ok(ThresholdMode::Nats),
        Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "" | "nats" | "raw" => Ok(ThresholdMode::Nats),
            "normalized" | "normalised" | "hesitation" => Ok(ThresholdMode::Normalized),
            _ => Err(bad()),
        },
        Some(_) => Err(bad()),
    }
}

fn parse_prior(v: Option<&Value>) -> Result<PriorMode, CascadeError> {
    let bad = || {
        CascadeError::invalid(
            "stage2_prior",
            "one of \"soft\", \"none\", \"full\"",
            v.map(Value::to_string).unwrap_or_default(),
        )
    };
    match v {
        None | Some(Value::Null) => Ok(PriorMode::Soft),
        Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "" | "soft" => Ok(PriorMode::Soft),
            "none" => Ok(PriorMode::None),
            "full" => Ok(PriorMode::Full),
            _ => Err(bad()),
        },
        Some(_) => Err(bad()),
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
