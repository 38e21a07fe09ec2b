//! Validated decision schemas.
//!
//! A [`ValidSchema`] is the only form of a policy that crosses a crate boundary.
//! It is built by [`ValidSchema::from_value`] (in `validate.rs`), which applies
//! the rules of serving.md §3.1 in order; every field is then known to be within
//! its limits. Fields are public for reading; the `#[non_exhaustive]` attribute
//! stops other crates from building one by hand.

mod by_kind;
mod isolation;
pub mod request_samples;
mod valid;
pub(crate) mod validate;
mod wire;

pub use by_kind::ByKind;
pub use isolation::Isolate;
pub use valid::ValidSchema;

use indexmap::IndexMap;
use serde::Serialize;

use crate::words::Word;

/// Most questions one schema may hold (serving.md §3.6 `MAX_QUESTIONS`).
pub const MAX_QUESTIONS: usize = 64;
/// Longest question id, in characters (ids also may not contain whitespace).
/// 100 is the limit peer decision APIs put on field names.
pub const MAX_ID_CHARS: usize = 100;
/// Fewest alternatives a question may have.
pub const MIN_ALTERNATIVES: usize = 2;
/// Most alternatives one slot reads: labels `A`–`Z`. Score levels are limited to
/// this; a choice may hold up to [`crate::brackets::MAX_BRACKET_OPTIONS`],
/// answered through bracket routing.
pub const MAX_ALTERNATIVES: usize = 26;
/// Every key a policy question is read by. An unknown key of a question is
/// ignored (as the original server ignores it), but one that nearly spells
/// one of these ([`crate::suggest::near_key`]) would drop the question's
/// text, its alternatives, a dependency or a setting in silence, so the
/// validator refuses it naming the key; the ad-hoc converter passes these
/// keys on and checks against them too.
pub const QUESTION_KEYS: [&str; 15] = [
    "id",
    "type",
    "instructions",
    "options",
    "levels",
    "criteria",
    "depends_on",
    "ask_if",
    "alone",
    "none_of_these",
    "min",
    "max",
    "threshold",
    "abstain_below",
    "abstain_above",
];

/// Most reads (noise draws) averaged for one decision (serving.md §3.6 `MAX_SAMPLES`).
pub const MAX_SAMPLES: u32 = 32;
/// Reads in all when `samples: "auto"` extends and the policy sets no
/// `auto_max` (the original server's default).
pub const DEFAULT_AUTO_MAX: u32 = 4;
/// Entropy in nats above which `samples: "auto"` reads again when the policy
/// sets no `auto_threshold` (the original server's default).
pub const DEFAULT_AUTO_THRESHOLD: f64 = 0.1;
/// Largest thought budget, in tokens (serving.md §3.6).
pub const MAX_THINK: u32 = 4096;
/// Questions at or below which the `lines` answer format is used (serving.md §3.1 rule 16).
pub const LINES_FORMAT_MAX_QUESTIONS: usize = 10;
/// `isolate: "auto"` reads yes/no questions alone only in schemas of at most this
/// many questions (the original server's `ISOLATE_AUTO_MAX`).
pub const ISOLATE_AUTO_MAX: usize = 3;
/// Above this many questions (or below 2) no question is isolated by `isolate`
/// (the original server's `ISOLATE_MAX_QUESTIONS`).
pub const ISOLATE_MAX_QUESTIONS: usize = 8;

/// The type of a question, after alias normalization (`bool`, `noul` → `Boolean`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuestionKind {
    /// Yes/no question; wire name `noul` (serving.md §4.1).
    Boolean,
    /// One of 2–26 named options.
    Choice,
    /// Ordered levels; the answer carries an expectation over levels.
    Score,
    /// Any number of 2–26 named options (multi-select): each option gets its
    /// own probability of applying, read as a yes/no slot of its own
    /// ([`crate::multi`]), and the answer lists the options selected.
    Multi,
}

impl QuestionKind {
    /// Every kind, in the order documentation lists them.
    pub const ALL: [QuestionKind; 4] = [Self::Boolean, Self::Choice, Self::Score, Self::Multi];

    /// The kinds one answer slot is read as: a `multi` question is read as
    /// one yes/no slot per option, so its reads are [`Self::Boolean`] reads.
    /// Settings and figures kept per type of read (temperatures, calibration
    /// fits, [`ByKind`]) are indexed by these.
    pub const SLOT_KINDS: [QuestionKind; 3] = [Self::Boolean, Self::Choice, Self::Score];

    /// The kind this question's slots are read as ([`Self::SLOT_KINDS`]):
    /// `Boolean` for a `multi`, the kind itself otherwise.
    pub fn slot_kind(self) -> QuestionKind {
        match self {
            Self::Multi => Self::Boolean,
            other => other,
        }
    }
}

/// One allowed answer: a yes/no side, an option or a score level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alternative {
    /// Answer name: `yes`/`no`, the option name, or the level name (stringified).
    pub name: String,
    /// Optional description shown beside the label (criteria text for booleans).
    pub description: Option<String>,
}

