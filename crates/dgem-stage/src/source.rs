//! Where weights come from (serving.md §10.1–10.2): a Cloud Storage bucket over
//! its JSON API (listing `storage/v1/b/{bucket}/o?prefix=`, downloads with
//! `alt=media`, `Range` and `Authorization: Bearer`), any HTTP(S) URL that
//! publishes a [manifest](crate::manifest), or a local directory.

use std::path::{Path, PathBuf};

use reqwest::Url;
use serde::Deserialize;

use crate::error::StageError;
use crate::manifest::{FileEntry, Manifest, MANIFEST_NAME};

/// Public Cloud Storage JSON API base; tests point [`crate::StageConfig::gcs_api`] elsewhere.
pub const GCS_API: &str = "https://storage.googleapis.com";

/// Most listing pages followed (1,000 objects each) before giving up.
const MAX_LIST_PAGES: usize = 100;

/// A staging source, parsed from the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `gs://bucket/prefix`: every object under `prefix/`.
    Gcs {
        /// Bucket name.
        bucket: String,
        /// Object prefix, empty or ending in `/`.
        prefix: String,
    },
    /// `http(s)://…`: a manifest URL (ending in `.json`), or a base URL under
    /// which [`MANIFEST_NAME`] is read. File paths are relative to the manifest.
    Http {
        /// The manifest's URL.
        manifest: Url,
    },
    /// A local directory (every regular file under it, hidden files excluded).
    Local {
        /// The directory.
        dir: PathBuf,
    },
}

impl Source {
    /// Parse `gs://BUCKET[/PREFIX]`, `http(s)://URL` or a local directory path.
    ///
    /// # Errors
    /// [`StageError::Config`] naming `source`, the accepted forms and the value.
    pub fn parse(s: &str) -> Result<Self, StageError> {
        let bad = || StageError::Config {
            field: "source",
            expected: "gs://BUCKET[/PREFIX], an http(s):// URL or an existing local directory",
            given: s.to_string(),
        };
        if let Some(rest) = s.strip_prefix("gs://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let valid_bucket = !bucket.is_empty()
                && bucket
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
            if !valid_bucket {
                return Err(bad());
            }
            let mut prefix = prefix.trim_matches('/').to_string();
            if !prefix.is_empty() {
                prefix.push('/');
            }
            return Ok(Self::Gcs {
                bucket: bucket.to_string(),
                prefix,
            });
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            let mut url = Url::parse(s).map_err(|_| bad())?;
            if !url.path().ends_with(".json") {
                if !url.path().ends_with('/') {
                    let p = format!("{}/", url.path());
                    url.set_path(&p);
                }
                url = url.join(MANIFEST_NAME).map_err(|_| bad())?;
            }
            return Ok(Self::Http { manifest: url });
        }
        let dir = PathBuf::from(s);
        if dir.is_dir() {
            Ok(Self::Local { dir })
        } else {
            Err(bad())
        }
    }

    /// True when the source is a bucket (the only kind a bearer token is sent to).
    pub fn is_gcs(&self) -> bool {
        matches!(self, Self::Gcs { .. })
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gcs { bucket, prefix } => write!(f, "gs://{bucket}/{prefix}"),
            Self::Http { manifest } => write!(f, "{manifest}"),
            Self::Local { dir } => write!(f, "{}", dir.display()),
        }
    }
}

/// Where one file's bytes are read from.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    /// A URL answering `Range` requests.
    Remote(String),
    /// A local file.
    Local(PathBuf),
}

/// A source plus what is needed to reach it.
#[derive(Debug, Clone)]
pub(crate) struct Fetcher {
    pub(crate) source: Source,
    pub(crate) client: reqwest::Client,
    pub(crate) token: Option<String>,
    pub(crate) gcs_api: String,
}

#[derive(Deserialize)]
struct GcsPage {
    #[serde(default)]
    items: Vec<GcsObject>,
    #[serde(rename = "nextPageToken")]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
struct GcsObject {
    name: String,
    /// The JSON API sends sizes as decimal strings.
    size: String,
    #[serde(default)]
    metadata: Option<std::collections::HashMap<String, String>>,
    /// Object version; changes whenever the object is overwritten.
    #[serde(default)]
    generation: Option<String>,
    /// Base64 MD5 of the content (absent for composite objects).
    #[serde(default, rename = "md5Hash")]
    md5_hash: Option<String>,
    /// HTTP entity tag of the object.
    #[serde(default)]
    etag: Option<String>,
}

impl GcsObject {
    /// The object's version: generation, else MD5, else ETag.
    fn fingerprint(&self) -> Option<String> {
        if let Some(g) = &self.generation {
            return Some(format!("gcs-generation:{g}"));
        }
        if let Some(m) = &self.md5_hash {
            return Some(format!("gcs-md5:{m}"));
        }
        self.etag.as_ref().map(|e| format!("gcs-etag:{e}"))
    }
}

impl Fetcher {
    /// A GET with the bearer token when the source is a bucket.
    pub(crate) fn get(&self, url: &str) -> reqwest::RequestBuilder {
        let req = self.client.get(url);
        match (&self.token, self.source.is_gcs()) {
            (Some(t), true) => req.bearer_auth(t),
            _ => req,
        }
    }

