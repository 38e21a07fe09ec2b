//! Reading a POST body (serving.md §3.4): JSON, or `multipart/form-data` with a
//! `request` part holding the JSON and `image/*` parts that become data-URL
//! image parts (§3.3). Every failure is 400 `invalid body: …`.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderMap, StatusCode};
use base64::Engine as _;
use serde_json::{json, Value};

use crate::error::{ApiError, ErrorKind};

/// Most image parts one multipart body may carry.
pub const MAX_IMAGE_PARTS: usize = 32;

/// A parsed body.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestBody {
    /// The request JSON.
    pub json: Value,
    /// Image parts from multipart, in order, as `{"type":"image_url",…}` objects.
    pub images: Vec<Value>,
}

fn invalid(detail: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorKind::InvalidRequest, format!("invalid body: {detail}"))
}

/// Parse JSON refusing duplicate keys: a repeated key is a 422 naming it (the
/// last one would otherwise win silently), other syntax errors a 400.
pub fn strict_json(bytes: &[u8]) -> Result<Value, ApiError> {
    dgem_core::json::parse_strict_slice(bytes).map_err(|e| match e.duplicate {
        Some(_) => ApiError::new(ErrorKind::Validation, format!("invalid body: {e}")),
        None => invalid(e),
    })
}

/// Turn the body extractor's rejection into our error shape (413 over the
/// limit, 408 past the whole-body deadline of [`crate::conn::deadline`]).
pub fn rejection(r: &BytesRejection) -> ApiError {
    if crate::conn::deadline::is_deadline(r) {
        return ApiError::new(
            ErrorKind::RequestTimeout,
            format!("invalid body: {}", r.body_text()),
        );
    }
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorKind::PayloadTooLarge,
            "request body is over the size limit",
        )
    } else {
        invalid(r.body_text())
    }
}

/// Parse `bytes` by content type: multipart when it says `multipart/form-data`,
/// JSON otherwise.
///
/// # Errors
/// 400 `invalid body: …` with the parser's message.
pub async fn parse(headers: &HeaderMap, bytes: Bytes) -> Result<RequestBody, ApiError> {
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ctype
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
    {
        return multipart(ctype, bytes).await;
    }
    let json = strict_json(&bytes)?;
    Ok(RequestBody {
        json,
        images: Vec::new(),
    })
}

async fn multipart(ctype: &str, bytes: Bytes) -> Result<RequestBody, ApiError> {
    let boundary = multer::parse_boundary(ctype).map_err(invalid)?;
    let stream = futures_util::stream::once(async move { Ok::<Bytes, Infallible>(bytes) });
    let mut parts = multer::Multipart::new(stream, boundary);
    let mut request: Option<Value> = None;
    let mut images = Vec::new();
    while let Some(field) = parts.next_field().await.map_err(invalid)? {
        let name = field.name().unwrap_or("").to_string();
        let part_type = field
            .content_type()
            .map(|m| m.essence_str().to_string())
            .unwrap_or_default();
        if name == "request" {
            if request.is_some() {
                // Which one would win is a guess: refuse rather than pick.
                return Err(invalid("multipart has two parts named request; send one"));
            }
            let data = field.bytes().await.map_err(invalid)?;
            request = Some(strict_json(&data)?);
        } else if part_type.starts_with("image/") {
            if images.len() >= MAX_IMAGE_PARTS {
                return Err(invalid(format!("at most {MAX_IMAGE_PARTS} image parts")));
            }
            let data = field.bytes().await.map_err(invalid)?;
            let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
            images.push(json!({
                "type": "image_url",
                "image_url": {"url": format!("data:{part_type};base64,{b64}")}
            }));
        } else {
            return Err(invalid(format!(
                "part '{name}': neither the request JSON nor an image"
            )));
        }
    }
    let Some(json) = request else {
        return Err(invalid(
            "multipart needs a part named request holding the JSON body",
        ));
    };
    Ok(RequestBody { json, images })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn mp() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("multipart/form-data; boundary=XX"),
        );
        h
    }

    #[tokio::test]
    async fn multipart_request_and_image() {
        let body = "--XX\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{\"a\":1}\r\n--XX\r\nContent-Disposition: form-data; name=\"img\"; filename=\"x.png\"\r\nContent-Type: image/png\r\n\r\nPNG\r\n--XX--\r\n";
        let out = parse(&mp(), Bytes::from(body)).await.expect("parsed");
        assert_eq!(out.json, json!({"a": 1}));
        assert_eq!(
            out.images[0]["image_url"]["url"],
            "data:image/png;base64,UE5H"
        );
    }

    #[tokio::test]
    async fn multipart_errors_are_worded() {
        let body = "--XX\r\nContent-Disposition: form-data; name=\"notes\"\r\nContent-Type: text/plain\r\n\r\nhi\r\n--XX--\r\n";
        let e = parse(&mp(), Bytes::from(body)).await.expect_err("bad part");
        assert_eq!(
            e.message,
            "invalid body: part 'notes': neither the request JSON nor an image"
        );
        let body = "--XX--\r\n";
        let e = parse(&mp(), Bytes::from(body))
            .await
            .expect_err("no request");
        assert_eq!(
            e.message,
            "invalid body: multipart needs a part named request holding the JSON body"
        );
    }

    /// Regression (hostile run): a second `request` part was accepted silently.
    #[tokio::test]
    async fn two_request_parts_are_refused() {
        let part = "--XX\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{\"a\":1}\r\n";
        let body = format!("{part}{part}--XX--\r\n");
        let e = parse(&mp(), Bytes::from(body))
            .await
            .expect_err("two requests");
        assert_eq!(
            e.message,
            "invalid body: multipart has two parts named request; send one"
        );
    }
}
