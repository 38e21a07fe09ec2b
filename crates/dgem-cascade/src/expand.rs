//! Taxonomy expansion: proposing a missing option for a choice question.
//!
//! A policy's option lists are written before its inputs are seen, so some
//! inputs fit none of them. Expansion finds those inputs and proposes the
//! option they lacked (behaviour of the original dgem's taxonomy expansion,
//! §4.9):
//!
//! 1. **Injection**, before the read: [`inject_catch_all`] gives every choice
//!    question of 2..=25 options that has no catch-all option (see
//!    [`is_catch_all`]) the option [`CATCH_ALL_NAME`], so the read has
//!    somewhere to put an input that fits nothing.
//! 2. **Trigger**, after the read: a choice slot whose Stage-1 answer is a
//!    catch-all, or whose answer entropy is at or above
//!    [`ExpansionOptions::entropy`], is flagged ([`trigger_reason`]).
//! 3. **Proposal**: one Stage-2 call per decision asks for one new sibling
//!    option per flagged slot; without a provider, or when the call fails, a
//!    placeholder name stands in ([`fallback_name`]). Names are made
//!    snake_case and distinct from the existing options
//!    ([`sanitize_option_name`]).
//! 4. **Record**: one [`Suggestion`] per flagged slot, with a hint saying
//!    where in the template the option would go.
//!
//! [`suggest`] never changes the decision and never fails it.
//!
//! ```text
//! raw schema ──inject_catch_all──▶ schema read by Stage 1 ──▶ Decision
//! Decision ──trigger──▶ flagged slots ──Stage2::resolve (or fallback)──▶ Vec<Suggestion>
//! ```

use std::time::{Duration, Instant};

use dgem_backend::Decision;
use dgem_core::envelope::AnswerOut;
use dgem_core::schema::{QuestionKind, ValidSchema};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::provider::{Stage2, Stage2Request};
use prompt::expansion_prompt;

/// The catch-all option [`inject_catch_all`] appends.
pub const CATCH_ALL_NAME: &str = "other_unclassified";
/// Description of the injected catch-all option.
pub const CATCH_ALL_DESCRIPTION: &str =
    "None of the other options fits: a new kind of case, or one outside what this question covers.";
/// Option names that count as a catch-all (compared case-insensitively).
pub const CATCH_ALL_NAMES: [&str; 9] = [
    "other",
    "other_unclassified",
    "unknown",
    "oos",
    "unclassified",
    "none",
    "none_of_the_above",
    "none_of_these",
    "none of these",
];
/// Name prefixes that make an option a catch-all (compared case-insensitively).
pub const CATCH_ALL_PREFIXES: [&str; 3] = ["other_", "unknown_", "unclassified_"];
/// Fewest options a question needs to get a catch-all injected.
pub const INJECT_MIN_OPTIONS: usize = 2;
/// Most options a question may have to get a catch-all injected (one more
/// stays within the 26 alternatives a question may have).
pub const INJECT_MAX_OPTIONS: usize = 25;
/// Default entropy trigger, in nats (the original expansion's default).
pub const DEFAULT_EXPANSION_ENTROPY: f64 = 0.35;
/// Lowest Stage-1 probability for an option to be listed among the top
/// candidates of a [`Suggestion`] (3 %).
pub const CANDIDATE_MIN_PROBABILITY: f64 = 0.03;
/// Name used when a proposed name has no letter, digit or `_` left.
pub const EMPTY_NAME: &str = "proposed_category";

/// Whether `name` is a catch-all option: one of [`CATCH_ALL_NAMES`] or
/// starting with one of [`CATCH_ALL_PREFIXES`], ignoring case and
/// surrounding whitespace.
pub fn is_catch_all(name: &str) -> bool {
    let n = name.trim().to_lowercase();
    CATCH_ALL_NAMES.contains(&n.as_str()) || CATCH_ALL_PREFIXES.iter().any(|p| n.starts_with(p))
}