    /// Where `entry`'s bytes are read from.
    pub(crate) fn location(&self, entry: &FileEntry) -> Result<Location, StageError> {
        match &self.source {
            Source::Gcs { bucket, prefix } => {
                let name = format!("{prefix}{}", entry.path);
                Ok(Location::Remote(format!(
                    "{}/storage/v1/b/{}/o/{}?alt=media",
                    self.gcs_api.trim_end_matches('/'),
                    encode(bucket),
                    encode(&name)
                )))
            }
            Source::Http { manifest } => manifest
                .join(&entry.path)
                .map(|u| Location::Remote(u.to_string()))
                .map_err(|e| StageError::Manifest {
                    origin: manifest.to_string(),
                    message: format!("`path` `{}` does not form a URL: {e}", entry.path),
                }),
            Source::Local { dir } => Ok(Location::Local(dir.join(&entry.path))),
        }
    }

    /// The files to stage, with sizes (and checksums where the source has them).
    pub(crate) async fn list(&self) -> Result<Manifest, StageError> {
        let origin = self.source.to_string();
        let manifest = match &self.source {
            Source::Gcs { bucket, prefix } => self.list_gcs(bucket, prefix).await?,
            Source::Http { manifest } => {
                let url = manifest.to_string();
                let body = self.get_ok(&url).await?;
                let mut m = Manifest::parse(&url, &body)?;
                self.http_fingerprints(&mut m).await;
                m
            }
            Source::Local { dir } => {
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || list_local(&dir))
                    .await
                    .map_err(|e| StageError::Task(e.to_string()))??
            }
        };
        manifest.check(&origin)?;
        Ok(manifest)
    }

    /// For manifest entries without `sha256`, ask the server (`HEAD`) for the
    /// file's `ETag`, else its `Last-Modified`, as the fingerprint. A server that
    /// answers neither leaves the entry without one (size-only resume).
    async fn http_fingerprints(&self, manifest: &mut Manifest) {
        use futures_util::stream::{self, StreamExt};
        let heads = manifest
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.sha256.is_none())
            .filter_map(|(i, f)| match self.location(f) {
                Ok(Location::Remote(url)) => Some((i, url)),
                _ => None,
            })
            .collect::<Vec<_>>();
        let found: Vec<(usize, Option<String>)> = stream::iter(heads)
            .map(|(i, url)| async move { (i, self.head_fingerprint(&url).await) })
            .buffer_unordered(16)
            .collect()
            .await;
        for (i, fp) in found {
            if let Some(f) = manifest.files.get_mut(i) {
                f.fingerprint = fp;
            }
        }
    }

    /// `http-etag:…` or `http-last-modified:…` of `url`, from a `HEAD` request.
    async fn head_fingerprint(&self, url: &str) -> Option<String> {
        let resp = match self.client.head(url).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                tracing::warn!(
                    url,
                    status = r.status().as_u16(),
                    "HEAD failed; resume compares sizes only"
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(url, error = %e, "HEAD failed; resume compares sizes only");
                return None;
            }
        };
        let h = resp.headers();
        let get = |name: reqwest::header::HeaderName| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        if let Some(etag) = get(reqwest::header::ETAG) {
            return Some(format!("http-etag:{etag}"));
        }
        get(reqwest::header::LAST_MODIFIED).map(|lm| format!("http-last-modified:{lm}"))
    }

    async fn get_ok(&self, url: &str) -> Result<Vec<u8>, StageError> {
        let resp = self
            .get(url)
            .send()
            .await
            .map_err(|e| StageError::from_reqwest(url, &e))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| StageError::from_reqwest(url, &e))?;
        if !status.is_success() {
            return Err(StageError::status(
                url,
                status.as_u16(),
                &String::from_utf8_lossy(&body),
            ));
        }
        Ok(body.to_vec())
    }

    async fn list_gcs(&self, bucket: &str, prefix: &str) -> Result<Manifest, StageError> {
        let base = format!(
            "{}/storage/v1/b/{}/o",
            self.gcs_api.trim_end_matches('/'),
            encode(bucket)
        );
        let mut files = Vec::new();
        let mut page_token: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let mut url = Url::parse(&base).map_err(|e| StageError::Config {
                field: "gcs_api",
                expected: "an http(s) base URL",
                given: format!("{} ({e})", self.gcs_api),
            })?;
            url.query_pairs_mut().append_pair("prefix", prefix);
            if let Some(t) = &page_token {
                url.query_pairs_mut().append_pair("pageToken", t);
            }
            let url = url.to_string();
            let body = self.get_ok(&url).await?;
            let page: GcsPage =
                serde_json::from_slice(&body).map_err(|e| StageError::Manifest {
                    origin: url.clone(),
                    message: e.to_string(),
                })?;
            for o in page.items {
                let Some(rel) = o.name.strip_prefix(prefix) else {
                    continue;
                };
                // Folder placeholders ("dgemma/") carry no data.
                if rel.is_empty() || rel.ends_with('/') {
                    continue;
                }
                let size = o.size.parse().map_err(|_| StageError::Manifest {
                    origin: url.clone(),
                    message: format!(
                        "`size` of `{}` must be a byte count. Given: `{}`",
                        o.name, o.size
                    ),
                })?;
                let fingerprint = o.fingerprint();
                let sha256 = o
                    .metadata
                    .and_then(|m| m.get("sha256").map(|s| s.to_lowercase()));
                files.push(FileEntry {
                    path: rel.to_string(),
                    size,
                    sha256,
                    fingerprint,
                });
            }
            page_token = page.next_page_token;
            if page_token.is_none() {
                return Ok(Manifest { files });
            }
        }
        Err(StageError::Manifest {
            origin: format!("gs://{bucket}/{prefix}"),
            message: format!("more than {MAX_LIST_PAGES} listing pages"),
        })
    }
}

