//! Minimal GGUF header reader: enough to tell what model a file holds.
//!
//! Layout (little-endian, GGUF v2/v3): magic `GGUF`, `u32` version, `u64`
//! tensor count, `u64` metadata key-value count, then the key-value pairs.
//! A key is a string (`u64` length + UTF-8 bytes); a value is a `u32` type tag
//! followed by the value: 0 `u8`, 1 `i8`, 2 `u16`, 3 `i16`, 4 `u32`, 5 `i32`,
//! 6 `f32`, 7 `bool`, 8 string, 9 array (`u32` element type, `u64` count,
//! elements), 10 `u64`, 11 `i64`, 12 `f64`.
//!
//! The reader stops as soon as it has every key it wants (the vocabulary comes
//! after the architecture's keys in every converter's output), skips values it
//! does not need without allocating, and never allocates from a length it has
//! not bounded.
//!
//! [`validate_text_model`] is the check `--model` makes before llama.cpp
//! loads a file: a text-generating model with a vocabulary, of any
//! architecture ([`GgufInfo::text_model_problem`]).

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read, Seek};
use std::path::{Path, PathBuf};

use crate::error::ModelError;

/// Longest key accepted (the GGUF spec caps keys at 65,535 bytes).
const MAX_KEY_LEN: u64 = 65_535;
/// Longest string value that is read into memory.
const MAX_STRING_LEN: u64 = 64 << 20;
/// Deepest array nesting accepted.
const MAX_ARRAY_DEPTH: u32 = 4;

const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;

/// What the header of a GGUF file says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GgufInfo {
    /// GGUF format version (2 or 3).
    pub version: u32,
    /// Number of tensors.
    pub tensor_count: u64,
    /// Number of metadata key-value pairs.
    pub kv_count: u64,
    /// `general.architecture`, e.g. `gemma3`.
    pub architecture: Option<String>,
    /// `general.name`, e.g. `Gemma 3 270m`.
    pub name: Option<String>,
    /// `<architecture>.context_length`.
    pub context_length: Option<u64>,
    /// `<architecture>.block_count` (number of layers).
    pub block_count: Option<u64>,
    /// `<architecture>.embedding_length` (hidden size).
    pub embedding_length: Option<u64>,
    /// `general.file_type`: llama.cpp's `llama_ftype`, the file's
    /// predominant quantization (see [`GgufInfo::quantization`]).
    pub file_type: Option<u64>,
    /// `general.type`: `model` (or absent) for a model, `mmproj` for a
    /// vision projector, `adapter` for a LoRA adapter.
    pub file_kind: Option<String>,
    /// Number of entries of `tokenizer.ggml.tokens` (the vocabulary size);
    /// `None` when the file has no vocabulary.
    pub vocab_size: Option<u64>,
    /// `<architecture>.attention.causal`: `false` for an encoder (BERT-style
    /// embedding models); absent for ordinary causal LMs.
    pub causal: Option<bool>,
    /// `<architecture>.pooling_type`: set (non-zero) by embedding models.
    pub pooling_type: Option<u64>,
}

/// Architectures llama.cpp loads that do not generate text from a prompt:
/// vision/audio projectors, encoders and embedding models, audio decoders.
/// Their GGUFs often carry no flag of their own saying so.
const NON_TEXT_ARCHITECTURES: &[(&str, &str)] = &[
    ("clip", "a vision/audio projector (mmproj) file"),
    ("bert", "an encoder (embedding) model"),
    ("nomic-bert", "an encoder (embedding) model"),
    ("nomic-bert-moe", "an encoder (embedding) model"),
    ("neo-bert", "an encoder (embedding) model"),
    ("modern-bert", "an encoder (embedding) model"),
    ("eurobert", "an encoder (embedding) model"),
    ("jina-bert-v2", "an encoder (embedding) model"),
    ("jina-bert-v3", "an encoder (embedding) model"),
    ("gemma-embedding", "an embedding model"),
    (
        "t5",
        "an encoder-decoder model (dgem reads decoder-only models)",
    ),
    ("t5encoder", "an encoder (embedding) model"),
    ("wavtokenizer-dec", "an audio decoder"),
];

impl GgufInfo {
    /// Whether the model is of the Gemma 3 family (`general.architecture` = `gemma3`).
    pub fn is_gemma3(&self) -> bool {
        self.architecture.as_deref() == Some("gemma3")
    }

    /// The quantization `general.file_type` names, e.g. `Q4_K_M`; `None`
    /// when the key is absent, `Some("type N")` for a value this reader does
    /// not know.
    pub fn quantization(&self) -> Option<String> {
        self.file_type
            .map(|t| file_type_name(t).map_or_else(|| format!("type {t}"), str::to_owned))
    }

