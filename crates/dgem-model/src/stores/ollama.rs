//! `ollama:NAME[:TAG]`: the weights an `ollama pull` left on disk.
//!
//! ollama keeps, under its models directory (`$OLLAMA_MODELS`, default
//! `~/.ollama/models`):
//!
//! - `manifests/HOST/NAMESPACE/NAME/TAG`: an OCI-style JSON manifest whose
//!   `layers[]` carry `mediaType`, `digest` (`sha256:<hex>`) and `size`; the
//!   weights are the layer of type `application/vnd.ollama.image.model`. A
//!   bare `NAME` is `registry.ollama.ai/library/NAME`, `NAMESPACE/NAME` is on
//!   `registry.ollama.ai`, and the default tag is `latest`;
//! - `blobs/sha256-<hex>`: the layers' bytes (the weights are a GGUF file).
//!
//! The blob's size is checked against the manifest; its sha256 is not
//! recomputed (the file is large and ollama checked it when pulling).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{bracket, id_from, names_in, refused, Resolved};
use crate::error::ModelError;

/// The media type of the layer that holds the model weights.
pub const MODEL_MEDIA_TYPE: &str = "application/vnd.ollama.image.model";
/// The registry a name without a host is on.
pub const DEFAULT_HOST: &str = "registry.ollama.ai";
/// The namespace of a name without one.
pub const DEFAULT_NAMESPACE: &str = "library";
/// The tag of a name without one.
pub const DEFAULT_TAG: &str = "latest";

#[derive(Debug, Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Debug, Deserialize)]
struct Layer {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    #[serde(default)]
    digest: String,
    #[serde(default)]
    size: Option<u64>,
}

/// A parsed ollama model name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OllamaName {
    /// Registry host, e.g. `registry.ollama.ai` or `hf.co`.
    pub host: String,
    /// Namespace, e.g. `library`.
    pub namespace: String,
    /// Model name, e.g. `qwen2.5`.
    pub name: String,
    /// Tag, e.g. `7b`.
    pub tag: String,
}

impl OllamaName {
    /// Parse `NAME[:TAG]`, `NAMESPACE/NAME[:TAG]` or
    /// `HOST/NAMESPACE/NAME[:TAG]` (the part after `ollama:`).
    pub fn parse(s: &str) -> Option<Self> {
        let (path, tag) = match s.rsplit_once(':') {
            Some((p, t)) if !t.contains('/') => (p, t),
            _ => (s, DEFAULT_TAG),
        };
        let ok = |p: &str, extra: &[char]| {
            !p.is_empty()
                && p != "."
                && p != ".."
                && p.chars().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') || extra.contains(&c)
                })
        };
        let parts: Vec<&str> = path.split('/').collect();
        let (host, namespace, name) = match parts.as_slice() {
            [n] => (DEFAULT_HOST, DEFAULT_NAMESPACE, *n),
            [ns, n] => (DEFAULT_HOST, *ns, *n),
            [h, ns, n] => (*h, *ns, *n),
            _ => return None,
        };
        (ok(host, &[':']) && ok(namespace, &[]) && ok(name, &[]) && ok(tag, &[])).then(|| Self {
            host: host.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            tag: tag.to_owned(),
        })
    }

    /// The name as ollama shows it: `NAME:TAG`, `NAMESPACE/NAME:TAG` or
    /// `HOST/NAMESPACE/NAME:TAG`.
    pub fn display(&self) -> String {
        match (
            self.host == DEFAULT_HOST,
            self.namespace == DEFAULT_NAMESPACE,
        ) {
            (true, true) => format!("{}:{}", self.name, self.tag),
            (true, false) => format!("{}/{}:{}", self.namespace, self.name, self.tag),
            _ => format!(
                "{}/{}/{}:{}",
                self.host, self.namespace, self.name, self.tag
            ),
        }
    }

    /// The manifest's path under the models directory `dir`.
    pub fn manifest(&self, dir: &Path) -> PathBuf {
        dir.join("manifests")
            .join(&self.host)
            .join(&self.namespace)
            .join(&self.name)
            .join(&self.tag)
    }
}

/// The weights blob a manifest names and the size it declares.
pub(crate) fn model_blob(dir: &Path, manifest: &Path) -> Result<(PathBuf, Option<u64>), String> {
    let text = std::fs::read_to_string(manifest)
        .map_err(|e| format!("cannot read the manifest {}: {e}", manifest.display()))?;
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| format!("the manifest {} is not valid JSON: {e}", manifest.display()))?;
    let Some(layer) = m.layers.iter().find(|l| l.media_type == MODEL_MEDIA_TYPE) else {
        let types: Vec<String> = m.layers.iter().map(|l| l.media_type.clone()).collect();
        return Err(format!(
            "the manifest {} has no `{MODEL_MEDIA_TYPE}` layer (its layers: {})",
            manifest.display(),
            bracket(&types)
        ));
    };
    let hex = layer
        .digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| {
            format!(
                "the manifest {} has a model layer with digest `{}`; expected `sha256:<64 hex digits>`",
                manifest.display(),
                layer.digest
            )
        })?;
    Ok((dir.join("blobs").join(format!("sha256-{hex}")), layer.size))
}

