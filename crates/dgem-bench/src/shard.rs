//! Scale-out of a batch run: shard `i` of `n` runs the dataset rows whose id
//! hashes to `i`, and [`crate::merge`] joins the shards' receipts into one.
//!
//! The split is by item id, not by position, so it does not depend on
//! `--offset`/`--limit`, on the order of the file or on how many rows were
//! refused: row `id` belongs to shard
//! `u64::from_be_bytes(sha256(id)[..8]) mod n`. Indices are 0-based, as the
//! batch engines number their tasks.
//!
//! Where the shard comes from, first match wins:
//!
//! 1. `--shard I/N` (or `DGEM_BENCH_SHARD=I/N`);
//! 2. Cloud Run Jobs: `CLOUD_RUN_TASK_INDEX` and `CLOUD_RUN_TASK_COUNT`, set on
//!    every task of a job run;
//! 3. Kubernetes Indexed Jobs: `JOB_COMPLETION_INDEX`, with the count in
//!    `DGEM_SHARD_COUNT` (Kubernetes does not pass `.spec.completions` to the
//!    pod; the manifest in `deploy/` sets it to the same number).
//!
//! A task count of 1 (`CLOUD_RUN_TASK_COUNT=1`) is no sharding.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::BenchError;

/// Environment variable with `I/N`, like `--shard`.
pub const SHARD_ENV: &str = "DGEM_BENCH_SHARD";
/// Shard count beside Kubernetes' `JOB_COMPLETION_INDEX`.
pub const SHARD_COUNT_ENV: &str = "DGEM_SHARD_COUNT";

/// One shard of a run: rows whose id hashes to `index` modulo `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based shard index, `< count`.
    pub index: usize,
    /// Number of shards, at least 1.
    pub count: usize,
}

fn invalid(what: &str, given: &str) -> BenchError {
    BenchError::Invalid(format!(
        "{what} must be `I/N` with 0 ≤ I < N (a 0-based shard index and the shard count), e.g. `0/4`. Given: `{given}`"
    ))
}

impl Shard {
    /// A checked shard.
    ///
    /// # Errors
    /// [`BenchError::Invalid`] unless `index < count`.
    pub fn new(index: usize, count: usize) -> Result<Self, BenchError> {
        if count == 0 || index >= count {
            return Err(invalid("a shard", &format!("{index}/{count}")));
        }
        Ok(Self { index, count })
    }

    /// Parse `I/N` (`what` names the flag or variable in the error).
    ///
    /// # Errors
    /// [`BenchError::Invalid`] naming `what`, the form and the value given.
    pub fn parse(what: &str, s: &str) -> Result<Self, BenchError> {
        let (i, n) = s.trim().split_once('/').ok_or_else(|| invalid(what, s))?;
        let (Ok(i), Ok(n)) = (i.trim().parse::<usize>(), n.trim().parse::<usize>()) else {
            return Err(invalid(what, s));
        };
        Self::new(i, n).map_err(|_| invalid(what, s))
    }

