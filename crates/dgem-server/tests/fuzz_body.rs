//! Property tests ("fuzzing" on stable Rust, with proptest) over the POST body
//! reader (`dgem_server::body::parse`): JSON and `multipart/form-data`, built
//! from random parts and then corrupted. For any bytes and any content type
//! the reader returns a body or a 4xx error with a message, never a panic or
//! a 5xx, and a well-formed multipart body always reads back its request JSON
//! and its images in order.
//!
//! CI runs the default counts below; `scripts/fuzz` sets
//! `PROPTEST_CASES=1000000`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderValue};
use dgem_server::body::{parse, MAX_IMAGE_PARTS};
use proptest::prelude::*;
use serde_json::json;

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(n)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

fn headers(ctype: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(ctype) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h
}

/// One multipart part: name, content type, data.
#[derive(Debug, Clone)]
struct Part {
    name: String,
    ctype: Option<String>,
    data: Vec<u8>,
}

fn part() -> impl Strategy<Value = Part> {
    (
        prop::sample::select(vec!["request", "image", "file", "", "req\"uest", "é"]),
        prop::option::of(prop::sample::select(vec![
            "image/png",
            "image/jpeg",
            "application/json",
            "text/plain",
            "image/",
            "",
        ])),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(name, ctype, data)| Part {
            name: name.to_string(),
            ctype: ctype.map(str::to_string),
            data,
        })
}

fn encode(boundary: &str, parts: &[Part]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        out.extend_from_slice(
            format!("Content-Disposition: form-data; name=\"{}\"\r\n", p.name).as_bytes(),
        );
        if let Some(t) = &p.ctype {
            out.extend_from_slice(format!("Content-Type: {t}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&p.data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    out
}

/// What every failure must be: a 4xx with a message that says what is wrong.
fn assert_clean(r: Result<dgem_server::body::RequestBody, dgem_server::ApiError>) {
    if let Err(e) = r {
        let status = e.kind.status();
        assert!(status.is_client_error(), "{status}: {}", e.message);
        assert!(!e.message.is_empty());
    }
}

proptest! {
    #![proptest_config(cases(256))]

    /// Any bytes under any content type: a body or a clean 4xx.
    #[test]
    fn any_bytes_under_any_content_type(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        ctype in prop::sample::select(vec![
            "application/json",
            "multipart/form-data; boundary=xyz",
            "multipart/form-data",
            "multipart/form-data; boundary=",
            "multipart/form-data; boundary=\"a b\"",
            "text/plain",
            "",
        ]),
    ) {
        let rt = runtime();
        assert_clean(rt.block_on(parse(&headers(ctype), Bytes::from(bytes))));
    }

    /// Random parts, then a random cut or byte flip: a body or a clean 4xx.
    #[test]
    fn random_multipart_bodies_corrupted(
        parts in prop::collection::vec(part(), 0..6),
        cut in any::<prop::sample::Index>(),
        flip in prop::option::of((any::<prop::sample::Index>(), any::<u8>())),
    ) {
        let mut bytes = encode("b0und", &parts);
        if let Some((at, b)) = flip {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let keep = cut.index(bytes.len() + 1);
        bytes.truncate(keep);
        let rt = runtime();
        assert_clean(rt.block_on(parse(
            &headers("multipart/form-data; boundary=b0und"),
            Bytes::from(bytes),
        )));
    }

    /// A well-formed body reads back exactly: the request JSON, and every
    /// image part in order, as data URLs of its own type.
    #[test]
    fn well_formed_multipart_reads_back(
        images in prop::collection::vec(
            (prop::sample::select(vec!["image/png", "image/jpeg", "image/webp"]),
             prop::collection::vec(any::<u8>(), 1..48)),
            0..MAX_IMAGE_PARTS,
        ),
        state in "[a-z ]{1,40}",
    ) {
        let request = json!({"schema": {"questions": []}, "state": state});
        let mut parts = vec![Part {
            name: "request".into(),
            ctype: Some("application/json".into()),
            data: request.to_string().into_bytes(),
        }];
        for (t, data) in &images {
            parts.push(Part { name: "image".into(), ctype: Some((*t).to_string()), data: data.clone() });
        }
        let bytes = encode("b0und", &parts);
        let rt = runtime();
        let body = rt
            .block_on(parse(&headers("multipart/form-data; boundary=b0und"), Bytes::from(bytes)))
            .expect("a well-formed body parses");
        prop_assert_eq!(&body.json, &request);
        prop_assert_eq!(body.images.len(), images.len());
        for (got, (t, _)) in body.images.iter().zip(&images) {
            let url = got["image_url"]["url"].as_str().unwrap();
            let prefix = format!("data:{t};base64,");
            prop_assert!(url.starts_with(&prefix), "{}", url);
        }
    }
}
