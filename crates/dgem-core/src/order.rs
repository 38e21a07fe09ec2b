//! Option-order debiasing: which orders a question's options are listed in,
//! how the reads of those orders are pooled, and how much the answer moved
//! between them.
//!
//! A small model prefers some **positions** in a list whatever the options
//! say (the first, or the last), so the order a policy happens to list its
//! options in can decide the answer. Two measures remove that, both by
//! construction rather than by tuning:
//!
//! 1. **A canonical listing** ([`canonical_order`]). The options of a `choice`
//!    are listed sorted by name (case-insensitively, then as written), so two
//!    policies that list the same options in different orders send the model
//!    the same prompt. Booleans keep `yes`, `no`, and a `score` keeps its
//!    levels in scale order: for a score the order is the scale itself.
//! 2. **Cyclic rotations** ([`shifts`], [`rotate`]). The question is read in
//!    `m = min(K, max_orders)` listings, the canonical one shifted by evenly
//!    spaced offsets `⌊t·K/m⌋` for `t = 0..m`. When `m = K` every option is
//!    read once at every position. The per-order distributions are pooled by
//!    their **geometric mean** ([`pool_orders`]): if the model's reading is
//!    `p_t(o) ∝ prior(pos_t(o)) · q(o)` (a multiplicative position prior, the
//!    model of PriDe, Zheng et al., "Large Language Models Are Not Robust
//!    Multiple Choice Selectors", ICLR 2024), then `Σ_t log prior(pos_t(o))`
//!    is the same for every option over a full cycle and cancels in the
//!    normalisation, leaving `q`. With `m < K` (more options than
//!    `max_orders`) the cancellation is partial.
//!
//! 3. **A policy's prior, for the price of one read** ([`OrderDebias::Prior`]).
//!    Read in one fixed listing, the model's bias is a fixed vector over the
//!    options: its position prior for that listing times its preference for
//!    some label words. The cloze reader learns that vector per question from
//!    the policy's own first decisions (`dgem_engine::policy_prior`: the
//!    first three distinct states are read in every cyclic listing and
//!    answered as `cyclic` answers them; the mean of their canonical-listing
//!    reads, with one uniform pseudo-decision mixed in, is the prior, kept on
//!    disk), then reads every later state once,
//!    in the canonical listing, and divides the read by it (batch
//!    calibration, Zhou et al., ICLR 2024, done online). Cost: one prompt per
//!    decision instead of `m`, once learned. It also divides out the policy's
//!    base rates (what the mean answer is because the states are so), which
//!    is its price. Chosen by measurement: a prior from content-free states,
//!    or a position prior estimated in position space from real states
//!    ([`position_prior`], PriDe's estimate), both scored under the cyclic
//!    reads on Qwen2.5-Coder 1.5B.
//!
//! [`OrderSensitivity`] reports, per answer, how many orders were read, the
//! largest spread of the chosen option's probability across them, and whether
//! their own top answers disagreed ("fragile").

use serde::Serialize;

use crate::labels::LabelMode;
use crate::readout::{argmax, restricted_softmax, PROB_FLOOR};
use crate::schema::{Question, QuestionKind};

/// Default most listings read per question (`--max-orders`): every option at
/// every position for up to 6 options (booleans, most choices, 5-level
/// scores); longer lists are read at 6 evenly spaced shifts.
pub const DEFAULT_MAX_ORDERS: usize = 6;

/// Order debiasing setting of one decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderDebias {
    /// One read in the policy's own order (the answer may depend on it).
    Off,
    /// Canonical listing plus cyclic rotations, at most `max_orders` per question.
    Cyclic {
        /// Most listings read per question (at least 1).
        max_orders: usize,
    },
    /// One read in the canonical listing, divided by the prior learned from
    /// the question's first decisions, which are read in the cyclic
    /// listings (at most `max_orders`) until it is learned (module docs,
    /// item 3).
    Prior {
        /// Most listings a decision that learns the prior reads (at least 1).
        max_orders: usize,
    },
}

impl Default for OrderDebias {
    fn default() -> Self {
        Self::Cyclic {
            max_orders: DEFAULT_MAX_ORDERS,
        }
    }
}

impl OrderDebias {
    /// Listings to read for a question of `k` alternatives: 1 when off or
    /// `k < 2`, else `min(k, max_orders)`.
    pub fn orders(self, k: usize) -> usize {
        match self {
            Self::Off => 1,
            Self::Cyclic { max_orders } | Self::Prior { max_orders } if k >= 2 => {
                k.min(max_orders.max(1))
            }
            Self::Cyclic { .. } | Self::Prior { .. } => 1,
        }
    }

    /// Listings of `q` read per decision (each with the state):
    /// [`Self::orders_for`] under `Cyclic`, 1 under `Off` and `Prior`.
    pub fn reads_for(self, q: &Question, mode: LabelMode) -> usize {
        match self {
            Self::Cyclic { .. } => self.orders_for(q, mode),
            Self::Off | Self::Prior { .. } => 1,
        }
    }