    /// Why llama.cpp cannot read this file as a text-generating model with a
    /// vocabulary, in words that complete "the file is …" (e.g. `a vision/audio
    /// projector (mmproj) file`); `None` when it can (any architecture).
    pub fn text_model_problem(&self) -> Option<String> {
        let Some(arch) = self.architecture.as_deref() else {
            return Some("missing `general.architecture`".into());
        };
        if let Some((_, what)) = NON_TEXT_ARCHITECTURES.iter().find(|(a, _)| *a == arch) {
            return Some((*what).into());
        }
        match self.file_kind.as_deref() {
            Some("mmproj") => return Some("a vision/audio projector (mmproj) file".into()),
            Some("adapter") => return Some("a LoRA adapter, not a model".into()),
            _ => {}
        }
        if self.causal == Some(false) {
            return Some(format!(
                "an encoder (`{arch}.attention.causal` = false: an embedding model)"
            ));
        }
        if self.pooling_type.is_some_and(|p| p != 0) {
            return Some(format!("an embedding model (`{arch}.pooling_type` is set)"));
        }
        if self.vocab_size.is_none_or(|n| n == 0) {
            return Some("without a vocabulary (no `tokenizer.ggml.tokens`)".into());
        }
        None
    }

    fn has_everything(&self) -> bool {
        self.file_type.is_some()
            && self.architecture.is_some()
            && self.name.is_some()
            && self.context_length.is_some()
            && self.block_count.is_some()
            && self.embedding_length.is_some()
            && self.vocab_size.is_some()
    }
}

/// The name of llama.cpp's `llama_ftype` value `t` (`general.file_type`),
/// e.g. 15 → `Q4_K_M`, as in `llama.h`.
pub fn file_type_name(t: u64) -> Option<&'static str> {
    const NAMES: &[(u64, &str)] = &[
        (0, "F32"),
        (1, "F16"),
        (2, "Q4_0"),
        (3, "Q4_1"),
        (7, "Q8_0"),
        (8, "Q5_0"),
        (9, "Q5_1"),
        (10, "Q2_K"),
        (11, "Q3_K_S"),
        (12, "Q3_K_M"),
        (13, "Q3_K_L"),
        (14, "Q4_K_S"),
        (15, "Q4_K_M"),
        (16, "Q5_K_S"),
        (17, "Q5_K_M"),
        (18, "Q6_K"),
        (19, "IQ2_XXS"),
        (20, "IQ2_XS"),
        (21, "Q2_K_S"),
        (22, "IQ3_XS"),
        (23, "IQ3_XXS"),
        (24, "IQ1_S"),
        (25, "IQ4_NL"),
        (26, "IQ3_S"),
        (27, "IQ3_M"),
        (28, "IQ2_S"),
        (29, "IQ2_M"),
        (30, "IQ4_XS"),
        (31, "IQ1_M"),
        (32, "BF16"),
        (36, "TQ1_0"),
        (37, "TQ2_0"),
        (38, "MXFP4_MOE"),
    ];
    NAMES.iter().find(|(n, _)| *n == t).map(|(_, name)| *name)
}

/// A decoded metadata value, kept only for the types we care about.
enum Value {
    Str(String),
    Int(u64),
    /// An array's element count (its elements skipped).
    Len(u64),
    Other,
}

/// Read the GGUF header of `path`.
pub fn inspect_gguf(path: &Path) -> Result<GgufInfo, ModelError> {
    let file = File::open(path).map_err(|e| ModelError::io("open", path, e))?;
    let mut reader = Reader {
        inner: BufReader::new(file),
        path,
    };
    reader.read_info()
}

/// Read the header of `path` and require a text-generating model with a
/// vocabulary, of any architecture ([`GgufInfo::text_model_problem`]).
///
/// Use this to validate `--model PATH` before handing it to an engine: a
/// projector, an embedding model or a file without a vocabulary is refused
/// here, naming what it is, instead of failing inside llama.cpp.
pub fn validate_text_model(path: &Path) -> Result<GgufInfo, ModelError> {
    let info = inspect_gguf(path)?;
    if let Some(problem) = info.text_model_problem() {
        return Err(ModelError::NotTextModel {
            path: path.to_path_buf(),
            architecture: info.architecture,
            problem,
        });
    }
    Ok(info)
}

struct Reader<'a, R> {
    inner: R,
    path: &'a Path,
}

