//! One group of questions read on one canvas: the optional thought, the answer
//! template, the seeded reads and the sample policy (serving.md §6.2–6.4,
//! §7.5–7.7).

use std::time::Instant;

use dgem_backend::BackendError;
use dgem_backend::DecideError;
use std::sync::Arc;

use dgem_core::envelope::Scoring;
use dgem_core::images::ImageState;
use dgem_core::labels::labels_for;
use dgem_core::prompt::{document_first_content, gemma_chat_prompt};
use dgem_core::readout::{auto_extends, sample_plan, SlotRead};
use dgem_core::schema::{Layout, Question, SamplePolicy, ValidSchema};
use dgem_core::slots::{
    answer_text, canvas_width, resolve_template, seed_canvas, CanvasTokens, ResolvedTemplate,
    TemplateSpec,
};
use dgem_core::tokenizer::TokenId;
use dgem_core::walk::GroupReads;
use dgem_core::CoreError;
use serde_json::{json, Map, Value};

use crate::config::READ_SEED_STRIDE;
use crate::wire::{self, Prompt, ReadSpec};
use crate::VllmDecider;

/// How a group's prompt is formed before its own thought (if any).
#[derive(Debug, Clone)]
pub(crate) enum Route {
    /// Chat messages from the group's system text and the state.
    Chat,
    /// A token-id prompt (a chained prefix, possibly with earlier answers).
    Tokens(Vec<TokenId>),
}

/// The state as one group's prompt carries it.
#[derive(Debug, Clone)]
pub(crate) enum UserState {
    /// A text state (a string, or JSON written Python-style).
    Text(String),
    /// An image state. `text` stands for its text parts; when `restated`, it
    /// also restates the earlier answers (images cannot be prefilled as tokens).
    Image {
        image: Arc<ImageState>,
        text: String,
        restated: bool,
    },
}

/// What a group sends (serving.md §7.5 table).
#[derive(Debug, Clone)]
pub(crate) struct GroupPlan {
    pub questions: Vec<Question>,
    pub user: UserState,
    pub route: Route,
    pub sys: String,
    pub head: Vec<TokenId>,
    pub lead: String,
    /// Thought budget of this group (0 = none).
    pub think: u32,
}

/// A thought and the token prefix it yields.
pub(crate) struct Thought {
    pub prefix: Vec<TokenId>,
    /// Tokens the thought wrote.
    pub tokens: usize,
    pub diagnostics: Value,
}

struct ReadCtx {
    prompt: Prompt,
    template: ResolvedTemplate,
    width: usize,
    label_ids: Vec<TokenId>,
    pinned: Option<Vec<usize>>,
    steps: u32,
}

fn core(e: dgem_core::tokenizer::TokenizeError) -> DecideError {
    DecideError::from(CoreError::from(e))
}

impl VllmDecider {
    /// The chat messages of a read (serving.md §4.3): one user message for
    /// `document_first`; `[system: question block, user: state]` for
    /// `schema_first`, as the original server sends them. An image state's
    /// user message is its image parts, then one text part (for
    /// `document_first`, the text wrapped with the question block); a
    /// `schema_first` image state goes as sent unless its text was restated.
    pub(crate) fn messages(layout: Layout, sys: &str, user: &UserState) -> Value {
        match (layout, user) {
            (Layout::DocumentFirst, UserState::Text(state)) => {
                json!([{"role": "user", "content": document_first_content(sys, state)}])
            }
            (Layout::SchemaFirst, UserState::Text(state)) => json!([
                {"role": "system", "content": sys},
                {"role": "user", "content": state},
            ]),
            (Layout::DocumentFirst, UserState::Image { image, text, .. }) => json!([
                {"role": "user", "content": image.parts_with_text(document_first_content(sys, text))}
            ]),
            (
                Layout::SchemaFirst,
                UserState::Image {
                    image,
                    text,
                    restated,
                },
            ) => {
                let content = if *restated {
                    image.parts_with_text(text.clone())
                } else {
                    Value::Array(image.parts.clone())
                };
                json!([{"role": "system", "content": sys}, {"role": "user", "content": content}])
            }
        }
    }

    /// `chat_prompt_ids`: BOS plus the Gemma chat turn, ending where the model answers.
    pub(crate) fn chat_prompt_ids(
        &self,
        layout: Layout,
        sys: &str,
        state: &str,
    ) -> Result<Vec<TokenId>, DecideError> {
        let mut ids: Vec<TokenId> = self.tok.bos_id().into_iter().collect();
        ids.extend(
            self.tok
                .encode(&gemma_chat_prompt(layout, sys, state))
                .map_err(core)?,
        );
        Ok(ids)
    }

