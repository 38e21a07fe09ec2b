//! The JSON-RPC 2.0 envelope check in front of rmcp on `POST /mcp`: a body
//! that is not a JSON-RPC request gets a JSON-RPC error object with the
//! standard code (JSON-RPC 2.0 §5.1), not an HTTP error page:
//!
//! | what is wrong | HTTP | code |
//! |---|---|---|
//! | `Content-Type` is not `application/json` | 415 | -32600 Invalid Request |
//! | body over [`MCP_MAX_BODY_BYTES`] | 413 | -32600 Invalid Request |
//! | not JSON, not UTF-8, or a duplicate key | 400 | -32700 Parse error |
//! | JSON, but not one request object (a batch, a scalar) | 400 | -32600 Invalid Request |
//! | `jsonrpc` is not `"2.0"`, `method` missing or not a string | 400 | -32600 Invalid Request |
//! | `params` not an object; `tools/call` without a tool `name` or with `arguments` not an object; params of a known method rmcp cannot read | 200 | -32602 Invalid params |
//!
//! Everything else reaches rmcp, which answers -32601 (method not found)
//! itself, and the server, which answers -32602 for an unknown tool. Duplicate keys are refused because the last
//! one would otherwise win silently, as on every other dgem route.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Largest JSON-RPC request body accepted on `/mcp`, in bytes (1 MiB; larger
/// bodies get 413).
pub const MCP_MAX_BODY_BYTES: usize = 1024 * 1024;

/// JSON-RPC 2.0 "Parse error".
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0 "Invalid Request".
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0 "Invalid params" (also: an unknown tool, per the MCP spec).
pub const INVALID_PARAMS: i64 = -32602;

/// A JSON-RPC error response with `id` (null when the request's id is unknown).
pub fn rpc_error(status: StatusCode, code: i64, message: String, id: Value) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// What is wrong with `bytes` as one JSON-RPC request: code, message and the
/// request's id when it has one.
pub(crate) fn check(bytes: &[u8]) -> Result<(), (i64, String, Value)> {
    let value = dgem_core::json::parse_strict_slice(bytes)
        .map_err(|e| (PARSE_ERROR, format!("parse error: {e}"), Value::Null))?;
    let Value::Object(obj) = &value else {
        let what = match value {
            Value::Array(_) => "a batch (array); send one request object per POST",
            _ => "not an object",
        };
        return Err((
            INVALID_REQUEST,
            format!("invalid request: the body must be one JSON-RPC request object; it is {what}"),
            Value::Null,
        ));
    };
    let id = obj.get("id").cloned().unwrap_or(Value::Null);
    // MCP: a request id is a string or an integer, never null.
    match obj.get("id") {
        None | Some(Value::String(_)) => {}
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {}
        Some(other) => {
            return Err((
                INVALID_REQUEST,
                format!(
                    "invalid request: `id` must be a string or an integer. Given: {}",
                    short(other)
                ),
                Value::Null,
            ))
        }
    }
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        other => {
            let given = other.map_or_else(|| "nothing".to_string(), dgem_core::json::shown);
            return Err((
                INVALID_REQUEST,
                format!("invalid request: `jsonrpc` must be \"2.0\". Given: {given}"),
                id,
            ));
        }
    }
    // A response or an error object from the client (no `method`) is allowed.
    let is_reply = obj.contains_key("result") || obj.contains_key("error");
    let method = match obj.get("method") {
        Some(Value::String(m)) if !m.is_empty() => m.as_str(),
        None if is_reply => return Ok(()),
        other => {
            let given = other.map_or_else(|| "nothing".to_string(), dgem_core::json::shown);
            return Err((
                INVALID_REQUEST,
                format!("invalid request: `method` must be a non-empty string. Given: {given}"),
                id,
            ));
        }
    };
    check_params(method, obj.get("params")).map_err(|m| (INVALID_PARAMS, m, id.clone()))?;
    // What rmcp cannot read as a client message would otherwise come back as
    // a bare 415 (a known method with params of the wrong shape).
    // The value is read once more, by rmcp's own type, and is not needed after.
    let (method, known) = (method.to_string(), method_is_known(method));
    if let Err(e) = serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(value) {
        return Err(if known {
            (
                INVALID_PARAMS,
                format!("invalid params for `{method}`: {e}"),
                id,
            )
        } else {
            (INVALID_REQUEST, format!("invalid request: {e}"), id)
        });
    }
    Ok(())
}

/// Methods of the MCP spec this server's library reads; an unknown method
/// reaches rmcp, which answers -32601.
fn method_is_known(method: &str) -> bool {
    matches!(
        method,
        "initialize" | "ping" | "tools/list" | "tools/call" | "resources/list" | "prompts/list"
    ) || method.starts_with("notifications/")
}

/// One required field of `initialize`'s params: name, type test, what it must be.
type FieldCheck = (&'static str, fn(&Value) -> bool, &'static str);

