//! The stage walker's bookkeeping, shared by every reader.
//!
//! A decision walks its stages (see [`crate::stages`]) in order. In each stage,
//! questions whose `ask_if` condition fails are skipped ([`Walk::ask`]); the rest
//! are split into groups ([`chunk_groups`]: an `alone` question is a group of its
//! own, the others fill groups while a reader-given fit test holds); a reader
//! reads each group (one joint canvas, or one cloze prompt) and hands back a
//! [`GroupReads`], which [`Walk::absorb`] folds in: answers, the answer lines
//! that later stages see prefilled, per-read tops and per-question diagnostics.
//! [`Walk::finish`] then builds the answers in schema order and the one
//! [`Diagnostics`] value of the decision.
//!
//! The async loop over stages and groups is `dgem_backend::walker::walk`, which
//! every reader runs under (cloze, joint canvas, vLLM); this module keeps the
//! synchronous bookkeeping it folds reads into, so a readout fix is made once.
//!
//! ```
//! use dgem_core::schema::{SchemaDefaults, ValidSchema};
//! use dgem_core::walk::chunk_groups;
//! let raw = serde_json::json!({"questions": [
//!     {"id": "a", "type": "noul"}, {"id": "b", "type": "noul", "alone": true},
//!     {"id": "c", "type": "noul"}]});
//! let s = ValidSchema::from_value(&raw, &SchemaDefaults::default())?;
//! let asked: Vec<_> = s.questions.iter().collect();
//! let groups = chunk_groups(&asked, |_| Ok::<_, ()>(true)).unwrap();
//! let ids: Vec<Vec<&str>> = groups.iter().map(|g| g.iter().map(|q| q.id.as_str()).collect()).collect();
//! assert_eq!(ids, vec![vec!["a"], vec!["b"], vec!["c"]]);
//! # Ok::<(), dgem_core::SchemaError>(())
//! ```

use std::collections::HashMap;

use indexmap::IndexMap;
use serde_json::{json, Value};

use crate::envelope::{
    AnswerOut, CalibrationDiagnostics, ChunkPromptUsed, Diagnostics, PartSamples,
    QuestionDiagnostics, ReadTops, SamplesDiagnostics, Scoring, Skip, SlotReading, Timing,
};
use crate::labels::LabelMode;
use crate::order::OrderSensitivity;
use crate::readout::{aggregate, argmax, SlotRead};
use crate::schema::{AnswerFormat, ChunkPrompt, Question, SamplePolicy, ValidSchema};
use crate::slots::answer_text;

/// Split the asked questions of one stage into groups, in order (the original
/// server's `chunk_groups`): an `alone` question closes the current group and
/// forms a group of its own; any other question joins the current group when
/// `fits(trial group)` holds, else it starts a new group. A single question
/// always forms a group, even when it does not fit (the reader then reports why).
///
/// # Errors
/// Whatever `fits` returns.
pub fn chunk_groups<'a, E>(
    asked: &[&'a Question],
    mut fits: impl FnMut(&[&'a Question]) -> Result<bool, E>,
) -> Result<Vec<Vec<&'a Question>>, E> {
    let mut groups: Vec<Vec<&'a Question>> = Vec::new();
    let mut cur: Vec<&'a Question> = Vec::new();
    for &q in asked {
        if q.is_alone() {
            if !cur.is_empty() {
                groups.push(std::mem::take(&mut cur));
            }
            groups.push(vec![q]);
            continue;
        }
        let mut trial = cur.clone();
        trial.push(q);
        if !cur.is_empty() && !fits(&trial)? {
            groups.push(std::mem::replace(&mut cur, vec![q]));
        } else {
            cur = trial;
        }
    }
    if !cur.is_empty() {
        groups.push(cur);
    }
    Ok(groups)
}

/// What a reader hands back for one group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupReads {
    /// The group's questions, in order.
    pub questions: Vec<Question>,
    /// Labels per question, in alternative order.
    pub labels: Vec<Vec<String>>,
    /// `reads[r][qi]`: read `r` of question `qi`, probabilities in original
    /// alternative order (after calibration when the reader calibrates). At least
    /// one read; every read holds one entry per question.
    pub reads: Vec<Vec<SlotRead>>,
    /// Token position of each question's slot (read 0).
    pub pos: Vec<usize>,
    /// How each question's options were scored.
    pub scoring: Vec<Scoring>,
    /// Per question, the mean distribution before calibration, when calibrated.
    pub uncalibrated: Vec<Option<Vec<f64>>>,
    /// Per question, the distribution of every option listing read (over all
    /// reads, original alternative order), when the reader debiases option
    /// order ([`crate::order`]); empty when it does not measure it. Gives each
    /// answer's [`crate::order::OrderSensitivity`].
    pub order_reads: Vec<Vec<Vec<f64>>>,
    /// Whether each read had a per-policy position prior divided out
    /// ([`crate::order::OrderDebias::Prior`]) instead of listings pooled;
    /// the answers then report [`OrderSensitivity::prior`].
    pub order_prior: bool,
    /// The samples policy block of this group (see [`policy_json`]).
    pub policy: Value,
    /// The thought this group wrote, if any.
    pub thought: Option<Value>,
    /// Time waiting in a queue, ms.
    pub queue_ms: f64,
    /// Time in the model, ms.
    pub forward_ms: f64,
    /// Time spent on calibration reads, ms.
    pub calibration_ms: f64,
    /// Prompt tokens of the group's longest read.
    pub prompt_tokens: usize,
    /// Tokens whose KV state came from a prefix cache.
    pub cached_tokens: usize,
    /// Output rows this part read, the unit of `completion_tokens` /
    /// `output_tokens`. A canvas reader counts what the original structured
    /// server counts: the answer template's tokens, plus 1 for the end-of-turn
    /// token, plus the tokens of a thought the part wrote (once, however many
    /// samples it took). A cloze reader counts one answer position per question
    /// per read.
    pub rows: usize,
}

