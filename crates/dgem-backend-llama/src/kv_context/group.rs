//! Several reads sharing a prompt, read in one decode of their continuations
//! (`batch_reads`): the shared prefix up to the fork ([`fork_point`]) on
//! sequence 0, then every read's tokens from the fork as a prefix tree under
//! its own sequence id (the module docs of [`super`] explain the layout).

use dgem_backend::{BackendError, SequenceRead, SlotLogits};
use dgem_core::tokenizer::TokenId;

use super::{common_prefix, model_err, pos_i32, span, store_points, token, KvContext};

impl KvContext<'_> {
    /// Several reads sharing a prefix: the prefix up to the fork on sequence
    /// 0 (canonical chunks, through the cache), then every read's tokens from
    /// the fork in one decode under its own sequence id. Returns the slots and
    /// the positions reused (needed by the reads, not decoded now). `None`
    /// when they do not fit (the caller then reads them one by one).
    #[allow(clippy::type_complexity)]
    pub(super) fn read_group(
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
        // Reads that part before their first slot row (a question's option
        // listings) fork at a plan boundary; reads that share their whole
        // prompt (the continuations of one sequence-scored slot) keep it on
        // sequence 0, where a later call can reuse all of it.
        let shared = if shared < first_row {
            fork_point(shared, self.chunk, &base.reuse_points)
        } else {
            shared
        };
        // The batch holds each token the reads share past the fork once.
        let tree = ContinuationTree::new(group, &spans, shared);
        if shared + tree.nodes.len() > self.batch_capacity || shared == 0 {
            return Ok(None);
        }
        let plan = self.plan(shared, &base.reuse_points);
        self.store_points = store_points(base);
        let start = self.keep_prefix(&base.tokens[..shared], shared, &plan)?;
        self.decode_prompt(
            &base.tokens[..shared],
            start,
            &[],
            &[],
            &plan,
            &base.reuse_points,
            &mut |_, _, _| Ok(()),
        )?;
        let result = self.decode_continuations(group, &tree, shared);
        // Sequences 1.. are scratch: drop them whatever happened.
        for seq in 1..=group.len() {
            let _ = self
                .ctx
                .clear_kv_cache_seq(u32::try_from(seq).ok(), None, None);
        }
        match result {
            Ok(slots) => {
                // Positions the reads needed less those decoded now: the
                // cached prefix, the shared prefix for every read but the
                // first, and the tree's shared tokens.
                let needed: usize = spans.iter().map(|&(_, end)| end).sum();
                let decoded = shared.saturating_sub(start) + tree.nodes.len();
                Ok(Some((slots, needed.saturating_sub(decoded))))
            }
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }

    /// Copy the prefix `[0, shared)` of sequence 0 to sequences `1..=n` and
    /// decode every read's tokens `[shared, end)` in one batch, as a prefix
    /// tree: a token the reads share (the same tokens since `shared`) goes in
    /// once, under all their sequence ids, and a row they share is read once.
    fn decode_continuations(
        &mut self,
        group: &[SequenceRead],
        tree: &ContinuationTree,
        shared: usize,
    ) -> Result<Vec<Vec<SlotLogits>>, BackendError> {
        let seqs: Vec<i32> = (1..=group.len()).map(|s| s as i32).collect();
        for &seq in &seqs {
            self.ctx
                .copy_kv_cache_seq(0, seq, Some(0), u32::try_from(shared).ok())
                .map_err(|e| model_err("kv seq_cp", e))?;
        }
        self.batch.clear();
        self.outputs.clear();
        for (i, node) in tree.nodes.iter().enumerate() {
            let ids: Vec<i32> = node.reads.iter().map(|&r| seqs[r]).collect();
            let want = node.output || self.logits_all;
            if want {
                self.outputs.push(i);
            }
            self.batch
                .add(token(node.token)?, pos_i32(node.pos)?, &ids, want)
                .map_err(|e| model_err("batch", e))?;
        }
        let full_head = self.logits_all || tree.nodes.iter().any(|n| n.vocab);
        self.decode(full_head)?;
        let mut out = Vec::with_capacity(group.len());
        for (r, read) in group.iter().enumerate() {
            let mut slots = Vec::with_capacity(read.slots.len());
            for slot in &read.slots {
                let idx = slot
                    .pos
                    .checked_sub(1 + shared)
                    .and_then(|depth| tree.paths[r].get(depth))
                    .ok_or_else(|| {
                        BackendError::Model("slot row missing from batch — this is a bug".into())
                    })?;
                slots.push(self.read_row(*idx, slot)?);
            }
            out.push(slots);
        }
        Ok(out)
    }
}

