//! The Stage-2 model thread: owns its own model and context, takes one job at
//! a time from a bounded queue, and generates grammar-constrained text
//! greedily (temperature 0).
//!
//! Sampling: the 32 most likely tokens are filtered by the grammar first;
//! only when it rejects them all are the ~262k Gemma candidates filtered and
//! the best allowed one taken. Both give the same token as "grammar, then
//! greedy" (a wider form of the fast path of llama.cpp's
//! `common_sampler_sample`), at a fraction of the cost per step.

use std::num::NonZeroU32;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Instant;

use dgem_cascade::Stage2Error;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;
use tokio::sync::{mpsc, oneshot};

use super::PROVIDER;
use crate::runtime::runtime;
use crate::tokenizer::load_model;
use crate::LlamaError;

/// Tokens decoded per call while reading the prompt (llama.cpp's default
/// ubatch); a caller that gave up is noticed between chunks.
const PROMPT_CHUNK: usize = 512;
/// Candidates tried against the grammar before the whole vocabulary is: when
/// any of the top 32 is allowed, the best of them is the best allowed token.
const SHORTLIST: usize = 32;

/// One `resolve` travelling to the model thread.
pub(crate) struct Job {
    /// The user turn (the cascade's Stage-2 prompt).
    pub prompt: String,
    /// GBNF grammar, start rule `root`.
    pub grammar: String,
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// When the job entered the queue.
    pub enqueued: Instant,
    /// Span of the caller, entered while the job runs.
    pub span: tracing::Span,
    /// Where the result goes; closed when the caller gave up.
    pub reply: oneshot::Sender<Result<Generated, Stage2Error>>,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The top-level JSON object was closed.
    Complete,
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// `max_new_tokens` were generated.
    Budget,
}

/// What a job produced.
#[derive(Debug, Clone)]
pub(crate) struct Generated {
    /// The generated text (the reply JSON when `stop` is `Complete`).
    pub text: String,
    /// Why generation stopped.
    pub stop: Stop,
    /// Tokens of the wrapped prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub new_tokens: usize,
    /// Steps where the shortlist held no allowed token (whole vocabulary filtered).
    pub full_scans: usize,
    /// Milliseconds waited in the queue.
    pub queue_ms: f64,
    /// Milliseconds of model time (prompt and generation).
    pub run_ms: f64,
}

/// What the thread needs to load the model and build its context.
#[derive(Debug, Clone)]
pub(crate) struct ThreadConfig {
    pub path: PathBuf,
    pub n_threads: usize,
    pub context_size: usize,
}

/// Load the model and start its thread; returns once the context exists.
pub(crate) fn spawn(
    cfg: ThreadConfig,
    rx: mpsc::Receiver<Job>,
) -> Result<JoinHandle<()>, LlamaError> {
    crate::worker::start_thread("dgem-stage2", "Stage-2 model thread", move |ready| {
        run(&cfg, rx, ready);
    })
}

fn run(
    cfg: &ThreadConfig,
    mut rx: mpsc::Receiver<Job>,
    ready: &std::sync::mpsc::SyncSender<Result<(), LlamaError>>,
) {
    let model = match load_model(&cfg.path, &LlamaModelParams::default()) {
        Ok(m) => m,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut gen = match Generator::new(&model, cfg) {
        Ok(g) => {
            let _ = ready.send(Ok(()));
            g
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    while let Some(job) = rx.blocking_recv() {
        if job.reply.is_closed() {
            continue; // the caller gave up while the job waited
        }
        let _guard = job.span.enter();
        let started = Instant::now();
        let queue_ms = started.duration_since(job.enqueued).as_secs_f64() * 1e3;
        let cancelled = || job.reply.is_closed();
        let result = catch_unwind(AssertUnwindSafe(|| gen.generate(&job, &cancelled)))
            .unwrap_or_else(|_| Err(gen.fail("llama.cpp call panicked")));
        let run_ms = started.elapsed().as_secs_f64() * 1e3;
        let result = result.map(|g| Generated {
            queue_ms,
            run_ms,
            ..g
        });
        tracing::debug!(queue_ms, run_ms, ok = result.is_ok(), "gguf stage-2 job");
        let _ = job.reply.send(result);
    }
    tracing::debug!("Stage-2 model thread stopping: queue closed");
}

/// Tracks whether generated JSON text has closed its top-level object.
#[derive(Debug, Default)]
struct JsonDepth {
    depth: usize,
    opened: bool,
    in_string: bool,
    escaped: bool,
}

impl JsonDepth {
    /// Feed bytes; true once the first object is closed.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        for &b in bytes {
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.depth += 1;
                    self.opened = true;
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            }
            if self.opened && self.depth == 0 {
                return true;
            }
        }
        false
    }
}