    /// Write a thought through `/v1/completions` (serving.md §5.3 `think()`).
    #[tracing::instrument(skip_all, fields(budget))]
    pub(crate) async fn think(
        &self,
        layout: Layout,
        sys: &str,
        state: &str,
        budget: u32,
    ) -> Result<Thought, DecideError> {
        let started = Instant::now();
        let mut prompt = self.chat_prompt_ids(layout, sys, state)?;
        prompt.extend(&self.scaffold.open);
        let body = wire::think_body(
            &self.cfg.served_model,
            &prompt,
            budget,
            &self.scaffold.close,
        );
        let reply = self.client.post(wire::COMPLETIONS_PATH, &body).await?;
        let (ids, closed) = wire::parse_think(&reply, self.scaffold.close.first().copied())?;
        let diagnostics = json!({
            "tokens": ids.len(), "closed": closed,
            "ms": started.elapsed().as_secs_f64() * 1e3, "text": self.tok.decode(&ids),
        });
        let tokens = ids.len();
        prompt.extend(ids);
        prompt.extend(&self.scaffold.close);
        Ok(Thought {
            prefix: prompt,
            tokens,
            diagnostics,
        })
    }

    /// Write a thought about an image state through the chat route
    /// (serving.md §5.3 `think_chat()`, §7.6). The thought is seeded into the
    /// canvas ahead of the answer, so the canvas bounds it: the budget is
    /// `min(think, canvas − 1 − open − close − answer template)`, and below 8
    /// tokens the request is refused. Returns the canvas head
    /// `open + thought + close` and the thought's diagnostics.
    async fn think_chat(
        &self,
        schema: &ValidSchema,
        plan: &GroupPlan,
        think: u32,
    ) -> Result<(Vec<TokenId>, Value), DecideError> {
        let started = Instant::now();
        let refs: Vec<&Question> = plan.questions.iter().collect();
        let labels: Vec<Vec<String>> = refs.iter().map(|q| labels_for(q, self.mode)).collect();
        let answer = answer_text(&refs, &labels, &vec![0; refs.len()], schema.format);
        let answer_len = self.tok.encode(&answer).map_err(core)?.len();
        let sc = &self.scaffold;
        let fits = self
            .cfg
            .canvas_len
            .saturating_sub(1 + sc.open.len() + sc.close.len() + answer_len);
        if fits < 8 {
            return Err(CoreError::Schema(dgem_core::SchemaError::new(
                "think",
                format!(
                    "think: a thought about images is written on the canvas of {} tokens, \
                     which leaves {fits} tokens beside this answer template; at least 8 are needed \
                     (ask fewer questions per read, or set think to 0)",
                    self.cfg.canvas_len
                ),
            ))
            .into());
        }
        let budget = think.min(u32::try_from(fits).unwrap_or(u32::MAX));
        let messages = Self::messages(schema.layout, &plan.sys, &plan.user);
        let body = wire::think_chat_body(&self.cfg.served_model, &messages, budget, &sc.close);
        let reply = self.client.post(wire::CHAT_PATH, &body).await?;
        let (ids, closed) = wire::parse_think_chat(&reply, &sc.open, sc.close.first().copied())?;
        let diagnostics = json!({
            "tokens": ids.len(), "closed": closed,
            "ms": started.elapsed().as_secs_f64() * 1e3, "text": self.tok.decode(&ids),
            "budget": budget,
        });
        let mut head = sc.open.clone();
        head.extend(ids);
        head.extend(&sc.close);
        Ok((head, diagnostics))
    }

