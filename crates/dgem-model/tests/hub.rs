//! `hf:` pulls against a local fake hub that speaks the Hugging Face Hub's
//! download protocol (repo info with `blobs=true`, ranged `resolve` requests
//! with `X-Repo-Commit`, `X-Linked-Etag` and `Content-Range`): the right file
//! is chosen and verified, a killed pull resumes without fetching again what
//! it had, a corrupt file is refused and deleted, a gated repo asks for
//! HF_TOKEN, and an unreachable hub says what to do.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use dgem_model::hub::{pull, HubConfig};
use dgem_model::NoProgress;
use sha2::{Digest, Sha256};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "hf_secret";

#[derive(Clone)]
struct Hub {
    file: Arc<Vec<u8>>,
    /// Published sha256 (the real one unless a test lies).
    sha: String,
    /// Ranged body requests answered so far.
    served: Arc<AtomicUsize>,
    /// Answer 500 to body requests after this many.
    fail_after: Arc<AtomicUsize>,
    /// The `Range` of every body request.
    ranges: Arc<Mutex<Vec<String>>>,
    gated: bool,
}

fn authorized(h: &Hub, headers: &HeaderMap) -> bool {
    !h.gated
        || headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == format!("Bearer {TOKEN}"))
}

async fn info(
    State(h): State<Hub>,
    Path((_owner, _repo)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if !authorized(&h, &headers) {
        return (StatusCode::UNAUTHORIZED, "gated").into_response();
    }
    assert_eq!(uri.query(), Some("blobs=true"));
    let n = h.file.len();
    axum::Json(serde_json::json!({
        "sha": COMMIT,
        "siblings": [
            {"rfilename": "README.md", "size": 6},
            {"rfilename": "tiny-Q8_0.gguf", "size": 10, "lfs": {"sha256": "00", "size": 10}},
            {"rfilename": "tiny-Q4_K_M.gguf", "size": n, "lfs": {"sha256": h.sha, "size": n}}
        ]
    }))
    .into_response()
}

async fn resolve(
    State(h): State<Hub>,
    Path((_owner, _repo, _rev, file)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&h, &headers) {
        return (StatusCode::UNAUTHORIZED, "gated").into_response();
    }
    if file != "tiny-Q4_K_M.gguf" {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    }
    let n = h.file.len();
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("bytes=0-")
        .to_string();
    let (a, b) = range
        .trim_start_matches("bytes=")
        .split_once('-')
        .map(|(a, b)| {
            let a: usize = a.parse().unwrap_or(0);
            let b: usize = b.parse().unwrap_or(n - 1);
            (a, b.min(n - 1))
        })
        .unwrap();
    if range != "bytes=0-0" {
        h.ranges.lock().unwrap().push(range.clone());
        if h.served.fetch_add(1, Ordering::SeqCst) >= h.fail_after.load(Ordering::SeqCst) {
            return (StatusCode::INTERNAL_SERVER_ERROR, "killed").into_response();
        }
    }
    (
        StatusCode::PARTIAL_CONTENT,
        [
            ("x-repo-commit", COMMIT.to_string()),
            ("x-linked-etag", format!("\"{}\"", h.sha)),
            ("content-range", format!("bytes {a}-{b}/{n}")),
        ],
        h.file[a..=b].to_vec(),
    )
        .into_response()
}

fn start(h: Hub) -> SocketAddr {
    let app = axum::Router::new()
        .route("/api/models/{owner}/{repo}/revision/main", get(info))
        .route("/{owner}/{repo}/resolve/{rev}/{*file}", get(resolve))
        .with_state(h);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

fn model_bytes() -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend((0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    v
}

fn hub(file: Vec<u8>, gated: bool) -> Hub {
    let sha = hex::encode(Sha256::digest(&file));
    Hub {
        file: Arc::new(file),
        sha,
        served: Arc::default(),
        fail_after: Arc::new(AtomicUsize::new(usize::MAX)),
        ranges: Arc::default(),
        gated,
    }
}

fn config(addr: SocketAddr, dir: &std::path::Path) -> HubConfig {
    HubConfig {
        endpoint: format!("http://{addr}"),
        token: None,
        cache_dir: dir.to_path_buf(),
        chunk_bytes: 10_000,
        parallel: 1,
    }
}

#[test]
fn the_q4_k_m_file_is_chosen_verified_and_cached() {
    let h = hub(model_bytes(), false);
    let addr = start(h.clone());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(addr, dir.path());
    let path = pull("hf:acme/tiny-GGUF", &cfg, false, &NoProgress).unwrap();
    assert!(path.ends_with("tiny-Q4_K_M.gguf"), "{}", path.display());
    assert_eq!(std::fs::read(&path).unwrap(), *h.file);
    let first = h.ranges.lock().unwrap().len();
    assert_eq!(first, 11, "100,004 bytes in 10,000-byte chunks");
    // Cached: a second pull downloads nothing.
    let again = pull("hf:acme/tiny-GGUF", &cfg, false, &NoProgress).unwrap();
    assert_eq!(again, path);
    assert_eq!(h.ranges.lock().unwrap().len(), first);
    // A named file that is not there lists the GGUF files.
    let e = pull("hf:acme/tiny-GGUF/nope.gguf", &cfg, false, &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no file `nope.gguf`") && e.contains("tiny-Q8_0.gguf"),
        "{e}"
    );
}

#[test]
fn a_killed_pull_resumes_where_it_stopped() {
    let h = hub(model_bytes(), false);
    h.fail_after.store(4, Ordering::SeqCst);
    let addr = start(h.clone());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(addr, dir.path());
    assert!(pull("hf:acme/tiny-GGUF", &cfg, false, &NoProgress).is_err());
    let before = h.ranges.lock().unwrap().len();
    h.fail_after.store(usize::MAX, Ordering::SeqCst);
    let path = pull("hf:acme/tiny-GGUF", &cfg, false, &NoProgress).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), *h.file);
    let ranges = h.ranges.lock().unwrap().clone();
    // The second pull starts at the first byte the first one did not keep.
    assert_eq!(ranges[before], "bytes=40000-49999", "{ranges:?}");
    assert_eq!(ranges.len() - before, 7, "{ranges:?}");
}

#[test]
fn a_file_that_does_not_match_the_published_sha256_is_refused_and_deleted() {
    let mut h = hub(model_bytes(), false);
    h.sha = "ab".repeat(32);
    let addr = start(h);
    let dir = tempfile::tempdir().unwrap();
    let e = pull(
        "hf:acme/tiny-GGUF",
        &config(addr, dir.path()),
        false,
        &NoProgress,
    )
    .unwrap_err();
    assert!(e.to_string().contains("sha256"), "{e}");
    let left: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_gated_repo_needs_hf_token() {
    let h = hub(model_bytes(), true);
    let addr = start(h.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(addr, dir.path());
    let e = pull("hf:acme/tiny-GGUF", &cfg, false, &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(e.contains("HF_TOKEN") && e.contains("gated"), "{e}");
    cfg.token = Some(TOKEN.into());
    let path = pull("hf:acme/tiny-GGUF", &cfg, false, &NoProgress).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), *h.file);
}

#[test]
fn an_unreachable_hub_says_what_to_do() {
    // A port nobody listens on.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = pull(
        "hf:acme/tiny-GGUF",
        &config(addr, dir.path()),
        false,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("cannot reach the model hub")
            && e.contains("HF_ENDPOINT")
            && e.contains("--model"),
        "{e}"
    );
}
