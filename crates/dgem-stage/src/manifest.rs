//! The file list of a staging source and the small JSON manifest that describes
//! an HTTPS source (serving.md §10.1 writes a similar `.gcs_manifest.json`).
//!
//! Manifest format (`dgem-manifest.json`, UTF-8 JSON):
//!
//! ```json
//! {
//!   "files": [
//!     {"path": "config.json", "size": 1234},
//!     {"path": "model-00001-of-00002.safetensors", "size": 5000000000,
//!      "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
//!   ]
//! }
//! ```
//!
//! `path` is relative to the manifest's own URL (`/`-separated, no `..`, no
//! leading `/`); `size` is in bytes; `sha256` (lowercase hex) is optional and,
//! when given, is checked after staging.

use serde::{Deserialize, Serialize};

use crate::error::StageError;

/// File name of the manifest looked up under an HTTPS base URL.
pub const MANIFEST_NAME: &str = "dgem-manifest.json";

/// One file to stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative path inside the source and the destination (`/`-separated).
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Expected SHA-256, lowercase hex, when the source publishes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// What identifies this version of the file at the source (Cloud Storage
    /// generation, local size and mtime, HTTP `ETag`); a resumed run refetches a
    /// file whose fingerprint differs from the one its journal recorded. Never
    /// read from or written to a manifest (the manifest's `sha256` plays that role).
    #[serde(skip)]
    pub fingerprint: Option<String>,
}

impl FileEntry {
    /// True for `*.safetensors`, which are staged header first and then in ranged
    /// chunks; every other file is fetched whole before the engine starts.
    pub fn is_safetensors(&self) -> bool {
        self.path.ends_with(".safetensors")
    }
}

/// A list of files with sizes and optional checksums.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The files, in the order they are staged.
    pub files: Vec<FileEntry>,
}

impl Manifest {
    /// Parse and check a manifest body.
    ///
    /// # Errors
    /// [`StageError::Manifest`] naming `origin` when the JSON does not match the
    /// format above or a path or checksum is unusable.
    pub fn parse(origin: &str, body: &[u8]) -> Result<Self, StageError> {
        let m: Self = serde_json::from_slice(body).map_err(|e| StageError::Manifest {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        m.check(origin)?;
        Ok(m)
    }

    /// Check paths (relative, no `..`, unique) and checksums (64 hex digits),
    /// and that there is at least one file.
    ///
    /// # Errors
    /// [`StageError::Manifest`] naming the offending entry.
    pub fn check(&self, origin: &str) -> Result<(), StageError> {
        let bad = |message: String| StageError::Manifest {
            origin: origin.to_string(),
            message,
        };
        if self.files.is_empty() {
            return Err(bad("it lists no files".into()));
        }
        let mut seen = std::collections::HashSet::new();
        for f in &self.files {
            check_path(&f.path).map_err(&bad)?;
            if !seen.insert(f.path.as_str()) {
                return Err(bad(format!("`path` `{}` appears twice", f.path)));
            }
            if let Some(h) = &f.sha256 {
                if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad(format!(
                        "`sha256` of `{}` must be 64 hex digits. Given: `{h}`",
                        f.path
                    )));
                }
            }
        }
        Ok(())
    }

    /// Total bytes over all files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// A relative path that stays inside the destination directory.
pub(crate) fn check_path(path: &str) -> Result<(), String> {
    let ok = !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\\')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.starts_with(".dgem-stage"))
        && path != crate::READY_FILE;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`path` must be a relative path inside the destination (no `..`, no leading `/`). Given: `{path}`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let m = Manifest::parse(
            "m",
            br#"{"files":[{"path":"a/b.safetensors","size":10},{"path":"c.json","size":2}]}"#,
        )
        .expect("valid");
        assert_eq!(m.total_bytes(), 12);
        assert!(m.files[0].is_safetensors());
        assert!(!m.files[1].is_safetensors());
        let e = Manifest::parse("m", br#"{"files":[{"path":"../x","size":1}]}"#).expect_err("bad");
        assert_eq!(
            e.to_string(),
            "file list from m is invalid: `path` must be a relative path inside the destination (no `..`, no leading `/`). Given: `../x`"
        );
        let e = Manifest::parse("m", br#"{"files":[{"path":"x","size":1,"sha256":"zz"}]}"#)
            .expect_err("bad hash");
        assert!(e
            .to_string()
            .contains("`sha256` of `x` must be 64 hex digits. Given: `zz`"));
        assert!(Manifest::parse("m", br#"{"files":[]}"#).is_err());
    }
}
