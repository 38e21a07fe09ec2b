//! Models from a Hugging Face Hub: `dgem model pull hf:OWNER/REPO[/FILE.gguf]`.
//!
//! The download is the `hf-hub` crate's (its tokio API): ranged requests in
//! parallel chunks into a part file that records how far it got, so a pull
//! that is killed continues where it stopped; `HF_ENDPOINT` points it at a
//! mirror or a local hub; `HF_TOKEN` (else the token file `huggingface-cli
//! login` writes) is sent for gated and private repositories. This module
//! adds what a model runner needs on top:
//!
//! - the file: the one named, else the repository's only `.gguf`, else its
//!   only `Q4_K_M` one; otherwise the error lists the GGUF files to choose from;
//! - integrity: the sha256 the hub publishes for the file (its LFS pointer,
//!   from `/api/models/OWNER/REPO?blobs=true`) must match the bytes on disk,
//!   and the file must start with the GGUF magic; a mismatch deletes the file;
//! - errors that say what to do: offline (check the network, `HF_ENDPOINT`,
//!   or pass a file you have with `--model`), gated (set `HF_TOKEN` and
//!   accept the licence on the model page), not found (the repo or the file,
//!   with the files the repo has).
//!
//! Files are cached under `<model dir>/hf/` in the hub's own layout
//! (`models--OWNER--REPO/blobs`, `snapshots/<commit>/FILE`).

use std::path::{Path, PathBuf};

use hf_hub::api::tokio::{ApiBuilder, ApiError};
use hf_hub::{Repo, RepoType};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::ModelError;
use crate::progress::Progress;

/// The public hub, when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A parsed `hf:OWNER/REPO[/FILE]` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRef {
    /// `OWNER/REPO`.
    pub repo: String,
    /// The file in the repository, if named.
    pub file: Option<String>,
}

impl HubRef {
    /// Parse `hf:OWNER/REPO` or `hf:OWNER/REPO/PATH/TO/FILE.gguf`.
    ///
    /// # Errors
    /// [`ModelError::Hub`] naming the form and the value given.
    pub fn parse(s: &str) -> Result<Self, ModelError> {
        let bad = || {
            ModelError::Hub(format!(
            "a hub model is `hf:OWNER/REPO` or `hf:OWNER/REPO/FILE.gguf`, e.g. `hf:ggml-org/gemma-3-1b-it-GGUF`. Given: `{s}`"
        ))
        };
        let rest = s.strip_prefix("hf:").ok_or_else(bad)?;
        let mut parts = rest.splitn(3, '/');
        let (Some(owner), Some(name)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        let ok = |p: &str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !ok(owner) || !ok(name) {
            return Err(bad());
        }
        let file = parts.next().map(str::to_string);
        if let Some(f) = &file {
            if f.is_empty() || f.split('/').any(|seg| seg.is_empty() || seg == "..") {
                return Err(bad());
            }
        }
        Ok(Self {
            repo: format!("{owner}/{name}"),
            file,
        })
    }
}

/// One file of a repository, as the hub lists it with `blobs=true`.
#[derive(Debug, Clone, Deserialize)]
struct Sibling {
    rfilename: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    lfs: Option<Lfs>,
}

#[derive(Debug, Clone, Deserialize)]
struct Lfs {
    sha256: String,
    #[serde(default)]
    size: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
struct Info {
    #[serde(default)]
    siblings: Vec<Sibling>,
}

/// Where and how to pull.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// The hub (`HF_ENDPOINT`, else [`DEFAULT_ENDPOINT`]).
    pub endpoint: String,
    /// Access token (`HF_TOKEN`), for gated and private repositories.
    pub token: Option<String>,
    /// Cache folder (the hub layout goes under it).
    pub cache_dir: PathBuf,
    /// Bytes per ranged request (the unit of resume).
    pub chunk_bytes: usize,
    /// Ranged requests in flight at once.
    pub parallel: usize,
}

impl HubConfig {
    /// From `HF_ENDPOINT`, `HF_TOKEN` and the model cache (`<model dir>/hf`).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Self {
            endpoint: var("HF_ENDPOINT")
                .map(|e| e.trim_end_matches('/').to_string())
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            token: var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN")),
            cache_dir: crate::cache::model_dir().join("hf"),
            chunk_bytes: 16 * 1024 * 1024,
            parallel: 4,
        }
    }
}

