//! Rules between answers: `"rules": [{"if": {…}, "then": {…}}, {"if": {…}, "not": {…}}]`.
//!
//! A rule ties questions of a policy: *if* every question named in `if` has
//! one of the answers given there, *then* every question named in `then` must
//! have one of the answers given there, and the answers named in `not` must
//! not all hold together. A value is an answer name (`"security"`, `"yes"`),
//! `true` / `false` for a yes/no question, or a list of these (any of them).
//!
//! **How a rule changes the answers.** The read gives each question its own
//! distribution `p_q`. The questions a set of rules ties together (a
//! connected group) get the joint distribution
//! `P(a) = Π_q p_q(a_q) / Z` over the assignments `a` that satisfy every
//! rule of the group, with `Z = Σ_{a consistent} Π_q p_q(a_q)`, and each
//! question's answer becomes its marginal of `P`. `1 − Z` is the probability
//! mass the rules removed: the read's belief in answers the policy rules out.
//! This is the product of the per-question distributions restricted to the
//! consistent assignments and renormalised: it treats the questions as read
//! independently, which is what a separate slot per question gives.
//!
//! Validation ([`Rules::from_object`]) refuses an unknown question or answer
//! (naming it and what is allowed), a `multi` question (its answer is a set),
//! a question another one's `ask_if` depends on (it is read first, and a rule
//! changing it afterwards would leave the other asked or skipped on an answer
//! it no longer has), a group with more than [`MAX_ASSIGNMENTS`] assignments
//! or [`MAX_RULE_CHECKS`] condition checks to enumerate, and a rule set no
//! assignment satisfies.
//!
//! A rule that names a question skipped by `ask_if` (or left out by `ask`) is
//! set aside for that decision, with a warning; the other rules still apply.
//! A post-read temperature (`temperature`, a calibration file) rescales each
//! answer as the rules left it; `constraint_mass_removed` describes the read.

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::envelope::AnswerOut;
pub use crate::envelope::Constrained;
use crate::readout::{argmax, entropy, normalized_entropy};
use crate::schema::Question;

/// Most rules one policy may state.
pub const MAX_RULES: usize = 64;
/// Most assignments one group of tied questions may have (the product of
/// their option counts), so that applying the rules enumerates at most this
/// many per decision.
pub const MAX_ASSIGNMENTS: usize = 1 << 16;
/// Most condition checks one group may cost per decision: its assignments
/// times the conditions of its rules (2^22, a few milliseconds), so a policy
/// cannot make every decision slow.
pub const MAX_RULE_CHECKS: usize = 1 << 22;
/// `Z` at or below which a decision's reads gave no weight to any consistent
/// assignment; the answers are then left as read, with a warning.
pub const MIN_CONSISTENT_MASS: f64 = 1e-300;

/// One question's part of a rule: the question and the answers (indices into
/// its alternatives) that make the part hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Condition {
    /// Question id.
    pub question: String,
    /// Answer names that make this part hold, in the policy's order.
    pub answers: Vec<String>,
    /// The same answers as indices into the question's alternatives.
    #[serde(skip)]
    pub indices: Vec<usize>,
}

/// One rule: `if` ⇒ (`then` and not all of `not`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    /// Every part must hold for the rule to apply.
    #[serde(rename = "if")]
    pub when: Vec<Condition>,
    /// Every part must hold when the rule applies (may be empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub then: Vec<Condition>,
    /// Not every part may hold when the rule applies (may be empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not: Vec<Condition>,
}

/// A policy's rules, validated against its questions. Empty by default.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Rules(pub Vec<Rule>);

/// A rule over one group's questions: each condition as the position of its
/// question in the group and a mask of the answers that make it hold.
struct Compiled {
    when: Vec<(usize, Vec<bool>)>,
    then: Vec<(usize, Vec<bool>)>,
    not: Vec<(usize, Vec<bool>)>,
}

impl Compiled {
    fn of(rule: &Rule, ids: &[String]) -> Compiled {
        let part = |cs: &[Condition]| -> Vec<(usize, Vec<bool>)> {
            cs.iter()
                .map(|c| {
                    let at = ids
                        .iter()
                        .position(|id| *id == c.question)
                        .unwrap_or(usize::MAX);
                    let len = c.indices.iter().max().map_or(0, |m| m + 1);
                    let mut mask = vec![false; len];
                    for &i in &c.indices {
                        mask[i] = true;
                    }
                    (at, mask)
                })
                .collect()
        };
        Compiled {
            when: part(&rule.when),
            then: part(&rule.then),
            not: part(&rule.not),
        }
    }

