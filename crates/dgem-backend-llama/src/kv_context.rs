//! The llama.cpp context, its KV cache and the two ways of reading a call.
//!
//! **Determinism.** ggml's CPU kernels give a row numbers that depend on the
//! batch it was computed in: the AVX2-repacked Q4_K weights are multiplied
//! four rows at a time (GEMM) and the rows of a batch's trailing partial group
//! go through a GEMV (ggml-cpu `repack.cpp`), and other kernels choose their
//! path by batch size. Measured on Gemma 3 270M: a warm read that re-decoded
//! only the last few tokens of a prompt moved `yes` from 0.4513 to 0.4528. So the shape of
//! every decode is made a function of the tokens alone, never of what the KV
//! cache held before the call:
//! - the prompt is decoded in **canonical chunks** ([`canonical_plan`]): its
//!   boundaries are the multiples of `C` (= [`WorkerConfig::kv_chunk`]) at
//!   absolute positions before the read's first reuse point, the read's own
//!   reuse points ([`SequenceRead::reuse_points`], e.g. where a policy's
//!   shared prefix ends), and the read's end — a function of the read alone,
//!   never of the cache;
//! - the context remembers the chain of chunk ends that built the cached prefix
//!   (`bounds`); across calls a prefix is reused only up to a boundary where
//!   that chain and the new read's own chunk plan agree, so a warm read
//!   re-decodes exactly the chunks a cold read decodes last, in batches of the
//!   same shape, and gets the same bits;
//! - within one call, later reads reuse everything the call itself computed
//!   (the same sequence of decodes happens on every run of the request).
//!
//! The physical KV cells are laid out in position order too (sequence 0 only
//! grows at its end or is cut back, so llama.cpp places new tokens right after
//! the kept prefix): attention sums over cells in cell order.
//!
//! Several reads of one call that share a prompt are either run one after
//! another through that cache, or (`batch_reads`) in **one** decode of their
//! continuations: the shared prefix, up to the last boundary of the canonical
//! chunk plan in it (the fork), is decoded on sequence 0 (canonical chunks),
//! copied to one sequence id per read with `seq_cp`, and every read's suffix
//! from the fork goes in one batch under its own id, as a prefix tree (a
//! token the reads share goes in once). Reads that share their whole prompt
//! up to their first slot row (one sequence-scored slot's continuations)
//! keep all of it on sequence 0 instead, for a later call to reuse.
//!
//! **Readout.** A slot's label probabilities come from the final hidden state
//! of its row and the label tokens' rows of the output matrix
//! ([`crate::labels`]); the graph stops before the output head unless some
//! slot of the decode asks for the full vocabulary (`SlotQuery::vocab`), and
//! the label numbers are computed the same way in both cases. That readout is
//! checked once at load against llama.cpp's own logits ([`probe`]); a model
//! whose head it does not reproduce is read from the head instead
//! ([`crate::Readout::FullHead`]: the graph always runs to the head).

mod baseline;
mod group;
mod kv_store;
mod plan;
mod probe;
mod snapshots;

use std::num::NonZeroU32;

use dgem_backend::{BackendError, SequenceRead, SlotLogits, SlotQuery};
use dgem_core::tokenizer::TokenId;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::config::WorkerConfig;
use crate::labels::{CaptureHandle, OutputRows};
use crate::readout::{pooled_label_logits, read_vocab, restricted_logprobs};
use crate::runtime::runtime;
use crate::LlamaError;
use kv_store::KvStore;
use plan::{canonical_plan, common_prefix, continuation_run, span, store_points};
use snapshots::Snapshots;

/// Largest physical batch llama.cpp computes at once (its default).
const MAX_UBATCH: usize = 512;
/// llama.cpp's `LLAMA_FLASH_ATTN_TYPE_DISABLED`.
const FLASH_ATTN_DISABLED: i32 = 0;
/// llama sequence ids available: 0 holds the cached prefix, 1.. the batched reads.
const MAX_SEQS: usize = 16;

fn model_err(what: &str, e: impl std::fmt::Display) -> BackendError {
    BackendError::Model(format!("{what}: {e}"))
}

fn pos_i32(p: usize) -> Result<i32, BackendError> {
    i32::try_from(p).map_err(|_| BackendError::InvalidRequest(format!("position {p} out of range")))
}