/// `params` must be an object when present; `tools/call` needs a tool `name`
/// and, when given, `arguments` as an object.
fn check_params(method: &str, params: Option<&Value>) -> Result<(), String> {
    let obj = match params {
        None | Some(Value::Null) => {
            if method == "tools/call" {
                return Err(
                    "invalid params: `tools/call` needs `params` with the tool `name`".into(),
                );
            }
            if method == "initialize" {
                return Err("invalid params: `initialize` needs `params` with `protocolVersion`, `capabilities` and `clientInfo`".into());
            }
            return Ok(());
        }
        Some(Value::Object(o)) => o,
        Some(other) => {
            return Err(format!(
                "invalid params: `params` must be an object. Given: {}",
                short(other)
            ))
        }
    };
    if method == "initialize" {
        // rmcp reads a malformed initialize as an unknown method (-32601).
        let checks: [FieldCheck; 3] = [
            (
                "protocolVersion",
                Value::is_string,
                "a version string such as \"2025-06-18\"",
            ),
            ("capabilities", Value::is_object, "an object"),
            (
                "clientInfo",
                Value::is_object,
                "an object with `name` and `version`",
            ),
        ];
        for (k, ok, what) in checks {
            if !obj.get(k).is_some_and(ok) {
                let given = obj.get(k).map_or_else(|| "nothing".to_string(), short);
                return Err(format!(
                    "invalid params: `params.{k}` must be {what}. Given: {given}"
                ));
            }
        }
        return Ok(());
    }
    if method != "tools/call" {
        return Ok(());
    }
    match obj.get("name") {
        Some(Value::String(n)) if !n.is_empty() => {}
        other => {
            let given = other.map_or_else(|| "nothing".to_string(), short);
            return Err(format!(
                "invalid params: `params.name` must name a tool (tools/list lists them). Given: {given}"
            ));
        }
    }
    match obj.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => Ok(()),
        Some(other) => Err(format!(
            "invalid params: `params.arguments` must be an object. Given: {}",
            short(other)
        )),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..s.floor_char_boundary(80)])
    } else {
        s
    }
}

/// Middleware: check a POST's body as one JSON-RPC request (module docs)
/// before rmcp reads it; other methods pass untouched.
pub async fn guard(req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let ctype = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if !ctype.starts_with("application/json") {
        let shown = if ctype.is_empty() {
            "none"
        } else {
            ctype.as_str()
        };
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            INVALID_REQUEST,
            format!("invalid request: `Content-Type` must be application/json. Given: {shown}"),
            Value::Null,
        );
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MCP_MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            let (status, message) = if too_large {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "invalid request: the body is over {} bytes",
                        MCP_MAX_BODY_BYTES
                    ),
                )
            } else {
                (
                    StatusCode::BAD_REQUEST,
                    format!("invalid request: the body could not be read: {e}"),
                )
            };
            return rpc_error(status, INVALID_REQUEST, message, Value::Null);
        }
    };
    if let Err((code, message, id)) = check(&bytes) {
        tracing::info!(code, %message, "refused MCP request");
        // A body that is not a JSON-RPC request is an HTTP 400 (MCP Streamable
        // HTTP); a request with bad params is answered like any other JSON-RPC
        // error, with 200, as rmcp answers an unknown method.
        let status = if code == INVALID_PARAMS {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        };
        return rpc_error(status, code, message, id);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_malformed_body_gets_its_jsonrpc_code() {
        let code = |b: &str| check(b.as_bytes()).err();
        let (c, m, _) = code("{not json").expect("refused");
        assert_eq!(c, PARSE_ERROR, "{m}");
        let (c, m, _) = code(r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#).expect("dup");
        assert_eq!(c, PARSE_ERROR);
        assert!(m.contains("method"), "{m}");
        let (c, m, _) = code("[]").expect("batch");
        assert_eq!(c, INVALID_REQUEST);
        assert!(m.contains("batch"), "{m}");
        let (c, _, _) = code("42").expect("scalar");
        assert_eq!(c, INVALID_REQUEST);
        let (c, m, id) = code(r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#).expect("version");
        assert_eq!((c, id), (INVALID_REQUEST, json!(7)));
        assert!(m.contains("`jsonrpc`") && m.contains("\"1.0\""), "{m}");
        let (c, m, _) = code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#).expect("method type");
        assert_eq!(c, INVALID_REQUEST);
        assert!(m.contains("`method`") && m.contains('5'), "{m}");
        assert!(code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
        // Regression (bad-input suite): a number as `params` was a bare 415,
        // and `tools/call` without a name was -32601 "tools/call".
        let (c, m, _) =
            code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":5}"#).expect("params");
        assert_eq!(c, INVALID_PARAMS);
        assert!(m.contains("`params`"), "{m}");
        let (c, m, _) =
            code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#).expect("name");
        assert_eq!(c, INVALID_PARAMS);
        assert!(m.contains("`params.name`"), "{m}");
        let (c, m, _) = code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#).expect("args");
        assert_eq!(c, INVALID_PARAMS);
        assert!(m.contains("`params.arguments`"), "{m}");
        assert!(code(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}"#
        )
        .is_none());
        assert!(code(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_none());
        // Found by the fuzz test: a null id was a bare 415 from rmcp.
        let (c, m, _) =
            code(r#"{"jsonrpc":"2.0","id":null,"method":"x/y","params":{}}"#).expect("null id");
        assert_eq!(c, INVALID_REQUEST);
        assert!(m.contains("`id`"), "{m}");
        // Found by the hostile run: a bad initialize was -32601 "initialize".
        for bad in [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5,"capabilities":{},"clientInfo":{}}}"#,
        ] {
            let (c, m, _) = code(bad).expect("initialize");
            assert_eq!(c, INVALID_PARAMS, "{m}");
            assert!(m.contains("params"), "{m}");
        }
        assert!(code(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_none());
    }
}