/// Append [`CATCH_ALL_NAME`] to every `choice` question of the raw policy
/// JSON that has [`INJECT_MIN_OPTIONS`]..=[`INJECT_MAX_OPTIONS`] options and
/// no catch-all among them. Returns the changed policy and the ids of the
/// questions changed, in template order.
///
/// The option takes the form the question uses: a bare name when every
/// option is written as a name, `{name, description}` when any is an object.
/// Anything that is not a well-formed choice question is left for the
/// validator to judge, untouched; call this before building the
/// [`ValidSchema`] so the read sees the new option.
pub fn inject_catch_all(raw_schema: &Value) -> (Value, Vec<String>) {
    let mut out = raw_schema.clone();
    let mut ids = Vec::new();
    let Some(questions) = out.get_mut("questions").and_then(Value::as_array_mut) else {
        return (out, ids);
    };
    for q in questions.iter_mut().filter_map(Value::as_object_mut) {
        let is_choice = q
            .get("type")
            .and_then(Value::as_str)
            .and_then(QuestionKind::parse)
            == Some(QuestionKind::Choice);
        let id = match q.get("id") {
            Some(Value::String(s)) => s.trim().to_string(),
            Some(Value::Number(n)) => n.to_string(),
            _ => continue,
        };
        // `none_of_these: true` already gives the question its "none" option.
        let has_none = q.get("none_of_these") == Some(&Value::Bool(true));
        let Some(options) = q.get_mut("options").and_then(Value::as_array_mut) else {
            continue;
        };
        if !is_choice
            || has_none
            || !(INJECT_MIN_OPTIONS..=INJECT_MAX_OPTIONS).contains(&options.len())
            || options.iter().any(|o| is_catch_all(&raw_option_name(o)))
        {
            continue;
        }
        let option = if options.iter().any(Value::is_object) {
            json!({"name": CATCH_ALL_NAME, "description": CATCH_ALL_DESCRIPTION})
        } else {
            Value::String(CATCH_ALL_NAME.into())
        };
        options.push(option);
        ids.push(id);
    }
    (out, ids)
}

/// The name of a raw option: the string itself, an object's `name`, or
/// another scalar as JSON (as the validator reads it).
fn raw_option_name(o: &Value) -> String {
    let v = match o {
        Value::Object(m) => m.get("name").unwrap_or(&Value::Null),
        other => other,
    };
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Expansion settings of one decision request.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpansionOptions {
    /// Flag a choice slot whose answer entropy is at or above this, in nats
    /// (request key `expansion_entropy`, default [`DEFAULT_EXPANSION_ENTROPY`]).
    pub entropy: f64,
    /// Stage-2 model asked for; empty lets the provider choose. Not a request
    /// key: the caller may copy the cascade's `cascade_model` here.
    pub model: String,
}

impl Default for ExpansionOptions {
    fn default() -> Self {
        Self {
            entropy: DEFAULT_EXPANSION_ENTROPY,
            model: String::new(),
        }
    }
}

/// What `suggest_expansions` accepts, for its messages.
const SWITCH_VALUES: &str = "true or false (or one of \"true\", \"1\", \"false\", \"0\")";

/// `suggest_expansions` written as a word: `true`/`1` or `false`/`0`, in
/// any case, blanks trimmed.
///
/// # Errors
/// "must be true or false (…). Given: …", the word shown as JSON.
pub fn switch_word(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!(
            "must be {SWITCH_VALUES}. Given: {}",
            Value::String(s.to_string())
        )),
    }
}

/// `suggest_expansions` as written: JSON `true`/`false` or a
/// [`switch_word`].
///
/// # Errors
/// "must be true or false (…)" for any other value.
pub fn switch_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(b)),
        Value::String(s) => switch_word(&s).map(Some).map_err(de::Error::custom),
        v => Err(de::Error::custom(format!(
            "must be {SWITCH_VALUES}. Given: {v}"
        ))),
    }
}

/// What `expansion_entropy` accepts, for its messages.
pub const ENTROPY_VALUES: &str = "a number of nats above 0 (absent uses 0.35)";

/// `expansion_entropy` as written: a number of nats above 0.
///
/// # Errors
/// "must be a number of nats above 0 (…)" for any other value.
pub fn entropy_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    crate::options::number_or(d, ENTROPY_VALUES, entropy_allowed)
}

/// Whether `t` is an `expansion_entropy` ([`ENTROPY_VALUES`]): finite, above 0.
pub fn entropy_allowed(t: f64) -> bool {
    t > 0.0 && t.is_finite()
}

/// Why a choice slot is flagged, or `None` when it is not: `choice` is the
/// Stage-1 answer name, `confidence` its probability in [0, 1], `entropy`
/// the answer entropy in nats and `threshold` [`ExpansionOptions::entropy`].
///
/// Wire format, e.g. `selected catch-all "other" (conf=42.0%) + high entropy
/// H=0.4100 nats >= 0.35`.
pub fn trigger_reason(
    choice: &str,
    confidence: f64,
    entropy: f64,
    threshold: f64,
) -> Option<String> {
    let mut parts = Vec::new();
    if is_catch_all(choice) {
        parts.push(format!(
            "selected catch-all \"{choice}\" (conf={:.1}%)",
            confidence * 100.0
        ));
    }
    if entropy >= threshold {
        parts.push(format!(
            "high entropy H={entropy:.4} nats >= {threshold:.2}"
        ));
    }
    (!parts.is_empty()).then(|| parts.join(" + "))
}

