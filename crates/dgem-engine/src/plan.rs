//! Plan mode: every read of a decision resolved without running the model.
//!
//! [`Engine::plan`] walks the stages and groups exactly as a decision would,
//! builds each read's prompt, resolves every question's slot and label token
//! ids and says how its options are scored, but sends nothing to the backend.
//! What a plan cannot know is what the model will answer: it assumes no
//! `ask_if` skip and prefills later stages (and, in a sequential policy,
//! later groups) with each earlier question's first label (the same
//! stand-in the answer template uses), so a later stage's prompt tokens are
//! an estimate of length, exact in structure.

use std::time::Instant;

use dgem_backend::walker::listed_questions;
use dgem_core::envelope::Scoring;
use dgem_core::labels::labels_for;
use dgem_core::prompt::state_text;
use dgem_core::readout::sample_plan;
use dgem_core::schema::Question;
use dgem_core::slots::answer_text;
use dgem_core::tokenizer::TokenId;
use dgem_core::walk::chunk_groups;
use serde::Serialize;

use crate::cloze::{prefill_text, question_sequences, Ctx};
use crate::{DecideError, DecideRequest, Engine};

/// One question's slot in read 0 of its group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedSlot {
    /// Question id.
    pub id: String,
    /// How its options are scored.
    pub scoring: Scoring,
    /// Labels in alternative order.
    pub labels: Vec<String>,
    /// Position (0-based) of the first answer token in its sequences.
    pub pos: usize,
    /// Per label: the pooled first-token ids (first-token scoring) or the whole
    /// continuation scored (sequence scoring).
    pub label_ids: Vec<Vec<TokenId>>,
    /// Sequences sent to the backend for this question per read (1, or one per
    /// option for sequence scoring).
    pub sequences: usize,
}

/// One group: the questions read together from one prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedGroup {
    /// Ids of the questions read in this group.
    pub ids: Vec<String>,
    /// Ids of the questions the prompt lists.
    pub listed: Vec<String>,
    /// Prompt tokens of read 0 (BOS, chat turn, prefill).
    pub prompt_tokens: usize,
    /// The prompt of read 0 as text.
    pub prompt: String,
    /// Reads run first (samples; `auto` may add more).
    pub reads: u32,
    /// Further reads when an `auto` policy extends.
    pub extra_reads_if_extended: u32,
    /// Option listings per read ([`dgem_core::order`]): the canonical order
    /// and its cyclic rotations, one prompt each (1 with order debiasing off,
    /// and under `prior` once the policy's prior is learned: its first three
    /// decisions read every rotation).
    pub listings: usize,
    /// Sequences per read over all questions of the group and all listings.
    pub sequences_per_read: usize,
    /// The slots (of listing 0).
    pub slots: Vec<PlannedSlot>,
}

/// A choice question with more than 26 options, answered through brackets.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedBrackets {
    /// Options of the question.
    pub options: usize,
    /// Size of each round-1 bracket.
    pub brackets: Vec<usize>,
    /// Decisions of round 1 (up to 8 brackets each); the final adds one more.
    pub round1_decisions: usize,
    /// Round 1 of the first pass, planned like any other decision (the final
    /// round's options depend on round 1's answers).
    pub round1: Box<Plan>,
}

/// A whole decision's plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// `cloze`.
    pub slot_reading: String,
    /// The runtime that runs the model (`llama.cpp`, …), written `engine`.
    #[serde(rename = "engine")]
    pub runtime: String,
    /// Model id.
    pub model: String,
    /// `letters` or `words`.
    pub label_mode: String,
    /// Whether contextual calibration reads (content-free states) are added.
    pub calibration: bool,
    /// Questions read alone (stated or by `isolate`).
    pub isolated: Vec<String>,
    /// The `isolate` rule requested.
    pub isolate: String,
    /// Per stage, its groups.
    pub stages: Vec<Vec<PlannedGroup>>,
    /// Backend calls of a decision with no `auto` extension and priors cached.
    pub forward_calls: usize,
    /// Sequences of those calls.
    pub sequences: usize,
    /// Tokens of the state.
    pub state_tokens: usize,
    /// Time spent planning, ms.
    pub plan_ms: f64,
    /// Questions answered through brackets (absent when none); `stages` then
    /// plans the other questions.
    #[serde(skip_serializing_if = "indexmap::IndexMap::is_empty")]
    pub brackets: indexmap::IndexMap<String, PlannedBrackets>,
}