    /// Listings to read for question `q` under label mode `mode`:
    /// [`Self::orders`] of its alternatives, except 1 for a score labelled by
    /// digits (letter mode, at most 9 levels: `1` is the first level of the
    /// scale, see [`crate::labels::labels_for`]). Rotating such a scale would
    /// list its first level under the digit `2`, a label that contradicts the
    /// level; its canonical listing is the scale itself, so it is
    /// order-invariant without rotations.
    pub fn orders_for(self, q: &Question, mode: LabelMode) -> usize {
        if digit_scale(q, mode) {
            1
        } else {
            self.orders(q.alternatives.len())
        }
    }

    /// Parse `off`, `cyclic` (default maximum) or a number of orders
    /// (`1` means off).
    ///
    /// # Errors
    /// A message naming the allowed values and the value given.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "off" | "none" | "1" => Ok(Self::Off),
            "cyclic" | "on" | "auto" => Ok(Self::default()),
            "prior" => Ok(Self::Prior {
                max_orders: DEFAULT_MAX_ORDERS,
            }),
            other => match other.parse::<usize>() {
                Ok(n) if (2..=26).contains(&n) => Ok(Self::Cyclic { max_orders: n }),
                _ => Err(format!(
                    "`order_debias` must be one of [off, cyclic, prior] or a number of orders 1..=26. Given: `{s}`"
                )),
            },
        }
    }
}

/// Whether `q` is a score whose labels are the digits of its levels in scale
/// order (letter mode, at most 9 levels; [`crate::labels::labels_for`]): such
/// a scale is always listed as it is, never rotated or shuffled, since any
/// other listing would put a level beside another level's digit.
pub fn digit_scale(q: &Question, mode: LabelMode) -> bool {
    mode == LabelMode::Letters && q.kind == QuestionKind::Score && q.alternatives.len() <= 9
}

/// The canonical listing of `q`'s alternatives: `order[i]` is the index of the
/// alternative listed at position `i`. Choices are sorted by their trimmed
/// name, case-insensitively, ties by the name as written and then by index;
/// booleans and scores keep their own order (see the module docs).
pub fn canonical_order(q: &Question) -> Vec<usize> {
    let mut order: Vec<usize> = (0..q.alternatives.len()).collect();
    if q.kind == QuestionKind::Choice {
        order.sort_by(|&a, &b| {
            let (x, y) = (&q.alternatives[a].name, &q.alternatives[b].name);
            x.trim()
                .to_lowercase()
                .cmp(&y.trim().to_lowercase())
                .then_with(|| x.trim().cmp(y.trim()))
                .then(a.cmp(&b))
        });
    }
    order
}

/// Listing `t` of `q` under `debias` and label mode `mode`, without any
/// per-sample shuffle: the policy's own order when off; else the canonical
/// listing ([`canonical_order`]) rotated by the `t`-th of the
/// [`OrderDebias::orders_for`] evenly spaced [`shifts`] (wrapping, so a
/// question read in fewer listings than its group repeats its own).
/// `order[i]` is the index of the alternative listed at position `i`. The
/// canvas reader (vLLM) uses this; the cloze reader composes it with its
/// seeded shuffle.
pub fn listing_order(debias: OrderDebias, q: &Question, mode: LabelMode, t: usize) -> Vec<usize> {
    match debias {
        OrderDebias::Off => (0..q.alternatives.len()).collect(),
        OrderDebias::Cyclic { .. } | OrderDebias::Prior { .. } => {
            rotation(debias, q, mode, t, canonical_order(q))
        }
    }
}

/// `base` (a listing of `q`'s alternatives) rotated for listing `t`: by the
/// `t`-th of the [`OrderDebias::orders_for`] evenly spaced [`shifts`],
/// wrapping. [`listing_order`] rotates the canonical listing; the cloze reader
/// rotates the canonical listing after its per-sample shuffle.
pub fn rotation(
    debias: OrderDebias,
    q: &Question,
    mode: LabelMode,
    t: usize,
    base: Vec<usize>,
) -> Vec<usize> {
    let sh = shifts(base.len(), debias.orders_for(q, mode));
    match sh.get(t % sh.len().max(1)) {
        Some(&shift) if shift > 0 => rotate(&base, shift),
        _ => base,
    }
}

/// `q` with its alternatives listed in `order` (from [`listing_order`]).
/// An index out of range is skipped, so the result is never longer than `q`.
pub fn listed(q: &Question, order: &[usize]) -> Question {
    let mut p = q.clone();
    p.alternatives = order
        .iter()
        .filter_map(|&i| q.alternatives.get(i).cloned())
        .collect();
    p
}