    /// Run one group with group index `k` (seed `S + 104729·k`).
    #[tracing::instrument(skip_all, fields(k, questions = plan.questions.len()))]
    pub(crate) async fn run_group(
        &self,
        schema: &ValidSchema,
        plan: GroupPlan,
        seed_k: i64,
    ) -> Result<GroupReads, DecideError> {
        let mut head = plan.head.clone();
        let mut thought = None;
        // Thought tokens counted apart from the template (a text thought is
        // in the prompt; an image thought is in the template's head already).
        let mut thought_rows = 0;
        let prompt = match (&plan.user, plan.think) {
            (UserState::Text(state), think) if think > 0 => {
                let t = self.think(schema.layout, &plan.sys, state, think).await?;
                head.clear();
                thought_rows = t.tokens;
                thought = Some(t.diagnostics);
                Prompt::Tokens(t.prefix)
            }
            (UserState::Image { .. }, think) if think > 0 => {
                let (h, diagnostics) = self.think_chat(schema, &plan, think).await?;
                head = h;
                thought = Some(diagnostics);
                Prompt::Chat {
                    messages: Self::messages(schema.layout, &plan.sys, &plan.user),
                    enable_thinking: true,
                }
            }
            _ => match plan.route {
                Route::Chat => Prompt::Chat {
                    messages: Self::messages(schema.layout, &plan.sys, &plan.user),
                    enable_thinking: false,
                },
                Route::Tokens(ids) => Prompt::Tokens(ids),
            },
        };
        let refs: Vec<&Question> = plan.questions.iter().collect();
        let labels: Vec<Vec<String>> = refs.iter().map(|q| labels_for(q, self.mode)).collect();
        let template = resolve_template(
            self.tok.as_ref(),
            &TemplateSpec {
                questions: &refs,
                labels: &labels,
                head: &head,
                lead: &plan.lead,
                format: schema.format,
                canvas_len: self.cfg.canvas_len,
            },
        )?;
        let width = canvas_width(
            template.tokens.len(),
            self.cfg.canvas_len,
            self.cfg.canvas_step,
        );
        let label_ids = wire::label_id_set(&template.slots)?;
        let pinned = (schema.steps > 1).then(|| wire::pinned_positions(width, &template.slots));
        let ctx = ReadCtx {
            prompt,
            width,
            label_ids,
            pinned,
            steps: schema.steps,
            template,
        };
        let started = Instant::now();
        let (first, extra) = sample_plan(schema.samples);
        let seeds = (0..i64::from(first)).map(|j| seed_k + j * READ_SEED_STRIDE);
        let (mut reads, mut prompt_tokens) = self.batch(&ctx, seeds).await?;
        let policy = match schema.samples {
            SamplePolicy::Fixed { n } => {
                json!({"mode": "fixed", "n": n, "extended": null, "first_read_entropy": null})
            }
            SamplePolicy::Auto { max, threshold } => {
                let ents: Vec<f64> = reads[0].iter().map(|r| r.entropy).collect();
                let extended = auto_extends(schema.samples, &ents);
                if extended {
                    let seeds = (0..i64::from(extra)).map(|j| seed_k + 1 + j * READ_SEED_STRIDE);
                    let (more, pt) = self.batch(&ctx, seeds).await?;
                    reads.extend(more);
                    prompt_tokens = prompt_tokens.or(pt);
                }
                let first_read: Map<String, Value> = plan
                    .questions
                    .iter()
                    .zip(&ents)
                    .map(|(q, h)| (q.id.clone(), json!(h)))
                    .collect();
                json!({"mode": "auto", "max": max, "threshold": threshold,
                       "extended": extended, "first_read_entropy": first_read})
            }
        };
        let n = plan.questions.len();
        // serving.md §7.8: the template (with an image thought in its head),
        // its end-of-turn token, and a text thought written before it.
        let rows = (ctx.template.tokens.len() + 1).saturating_add(thought_rows);
        Ok(GroupReads {
            questions: plan.questions,
            labels,
            pos: ctx.template.slots.iter().map(|s| s.pos).collect(),
            scoring: vec![Scoring::Canvas; n],
            uncalibrated: vec![None; n],
            order_reads: vec![Vec::new(); n],
            order_prior: false,
            reads,
            policy,
            thought,
            queue_ms: 0.0,
            forward_ms: started.elapsed().as_secs_f64() * 1e3,
            calibration_ms: 0.0,
            prompt_tokens: prompt_tokens.unwrap_or(0),
            cached_tokens: 0,
            rows,
        })
    }

    /// Reads with these seeds, sent concurrently; the first error is returned
    /// after all of them finish (serving.md §6.2).
    async fn batch(
        &self,
        ctx: &ReadCtx,
        seeds: impl Iterator<Item = i64>,
    ) -> Result<(Vec<Vec<SlotRead>>, Option<usize>), BackendError> {
        let futs = seeds.map(|s| self.one_read(ctx, s));
        let results = futures_util::future::join_all(futs).await;
        let mut reads = Vec::with_capacity(results.len());
        let mut prompt_tokens = None;
        for r in results {
            let (read, pt) = r?;
            prompt_tokens = prompt_tokens.or(pt);
            reads.push(read);
        }
        Ok((reads, prompt_tokens))
    }

    /// One seeded read (serving.md §5.1/§5.2, scoring §6.1).
    async fn one_read(
        &self,
        ctx: &ReadCtx,
        seed: i64,
    ) -> Result<(Vec<SlotRead>, Option<usize>), BackendError> {
        let t = &self.cfg.tokens;
        let canvas = seed_canvas(
            &ctx.template,
            ctx.width,
            seed,
            CanvasTokens {
                turn_close: t.turn_close,
                pad: t.pad,
                vocab: t.vocab,
            },
        );
        let body = wire::read_body(&ReadSpec {
            model: &self.cfg.served_model,
            prompt: &ctx.prompt,
            template_len: ctx.template.tokens.len(),
            canvas: &canvas,
            label_ids: &ctx.label_ids,
            steps: ctx.steps,
            pinned: ctx.pinned.as_deref(),
            constrained: self.cfg.constrained,
        });
        let path = ctx.prompt.path();
        let reply = self.client.post(path, &body).await?;
        let positions: Vec<usize> = ctx.template.slots.iter().map(|s| s.pos).collect();
        let parsed = wire::parse_read(path, &reply, &positions)?;
        let reads = parsed
            .tops
            .iter()
            .zip(&ctx.template.slots)
            .map(|(top, slot)| SlotRead::from_top_logprobs(top, &slot.label_ids))
            .collect();
        Ok((reads, parsed.prompt_tokens))
    }
}
