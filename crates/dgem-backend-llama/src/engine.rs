//! The llama.cpp context, its KV cache and the two ways of reading a call.
//!
//! KV reuse: the tokens currently cached for llama sequence 0 are remembered; a
//! new read drops everything after the longest common prefix and decodes only
//! the new suffix. Several reads of one call that share a prompt are either run
//! one after another through that cache, or (`batch_reads`) in **one** decode:
//! the shared prefix is tagged with every sequence id (or copied with
//! `seq_cp` when cached) and each read's suffix gets its own sequence id.

use std::num::NonZeroU32;

use dgem_backend::{BackendError, SequenceRead, SlotLogits};
use dgem_core::tokenizer::TokenId;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::readout::read_slot;
use crate::runtime::runtime;
use crate::worker::WorkerConfig;
use crate::LlamaError;

/// Largest physical batch llama.cpp computes at once (its default).
const MAX_UBATCH: usize = 512;
/// llama.cpp's `LLAMA_FLASH_ATTN_TYPE_DISABLED`.
const FLASH_ATTN_DISABLED: i32 = 0;
/// Row-tile size of ggml's CPU matrix kernels: a row's numbers depend on whether it
/// sat in a full tile of its batch. Reused KV prefixes and decode chunks start at
/// multiples of this, so a warm read gives bit-identical numbers to a cold one.
const TILE: usize = 8;
/// llama sequence ids available: 0 holds the cached prefix, 1.. the batched reads.
const MAX_SEQS: usize = 8;

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

fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Positions `[first_row, end)` a read needs: rows `pos - 1` of its slots.
fn span(read: &SequenceRead) -> Option<(usize, usize)> {
    let end = read.slots.iter().map(|s| s.pos).max()?;
    let first = read.slots.iter().map(|s| s.pos.saturating_sub(1)).min()?;
    Some((first, end))
}

/// Owns the context; lives on the model thread only.
pub(crate) struct Engine<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Tokens whose KV state sequence 0 currently holds, from position 0.
    cached: Vec<TokenId>,
    n_batch: usize,
    logits_all: bool,
    batch_reads: bool,
}

impl<'m> Engine<'m> {
    pub(crate) fn new(model: &'m LlamaModel, cfg: WorkerConfig) -> Result<Self, LlamaError> {
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
        let ctx = model
            .new_context(runtime()?, params)
            .map_err(|e| LlamaError::Context(e.to_string()))?;
        Ok(Self {
            ctx,
            batch: LlamaBatch::new(cfg.context_size.max(TILE), MAX_SEQS as i32),
            cached: Vec::new(),
            n_batch: (cfg.context_size / TILE * TILE).max(TILE),
            logits_all: cfg.logits_all,
            batch_reads: cfg.batch_reads,
        })
    }

    /// Forget the whole KV cache (after a failure its content is unknown).
    pub(crate) fn reset(&mut self) {
        self.ctx.clear_kv_cache();
        self.cached.clear();
    }