/// One progress event of the download, sent from hf-hub's tasks to the
/// thread that owns the caller's [`Progress`].
enum Event {
    Init(u64, String),
    Update(u64),
}

/// hf-hub's progress trait (which needs an owned, `'static` value) as a
/// channel to the caller's [`Progress`].
#[derive(Clone)]
struct Report(tokio::sync::mpsc::UnboundedSender<Event>);

impl hf_hub::api::tokio::Progress for Report {
    async fn init(&mut self, size: usize, filename: &str) {
        let _ = self.0.send(Event::Init(size as u64, filename.to_string()));
    }
    async fn update(&mut self, size: usize) {
        let _ = self.0.send(Event::Update(size as u64));
    }
    async fn finish(&mut self) {}
}

fn apply(progress: &dyn Progress, ev: Event) {
    match ev {
        Event::Init(size, file) => {
            progress.stage(&format!("downloading {file}"));
            progress.set_len(size);
        }
        Event::Update(n) => progress.inc(n),
    }
}

fn explain(e: &ApiError, cfg: &HubConfig, what: &str) -> ModelError {
    let text = e.to_string();
    let status = match e {
        ApiError::RequestError(r) => r.status().map(|s| s.as_u16()),
        _ => None,
    };
    let offline = matches!(e, ApiError::RequestError(r) if r.is_connect() || r.is_timeout());
    ModelError::Hub(match status {
        _ if offline => format!(
            "cannot reach the model hub at {} ({text}). Check the network or proxy, set HF_ENDPOINT to a mirror, or download the file elsewhere and pass it with `--model PATH`",
            cfg.endpoint
        ),
        Some(401 | 403) => format!(
            "{what}: the hub refused access ({text}). The repository is gated or private: set HF_TOKEN to a token from {}/settings/tokens and accept the licence on {}/{what}",
            cfg.endpoint, cfg.endpoint
        ),
        Some(404) => format!("{what}: not found on {} ({text}); check the name", cfg.endpoint),
        _ => format!("{what}: {text}"),
    })
}

