//! Tests of the GGUF header reader on handcrafted buffers and, when
//! `DGEM_TEST_MODEL` points at it, on the real default model.

use std::path::Path;

use dgem_model::{inspect_gguf, validate_gemma3, verify, ModelError, NoProgress};

/// Builds a GGUF v3 byte buffer.
struct Gguf {
    kvs: Vec<u8>,
    count: u64,
    version: u32,
}

impl Gguf {
    fn new() -> Self {
        Self {
            kvs: Vec::new(),
            count: 0,
            version: 3,
        }
    }

    fn raw_string(buf: &mut Vec<u8>, s: &str) {
        buf.extend((s.len() as u64).to_le_bytes());
        buf.extend(s.as_bytes());
    }

    fn key(&mut self, key: &str, ty: u32) -> &mut Vec<u8> {
        self.count += 1;
        Self::raw_string(&mut self.kvs, key);
        self.kvs.extend(ty.to_le_bytes());
        &mut self.kvs
    }

    fn string(mut self, key: &str, value: &str) -> Self {
        let buf = self.key(key, 8);
        Self::raw_string(buf, value);
        self
    }

    fn u32(mut self, key: &str, value: u32) -> Self {
        self.key(key, 4).extend(value.to_le_bytes());
        self
    }

    fn u64(mut self, key: &str, value: u64) -> Self {
        self.key(key, 10).extend(value.to_le_bytes());
        self
    }

    fn f32(mut self, key: &str, value: f32) -> Self {
        self.key(key, 6).extend(value.to_le_bytes());
        self
    }

    fn string_array(mut self, key: &str, items: &[&str]) -> Self {
        let buf = self.key(key, 9);
        buf.extend(8u32.to_le_bytes());
        buf.extend((items.len() as u64).to_le_bytes());
        for item in items {
            Self::raw_string(buf, item);
        }
        self
    }

    fn f32_array(mut self, key: &str, items: &[f32]) -> Self {
        let buf = self.key(key, 9);
        buf.extend(6u32.to_le_bytes());
        buf.extend((items.len() as u64).to_le_bytes());
        for item in items {
            buf.extend(item.to_le_bytes());
        }
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend(7u64.to_le_bytes());
        out.extend(self.count.to_le_bytes());
        out.extend(&self.kvs);
        out
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}

#[test]
fn reads_header_and_metadata_skipping_arrays() -> Result<(), ModelError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = Gguf::new()
        .string("general.architecture", "gemma3")
        .f32("general.quantization_version", 2.0)
        .string_array("tokenizer.ggml.tokens", &["<pad>", "<eos>", "hello"])
        .f32_array("tokenizer.ggml.scores", &[0.0, 1.0, 2.0])
        .string("general.name", "Tiny \"Gemma\"")
        .u32("gemma3.context_length", 32_768)
        .u32("gemma3.block_count", 18)
        .u64("gemma3.embedding_length", 640)
        .bytes();
    let path = write(dir.path(), "tiny.gguf", &bytes);
    let info = inspect_gguf(&path)?;
    assert_eq!(info.version, 3);
    assert_eq!(info.tensor_count, 7);
    assert_eq!(info.kv_count, 8);
    assert_eq!(info.architecture.as_deref(), Some("gemma3"));
    assert_eq!(info.name.as_deref(), Some("Tiny \"Gemma\""));
    assert_eq!(info.context_length, Some(32_768));
    assert_eq!(info.block_count, Some(18));
    assert_eq!(info.embedding_length, Some(640));
    assert!(info.is_gemma3());
    assert!(validate_gemma3(&path).is_ok());
    Ok(())
}

#[test]
fn stops_once_every_key_is_found() -> Result<(), ModelError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bytes = Gguf::new()
        .string("general.architecture", "gemma3")
        .string("general.name", "n")
        .u32("general.file_type", 15)
        .u32("gemma3.context_length", 1)
        .u32("gemma3.block_count", 2)
        .u32("gemma3.embedding_length", 3)
        .bytes();
    // Claim more pairs than present: the reader must not need them.
    bytes[16..24].copy_from_slice(&100u64.to_le_bytes());
    let path = write(dir.path(), "early.gguf", &bytes);
    let info = inspect_gguf(&path)?;
    assert_eq!(info.kv_count, 100);
    assert_eq!(info.embedding_length, Some(3));
    assert_eq!(info.quantization().as_deref(), Some("Q4_K_M"));
    Ok(())
}