impl Engine {
    /// Resolve every read of `req` without running the model (see the module docs).
    ///
    /// # Errors
    /// The same [`DecideError::Schema`] a decision would give for the schema and
    /// state (a prompt longer than the context, labels that tokenize alike).
    pub fn plan(&self, req: &DecideRequest) -> Result<Plan, DecideError> {
        let started = Instant::now();
        let mut owned = self.with_model_layout(req.clone());
        // A plan shows the schema the reader reads: multi questions as their
        // yes/no slots (rules change answers, not reads).
        owned.schema = dgem_backend::shape::read_schema(&owned.schema)?.0;
        let req = &crate::cloze::apart(owned);
        if dgem_backend::brackets::routes(&req.schema) {
            return self.plan_routed(req, started);
        }
        let schema = &req.schema;
        let tok_arc = self.backend().tokenizer();
        let info = self.backend().info();
        if info.attention != dgem_backend::Attention::Causal {
            return Err(DecideError::Unsupported(
                "plan mode resolves cloze reads of a causal backend".into(),
            ));
        }
        let ctx = Ctx {
            engine: self,
            tok: tok_arc.as_ref(),
            schema,
            seed: req.seed,
            calibrate: self.calibrates(),
            max_tokens: info.max_tokens,
            vocab: self.config.vocab_diagnostics,
            order: self.config.order_debias,
            chained: crate::cloze::chained(schema),
            state_ids: std::sync::Mutex::default(),
            special_states: std::sync::Mutex::default(),
            wording_used: std::sync::atomic::AtomicBool::new(false),
        };
        let mode = self.label_mode();
        let stages = dgem_core::stages::schedule(schema)?;
        let chained = stages.len() > 1 || schema.sequential;
        let state = state_text(&req.state);
        let (first, extra) = sample_plan(schema.samples);
        let every = schema.asked();
        let mut lines: Vec<String> = Vec::new();
        let mut planned = Vec::with_capacity(stages.len());
        let (mut calls, mut sequences) = (0, 0);
        for stage in &stages {
            let asked: Vec<&Question> = stage.iter().filter_map(|id| schema.question(id)).collect();
            let groups = chunk_groups(&asked, |_| Ok::<_, DecideError>(true))?;
            let mut out = Vec::with_capacity(groups.len());
            // As the walker reads them: the groups of one stage see the
            // answer lines of earlier stages only, unless the policy is
            // sequential (the plan prefilled each group with the ones before
            // it in its own stage, so its prompts and slot positions were
            // not the ones read; black-box run).
            let stage_lines = lines.clone();
            for group in groups {
                let listed = listed_questions(schema, &every, chained, &group);
                let seen = if schema.sequential {
                    &lines
                } else {
                    &stage_lines
                };
                let prefill = prefill_text(seen);
                let prompt = ctx.prompt(0, 0, &listed, &state, &prefill)?;
                let qs = ctx.read_questions(0, 0, &group)?;
                let listings = ctx.group_orders(&group);
                let mut slots = Vec::with_capacity(qs.len());
                for (q, rq) in group.iter().zip(&qs) {
                    // Only the slot positions are used here.
                    let seqs = question_sequences(&prompt, rq, info.max_tokens, false)?;
                    let pos = seqs
                        .first()
                        .and_then(|s| s.slots.first())
                        .map_or(0, |s| s.pos);
                    slots.push(PlannedSlot {
                        id: q.id.clone(),
                        scoring: rq.slot.scoring,
                        labels: labels_for(&dgem_core::order::listed(q, &rq.perm), mode),
                        pos,
                        label_ids: rq.slot.labels.clone(),
                        sequences: seqs.len(),
                    });
                }
                let per_read: usize = slots.iter().map(|s| s.sequences).sum::<usize>() * listings;
                calls += 1;
                sequences += per_read * first as usize;
                let labels: Vec<Vec<String>> = group.iter().map(|q| labels_for(q, mode)).collect();
                lines.push(answer_text(
                    &group,
                    &labels,
                    &vec![0; group.len()],
                    schema.format,
                ));
                out.push(PlannedGroup {
                    ids: group.iter().map(|q| q.id.clone()).collect(),
                    listed: listed.iter().map(|q| q.id.clone()).collect(),
                    prompt_tokens: prompt.tokens.len(),
                    prompt: tok_arc.decode(&prompt.tokens),
                    reads: first,
                    extra_reads_if_extended: extra,
                    listings,
                    sequences_per_read: per_read,
                    slots,
                });
            }
            planned.push(out);
        }
        let state_tokens = ctx.state_token_count(&state)?;
        Ok(Plan {
            slot_reading: "cloze".into(),
            runtime: info.runtime.clone(),
            model: info.model_id.clone(),
            label_mode: mode.as_str().to_owned(),
            calibration: ctx.calibrate,
            isolated: schema.isolated(),
            isolate: schema.isolate.as_str().to_owned(),
            stages: planned,
            forward_calls: calls,
            sequences,
            state_tokens,
            plan_ms: started.elapsed().as_secs_f64() * 1e3,
            brackets: indexmap::IndexMap::new(),
        })
    }

