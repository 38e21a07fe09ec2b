//! The `{answers, diagnostics}` envelope (serving.md §8).
//!
//! Answers keep the wire shapes of the chat route (§8.1): key order `type,
//! label, confidence, probabilities, noul|choice|(score, level), [stderr,
//! agreement]`, then dgem-rs's extra keys `entropy` (nats) and
//! `normalized_entropy` (hesitation, H/ln K). `label` is always the chosen
//! option's name (a letter read, `A`, is reported as `slot_label` beside it),
//! and a read that debiases option order (the cloze reader by default, the
//! canvas reader with `order_debias` on) adds `order_sensitivity`. Diagnostics carry the §8.2 keys plus
//! the embedded engine's own (model, label mode, calibration, token counts).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

mod answer;
mod calibration;
mod samples;
pub use answer::{AnswerOut, Resolution};
pub use calibration::CalibrationDiagnostics;
pub use samples::{PartSamples, ReadTops, SamplesDiagnostics};

use crate::labels::LabelMode;
use crate::schema::Layout;

/// What applying the rules did to one group of tied questions (diagnostics
/// `constraints`).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Constrained {
    /// The questions the group ties, in schema order.
    pub questions: Vec<String>,
    /// Rules of the group, as indices into the policy's `rules`.
    pub rules: Vec<usize>,
    /// Probability mass the rules removed, `1 − Z`, in [0, 1].
    pub mass_removed: f64,
}

/// Why a question was skipped by `ask_if` (serving.md §8.2 `skipped`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skip {
    /// The dependency whose answer failed the condition.
    pub because: String,
    /// Its answer name, or `None` if it was itself skipped.
    pub was: Option<String>,
    /// The answer names that would have let the question run.
    pub wanted: Vec<String>,
}

/// How a question's options were scored at its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Scoring {
    /// One canvas position read jointly with the other slots; each label is one
    /// token there (bidirectional readers).
    #[default]
    Canvas,
    /// One row after the cue: each option by the probability of its first token,
    /// pooled over its spellings with and without a leading space (options whose
    /// first tokens all differ).
    FirstToken,
    /// Each option by the log-likelihood of its whole tokenization after the cue,
    /// ending with the newline that closes an answer line: the sum of its token
    /// log-probabilities, with no length normalization, so `exp` of it is the
    /// probability of writing exactly that option (the lm-evaluation-harness
    /// multiple-choice score, its `acc` variant). Used when options share a first
    /// token (`approve_all` / `approve_some`, levels `20`…`24`).
    Sequence,
}

/// Per-question diagnostics (serving.md §8.2 `questions`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QuestionDiagnostics {
    /// Token position of the slot (in the read's sequence).
    pub pos: usize,
    /// Backend-side entropy per read, nats: over the full vocabulary when it
    /// was read (`label_mass` present), over the top-k set for vLLM, else
    /// over the question's labels.
    pub entropy: Vec<f64>,
    /// Share of the model's distribution on this question's labels (read 0), in
    /// [0, 1]; for sequence scoring, the probability that the model writes one of
    /// the options in full. Absent when the backend read the label tokens
    /// only (the embedded engine's default; `--vocab-diagnostics` asks for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_mass: Option<f64>,
    /// Whether the most likely token of read 0 was a label (for sequence
    /// scoring: the first token of an option). Absent with `label_mass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argmax_is_label: Option<bool>,
    /// How the options were scored.
    pub scoring: Scoring,
    /// Distribution before contextual calibration (mean over reads), when calibrated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncalibrated: Option<Vec<f64>>,
}

/// How a choice question with more than 26 options was answered through
/// brackets (see [`crate::brackets`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BracketDiagnostics {
    /// Options of the question.
    pub options: usize,
    /// Size of each round-1 bracket, in option order.
    pub brackets: Vec<usize>,
    /// Options that reached the final round, in option order.
    pub finalists: Vec<String>,
    /// Rounds read (brackets, then the final).
    pub rounds: u32,
}

/// Timing of a decision, all in ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timing {
    /// Wall time of the whole decision.
    pub total_ms: f64,
    /// Reads run: Σ over the decision's groups of the samples each read. A
    /// read of a group whose option order is debiased covers every listing
    /// of it (`order_sensitivity.orders` prompts or requests), counted once.
    pub reads: u32,
    /// Time waiting in the backend queue.
    pub queue_ms: f64,
    /// Time in the model.
    pub forward_ms: f64,
    /// Time spent reading content-free states for calibration (0 when cached).
    pub calibration_ms: f64,
}

/// How a decision's slots were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SlotReading {
    /// Every slot of a group read from one canvas (bidirectional models).
    Joint,
    /// Each slot read after the prompt (causal models).
    #[default]
    Cloze,
}