/// Resolve `reference` (`ollama:` + `rest`) in the models directory `dir`.
pub(crate) fn resolve(dir: &Path, reference: &str, rest: &str) -> Result<Resolved, ModelError> {
    let name = OllamaName::parse(rest).ok_or_else(|| {
        refused(
            reference,
            "an ollama model is `ollama:NAME[:TAG]`, `ollama:NAMESPACE/NAME[:TAG]` or \
             `ollama:HOST/NAMESPACE/NAME[:TAG]`, e.g. `ollama:gemma3:1b`",
        )
    })?;
    if !dir.join("manifests").is_dir() {
        return Err(refused(
            reference,
            format!(
                "no ollama models directory at {} (no `manifests/` there); set OLLAMA_MODELS or \
                 DGEM_OLLAMA_DIR to the directory `ollama` keeps its models in",
                dir.display()
            ),
        ));
    }
    let manifest = name.manifest(dir);
    if !manifest.is_file() {
        let model_dir = manifest.parent().unwrap_or(dir);
        let detail = if model_dir.is_dir() {
            format!(
                "no manifest at {} (tags there: {})",
                manifest.display(),
                bracket(&names_in(model_dir, Path::is_file))
            )
        } else {
            let ns_dir = model_dir.parent().unwrap_or(dir);
            format!(
                "no manifest at {} (models in {}: {}); `ollama pull {}` fetches it",
                manifest.display(),
                ns_dir.display(),
                bracket(&names_in(ns_dir, Path::is_dir)),
                name.display()
            )
        };
        return Err(refused(reference, detail));
    }
    let (blob, size) = model_blob(dir, &manifest).map_err(|d| refused(reference, d))?;
    let meta = std::fs::metadata(&blob).map_err(|e| {
        refused(
            reference,
            format!(
                "the manifest {} names the blob {}, which cannot be read ({e}); `ollama pull {}` fetches it again",
                manifest.display(),
                blob.display(),
                name.display()
            ),
        )
    })?;
    if let Some(expected) = size {
        if meta.len() != expected {
            return Err(refused(
                reference,
                format!(
                    "the blob {} has {} bytes; the manifest {} says {expected} (an interrupted pull? `ollama pull {}` fetches it again)",
                    blob.display(),
                    meta.len(),
                    manifest.display(),
                    name.display()
                ),
            ));
        }
    }
    Ok(Resolved {
        reference: reference.to_owned(),
        path: blob,
        id: id_from(&format!("{}-{}", name.name, name.tag)),
    })
}

/// Every manifest under `dir/manifests` (`HOST/NAMESPACE/NAME/TAG`) with its
/// parsed name, sorted.
pub(crate) fn manifests(dir: &Path) -> Vec<(OllamaName, PathBuf)> {
    let root = dir.join("manifests");
    let mut out = Vec::new();
    for host in names_in(&root, Path::is_dir) {
        let h = root.join(&host);
        for ns in names_in(&h, Path::is_dir) {
            let n = h.join(&ns);
            for model in names_in(&n, Path::is_dir) {
                let m = n.join(&model);
                for tag in names_in(&m, Path::is_file) {
                    out.push((
                        OllamaName {
                            host: host.clone(),
                            namespace: ns.clone(),
                            name: model.clone(),
                            tag: tag.clone(),
                        },
                        m.join(&tag),
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_with_default_host_namespace_and_tag() {
        let n = OllamaName::parse("qwen2.5:7b").expect("parses");
        assert_eq!(
            (
                n.host.as_str(),
                n.namespace.as_str(),
                n.name.as_str(),
                n.tag.as_str()
            ),
            (DEFAULT_HOST, "library", "qwen2.5", "7b")
        );
        assert_eq!(n.display(), "qwen2.5:7b");
        let n = OllamaName::parse("gemma3").expect("parses");
        assert_eq!(n.tag, "latest");
        let n = OllamaName::parse("me/mine").expect("parses");
        assert_eq!(n.display(), "me/mine:latest");
        let n = OllamaName::parse("hf.co/bartowski/m-GGUF:Q4_K_M").expect("parses");
        assert_eq!(n.host, "hf.co");
        assert_eq!(n.display(), "hf.co/bartowski/m-GGUF:Q4_K_M");
        for bad in ["", "a/b/c/d", "../x", "a:", "a b", "x/..:t"] {
            assert_eq!(OllamaName::parse(bad), None, "{bad}");
        }
    }
}
