//! A policy's prefix KV state kept on disk, so that a new process's first
//! decision of a known policy decodes only the tokens new to it.
//!
//! The in-memory [`super::snapshots`] keep prefixes for the life of a
//! process; a one-shot `dgem decide` starts empty and would decode its
//! policy's text again. When a canonical decode ends at one of a read's
//! reuse points up to its **policy point** (where a `schema_first` policy's
//! shared prefix ends, and past it where a JSON state's head ends,
//! `{"ticket": "`; see [`dgem_backend::SequenceRead::policy_point`]),
//! sequence 0's state is also written to a file here with llama.cpp's own
//! sequence-state format (`llama_state_seq_save_file`: a versioned header,
//! the tokens, then the KV cells). A later read whose chunk plan reaches
//! the same point with the same tokens and chunk chain loads it into an
//! emptied cache (`llama_state_seq_load_file`) instead of decoding.
//!
//! **Same bits.** The file holds the bytes a decode wrote, restored into
//! cells `0..point` as an in-memory snapshot is; decoding then continues in
//! the read's own chunk plan, so the answer has a cold read's bits. The key
//! therefore holds everything those bytes depend on: the model file (its
//! sha256, or its id, size and modification time), the context size, the
//! CPU features ggml's kernels were chosen by, the llama.cpp bindings'
//! version ([`LLAMA_CPP_SYS`]), the build profile, this crate's version and
//! [`FORMAT`], the tokens and the chunk chain. Thread counts change no bits
//! (`tests/forward.rs`), so they are not in it.
//!
//! **Bounded and safe.** At most [`MAX_FILES`] files and [`MAX_BYTES`],
//! least recently used removed first (a load touches its file; a prefix a
//! process keeps finding in memory is not touched, so it may go first).
//! Files are written to a temp name of their own (process and a counter)
//! and renamed, so a reader never sees half a file, and a temp file a dead
//! writer left is removed after an hour; a file llama.cpp
//! refuses (truncated, another format version) or whose tokens differ is
//! removed and the prefix decoded. Every failure here only costs time.

use std::path::{Path, PathBuf};

use dgem_core::tokenizer::TokenId;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::token::LlamaToken;
use sha2::{Digest, Sha256};

/// Version of what a file holds, in every key; bump it when llama.cpp's
/// cache layout or dgem's chunking changes in a way the other parts of the
/// key do not show.
pub(crate) const FORMAT: &str = "dgem-kv-v1";

/// Most prefix files kept in one store.
pub(crate) const MAX_FILES: usize = 64;

/// Most bytes of prefix files kept in one store (512 MiB: about 18 files of
/// 1,000 tokens on a 1.5B model at 28 KB a token; a policy whose states are
/// JSON objects keeps two, its own prefix and its state head's, more when
/// its states begin with different keys).
pub(crate) const MAX_BYTES: u64 = 512 << 20;

/// The llama.cpp bindings this build's numbers come from (the
/// `llama-cpp-sys-2` version in `Cargo.lock`; a test keeps them equal): a
/// new llama.cpp may write other bytes for the same prefix.
pub(crate) const LLAMA_CPP_SYS: &str = "0.1.161";

/// A temp file left this long (a writer that died) is removed by a prune.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(3600);

/// Distinct temp names for writers of one process.
static TEMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The files of one model and context.
pub(crate) struct KvStore {
    dir: PathBuf,
    /// Digest input shared by every key of this store (model, context,
    /// build, CPU features).
    identity: Vec<u8>,
}

impl KvStore {
    /// A store in `dir` for the model identified by `model` (its sha256, or
    /// another stable identity of the file) read with a context of
    /// `context_size` tokens.
    pub(crate) fn new(dir: PathBuf, model: &str, context_size: usize) -> Self {
        let features: Vec<String> = crate::simd::simd_features()
            .iter()
            .map(|f| format!("{f:?}"))
            .collect();
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let identity = format!(
            "{FORMAT}|{}|llama-cpp-sys-2 {LLAMA_CPP_SYS}|{profile}|{model}|ctx {context_size}|{}",
            env!("CARGO_PKG_VERSION"),
            features.join(",")
        )
        .into_bytes();
        Self { dir, identity }
    }

    /// The file of the prefix `tokens` built by the chunk chain `bounds`.
    fn path(&self, tokens: &[TokenId], bounds: &[usize]) -> PathBuf {
        let mut h = Sha256::new();
        h.update(&self.identity);
        h.update((tokens.len() as u64).to_le_bytes());
        for t in tokens {
            h.update(t.to_le_bytes());
        }
        h.update(b"|bounds");
        for b in bounds {
            h.update((*b as u64).to_le_bytes());
        }
        self.dir.join(format!("{}.kv", hex::encode(h.finalize())))
    }

    /// The file holding `tokens[..point]` as decoded in the chunk plan
    /// `plan` (the read's own; its chain up to `point` must end there), if
    /// one exists; with that chain.
    pub(crate) fn find(
        &self,
        tokens: &[TokenId],
        point: usize,
        plan: &[usize],
    ) -> Option<(PathBuf, Vec<usize>)> {
        let prefix = tokens.get(..point)?;
        let bounds: Vec<usize> = plan.iter().copied().take_while(|&p| p <= point).collect();
        if bounds.last() != Some(&point) {
            return None;
        }
        let path = self.path(prefix, &bounds);
        path.is_file().then_some((path, bounds))
    }

