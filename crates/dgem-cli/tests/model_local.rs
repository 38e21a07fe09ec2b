//! `dgem model list --local` and `--model ollama:…|hf:…|lmstudio:…|PATH`
//! through the binary, against store layouts built in a temporary directory
//! (the resolution rules are tested in `crates/dgem-model/tests/stores.rs`).
//! The ollama model is a tiny `qwen2` GGUF (`dgem_testkit::gguf::tiny`, a few
//! hundred KB) that llama.cpp loads and decides with; the other files are
//! headers, and a vision projector among them is refused before loading.

use std::path::Path;
use std::process::{Command, Output};

use dgem_testkit::gguf::tiny::{self, Arch, TinyModel};

mod common;
use common::{root, stderr};

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

/// The tiny Qwen 2 model ollama holds as `qwen2.5:7b`.
fn qwen2() -> Vec<u8> {
    TinyModel::new(Arch::Qwen2).tied(true).gguf().bytes()
}

/// An ollama store with `qwen2.5:7b` (a tiny qwen2 model), and an LM Studio
/// store with a Gemma 3 header and a vision projector.
fn stores(root: &Path) {
    let weights = qwen2();
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
        &tiny::header("gemma3", 15, 8_192).bytes(),
    );
    write(
        &root.join("lmstudio/pub/v-GGUF/mmproj-v-F16.gguf"),
        &tiny::projector().bytes(),
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

fn decide(tmp: &Path, model: &str, json: bool) -> Output {
    let mut args = vec![
        "decide",
        "-t",
        "support_triage",
        "-v",
        "ticket=I was charged twice",
        "--model",
        model,
    ];
    if json {
        args.push("--json");
    }
    dgem(tmp, &args)
}

#[test]
fn list_local_says_any_text_architecture_loads_and_a_projector_does_not() {
    let tmp = tempfile::tempdir().expect("tempdir");
    stores(tmp.path());
    let o = dgem(tmp.path(), &["model", "list", "--local"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = |reference: &str| {
        out.lines()
            .find(|l| l.contains(reference))
            .unwrap_or_else(|| panic!("no row for {reference}:\n{out}"))
            .to_owned()
    };
    let row = |reference: &str| {
        line(reference)
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    #[allow(clippy::cast_precision_loss)]
    let kb = format!("{:.0}", qwen2().len() as f64 / 1e3);
    assert_eq!(
        row("ollama:qwen2.5:7b"),
        [
            "ollama",
            "ollama:qwen2.5:7b",
            &kb,
            "KB",
            "qwen2",
            "F32",
            "2048",
            "yes"
        ]
    );
    let size = tiny::header("gemma3", 15, 1).bytes().len().to_string();
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
    let projector = line("lmstudio:pub/v-GGUF/mmproj-v-F16.gguf");
    assert!(
        projector.contains(" clip ")
            && projector.ends_with("no: a vision/audio projector (mmproj) file"),
        "{projector}"
    );
    assert!(
        out.contains("(not found)"),
        "the missing hf cache is named:\n{out}"
    );
}

/// Loads the model in process: needs the `embedded` feature (default).
#[cfg(feature = "embedded")]
#[test]
fn an_ollama_reference_to_a_qwen2_model_decides_through_llama_cpp() {
    let tmp = tempfile::tempdir().expect("tempdir");
    stores(tmp.path());
    let o = decide(tmp.path(), "ollama:qwen2.5:7b", true);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON envelope");
    assert_eq!(v["diagnostics"]["model"], "qwen2.5-7b", "{v}");
    assert_eq!(v["diagnostics"]["engine"], "llama.cpp", "{v}");
    for id in ["urgent", "team", "sentiment"] {
        let p: Vec<f64> = v["answers"][id]["probabilities"]
            .as_object()
            .unwrap_or_else(|| panic!("{id} has probabilities: {v}"))
            .values()
            .filter_map(serde_json::Value::as_f64)
            .collect();
        assert!(
            p.len() >= 2 && p.iter().all(|x| (0.0..=1.0).contains(x)),
            "{id}: {p:?}"
        );
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-6, "{id}: {p:?}");
    }
}

#[test]
fn model_references_that_name_nothing_or_a_non_text_model_are_user_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    stores(tmp.path());
    let o = decide(tmp.path(), "ollama:qwen2.5:3b", false);
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

    let projector = tmp.path().join("lmstudio/pub/v-GGUF/mmproj-v-F16.gguf");
    let refused = format!(
        "`{}` is a GGUF with `general.architecture` = `clip`, a vision/audio projector (mmproj) file; dgem needs a text-generating (decoder) language model",
        projector.display()
    );
    let o = decide(tmp.path(), "lmstudio:pub/v-GGUF/mmproj-v-F16.gguf", false);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("`--model lmstudio:pub/v-GGUF/mmproj-v-F16.gguf` is ") && e.contains(&refused),
        "{e}"
    );
    let o = decide(tmp.path(), &projector.display().to_string(), false);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains(&refused), "{e}");

    let o = decide(tmp.path(), "hf:o/r", false);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("not in the cache") && e.contains("dgem model pull hf:o/r"),
        "{e}"
    );

    let o = decide(tmp.path(), "lmstudio:pub/none", false);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("no folder") && e.contains("[pub/g-GGUF, pub/v-GGUF]"),
        "{e}"
    );
}