    /// Plan a schema holding choice questions of more than 26 options: the
    /// other questions as one part, and each routed question's first round-1 pass.
    fn plan_routed(&self, req: &DecideRequest, started: Instant) -> Result<Plan, DecideError> {
        use dgem_core::brackets::{
            bracket_question, needs_brackets, split, BRACKETS_PER_PASS, BRACKET_SIZE,
        };
        let schema = &req.schema;
        let part = |questions: Vec<Question>| -> Result<DecideRequest, DecideError> {
            Ok(DecideRequest {
                schema: schema.with_questions(questions)?,
                state: req.state.clone(),
                seed: req.seed,
            })
        };
        let asked = schema.asked();
        let narrow: Vec<Question> = asked
            .iter()
            .filter(|q| !needs_brackets(q))
            .map(|q| (*q).clone())
            .collect();
        let mut routed = indexmap::IndexMap::new();
        let mut first_round = None;
        for w in asked.iter().filter(|q| needs_brackets(q)) {
            let ranges = split(w.alternatives.len(), BRACKET_SIZE);
            let subs: Vec<Question> = ranges
                .iter()
                .enumerate()
                .take(BRACKETS_PER_PASS)
                .map(|(b, r)| bracket_question(w, b, r.clone()))
                .collect();
            let round1 = self.plan(&part(subs)?)?;
            if first_round.is_none() {
                first_round = Some(round1.clone());
            }
            routed.insert(
                w.id.clone(),
                PlannedBrackets {
                    options: w.alternatives.len(),
                    brackets: ranges.iter().map(|r| r.len()).collect(),
                    round1_decisions: ranges.len().div_ceil(BRACKETS_PER_PASS),
                    round1: Box::new(round1),
                },
            );
        }
        let mut plan = match (narrow.is_empty(), first_round) {
            (false, _) => self.plan(&part(narrow)?)?,
            (true, Some(p)) => Plan {
                stages: Vec::new(),
                forward_calls: 0,
                sequences: 0,
                ..p
            },
            (true, None) => {
                return Err(DecideError::Unsupported(
                    "nothing to plan — this is a bug".into(),
                ))
            }
        };
        plan.isolated = schema.isolated();
        plan.brackets = routed;
        plan.plan_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(plan)
    }
}
