//! The prior of a policy's question, learned from the policy's own first
//! decisions: batch calibration (Zhou et al., "Batch Calibration: Rethinking
//! Calibration for In-Context Learning and Prompt Engineering", ICLR 2024)
//! done online, per question, for `--order-debias prior`
//! ([`dgem_core::order::OrderDebias::Prior`]).
//!
//! The first [`PRIOR_DECISIONS`] decisions of a question (distinct states)
//! are read in every cyclic listing, exactly as `cyclic` reads them, and are
//! answered by pooling those listings. One of those listings is the
//! canonical one; its read of each state is kept. Their **mean** is the
//! question's prior: what the model answers on average over the policy's
//! real states when the options are listed canonically. From then on a
//! decision reads the canonical listing once and divides that read by the
//! prior (renormalised): the same listing every time, so the prior holds its
//! position bias and its preference for some label words alike.
//!
//! What it assumes: dividing by the mean answer also flattens the policy's
//! true base rates. A question whose right answer is "no" on nearly every
//! state will see "no" pulled toward the others. It was chosen by
//! measurement (docs/models.md): on Qwen2.5-Coder 1.5B a prior from
//! content-free states ("N/A", "") took the eval set under the raw read,
//! a position prior learned from real states (PriDe's estimate, Zheng et al.
//! ICLR 2024) to 56.7 %, and this mean to the cyclic reads' accuracy at one
//! read per decision.
//!
//! Priors are keyed by everything the read can depend on except the state:
//! the prompt with the state left out, the prefill, the slot's cue, label
//! ids and scoring, whether calibration is on, and dgem's read version; the
//! store is a JSON file per model beside the calibration priors (written
//! atomically: temp file, then rename). A change to any of these learns
//! afresh.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Decisions (distinct states) of a question read in every cyclic listing
/// before its learned prior is used, and then frozen (so later answers do
/// not drift with the states seen). Replayed on the 1.5B's eval receipts,
/// 1 to 5 gave 60–73 % slot accuracy, 3 the first at or above the cyclic
/// reads' 70 % (docs/models.md), while a new policy pays for it with its
/// first three decisions only.
pub const PRIOR_DECISIONS: usize = 3;

/// Most questions whose priors the store keeps; past this it starts over
/// (a prior costs [`PRIOR_DECISIONS`] cyclic decisions to learn again).
pub const MAX_STORED_QUESTIONS: usize = 4096;

/// Version of the estimate, mixed into every key: a change to how priors are
/// read or estimated must not reuse stored ones.
const VERSION: &[u8] = b"policy-prior-v1|readout-v3|";

/// One question's learning so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Entry {
    /// Sum over the decisions of each option's probability (own order).
    sum: Vec<f64>,
    /// sha256 (hex) of each state learned from, so a repeated state counts once.
    states: Vec<String>,
}

/// The learned priors of one model, in memory and optionally on disk.
#[derive(Debug, Default)]
pub(crate) struct PolicyPriors {
    entries: HashMap<String, Entry>,
    file: Option<PathBuf>,
}