    /// Whether assignment `at` (an answer index per question of the group)
    /// satisfies the rule.
    fn satisfied(&self, at: &[usize]) -> bool {
        let holds = |(q, mask): &(usize, Vec<bool>)| {
            at.get(*q)
                .and_then(|a| mask.get(*a))
                .copied()
                .unwrap_or(false)
        };
        if !self.when.iter().all(holds) {
            return true;
        }
        // `not` forbids its parts holding all together (an empty `not` forbids nothing).
        let excluded = !self.not.is_empty() && self.not.iter().all(holds);
        self.then.iter().all(holds) && !excluded
    }

    fn conditions(&self) -> usize {
        self.when.len() + self.then.len() + self.not.len()
    }
}

impl Rule {
    /// Ids of the questions the rule names, without repeats.
    pub fn questions(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for c in self.when.iter().chain(&self.then).chain(&self.not) {
            if !out.contains(&c.question.as_str()) {
                out.push(&c.question);
            }
        }
        out
    }

    /// The rule as the policy writes it.
    pub fn to_wire(&self) -> Value {
        let part = |cs: &[Condition]| -> Value {
            cs.iter()
                .map(|c| {
                    let v = match c.answers.as_slice() {
                        [one] => json!(one),
                        many => json!(many),
                    };
                    (c.question.clone(), v)
                })
                .collect::<Map<String, Value>>()
                .into()
        };
        let mut m = Map::new();
        m.insert("if".into(), part(&self.when));
        if !self.then.is_empty() {
            m.insert("then".into(), part(&self.then));
        }
        if !self.not.is_empty() {
            m.insert("not".into(), part(&self.not));
        }
        Value::Object(m)
    }
}

mod parse;

impl Rules {
    /// Whether the policy states no rule.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The groups of questions the rules tie: each is the rules (indices)
    /// and the question ids they name, connected through shared questions,
    /// questions in `order`'s order.
    pub fn groups(&self, order: &[&str]) -> Vec<(Vec<usize>, Vec<String>)> {
        let all: Vec<usize> = (0..self.0.len()).collect();
        self.groups_of(&all, order)
    }

    /// [`Self::groups`] over the rules `active` (indices) only.
    fn groups_of(&self, active: &[usize], order: &[&str]) -> Vec<(Vec<usize>, Vec<String>)> {
        let mut groups: Vec<(Vec<usize>, Vec<String>)> = Vec::new();
        for (r, rule) in active
            .iter()
            .filter_map(|r| self.0.get(*r).map(|rule| (*r, rule)))
        {
            let names: Vec<String> = rule.questions().into_iter().map(str::to_string).collect();
            let mut merged = (vec![r], names);
            let mut kept = Vec::with_capacity(groups.len());
            for g in groups {
                if g.1.iter().any(|q| merged.1.contains(q)) {
                    merged.0.extend(g.0);
                    for q in g.1 {
                        if !merged.1.contains(&q) {
                            merged.1.push(q);
                        }
                    }
                } else {
                    kept.push(g);
                }
            }
            kept.push(merged);
            groups = kept;
        }
        for g in &mut groups {
            g.0.sort_unstable();
            g.1.sort_by_key(|q| order.iter().position(|o| o == q));
        }
        groups.sort_by_key(|g| g.0.first().copied());
        groups
    }

    /// Apply the rules to a decision's `answers` (skipped questions are
    /// `None`; see the module docs for the formula). A rule that names a
    /// question that was skipped (`ask_if`) or not asked is set aside, named in
    /// the returned warnings, and the other rules still apply; so is a group
    /// whose reads give the consistent assignments no weight. Each answer whose
    /// group removed some mass gets [`AnswerOut::constrained`] set to it.
    ///
    /// Returns one [`Constrained`] per group applied, and the warnings.
    pub fn apply(
        &self,
        answers: &mut IndexMap<String, Option<AnswerOut>>,
    ) -> (Vec<Constrained>, Vec<String>) {
        let order: Vec<&str> = answers.keys().map(String::as_str).collect();
        let mut warnings = Vec::new();
        let mut active = Vec::with_capacity(self.0.len());
        for (r, rule) in self.0.iter().enumerate() {
            let missing = rule
                .questions()
                .into_iter()
                .find(|q| answers.get(*q).is_none_or(Option::is_none));
            match missing {
                Some(q) => warnings.push(format!(
                    "rule {r} was not applied: it names '{q}', which was skipped or not asked"
                )),
                None => active.push(r),
            }
        }
        let mut done = Vec::new();
        for (rules, ids) in self.groups_of(&active, &order) {
            let dists: Vec<Vec<f64>> = ids
                .iter()
                .filter_map(|id| answers.get(id).and_then(Option::as_ref))
                .map(|a| a.aggregate.mean.clone())
                .collect();
            let group: Vec<Compiled> = rules
                .iter()
                .filter_map(|r| self.0.get(*r))
                .map(|r| Compiled::of(r, &ids))
                .collect();
            let Some((marginals, z)) = joint(&dists, &group) else {
                warnings.push(format!(
                    "rules {rules:?} were not applied: the read gave no weight to any answers that satisfy them"
                ));
                continue;
            };
            let removed = (1.0 - z).clamp(0.0, 1.0);
            if removed > MIN_REPORTED_REMOVAL {
                for (id, m) in ids.iter().zip(marginals) {
                    if let Some(Some(a)) = answers.get_mut(id) {
                        set_distribution(a, m);
                        a.constrained = Some(removed);
                    }
                }
            }
            done.push(Constrained {
                questions: ids,
                rules,
                mass_removed: removed,
            });
        }
        (done, warnings)
    }
}

