//! The benchmark baseline on the model thread: llama.cpp's own evaluation of
//! a prompt, optionally after a cached prefix (moved from `engine.rs`, now `kv_context.rs`
//! unchanged).

use dgem_backend::{BackendError, SequenceRead, SlotLogits};

use super::{model_err, pos_i32, token, KvContext};
use crate::readout::read_slot;

impl KvContext<'_> {
    /// The benchmark baseline: llama.cpp's own prompt evaluation of
    /// `reads[0].tokens` on an empty cache — the whole prompt in one batch
    /// (llama.cpp splits it in ubatches of 512), logits at the last row only —
    /// then an empty cache again. With a reuse point `p` on the read, the
    /// tokens before `p` are decoded first in a batch of their own and only
    /// the rest is the timed batch (a cached prefix). Returns the last row
    /// read over the first slot's labels; [`Self::last_decode_ms`] holds the
    /// time of the last decode.
    pub(crate) fn prompt_eval(
        &mut self,
        reads: &[SequenceRead],
    ) -> Result<(Vec<Vec<SlotLogits>>, usize), BackendError> {
        let Some(read) = reads.first() else {
            return Ok((Vec::new(), 0));
        };
        self.pick_threads();
        self.reset();
        let last = read.tokens.len().saturating_sub(1);
        let cached = read
            .reuse_points
            .first()
            .copied()
            .filter(|&p| p > 0 && p <= last)
            .unwrap_or(0);
        if cached > 0 {
            self.batch.clear();
            for (p, &t) in read.tokens.iter().enumerate().take(cached) {
                self.batch
                    .add(token(t)?, pos_i32(p)?, &[0], false)
                    .map_err(|e| model_err("batch", e))?;
            }
            if let Err(e) = self.decode(false) {
                self.reset();
                return Err(e);
            }
        }
        self.batch.clear();
        for (p, &t) in read.tokens.iter().enumerate().skip(cached) {
            self.batch
                .add(token(t)?, pos_i32(p)?, &[0], p == last)
                .map_err(|e| model_err("batch", e))?;
        }
        // llama.cpp's own prompt evaluation runs the output head.
        let result = self.decode(true);
        let slots = match (&result, read.slots.first()) {
            (Ok(()), Some(slot)) => {
                let at = last - cached;
                let idx = i32::try_from(at)
                    .map_err(|_| BackendError::Model(format!("batch index {at}")))?;
                vec![read_slot(self.ctx.get_logits_ith(idx), &slot.labels)]
            }
            _ => Vec::new(),
        };
        self.reset();
        result.map(|()| (vec![slots], 0))
    }
}