/// The `samples.policy` block: `{"mode":"fixed","n",…}` or
/// `{"mode":"auto","max","threshold","extended","first_read_entropy"}`.
pub fn policy_json(
    samples: SamplePolicy,
    extended: bool,
    first_read_entropy: &[(String, f64)],
) -> Value {
    match samples {
        SamplePolicy::Fixed { n } => {
            json!({"mode": "fixed", "n": n, "extended": null, "first_read_entropy": null})
        }
        SamplePolicy::Auto { max, threshold } => {
            let ents: serde_json::Map<String, Value> = first_read_entropy
                .iter()
                .map(|(id, h)| (id.clone(), json!(h)))
                .collect();
            json!({"mode": "auto", "max": max, "threshold": threshold,
                "extended": extended, "first_read_entropy": ents})
        }
    }
}

/// Facts about the reader, written into [`Diagnostics`] by [`Walk::finish`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReaderFacts {
    /// The runtime that runs the model (`llama.cpp`, `vllm`, …).
    pub runtime: String,
    /// Model id.
    pub model: String,
    /// Model file sha256, if known.
    pub model_sha256: Option<String>,
    /// Label mode in effect.
    pub label_mode: LabelMode,
    /// How slots were read.
    pub slot_reading: SlotReading,
    /// Whether backend entropy is over labels only.
    pub constrained: bool,
    /// The content-free states used for contextual calibration, when on.
    pub calibration: Option<Vec<String>>,
    /// Whether the decision was chained (more than one stage, or sequential): its
    /// prompts list every question (`chunk_prompt` reads `full`).
    pub chained: bool,
    /// The thought of a chained prefix, if one was written.
    pub prefix_thought: Option<Value>,
    /// Tokens of the state.
    pub state_tokens: usize,
    /// Earlier answers were restated in the state's text (an image state)
    /// rather than prefilled as tokens: `conditioning` reads `restated`.
    pub restated: bool,
    /// Hash of the question block's wording, when the reader can change it.
    pub prompt_wording: Option<String>,
}

/// One group already answered: its questions and the index of each one's
/// chosen alternative (in the question's own order). A reader that lists
/// options in another order than [`Walk::lines`] was written in (order
/// debiasing) re-renders the group's answer line from this.
#[derive(Debug, Clone, PartialEq)]
pub struct AnsweredGroup {
    /// The group's questions, in order.
    pub questions: Vec<Question>,
    /// Per question, the chosen alternative's index.
    pub chosen: Vec<usize>,
}

