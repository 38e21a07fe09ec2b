//! Which questions are read alone: [`Isolate`]. The schema's isolation rules
//! (`isolated`, `with_questions_apart`, …) are
//! [`ValidSchema`](super::ValidSchema)'s methods, in `valid.rs`.

use crate::words::Word;

use super::{Question, QuestionKind, ISOLATE_AUTO_MAX, ISOLATE_MAX_QUESTIONS};

/// Which questions are read alone when they do not state `alone` themselves
/// (the original server's `isolate`, v0.3). In small requests a yes/no question
/// read jointly tended to copy the previous yes/no answer; reading it alone costs
/// one more read. On a canvas (vLLM) the rule is [`Isolate::resolve`]; a
/// causal (embedded) reader also reads every question apart under `all`, and
/// under `auto` when the layout is `document_first`
/// ([`ValidSchema::with_questions_apart`](super::ValidSchema::with_questions_apart)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolate {
    /// On a canvas, `noul` when the schema has 2..=[`ISOLATE_AUTO_MAX`]
    /// questions of which at least two are yes/no, else `none`; on a causal
    /// reader under `document_first`, every question of a schema that is not
    /// chained (default).
    #[default]
    Auto,
    /// Every yes/no question is read alone (2 to [`ISOLATE_MAX_QUESTIONS`]
    /// questions).
    Noul,
    /// Nothing is isolated: the questions of a stage that do not state
    /// `alone: true` share one prompt.
    None,
    /// Every question is read alone (on a canvas, 2 to
    /// [`ISOLATE_MAX_QUESTIONS`] questions; on a causal reader, any count).
    All,
}

impl Isolate {
    /// The wire name (`auto`, `noul`, `none`, `all`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Noul => "noul",
            Self::None => "none",
            Self::All => "all",
        }
    }

    /// The rule in effect for a schema of these questions: `auto` resolved, and
    /// `none` outside 2..=[`ISOLATE_MAX_QUESTIONS`] questions. Questions are
    /// counted in slots: a `multi` question counts one yes/no slot per option.
    pub fn resolve(self, questions: &[Question]) -> Isolate {
        let slots = |q: &Question| q.slots();
        let n: usize = questions.iter().map(slots).sum();
        if !(2..=ISOLATE_MAX_QUESTIONS).contains(&n) {
            return Isolate::None;
        }
        match self {
            Isolate::Auto => {
                let nouls: usize = questions
                    .iter()
                    .filter(|q| q.kind.slot_kind() == QuestionKind::Boolean)
                    .map(slots)
                    .sum();
                if n <= ISOLATE_AUTO_MAX && nouls >= 2 {
                    Isolate::Noul
                } else {
                    Isolate::None
                }
            }
            other => other,
        }
    }
}

impl Word for Isolate {
    const ALL: &'static [Self] = &[Self::Auto, Self::Noul, Self::None, Self::All];

    fn name(self) -> &'static str {
        self.as_str()
    }
}

crate::word_serde!(
    Isolate,
    "IsolateValue",
    format!(
        "Which questions are read alone, each on a prompt (embedded model) or canvas (vLLM) of its own: `auto` (the yes/no questions, when a policy has 2 to {ISOLATE_AUTO_MAX} questions and at least two are yes/no; on the embedded model under `document_first`, every question of a policy that is not chained), `noul` (every yes/no question), `none` (the questions share one prompt) or `all` (every question); `noul` applies to policies of 2 to {ISOLATE_MAX_QUESTIONS} questions, and so does `all` on the vLLM canvas."
    )
);
