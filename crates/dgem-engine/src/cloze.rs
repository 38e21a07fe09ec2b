//! Cloze reading for causal backends: every question is read as the next token
//! after `id:` at the end of the shared prompt.

use std::collections::HashMap;
use std::time::Instant;

use dgem_backend::{ForwardOutput, SequenceRead, SlotQuery};
use dgem_core::envelope::{
    AnswerOut, Diagnostics, QuestionDiagnostics, SamplesDiagnostics, Skip, Timing,
};
use dgem_core::labels::labels_for;
use dgem_core::prompt::{gemma_chat_prompt, state_text, system_text, SystemTextSpec};
use dgem_core::readout::{
    aggregate, auto_extends, calibrate, mean_distribution, sample_plan, SlotRead,
};
use dgem_core::schema::{Question, SamplePolicy, ValidSchema};
use dgem_core::slots::{python_random, python_randrange, resolve_cloze, ClozeSlot};
use dgem_core::tokenizer::{TokenId, Tokenizer};
use dgem_core::SchemaError;
use indexmap::IndexMap;
use serde_json::json;

use crate::calibration::{PriorKey, CONTENT_FREE_STATES};
use crate::{DecideRequest, Decision, Engine, EngineError};

/// Seed stride between reads (serving.md §6.2).
const READ_SEED_STRIDE: i64 = 7919;

/// One question as listed in one read: alternatives possibly permuted.
struct ReadQuestion {
    /// `perm[i]` = original index of the alternative listed at position `i`.
    perm: Vec<usize>,
    slot: ClozeSlot,
}

/// What one read of one question gave, mapped back to original alternative order.
struct QRead {
    read: SlotRead,
    /// Distribution before calibration, original order.
    raw: Vec<f64>,
    pos: usize,
}

/// Accumulated counters of backend calls.
#[derive(Default)]
struct Counters {
    timing: Timing,
    prompt_tokens: usize,
    cached_tokens: usize,
}

impl Counters {
    fn absorb(&mut self, out: &ForwardOutput, reads: u32) {
        self.timing.queue_ms += out.stats.queue_ms;
        self.timing.forward_ms += out.stats.forward_ms;
        self.timing.reads += reads;
        self.cached_tokens += out.stats.cached_tokens;
    }
}

/// Permutation of `k` alternatives for read `r` (identity for read 0).
fn permutation(k: usize, seed: i64, r: u32, qi: usize) -> Vec<usize> {
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

/// Map a distribution from listed order back to original alternative order.
fn unpermute(listed: &[f64], perm: &[usize]) -> Vec<f64> {
    let mut orig = vec![0.0; listed.len()];
    for (i, &o) in perm.iter().enumerate() {
        if let (Some(slot), Some(&p)) = (orig.get_mut(o), listed.get(i)) {
            *slot = p;
        }
    }
    orig
}

fn permuted(q: &Question, perm: &[usize]) -> Question {
    let mut p = q.clone();
    p.alternatives = perm.iter().map(|&i| q.alternatives[i].clone()).collect();
    p
}

struct Ctx<'a> {
    engine: &'a Engine,
    tok: &'a dyn Tokenizer,
    schema: &'a ValidSchema,
    seed: i64,
    calibrate: bool,
    max_tokens: usize,
}

