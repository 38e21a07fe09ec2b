//! Cloze reading for causal backends: every question is read after `id:` at the
//! end of its group's prompt.
//!
//! The stage walk is the shared one ([`dgem_backend::walker`]): stages in order,
//! `ask_if` skips, groups from [`chunk_groups`] (an `alone` question gets a
//! prompt of its own; a causal read has no canvas, so the other questions of
//! a stage always share one group), earlier answers prefilled in the model's
//! turn. `alone` comes from the schema, from `isolate`, and from [`apart`]:
//! under `isolate: "auto"` with `document_first`, or `"all"`, every question
//! of a schema that is not chained is read apart, its prompt going on from the
//! end of the question block's head after the state (a reuse point, so the
//! KV of the state, the lead sentence and the policy's instructions is
//! decoded once per decision). Each question is then scored in one of
//! two ways ([`Scoring`]): from the one row after the cue when its options have
//! first tokens of their own, else by the log-likelihood of each option's whole
//! tokenization (one sequence per option, all sharing the prompt prefix, so the
//! backend decodes the prefix once and batches the continuations).

use dgem_backend::walker::{self, GroupCall, GroupReader};
use dgem_backend::{ForwardOutput, SequenceRead};
use dgem_core::envelope::Scoring;
use dgem_core::labels::labels_for;
use dgem_core::order::{self, canonical_order, digit_scale, pool_orders, rotation, OrderDebias};
use dgem_core::prompt::{
    chat_prompt, head_prefix_len, policy_prefix_len, state_head_len, state_prefix_len, state_range,
    state_text, system_head, system_text, SystemTextSpec,
};
use dgem_core::readout::SlotRead;
use dgem_core::schema::{AnswerFormat, Question, ValidSchema};
use dgem_core::slots::{
    python_random, python_randrange, resolve_cloze, ClozeSlot, READ_SEED_STRIDE,
};
use dgem_core::tokenizer::{encode_with_plain_span, TokenId, Tokenizer};
use dgem_core::walk::{GroupReads, ReaderFacts};

use crate::calibration::CONTENT_FREE_STATES;
use crate::{DecideError, DecideRequest, Decision, Engine};

mod priors;
mod reads;
mod sequences;

pub(crate) use sequences::{
    combine, label_read, question_sequences, short_model, Prompt, PromptText,
};

/// One question as listed in one read: alternatives possibly permuted.
pub(crate) struct ReadQuestion {
    /// `perm[i]` = original index of the alternative listed at position `i`.
    pub(crate) perm: Vec<usize>,
    pub(crate) slot: ClozeSlot,
}

/// What one read of one question gave, mapped back to original alternative order.
struct QRead {
    read: SlotRead,
    scoring: Scoring,
    /// The calibrated distribution of each listing read (original order).
    orders: Vec<Vec<f64>>,
    /// The uncalibrated distribution of each listing read (original order).
    raw_orders: Vec<Vec<f64>>,
    pos: usize,
}

impl QRead {
    /// Pool the listings read into `read.probs` ([`pool_orders`]).
    fn pool(&mut self) {
        if self.orders.len() > 1 {
            self.read.probs = pool_orders(&self.orders);
        }
    }

    /// The distribution before calibration, pooled over the listings read.
    fn raw(&self) -> Vec<f64> {
        pool_orders(&self.raw_orders)
    }
}

/// Accumulated counters of backend calls for one group.
#[derive(Default)]
struct Counters {
    queue_ms: f64,
    forward_ms: f64,
    calibration_ms: f64,
    prompt_tokens: usize,
    cached_tokens: usize,
    /// Answer positions read: one per question per listing per read.
    rows: usize,
}

impl Counters {
    fn absorb(&mut self, out: &ForwardOutput) {
        self.queue_ms += out.stats.queue_ms;
        self.forward_ms += out.stats.forward_ms;
        self.cached_tokens += out.stats.cached_tokens;
    }
}

