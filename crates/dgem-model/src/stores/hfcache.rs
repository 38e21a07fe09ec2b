//! `hf:OWNER/REPO[/FILE.gguf]` as `--model`: a file already in a Hugging
//! Face cache, found without the network.
//!
//! Both dgem's cache (`<model dir>/hf`, filled by `dgem model pull hf:…`)
//! and the Hugging Face tools' cache use the hub's layout:
//! `models--OWNER--REPO/refs/main` holds the commit of the last download and
//! `models--OWNER--REPO/snapshots/<commit>/FILE` links to the file's blob.
//! The file is the one named, else the snapshot's only GGUF, else its only
//! `Q4_K_M` one, as for `dgem model pull hf:…` ([`crate::hub`]).

use std::path::{Path, PathBuf};

use super::{bracket, ggufs_under, pick_gguf, refused, stem, Resolved};
use crate::error::ModelError;
use crate::hub::HubRef;

/// The cache folder of `OWNER/REPO` under a hub cache.
pub fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

/// The snapshot folders of a cached repository, the one `refs/main` names
/// first, then the others sorted.
pub(crate) fn snapshots(repo_dir: &Path) -> Vec<PathBuf> {
    let snaps = repo_dir.join("snapshots");
    let main = std::fs::read_to_string(repo_dir.join("refs").join("main"))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty() && !s.contains('/') && !s.contains(".."));
    let mut out: Vec<PathBuf> = main.iter().map(|c| snaps.join(c)).collect();
    for name in super::names_in(&snaps, Path::is_dir) {
        let p = snaps.join(name);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out.retain(|p| p.is_dir());
    out
}

/// Resolve `reference` (`hf:…`) in the caches `caches`, first match wins.
pub(crate) fn resolve(caches: &[PathBuf], reference: &str) -> Result<Resolved, ModelError> {
    let r = HubRef::parse(reference).map_err(|e| refused(reference, e.to_string()))?;
    let mut looked = Vec::new();
    let mut found_files: Vec<String> = Vec::new();
    for cache in caches {
        let dir = repo_dir(cache, &r.repo);
        looked.push(dir.display().to_string());
        for snap in snapshots(&dir) {
            let files = ggufs_under(&snap);
            let pick = match &r.file {
                Some(f) => files.iter().find(|g| *g == f).map(String::as_str),
                None => pick_gguf(&files),
            };
            if let Some(file) = pick {
                return Ok(Resolved {
                    reference: reference.to_owned(),
                    path: snap.join(file),
                    id: stem(file),
                });
            }
            for f in files {
                let shown = format!("{}/{f}", snap.display());
                if !found_files.contains(&shown) {
                    found_files.push(shown);
                }
            }
        }
    }
    let pull = format!("dgem model pull {reference}");
    let detail = if found_files.is_empty() {
        format!(
            "not in the cache (looked for {} in {}); `{pull}` downloads it",
            r.file.as_deref().unwrap_or("a GGUF file"),
            bracket(&looked)
        )
    } else if let Some(f) = &r.file {
        format!(
            "the cache has no file `{f}` for {} (it has {}); `{pull}` downloads it",
            r.repo,
            bracket(&found_files)
        )
    } else {
        format!(
            "the cache holds {} GGUF files of {} and none is the only `Q4_K_M` one; name one as `hf:{}/FILE.gguf`: {}",
            found_files.len(),
            r.repo,
            r.repo,
            bracket(&found_files)
        )
    };
    Err(refused(reference, detail))
}

/// Every cached `(OWNER/REPO, snapshot dir, file)` under `cache`: the GGUF
/// files of each repository's current snapshot.
pub(crate) fn cached(cache: &Path) -> Vec<(String, PathBuf, String)> {
    let mut out = Vec::new();
    for entry in super::names_in(cache, Path::is_dir) {
        let Some(repo) = entry
            .strip_prefix("models--")
            .and_then(|r| r.split_once("--"))
            .map(|(o, n)| format!("{o}/{n}"))
        else {
            continue;
        };
        if let Some(snap) = snapshots(&cache.join(&entry)).into_iter().next() {
            for f in ggufs_under(&snap) {
                out.push((repo.clone(), snap.clone(), f));
            }
        }
    }
    out
}
