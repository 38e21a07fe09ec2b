//! Contextual calibration (Zhao et al. 2021, "Calibrate Before Use").
//!
//! A small model prefers some answers whatever the input says. Reading the same
//! prompt with a content-free state ("N/A", "", "[MASK]") measures that
//! preference; dividing each real read by it and renormalizing removes it
//! (engine-notes.md §2: +9 points on choice questions for Gemma 3 270M).
//! Priors depend only on the token sequence, so they are cached by it.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;

use dgem_core::tokenizer::TokenId;
use lru::LruCache;
use sha2::{Digest, Sha256};

/// Most priors kept in the on-disk store; past this it starts over (priors are
/// cheap to recompute, and a bounded file stays fast to load).
pub const MAX_STORED_PRIORS: usize = 4096;

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

/// Cache key: the content-free sequence, the label ids read at its end, and
/// whether the policy is chained (its prompts' chunk plan has a point at the
/// end of the chat turn, so the same tokens give other last digits).
pub(crate) type PriorKey = (Vec<TokenId>, Vec<Vec<TokenId>>, bool);

/// Bounded LRU of calibration priors, optionally backed by a JSON file so that
/// one-shot CLI runs do not recompute them (keys are sha256 digests of the
/// content-free token sequences and label ids; the file is per model).
#[derive(Debug)]
pub(crate) struct PriorCache {
    lru: LruCache<PriorKey, Vec<f64>>,
    /// The same priors keyed by a digest of the content-free prompt **texts**
    /// (plus the slot's cue and label ids), so a decision whose priors are
    /// cached skips tokenizing three content-free prompts (about half of the
    /// engine's own time per decision, measured with `dgem bench-speed`).
    /// Exact: one engine has one tokenizer, and tokenizing is a function of
    /// the text. In memory only.
    by_text: LruCache<[u8; 32], Vec<f64>>,
    file: Option<PathBuf>,
    stored: HashMap<String, Vec<f64>>,
}

/// Digest of what a question's priors depend on, before tokenizing: the
/// content-free prompt texts, the prefill, the cue and label ids, the
/// scoring, whether the policy is chained (see [`PriorKey`]).
pub(crate) fn text_key(
    texts: &[&str],
    prefill: &str,
    cue: &[TokenId],
    labels: &[Vec<TokenId>],
    scoring: &str,
    chained: bool,
) -> [u8; 32] {
    let mut h = Sha256::new();
    for t in texts {
        h.update((t.len() as u64).to_le_bytes());
        h.update(t.as_bytes());
    }
    h.update((prefill.len() as u64).to_le_bytes());
    h.update(prefill.as_bytes());
    h.update(b"|cue");
    for t in cue {
        h.update(t.to_le_bytes());
    }
    for label in labels {
        h.update(b"|");
        for t in label {
            h.update(t.to_le_bytes());
        }
    }
    h.update(b"|");
    h.update(scoring.as_bytes());
    if chained {
        h.update(b"|chained");
    }
    h.finalize().into()
}

/// Version of the readout the stored priors were computed with, mixed into
/// every stored key: v2 reads label logits from the final hidden state and the
/// label rows of the output matrix (priors of v1, read from llama.cpp's full
/// output head, differ in the last digits and are not reused); v3 pools each
/// label's surface forms (case, `true`/`false`, spellings of a sequence);
/// v4 reads `document_first` prompts with a reuse point at the end of the
/// question block's head, which moves their chunk plan and so the last
/// digits of a content-free read; v5 decodes a prompt in 64-token chunks
/// only before its first reuse point, and from its last one to the slots in
/// one batch (no point at the end of an unchained policy's chat turn), and
/// batches a question's option listings as one prefix tree when they differ
/// for up to 256 tokens (was 48); v6 adds a reuse point at the end of a
/// `schema_first` JSON state's head (`{"ticket": `), which moves the chunk
/// plan of such prompts.
const READOUT_VERSION: &[u8] = b"readout-v6|";

fn digest(key: &PriorKey) -> String {
    let mut h = Sha256::new();
    h.update(READOUT_VERSION);
    for t in &key.0 {
        h.update(t.to_le_bytes());
    }
    for label in &key.1 {
        h.update(b"|");
        for t in label {
            h.update(t.to_le_bytes());
        }
    }
    if key.2 {
        h.update(b"|chained");
    }
    hex::encode(h.finalize())
}

