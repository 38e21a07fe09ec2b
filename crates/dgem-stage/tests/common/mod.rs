//! A range-capable fake file server on 127.0.0.1:0 for staging tests: plain
//! HTTP paths under `/files/` (with a manifest) and a fake Cloud Storage JSON
//! API, with fault modes (dropped connections, short bodies, wrong bytes,
//! hanging chunks) and a log of every request.
#![allow(dead_code)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};

/// A request the server saw: file path and the range start (None = no Range).
pub type Seen = (String, Option<u64>);

/// Fault modes, changeable while the server runs.
#[derive(Debug, Default)]
pub struct Faults {
    /// (file, offset) pairs whose first request is cut mid-body (connection reset).
    pub drop_once: HashSet<(String, u64)>,
    /// Every ranged body response carries half its bytes and a matching length.
    pub short_always: bool,
    /// Flip one byte in every ranged response that does not start at 0.
    pub corrupt: bool,
    /// (file, offset) pairs that never answer.
    pub hang: HashSet<(String, u64)>,
}

/// Shared server state.
#[derive(Debug, Default)]
pub struct Fake {
    pub files: BTreeMap<String, Vec<u8>>,
    pub faults: Mutex<Faults>,
    pub log: Mutex<Vec<Seen>>,
    /// Token the fake GCS API requires.
    pub token: String,
}

impl Fake {
    pub fn seen(&self) -> Vec<Seen> {
        self.log.lock().expect("log").clone()
    }
    pub fn clear_log(&self) {
        self.log.lock().expect("log").clear();
    }
}

/// Deterministic pseudo-random bytes (splitmix64).
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// A valid safetensors file: 8-byte LE header length, JSON header, `body` bytes.
pub fn safetensors(seed: u64, body: usize) -> Vec<u8> {
    let mut header = format!(
        r#"{{"__metadata__":{{"format":"pt"}},"w":{{"dtype":"U8","shape":[{body}],"data_offsets":[0,{body}]}}}}"#
    )
    .into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(&bytes(seed, body));
    out
}

pub fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// The manifest body for `files` (with checksums when `with_sha`).
pub fn manifest(files: &BTreeMap<String, Vec<u8>>, with_sha: bool) -> Vec<u8> {
    let list: Vec<serde_json::Value> = files
        .iter()
        .map(|(p, b)| {
            let mut v = serde_json::json!({"path": p, "size": b.len()});
            if with_sha {
                v["sha256"] = serde_json::json!(sha256(b));
            }
            v
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "files": list })).expect("json")
}

/// Start the server; returns its base URL (`http://127.0.0.1:PORT`).
pub async fn start(fake: Arc<Fake>) -> String {
    let app = Router::new()
        .route("/files/{*path}", get(plain))
        .route("/storage/v1/b/{bucket}/o", get(gcs_list))
        .route("/storage/v1/b/{bucket}/o/{object}", get(gcs_media))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

async fn plain(
    State(fake): State<Arc<Fake>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    serve_file(&fake, &path, &headers).await
}

async fn gcs_list(
    State(fake): State<Arc<Fake>>,
    Path(bucket): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&fake, &headers) {
        return (StatusCode::UNAUTHORIZED, "missing bearer token").into_response();
    }
    fake.log
        .lock()
        .expect("log")
        .push((format!("list:{bucket}"), None));
    let prefix = q.get("prefix").cloned().unwrap_or_default();
    // Two pages, to exercise nextPageToken.
    let names: Vec<&String> = fake.files.keys().collect();
    let half = names.len() / 2;
    let page: Vec<&String> = if q.contains_key("pageToken") {
        names[half..].to_vec()
    } else {
        names[..half].to_vec()
    };
    let mut items: Vec<serde_json::Value> = page
        .iter()
        .map(|n| serde_json::json!({"name": format!("{prefix}{n}"), "size": fake.files[*n].len().to_string()}))
        .collect();
    if !q.contains_key("pageToken") {
        items.push(serde_json::json!({"name": prefix.clone(), "size": "0"}));
    }
    let mut body = serde_json::json!({ "items": items });
    if !q.contains_key("pageToken") {
        body["nextPageToken"] = serde_json::json!("p2");
    }
    axum::Json(body).into_response()
}

async fn gcs_media(
    State(fake): State<Arc<Fake>>,
    Path((_bucket, object)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&fake, &headers) {
        return (StatusCode::UNAUTHORIZED, "missing bearer token").into_response();
    }
    if q.get("alt").map(String::as_str) != Some("media") {
        return (StatusCode::BAD_REQUEST, "alt=media required").into_response();
    }
    let Some((_, name)) = object.split_once('/') else {
        return (StatusCode::NOT_FOUND, "no prefix").into_response();
    };
    serve_file(&fake, name, &headers).await
}

fn authorized(fake: &Fake, headers: &HeaderMap) -> bool {
    let want = format!("Bearer {}", fake.token);
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(want.as_str())
}

fn range(headers: &HeaderMap) -> Option<(u64, u64)> {
    let v = headers
        .get(header::RANGE)?
        .to_str()
        .ok()?
        .strip_prefix("bytes=")?;
    let (a, b) = v.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

async fn serve_file(fake: &Fake, path: &str, headers: &HeaderMap) -> Response {
    let r = range(headers);
    fake.log
        .lock()
        .expect("log")
        .push((path.to_string(), r.map(|x| x.0)));
    let data: Cow<'_, [u8]> = if path == "dgem-manifest.json" {
        Cow::Owned(manifest(&fake.files, true))
    } else if path == "nosha/dgem-manifest.json" {
        Cow::Owned(manifest(&fake.files, false))
    } else if let Some(b) = fake
        .files
        .get(path)
        .or_else(|| path.strip_prefix("nosha/").and_then(|p| fake.files.get(p)))
    {
        Cow::Borrowed(b.as_slice())
    } else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    // A strong validator, as real servers send: the content's SHA-256.
    let etag = format!("\"{}\"", &sha256(&data)[..16]);
    let Some((start, end)) = r else {
        return ([(header::ETAG, etag)], data.into_owned()).into_response();
    };
    let total = data.len() as u64;
    let end = end.min(total - 1);
    let key = (path.to_string(), start);
    let (hang, drop, short, corrupt) = {
        let mut f = fake.faults.lock().expect("faults");
        (
            f.hang.contains(&key),
            f.drop_once.remove(&key),
            f.short_always,
            f.corrupt,
        )
    };
    if hang {
        std::future::pending::<()>().await;
    }
    let mut slice = data[start as usize..=end as usize].to_vec();
    if corrupt && start != 0 {
        slice[0] ^= 0xFF;
    }
    let full_len = slice.len();
    let builder = Response::builder()
        .status(StatusCode::PARTIAL_CONTENT)
        .header(header::ETAG, etag)
        .header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{end}/{total}"),
        );
    if drop {
        // Promise the full length, send half, then fail the stream: hyper resets
        // the connection mid-body.
        let half = slice[..full_len / 2].to_vec();
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![
            Ok(half),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "dropped",
            )),
        ];
        return builder
            .header(header::CONTENT_LENGTH, full_len)
            .body(Body::from_stream(futures_util::stream::iter(chunks)))
            .expect("response");
    }
    if short && start != 0 {
        slice.truncate(full_len / 2);
    }
    builder.body(Body::from(slice)).expect("response")
}
