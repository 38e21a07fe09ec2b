//! Which questions are read alone: [`Isolate`] and the schema's isolation
//! rules (moved from `schema/mod.rs` unchanged).

use crate::words::Word;

use super::{
    ChunkPrompt, Layout, Question, QuestionKind, ValidSchema, ISOLATE_AUTO_MAX,
    ISOLATE_MAX_QUESTIONS,
};

/// Which questions are read alone when they do not state `alone` themselves
/// (the original server's `isolate`, v0.3). In small requests a yes/no question
/// read jointly tended to copy the previous yes/no answer; reading it alone costs
/// one more read. On a canvas (vLLM) the rule is [`Isolate::resolve`]; a
/// causal (embedded) reader also reads every question apart under `all`, and
/// under `auto` when the layout is `document_first`
/// ([`ValidSchema::with_questions_apart`]).
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

impl ValidSchema {
    /// Ids of the questions read alone, over all schema questions (diagnostics
    /// `isolated`).
    pub fn isolated(&self) -> Vec<String> {
        self.questions
            .iter()
            .filter(|q| q.is_alone())
            .map(|q| q.id.clone())
            .collect()
    }

    /// The schema as read for a state holding images: questions isolated by
    /// `isolate: "auto"` are read with the others again, since each separate read
    /// would repeat the image.
    pub fn without_auto_isolation(mut self) -> Self {
        for q in &mut self.questions {
            if q.alone_auto {
                q.alone = Some(false);
                q.alone_auto = false;
            }
        }
        self
    }

    /// The schema as a causal (embedded) reader reads it: each question that
    /// does not state `alone` is read on a prompt of its own, whatever the
    /// question count, so that no question sees another's text and an answer
    /// does not move when questions are added, removed or reordered.
    ///
    /// - Under `isolate: "all"`, always.
    /// - Under `"auto"`, when the layout is `document_first`: the state comes
    ///   first, its KV state is computed once and every question's prompt
    ///   goes on from it, so a question costs only its own text. Under
    ///   `schema_first` the state follows each question's text and would be
    ///   read once per question (a 3-question decision of Qwen2.5-Coder 1.5B
    ///   took 2.0 to 3.6 times as long in two runs), so `auto` keeps the canvas rule
    ///   ([`Isolate::resolve`]) there.
    ///
    /// The count limits of [`Isolate::resolve`] (2 to
    /// [`ISOLATE_MAX_QUESTIONS`]) are the canvas's and do not apply. Only the
    /// asked questions ([`Self::asked`]) are marked. Left as it is: a chained
    /// schema (`chained`: more than one stage, or `sequential`), whose prompts
    /// list every question on purpose so later answers can follow earlier
    /// ones, and `chunk_prompt: "shared"`, which asks for the same. Questions
    /// isolated under `auto` are flagged `alone_auto`, as [`Isolate::resolve`]
    /// flags its own.
    pub fn with_questions_apart(mut self, chained: bool) -> Self {
        let apart = match self.isolate {
            Isolate::All => true,
            Isolate::Auto => self.layout == Layout::DocumentFirst,
            Isolate::Noul | Isolate::None => false,
        };
        if !apart || chained || self.chunk_prompt == ChunkPrompt::Shared {
            return self;
        }
        let auto = self.isolate == Isolate::Auto;
        let ask = &self.ask;
        for q in &mut self.questions {
            let is_asked = ask.as_ref().is_none_or(|ids| ids.contains(&q.id));
            if q.alone.is_none() && is_asked {
                q.alone = Some(true);
                q.alone_auto = auto;
            }
        }
        self
    }
}