/// Where a group of reads forks: the last boundary of the canonical chunk
/// plan ([`super::canonical_plan`]: a multiple of `chunk` before the first
/// reuse point, or one of the reuse `points`) at or before `common`, the
/// prefix every read of the group shares; `common` itself when there is
/// none. Sequence 0 holds the prefix up to there, built in
/// canonical chunks; everything after it goes into the one decode of the
/// continuations. So a group costs one decode past its cached prefix, not a
/// short canonical decode followed by the continuations; and the fork is a
/// function of the reads' tokens and reuse points, never of the cache.
fn fork_point(common: usize, chunk: usize, points: &[usize]) -> usize {
    // The plan of `common + 1` tokens: its boundaries before its end are
    // exactly the plan's boundaries at or before `common`.
    let plan = super::canonical_plan(chunk, common + 1, points);
    plan.iter().rev().nth(1).copied().unwrap_or(common)
}

/// One token of a [`ContinuationTree`].
struct TreeNode {
    token: TokenId,
    pos: usize,
    /// Indices of the reads (in the group) whose continuation holds this node.
    reads: Vec<usize>,
    /// Some read needs the logits of this row.
    output: bool,
    /// Some read needs the full-vocabulary logits of this row.
    vocab: bool,
}

/// The continuations `[shared, end)` of a group of reads as a prefix tree,
/// nodes in the order they go into the batch (each read's path in position
/// order, a branch after the nodes it branches from, as llama.cpp requires of
/// a batch whose tokens belong to several sequences).
struct ContinuationTree {
    nodes: Vec<TreeNode>,
    /// Per read, the node (= batch index) at each position from `shared`.
    paths: Vec<Vec<usize>>,
}

impl ContinuationTree {
    fn new(group: &[SequenceRead], spans: &[(usize, usize)], shared: usize) -> Self {
        let mut nodes: Vec<TreeNode> = Vec::new();
        let mut children: std::collections::HashMap<(Option<usize>, TokenId), usize> =
            std::collections::HashMap::new();
        let mut paths = Vec::with_capacity(group.len());
        for (r, (read, &(_, end))) in group.iter().zip(spans).enumerate() {
            let rows: Vec<usize> = read.slots.iter().map(|s| s.pos.saturating_sub(1)).collect();
            let vocab_rows: Vec<usize> = read
                .slots
                .iter()
                .filter(|s| s.vocab)
                .map(|s| s.pos.saturating_sub(1))
                .collect();
            let mut parent = None;
            let mut path = Vec::with_capacity(end.saturating_sub(shared));
            for (p, &t) in read.tokens.iter().enumerate().take(end).skip(shared) {
                let at = *children.entry((parent, t)).or_insert_with(|| {
                    nodes.push(TreeNode {
                        token: t,
                        pos: p,
                        reads: Vec::new(),
                        output: false,
                        vocab: false,
                    });
                    nodes.len() - 1
                });
                let node = &mut nodes[at];
                node.reads.push(r);
                node.output |= rows.contains(&p);
                node.vocab |= vocab_rows.contains(&p);
                path.push(at);
                parent = Some(at);
            }
            paths.push(path);
        }
        Self { nodes, paths }
    }
}

#[cfg(test)]
mod tests {
    use super::fork_point;

    #[test]
    fn a_group_forks_at_the_last_plan_boundary_before_what_its_reads_share() {
        // The last multiple of the chunk size.
        assert_eq!(fork_point(477, 64, &[]), 448);
        // The last reuse point (the question block's head): no multiple
        // counts past the first point.
        assert_eq!(fork_point(477, 64, &[424, 459, 520]), 459);
        assert_eq!(fork_point(477, 64, &[424]), 424);
        // Exactly at a boundary.
        assert_eq!(fork_point(448, 64, &[]), 448);
        assert_eq!(fork_point(448, 64, &[500]), 448);
        // A multiple before the first point, none after it.
        assert_eq!(fork_point(300, 64, &[225]), 225);
        assert_eq!(fork_point(220, 64, &[225]), 192);
        assert_eq!(fork_point(300, 64, &[256]), 256);
        assert_eq!(fork_point(300, 64, &[257]), 257);
        // No boundary before it: the shared prefix itself.
        assert_eq!(fork_point(40, 64, &[]), 40);
        assert_eq!(fork_point(40, 64, &[50]), 40);
        assert_eq!(fork_point(0, 64, &[]), 0);
    }
}
