//! Option-order debiasing on the canvas reader: the listings a decision is
//! read in, and how one group's reads in several listings become one.
//!
//! With `VllmConfig::order_debias` off there is one listing, the policy's own
//! order, and nothing here changes a request. With `cyclic`, listing `t` lists
//! every question's options in the canonical order (choices sorted by name)
//! rotated by the `t`-th cyclic shift ([`dgem_core::order::listing_order`]);
//! each group is read in as many listings as its widest question needs, with
//! the same seeds, and each question's distributions (mapped back to its own
//! option order) are pooled by their geometric mean
//! ([`dgem_core::order::pool_orders`]): under a multiplicative position prior
//! (PriDe, Zheng et al., ICLR 2024) the prior cancels over a full cycle. A
//! question with fewer options than the group's widest repeats its own
//! rotations in the extra listings; those are not pooled. With letter labels
//! the letter of an option changes with its listing, so earlier answers
//! prefilled into a chained prompt are re-rendered for each listing.

use std::collections::HashMap;

use dgem_core::labels::{labels_for, LabelMode};
use dgem_core::order::{listed, listing_order, pool_orders, unlist, OrderDebias};
use dgem_core::readout::SlotRead;
use dgem_core::schema::{AnswerFormat, Question};
use dgem_core::slots::answer_text;
use dgem_core::tokenizer::TokenId;
use dgem_core::walk::{AnsweredGroup, GroupReads};

/// One listing of every question of a decision.
pub(crate) struct Listing {
    /// Per question id, `order[i]` = the alternative listed at position `i`.
    orders: HashMap<String, Vec<usize>>,
    /// Every question of the schema, options in this listing's order.
    pub all: Vec<Question>,
    /// The question block listing `all` (chained or shared prompts).
    pub sys_full: String,
    /// The chained prefix in this listing (empty when not chained).
    pub base_ids: Vec<TokenId>,
}

impl Listing {
    /// Listing `t` of `questions` under label mode `mode` (the base ids are
    /// filled in later).
    pub fn new(debias: OrderDebias, mode: LabelMode, questions: &[Question], t: usize) -> Self {
        let orders: HashMap<String, Vec<usize>> = questions
            .iter()
            .map(|q| (q.id.clone(), listing_order(debias, q, mode, t)))
            .collect();
        let all = questions
            .iter()
            .map(|q| match orders.get(&q.id) {
                Some(o) => listed(q, o),
                None => q.clone(),
            })
            .collect();
        Self {
            orders,
            all,
            sys_full: String::new(),
            base_ids: Vec::new(),
        }
    }

    /// The order `q` is listed in (its own when unknown).
    fn order_of(&self, q: &Question) -> Vec<usize> {
        self.orders
            .get(&q.id)
            .cloned()
            .unwrap_or_else(|| (0..q.alternatives.len()).collect())
    }

    /// `q` with its options in this listing's order.
    pub fn question(&self, q: &Question) -> Question {
        listed(q, &self.order_of(q))
    }

    /// The answer lines of `answered` groups as this listing writes them:
    /// each chosen option under the label it has in this listing.
    pub fn lines(
        &self,
        answered: &[AnsweredGroup],
        mode: LabelMode,
        format: AnswerFormat,
    ) -> Vec<String> {
        answered
            .iter()
            .map(|g| {
                let qs: Vec<Question> = g.questions.iter().map(|q| self.question(q)).collect();
                let refs: Vec<&Question> = qs.iter().collect();
                let labels: Vec<Vec<String>> = qs.iter().map(|q| labels_for(q, mode)).collect();
                let chosen: Vec<usize> = g
                    .questions
                    .iter()
                    .zip(&g.chosen)
                    .map(|(q, &c)| self.order_of(q).iter().position(|&o| o == c).unwrap_or(0))
                    .collect();
                answer_text(&refs, &labels, &chosen, format)
            })
            .collect()
    }
}

