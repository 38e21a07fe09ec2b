//! How a read is cut into decodes and which reads share one: the canonical
//! chunk plan, the batching rule and the prefixes kept on disk (moved from
//! `kv_context.rs` unchanged).

use dgem_backend::SequenceRead;
use dgem_core::tokenizer::TokenId;

use super::MAX_SEQS;

/// Reads are batched together only when each differs from the first for at
/// most this many tokens before its first slot row (a question's cues, an
/// option's continuation, the option listings of one question: a choice with
/// a line of description per option differs from its next listing for some
/// 70 tokens). A read that differs for longer goes alone: in one batch every token attends over every cell the batch
/// fills, its own read's or not, so long tails would cost more than they
/// share.
const MAX_CONTINUATION: usize = 256;

/// The prefixes of `read` the disk store keeps ([`super::kv_store`]): its reuse
/// points up to its policy point (the end of a `schema_first` policy's text
/// and of the state's head after it, both fixed by the policy and the state's
/// shape), none when it has no policy point.
pub(super) fn store_points(read: &SequenceRead) -> Vec<usize> {
    read.policy_point.map_or_else(Vec::new, |point| {
        let mut points: Vec<usize> = read
            .reuse_points
            .iter()
            .copied()
            .filter(|&p| p < point)
            .collect();
        points.push(point);
        points
    })
}

pub(super) fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How many reads from the start of `reads` to batch: consecutive reads that
/// agree with the first up to at most [`MAX_CONTINUATION`] tokens before their
/// first slot row, and at least up to the first read's last reuse point
/// before its first slot row (so a group forks where its reads' own text
/// begins: a question's listings after the question block's head, the
/// questions of one prompt at their cues; the option listings of a
/// `schema_first` policy, which differ inside the policy's prefix, and
/// `document_first` content-free prompts of different states go one at a
/// time, each restoring its own prefix from a snapshot or the disk store;
/// `schema_first` content-free prompts of one listing share its policy prefix
/// and are batched), at most
/// `MAX_SEQS - 1` of them.
pub(super) fn continuation_run(reads: &[SequenceRead]) -> usize {
    let Some(first) = reads.first() else {
        return 0;
    };
    let own_text = span(first).map_or(0, |(row, _)| {
        first
            .reuse_points
            .iter()
            .copied()
            .filter(|&p| p <= row)
            .max()
            .unwrap_or(0)
    });
    let mut n = 1;
    for read in reads.iter().skip(1).take(MAX_SEQS - 2) {
        let Some((row, _)) = span(read) else { break };
        let common = common_prefix(&first.tokens, &read.tokens);
        if common + MAX_CONTINUATION < row || common < own_text {
            break;
        }
        n += 1;
    }
    n
}

/// The chunk plan of `tokens[..end]` for a read whose reuse points are
/// `points`: the multiples of `chunk` below the read's first reuse point (all
/// those below `end` when it declares none), every reuse point in `(0, end)`,
/// and `end`; sorted. Past its first reuse point a read's text is its own
/// (the state after a policy's prefix; the question block's head and one
/// question after a state), so it is decoded from one reuse point to the
/// next in one batch: what a decision adds to a known prefix costs one
/// decode, the least llama.cpp can do, and not one per 64-token boundary
/// plus one for what follows the last. Before it, the multiples let prompts
/// that begin alike without a declared point (the option listings of one
/// `schema_first` policy) share what they share.
pub(super) fn canonical_plan(chunk: usize, end: usize, points: &[usize]) -> Vec<usize> {
    let chunk = chunk.max(1);
    let first = points.iter().copied().filter(|&p| p > 0).min();
    let below = first.unwrap_or(usize::MAX).min(end);
    let mut plan: Vec<usize> = (1..)
        .map(|k| k * chunk)
        .take_while(|&b| b < below)
        .chain(points.iter().copied().filter(|&p| p > 0 && p < end))
        .chain(std::iter::once(end))
        .collect();
    plan.sort_unstable();
    plan.dedup();
    plan
}

