//! Models a user already has in another tool's store, named by reference:
//!
//! - `ollama:NAME[:TAG]` (also `NAMESPACE/NAME[:TAG]`, `HOST/NAMESPACE/NAME[:TAG]`):
//!   the weights blob an `ollama pull` left, read from ollama's manifest; no
//!   ollama process is needed ([`ollama`]);
//! - `hf:OWNER/REPO[/FILE.gguf]`: a file `dgem model pull hf:…` (or the
//!   Hugging Face tools) already cached ([`hfcache`]);
//! - `lmstudio:PUBLISHER/REPO[/FILE.gguf]`: a file LM Studio downloaded
//!   ([`lmstudio`]).
//!
//! Where a reference names a repository rather than a file, the file is the
//! repository's only GGUF, else its only `Q4_K_M` one; otherwise the error
//! lists them. [`Stores::list_local`] lists what every store holds with the
//! architecture, quantization and context length from each GGUF header.
//!
//! Store locations come from the environment ([`Stores::from_env`]) or are
//! given explicitly (tests build fake stores in a temporary directory).

pub mod hfcache;
mod list;
pub mod lmstudio;
pub mod ollama;

use std::path::{Path, PathBuf};

pub use list::{LocalModel, Store};

use crate::env::{DGEM_LMSTUDIO_DIR, DGEM_OLLAMA_DIR, OLLAMA_MODELS};
use crate::error::ModelError;
pub(crate) use crate::hub::pick_gguf;

/// Where each store keeps its models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stores {
    /// dgem's own cache ([`crate::model_dir`]).
    pub dgem: PathBuf,
    /// Hugging Face hub caches, searched in order: dgem's (`<model dir>/hf`),
    /// then the user's (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    /// `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`).
    pub hf: Vec<PathBuf>,
    /// ollama's models directory (it holds `manifests/` and `blobs/`).
    pub ollama: PathBuf,
    /// LM Studio's models directory (it holds `PUBLISHER/REPO/FILE.gguf`).
    pub lmstudio: PathBuf,
}

/// A reference resolved to a file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The reference as given, e.g. `ollama:gemma3:1b`.
    pub reference: String,
    /// The GGUF file it names.
    pub path: PathBuf,
    /// A model id for reports and file names, e.g. `gemma3-1b`.
    pub id: String,
}

/// The reference schemes [`Stores::resolve`] understands.
pub const SCHEMES: &[&str] = &["ollama:", "hf:", "lmstudio:"];

/// Whether `s` is a store reference (`ollama:`, `hf:` or `lmstudio:`) rather
/// than a path.
pub fn is_reference(s: &str) -> bool {
    SCHEMES.iter().any(|p| s.starts_with(p))
}