/// Permutation of `k` alternatives for read `r` (identity for read 0).
pub(crate) fn permutation(k: usize, seed: i64, r: u32, qi: usize) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..k).collect();
    if r == 0 {
        return perm;
    }
    let mut rng = python_random(seed + READ_SEED_STRIDE * i64::from(r) + qi as i64);
    for i in (1..k).rev() {
        let j = python_randrange(&mut rng, u32::try_from(i + 1).unwrap_or(u32::MAX)) as usize;
        perm.swap(i, j);
    }
    perm
}

pub(crate) struct Ctx<'a> {
    pub(crate) engine: &'a Engine,
    pub(crate) tok: &'a dyn Tokenizer,
    pub(crate) schema: &'a ValidSchema,
    pub(crate) seed: i64,
    pub(crate) calibrate: bool,
    pub(crate) max_tokens: usize,
    /// Ask the backend for full-vocabulary readings
    /// ([`crate::EngineConfig::vocab_diagnostics`]).
    pub(crate) vocab: bool,
    /// Option-order debiasing ([`dgem_core::order`]).
    pub(crate) order: OrderDebias,
    /// The policy is read in stages ([`chained`]): its prompts have a reuse
    /// point at the end of the chat turn, so its reads' chunk plans, and
    /// the last digits of their numbers, differ from an unchained policy's
    /// with the same text; the prior keys say which.
    pub(crate) chained: bool,
    /// Tokens of the state prefixes this decision's prompts begin with
    /// ([`dgem_core::prompt::state_prefix_len`], and with the question
    /// block's head, [`dgem_core::prompt::head_prefix_len`]): the state's and
    /// each content-free state's, encoded once per decision.
    pub(crate) state_ids: std::sync::Mutex<Vec<(String, std::sync::Arc<Vec<TokenId>>)>>,
    /// Per state text (the state's, each content-free state's): whether it
    /// holds a special-token string ([`Self::encode_prompt`]).
    pub(crate) special_states: std::sync::Mutex<Vec<(String, bool)>>,
    /// Set once a prompt is written in [`crate::EngineConfig::wording`]
    /// (reads in the `lines` answer format only; see [`Self::prompt_text`]),
    /// so the decision echoes that wording's hash only when it was used.
    pub(crate) wording_used: std::sync::atomic::AtomicBool,
}

