//! Model references resolved in store layouts built in a temporary directory
//! (ollama manifests and blobs, LM Studio folders, Hugging Face caches), and
//! the `list --local` rows read from tiny GGUF headers. No network, no model.

use std::path::{Path, PathBuf};

use dgem_model::{ModelError, Store, Stores};
use dgem_testkit::gguf::tiny;

/// A GGUF v3 text-model header with zero tensors and the keys the listing
/// reads (the shared test writer, `dgem_testkit::gguf::tiny::header`).
fn gguf(arch: &str, file_type: u32, context: u32) -> Vec<u8> {
    tiny::header(arch, file_type, context).bytes()
}

const Q4_K_M: u32 = 15;
const Q8_0: u32 = 7;

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

/// Fake stores under one temporary directory.
fn stores(root: &Path) -> Stores {
    Stores {
        dgem: root.join("dgem"),
        hf: vec![root.join("dgem/hf"), root.join("hf-user")],
        ollama: root.join("ollama"),
        lmstudio: root.join("lmstudio"),
    }
}

/// Store `weights` as ollama does: the blob, and a manifest at
/// `manifests/<path>/<tag>` with a config, the model layer and a template.
/// `declared` overrides the size the manifest states.
fn ollama_model(
    dir: &Path,
    path: &str,
    tag: &str,
    weights: &[u8],
    declared: Option<u64>,
) -> PathBuf {
    use sha2::{Digest, Sha256};
    let hex = hex::encode(Sha256::digest(weights));
    let blob = dir.join("blobs").join(format!("sha256-{hex}"));
    write(&blob, weights);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.model",
             "digest": format!("sha256:{hex}"),
             "size": declared.unwrap_or(weights.len() as u64)},
            {"mediaType": "application/vnd.ollama.image.template",
             "digest": format!("sha256:{}", "1".repeat(64)), "size": 10}
        ]
    });
    write(
        &dir.join("manifests").join(path).join(tag),
        manifest.to_string().as_bytes(),
    );
    blob
}

fn detail(e: ModelError) -> String {
    match e {
        ModelError::Reference { detail, .. } => detail,
        other => panic!("expected a reference error, got {other}"),
    }
}

#[test]
fn ollama_names_resolve_to_the_weights_blob() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = stores(tmp.path());
    let lib = "registry.ollama.ai/library/gemma3";
    let one_b = ollama_model(&s.ollama, lib, "1b", &gguf("gemma3", Q4_K_M, 32_768), None);
    let latest = ollama_model(&s.ollama, lib, "latest", &gguf("gemma3", Q8_0, 8_192), None);
    let mine = ollama_model(
        &s.ollama,
        "registry.ollama.ai/me/mine",
        "v1",
        &gguf("gemma3", Q8_0, 1),
        None,
    );
    let hf = ollama_model(
        &s.ollama,
        "hf.co/bart/m-GGUF",
        "Q4_K_M",
        &gguf("llama", Q4_K_M, 2),
        None,
    );

    let r = s.resolve("ollama:gemma3:1b").expect("resolves");
    assert_eq!(r.path, one_b);
    assert_eq!(r.id, "gemma3-1b");
    assert_eq!(r.reference, "ollama:gemma3:1b");
    assert_eq!(s.resolve("ollama:gemma3").expect("latest").path, latest);
    assert_eq!(
        s.resolve("ollama:me/mine:v1").expect("namespace").path,
        mine
    );
    assert_eq!(
        s.resolve("ollama:hf.co/bart/m-GGUF:Q4_K_M")
            .expect("host")
            .path,
        hf
    );
}