fn token(t: TokenId) -> Result<LlamaToken, BackendError> {
    i32::try_from(t)
        .map(LlamaToken)
        .map_err(|_| BackendError::InvalidRequest(format!("token id {t} out of range")))
}

/// The model thread's llama.cpp context and its KV-cache bookkeeping (the
/// canonical chunk chain, saved prefixes, the disk store); lives on the
/// model thread only. Named apart from `dgem_engine::Engine`, the reader
/// that turns a policy and a state into a decision over a backend.
pub(crate) struct KvContext<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Tokens whose KV state sequence 0 currently holds, from position 0.
    cached: Vec<TokenId>,
    /// Ends of the canonical chunks that built `cached`, in order (the chain
    /// covers `[0, bounds.last())`): a later call may reuse a prefix only up to
    /// a boundary where its own chunk plan agrees with this chain.
    bounds: Vec<usize>,
    /// Leading positions of `cached` this call may reuse: the end of `bounds`
    /// at the start of a call, then everything the call itself decoded.
    trusted: usize,
    /// Canonical chunk size `C` (tokens).
    chunk: usize,
    /// Tokens one `batch` holds.
    batch_capacity: usize,
    logits_all: bool,
    batch_reads: bool,
    /// Wall time of the last `llama_decode` call, ms.
    last_decode_ms: f64,
    /// The graph callback's state (llama.cpp holds its address for the life
    /// of `ctx`, so it is declared after `ctx` and dropped after it).
    capture: CaptureHandle,
    /// The output matrix's label rows.
    rows: OutputRows,
    /// Batch indices that requested output in the last decode, in batch
    /// order: the `i`-th one's hidden state is the capture's row `i`.
    outputs: Vec<usize>,
    /// Read label logits from llama.cpp's logits (the head runs at every
    /// decode) rather than from the label rows: set by [`Self::check_readout`].
    head_readout: bool,
    /// Sequence 0's state saved at reuse points ([`snapshots`]).
    snapshots: Snapshots,
    /// Policy prefixes kept on disk ([`kv_store`]).
    kv_store: Option<KvStore>,
    /// Where the current read's prefixes are kept on disk ([`kv_store`]):
    /// its reuse points up to its policy point ([`store_points`]).
    store_points: Vec<usize>,
    /// Most threads a call uses.
    max_threads: usize,
    /// Threads the context is set to now.
    threads: usize,
    /// Pick each call's threads from the load ([`crate::cpu`]).
    follow_load: bool,
}

