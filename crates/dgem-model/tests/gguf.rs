//! Tests of the GGUF header reader and the text-model check on handcrafted
//! headers (`dgem_testkit::gguf`) and, when `DGEM_TEST_MODEL` points at it, on
//! the real small model (Gemma 3 270M, the suite's).

use std::path::Path;

use dgem_model::{inspect_gguf, validate_text_model, verify, ModelError, NoProgress};
use dgem_testkit::gguf::{tiny, GgufWriter};

/// A GGUF v3 header (the shared test writer) claiming 7 tensors it does not hold.
fn header() -> GgufWriter {
    GgufWriter::new().declared_tensors(7)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}

#[test]
fn reads_header_and_metadata_skipping_arrays() -> Result<(), ModelError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = header()
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
    assert_eq!(info.vocab_size, Some(3));
    assert!(info.is_gemma3());
    assert!(validate_text_model(&path).is_ok());
    Ok(())
}

#[test]
fn stops_once_every_key_is_found() -> Result<(), ModelError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bytes = header()
        .string("general.architecture", "gemma3")
        .string("general.name", "n")
        .u32("general.file_type", 15)
        .u32("gemma3.context_length", 1)
        .u32("gemma3.block_count", 2)
        .u32("gemma3.embedding_length", 3)
        .string_array("tokenizer.ggml.tokens", &["a", "b"])
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
fn any_text_architecture_with_a_vocabulary_passes_the_check() -> Result<(), ModelError> {
    let dir = tempfile::tempdir().expect("tempdir");
    for arch in ["llama", "qwen2", "phi3", "mistral3", "granite"] {
        let path = write(
            dir.path(),
            &format!("{arch}.gguf"),
            &tiny::header(arch, 15, 4096).bytes(),
        );
        let info = validate_text_model(&path)?;
        assert_eq!(info.architecture.as_deref(), Some(arch));
        assert_eq!(info.vocab_size, Some(3));
    }
    Ok(())
}

/// The check's refusal of `bytes`: its message, after asserting the variant,
/// the path and the architecture it names.
fn refusal(dir: &Path, name: &str, bytes: &[u8], arch: Option<&str>) -> String {
    let path = write(dir, name, bytes);
    let err = validate_text_model(&path).expect_err("not a text model");
    assert!(
        matches!(&err, ModelError::NotTextModel { architecture, .. } if architecture.as_deref() == arch),
        "{err:?}"
    );
    assert!(err.is_user_error());
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("dgem needs a text-generating"), "{msg}");
    msg
}

#[test]
fn non_text_ggufs_are_refused_naming_what_they_are() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let msg = refusal(d, "mmproj.gguf", &tiny::projector().bytes(), Some("clip"));
    assert!(
        msg.contains("`clip`, a vision/audio projector (mmproj) file"),
        "{msg}"
    );
    let msg = refusal(
        d,
        "bert.gguf",
        &tiny::embedding_model().bytes(),
        Some("bert"),
    );
    assert!(msg.contains("an encoder (embedding) model"), "{msg}");
    // An embedding model of a decoder architecture: only its keys say so.
    let pooled = tiny::header("qwen3", 0, 1024).u32("qwen3.pooling_type", 3);
    let msg = refusal(d, "qwen3-embedding.gguf", &pooled.bytes(), Some("qwen3"));
    assert!(msg.contains("`qwen3.pooling_type` is set"), "{msg}");
    let encoder = tiny::header("llama", 0, 1024).bool("llama.attention.causal", false);
    let msg = refusal(d, "encoder.gguf", &encoder.bytes(), Some("llama"));
    assert!(msg.contains("`llama.attention.causal` = false"), "{msg}");
    let adapter = header()
        .string("general.architecture", "llama")
        .string("general.type", "adapter");
    let msg = refusal(d, "lora.gguf", &adapter.bytes(), Some("llama"));
    assert!(msg.contains("a LoRA adapter"), "{msg}");
    let bare = header().string("general.architecture", "llama");
    let msg = refusal(d, "no-vocab.gguf", &bare.bytes(), Some("llama"));
    assert!(
        msg.contains("without a vocabulary (no `tokenizer.ggml.tokens`)"),
        "{msg}"
    );
    let msg = refusal(d, "bare.gguf", &header().bytes(), None);
    assert!(
        msg.contains("`<missing>`, missing `general.architecture`"),
        "{msg}"
    );
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
    let g = header().string("general.architecture", "gemma3").version(1);
    let path = write(dir.path(), "v1.gguf", &g.bytes());
    assert!(matches!(
        inspect_gguf(&path),
        Err(ModelError::UnsupportedGgufVersion { version: 1, .. })
    ));

    let full = header().string("general.architecture", "gemma3").bytes();
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
    let g = header().u32("x", 0);
    let mut bytes = g.bytes();
    let at = bytes.len() - 8;
    bytes[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let path = write(dir.path(), "badtype.gguf", &bytes);
    let err = inspect_gguf(&path).expect_err("bad type");
    assert!(err.to_string().contains("Given: 99"), "{err}");
}

/// Runs only when `DGEM_TEST_MODEL` names the real small model file (the
/// 270M, the default until qwen2.5-coder-1.5b took its place).
#[test]
fn real_default_model_when_available() -> Result<(), ModelError> {
    let Some(path) = std::env::var_os("DGEM_TEST_MODEL") else {
        return Ok(());
    };
    let path = Path::new(&path);
    let info = validate_text_model(path)?;
    assert_eq!(info.architecture.as_deref(), Some("gemma3"));
    assert_eq!(info.vocab_size, Some(262_144), "{info:?}");
    assert!(info.tensor_count > 0);
    // Gemma 3 270M: 18 layers, hidden size 640, 32k context.
    assert_eq!(info.block_count, Some(18), "{info:?}");
    assert_eq!(info.embedding_length, Some(640), "{info:?}");
    assert_eq!(info.context_length, Some(32_768), "{info:?}");
    verify(path, &dgem_model::gemma3_270m(), &NoProgress)?;
    Ok(())
}
