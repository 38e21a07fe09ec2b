//! Contextual calibration (Zhao et al. 2021, "Calibrate Before Use").
//!
//! A small model prefers some answers whatever the input says. Reading the same
//! prompt with a content-free state ("N/A", "", "[MASK]") measures that
//! preference; dividing each real read by it and renormalizing removes it
//! (engine-notes.md §2: +9 points on choice questions for Gemma 3 270M).
//! Priors depend only on the token sequence, so they are cached by it.

use std::num::NonZeroUsize;
use std::str::FromStr;

use dgem_core::tokenizer::TokenId;
use lru::LruCache;

/// Content-free states whose reads are averaged into the prior (engine-notes.md §2).
pub const CONTENT_FREE_STATES: [&str; 3] = ["N/A", "", "[MASK]"];

/// When to apply contextual calibration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CalibrationMode {
    /// On for word labels on a causal backend, off otherwise.
    #[default]
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

impl FromStr for CalibrationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "on" | "true" | "yes" => Ok(Self::On),
            "off" | "false" | "no" => Ok(Self::Off),
            other => Err(format!(
                "`calibration` must be one of [auto, on, off]. Given: `{other}`"
            )),
        }
    }
}

/// Cache key: the content-free sequence and the label ids read at its end.
pub(crate) type PriorKey = (Vec<TokenId>, Vec<Vec<TokenId>>);

/// Bounded LRU of calibration priors.
#[derive(Debug)]
pub(crate) struct PriorCache {
    lru: LruCache<PriorKey, Vec<f64>>,
}

impl PriorCache {
    pub(crate) fn new(entries: usize) -> Self {
        let cap = NonZeroUsize::new(entries.max(1)).unwrap_or(NonZeroUsize::MIN);
        Self {
            lru: LruCache::new(cap),
        }
    }

    pub(crate) fn get(&mut self, key: &PriorKey) -> Option<Vec<f64>> {
        self.lru.get(key).cloned()
    }

    pub(crate) fn put(&mut self, key: PriorKey, prior: Vec<f64>) {
        self.lru.put(key, prior);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_modes_and_reject_unknown() {
        assert_eq!("ON".parse::<CalibrationMode>(), Ok(CalibrationMode::On));
        assert_eq!("off".parse::<CalibrationMode>(), Ok(CalibrationMode::Off));
        let err = "maybe".parse::<CalibrationMode>().expect_err("bad");
        assert_eq!(
            err,
            "`calibration` must be one of [auto, on, off]. Given: `maybe`"
        );
    }

    #[test]
    fn cache_evicts_least_recent() {
        let mut c = PriorCache::new(1);
        c.put((vec![1], vec![]), vec![0.5, 0.5]);
        c.put((vec![2], vec![]), vec![0.1, 0.9]);
        assert!(c.get(&(vec![1], vec![])).is_none());
        assert_eq!(c.get(&(vec![2], vec![])), Some(vec![0.1, 0.9]));
    }
}