    /// Write sequence 0 of `ctx`, which holds exactly `tokens` built by the
    /// chain `bounds`, unless its file exists; then keep the store within
    /// [`MAX_FILES`].
    pub(crate) fn save(&self, ctx: &LlamaContext<'_>, tokens: &[TokenId], bounds: &[usize]) {
        let path = self.path(tokens, bounds);
        if path.is_file() {
            return;
        }
        let ids: Vec<LlamaToken> = tokens
            .iter()
            .filter_map(|&t| i32::try_from(t).ok().map(LlamaToken))
            .collect();
        let seq = TEMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}-{seq}", std::process::id()));
        let written = std::fs::create_dir_all(&self.dir)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                ctx.state_seq_save_file(&tmp, 0, &ids)
                    .map_err(|e| e.to_string())
            })
            .and_then(|n| {
                std::fs::rename(&tmp, &path)
                    .map(|()| n)
                    .map_err(|e| e.to_string())
            });
        match written {
            Ok(bytes) => {
                tracing::debug!(tokens = tokens.len(), bytes, path = %path.display(), "policy prefix KV kept on disk");
                self.prune();
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                tracing::debug!(error = %e, "policy prefix KV not kept on disk");
            }
        }
    }

    /// Load `path` into sequence 0 of `ctx`, whose cache must be empty;
    /// `true` when it held exactly `tokens`. A file llama.cpp refuses, or of
    /// other tokens, is removed.
    pub(crate) fn load(ctx: &mut LlamaContext<'_>, path: &Path, tokens: &[TokenId]) -> bool {
        let loaded = ctx.state_seq_load_file(path, 0, tokens.len());
        let ok = match &loaded {
            Ok((ids, _)) => {
                ids.len() == tokens.len()
                    && ids
                        .iter()
                        .zip(tokens)
                        .all(|(a, &b)| i64::from(a.0) == i64::from(b))
            }
            Err(_) => false,
        };
        if ok {
            Self::touch(path);
        } else {
            tracing::warn!(path = %path.display(), "a kept policy prefix could not be loaded; removed");
            let _ = std::fs::remove_file(path);
        }
        ok
    }

    /// Mark `path` most recently used: the last one a prune removes.
    pub(crate) fn touch(path: &Path) {
        if let Ok(f) = std::fs::File::options().append(true).open(path) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
    }

    /// Remove the least recently used files past [`MAX_FILES`] or
    /// [`MAX_BYTES`], and temp files older than an hour.
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = std::time::SystemTime::now();
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = Vec::new();
        for e in entries.filter_map(Result::ok) {
            let (path, Ok(meta)) = (e.path(), e.metadata()) else {
                continue;
            };
            let Ok(modified) = meta.modified() else {
                continue;
            };
            if path.extension().is_some_and(|x| x == "kv") {
                files.push((modified, meta.len(), path));
            } else if now
                .duration_since(modified)
                .is_ok_and(|age| age > STALE_TEMP)
            {
                let _ = std::fs::remove_file(&path);
            }
        }
        files.sort();
        let mut bytes: u64 = files.iter().map(|f| f.1).sum();
        let mut count = files.len();
        for (_, len, path) in &files {
            if count <= MAX_FILES && bytes <= MAX_BYTES {
                break;
            }
            if std::fs::remove_file(path).is_ok() {
                count -= 1;
                bytes = bytes.saturating_sub(*len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_model_context_tokens_and_chain() {
        let dir = PathBuf::from("/nonexistent");
        let a = KvStore::new(dir.clone(), "sha-a", 4096);
        let base = a.path(&[1, 2, 3], &[3]);
        assert_eq!(base, a.path(&[1, 2, 3], &[3]));
        assert_ne!(base, a.path(&[1, 2, 4], &[3]));
        assert_ne!(base, a.path(&[1, 2, 3], &[2, 3]));
        assert_ne!(
            base,
            KvStore::new(dir.clone(), "sha-b", 4096).path(&[1, 2, 3], &[3])
        );
        assert_ne!(
            base,
            KvStore::new(dir, "sha-a", 2048).path(&[1, 2, 3], &[3])
        );
    }

    /// The bindings' version in the key is the one this build links.
    #[test]
    fn the_llama_cpp_version_in_the_key_is_the_locked_one() {
        let lock =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"))
                .expect("Cargo.lock");
        let at = lock.find("name = \"llama-cpp-sys-2\"").expect("locked");
        let version = lock[at..]
            .lines()
            .nth(1)
            .and_then(|l| l.strip_prefix("version = \""))
            .and_then(|l| l.strip_suffix('"'))
            .expect("version line");
        assert_eq!(version, LLAMA_CPP_SYS);
    }

    #[test]
    fn a_point_off_the_plan_finds_nothing() {
        let dir = std::env::temp_dir().join(format!("dgem-kv-find-{}", std::process::id()));
        let s = KvStore::new(dir.clone(), "m", 64);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(s.path(&[5, 6], &[2]), b"x").expect("file");
        assert!(s.find(&[5, 6, 7], 2, &[2, 3]).is_some());
        assert!(
            s.find(&[5, 6, 7], 2, &[1, 3]).is_none(),
            "chain does not end at 2"
        );
        assert!(s.find(&[5, 7, 7], 2, &[2, 3]).is_none(), "other tokens");
        assert!(s.find(&[5], 2, &[2]).is_none(), "point past the read");
        let _ = std::fs::remove_dir_all(dir);
    }
}