/// `raw` as a snake_case option name distinct from `existing`: lowercased,
/// spaces and hyphens made `_`, every character outside `[a-z0-9_]` dropped,
/// runs of `_` made one and `_` trimmed from both ends; [`EMPTY_NAME`] when
/// nothing is left; `_new` appended (again, if need be) while the name
/// equals an existing option, ignoring case.
pub fn sanitize_option_name(raw: &str, existing: &[&str]) -> String {
    let mut name = String::new();
    for c in raw.to_lowercase().chars() {
        let c = if c == ' ' || c == '-' { '_' } else { c };
        if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
            continue;
        }
        if c == '_' && name.ends_with('_') {
            continue;
        }
        name.push(c);
    }
    let mut name = name.trim_matches('_').to_string();
    if name.is_empty() {
        name = EMPTY_NAME.to_string();
    }
    while existing
        .iter()
        .any(|e| e.trim().eq_ignore_ascii_case(&name))
    {
        name.push_str("_new");
    }
    name
}

/// The placeholder name for slot `id` when no model proposed one:
/// `specialized_<id>_extension` (before [`sanitize_option_name`]).
pub fn fallback_name(id: &str) -> String {
    format!("specialized_{id}_extension")
}

/// One option a Stage-1 read weighed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// Option name.
    pub name: String,
    /// Its Stage-1 probability, in [0, 1].
    pub probability: f64,
}

/// A proposed option, in the policy's `{name, description}` form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuggestedOption {
    /// snake_case name, distinct from the question's options.
    pub name: String,
    /// Which cases it covers, in one sentence.
    pub description: String,
}

/// Where a [`SuggestedOption`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuggestionSource {
    /// The Stage-2 model proposed it.
    Stage2,
    /// A placeholder: no provider was given, or its call failed.
    Fallback,
}

/// The expansion record of one flagged choice slot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suggestion {
    /// The question's id.
    pub question_id: String,
    /// Why it was flagged ([`trigger_reason`]).
    pub trigger_reason: String,
    /// Stage-1 answer name (the read's own, also when a cascade wrote over it).
    pub stage1_choice: String,
    /// Stage-1 probability of that answer, in [0, 1].
    pub stage1_confidence: f64,
    /// Stage-1 answer entropy, nats.
    pub stage1_entropy: f64,
    /// Options with Stage-1 probability ≥ [`CANDIDATE_MIN_PROBABILITY`],
    /// most probable first (template order among ties).
    pub top_candidates: Vec<Candidate>,
    /// Whether [`inject_catch_all`] added this question's catch-all.
    pub injected_catch_all: bool,
    /// The proposed option.
    pub suggested_option: SuggestedOption,
    /// Where the proposal came from.
    pub source: SuggestionSource,
    /// Why the Stage-2 call gave nothing usable for this slot; only with a
    /// failed call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `Append to <template> -> questions[id="<id>"].options: <option JSON>`.
    pub template_patch_hint: String,
}

/// A slot [`suggest`] flagged, before its proposal.
struct Flagged<'a> {
    answer: &'a AnswerOut,
    reason: String,
    choice: String,
    confidence: f64,
    candidates: Vec<Candidate>,
}

/// Flag `answer` when it is a choice whose Stage-1 reading triggers.
fn flag(answer: &AnswerOut, threshold: f64) -> Option<Flagged<'_>> {
    if answer.question.kind != QuestionKind::Choice {
        return None;
    }
    let a = &answer.aggregate;
    let (top, confidence) = match &answer.resolved {
        Some(r) => (r.stage1_top, r.stage1_confidence),
        None => (a.top, a.confidence),
    };
    let alts = &answer.question.alternatives;
    let choice = alts.get(top).map_or("", |x| x.name.as_str()).to_string();
    // A question's own "none of these" option (`none_of_these`, or an
    // option so named) is a first-class answer, not a sign of a missing one:
    // only the entropy trigger applies to it.
    let declared_none = answer.question.none_option == Some(top);
    let named = if declared_none { "" } else { choice.as_str() };
    let reason = trigger_reason(named, confidence, a.entropy, threshold)?;
    let mut candidates: Vec<Candidate> = alts
        .iter()
        .zip(&a.mean)
        .filter(|(_, p)| **p >= CANDIDATE_MIN_PROBABILITY)
        .map(|(alt, p)| Candidate {
            name: alt.name.clone(),
            probability: *p,
        })
        .collect();
    candidates.sort_by(|x, y| y.probability.total_cmp(&x.probability));
    Some(Flagged {
        answer,
        reason,
        choice,
        confidence,
        candidates,
    })
}

