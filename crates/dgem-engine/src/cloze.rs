//! Cloze reading for causal backends: every question is read after `id:` at the
//! end of its group's prompt.
//!
//! The stage walk is the shared one ([`dgem_backend::walker`]): stages in order,
//! `ask_if` skips, groups from [`chunk_groups`] (an `alone` question — set by
//! the schema or by `isolate` — gets a prompt of its own; a causal read has no
//! canvas, so the other questions of a stage always share one group), earlier
//! answers prefilled in the model's turn. Each question is then scored in one of
//! two ways ([`Scoring`]): from the one row after the cue when its options have
//! first tokens of their own, else by the log-likelihood of each option's whole
//! tokenization (one sequence per option, all sharing the prompt prefix, so the
//! backend decodes the prefix once and batches the continuations).

use std::time::Instant;

use tracing::Instrument as _;

use dgem_backend::walker::{self, GroupCall, GroupReader};
use dgem_backend::{ForwardOutput, SequenceRead, SlotLogits, SlotQuery};
use dgem_core::envelope::Scoring;
use dgem_core::labels::labels_for;
use dgem_core::order::{self, canonical_order, digit_scale, pool_orders, rotation, OrderDebias};
use dgem_core::prompt::{chat_prompt, policy_prefix_len, state_text, system_text, SystemTextSpec};
use dgem_core::readout::log_sum_exp;
use dgem_core::readout::{
    auto_extends, calibrate, entropy, mean_distribution, sample_plan, SlotRead,
};
use dgem_core::schema::{Question, ValidSchema};
use dgem_core::slots::{
    python_random, python_randrange, resolve_cloze, ClozeSlot, READ_SEED_STRIDE,
};
use dgem_core::tokenizer::{TokenId, Tokenizer};
use dgem_core::walk::{policy_json, GroupReads, ReaderFacts};
use dgem_core::SchemaError;

use crate::calibration::{text_key, PriorKey, CONTENT_FREE_STATES};
use crate::policy_prior;
use crate::{DecideRequest, Decision, Engine, EngineError};

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

fn short_model(what: &str) -> EngineError {
    EngineError::Backend(dgem_backend::BackendError::Model(format!(
        "backend returned fewer {what} than requested"
    )))
}

/// A read's prompt as tokens, with the prefix lengths later reads of the same
/// policy or request share with it ([`SequenceRead::reuse_points`]).
pub(crate) struct Prompt {
    /// BOS, the chat turn, the prefill.
    pub(crate) tokens: Vec<TokenId>,
    /// Sorted prefix lengths: where the policy's shared prefix ends
    /// (`schema_first`), and where the model's turn starts (before the prefill).
    pub(crate) reuse_points: Vec<usize>,
}

/// A prompt's text before tokenizing.
pub(crate) struct PromptText {
    /// The chat turn.
    pub(crate) text: String,
    /// Bytes of `text` every decision of the policy shares
    /// ([`policy_prefix_len`]), if any.
    pub(crate) prefix_len: Option<usize>,
}

