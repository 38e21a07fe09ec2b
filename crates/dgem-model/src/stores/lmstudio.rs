//! `lmstudio:PUBLISHER/REPO[/FILE.gguf]`: a file LM Studio downloaded.
//!
//! LM Studio keeps models as `PUBLISHER/REPO/FILE.gguf` under its models
//! directory (`~/.lmstudio/models`; older versions `~/.cache/lm-studio/models`).
//! The file is the one named, else the folder's only GGUF, else its only
//! `Q4_K_M` one; otherwise the error lists them.

use std::path::Path;

use super::{bracket, ggufs_under, names_in, pick_gguf, refused, stem, Resolved};
use crate::error::ModelError;

/// Resolve `reference` (`lmstudio:` + `rest`) in the models directory `dir`.
pub(crate) fn resolve(dir: &Path, reference: &str, rest: &str) -> Result<Resolved, ModelError> {
    let bad = || {
        refused(
            reference,
            "an LM Studio model is `lmstudio:PUBLISHER/REPO` or `lmstudio:PUBLISHER/REPO/FILE.gguf`, \
             e.g. `lmstudio:lmstudio-community/gemma-3-4b-it-GGUF`",
        )
    };
    let segs: Vec<&str> = rest.split('/').collect();
    if segs.len() < 2
        || segs
            .iter()
            .any(|s| s.is_empty() || *s == "." || *s == ".." || s.contains('\\'))
    {
        return Err(bad());
    }
    if !dir.is_dir() {
        return Err(refused(
            reference,
            format!(
                "no LM Studio models directory at {}; set DGEM_LMSTUDIO_DIR to the folder LM Studio \
                 keeps its models in (its settings show it)",
                dir.display()
            ),
        ));
    }
    let repo = dir.join(segs[0]).join(segs[1]);
    if !repo.is_dir() {
        return Err(refused(
            reference,
            format!(
                "no folder {} (models in {}: {})",
                repo.display(),
                dir.display(),
                bracket(&repos(dir))
            ),
        ));
    }
    let files = ggufs_under(&repo);
    let file = if segs.len() > 2 {
        let named = segs[2..].join("/");
        if !files.contains(&named) {
            return Err(refused(
                reference,
                format!(
                    "no GGUF file {} (GGUF files there: {})",
                    repo.join(&named).display(),
                    bracket(&files)
                ),
            ));
        }
        named
    } else {
        match pick_gguf(&files) {
            Some(f) => f.to_owned(),
            None if files.is_empty() => {
                return Err(refused(
                    reference,
                    format!("no GGUF file in {}", repo.display()),
                ))
            }
            None => {
                return Err(refused(
                    reference,
                    format!(
                        "{} holds {} GGUF files and none is the only `Q4_K_M` one; name one as \
                         `lmstudio:{}/{}/FILE.gguf`: {}",
                        repo.display(),
                        files.len(),
                        segs[0],
                        segs[1],
                        bracket(&files)
                    ),
                ))
            }
        }
    };
    Ok(Resolved {
        reference: reference.to_owned(),
        path: repo.join(&file),
        id: stem(&file),
    })
}

/// The `PUBLISHER/REPO` folders under `dir`, sorted.
pub(crate) fn repos(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for publisher in names_in(dir, Path::is_dir) {
        for repo in names_in(&dir.join(&publisher), Path::is_dir) {
            out.push(format!("{publisher}/{repo}"));
        }
    }
    out
}