/// A distribution read in listing `order` (position `i` = alternative
/// `order[i]`) mapped back to the question's own alternative order.
pub fn unlist(listed: &[f64], order: &[usize]) -> Vec<f64> {
    let mut orig = vec![0.0; listed.len()];
    for (i, &o) in order.iter().enumerate() {
        if let (Some(slot), Some(&p)) = (orig.get_mut(o), listed.get(i)) {
            *slot = p;
        }
    }
    orig
}

/// The `m` cyclic shifts read for `k` options: `⌊t·k/m⌋` for `t = 0..m`
/// (all of `0..k` when `m = k`). Empty when `k = 0`.
pub fn shifts(k: usize, m: usize) -> Vec<usize> {
    if k == 0 {
        return Vec::new();
    }
    let m = m.clamp(1, k);
    (0..m).map(|t| t * k / m).collect()
}

/// `base` rotated left by `shift`: position `i` lists `base[(i + shift) % k]`.
pub fn rotate(base: &[usize], shift: usize) -> Vec<usize> {
    let k = base.len();
    if k == 0 {
        return Vec::new();
    }
    (0..k).map(|i| base[(i + shift) % k]).collect()
}

/// Pool the distributions read in several orders (each in the question's own
/// alternative order) by their geometric mean, renormalised: `p(o) ∝
/// exp(mean_t ln max(p_t(o), PROB_FLOOR))`. One distribution is returned as
/// is; an empty input gives an empty output.
pub fn pool_orders(dists: &[Vec<f64>]) -> Vec<f64> {
    match dists {
        [] => Vec::new(),
        [one] => one.clone(),
        _ => {
            let k = dists[0].len();
            let n = dists.len() as f64;
            let logs: Vec<f64> = (0..k)
                .map(|i| {
                    dists
                        .iter()
                        .map(|d| d.get(i).copied().unwrap_or(0.0).max(PROB_FLOOR).ln())
                        .sum::<f64>()
                        / n
                })
                .collect();
            restricted_softmax(&logs)
        }
    }
}

/// Geometric mean of `dists` position by position, renormalised: with each
/// `dists[t]` one state read in cyclic listing `t` (in listed order), that
/// state's estimate of the position prior `π` of the module docs (item 3). The same
/// computation as [`pool_orders`], kept apart so the two spaces are not
/// confused at a call site.
pub fn position_prior(listed: &[Vec<f64>]) -> Vec<f64> {
    pool_orders(listed)
}

/// `p / prior`, renormalised (floors at [`PROB_FLOOR`] keep it finite): a read
/// with a prior divided out, in whichever space both are given.
pub fn divide_prior(p: &[f64], prior: &[f64]) -> Vec<f64> {
    if prior.len() != p.len() {
        return p.to_vec();
    }
    let logs: Vec<f64> = p
        .iter()
        .zip(prior)
        .map(|(&x, &q)| x.max(PROB_FLOOR).ln() - q.max(PROB_FLOOR).ln())
        .collect();
    restricted_softmax(&logs)
}

/// How much an answer depended on the order its options were listed in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderSensitivity {
    /// Option listings read (1: not estimated), however many samples each.
    pub orders: usize,
    /// Largest minus smallest probability of the chosen answer across the
    /// listings read, in [0, 1]; `None` when one listing was read.
    pub spread: Option<f64>,
    /// Whether the listings' own top answers disagreed: the answer is
    /// fragile under reordering.
    pub fragile: bool,
    /// `cyclic`: the canonical listing and its rotations were read and pooled;
    /// `policy_prior`: one listing read, the prior learned from the
    /// policy's first decisions divided out (nothing estimated per
    /// decision); `single_order`: one listing, not estimated.
    pub method: &'static str,
}

impl OrderSensitivity {
    /// One listing read: nothing is known about order dependence.
    pub fn single() -> Self {
        Self {
            orders: 1,
            spread: None,
            fragile: false,
            method: "single_order",
        }
    }

    /// One listing read with the policy's learned prior divided out
    /// ([`OrderDebias::Prior`]): order dependence is corrected, not measured.
    pub fn prior() -> Self {
        Self {
            method: "policy_prior",
            ..Self::single()
        }
    }

    /// From the distributions of every listing read, over `samples` reads
    /// each (listings × samples distributions), and the chosen index. The
    /// spread and fragility are taken over all of them.
    pub fn from_orders(dists: &[Vec<f64>], top: usize, samples: usize) -> Self {
        let orders = dists.len().div_ceil(samples.max(1));
        if orders < 2 {
            return Self::single();
        }
        let at = |d: &Vec<f64>| d.get(top).copied().unwrap_or(0.0);
        let hi = dists.iter().map(at).fold(f64::NEG_INFINITY, f64::max);
        let lo = dists.iter().map(at).fold(f64::INFINITY, f64::min);
        Self {
            orders,
            spread: Some((hi - lo).clamp(0.0, 1.0)),
            fragile: dists.iter().any(|d| argmax(d) != top),
            method: "cyclic",
        }
    }
}

#[cfg(test)]
mod tests;