fn var(key: &str) -> Option<PathBuf> {
    std::env::var_os(key)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn home() -> PathBuf {
    dirs::home_dir().unwrap_or_default()
}

/// The first of `candidates` that is a directory, else the first.
fn first_existing(candidates: Vec<PathBuf>) -> PathBuf {
    candidates
        .iter()
        .find(|p| p.is_dir())
        .or(candidates.first())
        .cloned()
        .unwrap_or_default()
}

impl Stores {
    /// The stores of this machine.
    ///
    /// - ollama: `$DGEM_OLLAMA_DIR`, else `$OLLAMA_MODELS`, else
    ///   `~/.ollama/models`, else (when only it exists) the Linux service's
    ///   `/usr/share/ollama/.ollama/models`;
    /// - LM Studio: `$DGEM_LMSTUDIO_DIR`, else `~/.lmstudio/models`, else
    ///   (when only it exists) the older `~/.cache/lm-studio/models`;
    /// - Hugging Face: see [`Stores::hf`].
    pub fn from_env() -> Self {
        let home = home();
        let ollama = var(DGEM_OLLAMA_DIR)
            .or_else(|| var(OLLAMA_MODELS))
            .unwrap_or_else(|| {
                first_existing(vec![
                    home.join(".ollama").join("models"),
                    PathBuf::from("/usr/share/ollama/.ollama/models"),
                ])
            });
        let lmstudio = var(DGEM_LMSTUDIO_DIR).unwrap_or_else(|| {
            first_existing(vec![
                home.join(".lmstudio").join("models"),
                home.join(".cache").join("lm-studio").join("models"),
            ])
        });
        let user_hf = var("HF_HUB_CACHE")
            .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
            .unwrap_or_else(|| {
                var("XDG_CACHE_HOME")
                    .unwrap_or_else(|| home.join(".cache"))
                    .join("huggingface")
                    .join("hub")
            });
        let dgem = crate::cache::model_dir();
        let mut hf = vec![dgem.join("hf")];
        if !hf.contains(&user_hf) {
            hf.push(user_hf);
        }
        Self {
            dgem,
            hf,
            ollama,
            lmstudio,
        }
    }

    /// Resolve an `ollama:`, `hf:` or `lmstudio:` reference to its file.
    /// Only the file's presence (and, for ollama, its size against the
    /// manifest) is checked; the caller reads the GGUF header.
    ///
    /// # Errors
    /// [`ModelError::Reference`] naming the reference, the paths looked at
    /// and what was found there.
    pub fn resolve(&self, reference: &str) -> Result<Resolved, ModelError> {
        if let Some(rest) = reference.strip_prefix("ollama:") {
            ollama::resolve(&self.ollama, reference, rest)
        } else if reference.starts_with("hf:") {
            hfcache::resolve(&self.hf, reference)
        } else if let Some(rest) = reference.strip_prefix("lmstudio:") {
            lmstudio::resolve(&self.lmstudio, reference, rest)
        } else {
            Err(refused(
                reference,
                "a model reference is `ollama:NAME[:TAG]`, `hf:OWNER/REPO[/FILE.gguf]` or \
                 `lmstudio:PUBLISHER/REPO[/FILE.gguf]`",
            ))
        }
    }

    /// The stores and their directories, in listing order.
    pub fn roots(&self) -> Vec<(Store, PathBuf)> {
        let mut roots = vec![(Store::Dgem, self.dgem.clone())];
        roots.extend(self.hf.iter().map(|d| (Store::Hf, d.clone())));
        roots.push((Store::Ollama, self.ollama.clone()));
        roots.push((Store::LmStudio, self.lmstudio.clone()));
        roots
    }
}

/// A [`ModelError::Reference`].
pub(crate) fn refused(reference: &str, detail: impl Into<String>) -> ModelError {
    ModelError::Reference {
        reference: reference.to_owned(),
        detail: detail.into(),
    }
}

/// `[a, b, c]`.
pub(crate) fn bracket(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

/// The `*.gguf` files under `dir` (up to two folders deep), as sorted paths
/// relative to `dir` with `/` separators. Hidden files are skipped.
pub(crate) fn ggufs_under(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, depth: u32, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let rel = format!("{prefix}{name}");
            // `metadata` follows symlinks (the hub cache links into blobs/).
            let Ok(meta) = std::fs::metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() && depth < 2 {
                walk(&entry.path(), &format!("{rel}/"), depth + 1, out);
            } else if meta.is_file() && name.to_ascii_lowercase().ends_with(".gguf") {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", 0, &mut out);
    out.sort();
    out
}

/// The sorted names of the entries of `dir` that satisfy `keep`.
pub(crate) fn names_in(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| keep(&e.path()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// `s` with every character outside `[A-Za-z0-9._-]` replaced by `-`.
pub(crate) fn id_from(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The stem of a relative file name (`sub/m.Q4_K_M.gguf` → `m.Q4_K_M`).
pub(crate) fn stem(file: &str) -> String {
    let base = file.rsplit('/').next().unwrap_or(file);
    let base = if base.to_ascii_lowercase().ends_with(".gguf") {
        &base[..base.len() - 5]
    } else {
        base
    };
    id_from(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_pick_is_the_only_gguf_else_the_only_q4_k_m() {
        assert_eq!(pick_gguf(&v(&["m.gguf"])), Some("m.gguf"));
        assert_eq!(
            pick_gguf(&v(&["m-Q8_0.gguf", "m-Q4_K_M.gguf"])),
            Some("m-Q4_K_M.gguf")
        );
        assert_eq!(pick_gguf(&v(&["a-Q8_0.gguf", "b-F16.gguf"])), None);
        assert_eq!(pick_gguf(&v(&["a-q4_k_m.gguf", "b-Q4_K_M.gguf"])), None);
        assert_eq!(pick_gguf(&[]), None);
    }

    #[test]
    fn ids_are_safe_file_names() {
        assert_eq!(id_from("qwen2.5:7b"), "qwen2.5-7b");
        assert_eq!(stem("sub/m.Q4_K_M.gguf"), "m.Q4_K_M");
        assert!(is_reference("ollama:x") && !is_reference("/tmp/ollama:x"));
    }
}