impl Ctx<'_> {
    fn schema_index(&self, q: &Question) -> usize {
        self.schema
            .questions
            .iter()
            .position(|x| x.id == q.id)
            .unwrap_or(0)
    }

    /// The listing of `q`'s alternatives in listing `t` of read `r`:
    /// `perm[i]` is the original index listed at position `i`. With order
    /// debiasing on, the canonical listing ([`canonical_order`]); a later
    /// read (sample) permutes it with its seed; listing `t` rotates it by the
    /// `t`-th of [`shifts`] (wrapping for a question read in fewer listings
    /// than its group).
    pub(crate) fn listing(&self, q: &Question, r: u32, t: usize) -> Vec<usize> {
        let k = q.alternatives.len();
        let mode = self.engine.label_mode();
        if digit_scale(q, mode) {
            // Its labels are its levels' digits: listed as the scale, always.
            return (0..k).collect();
        }
        let base = match self.order {
            OrderDebias::Off => (0..k).collect(),
            OrderDebias::Cyclic { .. } | OrderDebias::Prior { .. } => canonical_order(q),
        };
        let seeded = permutation(k, self.seed, r, self.schema_index(q));
        let base: Vec<usize> = seeded.iter().map(|&i| base[i]).collect();
        rotation(self.order, q, mode, t, base)
    }

    /// Listings read per read of `group`: the most any of its questions needs
    /// ([`OrderDebias::reads_for`]: 1 under `off` and `prior`).
    pub(crate) fn group_orders(&self, group: &[&Question]) -> usize {
        group
            .iter()
            .map(|q| self.order.reads_for(q, self.engine.label_mode()))
            .max()
            .unwrap_or(1)
    }

    /// Questions of listing `t` of read `r`, with permutation and cloze slot.
    pub(crate) fn read_questions(
        &self,
        r: u32,
        t: usize,
        group: &[&Question],
    ) -> Result<Vec<ReadQuestion>, DecideError> {
        let mode = self.engine.label_mode();
        group
            .iter()
            .map(|q| {
                let qi = self.schema_index(q);
                let perm = self.listing(q, r, t);
                let question = order::listed(q, &perm);
                let slot = resolve_cloze(self.tok, &question, qi, &labels_for(&question, mode))?;
                Ok(ReadQuestion { perm, slot })
            })
            .collect()
    }

    /// The prompt tokens (BOS, chat turn listing `listed`, prefill) for
    /// listing `t` of read `r`.
    pub(crate) fn prompt(
        &self,
        r: u32,
        t: usize,
        listed: &[&Question],
        state: &str,
        prefill: &str,
    ) -> Result<Prompt, DecideError> {
        self.tokens_of(&self.prompt_text(r, t, listed, state), prefill)
    }

    /// BOS, then `text` (a [`Self::prompt_text`]) and `prefill` encoded, with
    /// the reuse points: the end of the policy prefix and, past it, of the
    /// state's head when the state is a JSON object (`schema_first`; the
    /// later of the two is the policy point, the last one every decision
    /// on a state of the same shape shares), the end of the state and the end of the question
    /// block's head after it (`document_first`), each when its tokens begin
    /// the prompt's (tokenizing may merge across the seam; then there is no
    /// point there), and, for a chained policy only, the end of the chat
    /// turn, which every later stage's prompt (the same turn, earlier answers
    /// prefilled) shares. An unchained prompt shares nothing past its last
    /// other point with any other decision's, so what follows it is decoded
    /// in one batch with the slots' rows.
    fn tokens_of(&self, text: &PromptText, prefill: &str) -> Result<Prompt, DecideError> {
        let mut tokens: Vec<TokenId> = self.tok.bos_id().into_iter().collect();
        let bos = tokens.len();
        tokens.extend(self.encode_prompt(&text.text, &text.state_range)?);
        let mut reuse_points = Vec::with_capacity(3);
        let mut policy_point = None;
        // The policy's end and, past it, the state's head (`{"ticket": `),
        // with the quote that opens a string value where the tokenizer writes
        // it apart from the value's first word. Both texts are the same for
        // every decision of the policy on states of one shape, so their
        // tokens come from the engine's prefix cache.
        let policy = |prefix: &str| self.engine.prefix_tokens(self.tok, prefix);
        if let Some(end) = first_point(&tokens, bos, &text.text, [text.prefix_len], policy)? {
            reuse_points.push(end);
            policy_point = Some(end);
            let head = text.state_head_len.map_or([None, None], |n| {
                let quoted = Some(n + 1).filter(|&m| text.text.get(n..m) == Some("\""));
                [quoted, Some(n)]
            });
            if let Some(end) = first_point(&tokens, bos, &text.text, head, policy)? {
                reuse_points.push(end);
                policy_point = Some(end);
            }
        }
        // The state's end, and the head's end or just after the blank line
        // that follows it where a tokenizer writes the head's last character
        // and that blank line as one token (a BPE that merges `.\n\n`). Their
        // texts hold the state, so their tokens are kept for this decision
        // only.
        let state = |prefix: &str| self.state_tokens(prefix, &text.state_range);
        if let Some(end) = first_point(&tokens, bos, &text.text, [text.state_len], state)? {
            reuse_points.push(end);
        }
        if let Some(n) = text.head_len {
            let after_blank = Some(n + 2).filter(|&m| text.text.get(n..m) == Some("\n\n"));
            if let Some(end) = first_point(&tokens, bos, &text.text, [Some(n), after_blank], state)?
            {
                reuse_points.push(end);
            }
        }
        if self.chained {
            reuse_points.push(tokens.len());
        }
        tokens.extend(
            self.tok
                .encode(prefill)
                .map_err(dgem_core::CoreError::from)?,
        );
        reuse_points.sort_unstable();
        reuse_points.dedup();
        Ok(Prompt {
            tokens,
            reuse_points,
            policy_point,
        })
    }

    /// Tokens of a state prefix (not BOS), encoded once per decision: the
    /// state's text changes with every decision, so it is kept out of the
    /// engine's policy prefix cache.
    fn state_tokens(
        &self,
        prefix: &str,
        state: &std::ops::Range<usize>,
    ) -> Result<std::sync::Arc<Vec<TokenId>>, DecideError> {
        if let Ok(seen) = self.state_ids.lock() {
            if let Some((_, ids)) = seen.iter().find(|(p, _)| p == prefix) {
                return Ok(std::sync::Arc::clone(ids));
            }
        }
        let ids = std::sync::Arc::new(self.encode_prompt(prefix, state)?);
        if let Ok(mut seen) = self.state_ids.lock() {
            // The state and the content-free states of calibration, each up
            // to its end and up to the question block's head: a few.
            if seen.len() >= 16 {
                seen.remove(0);
            }
            seen.push((prefix.to_owned(), std::sync::Arc::clone(&ids)));
        }
        Ok(ids)
    }

    /// `text` encoded with its bytes `state` (the state, clipped to `text`)
    /// as ordinary text when the state holds a special-token string
    /// ([`encode_with_plain_span`]), else in one encode as it always was: a
    /// ticket that writes `<start_of_turn>` must not open a turn. Whether a
    /// state holds one is found once per decision and state.
    fn encode_prompt(
        &self,
        text: &str,
        state: &std::ops::Range<usize>,
    ) -> Result<Vec<TokenId>, DecideError> {
        let span = state.start.min(text.len())..state.end.min(text.len());
        let Some(state_text) = text.get(span.clone()).filter(|s| !s.is_empty()) else {
            return Ok(self.tok.encode(text).map_err(dgem_core::CoreError::from)?);
        };
        let holds = self.holds_special(state_text)?;
        Ok(if holds {
            encode_with_plain_span(self.tok, text, span)
        } else {
            self.tok.encode(text)
        }
        .map_err(dgem_core::CoreError::from)?)
    }

    /// Whether `state_text` holds a special-token string
    /// ([`Tokenizer::holds_special`]), found once per decision and state.
    fn holds_special(&self, state_text: &str) -> Result<bool, DecideError> {
        let known = self.special_states.lock().ok().and_then(|seen| {
            seen.iter()
                .find(|(s, _)| s == state_text)
                .map(|(_, holds)| *holds)
        });
        Ok(match known {
            Some(holds) => holds,
            None => {
                let holds = self
                    .tok
                    .holds_special(state_text)
                    .map_err(dgem_core::CoreError::from)?;
                if let Ok(mut seen) = self.special_states.lock() {
                    // The state (as given, and trimmed under
                    // `schema_first`) and the content-free states: a few.
                    if seen.len() >= 16 {
                        seen.remove(0);
                    }
                    seen.push((state_text.to_owned(), holds));
                }
                holds
            }
        })
    }

    /// Tokens in `state` as the prompt reads it (`diagnostics.state_tokens`):
    /// its ordinary encoding when it holds a special-token string, else the
    /// (cached) encode every prompt uses, which is the same then.
    pub(crate) fn state_token_count(&self, state: &str) -> Result<usize, DecideError> {
        Ok(if self.holds_special(state)? {
            self.tok.encode_ordinary(state)
        } else {
            self.tok.encode(state)
        }
        .map_err(dgem_core::CoreError::from)?
        .len())
    }

    /// The chat turn of [`Self::prompt`] as text, before BOS and prefill.
    fn prompt_text(&self, r: u32, t: usize, listed: &[&Question], state: &str) -> PromptText {
        let mode = self.engine.label_mode();
        let shown: Vec<Question> = listed
            .iter()
            .map(|q| order::listed(q, &self.listing(q, r, t)))
            .collect();
        let refs: Vec<&Question> = shown.iter().collect();
        // A prompt that lists one question (read apart) gives the answer
        // format of a one-question schema, so that its text does not depend
        // on how many questions the decision asks.
        let format = match refs.len() {
            1 => AnswerFormat::for_count(1),
            _ => self.schema.format,
        };
        let instructions = self.schema.instructions.as_deref();
        // A configured wording (the compact one states the `lines` format in
        // its lead) is used for `lines` reads only; a read of many questions
        // in the `indexed` format keeps dgem's own sentences, whose lead names
        // no format.
        let wording = self
            .engine
            .config
            .wording
            .as_ref()
            .filter(|_| format == AnswerFormat::Lines);
        if wording.is_some() {
            self.wording_used
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let sys = system_text(&SystemTextSpec {
            questions: &refs,
            instructions,
            format,
            mode,
            chunked: false,
            wording,
        });
        let head = system_head(wording, instructions);
        let turns = &self.engine.backend.info().chat_turns;
        PromptText {
            text: chat_prompt(turns, self.schema.layout, &sys, state),
            prefix_len: policy_prefix_len(turns, self.schema.layout, &sys),
            state_len: state_prefix_len(turns, self.schema.layout, state),
            state_head_len: state_head_len(turns, self.schema.layout, &sys, state),
            state_range: state_range(turns, self.schema.layout, &sys, state),
            // Only where the block really begins with that head.
            head_len: sys
                .starts_with(&head)
                .then(|| head_prefix_len(turns, self.schema.layout, state, &head))
                .flatten(),
        }
    }

    /// Every question's sequences after one prompt, flattened, with the index
    /// range of each question.
    fn sequences(
        &self,
        prompt: &Prompt,
        qs: &[ReadQuestion],
        vocab: bool,
    ) -> Result<(Vec<SequenceRead>, Vec<std::ops::Range<usize>>), DecideError> {
        let mut all = Vec::new();
        let mut ranges = Vec::with_capacity(qs.len());
        for rq in qs {
            let seqs = question_sequences(prompt, rq, self.max_tokens, vocab)?;
            ranges.push(all.len()..all.len() + seqs.len());
            all.extend(seqs);
        }
        Ok((all, ranges))
    }
}

