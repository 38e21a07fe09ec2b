//! Where models live on disk and what is there.

use std::path::{Path, PathBuf};

use crate::env::DGEM_MODEL_DIR;
use crate::spec::{known_models, ModelSpec};

/// The model cache directory.
///
/// `$DGEM_MODEL_DIR` if set and non-empty, else `<user cache dir>/dgem/models`
/// (`$XDG_CACHE_HOME/dgem/models` or `~/.cache/dgem/models` on Linux). If the
/// platform has no cache directory (no `$HOME`), `<temp dir>/dgem/models`.
/// The directory is not created here.
pub fn model_dir() -> PathBuf {
    match std::env::var_os(DGEM_MODEL_DIR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => dirs::cache_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("dgem")
            .join("models"),
    }
}

/// Path the model `spec` has (or will have) in [`model_dir`].
pub fn cached_path(spec: &ModelSpec) -> PathBuf {
    model_dir().join(&spec.file_name)
}

/// One model file known to the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    /// Model id (for unknown files: the file stem).
    pub id: String,
    /// Path in the cache directory.
    pub path: PathBuf,
    /// Size on disk if present, else the expected size (0 when unknown).
    pub size: u64,
    /// Whether the file exists.
    pub present: bool,
    /// Whether this is one of [`known_models`] (it can be pulled).
    pub known: bool,
}

/// The known models plus any other `*.gguf` file in [`model_dir`].
pub fn list() -> Vec<ModelEntry> {
    list_in(&model_dir())
}

/// Like [`list`], for an explicit cache directory.
///
/// Known models come first, in [`known_models`] order; other files follow,
/// sorted by id. Hidden files (such as in-progress downloads) are skipped, and
/// an unreadable or missing directory simply yields no extra entries.
pub fn list_in(dir: &Path) -> Vec<ModelEntry> {
    let known = known_models();
    let mut entries: Vec<ModelEntry> = known
        .iter()
        .map(|spec| {
            let path = dir.join(&spec.file_name);
            let meta = std::fs::metadata(&path).ok().filter(|m| m.is_file());
            ModelEntry {
                id: spec.id.clone(),
                size: meta.as_ref().map_or(spec.size, |m| m.len()),
                present: meta.is_some(),
                path,
                known: true,
            }
        })
        .collect();

    let mut others: Vec<ModelEntry> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_str()?.to_owned();
            if name.starts_with('.') || known.iter().any(|k| k.file_name == name) {
                return None;
            }
            let stem = name.strip_suffix(".gguf")?.to_owned();
            let meta = entry.metadata().ok().filter(|m| m.is_file())?;
            Some(ModelEntry {
                id: stem,
                path: entry.path(),
                size: meta.len(),
                present: true,
                known: false,
            })
        })
        .collect();
    others.sort_by(|a, b| a.id.cmp(&b.id));
    entries.extend(others);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::default_model;

    #[test]
    fn list_in_reports_known_and_extra_models() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("zeta.gguf"), b"abc")?;
        std::fs::write(dir.path().join("alpha.gguf"), b"a")?;
        std::fs::write(dir.path().join(".partial.gguf"), b"x")?;
        std::fs::write(dir.path().join("notes.txt"), b"x")?;
        let entries = list_in(dir.path());
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        let n = known_models().len();
        assert_eq!(ids[0], "qwen2.5-coder-1.5b-instruct-q4_k_m");
        assert_eq!(ids[1], "gemma-3-270m-q4_k_m");
        assert_eq!(ids[n..], ["alpha", "zeta"]);
        assert!(!entries[0].present);
        assert!(entries[..n].iter().all(|e| e.known));
        assert_eq!(entries[0].size, default_model().size);
        assert_eq!(entries[n + 1].size, 3);
        assert!(entries[n + 1].present && !entries[n + 1].known);
        Ok(())
    }

    #[test]
    fn list_in_missing_dir_lists_known_models_only() {
        let entries = list_in(Path::new("/nonexistent/dgem/models"));
        assert_eq!(entries.len(), known_models().len());
        assert!(entries.iter().all(|e| !e.present));
    }
}