#[test]
fn ollama_errors_name_the_manifest_and_what_is_there() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = stores(tmp.path());
    let e = detail(s.resolve("ollama:qwen2.5:7b").expect_err("no store"));
    assert!(
        e.contains("no ollama models directory at") && e.contains("OLLAMA_MODELS"),
        "{e}"
    );

    let lib = "registry.ollama.ai/library/qwen2.5";
    ollama_model(
        &s.ollama,
        lib,
        "latest",
        &gguf("qwen2", Q4_K_M, 32_768),
        None,
    );
    ollama_model(&s.ollama, lib, "3b", &gguf("qwen2", Q4_K_M, 32_768), None);
    let err = s.resolve("ollama:qwen2.5:7b").expect_err("no such tag");
    let manifest = s.ollama.join("manifests").join(lib).join("7b");
    assert_eq!(
        err.to_string(),
        format!(
            "`ollama:qwen2.5:7b`: no manifest at {} (tags there: [3b, latest])",
            manifest.display()
        )
    );
    assert!(err.is_user_error());

    let e = detail(s.resolve("ollama:llama3").expect_err("no such model"));
    assert!(
        e.contains("models in")
            && e.contains("[qwen2.5]")
            && e.contains("ollama pull llama3:latest"),
        "{e}"
    );

    let e = detail(s.resolve("ollama:a/b/c/d").expect_err("bad form"));
    assert!(e.contains("`ollama:NAME[:TAG]`"), "{e}");

    // A manifest that declares more bytes than the blob has: an interrupted pull.
    let blob = ollama_model(
        &s.ollama,
        lib,
        "short",
        &gguf("qwen2", Q4_K_M, 1),
        Some(1_000_000),
    );
    let e = detail(s.resolve("ollama:qwen2.5:short").expect_err("size"));
    assert!(
        e.contains(&blob.display().to_string()) && e.contains("says 1000000"),
        "{e}"
    );

    // A blob that is gone.
    let gone = ollama_model(&s.ollama, lib, "gone", b"GGUF-gone", None);
    std::fs::remove_file(&gone).expect("rm");
    let e = detail(s.resolve("ollama:qwen2.5:gone").expect_err("blob"));
    assert!(
        e.contains(&gone.display().to_string()) && e.contains("cannot be read"),
        "{e}"
    );

    // A manifest without a weights layer.
    write(
        &s.ollama.join("manifests").join(lib).join("empty"),
        br#"{"layers":[{"mediaType":"application/vnd.ollama.image.template","digest":"sha256:00","size":1}]}"#,
    );
    let e = detail(
        s.resolve("ollama:qwen2.5:empty")
            .expect_err("no model layer"),
    );
    assert!(
        e.contains("no `application/vnd.ollama.image.model` layer") && e.contains("template"),
        "{e}"
    );
}

#[test]
fn lmstudio_references_pick_like_hf() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = stores(tmp.path());
    let e = detail(s.resolve("lmstudio:a/b").expect_err("no store"));
    assert!(
        e.contains("no LM Studio models directory") && e.contains("DGEM_LMSTUDIO_DIR"),
        "{e}"
    );

    let one = s.lmstudio.join("pub/one-GGUF/one-Q8_0.gguf");
    write(&one, &gguf("gemma3", Q8_0, 1));
    let two = s.lmstudio.join("pub/two-GGUF");
    write(&two.join("two-Q8_0.gguf"), &gguf("gemma3", Q8_0, 1));
    write(&two.join("two-Q4_K_M.gguf"), &gguf("gemma3", Q4_K_M, 1));
    write(&two.join("README.md"), b"x");
    let many = s.lmstudio.join("pub/many-GGUF");
    write(&many.join("a-Q8_0.gguf"), &gguf("gemma3", Q8_0, 1));
    write(&many.join("b-F16.gguf"), &gguf("gemma3", 1, 1));

    let r = s.resolve("lmstudio:pub/one-GGUF").expect("only gguf");
    assert_eq!((r.path, r.id.as_str()), (one, "one-Q8_0"));
    assert_eq!(
        s.resolve("lmstudio:pub/two-GGUF").expect("q4_k_m").path,
        two.join("two-Q4_K_M.gguf")
    );
    assert_eq!(
        s.resolve("lmstudio:pub/two-GGUF/two-Q8_0.gguf")
            .expect("named")
            .path,
        two.join("two-Q8_0.gguf")
    );
    let e = detail(s.resolve("lmstudio:pub/many-GGUF").expect_err("ambiguous"));
    assert!(
        e.contains("2 GGUF files") && e.contains("[a-Q8_0.gguf, b-F16.gguf]"),
        "{e}"
    );
    let e = detail(
        s.resolve("lmstudio:pub/two-GGUF/x.gguf")
            .expect_err("no file"),
    );
    assert!(
        e.contains("x.gguf") && e.contains("[two-Q4_K_M.gguf, two-Q8_0.gguf]"),
        "{e}"
    );
    let e = detail(s.resolve("lmstudio:pub/none").expect_err("no folder"));
    assert!(
        e.contains("no folder") && e.contains("[pub/many-GGUF, pub/one-GGUF, pub/two-GGUF]"),
        "{e}"
    );
    let e = detail(s.resolve("lmstudio:pub").expect_err("bad form"));
    assert!(e.contains("`lmstudio:PUBLISHER/REPO`"), "{e}");
}

/// A repository cached in the hub layout, as `dgem model pull hf:` leaves it.
fn hf_cached(cache: &Path, repo: &str, files: &[(&str, Vec<u8>)]) -> PathBuf {
    let dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    write(&dir.join("refs/main"), b"abc123");
    let snap = dir.join("snapshots/abc123");
    for (name, bytes) in files {
        write(&snap.join(name), bytes);
    }
    snap
}