impl<'m> KvContext<'m> {
    pub(crate) fn new(
        model: &'m LlamaModel,
        cfg: WorkerConfig,
        rows: OutputRows,
    ) -> Result<Self, LlamaError> {
        let n_ctx = u32::try_from(cfg.context_size)
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| LlamaError::Context(format!("context size {}", cfg.context_size)))?;
        let threads = i32::try_from(cfg.n_threads.max(1))
            .map_err(|_| LlamaError::Context(format!("n_threads {}", cfg.n_threads)))?;
        let n_ubatch = n_ctx.get().min(MAX_UBATCH as u32);
        let params = LlamaContextParams::default()
            .with_n_ctx(Some(n_ctx))
            // One logical batch covers a whole sequence; llama.cpp splits it in ubatches.
            .with_n_batch(n_ctx.get())
            .with_n_ubatch(n_ubatch)
            .with_n_seq_max(MAX_SEQS as u32)
            // All sequences share one KV buffer of `n_ctx` cells (prefix cells are shared).
            .with_kv_unified(true)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            // A full-size sliding-window cache keeps every position, so a prefix can
            // be reused after a longer sequence was cached.
            .with_swa_full(true)
            // Flash attention on the CPU computes a query differently depending on how
            // many share its batch, so a re-decoded row would not match a cold read.
            .with_flash_attention_policy(FLASH_ATTN_DISABLED);
        let capture = CaptureHandle::new(usize::try_from(model.n_embd()).unwrap_or(0));
        let params = capture.register(params);
        let ctx = model
            .new_context(runtime()?, params)
            .map_err(|e| LlamaError::Context(e.to_string()))?;
        Ok(Self {
            ctx,
            // A continuation token may belong to every batched read's sequence.
            batch: LlamaBatch::new(cfg.context_size.max(16), MAX_SEQS as i32),
            cached: Vec::new(),
            bounds: Vec::new(),
            trusted: 0,
            chunk: cfg.kv_chunk.max(1),
            batch_capacity: cfg.context_size.max(16),
            logits_all: cfg.logits_all,
            batch_reads: cfg.batch_reads,
            last_decode_ms: 0.0,
            capture,
            rows,
            outputs: Vec::new(),
            head_readout: false,
            snapshots: Snapshots::new(cfg.kv_snapshot_bytes),
            kv_store: cfg
                .kv_store
                .map(|(dir, model)| KvStore::new(dir, &model, cfg.context_size)),
            store_points: Vec::new(),
            max_threads: cfg.n_threads.max(1),
            threads: cfg.n_threads.max(1),
            follow_load: cfg.follow_load,
        })
    }

    /// Set this call's threads from the load on the machine now
    /// ([`crate::cpu::threads_for`] of [`crate::cpu::sample_settled`]). Thread counts change no number (see
    /// [`crate::cpu`]).
    fn pick_threads(&mut self) {
        let want = if self.follow_load {
            crate::cpu::threads_for(
                self.max_threads,
                crate::cpu::sample_settled(self.max_threads),
            )
        } else {
            self.max_threads
        };
        if want != self.threads {
            let n = i32::try_from(want).unwrap_or(1);
            self.ctx.set_n_threads(n, n);
            tracing::debug!(
                threads = want,
                ceiling = self.max_threads,
                "model threads follow the load"
            );
            self.threads = want;
        }
    }

    /// Forget the whole KV cache (after a failure its content is unknown).
    pub(crate) fn reset(&mut self) {
        self.ctx.clear_kv_cache();
        self.cached.clear();
        self.bounds.clear();
        self.trusted = 0;
    }

    /// Forget the KV cache and every saved prefix: the next read is cold.
    pub(crate) fn forget(&mut self) {
        self.reset();
        self.snapshots.clear();
    }

    /// Wall time of the last `llama_decode` call, ms.
    pub(crate) fn last_decode_ms(&self) -> f64 {
        self.last_decode_ms
    }

    /// Read every slot of validated reads; returns them and the reused positions.
    pub(crate) fn run_reads(
        &mut self,
        reads: &[SequenceRead],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(Vec<Vec<SlotLogits>>, usize), BackendError> {
        self.pick_threads();
        // What an earlier call left is reusable only along its canonical chain.
        self.trusted = self.canonical_end();
        let mut out = Vec::with_capacity(reads.len());
        let mut cached = 0;
        let mut rest = reads;
        while !rest.is_empty() {
            if cancelled() {
                // The caller timed out or went away: stop spending CPU on reads
                // nobody will receive.
                return Err(BackendError::Unavailable(
                    "read cancelled: the caller went away".into(),
                ));
            }
            let take = if self.batch_reads {
                continuation_run(rest)
            } else {
                1
            };
            let (group, tail) = rest.split_at(take);
            rest = tail;
            if group.len() > 1 {
                if let Some((slots, reused)) = self.read_group(group)? {
                    out.extend(slots);
                    cached += reused;
                    continue;
                }
            }
            for read in group {
                if cancelled() {
                    return Err(BackendError::Unavailable(
                        "read cancelled: the caller went away".into(),
                    ));
                }
                let (slots, reused) = self.read_one(read)?;
                out.push(slots);
                cached += reused;
            }
        }
        Ok((out, cached))
    }

    /// End of the canonical chain of the cached prefix (0 when there is none).
    fn canonical_end(&self) -> usize {
        self.bounds.last().copied().unwrap_or(0)
    }

    /// The chunk plan of `tokens[..end]` ([`canonical_plan`]).
    fn plan(&self, end: usize, points: &[usize]) -> Vec<usize> {
        canonical_plan(self.chunk, end, points)
    }

    /// Make sequence 0 hold `tokens[..start]` for the largest reusable
    /// `start <= want`; returns that `start`. Reusable: what this call decoded,
    /// else a prefix of the canonical chain that `plan` (this read's chunk
    /// plan) shares (see the module docs), else a longer saved prefix whose
    /// chain `plan` shares ([`snapshots`]), restored into an emptied cache.
    fn keep_prefix(
        &mut self,
        tokens: &[TokenId],
        want: usize,
        plan: &[usize],
    ) -> Result<usize, BackendError> {
        let reusable = common_prefix(&self.cached, tokens)
            .min(want)
            .min(self.trusted);
        let start = if reusable > self.canonical_end() {
            reusable
        } else {
            plan.iter()
                .zip(&self.bounds)
                .take_while(|(p, b)| p == b && **p <= reusable)
                .last()
                .map_or(0, |(p, _)| *p)
        };
        if let Some(i) = self.snapshots.best(tokens, want, start, plan) {
            self.reset();
            if let Some((cached, bounds)) = self.snapshots.restore(&mut self.ctx, i) {
                self.trusted = cached.len();
                self.cached = cached;
                self.bounds = bounds;
                return Ok(self.trusted);
            }
            // Refused: the cache is empty, decode from the start.
            return Ok(0);
        }
        let stored = self.store_points.iter().rev().find_map(|&point| {
            let store = self.kv_store.as_ref()?;
            (point > start && point <= want)
                .then(|| store.find(tokens, point, plan))
                .flatten()
                .map(|(path, bounds)| (point, path, bounds))
        });
        if let Some((point, path, bounds)) = stored {
            self.reset();
            if KvStore::load(&mut self.ctx, &path, &tokens[..point]) {
                // The shorter prefixes of the same read stay as recent as the
                // one loaded, so a state of another shape still finds its
                // policy's.
                if let Some(store) = &self.kv_store {
                    for &p in self.store_points.iter().filter(|&&p| p < point) {
                        if let Some((shorter, _)) = store.find(tokens, p, plan) {
                            KvStore::touch(&shorter);
                        }
                    }
                }
                self.cached = tokens[..point].to_vec();
                self.bounds = bounds;
                self.trusted = point;
                // Later reads of this process find it in memory.
                self.snapshots.save(&self.ctx, &self.cached, &self.bounds);
                return Ok(point);
            }
            self.reset();
            return Ok(0);
        }
        let removed = self
            .ctx
            .clear_kv_cache_seq(Some(0), u32::try_from(start).ok(), None)
            .map_err(|e| model_err("kv seq_rm", e))?;
        if removed {
            self.cached.truncate(start);
            self.bounds.retain(|&b| b <= start);
            self.trusted = self.trusted.min(start);
            Ok(start)
        } else {
            self.reset();
            Ok(0)
        }
    }

    /// Decode `tokens[from..end]` on sequence 0 after [`Self::keep_prefix`]
    /// returned `from`, requesting output at the (sorted) `rows`, the full
    /// output head for a decode holding one of the (sorted) `vocab_rows`; calls
    /// `on_rows(self, chunk_start, chunk_end)` after each decode so the caller
    /// can read the rows that decode produced. From the end of the canonical
    /// chain the pieces follow `plan` (this read's chunk plan, ending at
    /// `tokens.len()`) and extend the chain; otherwise (reuse of what this
    /// call decoded) the rest is one batch. A canonical decode that ends at
    /// one of `save_at` (the read's reuse points) saves sequence 0 there
    /// ([`snapshots`]).
    #[allow(clippy::too_many_arguments)]
    fn decode_prompt(
        &mut self,
        tokens: &[TokenId],
        from: usize,
        rows: &[usize],
        vocab_rows: &[usize],
        plan: &[usize],
        save_at: &[usize],
        on_rows: &mut dyn FnMut(&mut Self, usize, usize) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let end = tokens.len();
        let canonical = from == self.canonical_end() && (from == 0 || plan.contains(&from));
        let mut at = from;
        while at < end {
            let to = if canonical {
                plan.iter()
                    .copied()
                    .find(|&b| b > at)
                    .unwrap_or(end)
                    .min(end)
            } else {
                // Within-call reuse: one batch (its shape is fixed per request).
                end
            };
            self.batch.clear();
            self.outputs.clear();
            for (p, &t) in tokens.iter().enumerate().take(to).skip(at) {
                let want = self.logits_all || rows.binary_search(&p).is_ok();
                if want {
                    self.outputs.push(p - at);
                }
                self.batch
                    .add(token(t)?, pos_i32(p)?, &[0], want)
                    .map_err(|e| model_err("batch", e))?;
            }
            let full_head = self.logits_all || vocab_rows.iter().any(|r| (at..to).contains(r));
            self.decode(full_head)?;
            self.cached.extend_from_slice(&tokens[at..to]);
            self.trusted = self.cached.len();
            if canonical {
                self.bounds.push(to);
                if save_at.contains(&to) {
                    self.snapshots.save(&self.ctx, &self.cached, &self.bounds);
                }
                if self.store_points.contains(&to) {
                    if let Some(store) = &self.kv_store {
                        store.save(&self.ctx, &self.cached, &self.bounds);
                    }
                }
            }
            on_rows(self, at, to)?;
            at = to;
        }
        Ok(())
    }

    /// One read through the longest-common-prefix cache of sequence 0.
    fn read_one(&mut self, read: &SequenceRead) -> Result<(Vec<SlotLogits>, usize), BackendError> {
        let Some((first, end)) = span(read) else {
            return Ok((Vec::new(), 0));
        };
        let tokens = read.tokens.get(..end).ok_or_else(|| {
            BackendError::InvalidRequest(format!("slot `pos` {end} is past the sequence"))
        })?;
        // Logits exist only for rows decoded now: re-decode from the first slot row.
        let plan = self.plan(end, &read.reuse_points);
        self.store_points = store_points(read);
        let start = self.keep_prefix(tokens, first, &plan)?;
        let rows_of = |vocab_only: bool| {
            let mut rows: Vec<usize> = read
                .slots
                .iter()
                .filter(|s| s.vocab || !vocab_only)
                .map(|s| s.pos.saturating_sub(1))
                .collect();
            rows.sort_unstable();
            rows.dedup();
            rows
        };
        let (rows, vocab_rows) = (rows_of(false), rows_of(true));
        let mut results: Vec<Option<SlotLogits>> = vec![None; read.slots.len()];
        self.decode_prompt(
            tokens,
            start,
            &rows,
            &vocab_rows,
            &plan,
            &read.reuse_points,
            &mut |kv, from, to| {
                for (slot, result) in read.slots.iter().zip(results.iter_mut()) {
                    let row = slot.pos.saturating_sub(1);
                    if (from..to).contains(&row) {
                        *result = Some(kv.read_row(row - from, slot)?);
                    }
                }
                Ok(())
            },
        )?;
        let slots = results
            .into_iter()
            .map(|r| {
                r.ok_or_else(|| {
                    BackendError::Model("a slot row was not decoded — this is a bug".into())
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((slots, start))
    }

    /// One `llama_decode` of the batch; `full_head` lets the graph run on to
    /// the output head (else it stops at the final hidden states).
    fn decode(&mut self, full_head: bool) -> Result<(), BackendError> {
        let full_head = full_head || self.head_readout;
        self.capture.get().start(full_head);
        let started = std::time::Instant::now();
        let result = self
            .ctx
            .decode(&mut self.batch)
            .map_err(|e| model_err("llama_decode", e));
        self.last_decode_ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::debug!(
            tokens = self.batch.n_tokens(),
            outputs = self.outputs.len(),
            full_head,
            ms = self.last_decode_ms,
            "llama_decode"
        );
        result
    }

    /// Read `slot` at batch entry `idx` of the last decode (which requested
    /// output): the label logits from its final hidden state and the label
    /// rows ([`OutputRows::logit`]) — or from llama.cpp's logits under
    /// [`Self::head_readout`] — pooled per label and restricted; the
    /// full-vocabulary reading from llama.cpp's logits when the slot asks.
    fn read_row(&mut self, idx: usize, slot: &SlotQuery) -> Result<SlotLogits, BackendError> {
        let missing =
            || BackendError::Model(format!("batch entry {idx} has no output — this is a bug"));
        let ordinal = self.outputs.binary_search(&idx).map_err(|_| missing())?;
        let i =
            i32::try_from(idx).map_err(|_| BackendError::Model(format!("batch index {idx}")))?;
        let label_logits = if self.head_readout {
            let logits = self.ctx.get_logits_ith(i);
            pooled_label_logits(&slot.labels, |id| {
                Ok::<_, BackendError>(logits.get(id as usize).map(|&l| f64::from(l)))
            })?
        } else {
            // Two fields borrowed side by side: the capture and the output rows.
            let hidden = self.capture.get().row(ordinal).ok_or_else(missing)?;
            let rows = &mut self.rows;
            pooled_label_logits(&slot.labels, |id| rows.logit(hidden, id))?
        };
        let vocab = if slot.vocab {
            Some(read_vocab(self.ctx.get_logits_ith(i), &slot.labels))
        } else {
            None
        };
        Ok(SlotLogits {
            label_logprobs: restricted_logprobs(&label_logits),
            vocab,
        })
    }
}