/// One validated question.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Question {
    /// Unique, non-empty id without `:` or newline.
    pub id: String,
    /// Normalized type.
    pub kind: QuestionKind,
    /// Question text (may be empty).
    pub instructions: String,
    /// Allowed answers in template order (2..=26). Booleans are `[yes, no]`.
    pub alternatives: Vec<Alternative>,
    /// Ordered union of `depends_on` and the keys of `ask_if`.
    pub depends_on: Vec<String>,
    /// `{dep_id: [allowed answer names]}`: skip this question unless the dependency's
    /// answer is one of these names.
    pub ask_if: IndexMap<String, Vec<String>>,
    /// Whether the question gets a read of its own, after `isolate` was applied:
    /// `Some(b)` when the question stated `alone` (that always wins) or `isolate`
    /// set it, `None` when neither did (read with the others).
    pub alone: Option<bool>,
    /// `true` when `alone` was set by `isolate: "auto"` rather than stated; such a
    /// question is read with the others again when the state holds images (each
    /// separate read would repeat the image).
    pub alone_auto: bool,
    /// Index into `alternatives` of the "none of these" option of a `choice`
    /// (`none_of_these: true`, or an option named `none`) or of a `multi`
    /// (where it is exclusive: selected alone or not at all); `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub none_option: Option<usize>,
    /// How a `multi` question selects its options; `None` for other types.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub select: Option<Selection>,
}

/// How a `multi` question turns its options' probabilities into the options
/// selected ([`crate::multi::select`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Selection {
    /// Fewest options selected (0 by default). It counts the options other than
    /// an exclusive `none`; `none`, when it is the answer, stands alone.
    pub min: usize,
    /// Most options selected (the option count by default).
    pub max: usize,
    /// Probability at or above which an option is selected, in (0, 1)
    /// (question field `threshold`; default [`DEFAULT_SELECT_THRESHOLD`]).
    pub threshold: f64,
}

/// Probability at or above which a `multi` option is selected when the
/// question sets no `threshold`: 0.5, the threshold at which selecting the
/// option is more likely right than wrong.
pub const DEFAULT_SELECT_THRESHOLD: f64 = 0.5;

/// Names that mark a `choice` or `multi` option as "none of these", compared
/// ignoring case and surrounding whitespace. `none_of_these: true` adds the
/// first when no option has one of these names.
pub const NONE_OPTION_NAMES: [&str; 3] = ["none", "none_of_these", "none of these"];

impl Question {
    /// Answer slots the reader reads for this question: one per option for
    /// a `multi` question (each a yes/no read), else one.
    pub fn slots(&self) -> usize {
        match self.kind {
            QuestionKind::Multi => self.alternatives.len(),
            _ => 1,
        }
    }

    /// Whether this question is read on a canvas (or prompt) of its own.
    pub fn is_alone(&self) -> bool {
        self.alone == Some(true)
    }
}

/// How many reads (noise draws) a decision averages (serving.md §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum SamplePolicy {
    /// Always `n` reads (1..=32).
    Fixed {
        /// Number of reads.
        n: u32,
    },
    /// One read; if its largest per-question entropy (nats) exceeds `threshold`
    /// and `max > 1`, run `max - 1` more.
    Auto {
        /// Total reads when extended (1..=32, default 4).
        max: u32,
        /// Entropy threshold in nats (default 0.1).
        threshold: f64,
    },
}

/// Where the state and the question block go in the prompt (reference.md §1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// State first inside `<user_text>`, then the question block (default).
    #[default]
    DocumentFirst,
    /// Question block first (system role), then the state; its prefix is shared
    /// across decisions of one policy, so its KV cache can be reused.
    SchemaFirst,
}

impl Layout {
    /// The wire name (`document_first` / `schema_first`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DocumentFirst => "document_first",
            Self::SchemaFirst => "schema_first",
        }
    }
}

impl Word for Layout {
    const ALL: &'static [Self] = &[Self::DocumentFirst, Self::SchemaFirst];

    fn name(self) -> &'static str {
        self.as_str()
    }
}

crate::word_serde!(
    Layout,
    "LayoutValue",
    "Prompt layout: `document_first` (the state, then the questions) or `schema_first` (the questions first, so that one policy's prompt prefix is shared across states)."
);

/// Whether each chunk's prompt lists only its own questions or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ChunkPrompt {
    /// Only the chunk's questions (default).
    #[default]
    Own,
    /// Every question of the schema.
    Shared,
}

/// Answer template format (serving.md §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerFormat {
    /// `id: label` lines; used for ≤ 10 questions.
    Lines,
    /// `idlabel` joined by spaces; used for > 10 questions.
    Indexed,
}

impl AnswerFormat {
    /// The format of a schema of `n` questions: `lines` up to
    /// [`LINES_FORMAT_MAX_QUESTIONS`] (10), `indexed` above.
    pub fn for_count(n: usize) -> Self {
        if n <= LINES_FORMAT_MAX_QUESTIONS {
            AnswerFormat::Lines
        } else {
            AnswerFormat::Indexed
        }
    }
}

/// Defaults that come from the deployment, not the schema.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchemaDefaults {
    /// Sample policy when the schema has no `samples` (serving default: fixed 1).
    pub samples: SamplePolicy,
    /// Layout when the schema has no `layout`.
    pub layout: Layout,
    /// Whether the deployment chose `layout` (an operator's setting): then a
    /// schema validated under these defaults counts its layout as stated
    /// ([`ValidSchema::layout_stated`]). `false` for the built-in default.
    pub layout_stated: bool,
    /// Isolation rule when the schema has no `isolate` (the original's
    /// `DEFAULT_ISOLATE`, `auto`).
    pub isolate: Isolate,
}

impl Default for SchemaDefaults {
    fn default() -> Self {
        Self {
            samples: SamplePolicy::Fixed { n: 1 },
            layout: Layout::DocumentFirst,
            layout_stated: false,
            isolate: Isolate::Auto,
        }
    }
}