/// Positions `[first_row, end)` a read needs: rows `pos - 1` of its slots.
pub(super) fn span(read: &SequenceRead) -> Option<(usize, usize)> {
    let end = read.slots.iter().map(|s| s.pos).max()?;
    let first = read.slots.iter().map(|s| s.pos.saturating_sub(1)).min()?;
    Some((first, end))
}

#[cfg(test)]
mod tests {
    use super::{canonical_plan, continuation_run, store_points};
    use dgem_backend::{SequenceRead, SlotQuery};

    /// A read of `len` tokens that are `0..len` up to `differ`, other ids
    /// after it, with one slot at its end and reuse points `points`.
    fn read(len: u32, differ: u32, points: &[usize]) -> SequenceRead {
        SequenceRead {
            tokens: (0..len)
                .map(|i| if i < differ { i } else { 10_000 + i })
                .collect(),
            slots: vec![SlotQuery {
                pos: len as usize,
                labels: vec![vec![1], vec![2]],
                vocab: false,
            }],
            reuse_points: points.to_vec(),
            policy_point: None,
        }
    }

    #[test]
    fn reads_are_batched_when_they_differ_only_past_the_last_reuse_point() {
        let first = read(300, 300, &[100, 120]);
        // Listings of one question after the head's end (120).
        assert_eq!(
            continuation_run(&[first.clone(), read(300, 130, &[100, 120])]),
            2
        );
        // Differing inside the prefix before the head's end: one at a time.
        assert_eq!(
            continuation_run(&[first.clone(), read(300, 110, &[100, 120])]),
            1
        );
        // More than 256 tokens of their own before the slot: one at a time.
        let long = read(600, 600, &[100]);
        assert_eq!(continuation_run(&[long.clone(), read(600, 300, &[100])]), 1);
        assert_eq!(continuation_run(&[long, read(600, 400, &[100])]), 2);
        // No reuse point: the length rule alone.
        assert_eq!(
            continuation_run(&[read(300, 300, &[]), read(300, 50, &[])]),
            2
        );
        assert_eq!(
            continuation_run(&[read(300, 300, &[]), read(300, 40, &[])]),
            1
        );
    }

    #[test]
    fn the_disk_store_keeps_the_reuse_points_up_to_the_policy_point() {
        // schema_first on a JSON state: the policy's text ends at 225, the
        // state's head (`{"ticket": `) at 230, a chained turn at 260.
        let mut r = read(300, 300, &[225, 230, 260]);
        r.policy_point = Some(230);
        assert_eq!(store_points(&r), vec![225, 230]);
        r.policy_point = Some(225);
        assert_eq!(store_points(&r), vec![225]);
        // document_first: no policy point, nothing on disk.
        r.policy_point = None;
        assert!(store_points(&r).is_empty());
    }

    #[test]
    fn a_read_is_chunked_only_before_its_first_reuse_point() {
        // No point: every multiple below the end.
        assert_eq!(canonical_plan(64, 200, &[]), vec![64, 128, 192, 200]);
        // A policy prefix of 225 tokens, then a state of 41: the state and
        // the cues after it are one batch, not 256 and 260 and the end.
        assert_eq!(
            canonical_plan(64, 266, &[225]),
            vec![64, 128, 192, 225, 266]
        );
        // A state's end and its head's end (document_first): multiples in
        // the state only.
        assert_eq!(
            canonical_plan(64, 700, &[300, 340]),
            vec![64, 128, 192, 256, 300, 340, 700]
        );
        // A point at or past the end still stops the multiples there.
        assert_eq!(canonical_plan(64, 130, &[130]), vec![64, 128, 130]);
        assert_eq!(canonical_plan(64, 130, &[500]), vec![64, 128, 130]);
        // The plan of a prefix agrees with the whole read's up to it.
        let whole = canonical_plan(64, 500, &[225, 400]);
        let part = canonical_plan(64, 300, &[225, 400]);
        assert_eq!(&whole[..part.len() - 1], &part[..part.len() - 1]);
    }
}
