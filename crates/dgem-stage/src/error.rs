//! The one error type of staging, with [`StageError::is_retryable`] deciding
//! which failures a chunk download retries (serving.md §10.1: 4 attempts).

use std::path::PathBuf;

use thiserror::Error;

/// Everything that can go wrong while staging weights.
#[derive(Debug, Error)]
pub enum StageError {
    /// A setting has a value that cannot be used.
    #[error("`{field}` must be {expected}. Given: `{given}`")]
    Config {
        /// Setting name (CLI flag or field).
        field: &'static str,
        /// What is allowed.
        expected: &'static str,
        /// The value received.
        given: String,
    },
    /// An HTTP request failed: connection, timeout, status or body error.
    #[error("request to {url} failed: {message}")]
    Http {
        /// URL requested.
        url: String,
        /// HTTP status, when one came back.
        status: Option<u16>,
        /// What happened.
        message: String,
        /// Whether trying again can help (connection loss, timeout, 429, 5xx).
        retryable: bool,
    },
    /// A range response ended early or ran long (a dropped connection or a wrong server).
    #[error("`{file}`: expected {expected} bytes from offset {offset}, received {received}")]
    ShortBody {
        /// File (relative path).
        file: String,
        /// Start of the range, bytes.
        offset: u64,
        /// Length asked for, bytes.
        expected: u64,
        /// Length received, bytes.
        received: u64,
    },
    /// The file list (manifest or bucket listing) is unusable.
    #[error("file list from {origin} is invalid: {message}")]
    Manifest {
        /// Where the list came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A `.safetensors` file does not start with a usable header.
    #[error("`{file}` is not a safetensors file: {message}")]
    Header {
        /// File (relative path).
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A staged file has the wrong size.
    #[error("`{file}` has {actual} bytes on disk, expected {expected}")]
    Size {
        /// File (relative path).
        file: String,
        /// Expected size, bytes.
        expected: u64,
        /// Size found, bytes.
        actual: u64,
    },
    /// A staged file has the wrong SHA-256.
    #[error("`{file}` has sha256 {actual}, expected {expected}")]
    Checksum {
        /// File (relative path).
        file: String,
        /// Expected lowercase hex digest.
        expected: String,
        /// Digest found.
        actual: String,
    },
    /// A local file operation failed.
    #[error("could not {op} `{path}`: {source}")]
    Io {
        /// What was attempted (`create`, `write`, `rename`, …).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A blocking task panicked or was cancelled.
    #[error("staging task failed: {0}")]
    Task(String),
}

impl StageError {
    /// True for failures a retry can fix: connection loss, timeouts, 408/429/5xx
    /// and bodies that ended early. Wrong checksums, 4xx and local I/O are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Http { retryable, .. } => *retryable,
            Self::ShortBody { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn from_reqwest(url: &str, e: &reqwest::Error) -> Self {
        let status = e.status().map(|s| s.as_u16());
        let retryable = match status {
            Some(s) => s == 408 || s == 429 || s >= 500,
            None => {
                e.is_timeout() || e.is_connect() || e.is_request() || e.is_body() || e.is_decode()
            }
        };
        Self::Http {
            url: url.to_string(),
            status,
            message: error_chain(e),
            retryable,
        }
    }

    pub(crate) fn status(url: &str, status: u16, body: &str) -> Self {
        let snippet = snippet(body);
        Self::Http {
            url: url.to_string(),
            status: Some(status),
            message: format!("HTTP {status}: {snippet}"),
            retryable: status == 408 || status == 429 || status >= 500,
        }
    }
}

/// Most characters of an upstream response body quoted in an error message.
const BODY_SNIPPET: usize = 200;

/// An upstream body for an error message: whitespace (newlines included)
/// collapsed to single spaces, cut to [`BODY_SNIPPET`] characters with `…`.
fn snippet(body: &str) -> String {
    let flat = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = flat.chars().take(BODY_SNIPPET).collect();
    if flat.chars().count() > BODY_SNIPPET {
        out.push('…');
    }
    out
}

/// `e: cause: cause…` on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_classification() {
        assert!(StageError::status("u", 503, "").is_retryable());
        assert!(StageError::status("u", 429, "").is_retryable());
        assert!(!StageError::status("u", 403, "denied").is_retryable());
        let short = StageError::ShortBody {
            file: "a".into(),
            offset: 0,
            expected: 10,
            received: 3,
        };
        assert!(short.is_retryable());
        assert_eq!(
            short.to_string(),
            "`a`: expected 10 bytes from offset 0, received 3"
        );
    }

    #[test]
    fn http_error_body_is_one_line_and_truncated() {
        let page = format!(
            "<html>\n<head><title>403</title></head>\n<body>{}</body></html>",
            "x".repeat(500)
        );
        let e = StageError::status("http://h/m.json", 403, &page);
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert_eq!(
            msg,
            format!(
                "request to http://h/m.json failed: HTTP 403: <html> <head><title>403</title></head> <body>{}…",
                "x".repeat(200 - 45)
            )
        );
    }
}