/// The first of `candidates` (byte lengths of `text`) whose prefix of
/// `text`, encoded by `encode`, begins `tokens` after BOS (`bos` tokens): the
/// reuse point there, in tokens. Tokenizing may merge across a seam; a
/// candidate whose tokens do not begin the prompt's gives no point.
fn first_point(
    tokens: &[TokenId],
    bos: usize,
    text: &str,
    candidates: impl IntoIterator<Item = Option<usize>>,
    encode: impl Fn(&str) -> Result<std::sync::Arc<Vec<TokenId>>, DecideError>,
) -> Result<Option<usize>, DecideError> {
    for prefix in candidates
        .into_iter()
        .flatten()
        .filter_map(|n| text.get(..n))
    {
        let ids = encode(prefix)?;
        if tokens.get(bos..bos + ids.len()) == Some(&ids[..]) {
            return Ok(Some(bos + ids.len()));
        }
    }
    Ok(None)
}

/// Earlier answers prefilled in the model's turn: each group's answer lines,
/// one per line, ending with a newline ("" when there are none).
pub(crate) fn prefill_text(lines: &[String]) -> String {
    match lines {
        [] => String::new(),
        lines => format!("{}\n", lines.join("\n")),
    }
}

/// The cloze reader under the shared stage walker.
struct ClozeReader<'a> {
    ctx: Ctx<'a>,
    state: String,
}