impl SlotReading {
    /// The wire name (`joint` / `cloze`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Joint => "joint",
            Self::Cloze => "cloze",
        }
    }
}

/// What the prompts of a decision listed (diagnostics `chunk_prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ChunkPromptUsed {
    /// Each group's prompt listed its own questions.
    #[default]
    Own,
    /// Each group's prompt listed every question (`chunk_prompt: "shared"`).
    Shared,
    /// A chained decision: every prompt listed every question.
    Full,
}

impl ChunkPromptUsed {
    /// The wire name (`own`, `shared`, `full`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Own => "own",
            Self::Shared => "shared",
            Self::Full => "full",
        }
    }
}

/// Decision-level diagnostics (serving.md §8.2 plus dgem-rs keys).
///
/// Serializes to the envelope's `diagnostics` object and deserializes from it;
/// keys a peer server may leave out (dgem-rs's own, or the newer original ones)
/// take their defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Diagnostics {
    /// Denoise steps.
    pub steps: u32,
    /// `document_first` or `schema_first`.
    #[serde(default)]
    pub layout: Layout,
    /// Questions read alone.
    pub isolated: Vec<String>,
    /// Asked ids per stage.
    pub stages: Vec<Vec<String>>,
    /// Questions skipped by `ask_if`.
    pub skipped: IndexMap<String, Skip>,
    /// Ids per group, in the order they were read.
    pub chunks: Vec<Vec<String>>,
    /// `full` when chained, else `own`/`shared`.
    #[serde(default)]
    pub chunk_prompt: ChunkPromptUsed,
    /// Whether chunks ran in order.
    pub sequential: bool,
    /// `null`, `prefill` or `restated`.
    pub conditioning: Option<String>,
    /// Thought (not produced by the embedded engine).
    pub thought: Option<Value>,
    /// Samples block.
    pub samples: SamplesDiagnostics,
    /// Timing.
    pub timing: Timing,
    /// Prompt tokens of the longest read.
    pub prompt_tokens: Option<usize>,
    /// Tokens whose KV state came from the prefix cache (Σ over reads).
    pub cached_tokens: usize,
    /// Output rows read: Σ over parts of the answer template's tokens + 1 (the
    /// end-of-turn token) + any thought tokens, plus a chained prefix thought;
    /// for a cloze reader, answer positions × reads. This is the decision's
    /// `usage.completion_tokens` (chat) and `usage.output_tokens` (systemone),
    /// counted as the original structured server counts them.
    pub rows: usize,
    /// Tokens of the state that were sent and read (the embedded engine refuses
    /// rather than truncates, so the two are equal).
    pub state_tokens: usize,
    /// Per-question diagnostics.
    pub questions: IndexMap<String, QuestionDiagnostics>,
    /// The runtime that runs the model (`llama.cpp`, `vllm`, …), written
    /// `engine` in the envelope (the original server's key).
    #[serde(rename = "engine")]
    pub runtime: String,
    /// Whether backend entropy is over labels only (vLLM constrained reads;
    /// the embedded engine's label-token reads, its default).
    pub constrained: bool,
    /// Model id.
    pub model: String,
    /// Model file sha256, if known.
    pub model_sha256: Option<String>,
    /// `letters` or `words`.
    #[serde(default)]
    pub label_mode: LabelMode,
    /// How slots were read: `joint` (one canvas) or `cloze` (each slot after the prompt).
    #[serde(default)]
    pub slot_reading: SlotReading,
    /// What calibrated the numbers ([`CalibrationDiagnostics`]): contextual
    /// calibration's content-free states and the shipped temperatures;
    /// `null` when nothing did.
    pub calibration: Option<CalibrationDiagnostics>,
    /// A plain-words note on how far these numbers can be trusted.
    pub note: Option<String>,
    /// Hash of the question block's fixed sentences
    /// ([`crate::prompt::Wording::hash`]): on the vLLM reader always (an
    /// operator can replace its wording); on the embedded reader when it read
    /// with a wording other than dgem's own (`--wording compact`); absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_wording: Option<String>,
    /// Questions answered through bracket routing (absent when none).
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub brackets: IndexMap<String, BracketDiagnostics>,
    /// Answers read from an upstream reply whose probabilities did not sum
    /// to 1 (rounded by the sender) and were renormalized: question id → the
    /// sum received (absent when none).
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub renormalized: IndexMap<String, f64>,
    /// What the caller asked for that this decision did not do, in plain
    /// words, e.g. a `think` budget left unused by a backend that cannot
    /// think, under `think_optional` (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// `multi` questions read as yes/no slots: question id → the ids of its
    /// options' slots, in option order (absent when none).
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub multi: IndexMap<String, Vec<String>>,
    /// What the policy's rules did, one entry per group of tied questions
    /// ([`crate::rules`]; absent when no rule applied).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Constrained>,
}