    /// The shard from `flag` (`--shard`), else from the environment read
    /// through `env` (see the module docs); `None` when nothing asks for one.
    ///
    /// # Errors
    /// [`BenchError::Invalid`] naming the flag or variable at fault.
    pub fn resolve(
        flag: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, BenchError> {
        if let Some(f) = flag {
            return Self::parse("`--shard`", f).map(Some);
        }
        if let Some(s) = env(SHARD_ENV) {
            return Self::parse(SHARD_ENV, &s).map(Some);
        }
        let number = |name: &str, v: &str| {
            v.trim().parse::<usize>().map_err(|_| {
                BenchError::Invalid(format!("`{name}` must be a whole number. Given: `{v}`"))
            })
        };
        let pair = |index_var: &str, count_var: &str| -> Result<Option<Self>, BenchError> {
            let Some(i) = env(index_var) else {
                return Ok(None);
            };
            let Some(n) = env(count_var) else {
                return Err(BenchError::Invalid(format!(
                    "`{index_var}` is set but `{count_var}` is not: set it to the number of tasks, or pass `--shard I/N`"
                )));
            };
            let (i, n) = (number(index_var, &i)?, number(count_var, &n)?);
            Self::new(i, n)
                .map(Some)
                .map_err(|_| invalid(&format!("`{index_var}`/`{count_var}`"), &format!("{i}/{n}")))
        };
        let found = match pair("CLOUD_RUN_TASK_INDEX", "CLOUD_RUN_TASK_COUNT")? {
            Some(s) => Some(s),
            None => pair("JOB_COMPLETION_INDEX", SHARD_COUNT_ENV)?,
        };
        Ok(found.filter(|s| s.count > 1))
    }

    /// Whether row `id` belongs to this shard.
    pub fn contains(&self, id: &str) -> bool {
        shard_of(id, self.count) == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The shard (0-based, `< count`) that row `id` belongs to among `count`.
pub fn shard_of(id: &str, count: usize) -> usize {
    let digest = Sha256::digest(id.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(head) % count.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn every_id_lands_in_exactly_one_shard() {
        let ids: Vec<String> = (0..500).map(|i| format!("item-{i}")).collect();
        let shards: Vec<Shard> = (0..4).map(|i| Shard::new(i, 4).unwrap()).collect();
        let mut sizes = [0usize; 4];
        for id in &ids {
            let owners: Vec<usize> = shards
                .iter()
                .filter(|s| s.contains(id))
                .map(|s| s.index)
                .collect();
            assert_eq!(owners.len(), 1, "{id}");
            sizes[owners[0]] += 1;
        }
        // A hash split is roughly even: each shard holds 125 ± 40 of 500.
        assert!(sizes.iter().all(|&n| (85..=165).contains(&n)), "{sizes:?}");
        // Fixed by the id alone (the value is sha256-derived, so it never moves).
        assert_eq!(shard_of("item-0", 4), shard_of("item-0", 4));
        assert_eq!(shard_of("anything", 1), 0);
    }

    #[test]
    fn the_flag_wins_then_cloud_run_then_kubernetes() {
        let all = env(&[
            (SHARD_ENV, "1/3"),
            ("CLOUD_RUN_TASK_INDEX", "2"),
            ("CLOUD_RUN_TASK_COUNT", "5"),
            ("JOB_COMPLETION_INDEX", "0"),
            (SHARD_COUNT_ENV, "2"),
        ]);
        assert_eq!(
            Shard::resolve(Some("0/2"), &all).unwrap(),
            Some(Shard { index: 0, count: 2 })
        );
        assert_eq!(
            Shard::resolve(None, &all).unwrap(),
            Some(Shard { index: 1, count: 3 })
        );
        let cloud = env(&[("CLOUD_RUN_TASK_INDEX", "2"), ("CLOUD_RUN_TASK_COUNT", "5")]);
        assert_eq!(
            Shard::resolve(None, cloud).unwrap(),
            Some(Shard { index: 2, count: 5 })
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3"), (SHARD_COUNT_ENV, "4")]);
        assert_eq!(
            Shard::resolve(None, k8s).unwrap(),
            Some(Shard { index: 3, count: 4 })
        );
        // One task is no sharding; nothing set is none either.
        let one = env(&[("CLOUD_RUN_TASK_INDEX", "0"), ("CLOUD_RUN_TASK_COUNT", "1")]);
        assert_eq!(Shard::resolve(None, one).unwrap(), None);
        assert_eq!(Shard::resolve(None, env(&[])).unwrap(), None);
    }

    #[test]
    fn bad_shards_are_refused_naming_the_source() {
        for (flag, needle) in [
            ("4/4", "`4/4`"),
            ("a/2", "`a/2`"),
            ("1", "`1`"),
            ("0/0", "`0/0`"),
        ] {
            let e = Shard::resolve(Some(flag), env(&[]))
                .unwrap_err()
                .to_string();
            assert!(e.contains("`--shard`") && e.contains(needle), "{e}");
        }
        let e = Shard::resolve(None, env(&[("JOB_COMPLETION_INDEX", "1")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(SHARD_COUNT_ENV), "{e}");
        let e = Shard::resolve(
            None,
            env(&[("CLOUD_RUN_TASK_INDEX", "x"), ("CLOUD_RUN_TASK_COUNT", "2")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("CLOUD_RUN_TASK_INDEX") && e.contains("`x`"),
            "{e}"
        );
    }
}