#[async_trait::async_trait]
impl GroupReader for ClozeReader<'_> {
    /// A causal read has no canvas: the questions of a stage always share one group.
    fn fits(&self, _schema: &ValidSchema, _trial: &[&Question]) -> Result<bool, DecideError> {
        Ok(true)
    }

    async fn read_group(
        &self,
        _req: &DecideRequest,
        call: GroupCall<'_>,
    ) -> Result<GroupReads, DecideError> {
        let prefill = prefill_text(&call.lines);
        self.ctx
            .read_group(&call.questions, &call.listed, &self.state, &prefill)
            .await
    }
}

/// `req` as a cloze read reads it: its questions apart
/// ([`ValidSchema::with_questions_apart`]) unless it is chained; applied by
/// [`Engine::decide`] and [`Engine::plan`] before anything else reads the
/// schema. A schema whose stages cannot be scheduled (validation refuses a
/// dependency cycle, so none reaches here) is left as it is, for the walker
/// to refuse.
pub(crate) fn apart(mut req: DecideRequest) -> DecideRequest {
    let chained = chained(&req.schema);
    req.schema = req.schema.with_questions_apart(chained);
    req
}

/// Whether `schema` is read in stages (a dependency between questions, or
/// `sequential`), later stages prefilling earlier answers after the chat
/// turn. A schema the stages cannot be scheduled for counts as chained.
pub(crate) fn chained(schema: &ValidSchema) -> bool {
    match dgem_core::stages::schedule(schema) {
        Ok(stages) => stages.len() > 1 || schema.sequential,
        Err(_) => true,
    }
}