/// The sequences that read one question after `prompt`: one for first-token
/// scoring, one per option for sequence scoring.
///
/// `vocab` asks the backend for the full-vocabulary reading of each slot
/// ([`SlotQuery::vocab`]); sequence scoring always asks (it sums normalized
/// log-probabilities over an option's tokens).
pub(crate) fn question_sequences(
    prompt: &Prompt,
    rq: &ReadQuestion,
    max_tokens: usize,
    vocab: bool,
) -> Result<Vec<SequenceRead>, EngineError> {
    let reuse_points = &prompt.reuse_points;
    let mut base = prompt.tokens.clone();
    base.extend(&rq.slot.cue);
    let fit = |len: usize| -> Result<(), EngineError> {
        if len > max_tokens {
            return Err(EngineError::Schema(SchemaError::new(
                "state",
                format!(
                    "the prompt is {len} tokens; the context holds {max_tokens} (shorten the state, raise the context size with `--context` / `DGEM_CONTEXT`, or use a model with a longer context)"
                ),
            )));
        }
        Ok(())
    };
    match rq.slot.scoring {
        Scoring::Sequence => spellings(&rq.slot)
            .map(|(_, cont)| {
                let mut tokens = base.clone();
                tokens.extend(cont);
                fit(tokens.len())?;
                let slots = cont
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| SlotQuery {
                        pos: base.len() + i,
                        labels: vec![vec![t]],
                        vocab: true,
                    })
                    .collect();
                Ok(SequenceRead {
                    tokens,
                    slots,
                    reuse_points: reuse_points.clone(),
                })
            })
            .collect(),
        Scoring::FirstToken | Scoring::Canvas => {
            fit(base.len() + 1)?;
            let pos = base.len();
            Ok(vec![SequenceRead {
                tokens: base,
                slots: vec![SlotQuery {
                    pos,
                    labels: rq.slot.labels.clone(),
                    vocab,
                }],
                reuse_points: reuse_points.clone(),
            }])
        }
    }
}

/// Every continuation of a sequence-scored slot with the index of its label:
/// each label's main continuation, then its other spellings.
pub(crate) fn spellings(slot: &ClozeSlot) -> impl Iterator<Item = (usize, &Vec<TokenId>)> {
    slot.labels.iter().enumerate().flat_map(move |(i, main)| {
        std::iter::once((i, main)).chain(
            slot.variants
                .get(i)
                .into_iter()
                .flatten()
                .map(move |v| (i, v)),
        )
    })
}

/// A slot read from one slot's logits: the restricted softmax of its label
/// log-probabilities, plus the full-vocabulary reading when the backend
/// returned one (`is_label` says whether its argmax token is a label).
pub(crate) fn label_read(s: &SlotLogits, is_label: impl Fn(TokenId) -> bool) -> SlotRead {
    let read = SlotRead::from_label_logits(&s.label_logprobs);
    match &s.vocab {
        Some(v) => read.with_vocab(&v.label_logprobs, v.entropy, is_label(v.argmax_token)),
        None => read,
    }
}