#[test]
fn hf_references_use_the_cache_without_the_network() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = stores(tmp.path());
    let e = detail(s.resolve("hf:o/r").expect_err("not cached"));
    assert!(
        e.contains("not in the cache")
            && e.contains("models--o--r")
            && e.contains("hf-user")
            && e.contains("dgem model pull hf:o/r"),
        "{e}"
    );
    let ours = hf_cached(
        &s.hf[0],
        "o/r",
        &[
            ("m-Q8_0.gguf", gguf("gemma3", Q8_0, 1)),
            ("m-Q4_K_M.gguf", gguf("gemma3", Q4_K_M, 1)),
        ],
    );
    let theirs = hf_cached(&s.hf[1], "u/x", &[("x.gguf", gguf("gemma3", Q8_0, 1))]);
    let r = s.resolve("hf:o/r").expect("cached");
    assert_eq!(
        (r.path, r.id.as_str()),
        (ours.join("m-Q4_K_M.gguf"), "m-Q4_K_M")
    );
    assert_eq!(
        s.resolve("hf:o/r/m-Q8_0.gguf").expect("named").path,
        ours.join("m-Q8_0.gguf")
    );
    assert_eq!(
        s.resolve("hf:u/x").expect("user cache").path,
        theirs.join("x.gguf")
    );
    let e = detail(s.resolve("hf:o/r/other.gguf").expect_err("no such file"));
    assert!(
        e.contains("no file `other.gguf`") && e.contains("m-Q8_0.gguf"),
        "{e}"
    );
}

/// store, reference, size, architecture, quantization, context, loadable.
type Row = (
    Store,
    String,
    u64,
    Option<String>,
    Option<String>,
    Option<u64>,
    bool,
);

#[test]
fn list_local_reads_every_store_from_the_headers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = stores(tmp.path());
    let own = s.dgem.join("mine.gguf");
    write(&own, &gguf("gemma3", Q4_K_M, 32_768));
    hf_cached(
        &s.hf[0],
        "o/r",
        &[("m-Q4_K_M.gguf", gguf("gemma3", Q4_K_M, 131_072))],
    );
    ollama_model(
        &s.ollama,
        "registry.ollama.ai/library/qwen2.5",
        "7b",
        &gguf("qwen2", Q4_K_M, 32_768),
        None,
    );
    let lm = s.lmstudio.join("pub/g-GGUF/g-Q8_0.gguf");
    write(&lm, &gguf("gemma3", Q8_0, 8_192));
    write(&s.lmstudio.join("pub/g-GGUF/broken.gguf"), b"not a gguf");
    let projector = tiny::projector().bytes();
    write(&s.lmstudio.join("pub/v-GGUF/mmproj-v-F16.gguf"), &projector);

    let rows: Vec<Row> = s
        .list_local()
        .into_iter()
        .map(|m| {
            (
                m.store,
                m.reference.clone(),
                m.size,
                m.architecture().map(str::to_owned),
                m.quantization(),
                m.context_length(),
                m.loadable(),
            )
        })
        .collect();
    let q4 = Some("Q4_K_M".to_owned());
    let gemma = || Some("gemma3".to_owned());
    let size = |arch: &str, ctx: u32| gguf(arch, Q4_K_M, ctx).len() as u64;
    assert_eq!(
        rows,
        vec![
            (
                Store::Dgem,
                own.display().to_string(),
                size("gemma3", 1),
                gemma(),
                q4.clone(),
                Some(32_768),
                true
            ),
            (
                Store::Hf,
                "hf:o/r/m-Q4_K_M.gguf".into(),
                size("gemma3", 1),
                gemma(),
                q4.clone(),
                Some(131_072),
                true
            ),
            (
                Store::Ollama,
                "ollama:qwen2.5:7b".into(),
                size("qwen2", 1),
                Some("qwen2".into()),
                q4,
                Some(32_768),
                true
            ),
            (
                Store::LmStudio,
                "lmstudio:pub/g-GGUF/broken.gguf".into(),
                10,
                None,
                None,
                None,
                false
            ),
            (
                Store::LmStudio,
                "lmstudio:pub/g-GGUF/g-Q8_0.gguf".into(),
                size("gemma3", 1),
                gemma(),
                Some("Q8_0".into()),
                Some(8_192),
                true
            ),
            (
                Store::LmStudio,
                "lmstudio:pub/v-GGUF/mmproj-v-F16.gguf".into(),
                projector.len() as u64,
                Some("clip".into()),
                None,
                None,
                false
            ),
        ]
    );
    let refusal = |suffix: &str| {
        s.list_local()
            .into_iter()
            .find(|m| m.reference.ends_with(suffix))
            .and_then(|m| m.refusal())
    };
    assert_eq!(refusal("7b"), None, "any text architecture loads");
    assert_eq!(
        refusal("mmproj-v-F16.gguf").as_deref(),
        Some("a vision/audio projector (mmproj) file")
    );
    let broken = s
        .list_local()
        .into_iter()
        .find(|m| m.reference.ends_with("broken.gguf"))
        .expect("listed");
    assert!(broken
        .header
        .expect_err("unreadable")
        .contains("not a GGUF file"));
}