/// Decide with cloze reads (see the module docs).
pub(crate) async fn decide(engine: &Engine, req: &DecideRequest) -> Result<Decision, DecideError> {
    let schema = &req.schema;
    let tok_arc = engine.backend.tokenizer();
    let info = engine.backend.info();
    let state = state_text(&req.state);
    let reader = ClozeReader {
        ctx: Ctx {
            engine,
            tok: tok_arc.as_ref(),
            schema,
            seed: req.seed,
            calibrate: engine.calibrates(),
            max_tokens: info.max_tokens,
            vocab: engine.config.vocab_diagnostics,
            order: engine.config.order_debias,
            chained: chained(schema),
            state_ids: std::sync::Mutex::default(),
            special_states: std::sync::Mutex::default(),
            wording_used: std::sync::atomic::AtomicBool::new(false),
        },
        state,
    };
    let state_tokens = reader.ctx.state_token_count(&reader.state)?;
    let (walk, chained) = walker::walk(&reader, req).await?;
    let facts = ReaderFacts {
        restated: false,
        prompt_wording: engine.wording_hash().filter(|_| {
            reader
                .ctx
                .wording_used
                .load(std::sync::atomic::Ordering::Relaxed)
        }),
        runtime: info.runtime.clone(),
        model: info.model_id.clone(),
        model_sha256: info.model_sha256.clone(),
        label_mode: engine.label_mode(),
        slot_reading: dgem_core::envelope::SlotReading::Cloze,
        // Label tokens only (entropy over the labels) unless the vocabulary
        // was asked for; sequence-scored questions always read it and say so
        // with their `label_mass`.
        constrained: !engine.config.vocab_diagnostics,
        calibration: reader.ctx.calibrate.then(|| {
            CONTENT_FREE_STATES
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
        }),
        chained,
        prefix_thought: None,
        state_tokens,
    };
    let (answers, diagnostics) = walk.finish(schema, facts);
    Ok(Decision {
        answers,
        diagnostics,
    })
}

/// The span of one model call: `dgem.forward_pass` in traces, with the
/// runtime (attribute `engine`, as on the wire) and the number of sequences
/// read.
pub(crate) fn forward_span(runtime: &str, reads: usize) -> tracing::Span {
    tracing::info_span!("forward_pass", otel.name = "dgem.forward_pass", engine = %runtime, reads)
}