impl<R: Read + Seek> Reader<'_, R> {
    fn malformed(&self, reason: impl Into<String>) -> ModelError {
        ModelError::MalformedGguf {
            path: PathBuf::from(self.path),
            reason: reason.into(),
        }
    }

    fn read_info(&mut self) -> Result<GgufInfo, ModelError> {
        let mut magic = Vec::with_capacity(4);
        (&mut self.inner)
            .take(4)
            .read_to_end(&mut magic)
            .map_err(|e| ModelError::io("read", self.path, e))?;
        if magic != b"GGUF" {
            return Err(ModelError::NotGguf {
                path: self.path.to_path_buf(),
                magic,
            });
        }
        let version = self.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(ModelError::UnsupportedGgufVersion {
                path: self.path.to_path_buf(),
                version,
            });
        }
        let mut info = GgufInfo {
            version,
            tensor_count: self.u64("tensor count")?,
            kv_count: self.u64("metadata count")?,
            ..GgufInfo::default()
        };
        for index in 0..info.kv_count {
            let key = self.string(MAX_KEY_LEN, &format!("key #{index}"))?;
            let ty = self.u32(&key)?;
            let wanted = is_wanted(&key, info.architecture.as_deref());
            let value = if key == VOCAB_KEY && ty == TYPE_ARRAY {
                self.array_len(&key)?
            } else if wanted {
                self.value(ty, &key)?
            } else {
                self.skip_value(ty, &key, 0)?;
                Value::Other
            };
            store(&mut info, &key, value);
            if info.has_everything() {
                break;
            }
        }
        Ok(info)
    }

    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<(), ModelError> {
        self.inner.read_exact(buf).map_err(|e| {
            if e.kind() == ErrorKind::UnexpectedEof {
                self.malformed(format!("file ends inside `{what}`"))
            } else {
                ModelError::io("read", self.path, e)
            }
        })
    }

    fn u32(&mut self, what: &str) -> Result<u32, ModelError> {
        let mut b = [0u8; 4];
        self.fill(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self, what: &str) -> Result<u64, ModelError> {
        let mut b = [0u8; 8];
        self.fill(&mut b, what)?;
        Ok(u64::from_le_bytes(b))
    }

    fn string(&mut self, max: u64, what: &str) -> Result<String, ModelError> {
        let len = self.u64(what)?;
        if len > max {
            return Err(self.malformed(format!(
                "string length of `{what}` must be at most {max}. Given: {len}"
            )));
        }
        let len = usize::try_from(len).map_err(|_| self.malformed("string too long"))?;
        let mut buf = vec![0u8; len];
        self.fill(&mut buf, what)?;
        String::from_utf8(buf).map_err(|_| self.malformed(format!("`{what}` is not UTF-8")))
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<(), ModelError> {
        let n = i64::try_from(n).map_err(|_| self.malformed(format!("`{what}` is too long")))?;
        self.inner
            .seek_relative(n)
            .map_err(|e| ModelError::io("seek in", self.path, e))
    }

    fn value(&mut self, ty: u32, key: &str) -> Result<Value, ModelError> {
        let mut buf = [0u8; 8];
        let value = match ty {
            0 | 7 => {
                self.fill(&mut buf[..1], key)?;
                Value::Int(u64::from(buf[0]))
            }
            2 => {
                self.fill(&mut buf[..2], key)?;
                Value::Int(u64::from(u16::from_le_bytes([buf[0], buf[1]])))
            }
            4 => Value::Int(u64::from(self.u32(key)?)),
            5 => {
                let v = i32::from_le_bytes(self.u32(key)?.to_le_bytes());
                u64::try_from(v).map_or(Value::Other, Value::Int)
            }
            10 => Value::Int(self.u64(key)?),
            11 => {
                let v = i64::from_le_bytes(self.u64(key)?.to_le_bytes());
                u64::try_from(v).map_or(Value::Other, Value::Int)
            }
            TYPE_STRING => Value::Str(self.string(MAX_STRING_LEN, key)?),
            _ => {
                self.skip_value(ty, key, 0)?;
                Value::Other
            }
        };
        Ok(value)
    }

    /// An array's element count, its elements skipped.
    fn array_len(&mut self, key: &str) -> Result<Value, ModelError> {
        let elem = self.u32(key)?;
        let count = self.u64(key)?;
        self.skip_elements(elem, count, key, 1)?;
        Ok(Value::Len(count))
    }

    fn skip_elements(
        &mut self,
        elem: u32,
        count: u64,
        key: &str,
        depth: u32,
    ) -> Result<(), ModelError> {
        if let Some(size) = fixed_size(elem) {
            let total = size
                .checked_mul(count)
                .ok_or_else(|| self.malformed(format!("array `{key}` is too long")))?;
            return self.skip(total, key);
        }
        for _ in 0..count {
            self.skip_value(elem, key, depth)?;
        }
        Ok(())
    }

    fn skip_value(&mut self, ty: u32, key: &str, depth: u32) -> Result<(), ModelError> {
        if let Some(size) = fixed_size(ty) {
            return self.skip(size, key);
        }
        match ty {
            TYPE_STRING => {
                let len = self.u64(key)?;
                self.skip(len, key)
            }
            TYPE_ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.malformed(format!(
                        "arrays in `{key}` nest deeper than {MAX_ARRAY_DEPTH}"
                    )));
                }
                let elem = self.u32(key)?;
                let count = self.u64(key)?;
                self.skip_elements(elem, count, key, depth + 1)
            }
            other => Err(self.malformed(format!(
                "value type of `{key}` must be in 0..=12. Given: {other}"
            ))),
        }
    }
}