/// Listings a group is read in: what its widest question needs (1 when off;
/// a score labelled by digits needs 1, [`OrderDebias::orders_for`]).
pub(crate) fn group_listings(debias: OrderDebias, mode: LabelMode, group: &[&Question]) -> usize {
    group
        .iter()
        .map(|q| debias.orders_for(q, mode))
        .max()
        .unwrap_or(1)
        .max(1)
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

/// One read pooled over listings: probabilities by geometric mean, the
/// returned-set entropy and label mass by their mean.
fn pool_read(reads: &[(Vec<f64>, &SlotRead)]) -> SlotRead {
    let dists: Vec<Vec<f64>> = reads.iter().map(|(p, _)| p.clone()).collect();
    let label_mass = reads
        .iter()
        .map(|(_, r)| r.label_mass)
        .collect::<Option<Vec<f64>>>()
        .map(|m| mean(m.into_iter()));
    let argmax_is_label = reads
        .iter()
        .map(|(_, r)| r.argmax_is_label)
        .collect::<Option<Vec<bool>>>()
        .map(|v| v.into_iter().all(|b| b));
    SlotRead {
        probs: pool_orders(&dists),
        label_mass,
        entropy: mean(reads.iter().map(|(_, r)| r.entropy)),
        argmax_is_label,
    }
}

/// Pool a group's reads in listings `0..outs.len()` into one [`GroupReads`]
/// over the group's own `questions` (option order as the policy wrote it).
///
/// Read `r` of question `q` pools the listings `t < orders(q)` (a question
/// with fewer options than the group's widest repeats its own rotations in
/// the extra listings, which are not pooled). Every listing has as many reads
/// (the caller reads an `auto` policy's maximum in each, see `decide.rs`);
/// only the reads all listings have are kept. `order_reads` holds every
/// pooled listing's distribution of every read. Positions, scoring, samples
/// policy and thought are listing 0's; times, rows and cached tokens add up;
/// `prompt_tokens` is the longest.
pub(crate) fn pool_listings(
    questions: &[&Question],
    listings: &[Listing],
    outs: Vec<GroupReads>,
    debias: OrderDebias,
    mode: LabelMode,
) -> GroupReads {
    let n_reads = outs.iter().map(|o| o.reads.len()).min().unwrap_or(0);
    let mut reads: Vec<Vec<SlotRead>> = vec![Vec::with_capacity(questions.len()); n_reads];
    let mut order_reads: Vec<Vec<Vec<f64>>> = vec![Vec::new(); questions.len()];
    for (qi, q) in questions.iter().enumerate() {
        let pooled = outs.len().min(debias.orders_for(q, mode));
        for (r, out_r) in reads.iter_mut().enumerate() {
            let got: Vec<(Vec<f64>, &SlotRead)> = (0..pooled)
                .filter_map(|t| {
                    let read = outs.get(t)?.reads.get(r)?.get(qi)?;
                    let order = listings.get(t)?.order_of(q);
                    Some((unlist(&read.probs, &order), read))
                })
                .collect();
            order_reads[qi].extend(got.iter().map(|(p, _)| p.clone()));
            out_r.push(pool_read(&got));
        }
    }
    let mut outs = outs.into_iter();
    let first = outs.next();
    let rest: Vec<GroupReads> = outs.collect();
    let sum = |f: fn(&GroupReads) -> f64| rest.iter().map(f).sum::<f64>();
    let (pos, scoring, policy, thought, base) = match first {
        Some(o) => {
            let base = (
                o.queue_ms + sum(|g| g.queue_ms),
                o.forward_ms + sum(|g| g.forward_ms),
                o.prompt_tokens,
                o.cached_tokens,
                o.rows,
            );
            (o.pos, o.scoring, o.policy, o.thought, base)
        }
        None => (
            Vec::new(),
            Vec::new(),
            serde_json::Value::Null,
            None,
            (0.0, 0.0, 0, 0, 0),
        ),
    };
    let (queue_ms, forward_ms, pt, cached, rows) = base;
    GroupReads {
        questions: questions.iter().map(|q| (*q).clone()).collect(),
        labels: questions.iter().map(|q| labels_for(q, mode)).collect(),
        reads,
        pos,
        scoring,
        uncalibrated: vec![None; questions.len()],
        order_reads,
        order_prior: false,
        policy,
        thought,
        queue_ms,
        forward_ms,
        calibration_ms: 0.0,
        prompt_tokens: rest.iter().map(|g| g.prompt_tokens).fold(pt, usize::max),
        cached_tokens: cached + rest.iter().map(|g| g.cached_tokens).sum::<usize>(),
        rows: rows + rest.iter().map(|g| g.rows).sum::<usize>(),
    }
}
