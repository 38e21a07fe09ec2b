//! `dgem model list --local` and `--model ollama:…|hf:…|lmstudio:…` through
//! the binary, against store layouts built in a temporary directory (the
//! resolution rules are tested in `crates/dgem-model/tests/stores.rs`). No
//! model is loaded: the files are GGUF headers with no tensors, and every
//! `--model` here stops at its check.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{root, stderr};

/// A GGUF v3 header with zero tensors: architecture, file type 15 (Q4_K_M)
/// and context length.
fn gguf(arch: &str, context: u32) -> Vec<u8> {
    fn string(buf: &mut Vec<u8>, s: &str) {
        buf.extend((s.len() as u64).to_le_bytes());
        buf.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend(3u64.to_le_bytes());
    string(&mut out, "general.architecture");
    out.extend(8u32.to_le_bytes());
    string(&mut out, arch);
    string(&mut out, "general.file_type");
    out.extend(4u32.to_le_bytes());
    out.extend(15u32.to_le_bytes());
    string(&mut out, &format!("{arch}.context_length"));
    out.extend(4u32.to_le_bytes());
    out.extend(context.to_le_bytes());
    out
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

/// An ollama store with `qwen2.5:7b` (qwen2), and an LM Studio store with one
/// Gemma 3 file.
fn stores(root: &Path) {
    let weights = gguf("qwen2", 32_768);
    let hex = "ab".repeat(32);
    write(&root.join(format!("ollama/blobs/sha256-{hex}")), &weights);
    let manifest = format!(
        r#"{{"schemaVersion":2,"layers":[{{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:{hex}","size":{}}}]}}"#,
        weights.len()
    );
    write(
        &root.join("ollama/manifests/registry.ollama.ai/library/qwen2.5/7b"),
        manifest.as_bytes(),
    );
    write(
        &root.join("lmstudio/pub/g-GGUF/g-Q4_K_M.gguf"),
        &gguf("gemma3", 8_192),
    );
}

fn dgem(tmp: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(root())
        .args(args)
        .env_remove("DGEM_MODEL_PATH")
        .env_remove("OLLAMA_MODELS")
        .env("HOME", tmp)
        .env("DGEM_MODEL_DIR", tmp.join("dgem"))
        .env("HF_HUB_CACHE", tmp.join("hf"))
        .env("DGEM_OLLAMA_DIR", tmp.join("ollama"))
        .env("DGEM_LMSTUDIO_DIR", tmp.join("lmstudio"))
        .output()
        .expect("run dgem")
}

#[test]
fn list_local_shows_each_store_with_header_facts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    stores(tmp.path());
    let o = dgem(tmp.path(), &["model", "list", "--local"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let row = |reference: &str| {
        out.lines()
            .find(|l| l.contains(reference))
            .unwrap_or_else(|| panic!("no row for {reference}:\n{out}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let size = gguf("qwen2", 1).len().to_string();
    assert_eq!(
        row("ollama:qwen2.5:7b"),
        [
            "ollama",
            "ollama:qwen2.5:7b",
            &size,
            "B",
            "qwen2",
            "Q4_K_M",
            "32768",
            "no:",
            "not",
            "gemma3"
        ]
    );
    let size = gguf("gemma3", 1).len().to_string();
    assert_eq!(
        row("lmstudio:pub/g-GGUF/g-Q4_K_M.gguf"),
        [
            "lmstudio",
            "lmstudio:pub/g-GGUF/g-Q4_K_M.gguf",
            &size,
            "B",
            "gemma3",
            "Q4_K_M",
            "8192",
            "yes"
        ]
    );
    assert!(
        out.contains("(not found)"),
        "the missing hf cache is named:\n{out}"
    );
}

#[test]
fn model_references_that_name_nothing_or_a_non_gemma_model_are_user_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    stores(tmp.path());
    let decide = |model: &str| {
        dgem(
            tmp.path(),
            &[
                "decide",
                "-t",
                "support_triage",
                "-v",
                "ticket=hi",
                "--model",
                model,
            ],
        )
    };
    let o = decide("ollama:qwen2.5:3b");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let manifest = tmp
        .path()
        .join("ollama/manifests/registry.ollama.ai/library/qwen2.5/3b");
    assert!(
        e.contains(&format!(
            "`--model ollama:qwen2.5:3b`: no manifest at {} (tags there: [7b])",
            manifest.display()
        )),
        "{e}"
    );

    let o = decide("ollama:qwen2.5:7b");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("`--model ollama:qwen2.5:7b` is ")
            && e.contains("`qwen2`")
            && e.contains("gemma3"),
        "{e}"
    );

    let o = decide("hf:o/r");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("not in the cache") && e.contains("dgem model pull hf:o/r"),
        "{e}"
    );

    let o = decide("lmstudio:pub/none");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("no folder") && e.contains("[pub/g-GGUF]"), "{e}");
}
