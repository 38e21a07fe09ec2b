//! Snapshots of sequence 0's KV state at reuse points, so that prompts which
//! take turns in the cache do not evict each other's shared prefix.
//!
//! The cache keeps one chain of positions (sequence 0). A decision read in
//! several option listings (order debiasing) has one prompt per listing, and
//! under `schema_first` each listing's policy prefix differs: the chain then
//! ends each decision holding the last listing only, and the next state of the
//! same policy re-decodes every listing's policy text. So when a canonical
//! decode ends at one of the read's reuse points (where a `schema_first`
//! policy's prefix ends, where a `document_first` state ends and where the
//! question block's head after it ends, where the model's turn begins),
//! sequence 0's state
//! for `[0, point)` is copied out ([`LlamaContext::state_seq_get`]) with the
//! tokens and the chain of chunk ends that built it. A later read whose own
//! chunk plan agrees with that chain restores the copy into an emptied cache
//! ([`LlamaContext::state_seq_set`]) instead of decoding the prefix again.
//!
//! **Same bits.** A restored state is the bytes the decode wrote, placed in
//! cells `0..point` of an empty cache in position order (llama.cpp fills a
//! cleared cache from cell 0), which is where a cold decode of the same chunks
//! puts them; decoding then continues from `point` in the read's own chunk
//! plan, so the batches have the shapes of a cold read's and give its bits
//! (`crates/dgem-backend-llama/tests/forward.rs` checks this).
//!
//! Memory is bounded: [`Snapshots::budget`] bytes in all (least recently used
//! first out). Measured on Gemma 3 270M (the `KV snapshot saved` debug log): a
//! 225-token `schema_first` policy prefix takes 4,153,988 bytes, about 18.5 KB
//! a token.

use dgem_core::tokenizer::TokenId;
use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::context::LlamaContext;

/// One saved prefix.
struct Snapshot {
    /// The prefix's tokens, from position 0.
    tokens: Vec<TokenId>,
    /// The canonical chunk ends that built it (the last one is its length).
    bounds: Vec<usize>,
    state: SeqState,
}

impl Snapshot {
    /// Bytes this snapshot holds (its state and its tokens).
    fn cost(&self) -> usize {
        self.state.byte_len() + std::mem::size_of_val(self.tokens.as_slice())
    }
}

/// Saved prefixes, most recently used last.
pub(crate) struct Snapshots {
    items: Vec<Snapshot>,
    bytes: usize,
    /// Most bytes held (0: snapshots off).
    budget: usize,
}

impl Snapshots {
    /// An empty store holding at most `budget` bytes (0 turns it off).
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            items: Vec::new(),
            bytes: 0,
            budget,
        }
    }

    /// Drop every snapshot.
    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.bytes = 0;
    }

    /// Save sequence 0 of `ctx`, which holds exactly `tokens` built by the
    /// chunk chain `bounds`, unless the same prefix is saved already or it
    /// would not fit the budget. A failed copy is skipped (a snapshot only
    /// saves time).
    pub(crate) fn save(&mut self, ctx: &LlamaContext<'_>, tokens: &[TokenId], bounds: &[usize]) {
        if self.budget == 0 || tokens.is_empty() {
            return;
        }
        if let Some(i) = self.items.iter().position(|s| s.tokens == tokens) {
            let s = self.items.remove(i);
            self.items.push(s);
            return;
        }
        let state = match ctx.state_seq_get(0, LlamaStateSeqFlags::empty()) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "KV snapshot not taken");
                return;
            }
        };
        let size = state.byte_len() + std::mem::size_of_val(tokens);
        if size > self.budget {
            return;
        }
        while self.bytes + size > self.budget && !self.items.is_empty() {
            let old = self.items.remove(0);
            self.bytes -= old.cost();
        }
        self.bytes += size;
        tracing::debug!(
            tokens = tokens.len(),
            bytes = size,
            held = self.bytes,
            "KV snapshot saved"
        );
        self.items.push(Snapshot {
            tokens: tokens.to_vec(),
            bounds: bounds.to_vec(),
            state,
        });
    }

    /// The longest saved prefix of `tokens` that is longer than `beyond`, at
    /// most `want` long, and built by the chunk chain `plan` (the read's own
    /// chunk plan) begins with; its index.
    pub(crate) fn best(
        &self,
        tokens: &[TokenId],
        want: usize,
        beyond: usize,
        plan: &[usize],
    ) -> Option<usize> {
        self.items
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                let n = s.tokens.len();
                n > beyond
                    && n <= want
                    && tokens.get(..n) == Some(&s.tokens[..])
                    && plan.iter().take_while(|&&p| p <= n).eq(s.bounds.iter())
            })
            .max_by_key(|(_, s)| s.tokens.len())
            .map(|(i, _)| i)
    }

    /// Restore snapshot `i` into sequence 0 of `ctx`, whose cache must be
    /// empty; returns its tokens and chunk chain, or `None` when llama.cpp
    /// refused it (the snapshot is then dropped).
    pub(crate) fn restore(
        &mut self,
        ctx: &mut LlamaContext<'_>,
        i: usize,
    ) -> Option<(Vec<TokenId>, Vec<usize>)> {
        if i >= self.items.len() {
            return None;
        }
        let s = self.items.remove(i);
        match ctx.state_seq_set(&s.state, 0) {
            Ok(()) => {
                let out = (s.tokens.clone(), s.bounds.clone());
                self.items.push(s);
                Some(out)
            }
            Err(e) => {
                tracing::warn!(error = %e, "KV snapshot could not be restored; dropped");
                self.bytes -= s.cost();
                None
            }
        }
    }
}