/// Key of one question's prior: a digest of `parts` (each length-prefixed)
/// after [`VERSION`].
pub(crate) fn prior_key(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    h.update(VERSION);
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// sha256 (hex) of a state text.
pub(crate) fn state_digest(state: &str) -> String {
    hex::encode(Sha256::digest(state.as_bytes()))
}

impl PolicyPriors {
    /// A store backed by `file` (read now if it exists; an unreadable or
    /// malformed file is an empty store: it is only a cache).
    pub(crate) fn new(file: Option<PathBuf>) -> Self {
        let entries = file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| serde_json::from_str::<HashMap<String, Entry>>(&t).ok())
            .unwrap_or_default();
        Self { entries, file }
    }

    /// The learned prior of `key` (own option order, probabilities summing
    /// to 1) once [`PRIOR_DECISIONS`] decisions were read, with that count.
    pub(crate) fn get(&self, key: &str) -> Option<(Vec<f64>, usize)> {
        let e = self.entries.get(key)?;
        let n = e.states.len();
        let total: f64 = e.sum.iter().sum();
        if n < PRIOR_DECISIONS || total.is_nan() || total <= 0.0 {
            return None;
        }
        Some((e.sum.iter().map(|x| x / total).collect(), n))
    }

    /// Add one decision's canonical read `p` (own option order) for `key`,
    /// read on the state whose [`state_digest`] is `state`. Ignored when that
    /// state was learned from already, when the prior is complete, or when
    /// `p` has another length than the earlier reads. Returns whether it was
    /// added.
    pub(crate) fn add(&mut self, key: &str, state: String, p: &[f64]) -> bool {
        if !self.entries.contains_key(key) && self.entries.len() >= MAX_STORED_QUESTIONS {
            self.entries.clear();
        }
        let e = self.entries.entry(key.to_owned()).or_default();
        if e.states.len() >= PRIOR_DECISIONS || e.states.contains(&state) {
            return false;
        }
        if e.sum.is_empty() {
            e.sum = vec![0.0; p.len()];
        } else if e.sum.len() != p.len() {
            return false;
        }
        for (s, x) in e.sum.iter_mut().zip(p) {
            *s += x.clamp(0.0, 1.0);
        }
        e.states.push(state);
        true
    }

    /// Write the store atomically ([`crate::calibration::save_json`]).
    pub(crate) fn save(&self) {
        if let Some(file) = &self.file {
            crate::calibration::save_json(file, &self.entries, "learned policy priors");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prior_is_used_only_after_enough_distinct_states() {
        let mut s = PolicyPriors::new(None);
        let k = prior_key(&[b"policy", b"q"]);
        assert!(s.add(&k, state_digest("a"), &[0.6, 0.4]));
        assert!(
            !s.add(&k, state_digest("a"), &[0.9, 0.1]),
            "same state twice"
        );
        assert!(s.get(&k).is_none());
        assert!(s.add(&k, state_digest("b"), &[0.6, 0.4]));
        assert!(!s.add(&k, state_digest("c"), &[0.6, 0.4, 0.0]), "length");
        assert!(s.add(&k, state_digest("c"), &[0.6, 0.4]));
        assert!(!s.add(&k, state_digest("d"), &[0.1, 0.9]), "complete");
        let (pi, n) = s.get(&k).expect("learned");
        assert_eq!(n, PRIOR_DECISIONS);
        assert!((pi[0] - 0.6).abs() < 1e-12 && (pi[1] - 0.4).abs() < 1e-12);
    }

    #[test]
    fn the_prior_is_the_mean_read() {
        let mut s = PolicyPriors::new(None);
        let k = prior_key(&[b"x"]);
        for (st, p) in [("a", 0.8), ("b", 0.5), ("c", 0.2)] {
            s.add(&k, state_digest(st), &[p, 1.0 - p]);
        }
        let (pi, _) = s.get(&k).expect("learned");
        assert!((pi[0] - 0.5).abs() < 1e-12, "{pi:?}");
    }

    #[test]
    fn learned_priors_survive_a_new_store() {
        let dir = std::env::temp_dir().join(format!("dgem-pos-priors-{}", std::process::id()));
        let file = dir.join("p.policy.json");
        let k = prior_key(&[b"p"]);
        let mut s = PolicyPriors::new(Some(file.clone()));
        for st in ["a", "b", "c"] {
            s.add(&k, state_digest(st), &[0.7, 0.3]);
        }
        s.save();
        let again = PolicyPriors::new(Some(file));
        let (pi, n) = again.get(&k).expect("stored");
        assert_eq!(n, 3);
        assert!((pi[0] - 0.7).abs() < 1e-12);
        assert!(again.get(&prior_key(&[b"q"])).is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn keys_tell_their_parts_apart() {
        assert_ne!(prior_key(&[b"ab", b"c"]), prior_key(&[b"a", b"bc"]));
        assert_eq!(prior_key(&[b"ab"]), prior_key(&[b"ab"]));
    }
}