/// Turn the backend's readings of one question's sequences into a slot read over
/// its labels (listed order). Sequence scoring sums each option's token
/// log-probabilities over the full vocabulary; entropy and `argmax_is_label`
/// come from the row after the cue. First-token scoring takes the restricted
/// softmax of the label log-probabilities, and adds the vocabulary reading
/// when the backend returned one.
pub(crate) fn combine(
    rq: &ReadQuestion,
    outs: &[Vec<SlotLogits>],
) -> Result<SlotRead, EngineError> {
    let first = outs
        .first()
        .and_then(|s| s.first())
        .ok_or_else(|| short_model("slot readings"))?;
    match rq.slot.scoring {
        Scoring::Sequence => {
            // Per spelling, the sum of its token log-probabilities; per label,
            // the log-sum-exp over its spellings.
            let owners: Vec<usize> = spellings(&rq.slot).map(|(i, _)| i).collect();
            if outs.len() != owners.len() {
                return Err(short_model("option sequences"));
            }
            let mut per_label: Vec<Vec<f64>> = vec![Vec::new(); rq.slot.labels.len()];
            for (seq, &owner) in outs.iter().zip(&owners) {
                let mut sum = 0.0;
                for s in seq {
                    let v = s
                        .vocab
                        .as_ref()
                        .ok_or_else(|| short_model("full-vocabulary readings"))?;
                    sum += v.label_logprobs.first().copied().unwrap_or(-1.0e4);
                }
                if let Some(l) = per_label.get_mut(owner) {
                    l.push(sum);
                }
            }
            // A label with no spelling scored gets the floor of a missing token.
            let ll: Vec<f64> = per_label
                .iter()
                .map(|l| log_sum_exp(l).max(-1.0e4))
                .collect();
            let v = first
                .vocab
                .as_ref()
                .ok_or_else(|| short_model("full-vocabulary readings"))?;
            let is_label =
                spellings(&rq.slot).any(|(_, cont)| cont.first() == Some(&v.argmax_token));
            Ok(SlotRead::from_label_logprobs(&ll, v.entropy, is_label))
        }
        Scoring::FirstToken | Scoring::Canvas => Ok(label_read(first, |t| {
            rq.slot.labels.iter().any(|l| l.contains(&t))
        })),
    }
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

    /// Under [`OrderDebias::Prior`], per question of `group` (listing 0 of
    /// read 0 in `qs`): the key of its learned prior ([`crate::policy_prior`])
    /// and the prior itself once it is learned.
    fn learned_priors(
        &self,
        listed: &[&Question],
        prefill: &str,
        qs: &[ReadQuestion],
    ) -> Result<Learned, EngineError> {
        // The prompt with the state left out: what the read may depend on
        // besides the state.
        let hole = self.prompt_text(0, 0, listed, "\u{0}state\u{0}").text;
        let store = self.engine.policy_priors.lock().map_err(|_| {
            EngineError::Unsupported("policy prior store poisoned — this is a bug".into())
        })?;
        let ids = |ts: &[TokenId]| -> Vec<u8> { ts.iter().flat_map(|t| t.to_le_bytes()).collect() };
        let mut keys = Vec::with_capacity(qs.len());
        let mut priors = Vec::with_capacity(qs.len());
        for rq in qs {
            let labels: Vec<u8> = rq
                .slot
                .labels
                .iter()
                .flat_map(|l| ids(l).into_iter().chain([b'|']))
                .collect();
            let key = policy_prior::prior_key(&[
                hole.as_bytes(),
                prefill.as_bytes(),
                &ids(&rq.slot.cue),
                &labels,
                format!("{:?}", rq.slot.scoring).as_bytes(),
                &[u8::from(self.calibrate)],
            ]);
            priors.push(store.get(&key).map(|(p, _)| p));
            keys.push(key);
        }
        let ready = priors.iter().all(Option::is_some);
        Ok(Learned {
            keys,
            priors,
            ready,
        })
    }

    /// Questions of listing `t` of read `r`, with permutation and cloze slot.
    pub(crate) fn read_questions(
        &self,
        r: u32,
        t: usize,
        group: &[&Question],
    ) -> Result<Vec<ReadQuestion>, EngineError> {
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
    ) -> Result<Prompt, EngineError> {
        self.tokens_of(&self.prompt_text(r, t, listed, state), prefill)
    }

    /// BOS, then `text` (a [`Self::prompt_text`]) and `prefill` encoded, with
    /// the reuse points: the end of the policy prefix when its tokens begin
    /// the prompt's (tokenizing may merge across the seam; then there is no
    /// point there), and the end of the chat turn.
    fn tokens_of(&self, text: &PromptText, prefill: &str) -> Result<Prompt, EngineError> {
        let mut tokens: Vec<TokenId> = self.tok.bos_id().into_iter().collect();
        let bos = tokens.len();
        tokens.extend(
            self.tok
                .encode(&text.text)
                .map_err(dgem_core::CoreError::from)?,
        );
        let mut reuse_points = Vec::with_capacity(2);
        if let Some(prefix) = text.prefix_len.and_then(|n| text.text.get(..n)) {
            let ids = self.engine.prefix_tokens(self.tok, prefix)?;
            if tokens.get(bos..bos + ids.len()) == Some(&ids[..]) {
                reuse_points.push(bos + ids.len());
            }
        }
        reuse_points.push(tokens.len());
        tokens.extend(
            self.tok
                .encode(prefill)
                .map_err(dgem_core::CoreError::from)?,
        );
        reuse_points.dedup();
        Ok(Prompt {
            tokens,
            reuse_points,
        })
    }

    /// The chat turn of [`Self::prompt`] as text, before BOS and prefill.
    fn prompt_text(&self, r: u32, t: usize, listed: &[&Question], state: &str) -> PromptText {
        let mode = self.engine.label_mode();
        let shown: Vec<Question> = listed
            .iter()
            .map(|q| order::listed(q, &self.listing(q, r, t)))
            .collect();
        let refs: Vec<&Question> = shown.iter().collect();
        let sys = system_text(&SystemTextSpec {
            questions: &refs,
            instructions: self.schema.instructions.as_deref(),
            format: self.schema.format,
            mode,
            chunked: false,
            wording: None,
        });
        let turns = &self.engine.backend.info().chat_turns;
        PromptText {
            text: chat_prompt(turns, self.schema.layout, &sys, state),
            prefix_len: policy_prefix_len(turns, self.schema.layout, &sys),
        }
    }

    /// Every question's sequences after one prompt, flattened, with the index
    /// range of each question.
    fn sequences(
        &self,
        prompt: &Prompt,
        qs: &[ReadQuestion],
        vocab: bool,
    ) -> Result<(Vec<SequenceRead>, Vec<std::ops::Range<usize>>), EngineError> {
        let mut all = Vec::new();
        let mut ranges = Vec::with_capacity(qs.len());
        for rq in qs {
            let seqs = question_sequences(prompt, rq, self.max_tokens, vocab)?;
            ranges.push(all.len()..all.len() + seqs.len());
            all.extend(seqs);
        }
        Ok((all, ranges))
    }

    /// Priors for each question of one read (content-free states), from cache or model.
    async fn priors(
        &self,
        r: u32,
        t: usize,
        listed: &[&Question],
        prefill: &str,
        qs: &[ReadQuestion],
        counters: &mut Counters,
    ) -> Result<Vec<Vec<f64>>, EngineError> {
        // Fast path: every question's priors found by the prompt texts alone.
        let texts: Vec<PromptText> = CONTENT_FREE_STATES
            .iter()
            .map(|cf| self.prompt_text(r, t, listed, cf))
            .collect();
        let plain: Vec<&str> = texts.iter().map(|t| t.text.as_str()).collect();
        let text_keys: Vec<[u8; 32]> = qs
            .iter()
            .map(|q| {
                text_key(
                    &plain,
                    prefill,
                    &q.slot.cue,
                    &q.slot.labels,
                    &format!("{:?}", q.slot.scoring),
                )
            })
            .collect();
        {
            let mut cache = self.engine.priors.lock().map_err(|_| {
                EngineError::Unsupported("calibration cache poisoned — this is a bug".into())
            })?;
            let found: Option<Vec<Vec<f64>>> =
                text_keys.iter().map(|k| cache.get_by_text(k)).collect();
            if let Some(found) = found {
                return Ok(found);
            }
        }
        let priors = self.priors_by_tokens(&texts, prefill, qs, counters).await?;
        if let Ok(mut cache) = self.engine.priors.lock() {
            for (k, p) in text_keys.into_iter().zip(&priors) {
                cache.put_by_text(k, p.clone());
            }
        }
        Ok(priors)
    }

    /// [`Self::priors`] through the token-keyed cache (and the store), reading
    /// the content-free prompts (`texts`, one per content-free state) on the
    /// model for what is missing.
    async fn priors_by_tokens(
        &self,
        texts: &[PromptText],
        prefill: &str,
        qs: &[ReadQuestion],
        counters: &mut Counters,
    ) -> Result<Vec<Vec<f64>>, EngineError> {
        let mut per_state = Vec::new();
        for text in texts {
            let prompt = self.tokens_of(text, prefill)?;
            // Priors use the label distribution only.
            per_state.push(self.sequences(&prompt, qs, false)?);
        }
        let key = |qi: usize| -> PriorKey {
            let toks = per_state
                .iter()
                .flat_map(|(seqs, ranges)| {
                    seqs[ranges[qi].clone()]
                        .iter()
                        .flat_map(|s| s.tokens.iter().copied())
                })
                .collect();
            (toks, qs[qi].slot.labels.clone())
        };
        let mut priors: Vec<Option<Vec<f64>>> = {
            let mut cache = self.engine.priors.lock().map_err(|_| {
                EngineError::Unsupported("calibration cache poisoned — this is a bug".into())
            })?;
            (0..qs.len()).map(|qi| cache.get(&key(qi))).collect()
        };
        let missing: Vec<usize> = (0..qs.len()).filter(|&i| priors[i].is_none()).collect();
        if missing.is_empty() {
            return Ok(priors.into_iter().map(Option::unwrap_or_default).collect());
        }
        let started = Instant::now();
        let mut reads = Vec::new();
        // index[state][mi] = range of question missing[mi]'s sequences in `reads`.
        let mut index = Vec::with_capacity(per_state.len());
        for (seqs, ranges) in &per_state {
            let mut at = Vec::with_capacity(missing.len());
            for &qi in &missing {
                let from = reads.len();
                reads.extend(seqs[ranges[qi].clone()].iter().cloned());
                at.push(from..reads.len());
            }
            index.push(at);
        }
        let span = forward_span(&self.engine.backend.info().engine, reads.len());
        let out = self.engine.backend.forward(reads).instrument(span).await?;
        counters.absorb(&out);
        counters.calibration_ms += started.elapsed().as_secs_f64() * 1e3;
        for (mi, &qi) in missing.iter().enumerate() {
            let mut dists = Vec::with_capacity(index.len());
            for at in &index {
                let outs = out
                    .sequences
                    .get(at[mi].clone())
                    .ok_or_else(|| short_model("calibration readings"))?;
                dists.push(combine(&qs[qi], outs)?.probs);
            }
            let prior = mean_distribution(&dists);
            if let Ok(mut cache) = self.engine.priors.lock() {
                cache.put(key(qi), prior.clone());
            }
            priors[qi] = Some(prior);
        }
        if let Ok(cache) = self.engine.priors.lock() {
            cache.save();
        }
        Ok(priors.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Run reads `from..to` of a group, each in [`Self::group_orders`]
    /// listings. Returns per read, per question, the read in original
    /// alternative order: the listings' (calibrated) distributions pooled by
    /// [`pool_orders`].
    #[allow(clippy::too_many_arguments)]
    async fn run_reads(
        &self,
        reads: std::ops::Range<u32>,
        group: &[&Question],
        listed: &[&Question],
        state: &str,
        prefill: &str,
        learned: Option<&Learned>,
        counters: &mut Counters,
    ) -> Result<Vec<Vec<QRead>>, EngineError> {
        let mode = self.engine.label_mode();
        // Learning a policy's prior: read every cyclic listing.
        let learning = learned.is_some_and(|l| !l.ready);
        let listings = if learning {
            group
                .iter()
                .map(|q| self.order.orders_for(q, mode))
                .max()
                .unwrap_or(1)
        } else {
            self.group_orders(group)
        };
        let mut plans = Vec::new();
        let mut batch = Vec::new();
        for r in reads {
            for t in 0..listings {
                let qs = self.read_questions(r, t, group)?;
                let prompt = self.prompt(r, t, listed, state, prefill)?;
                let (seqs, ranges) = self.sequences(&prompt, &qs, self.vocab)?;
                let longest = seqs.iter().map(|s| s.tokens.len()).max().unwrap_or(0);
                counters.prompt_tokens = counters.prompt_tokens.max(longest);
                counters.rows += qs.len();
                let offset = batch.len();
                let ranges: Vec<_> = ranges
                    .into_iter()
                    .map(|x| x.start + offset..x.end + offset)
                    .collect();
                batch.extend(seqs);
                plans.push((r, t, qs, ranges));
            }
        }
        let positions: Vec<usize> = batch
            .iter()
            .map(|s| s.slots.first().map_or(0, |q| q.pos))
            .collect();
        let span = forward_span(&self.engine.backend.info().engine, batch.len());
        let out = self.engine.backend.forward(batch).instrument(span).await?;
        counters.absorb(&out);
        let one_read_prior = learned.filter(|l| l.ready);
        // Learning: per question, its canonical read (listing 0 of read 0).
        let mut canonical: Vec<Option<Vec<f64>>> = vec![None; group.len()];
        let mut result: Vec<Vec<QRead>> = Vec::new();
        for (r, t, qs, ranges) in &plans {
            let priors = if self.calibrate {
                Some(self.priors(*r, *t, listed, prefill, qs, counters).await?)
            } else {
                None
            };
            if *t == 0 {
                result.push(Vec::with_capacity(qs.len()));
            }
            let Some(per_q) = result.last_mut() else {
                return Err(short_model("slot readings"));
            };
            for (qi, (rq, range)) in qs.iter().zip(ranges).enumerate() {
                let outs = out
                    .sequences
                    .get(range.clone())
                    .ok_or_else(|| short_model("slot readings"))?;
                let mut read = combine(rq, outs)?;
                let raw = order::unlist(&read.probs, &rq.perm);
                if let Some(p) = priors.as_ref().and_then(|p| p.get(qi)) {
                    read.probs = calibrate(&read.probs, p);
                }
                read.probs = order::unlist(&read.probs, &rq.perm);
                if learning && *r == 0 && *t == 0 {
                    if let Some(c) = canonical.get_mut(qi) {
                        *c = Some(read.probs.clone());
                    }
                }
                if let Some(prior) = one_read_prior
                    .and_then(|l| l.priors.get(qi))
                    .and_then(Option::as_ref)
                {
                    read.probs = order::divide_prior(&read.probs, prior);
                }
                if *t == 0 {
                    let pos = positions.get(range.start).copied().unwrap_or(0);
                    per_q.push(QRead {
                        orders: vec![read.probs.clone()],
                        raw_orders: vec![raw],
                        read,
                        pos,
                        scoring: rq.slot.scoring,
                    });
                    continue;
                }
                // A question with fewer alternatives than the group's widest
                // is read in fewer listings; its extra listings are not pooled.
                let own = group
                    .get(qi)
                    .map_or(1, |q| self.order.orders_for(q, self.engine.label_mode()));
                if let Some(q) = per_q.get_mut(qi).filter(|_| *t < own) {
                    q.orders.push(read.probs);
                    q.raw_orders.push(raw);
                }
            }
        }
        for per_q in &mut result {
            for q in per_q.iter_mut() {
                q.pool();
            }
        }
        if let Some(l) = learned.filter(|_| learning) {
            self.learn(l, state, &canonical)?;
        }
        Ok(result)
    }

    /// Add this decision's canonical reads (own option order) to the
    /// learning of each question still learning its prior
    /// ([`crate::policy_prior`]).
    fn learn(
        &self,
        learned: &Learned,
        state: &str,
        canonical: &[Option<Vec<f64>>],
    ) -> Result<(), EngineError> {
        let mut store = self.engine.policy_priors.lock().map_err(|_| {
            EngineError::Unsupported("policy prior store poisoned — this is a bug".into())
        })?;
        let digest = policy_prior::state_digest(state);
        let mut added = false;
        for (key, read) in learned.keys.iter().zip(canonical) {
            if let Some(read) = read {
                added |= store.add(key, digest.clone(), read);
            }
        }
        if added {
            store.save();
        }
        Ok(())
    }

    /// Read one group: first reads, `auto` extension, and the group's result.
    async fn read_group(
        &self,
        group: &[&Question],
        listed: &[&Question],
        state: &str,
        prefill: &str,
    ) -> Result<GroupReads, EngineError> {
        let samples = self.schema.samples;
        let (first, extra) = sample_plan(samples);
        let mut counters = Counters::default();
        // Under `prior`, the learned position priors, looked up once per group
        // so that an `auto` extension reads the way the first reads did.
        let learned = match self.order {
            OrderDebias::Prior { .. } => {
                let qs = self.read_questions(0, 0, group)?;
                Some(self.learned_priors(listed, prefill, &qs)?)
            }
            _ => None,
        };
        let mut reads = self
            .run_reads(
                0..first,
                group,
                listed,
                state,
                prefill,
                learned.as_ref(),
                &mut counters,
            )
            .await?;
        let first_entropy: Vec<(String, f64)> = group
            .iter()
            .zip(reads.first().into_iter().flatten())
            .map(|(q, r)| (q.id.clone(), entropy(&r.read.probs)))
            .collect();
        let ents: Vec<f64> = first_entropy.iter().map(|(_, h)| *h).collect();
        let extended = auto_extends(samples, &ents);
        if extended {
            let more = self
                .run_reads(
                    first..first + extra,
                    group,
                    listed,
                    state,
                    prefill,
                    learned.as_ref(),
                    &mut counters,
                )
                .await?;
            reads.extend(more);
        }
        let prior = matches!(self.order, OrderDebias::Prior { .. });
        let one_read_prior = learned.as_ref().is_some_and(|l| l.ready);
        let mode = self.engine.label_mode();
        Ok(GroupReads {
            questions: group.iter().map(|q| (*q).clone()).collect(),
            labels: group.iter().map(|q| labels_for(q, mode)).collect(),
            pos: (0..group.len())
                .map(|qi| reads.first().and_then(|r| r.get(qi)).map_or(0, |x| x.pos))
                .collect(),
            scoring: (0..group.len())
                .map(|qi| {
                    reads
                        .first()
                        .and_then(|r| r.get(qi))
                        .map_or(Scoring::FirstToken, |x| x.scoring)
                })
                .collect(),
            uncalibrated: (0..group.len())
                .map(|qi| {
                    (self.calibrate || prior).then(|| {
                        mean_distribution(&reads.iter().map(|r| r[qi].raw()).collect::<Vec<_>>())
                    })
                })
                .collect(),
            order_prior: one_read_prior,
            order_reads: (0..group.len())
                .map(|qi| {
                    reads
                        .iter()
                        .filter_map(|r| r.get(qi))
                        .flat_map(|q| q.orders.iter().cloned())
                        .collect()
                })
                .collect(),
            reads: reads
                .into_iter()
                .map(|r| r.into_iter().map(|q| q.read).collect())
                .collect(),
            policy: policy_json(samples, extended, &first_entropy),
            thought: None,
            queue_ms: counters.queue_ms,
            forward_ms: counters.forward_ms,
            calibration_ms: counters.calibration_ms,
            prompt_tokens: counters.prompt_tokens,
            cached_tokens: counters.cached_tokens,
            rows: counters.rows,
        })
    }
}

/// The learned priors of one group's questions ([`Ctx::learned_priors`]).
struct Learned {
    /// Per question, the key of its prior.
    keys: Vec<String>,
    /// Per question, its learned prior (own option order), once learned.
    priors: Vec<Option<Vec<f64>>>,
    /// Every question has one: read once.
    ready: bool,
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
    fn fits(&self, _schema: &ValidSchema, _trial: &[&Question]) -> Result<bool, EngineError> {
        Ok(true)
    }

    async fn read_group(
        &self,
        _req: &DecideRequest,
        call: GroupCall<'_>,
    ) -> Result<GroupReads, EngineError> {
        let prefill = prefill_text(&call.lines);
        self.ctx
            .read_group(&call.questions, &call.listed, &self.state, &prefill)
            .await
    }
}

/// Decide with cloze reads (see the module docs).
pub(crate) async fn decide(engine: &Engine, req: &DecideRequest) -> Result<Decision, EngineError> {
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
        },
        state,
    };
    let state_tokens = reader
        .ctx
        .tok
        .encode(&reader.state)
        .map_err(dgem_core::CoreError::from)?
        .len();
    let (walk, chained) = walker::walk(&reader, req).await?;
    let facts = ReaderFacts {
        restated: false,
        prompt_wording: None,
        engine: info.engine.clone(),
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
/// engine and the number of sequences read.
pub(crate) fn forward_span(engine: &str, reads: usize) -> tracing::Span {
    tracing::info_span!("forward_pass", otel.name = "dgem.forward_pass", %engine, reads)
}