/// The file to fetch and its published sha256 and size.
fn choose(r: &HubRef, info: &Info) -> Result<(String, Option<String>, Option<u64>), ModelError> {
    let ggufs: Vec<&Sibling> = info
        .siblings
        .iter()
        .filter(|s| s.rfilename.to_ascii_lowercase().ends_with(".gguf"))
        .collect();
    let listed = || {
        ggufs
            .iter()
            .map(|s| s.rfilename.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pick = match &r.file {
        Some(f) => info
            .siblings
            .iter()
            .find(|s| &s.rfilename == f)
            .ok_or_else(|| {
                ModelError::Hub(format!(
                    "hf:{}: the repository has no file `{f}`; its GGUF files are [{}]",
                    r.repo,
                    listed()
                ))
            })?,
        None => {
            // The rule `--model hf:…` applies to a cached repository too.
            let names: Vec<String> = ggufs.iter().map(|s| s.rfilename.clone()).collect();
            let picked = pick_gguf(&names).and_then(|n| ggufs.iter().find(|s| s.rfilename == n));
            match (picked, ggufs.as_slice()) {
                (Some(one), _) => one,
                (None, []) => {
                    return Err(ModelError::Hub(format!(
                        "hf:{}: the repository has no GGUF file (dgem runs GGUF models on CPU)",
                        r.repo
                    )))
                }
                _ => {
                    return Err(ModelError::Hub(format!(
                    "hf:{}: the repository has {} GGUF files; name one as `hf:{}/FILE.gguf`: [{}]",
                    r.repo,
                    ggufs.len(),
                    r.repo,
                    listed()
                )))
                }
            }
        }
    };
    if !pick.rfilename.to_ascii_lowercase().ends_with(".gguf") {
        return Err(ModelError::Hub(format!(
            "hf:{}/{}: not a GGUF file (dgem runs GGUF models); the repository's GGUF files are [{}]",
            r.repo,
            pick.rfilename,
            listed()
        )));
    }
    let sha = pick.lfs.as_ref().map(|l| l.sha256.to_ascii_lowercase());
    let size = pick.lfs.as_ref().and_then(|l| l.size).or(pick.size);
    Ok((pick.rfilename.clone(), sha, size))
}

fn sha256_of(path: &Path) -> Result<(u64, String), ModelError> {
    let mut f = std::fs::File::open(path).map_err(|e| ModelError::io("open", path, e))?;
    let mut h = Sha256::new();
    let n = std::io::copy(&mut f, &mut h).map_err(|e| ModelError::io("read", path, e))?;
    Ok((n, hex::encode(h.finalize())))
}

/// Pull `reference` (`hf:OWNER/REPO[/FILE.gguf]`) into the cache and return
/// the file's path. A file already cached and matching the hub's sha256 is
/// not downloaded again unless `force`.
///
/// # Errors
/// [`ModelError::Hub`] with what to do (see the module docs);
/// [`ModelError::ChecksumMismatch`] or [`ModelError::SizeMismatch`] when the
/// bytes do not match what the hub publishes (the file is deleted).
pub fn pull(
    reference: &str,
    cfg: &HubConfig,
    force: bool,
    progress: &dyn Progress,
) -> Result<PathBuf, ModelError> {
    let r = HubRef::parse(reference)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ModelError::Hub(format!("cannot start the download runtime: {e}")))?;
    rt.block_on(pull_async(&r, cfg, force, progress))
}

async fn pull_async(
    r: &HubRef,
    cfg: &HubConfig,
    force: bool,
    progress: &dyn Progress,
) -> Result<PathBuf, ModelError> {
    let mut builder = ApiBuilder::new()
        .with_endpoint(cfg.endpoint.clone())
        .with_cache_dir(cfg.cache_dir.clone())
        .with_progress(false)
        .with_max_files(cfg.parallel.max(1))
        .with_chunk_size(Some(cfg.chunk_bytes.max(1)));
    // Without HF_TOKEN the token file of `huggingface-cli login` (read by
    // the builder) stays in place.
    if cfg.token.is_some() {
        builder = builder.with_token(cfg.token.clone());
    }
    let api = builder
        .build()
        .map_err(|e| ModelError::Hub(format!("cannot set up the hub client: {e}")))?;
    let repo = api.repo(Repo::new(r.repo.clone(), RepoType::Model));
    let what = format!("hf:{}", r.repo);
    let info: Info = repo
        .info_request()
        .query(&[("blobs", "true")])
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| explain(&ApiError::RequestError(e), cfg, &r.repo))?
        .json()
        .await
        .map_err(|e| {
            ModelError::Hub(format!(
                "{what}: the hub's file list is not valid JSON: {e}"
            ))
        })?;
    let (file, sha, size) = choose(r, &info)?;
    let cached = if force {
        None
    } else {
        hf_hub::Cache::new(cfg.cache_dir.clone())
            .repo(Repo::new(r.repo.clone(), RepoType::Model))
            .get(&file)
    };
    let path = match cached {
        Some(p) => p,
        None => {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let download = repo.download_with_progress(&file, Report(tx));
            tokio::pin!(download);
            let done = loop {
                tokio::select! {
                    r = &mut download => break r,
                    Some(ev) = rx.recv() => apply(progress, ev),
                }
            };
            while let Ok(ev) = rx.try_recv() {
                apply(progress, ev);
            }
            done.map_err(|e| explain(&e, cfg, &format!("{}/{file}", r.repo)))?
        }
    };
    progress.stage(&format!("checking sha256 of {file}"));
    let (n, got) = sha256_of(&path)?;
    progress.finish();
    let expected = sha.clone().unwrap_or_default();
    let size_ok = size.is_none_or(|s| s == n);
    if (sha.is_some() && got != expected) || !size_ok {
        // The blob behind the snapshot link is what is wrong: remove both.
        if let Ok(blob) = std::fs::canonicalize(&path) {
            let _ = std::fs::remove_file(blob);
        }
        let _ = std::fs::remove_file(&path);
        return Err(if size_ok {
            ModelError::ChecksumMismatch {
                path: path.clone(),
                expected,
                actual: got,
            }
        } else {
            ModelError::SizeMismatch {
                path: path.clone(),
                expected: size.unwrap_or(n),
                actual: n,
            }
        });
    }
    let mut magic = [0u8; 4];
    let head = std::fs::File::open(&path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .map(|()| magic);
    if head.ok() != Some(*b"GGUF") {
        return Err(ModelError::Hub(format!(
            "{what}/{file}: the file is not GGUF (it does not start with the `GGUF` magic)"
        )));
    }
    Ok(path)
}

/// The file a repository reference without a file name means: the only
/// GGUF, else the only `Q4_K_M` one. `None` when there is no such single file.
pub(crate) fn pick_gguf(names: &[String]) -> Option<&str> {
    match names {
        [one] => Some(one.as_str()),
        _ => {
            let mut q4 = names
                .iter()
                .filter(|n| n.to_ascii_lowercase().contains("q4_k_m"));
            match (q4.next(), q4.next()) {
                (Some(one), None) => Some(one.as_str()),
                _ => None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn references_parse_or_say_the_form() {
        assert_eq!(
            HubRef::parse("hf:ggml-org/gemma-3-1b-it-GGUF").unwrap(),
            HubRef {
                repo: "ggml-org/gemma-3-1b-it-GGUF".into(),
                file: None
            }
        );
        assert_eq!(
            HubRef::parse("hf:a/b/sub/m.Q4_K_M.gguf")
                .unwrap()
                .file
                .as_deref(),
            Some("sub/m.Q4_K_M.gguf")
        );
        for bad in [
            "ggml-org/x",
            "hf:",
            "hf:owner",
            "hf:/x",
            "hf:o/r/../../etc",
            "hf:o w/r",
        ] {
            let e = HubRef::parse(bad).unwrap_err().to_string();
            assert!(e.contains("hf:OWNER/REPO") && e.contains(bad), "{e}");
        }
    }

    fn info(files: &[&str]) -> Info {
        Info {
            siblings: files
                .iter()
                .map(|f| Sibling {
                    rfilename: (*f).to_string(),
                    size: Some(1),
                    lfs: None,
                })
                .collect(),
        }
    }

    #[test]
    fn the_file_is_the_named_one_the_only_gguf_or_the_only_q4_k_m() {
        let r = HubRef::parse("hf:o/r").unwrap();
        assert_eq!(
            choose(&r, &info(&["README.md", "m.gguf"])).unwrap().0,
            "m.gguf"
        );
        assert_eq!(
            choose(&r, &info(&["m-Q8_0.gguf", "m-Q4_K_M.gguf"]))
                .unwrap()
                .0,
            "m-Q4_K_M.gguf"
        );
        let e = choose(&r, &info(&["a-Q8_0.gguf", "b-F16.gguf"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 GGUF files") && e.contains("a-Q8_0.gguf, b-F16.gguf"),
            "{e}"
        );
        let e = choose(&r, &info(&["README.md"])).unwrap_err().to_string();
        assert!(e.contains("no GGUF file"), "{e}");
        let named = HubRef::parse("hf:o/r/x.gguf").unwrap();
        let e = choose(&named, &info(&["m.gguf"])).unwrap_err().to_string();
        assert!(
            e.contains("no file `x.gguf`") && e.contains("[m.gguf]"),
            "{e}"
        );
        let readme = HubRef::parse("hf:o/r/README.md").unwrap();
        let e = choose(&readme, &info(&["README.md", "m.gguf"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a GGUF file"), "{e}");
    }
}