/// The [`SHORTLIST`] highest finite logits, highest first (ties: lower id first).
fn shortlist(logits: &[f32]) -> Vec<LlamaTokenData> {
    let mut top: Vec<(usize, f32)> = Vec::with_capacity(SHORTLIST + 1);
    for (i, &l) in logits.iter().enumerate() {
        if !l.is_finite() || (top.len() == SHORTLIST && top.last().is_some_and(|t| l <= t.1)) {
            continue;
        }
        let at = top.partition_point(|t| t.1 >= l);
        top.insert(at, (i, l));
        top.truncate(SHORTLIST);
    }
    top.into_iter()
        .filter_map(|(i, l)| {
            Some(LlamaTokenData::new(
                LlamaToken(i32::try_from(i).ok()?),
                l,
                0.0,
            ))
        })
        .collect()
}

/// The candidate with the highest logit the grammar left finite (ties: the first).
fn best_allowed(data: &[LlamaTokenData]) -> Option<LlamaToken> {
    data.iter()
        .filter(|d| d.logit().is_finite())
        .fold(None::<&LlamaTokenData>, |best, d| match best {
            Some(b) if b.logit() >= d.logit() => Some(b),
            _ => Some(d),
        })
        .map(LlamaTokenData::id)
}

/// Owns the context; lives on the model thread only.
struct Generator<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    n_ctx: usize,
    before: Vec<LlamaToken>,
    after: Vec<LlamaToken>,
    origin: String,
}