/// Removed mass at or below which the rules changed nothing worth writing
/// back (rounding): the answers stay as read and are not marked.
const MIN_REPORTED_REMOVAL: f64 = 1e-12;

/// The marginals of the restricted, renormalised product of `dists` (one
/// per question of the group) under `rules`, and `Z`; `None` when `Z` is at
/// or below [`MIN_CONSISTENT_MASS`]. Each distribution is normalised first,
/// so `1 − Z` is the removed share even when a read sums to slightly off 1.
fn joint(dists: &[Vec<f64>], rules: &[Compiled]) -> Option<(Vec<Vec<f64>>, f64)> {
    let dists: Vec<Vec<f64>> = dists
        .iter()
        .map(|d| {
            let s: f64 = d.iter().sum();
            if s > 0.0 {
                d.iter().map(|p| p / s).collect()
            } else {
                d.clone()
            }
        })
        .collect();
    let sizes: Vec<usize> = dists.iter().map(Vec::len).collect();
    let mut marginals: Vec<Vec<f64>> = dists.iter().map(|d| vec![0.0; d.len()]).collect();
    let mut z = 0.0;
    each_assignment(&sizes, |at| {
        if rules.iter().all(|r| r.satisfied(at)) {
            let w: f64 = at
                .iter()
                .zip(&dists)
                .map(|(&a, d)| d.get(a).copied().unwrap_or(0.0))
                .product();
            z += w;
            for (&a, m) in at.iter().zip(marginals.iter_mut()) {
                if let Some(x) = m.get_mut(a) {
                    *x += w;
                }
            }
        }
        true
    });
    if z <= MIN_CONSISTENT_MASS {
        return None;
    }
    for m in &mut marginals {
        for x in m.iter_mut() {
            *x /= z;
        }
    }
    Some((marginals, z))
}

/// Call `f` on every assignment (question `i` takes `0..sizes[i]`), in
/// mixed-radix order, until `f` returns `false`. Returns whether every
/// assignment was visited.
fn each_assignment(sizes: &[usize], mut f: impl FnMut(&[usize]) -> bool) -> bool {
    if sizes.contains(&0) {
        return true;
    }
    let mut at = vec![0usize; sizes.len()];
    loop {
        if !f(&at) {
            return false;
        }
        let mut i = 0;
        loop {
            let (Some(v), Some(size)) = (at.get_mut(i), sizes.get(i)) else {
                return true;
            };
            *v += 1;
            if *v < *size {
                break;
            }
            *v = 0;
            i += 1;
        }
    }
}

/// Replace `a`'s distribution with `p` and recompute its answer, confidence,
/// entropy (nats) and hesitation; its standard error and agreement describe
/// the reads and are kept.
fn set_distribution(a: &mut AnswerOut, p: Vec<f64>) {
    let g = &mut a.aggregate;
    g.top = argmax(&p);
    g.confidence = p.get(g.top).copied().unwrap_or(0.0);
    g.entropy = entropy(&p);
    g.normalized_entropy = normalized_entropy(&p);
    g.mean = p;
}

/// Whether `q` may take part in a rule: a rule ties picks, so every type
/// whose answer is one pick
/// ([`crate::schema::QuestionKind::picks_one`]; all but `multi`).
fn rule_kind(q: &Question) -> bool {
    q.kind.picks_one()
}

#[cfg(test)]
mod tests;