/// Build the `{answers, diagnostics}` envelope. `answers` holds one entry per
/// asked question in schema order; `None` marks a skipped question (JSON `null`).
pub fn envelope(answers: &IndexMap<String, Option<AnswerOut>>, diagnostics: &Diagnostics) -> Value {
    json!({
        "answers": answers_json(answers),
        "diagnostics": serde_json::to_value(diagnostics).unwrap_or(Value::Null),
    })
}

/// The envelope's `answers` object: each answer in its wire shape
/// ([`AnswerOut::to_chat_json`]), `null` for a skipped question, in the
/// policy's order. What every surface writes, from the typed answers.
pub fn answers_json(answers: &IndexMap<String, Option<AnswerOut>>) -> Value {
    Value::Object(
        answers
            .iter()
            .map(|(id, a)| {
                (
                    id.clone(),
                    a.as_ref().map_or(Value::Null, AnswerOut::to_chat_json),
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readout::aggregate;
    use crate::schema::{SchemaDefaults, ValidSchema};

    #[test]
    fn chat_answer_shapes_per_type() {
        let s = ValidSchema::from_value(
            &json!({"questions": [
                {"id": "u", "type": "noul"},
                {"id": "t", "type": "choice", "options": ["billing", "support"]},
                {"id": "s", "type": "score", "levels": ["calm", "frustrated", "furious"]}
            ]}),
            &SchemaDefaults::default(),
        )
        .expect("valid");
        let mk = |i: usize, labels: &[&str], dist: Vec<Vec<f64>>| {
            AnswerOut::new(
                s.questions[i].clone(),
                labels.iter().map(|s| s.to_string()).collect(),
                aggregate(&dist),
            )
        };
        let u = mk(0, &["yes", "no"], vec![vec![0.25, 0.75]]).to_chat_json();
        let keys: Vec<&String> = u.as_object().expect("obj").keys().collect();
        assert_eq!(
            keys,
            [
                "type",
                "label",
                "confidence",
                "probabilities",
                "noul",
                "entropy",
                "normalized_entropy"
            ]
        );
        assert_eq!(u["label"], "no");
        assert_eq!(u["noul"], 0.25);
        let t = mk(1, &["A", "B"], vec![vec![0.9, 0.1], vec![0.7, 0.3]]).to_chat_json();
        assert_eq!(t["choice"], "billing");
        assert_eq!(t["agreement"], 1.0);
        let sc = mk(2, &["1", "2", "3"], vec![vec![0.0, 0.5, 0.5]]).to_chat_json();
        assert_eq!(sc["level"], "frustrated");
        assert!((sc["score"].as_f64().expect("num") - 2.5).abs() < 1e-12);
        assert_eq!(sc["probabilities"]["furious"], 0.5);
        assert!(sc.get("value").is_none(), "word levels have no value");
    }

    #[test]
    fn numeric_score_levels_report_the_expected_level_value() {
        let s = ValidSchema::from_value(
            &json!({"questions": [
                {"id": "p", "type": "score", "levels": ["1", "2", "3", "4", "5"]},
                {"id": "n", "type": "score", "levels": ["20", "21", "22", "23", "24"]}
            ]}),
            &SchemaDefaults::default(),
        )
        .expect("valid");
        let mk = |i: usize, dist: Vec<f64>| {
            AnswerOut::new(
                s.questions[i].clone(),
                s.questions[i]
                    .alternatives
                    .iter()
                    .map(|a| a.name.clone())
                    .collect(),
                aggregate(&[dist]),
            )
        };
        // Most mass on level "4": the value reads 3.9, not the 0-based position 3.
        let p = mk(0, vec![0.0, 0.0, 0.1, 0.9, 0.0]).to_chat_json();
        assert_eq!(p["level"], "4");
        assert!((p["value"].as_f64().expect("num") - 3.9).abs() < 1e-12);
        assert!((p["score"].as_f64().expect("num") - 3.9).abs() < 1e-12);
        let n = mk(1, vec![0.0, 0.5, 0.5, 0.0, 0.0]).to_chat_json();
        assert!((n["value"].as_f64().expect("num") - 21.5).abs() < 1e-12);
        assert!((n["score"].as_f64().expect("num") - 2.5).abs() < 1e-12);
        let keys: Vec<&String> = n.as_object().expect("obj").keys().collect();
        assert_eq!(&keys[4..7], ["score", "level", "value"]);
    }
}