/// Everything accumulated over a decision's groups.
#[derive(Debug, Default)]
pub struct Walk {
    answers: IndexMap<String, Option<AnswerOut>>,
    names: HashMap<String, Option<String>>,
    skipped: IndexMap<String, Skip>,
    lines: Vec<String>,
    answered: Vec<AnsweredGroup>,
    earlier: Vec<String>,
    stages: Vec<Vec<String>>,
    chunks: Vec<Vec<String>>,
    qdiag: IndexMap<String, QuestionDiagnostics>,
    parts: Vec<PartSamples>,
    thoughts: Vec<Value>,
    timing: Timing,
    prompt_tokens: usize,
    cached_tokens: usize,
    rows: usize,
}

impl Walk {
    /// An empty walk.
    pub fn new() -> Self {
        Self::default()
    }

    /// The stage's questions whose `ask_if` conditions hold, in order; the others
    /// are recorded as skipped (answer `null`). A non-empty result is recorded as
    /// one stage.
    pub fn ask<'a>(&mut self, schema: &'a ValidSchema, stage: &[String]) -> Vec<&'a Question> {
        let mut asked = Vec::new();
        for id in stage {
            let Some(q) = schema.question(id) else {
                continue;
            };
            let failed = q.ask_if.iter().find(|(dep, vals)| {
                let was = self.names.get(*dep).cloned().flatten();
                !was.as_ref().is_some_and(|w| vals.contains(w))
            });
            if let Some((dep, vals)) = failed {
                let was = self.names.get(dep).cloned().flatten();
                self.skipped.insert(
                    q.id.clone(),
                    Skip {
                        because: dep.clone(),
                        was,
                        wanted: vals.clone(),
                    },
                );
                self.answers.insert(q.id.clone(), None);
                self.names.insert(q.id.clone(), None);
                continue;
            }
            asked.push(q);
        }
        if !asked.is_empty() {
            self.stages
                .push(asked.iter().map(|q| q.id.clone()).collect());
        }
        asked
    }

    /// Answer lines of the groups absorbed so far (one entry per group, each the
    /// group's answer template with the chosen labels), for prefilling later stages.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The groups absorbed so far with their chosen alternatives, one entry
    /// per entry of [`Walk::lines`].
    pub fn answered(&self) -> &[AnsweredGroup] {
        &self.answered
    }

    /// `"<id>: <answer name>"` for every question answered so far, in the
    /// order answered: what an image state restates in its text for later
    /// stages, since its prompt cannot be prefilled with tokens.
    pub fn earlier(&self) -> &[String] {
        &self.earlier
    }

    /// Fold one group's reads in (the original server's `absorb`). Questions are
    /// answered by the mean over reads; the chosen labels extend [`Walk::lines`].
    pub fn absorb(&mut self, out: GroupReads, format: AnswerFormat) {
        let n = u32::try_from(out.reads.len()).unwrap_or(u32::MAX);
        self.timing.reads += n;
        self.timing.queue_ms += out.queue_ms;
        self.timing.forward_ms += out.forward_ms;
        self.timing.calibration_ms += out.calibration_ms;
        self.prompt_tokens = self.prompt_tokens.max(out.prompt_tokens);
        self.cached_tokens += out.cached_tokens;
        self.rows += out.rows;
        let mut tops: Vec<ReadTops> = vec![ReadTops::new(); out.reads.len()];
        self.thoughts.extend(out.thought);
        self.chunks
            .push(out.questions.iter().map(|q| q.id.clone()).collect());
        let mut chosen = Vec::with_capacity(out.questions.len());
        for (qi, q) in out.questions.iter().enumerate() {
            let per_read: Vec<&SlotRead> = out.reads.iter().filter_map(|r| r.get(qi)).collect();
            let labels = out.labels.get(qi).cloned().unwrap_or_default();
            for (read_tops, r) in tops.iter_mut().zip(&per_read) {
                let top = argmax(&r.probs);
                let label = labels.get(top).cloned().unwrap_or_default();
                let p = r.probs.get(top).copied().unwrap_or(0.0);
                read_tops.insert(q.id.clone(), (label, p, r.entropy));
            }
            let dists: Vec<Vec<f64>> = per_read.iter().map(|r| r.probs.clone()).collect();
            if let Some(r0) = per_read.first() {
                self.qdiag.insert(
                    q.id.clone(),
                    QuestionDiagnostics {
                        pos: out.pos.get(qi).copied().unwrap_or(0),
                        entropy: per_read.iter().map(|r| r.entropy).collect(),
                        label_mass: r0.label_mass,
                        argmax_is_label: r0.argmax_is_label,
                        scoring: out.scoring.get(qi).copied().unwrap_or_default(),
                        uncalibrated: out.uncalibrated.get(qi).cloned().flatten(),
                    },
                );
            }
            let mut answer = AnswerOut::new(q.clone(), labels, aggregate(&dists));
            answer.order = if out.order_prior {
                Some(OrderSensitivity::prior())
            } else {
                out.order_reads
                    .get(qi)
                    .filter(|o| !o.is_empty())
                    .map(|o| OrderSensitivity::from_orders(o, answer.aggregate.top, per_read.len()))
            };
            chosen.push(answer.aggregate.top);
            self.names
                .insert(q.id.clone(), Some(answer.answer_name().to_owned()));
            self.earlier
                .push(format!("{}: {}", q.id, answer.answer_name()));
            self.answers.insert(q.id.clone(), Some(answer));
        }
        let refs: Vec<&Question> = out.questions.iter().collect();
        self.lines
            .push(answer_text(&refs, &out.labels, &chosen, format));
        self.answered.push(AnsweredGroup {
            questions: out.questions.clone(),
            chosen,
        });
        self.parts.push(PartSamples {
            n,
            tops,
            policy: out.policy,
        });
    }

    /// The answers in schema order over the asked questions (`None` = skipped),
    /// and the decision's diagnostics. `timing.total_ms` is left 0 for the caller.
    pub fn finish(
        mut self,
        schema: &ValidSchema,
        facts: ReaderFacts,
    ) -> (IndexMap<String, Option<AnswerOut>>, Diagnostics) {
        let answers: IndexMap<String, Option<AnswerOut>> = schema
            .asked()
            .iter()
            .filter_map(|q| self.answers.shift_remove(&q.id).map(|a| (q.id.clone(), a)))
            .collect();
        let flat = self.parts.len() == 1 && self.skipped.is_empty();
        let thought = facts
            .prefix_thought
            .clone()
            .or_else(|| match self.thoughts.len() {
                0 => None,
                1 => self.thoughts.pop(),
                _ => Some(Value::Array(self.thoughts)),
            });
        // A chained prefix thought is read once for the whole decision.
        let prefix_rows = facts
            .prefix_thought
            .as_ref()
            .and_then(|t| t.get("tokens"))
            .and_then(Value::as_u64)
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let chunk_prompt = if facts.chained {
            ChunkPromptUsed::Full
        } else if schema.chunk_prompt == ChunkPrompt::Shared {
            ChunkPromptUsed::Shared
        } else {
            ChunkPromptUsed::Own
        };
        // Earlier answers were prefilled only when a later stage was read (or
        // groups ran in order): with every later stage skipped there was none.
        let conditioned = self.stages.len() > 1 || schema.sequential;
        let diagnostics = Diagnostics {
            multi: IndexMap::new(),
            constraints: Vec::new(),
            steps: schema.steps,
            layout: schema.layout,
            isolated: schema.isolated(),
            stages: self.stages,
            skipped: self.skipped,
            chunks: self.chunks,
            chunk_prompt,
            sequential: schema.sequential,
            conditioning: conditioned.then(|| {
                if facts.restated {
                    "restated"
                } else {
                    "prefill"
                }
                .to_owned()
            }),
            thought,
            samples: SamplesDiagnostics {
                parts: self.parts,
                flat,
            },
            timing: self.timing,
            prompt_tokens: Some(self.prompt_tokens).filter(|&n| n > 0),
            cached_tokens: self.cached_tokens,
            rows: self.rows.saturating_add(prefix_rows),
            state_tokens: facts.state_tokens,
            questions: self.qdiag,
            runtime: facts.runtime,
            constrained: facts.constrained,
            model: facts.model,
            model_sha256: facts.model_sha256,
            label_mode: facts.label_mode,
            slot_reading: facts.slot_reading,
            calibration: facts.calibration.map(CalibrationDiagnostics::contextual),
            note: None,
            prompt_wording: facts.prompt_wording,
            brackets: IndexMap::new(),
            renormalized: IndexMap::new(),
            warnings: Vec::new(),
        };
        (answers, diagnostics)
    }
}

#[cfg(test)]
mod tests;