    /// Read every slot of validated reads; returns them and the reused positions.
    pub(crate) fn run_reads(
        &mut self,
        reads: &[SequenceRead],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(Vec<Vec<SlotLogits>>, usize), BackendError> {
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
                rest.len().min(MAX_SEQS - 1)
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

    /// Make sequence 0 hold `tokens[..start]` for the largest `start <= want`
    /// already cached; returns that `start`.
    fn keep_prefix(&mut self, tokens: &[TokenId], want: usize) -> Result<usize, BackendError> {
        let start = common_prefix(&self.cached, tokens).min(want) / TILE * TILE;
        let removed = self
            .ctx
            .clear_kv_cache_seq(Some(0), u32::try_from(start).ok(), None)
            .map_err(|e| model_err("kv seq_rm", e))?;
        if removed {
            self.cached.truncate(start);
            Ok(start)
        } else {
            self.reset();
            Ok(0)
        }
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
        let start = self.keep_prefix(tokens, first)?;
        let mut rows: Vec<usize> = read.slots.iter().map(|s| s.pos.saturating_sub(1)).collect();
        rows.sort_unstable();
        rows.dedup();
        let mut results: Vec<Option<SlotLogits>> = vec![None; read.slots.len()];
        let mut from = start;
        while from < end {
            let to = (from + self.n_batch).min(end);
            self.batch.clear();
            for (p, &t) in tokens.iter().enumerate().take(to).skip(from) {
                let want = self.logits_all || rows.binary_search(&p).is_ok();
                self.batch
                    .add(token(t)?, pos_i32(p)?, &[0], want)
                    .map_err(|e| model_err("batch", e))?;
            }
            self.decode()?;
            self.cached.extend_from_slice(&tokens[from..to]);
            for (slot, result) in read.slots.iter().zip(results.iter_mut()) {
                let row = slot.pos.saturating_sub(1);
                if (from..to).contains(&row) {
                    *result = Some(self.read_row(row - from, &slot.labels)?);
                }
            }
            from = to;
        }
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

    /// Several reads sharing a prefix in one decode, one llama sequence each.
    /// `None` when they do not fit (the caller then reads them one by one).
    #[allow(clippy::type_complexity)]
    fn read_group(
        &mut self,
        group: &[SequenceRead],
    ) -> Result<Option<(Vec<Vec<SlotLogits>>, usize)>, BackendError> {
        let Some(spans) = group.iter().map(span).collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        let Some(base) = group.first() else {
            return Ok(None);
        };
        let first_row = spans.iter().map(|s| s.0).min().unwrap_or(0);
        let shared = group
            .iter()
            .zip(&spans)
            .map(|(r, &(_, end))| common_prefix(&base.tokens[..spans[0].1], &r.tokens[..end]))
            .min()
            .unwrap_or(0)
            .min(first_row);
        let cells = shared + spans.iter().map(|&(_, end)| end - shared).sum::<usize>();
        if cells > self.n_batch {
            return Ok(None);
        }
        let start = self.keep_prefix(&base.tokens[..shared], shared)?;
        let result = self.decode_group(group, &spans, start, shared);
        // Sequences 1.. are scratch: drop them whatever happened.
        for seq in 1..=group.len() {
            let _ = self
                .ctx
                .clear_kv_cache_seq(u32::try_from(seq).ok(), None, None);
        }
        match result {
            Ok(slots) => {
                self.cached.extend_from_slice(&base.tokens[start..shared]);
                let reused = start + (group.len() - 1) * shared;
                Ok(Some((slots, reused)))
            }
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }

    fn decode_group(
        &mut self,
        group: &[SequenceRead],
        spans: &[(usize, usize)],
        start: usize,
        shared: usize,
    ) -> Result<Vec<Vec<SlotLogits>>, BackendError> {
        let seqs: Vec<i32> = (0..=group.len()).map(|s| s as i32).collect();
        for &seq in &seqs[1..] {
            if start > 0 {
                self.ctx
                    .copy_kv_cache_seq(0, seq, Some(0), u32::try_from(start).ok())
                    .map_err(|e| model_err("kv seq_cp", e))?;
            }
        }
        self.batch.clear();
        let prefix = &group[0].tokens[..shared];
        for (p, &t) in prefix.iter().enumerate().skip(start) {
            self.batch
                .add(token(t)?, pos_i32(p)?, &seqs, self.logits_all)
                .map_err(|e| model_err("batch", e))?;
        }
        // Batch index of each read's slot rows.
        let mut index: Vec<Vec<(usize, usize)>> = Vec::with_capacity(group.len());
        for ((read, &(_, end)), &seq) in group.iter().zip(spans).zip(&seqs[1..]) {
            let mut rows: Vec<usize> = read.slots.iter().map(|s| s.pos.saturating_sub(1)).collect();
            rows.sort_unstable();
            rows.dedup();
            let mut at = Vec::with_capacity(rows.len());
            for (p, &t) in read.tokens.iter().enumerate().take(end).skip(shared) {
                let want = rows.binary_search(&p).is_ok();
                if want {
                    at.push((p, usize::try_from(self.batch.n_tokens()).unwrap_or(0)));
                }
                self.batch
                    .add(token(t)?, pos_i32(p)?, &[seq], want || self.logits_all)
                    .map_err(|e| model_err("batch", e))?;
            }
            index.push(at);
        }
        self.decode()?;
        let mut out = Vec::with_capacity(group.len());
        for (read, at) in group.iter().zip(&index) {
            let mut slots = Vec::with_capacity(read.slots.len());
            for slot in &read.slots {
                let row = slot.pos.saturating_sub(1);
                let idx = at
                    .iter()
                    .find(|(p, _)| *p == row)
                    .map(|&(_, i)| i)
                    .ok_or_else(|| {
                        BackendError::Model("slot row missing from batch — this is a bug".into())
                    })?;
                slots.push(self.read_row(idx, &slot.labels)?);
            }
            out.push(slots);
        }
        Ok(out)
    }

    fn decode(&mut self) -> Result<(), BackendError> {
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| model_err("llama_decode", e))
    }

    /// Read a slot from the logits of batch entry `idx` (which requested output).
    fn read_row(&self, idx: usize, labels: &[Vec<TokenId>]) -> Result<SlotLogits, BackendError> {
        let idx =
            i32::try_from(idx).map_err(|_| BackendError::Model(format!("batch index {idx}")))?;
        Ok(read_slot(self.ctx.get_logits_ith(idx), labels))
    }
}
