//! `dgem model list --local`: what each store holds.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{ggufs_under, hfcache, lmstudio, ollama, Stores};
use crate::gguf::{inspect_gguf, GgufInfo};

/// A store that holds models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Store {
    /// dgem's own cache (`dgem model pull`).
    Dgem,
    /// A Hugging Face hub cache (`dgem model pull hf:…`, the Hugging Face tools).
    Hf,
    /// ollama's models directory.
    Ollama,
    /// LM Studio's models directory.
    LmStudio,
}

impl Store {
    /// Lowercase name, as the reference scheme spells it (`dgem` has none).
    pub fn name(self) -> &'static str {
        match self {
            Self::Dgem => "dgem",
            Self::Hf => "hf",
            Self::Ollama => "ollama",
            Self::LmStudio => "lmstudio",
        }
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One model file a store holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalModel {
    /// The store that holds it.
    pub store: Store,
    /// What to pass to `--model`: a reference (`ollama:…`, `hf:…`,
    /// `lmstudio:…`), or the path for dgem's own cache.
    pub reference: String,
    /// The GGUF file.
    pub path: PathBuf,
    /// Size on disk in bytes.
    pub size: u64,
    /// The GGUF header, or why it could not be read.
    pub header: Result<GgufInfo, String>,
}

impl LocalModel {
    fn new(store: Store, reference: String, path: PathBuf) -> Self {
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        let header = inspect_gguf(&path).map_err(|e| e.to_string());
        Self {
            store,
            reference,
            path,
            size,
            header,
        }
    }

    /// `general.architecture`, if the header says.
    pub fn architecture(&self) -> Option<&str> {
        self.header.as_ref().ok()?.architecture.as_deref()
    }

    /// The quantization (`general.file_type`), e.g. `Q4_K_M`.
    pub fn quantization(&self) -> Option<String> {
        self.header.as_ref().ok()?.quantization()
    }

    /// `<architecture>.context_length`, the longest context it was trained for.
    pub fn context_length(&self) -> Option<u64> {
        self.header.as_ref().ok()?.context_length
    }

    /// Whether `--model` accepts it: a text-generating model with a
    /// vocabulary, of any architecture ([`crate::validate_text_model`]).
    pub fn loadable(&self) -> bool {
        self.refusal().is_none()
    }

    /// Why `--model` refuses it (an unreadable header, or what the file is
    /// instead of a text model, [`GgufInfo::text_model_problem`]); `None`
    /// when it is accepted.
    pub fn refusal(&self) -> Option<String> {
        match &self.header {
            Ok(info) => info.text_model_problem(),
            Err(e) => Some(e.clone()),
        }
    }
}

impl Stores {
    /// Every GGUF model the stores hold, store by store (dgem, Hugging
    /// Face caches, ollama, LM Studio) and sorted by reference within each.
    /// Only headers are read; a missing store contributes nothing, and a file
    /// whose header cannot be read is listed with the reason.
    pub fn list_local(&self) -> Vec<LocalModel> {
        let mut out: Vec<LocalModel> = crate::cache::list_in(&self.dgem)
            .into_iter()
            .filter(|e| e.present)
            .map(|e| LocalModel::new(Store::Dgem, e.path.display().to_string(), e.path))
            .collect();
        let mut seen: Vec<PathBuf> = Vec::new();
        for cache in &self.hf {
            let mut part: Vec<LocalModel> = hfcache::cached(cache)
                .into_iter()
                // Skip a file another cache listed before reading its header.
                .filter(|(_, snap, file)| !seen.contains(&snap.join(file)))
                .map(|(repo, snap, file)| {
                    LocalModel::new(Store::Hf, format!("hf:{repo}/{file}"), snap.join(file))
                })
                .collect();
            part.sort_by(|a, b| a.reference.cmp(&b.reference));
            seen.extend(part.iter().map(|m| m.path.clone()));
            out.extend(part);
        }
        out.extend(ollama_models(&self.ollama));
        out.extend(lmstudio_models(&self.lmstudio));
        out
    }
}

fn ollama_models(dir: &Path) -> Vec<LocalModel> {
    let mut out: Vec<LocalModel> = ollama::manifests(dir)
        .into_iter()
        .map(|(name, manifest)| {
            let reference = format!("ollama:{}", name.display());
            match ollama::model_blob(dir, &manifest) {
                Ok((blob, _)) => LocalModel::new(Store::Ollama, reference, blob),
                // Listed with the reason, so a broken pull shows up.
                Err(e) => LocalModel {
                    store: Store::Ollama,
                    reference,
                    path: manifest,
                    size: 0,
                    header: Err(e),
                },
            }
        })
        .collect();
    out.sort_by(|a, b| a.reference.cmp(&b.reference));
    out
}

fn lmstudio_models(dir: &Path) -> Vec<LocalModel> {
    let mut out = Vec::new();
    for repo in lmstudio::repos(dir) {
        let folder = dir.join(&repo);
        for file in ggufs_under(&folder) {
            out.push(LocalModel::new(
                Store::LmStudio,
                format!("lmstudio:{repo}/{file}"),
                folder.join(&file),
            ));
        }
    }
    out
}