impl<'m> Generator<'m> {
    fn new(model: &'m LlamaModel, cfg: &ThreadConfig) -> Result<Self, LlamaError> {
        let n_ctx = u32::try_from(cfg.context_size)
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| LlamaError::Context(format!("context size {}", cfg.context_size)))?;
        let threads = i32::try_from(cfg.n_threads.max(1))
            .map_err(|_| LlamaError::Context(format!("n_threads {}", cfg.n_threads)))?;
        let chunk = u32::try_from(PROMPT_CHUNK).unwrap_or(512).min(n_ctx.get());
        let params = LlamaContextParams::default()
            .with_n_ctx(Some(n_ctx))
            .with_n_batch(chunk)
            .with_n_ubatch(chunk)
            .with_n_seq_max(1)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let ctx = model
            .new_context(runtime()?, params)
            .map_err(|e| LlamaError::Context(e.to_string()))?;
        // The same turns as the Stage-1 reader's (`crate::turns`): the GGUF's
        // chat template, Gemma's markers for a Gemma vocabulary without one,
        // else none.
        let (turns, turns_origin) = crate::turns::chat_turns(model);
        let (before, after) = (turns.user_open, turns.model_open);
        tracing::info!(
            model = %cfg.path.display(),
            context = cfg.context_size,
            threads = cfg.n_threads,
            turns = turns_origin.name(),
            "Stage-2 GGUF model loaded"
        );
        let vocab = model.vocab();
        let mut before_ids = vocab.tokenize(before.as_bytes(), false, true);
        if vocab.should_add_bos() && before_ids.first() != Some(&vocab.bos()) {
            before_ids.insert(0, vocab.bos());
        }
        let after_ids = vocab.tokenize(after.as_bytes(), false, true);
        Ok(Self {
            model,
            ctx,
            batch: LlamaBatch::new(PROMPT_CHUNK, 1),
            n_ctx: cfg.context_size,
            before: before_ids,
            after: after_ids,
            origin: cfg.path.display().to_string(),
        })
    }

    /// A failure of this model (reported as a transport error: no answer came).
    fn fail(&mut self, message: impl std::fmt::Display) -> Stage2Error {
        self.ctx.clear_kv_cache();
        Stage2Error::Transport {
            provider: PROVIDER.into(),
            url: self.origin.clone(),
            message: message.to_string(),
        }
    }

    /// Generate for `job` (timings left at 0 for the caller to fill).
    fn generate(
        &mut self,
        job: &Job,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Generated, Stage2Error> {
        let model = self.model;
        let vocab = model.vocab();
        // The user text is tokenized without parsing special tokens, so a
        // literal `<end_of_turn>` in a ticket cannot close the turn.
        let user = vocab.tokenize(job.prompt.trim().as_bytes(), false, false);
        let mut prompt = Vec::with_capacity(self.before.len() + user.len() + self.after.len());
        prompt.extend_from_slice(&self.before);
        prompt.extend_from_slice(&user);
        prompt.extend_from_slice(&self.after);
        let room = self.n_ctx.saturating_sub(job.max_new_tokens);
        if prompt.len() > room {
            return Err(Stage2Error::Config {
                provider: PROVIDER.into(),
                field: "prompt".into(),
                allowed: format!(
                    "at most {room} tokens (context size {} minus {} for the answer)",
                    self.n_ctx, job.max_new_tokens
                ),
                got: format!("{} tokens", prompt.len()),
            });
        }
        let mut sampler = LlamaSampler::grammar(model, &job.grammar, "root")
            .map_err(|e| self.fail(format!("llama.cpp refused the reply grammar: {e}")))?;
        self.ctx.clear_kv_cache();
        for (i, chunk) in prompt.chunks(PROMPT_CHUNK).enumerate() {
            if cancelled() {
                return Err(self.fail("cancelled: the caller went away"));
            }
            let last = (i + 1) * PROMPT_CHUNK >= prompt.len();
            self.batch.clear();
            for (j, &t) in chunk.iter().enumerate() {
                let pos = i32::try_from(i * PROMPT_CHUNK + j).unwrap_or(i32::MAX);
                self.batch
                    .add(t, pos, &[0], last && j + 1 == chunk.len())
                    .map_err(|e| self.fail(format!("batch: {e}")))?;
            }
            self.decode()?;
        }
        let mut idx = self.batch.n_tokens() - 1;
        let mut text = Vec::new();
        let mut depth = JsonDepth::default();
        let mut stop = Stop::Budget;
        let mut n_new = 0;
        let mut full_scans = 0;
        while n_new < job.max_new_tokens {
            if cancelled() {
                return Err(self.fail("cancelled: the caller went away"));
            }
            let (tok, full) = self.pick(&mut sampler, idx)?;
            full_scans += usize::from(full);
            if vocab.is_eog(tok) {
                stop = Stop::EndOfGeneration;
                break;
            }
            sampler.accept(tok);
            n_new += 1;
            let piece = vocab.token_to_piece(tok, true, None);
            text.extend_from_slice(&piece);
            if depth.feed(&piece) {
                stop = Stop::Complete;
                break;
            }
            self.batch.clear();
            let pos = i32::try_from(prompt.len() + n_new - 1).unwrap_or(i32::MAX);
            self.batch
                .add(tok, pos, &[0], true)
                .map_err(|e| self.fail(format!("batch: {e}")))?;
            self.decode()?;
            idx = 0;
        }
        Ok(Generated {
            text: String::from_utf8_lossy(&text).into_owned(),
            stop,
            prompt_tokens: prompt.len(),
            new_tokens: n_new,
            full_scans,
            queue_ms: 0.0,
            run_ms: 0.0,
        })
    }

    /// The most likely token the grammar allows at output row `idx`, and
    /// whether the whole vocabulary had to be filtered to find it.
    fn pick(
        &mut self,
        sampler: &mut LlamaSampler,
        idx: i32,
    ) -> Result<(LlamaToken, bool), Stage2Error> {
        let logits = self.ctx.get_logits_ith(idx);
        let mut short = LlamaTokenDataArray::new(shortlist(logits), false);
        short.apply_sampler(sampler);
        if let Some(tok) = best_allowed(&short.data) {
            return Ok((tok, false));
        }
        let mut all = LlamaTokenDataArray::new(
            logits
                .iter()
                .enumerate()
                .filter_map(|(i, &l)| {
                    Some(LlamaTokenData::new(
                        LlamaToken(i32::try_from(i).ok()?),
                        l,
                        0.0,
                    ))
                })
                .collect(),
            false,
        );
        all.apply_sampler(sampler);
        match best_allowed(&all.data) {
            Some(tok) => Ok((tok, true)),
            None => Err(self.fail("the reply grammar allows no token here")),
        }
    }

    fn decode(&mut self) -> Result<(), Stage2Error> {
        match self.ctx.decode(&mut self.batch) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(format!("llama_decode: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{best_allowed, shortlist, JsonDepth, SHORTLIST};
    use llama_cpp_2::token::LlamaToken;

    #[test]
    fn shortlist_holds_the_top_logits_in_order() {
        let logits: Vec<f32> = (0..1000u16).map(|i| f32::from((i * 37) % 1000)).collect();
        let top = shortlist(&logits);
        assert_eq!(top.len(), SHORTLIST);
        let mut want: Vec<(f32, usize)> = logits.iter().copied().zip(0..).collect();
        want.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (d, (l, i)) in top.iter().zip(&want) {
            assert_eq!(
                (d.logit(), d.id()),
                (*l, LlamaToken(i32::try_from(*i).unwrap_or(-1)))
            );
        }
        let with_inf = [f32::NEG_INFINITY, 1.0, f32::NAN, 3.0, 3.0];
        let ids: Vec<i32> = shortlist(&with_inf).iter().map(|d| d.id().0).collect();
        assert_eq!(
            ids,
            [3, 4, 1],
            "ties keep the lower id first; non-finite dropped"
        );
        assert_eq!(best_allowed(&shortlist(&with_inf)), Some(LlamaToken(3)));
        assert_eq!(best_allowed(&[]), None);
    }

    #[test]
    fn json_depth_ignores_braces_inside_strings() {
        let mut d = JsonDepth::default();
        assert!(!d.feed(br#"{"a": {"explanation": "a } and \" and {"#));
        assert!(!d.feed(br#"", "b": 1}"#));
        assert!(d.feed(b"}"));
        let mut split = JsonDepth::default();
        assert!(!split.feed(br#"{"x": "\"#));
        assert!(!split.feed(br#""}"#), "escaped quote split across pieces");
        assert!(split.feed(br#""}"#));
    }
}