impl Ctx<'_> {
    /// Questions of read `r`, with permutation and cloze slot.
    fn read_questions(
        &self,
        r: u32,
        stage: &[&Question],
    ) -> Result<Vec<ReadQuestion>, EngineError> {
        let mode = self.engine.label_mode();
        stage
            .iter()
            .map(|q| {
                let qi = self
                    .schema
                    .questions
                    .iter()
                    .position(|x| x.id == q.id)
                    .unwrap_or(0);
                let perm = permutation(q.alternatives.len(), self.seed, r, qi);
                let question = permuted(q, &perm);
                let slot = resolve_cloze(self.tok, &question, qi, &labels_for(&question, mode))?;
                Ok(ReadQuestion { perm, slot })
            })
            .collect()
    }

    /// The prompt tokens (BOS, chat turn, prefill) for read `r` and a state.
    fn prompt(&self, r: u32, state: &str, prefill: &str) -> Result<Vec<TokenId>, EngineError> {
        let mode = self.engine.label_mode();
        let listed: Vec<Question> = self
            .schema
            .asked()
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let qi = self
                    .schema
                    .questions
                    .iter()
                    .position(|x| x.id == q.id)
                    .unwrap_or(i);
                permuted(q, &permutation(q.alternatives.len(), self.seed, r, qi))
            })
            .collect();
        let refs: Vec<&Question> = listed.iter().collect();
        let sys = system_text(&SystemTextSpec {
            questions: &refs,
            instructions: self.schema.instructions.as_deref(),
            format: self.schema.format,
            mode,
            chunked: false,
        });
        let text = gemma_chat_prompt(self.schema.layout, &sys, state);
        let mut ids: Vec<TokenId> = self.tok.bos_id().into_iter().collect();
        ids.extend(self.tok.encode(&text).map_err(dgem_core::CoreError::from)?);
        ids.extend(
            self.tok
                .encode(prefill)
                .map_err(dgem_core::CoreError::from)?,
        );
        Ok(ids)
    }

    fn sequences(
        &self,
        prompt: &[TokenId],
        qs: &[ReadQuestion],
    ) -> Result<Vec<SequenceRead>, EngineError> {
        qs.iter()
            .map(|rq| {
                let mut tokens = prompt.to_vec();
                tokens.extend(&rq.slot.cue);
                if tokens.len() + 1 > self.max_tokens {
                    return Err(EngineError::Schema(SchemaError::new(
                        "state",
                        format!(
                            "the prompt is {} tokens; the context holds {} (shorten the state, raise the context size with `--context` / `DGEM_CONTEXT`, or use a model with a longer context)",
                            tokens.len() + 1,
                            self.max_tokens
                        ),
                    )));
                }
                let pos = tokens.len();
                Ok(SequenceRead { tokens, slots: vec![SlotQuery { pos, labels: rq.slot.labels.clone() }] })
            })
            .collect()
    }

    /// Priors for each question of one read (content-free states), from cache or model.
    async fn priors(
        &self,
        r: u32,
        prefill: &str,
        qs: &[ReadQuestion],
        counters: &mut Counters,
    ) -> Result<Vec<Vec<f64>>, EngineError> {
        let mut per_state = Vec::new();
        for cf in CONTENT_FREE_STATES {
            let prompt = self.prompt(r, cf, prefill)?;
            per_state.push(self.sequences(&prompt, qs)?);
        }
        let key = |qi: usize| -> PriorKey {
            let toks = per_state
                .iter()
                .flat_map(|s| s[qi].tokens.iter().copied())
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
        if !missing.is_empty() {
            let started = Instant::now();
            let reads: Vec<SequenceRead> = per_state
                .iter()
                .flat_map(|s| missing.iter().map(|&qi| s[qi].clone()))
                .collect();
            let out = self.engine.backend.forward(reads).await?;
            counters.absorb(&out, 0);
            counters.timing.calibration_ms += started.elapsed().as_secs_f64() * 1e3;
            for (mi, &qi) in missing.iter().enumerate() {
                let dists: Vec<Vec<f64>> = (0..CONTENT_FREE_STATES.len())
                    .filter_map(|si| out.sequences.get(si * missing.len() + mi))
                    .filter_map(|slots| slots.first())
                    .map(|s| {
                        SlotRead::from_label_logprobs(&s.label_logprobs, s.vocab_entropy, false)
                            .probs
                    })
                    .collect();
                let prior = mean_distribution(&dists);
                if let Ok(mut cache) = self.engine.priors.lock() {
                    cache.put(key(qi), prior.clone());
                }
                priors[qi] = Some(prior);
            }
            if let Ok(cache) = self.engine.priors.lock() {
                cache.save();
            }
        }
        Ok(priors.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Run reads `from..to` of a stage. Returns per read, per question, the read in
    /// original alternative order.
    async fn run_reads(
        &self,
        reads: std::ops::Range<u32>,
        stage: &[&Question],
        state: &str,
        prefill: &str,
        counters: &mut Counters,
    ) -> Result<Vec<Vec<QRead>>, EngineError> {
        let mut plans = Vec::new();
        let mut batch = Vec::new();
        for r in reads.clone() {
            let qs = self.read_questions(r, stage)?;
            let prompt = self.prompt(r, state, prefill)?;
            let seqs = self.sequences(&prompt, &qs)?;
            let longest = seqs.iter().map(|s| s.tokens.len()).max().unwrap_or(0);
            counters.prompt_tokens = counters.prompt_tokens.max(longest);
            batch.extend(seqs);
            plans.push((r, qs));
        }
        let out = self.engine.backend.forward(batch.clone()).await?;
        counters.absorb(&out, reads.len() as u32);
        let mut result = Vec::new();
        let mut idx = 0;
        for (r, qs) in &plans {
            let priors = if self.calibrate {
                Some(self.priors(*r, prefill, qs, counters).await?)
            } else {
                None
            };
            let mut per_q = Vec::new();
            for (qi, rq) in qs.iter().enumerate() {
                let slot = out
                    .sequences
                    .get(idx)
                    .and_then(|s| s.first())
                    .ok_or_else(|| {
                        EngineError::Backend(dgem_backend::BackendError::Model(
                            "backend returned fewer slot readings than requested".into(),
                        ))
                    })?;
                let pos = batch[idx].slots[0].pos;
                idx += 1;
                let is_label = rq
                    .slot
                    .labels
                    .iter()
                    .any(|l| l.contains(&slot.argmax_token));
                let mut read = SlotRead::from_label_logprobs(
                    &slot.label_logprobs,
                    slot.vocab_entropy,
                    is_label,
                );
                let raw = unpermute(&read.probs, &rq.perm);
                if let Some(p) = priors.as_ref().and_then(|p| p.get(qi)) {
                    read.probs = calibrate(&read.probs, p);
                }
                read.probs = unpermute(&read.probs, &rq.perm);
                per_q.push(QRead { read, raw, pos });
            }
            result.push(per_q);
        }
        Ok(result)
    }
}

/// Decide with cloze reads (see the crate docs).
pub(crate) async fn decide(engine: &Engine, req: &DecideRequest) -> Result<Decision, EngineError> {
    let schema = &req.schema;
    let tok_arc = engine.backend.tokenizer();
    let info = engine.backend.info();
    let ctx = Ctx {
        engine,
        tok: tok_arc.as_ref(),
        schema,
        seed: req.seed,
        calibrate: engine.calibrates(),
        max_tokens: info.max_tokens,
    };
    let mode = engine.label_mode();
    let stages = dgem_core::stages::schedule(schema)?;
    let state = state_text(&req.state);
    let state_tokens = ctx
        .tok
        .encode(&state)
        .map_err(dgem_core::CoreError::from)?
        .len();
    let (first, extra) = sample_plan(schema.samples);

    let mut counters = Counters::default();
    let mut answers: IndexMap<String, Option<AnswerOut>> = IndexMap::new();
    let mut names: HashMap<String, Option<String>> = HashMap::new();
    let mut skipped = IndexMap::new();
    let mut qdiag = IndexMap::new();
    let mut tops: Vec<IndexMap<String, (String, f64, f64)>> = Vec::new();
    let mut stage_ids = Vec::new();
    let mut prefill = String::new();
    let mut n_reads = first;
    let mut extended = None;
    let mut first_entropy = serde_json::Map::new();

    for stage in &stages {
        let mut asked: Vec<&Question> = Vec::new();
        for id in stage {
            let Some(q) = schema.question(id) else {
                continue;
            };
            let failed = q.ask_if.iter().find(|(dep, vals)| {
                let was = names.get(*dep).cloned().flatten();
                !was.as_ref().is_some_and(|w| vals.contains(w))
            });
            if let Some((dep, vals)) = failed {
                skipped.insert(
                    q.id.clone(),
                    Skip {
                        because: dep.clone(),
                        was: names.get(dep).cloned().flatten(),
                        wanted: vals.clone(),
                    },
                );
                answers.insert(q.id.clone(), None);
                names.insert(q.id.clone(), None);
                continue;
            }
            asked.push(q);
        }
        if asked.is_empty() {
            continue;
        }
        stage_ids.push(asked.iter().map(|q| q.id.clone()).collect::<Vec<_>>());
        let mut reads = ctx
            .run_reads(0..first, &asked, &state, &prefill, &mut counters)
            .await?;
        if let SamplePolicy::Auto { .. } = schema.samples {
            let ents: Vec<f64> = reads[0]
                .iter()
                .map(|r| dgem_core::readout::entropy(&r.read.probs))
                .collect();
            for (q, h) in asked.iter().zip(&ents) {
                first_entropy.insert(q.id.clone(), json!(h));
            }
            let ext = auto_extends(schema.samples, &ents);
            extended = Some(extended.unwrap_or(false) || ext);
            if ext {
                let more = ctx
                    .run_reads(
                        first..first + extra,
                        &asked,
                        &state,
                        &prefill,
                        &mut counters,
                    )
                    .await?;
                reads.extend(more);
                n_reads = n_reads.max(first + extra);
            }
        }
        for (r, per_q) in reads.iter().enumerate() {
            if tops.len() <= r {
                tops.push(IndexMap::new());
            }
            for (q, qr) in asked.iter().zip(per_q) {
                let a = aggregate(std::slice::from_ref(&qr.read.probs));
                let name = q
                    .alternatives
                    .get(a.top)
                    .map_or(String::new(), |x| x.name.clone());
                tops[r].insert(q.id.clone(), (name, a.confidence, a.entropy));
            }
        }
        for (qi, q) in asked.iter().enumerate() {
            let dists: Vec<Vec<f64>> = reads.iter().map(|r| r[qi].read.probs.clone()).collect();
            let agg = aggregate(&dists);
            let r0 = &reads[0][qi];
            qdiag.insert(
                q.id.clone(),
                QuestionDiagnostics {
                    pos: r0.pos,
                    entropy: reads.iter().map(|r| r[qi].read.entropy).collect(),
                    label_mass: r0.read.label_mass,
                    argmax_is_label: r0.read.argmax_is_label,
                    uncalibrated: ctx.calibrate.then(|| {
                        mean_distribution(
                            &reads.iter().map(|r| r[qi].raw.clone()).collect::<Vec<_>>(),
                        )
                    }),
                },
            );
            let out = AnswerOut {
                question: (*q).clone(),
                labels: labels_for(q, mode),
                aggregate: agg,
            };
            let name = out.answer_name().to_owned();
            prefill.push_str(&format!("{}: {}\n", q.id, name));
            names.insert(q.id.clone(), Some(name));
            answers.insert(q.id.clone(), Some(out));
        }
    }
    // Keep answers in schema order over the asked questions.
    let ordered: IndexMap<String, Option<AnswerOut>> = schema
        .asked()
        .iter()
        .filter_map(|q| answers.shift_remove(&q.id).map(|a| (q.id.clone(), a)))
        .collect();
    let policy = match schema.samples {
        SamplePolicy::Fixed { n } => {
            json!({"mode": "fixed", "n": n, "extended": null, "first_read_entropy": null})
        }
        SamplePolicy::Auto { max, threshold } => json!({
            "mode": "auto", "max": max, "threshold": threshold,
            "extended": extended.unwrap_or(false), "first_read_entropy": first_entropy,
        }),
    };
    let chained = stage_ids.len() > 1;
    let diagnostics = Diagnostics {
        steps: schema.steps,
        layout: schema.layout.as_str().to_owned(),
        isolated: Vec::new(),
        chunks: stage_ids.clone(),
        stages: stage_ids,
        skipped,
        chunk_prompt: if chained { "full".into() } else { "own".into() },
        sequential: schema.sequential,
        conditioning: chained.then(|| "prefill".to_owned()),
        thought: None,
        samples: SamplesDiagnostics {
            n: n_reads,
            tops,
            policy,
        },
        timing: counters.timing,
        prompt_tokens: Some(counters.prompt_tokens).filter(|&n| n > 0),
        cached_tokens: counters.cached_tokens,
        state_tokens,
        questions: qdiag,
        engine: info.engine.clone(),
        constrained: false,
        model: info.model_id.clone(),
        model_sha256: info.model_sha256.clone(),
        label_mode: mode.as_str().to_owned(),
        slot_reading: "cloze".into(),
        calibration: ctx.calibrate.then(|| {
            CONTENT_FREE_STATES
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
        }),
        note: None,
    };
    Ok(Decision {
        answers: ordered,
        diagnostics,
    })
}