/// Propose one new option for every flagged choice slot of `decision` (read
/// with `schema` from `state`). `template` names the policy in the patch
/// hints, `injected` holds the ids [`inject_catch_all`] returned, and
/// `provider`, when given, is asked once for all slots within `timeout`.
/// Slots come in decision order; none flagged gives an empty list. Never
/// fails: a failed call gives placeholders with the error.
#[allow(clippy::too_many_arguments)] // the surfaces' call shape: each input is separate
pub async fn suggest(
    decision: &Decision,
    schema: &ValidSchema,
    state: &Value,
    template: &str,
    injected: &[String],
    opts: &ExpansionOptions,
    provider: Option<&dyn Stage2>,
    timeout: Duration,
) -> Vec<Suggestion> {
    let flagged: Vec<Flagged<'_>> = decision
        .answers
        .values()
        .flatten()
        .filter_map(|a| flag(a, opts.entropy))
        .collect();
    if flagged.is_empty() {
        return Vec::new();
    }
    let reply = match provider {
        None => Err(None),
        Some(p) => ask(p, schema, state, &flagged, opts, timeout)
            .await
            .map_err(Some),
    };
    flagged
        .into_iter()
        .map(|f| {
            let q = &f.answer.question;
            let proposed = match &reply {
                Ok(slots) => proposal(slots, &q.id).map_err(Some),
                Err(e) => Err(e.clone()),
            };
            let existing: Vec<&str> = q.alternatives.iter().map(|a| a.name.as_str()).collect();
            let (option, source, error) = match proposed {
                Ok((name, description)) => (
                    SuggestedOption {
                        name: sanitize_option_name(&name, &existing),
                        description,
                    },
                    SuggestionSource::Stage2,
                    None,
                ),
                Err(error) => (
                    SuggestedOption {
                        name: sanitize_option_name(&fallback_name(&q.id), &existing),
                        description: format!(
                            "Placeholder: no model proposed an option. Rename it after the \
                             kind of case that fits none of the options of `{}`.",
                            q.id
                        ),
                    },
                    SuggestionSource::Fallback,
                    error,
                ),
            };
            let option_json = serde_json::to_string(&option).unwrap_or_default();
            Suggestion {
                question_id: q.id.clone(),
                trigger_reason: f.reason,
                stage1_choice: f.choice,
                stage1_confidence: f.confidence,
                stage1_entropy: f.answer.aggregate.entropy,
                top_candidates: f.candidates,
                injected_catch_all: injected.iter().any(|i| i == &q.id),
                template_patch_hint: format!(
                    "Append to {template} -> questions[id=\"{}\"].options: {option_json}",
                    q.id
                ),
                suggested_option: option,
                source,
                error,
            }
        })
        .collect()
}

/// The one Stage-2 call: its reply's slots, or why there are none.
async fn ask(
    provider: &dyn Stage2,
    schema: &ValidSchema,
    state: &Value,
    flagged: &[Flagged<'_>],
    opts: &ExpansionOptions,
    timeout: Duration,
) -> Result<Map<String, Value>, String> {
    let req = Stage2Request {
        model: opts.model.clone(),
        prompt: expansion_prompt(schema.instructions.as_deref(), state, flagged),
        response_schema: expansion_schema(flagged.iter().map(|f| f.answer.question.id.as_str())),
        images: Vec::new(),
        timeout,
    };
    let started = Instant::now();
    let outcome = tokio::time::timeout(timeout, provider.resolve(&req)).await;
    let result = match outcome {
        Ok(Ok(reply)) => Ok(reply.slots),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "stage-2 call timed out after {} ms (deadline)",
            timeout.as_millis()
        )),
    };
    if let Err(e) = &result {
        tracing::warn!(
            error = %e,
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "expansion call failed; placeholder options used"
        );
    }
    result
}

/// Slot `id` of a reply as `(name, description)`.
///
/// # Errors
/// A message for the record when the slot is missing or has no string `name`.
fn proposal(slots: &Map<String, Value>, id: &str) -> Result<(String, String), String> {
    let Some(slot) = slots.get(id) else {
        return Err("stage-2 proposed no option for this slot".into());
    };
    let Some(name) = slot.get("name").and_then(Value::as_str) else {
        return Err(format!(
            "stage-2 option must be an object with a string `name`, got {slot}"
        ));
    };
    let description = slot
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string();
    Ok((name.to_string(), description))
}

mod prompt;

pub use prompt::expansion_schema;

#[cfg(test)]
mod tests;