/// Byte size of a fixed-size GGUF value type.
fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// The vocabulary: one string per token.
const VOCAB_KEY: &str = "tokenizer.ggml.tokens";

/// Whether `key` is one of the keys [`GgufInfo`] records.
fn is_wanted(key: &str, arch: Option<&str>) -> bool {
    if matches!(
        key,
        "general.architecture" | "general.name" | "general.file_type" | "general.type" | VOCAB_KEY
    ) {
        return true;
    }
    // Keys of the form `<arch>.<field>`; before the architecture is known, accept
    // any prefix and check it in `store`.
    match key.split_once('.') {
        Some((prefix, field)) => {
            arch.is_none_or(|a| a == prefix)
                && matches!(
                    field,
                    "context_length"
                        | "block_count"
                        | "embedding_length"
                        | "attention.causal"
                        | "pooling_type"
                )
        }
        None => false,
    }
}

fn store(info: &mut GgufInfo, key: &str, value: Value) {
    match (key, value) {
        ("general.architecture", Value::Str(s)) => info.architecture = Some(s),
        ("general.name", Value::Str(s)) => info.name = Some(s),
        ("general.file_type", Value::Int(n)) => info.file_type = Some(n),
        ("general.type", Value::Str(s)) => info.file_kind = Some(s),
        (VOCAB_KEY, Value::Len(n)) => info.vocab_size = Some(n),
        (key, Value::Int(n)) => {
            let Some((prefix, field)) = key.split_once('.') else {
                return;
            };
            if info.architecture.as_deref().is_some_and(|a| a != prefix) {
                return;
            }
            match field {
                "context_length" => info.context_length = Some(n),
                "block_count" => info.block_count = Some(n),
                "embedding_length" => info.embedding_length = Some(n),
                "attention.causal" => info.causal = Some(n != 0),
                "pooling_type" => info.pooling_type = Some(n),
                _ => {}
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_sizes_follow_the_spec() {
        let sizes: Vec<Option<u64>> = (0..=13).map(fixed_size).collect();
        assert_eq!(
            sizes,
            [
                Some(1),
                Some(1),
                Some(2),
                Some(2),
                Some(4),
                Some(4),
                Some(4),
                Some(1),
                None,
                None,
                Some(8),
                Some(8),
                Some(8),
                None
            ]
        );
    }

    #[test]
    fn wanted_keys_respect_the_architecture() {
        assert!(is_wanted("general.architecture", None));
        assert!(is_wanted("gemma3.block_count", None));
        assert!(is_wanted("gemma3.block_count", Some("gemma3")));
        assert!(!is_wanted("llama.block_count", Some("gemma3")));
        assert!(is_wanted("tokenizer.ggml.tokens", Some("gemma3")));
        assert!(!is_wanted("tokenizer.ggml.scores", Some("gemma3")));
        assert!(is_wanted("general.file_type", Some("gemma3")));
        assert!(is_wanted("bert.attention.causal", Some("bert")));
        assert!(is_wanted("bert.pooling_type", None));
    }

    #[test]
    fn file_types_are_named_as_llama_cpp_names_them() {
        let info = |t| GgufInfo {
            file_type: Some(t),
            ..GgufInfo::default()
        };
        assert_eq!(info(15).quantization().as_deref(), Some("Q4_K_M"));
        assert_eq!(info(7).quantization().as_deref(), Some("Q8_0"));
        assert_eq!(info(999).quantization().as_deref(), Some("type 999"));
        assert_eq!(GgufInfo::default().quantization(), None);
    }
}
