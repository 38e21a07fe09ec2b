//! [`ValidSchema`]: the validated policy, its fields and the ways to derive
//! one from another (a part of its questions, a request's overrides). Its
//! parse is in `validate.rs`, its wire form in `wire.rs`. Kept apart from the
//! question types in `mod.rs`, which every other module of the crate reads,
//! because a schema also holds the post-read settings
//! ([`crate::after::AfterRead`]) and the rules ([`crate::rules::Rules`]),
//! whose modules read those question types in turn.

use serde::Serialize;

use super::{AnswerFormat, ChunkPrompt, Isolate, Layout, Question, SamplePolicy, MAX_QUESTIONS};
use crate::error::SchemaError;

/// A schema that passed every rule of serving.md §3.1.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ValidSchema {
    /// Questions in template order (1..=64).
    pub questions: Vec<Question>,
    /// Global rubric text, if any.
    pub instructions: Option<String>,
    /// Sample policy.
    pub samples: SamplePolicy,
    /// Denoise steps per read (1..=8).
    pub steps: u32,
    /// Thought budget in tokens (0..=4096).
    pub think: u32,
    /// On a backend that cannot think, answer without the thought and add a
    /// warning to `diagnostics.warnings`, instead of refusing a `think`
    /// above 0 (default false).
    pub think_optional: bool,
    /// The policy reads an image of the state: a decision whose state holds
    /// no image is refused, naming `images` ([`crate::images::check_required`];
    /// default false).
    pub requires_image: bool,
    /// Subset of question ids to answer (dependencies included), or `None` for all.
    pub ask: Option<Vec<String>>,
    /// Max canvas rows per chunk (≥ 8), if set.
    pub chunk_rows: Option<usize>,
    /// Chunk prompt mode.
    pub chunk_prompt: ChunkPrompt,
    /// Run chunks in order, prefilling earlier answers.
    pub sequential: bool,
    /// Prompt layout.
    pub layout: Layout,
    /// Whether `layout` was stated — by the policy, a request override
    /// ([`Self::with_layout`]) or the deployment
    /// ([`SchemaDefaults::layout_stated`](crate::schema::SchemaDefaults::layout_stated)) — rather than left at the built-in
    /// default. A reader may then use the layout its model reads best (the
    /// embedded engine's `EngineConfig::model_layout`). Not sent upstream;
    /// the wire form ([`Self::to_wire`]) always states the layout.
    #[serde(skip)]
    pub layout_stated: bool,
    /// Answer template format, from the total question count.
    pub format: AnswerFormat,
    /// The isolation rule as requested (before `auto` was resolved).
    pub isolate: Isolate,
    /// Post-read settings (temperature, abstention). They change nothing the
    /// model reads and are not sent upstream: the decision's caller applies
    /// them (see [`crate::after`]).
    pub after: crate::after::AfterRead,
    /// Rules between answers (`rules`): applied to the joint distribution of
    /// the questions they tie after the read ([`crate::rules`]). Empty when
    /// the policy states none.
    #[serde(skip_serializing_if = "crate::rules::Rules::is_empty")]
    pub rules: crate::rules::Rules,
    /// The policy (template) the schema was rendered from, for metric labels
    /// and logs; `None` for ad-hoc questions. Not part of the schema's rules
    /// and never sent upstream.
    #[serde(skip)]
    pub policy: Option<String>,
}

impl ValidSchema {
    /// Look a question up by id.
    pub fn question(&self, id: &str) -> Option<&Question> {
        self.questions.iter().find(|q| q.id == id)
    }

    /// The questions to answer: those named by `ask`, else all, in template order.
    pub fn asked(&self) -> Vec<&Question> {
        match &self.ask {
            Some(ids) => self
                .questions
                .iter()
                .filter(|q| ids.iter().any(|a| a == &q.id))
                .collect(),
            None => self.questions.iter().collect(),
        }
    }

    /// Override the layout (request > template > deployment, reference.md §1.6).
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self.layout_stated = true;
        self
    }

    /// The same settings over another set of questions (a part of this schema, or
    /// sub-questions built from it): `ask` is cleared, the answer format
    /// follows the new count, and `rules` are dropped (they apply to the
    /// whole decision's answers, not to a part's). `alone` flags are kept as the questions carry them.
    ///
    /// # Errors
    /// [`SchemaError`] when `questions` is empty, over [`MAX_QUESTIONS`], has a
    /// duplicate id, or a question depends on one outside the set.
    pub fn with_questions(&self, questions: Vec<Question>) -> Result<ValidSchema, SchemaError> {
        if questions.is_empty() || questions.len() > MAX_QUESTIONS {
            return Err(SchemaError::new(
                "questions",
                format!(
                    "a part of a schema needs 1 to {MAX_QUESTIONS} questions (got {})",
                    questions.len()
                ),
            ));
        }
        for (i, q) in questions.iter().enumerate() {
            if questions[..i].iter().any(|p| p.id == q.id) {
                return Err(SchemaError::new(
                    "questions",
                    format!("duplicate question id '{}'", q.id),
                ));
            }
            if let Some(dep) = q
                .depends_on
                .iter()
                .find(|d| !questions.iter().any(|p| &p.id == *d))
            {
                return Err(SchemaError::new(
                    "questions",
                    format!(
                        "question '{}' depends on '{dep}', which is not in this part of the schema",
                        q.id
                    ),
                ));
            }
        }
        let format = AnswerFormat::for_count(questions.len());
        Ok(ValidSchema {
            questions,
            ask: None,
            format,
            rules: crate::rules::Rules::default(),
            ..self.clone()
        })
    }

    /// Name the policy the schema came from (see [`ValidSchema::policy`]).
    pub fn with_policy(mut self, name: impl Into<String>) -> Self {
        self.policy = Some(name.into());
        self
    }

    /// Override the sample policy (e.g. from `dgem decide --samples`).
    pub fn with_samples(mut self, samples: SamplePolicy) -> Self {
        self.samples = samples;
        self
    }
}

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
    /// [`ISOLATE_MAX_QUESTIONS`](crate::schema::ISOLATE_MAX_QUESTIONS)) are the canvas's and do not apply. Only the
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