/// Every regular, non-hidden file under `dir`, sorted by path.
fn list_local(dir: &Path) -> Result<Manifest, StageError> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| StageError::io("list", &d, e))?;
        for ent in rd {
            let ent = ent.map_err(|e| StageError::io("list", &d, e))?;
            let path = ent.path();
            if ent.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let meta = std::fs::metadata(&path).map_err(|e| StageError::io("stat", &path, e))?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let rel = path.strip_prefix(dir).map_err(|_| {
                    StageError::Task(format!("{} escapes {}", path.display(), dir.display()))
                })?;
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                files.push(FileEntry {
                    path: rel.join("/"),
                    size: meta.len(),
                    sha256: None,
                    fingerprint: Some(local_fingerprint(&meta)),
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Manifest { files })
}

/// `local:SIZE:MTIME_NS` of a local file (the modification time in nanoseconds
/// since the Unix epoch; `?` where the platform has none).
pub(crate) fn local_fingerprint(meta: &std::fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(|| "?".to_string(), |d| d.as_nanos().to_string());
    format!("local:{}:{mtime}", meta.len())
}

/// Percent-encode a path segment (RFC 3986 unreserved characters stay).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sources() {
        assert_eq!(
            Source::parse("gs://dgem-weights/dgemma").expect("gs"),
            Source::Gcs {
                bucket: "dgem-weights".into(),
                prefix: "dgemma/".into()
            }
        );
        assert_eq!(
            Source::parse("gs://b").expect("gs"),
            Source::Gcs {
                bucket: "b".into(),
                prefix: String::new()
            }
        );
        let Source::Http { manifest } = Source::parse("https://h.example/w").expect("http") else {
            panic!("not http");
        };
        assert_eq!(manifest.as_str(), "https://h.example/w/dgem-manifest.json");
        let Source::Http { manifest } = Source::parse("http://h/x/m.json").expect("http") else {
            panic!("not http");
        };
        assert_eq!(manifest.as_str(), "http://h/x/m.json");
        let e = Source::parse("gs://Bad Bucket").expect_err("bad");
        assert_eq!(
            e.to_string(),
            "`source` must be gs://BUCKET[/PREFIX], an http(s):// URL or an existing local directory. Given: `gs://Bad Bucket`"
        );
        assert!(Source::parse("/definitely/not/here").is_err());
    }

    #[test]
    fn gcs_listing_records_generation_as_fingerprint() {
        let o: GcsObject = serde_json::from_str(
            r#"{"name":"d/config.json","size":"23","generation":"1732900000123456",
                "md5Hash":"q1w2e3==","etag":"CJDa"}"#,
        )
        .expect("object");
        assert_eq!(
            o.fingerprint().as_deref(),
            Some("gcs-generation:1732900000123456")
        );
        let o: GcsObject = serde_json::from_str(r#"{"name":"x","size":"1","md5Hash":"q1w2e3=="}"#)
            .expect("object");
        assert_eq!(o.fingerprint().as_deref(), Some("gcs-md5:q1w2e3=="));
        let o: GcsObject = serde_json::from_str(r#"{"name":"x","size":"1"}"#).expect("object");
        assert_eq!(o.fingerprint(), None);
    }

    #[test]
    fn encodes_object_names() {
        assert_eq!(
            encode("dgemma/model 1.safetensors"),
            "dgemma%2Fmodel%201.safetensors"
        );
    }
}