#[test]
fn other_architecture_is_rejected_by_validate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = Gguf::new().string("general.architecture", "llama").bytes();
    let path = write(dir.path(), "llama.gguf", &bytes);
    let err = validate_gemma3(&path).expect_err("llama is not gemma3");
    assert!(matches!(
        &err,
        ModelError::NotGemma3 { architecture: Some(a), .. } if a == "llama"
    ));
    assert!(err.to_string().contains("`gemma3`"), "{err}");
}

#[test]
fn missing_architecture_is_rejected_by_validate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "bare.gguf", &Gguf::new().bytes());
    let err = validate_gemma3(&path).expect_err("no architecture");
    assert!(err.to_string().contains("<missing>"), "{err}");
}

#[test]
fn non_gguf_file_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "model.safetensors", b"{\"__metadata__\": {}}");
    let err = inspect_gguf(&path).expect_err("not gguf");
    assert!(matches!(err, ModelError::NotGguf { .. }));
    assert!(err.to_string().contains("not a GGUF file"), "{err}");

    let empty = write(dir.path(), "empty.gguf", b"");
    assert!(matches!(
        inspect_gguf(&empty),
        Err(ModelError::NotGguf { magic, .. }) if magic.is_empty()
    ));
}

#[test]
fn unsupported_version_and_truncation_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut g = Gguf::new().string("general.architecture", "gemma3");
    g.version = 1;
    let path = write(dir.path(), "v1.gguf", &g.bytes());
    assert!(matches!(
        inspect_gguf(&path),
        Err(ModelError::UnsupportedGgufVersion { version: 1, .. })
    ));

    let full = Gguf::new().string("general.architecture", "gemma3").bytes();
    let path = write(dir.path(), "cut.gguf", &full[..full.len() - 3]);
    let err = inspect_gguf(&path).expect_err("truncated");
    assert!(matches!(err, ModelError::MalformedGguf { .. }), "{err}");
}

#[test]
fn huge_lengths_are_refused_without_allocating() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(u64::MAX.to_le_bytes()); // key length
    let path = write(dir.path(), "huge.gguf", &bytes);
    let err = inspect_gguf(&path).expect_err("huge key");
    assert!(err.to_string().contains("at most 65535"), "{err}");

    // A wanted string value with an absurd length.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(20u64.to_le_bytes());
    bytes.extend(b"general.architecture");
    bytes.extend(8u32.to_le_bytes());
    bytes.extend((1u64 << 40).to_le_bytes());
    let path = write(dir.path(), "huge_value.gguf", &bytes);
    let err = inspect_gguf(&path).expect_err("huge value");
    assert!(matches!(err, ModelError::MalformedGguf { .. }), "{err}");

    // An unknown value type.
    let g = Gguf::new().u32("x", 0);
    let mut bytes = g.bytes();
    let at = bytes.len() - 8;
    bytes[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let path = write(dir.path(), "badtype.gguf", &bytes);
    let err = inspect_gguf(&path).expect_err("bad type");
    assert!(err.to_string().contains("Given: 99"), "{err}");
}

/// Runs only when `DGEM_TEST_MODEL` names the real default model file.
#[test]
fn real_default_model_when_available() -> Result<(), ModelError> {
    let Some(path) = std::env::var_os("DGEM_TEST_MODEL") else {
        return Ok(());
    };
    let path = Path::new(&path);
    let info = validate_gemma3(path)?;
    assert_eq!(info.architecture.as_deref(), Some("gemma3"));
    assert!(info.tensor_count > 0);
    // Gemma 3 270M: 18 layers, hidden size 640, 32k context.
    assert_eq!(info.block_count, Some(18), "{info:?}");
    assert_eq!(info.embedding_length, Some(640), "{info:?}");
    assert_eq!(info.context_length, Some(32_768), "{info:?}");
    verify(path, &dgem_model::default_model(), &NoProgress)?;
    Ok(())
}