impl PriorCache {
    pub(crate) fn new(entries: usize, file: Option<PathBuf>) -> Self {
        let cap = NonZeroUsize::new(entries.max(1)).unwrap_or(NonZeroUsize::MIN);
        let stored = file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| serde_json::from_str::<HashMap<String, Vec<f64>>>(&t).ok())
            .unwrap_or_default();
        Self {
            lru: LruCache::new(cap),
            by_text: LruCache::new(cap),
            file,
            stored,
        }
    }

    /// Priors found by [`text_key`], if any.
    pub(crate) fn get_by_text(&mut self, key: &[u8; 32]) -> Option<Vec<f64>> {
        self.by_text.get(key).cloned()
    }

    /// Remember priors under their [`text_key`] too.
    pub(crate) fn put_by_text(&mut self, key: [u8; 32], prior: Vec<f64>) {
        self.by_text.put(key, prior);
    }

    pub(crate) fn get(&mut self, key: &PriorKey) -> Option<Vec<f64>> {
        if let Some(p) = self.lru.get(key) {
            return Some(p.clone());
        }
        let p = self.stored.get(&digest(key)).cloned()?;
        self.lru.put(key.clone(), p.clone());
        Some(p)
    }

    pub(crate) fn put(&mut self, key: PriorKey, prior: Vec<f64>) {
        if self.file.is_some() {
            if self.stored.len() >= MAX_STORED_PRIORS {
                self.stored.clear();
            }
            self.stored.insert(digest(&key), prior.clone());
        }
        self.lru.put(key, prior);
    }

    /// Write the stored priors atomically (temp file + rename). Failures are
    /// logged and ignored: the store is only a cache.
    pub(crate) fn save(&self) {
        if let Some(file) = &self.file {
            save_json(file, &self.stored, "calibration priors");
        }
    }
}

/// Write `value` as JSON to `file` atomically: a temp file beside it (named
/// after this process), then a rename, so a reader never sees half a file
/// and concurrent writers leave one whole version. Failures are logged
/// (naming `what`) and ignored: the stores that use it are caches.
pub(crate) fn save_json(file: &std::path::Path, value: &impl serde::Serialize, what: &str) {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec(value).unwrap_or_default())?;
        std::fs::rename(&tmp, file)
    };
    if let Err(e) = write() {
        tracing::warn!(error = %e, path = %file.display(), "could not save {what}");
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn text_keys_tell_apart_every_input_of_a_prior() {
        let (texts, cue, labels) = (["a", "b"], [1, 2], [vec![3], vec![4]]);
        let base = text_key(&texts, "p", &cue, &labels, "FirstToken", false);
        assert_eq!(
            base,
            text_key(&texts, "p", &cue, &labels, "FirstToken", false)
        );
        let others = [
            text_key(&["ab"], "p", &cue, &labels, "FirstToken", false),
            text_key(&texts, "", &cue, &labels, "FirstToken", false),
            text_key(&texts, "p", &[1], &labels, "FirstToken", false),
            text_key(&texts, "p", &cue, &[vec![3, 4]], "FirstToken", false),
            text_key(&texts, "p", &cue, &labels, "Sequence", false),
            text_key(&texts, "p", &cue, &labels, "FirstToken", true),
        ];
        for k in others {
            assert_ne!(k, base);
        }
    }
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
    fn stored_priors_survive_a_new_cache() {
        let dir = std::env::temp_dir().join(format!("dgem-priors-{}", std::process::id()));
        let file = dir.join("p.json");
        let mut c = PriorCache::new(4, Some(file.clone()));
        c.put((vec![1, 2], vec![vec![7]], false), vec![0.25, 0.75]);
        c.save();
        let mut again = PriorCache::new(4, Some(file));
        assert_eq!(
            again.get(&(vec![1, 2], vec![vec![7]], false)),
            Some(vec![0.25, 0.75])
        );
        assert_eq!(again.get(&(vec![1, 3], vec![vec![7]], false)), None);
        assert_eq!(again.get(&(vec![1, 2], vec![vec![7]], true)), None);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn cache_evicts_least_recent() {
        let mut c = PriorCache::new(1, None);
        c.put((vec![1], vec![], false), vec![0.5, 0.5]);
        c.put((vec![2], vec![], false), vec![0.1, 0.9]);
        assert!(c.get(&(vec![1], vec![], false)).is_none());
        assert_eq!(c.get(&(vec![2], vec![], false)), Some(vec![0.1, 0.9]));
    }
}
