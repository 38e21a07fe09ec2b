//! Server settings: one [`ServeConfig`] resolved from the environment (the names
//! live in [`env`]); the CLI then overrides what its flags set (CLI > env > default).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::http::HeaderValue;
use dgem_core::schema::{Isolate, Layout, SamplePolicy, SchemaDefaults, MAX_SAMPLES};
use dgem_core::words::{self, Word};
use thiserror::Error;

/// Environment variable names read by [`ServeConfig::from_env`] (serving.md §12.3).
pub mod env {
    /// Port to listen on (Cloud Run).
    pub const PORT: &str = "PORT";
    /// Port to listen on (Vertex AI), used when `PORT` is unset.
    pub const AIP_HTTP_PORT: &str = "AIP_HTTP_PORT";
    /// Shared secret: every POST needs `Authorization: Bearer <key>` or `X-DGem-Key: <key>`.
    pub const API_KEY: &str = "API_KEY";
    /// Comma-separated rotation list of further accepted keys (`X-DGem-Key` or bearer).
    pub const DGEM_SERVER_KEY: &str = "DGEM_SERVER_KEY";
    /// Decisions run at once (default 8; 0 disables the gate).
    pub const MAX_INFLIGHT: &str = "MAX_INFLIGHT";
    /// Seconds a request waits for a decision slot before 503 `overloaded` (default 30).
    pub const INFLIGHT_WAIT_S: &str = "INFLIGHT_WAIT_S";
    /// Seconds one request may take in all before 504 (default 300).
    pub const REQUEST_TIMEOUT_S: &str = "REQUEST_TIMEOUT_S";
    /// Largest accepted request body, bytes (default 8 MiB).
    pub const MAX_BODY_BYTES: &str = "MAX_BODY_BYTES";
    /// Samples when a schema has none: a count or `auto` (default 1).
    pub const DEFAULT_SAMPLES: &str = "DEFAULT_SAMPLES";
    /// Layout when a schema has none: `document_first` (default) or `schema_first`.
    pub const DEFAULT_LAYOUT: &str = "DEFAULT_LAYOUT";
    /// Isolation rule when a schema has none: `auto` (default), `noul`, `none` or `all`.
    pub const DEFAULT_ISOLATE: &str = "DEFAULT_ISOLATE";
    /// Version reported by `/health` (default: the crate version).
    pub const DGEM_VERSION: &str = "DGEM_VERSION";
    /// Revision reported by `/health` (default `unknown`).
    pub const DGEM_REVISION: &str = "DGEM_REVISION";
    /// Model name echoed on `/v1/systemone` (default `dgemma`).
    pub const DGEM_SERVED_MODEL: &str = "DGEM_SERVED_MODEL";
    /// Directory `dgem stage` fills; `/health` then reports its progress.
    pub const DGEM_STAGING_DIR: &str = "DGEM_STAGING_DIR";
    /// Seconds a request head may take to arrive; also the idle timeout of a
    /// kept-alive connection (default 30).
    pub const HEADER_READ_TIMEOUT_S: &str = "HEADER_READ_TIMEOUT_S";
    /// Longest pause, seconds, between two pieces of a request body (default 30).
    pub const BODY_READ_TIMEOUT_S: &str = "BODY_READ_TIMEOUT_S";
    /// Most connections open at once (default 1024).
    pub const MAX_CONNECTIONS: &str = "MAX_CONNECTIONS";
    /// Seconds the drain after SIGTERM may take before open connections are
    /// dropped (default 8, inside Cloud Run's 10 s grace period).
    pub const SHUTDOWN_TIMEOUT_S: &str = "SHUTDOWN_TIMEOUT_S";
    /// Comma-separated origins a browser page may call from (`*` for any);
    /// unset = no CORS headers (see `crate::cors`).
    pub const DGEM_CORS_ORIGINS: &str = "DGEM_CORS_ORIGINS";
}

/// A setting in the environment has a value that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("`{var}` must be {expected}. Given: `{given}`")]
pub struct ConfigError {
    /// Variable name.
    pub var: &'static str,
    /// What is allowed.
    pub expected: std::borrow::Cow<'static, str>,
    /// The value found.
    pub given: String,
}

/// Check one configured origin: `*`, or `scheme://host[:port]` with an
/// `http` or `https` scheme and no path (what a browser sends in `Origin`).
///
/// # Errors
/// [`ConfigError`] naming `var`, the form and the value given.
pub fn check_origin(var: &'static str, origin: &str) -> Result<(), ConfigError> {
    let bad = || {
        ConfigError {
        var,
        expected: "`*` or comma-separated origins such as `https://app.example.com` or `http://localhost:3000` (scheme and host, no path)".into(),
        given: origin.to_string(),
    }
    };
    if origin == "*" {
        return Ok(());
    }
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or_else(bad)?;
    let host_ok = !rest.is_empty()
        && !rest.contains(['/', '?', '#', ' ', '@'])
        && HeaderValue::from_str(origin).is_ok();
    if host_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

/// Everything the server needs besides the engine.
#[derive(Clone)]
pub struct ServeConfig {
    /// Address to bind.
    pub host: IpAddr,
    /// Port to bind.
    pub port: u16,
    /// Accepted keys; empty = open server. Redacted in `Debug`.
    pub api_keys: Vec<String>,
    /// Decisions run at once; 0 disables the gate.
    pub max_inflight: usize,
    /// How long a request waits for a slot.
    pub inflight_wait: Duration,
    /// Limit on one whole request.
    pub request_timeout: Duration,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Model name echoed on `/v1/systemone` (and on chat when the request has none).
    pub model_name: String,
    /// Version for `/health`.
    pub version: String,
    /// Revision for `/health`.
    pub revision: String,
    /// Schema defaults of this deployment.
    pub schema_defaults: SchemaDefaults,
    /// Run a warm-up decision when serving starts.
    pub warmup: bool,
    /// After the warm-up decision, cache the calibration priors of every
    /// template in this folder whose policy text does not depend on its
    /// variables ([`crate::priors`]); `/ready` waits for it. `None`: off.
    pub warm_priors: Option<dgem_engine::templates::TemplateDir>,
    /// Weight-staging directory whose progress `/health` reports (serving.md §9.5).
    pub staging_dir: Option<std::path::PathBuf>,
    /// Header-read timeout, connection cap and shutdown deadline.
    pub conn: crate::conn::ConnLimits,
    /// Origins allowed by CORS (`*` = any); empty = CORS off ([`crate::cors`]).
    pub cors_origins: Vec<String>,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field(
                "api_keys",
                &format_args!("[{} redacted]", self.api_keys.len()),
            )
            .field("max_inflight", &self.max_inflight)
            .field("inflight_wait", &self.inflight_wait)
            .field("request_timeout", &self.request_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("model_name", &self.model_name)
            .field("version", &self.version)
            .field("revision", &self.revision)
            .field("schema_defaults", &self.schema_defaults)
            .field("warmup", &self.warmup)
            .field("warm_priors", &self.warm_priors)
            .field("staging_dir", &self.staging_dir)
            .field("conn", &self.conn)
            .field("cors_origins", &self.cors_origins)
            .finish()
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 8080,
            api_keys: Vec::new(),
            max_inflight: 8,
            inflight_wait: Duration::from_secs(30),
            request_timeout: Duration::from_secs(300),
            max_body_bytes: 8 * 1024 * 1024,
            model_name: "dgemma".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            revision: "unknown".into(),
            schema_defaults: SchemaDefaults::default(),
            warmup: true,
            warm_priors: None,
            staging_dir: None,
            conn: crate::conn::ConnLimits::default(),
            cors_origins: Vec::new(),
        }
    }
}

impl ServeConfig {
    /// Resolve from the process environment.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable, the allowed values and the value given.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Resolve from any variable lookup (tests pass a map).
    ///
    /// # Errors
    /// [`ConfigError`] for a value that cannot be used.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut c = Self::default();
        if let Some(p) = get(env::PORT)
            .map(|v| (env::PORT, v))
            .or_else(|| get(env::AIP_HTTP_PORT).map(|v| (env::AIP_HTTP_PORT, v)))
        {
            c.port = parse(p.0, &p.1, "a port number (0-65535)")?;
        }
        c.api_keys = get(env::API_KEY).into_iter().collect();
        if let Some(list) = get(env::DGEM_SERVER_KEY) {
            c.api_keys.extend(
                list.split(',')
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(str::to_string),
            );
        }
        if let Some(v) = get(env::MAX_INFLIGHT) {
            let n: i64 = parse(
                env::MAX_INFLIGHT,
                &v,
                "an integer (0 or less disables the gate)",
            )?;
            c.max_inflight = usize::try_from(n.max(0)).unwrap_or(0);
        }
        if let Some(v) = get(env::INFLIGHT_WAIT_S) {
            c.inflight_wait = seconds(env::INFLIGHT_WAIT_S, &v)?;
        }
        if let Some(v) = get(env::REQUEST_TIMEOUT_S) {
            c.request_timeout = seconds(env::REQUEST_TIMEOUT_S, &v)?;
        }
        if let Some(v) = get(env::MAX_BODY_BYTES) {
            c.max_body_bytes = parse(env::MAX_BODY_BYTES, &v, "a byte count")?;
        }
        if let Some(v) = get(env::DEFAULT_SAMPLES) {
            c.schema_defaults.samples = samples(&v)?;
        }
        if let Some(v) = get(env::DEFAULT_LAYOUT) {
            c.schema_defaults.layout = words::parse_exact::<Layout>(&v)
                .ok_or_else(|| err(env::DEFAULT_LAYOUT, Layout::expected(), &v))?;
            c.schema_defaults.layout_stated = true;
        }
        if let Some(v) = get(env::DEFAULT_ISOLATE) {
            c.schema_defaults.isolate = words::parse_exact::<Isolate>(&v)
                .ok_or_else(|| err(env::DEFAULT_ISOLATE, Isolate::expected(), &v))?;
        }
        if let Some(v) = get(env::DGEM_VERSION) {
            c.version = v;
        }
        if let Some(v) = get(env::DGEM_REVISION) {
            c.revision = v;
        }
        if let Some(v) = get(env::DGEM_SERVED_MODEL) {
            c.model_name = v;
        }
        c.staging_dir = get(env::DGEM_STAGING_DIR).map(std::path::PathBuf::from);
        c.conn = conn_limits(&get)?;
        if let Some(v) = get(env::DGEM_CORS_ORIGINS) {
            c.cors_origins = v
                .split(',')
                .map(str::trim)
                .filter(|o| !o.is_empty())
                .map(str::to_string)
                .collect();
            for o in &c.cors_origins {
                check_origin(env::DGEM_CORS_ORIGINS, o)?;
            }
        }
        Ok(c)
    }

    /// The socket address to bind.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }
}

/// The connection limits from `HEADER_READ_TIMEOUT_S`, `MAX_CONNECTIONS` and
/// `SHUTDOWN_TIMEOUT_S` (`dgem gateway` reads the same variables).
///
/// # Errors
/// [`ConfigError`] for a value that cannot be used (a timeout of 0 or less, a
/// cap of 0).
pub fn conn_limits_from_env() -> Result<crate::conn::ConnLimits, ConfigError> {
    conn_limits(&|k: &str| {
        std::env::var(k)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

fn conn_limits(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<crate::conn::ConnLimits, ConfigError> {
    let mut l = crate::conn::ConnLimits::default();
    if let Some(v) = get(env::HEADER_READ_TIMEOUT_S) {
        l.header_read_timeout = positive_seconds(env::HEADER_READ_TIMEOUT_S, &v)?;
    }
    if let Some(v) = get(env::BODY_READ_TIMEOUT_S) {
        l.body_read_timeout = positive_seconds(env::BODY_READ_TIMEOUT_S, &v)?;
    }
    if let Some(v) = get(env::MAX_CONNECTIONS) {
        l.max_connections = parse(env::MAX_CONNECTIONS, &v, "a positive connection count")?;
        if l.max_connections == 0 {
            return Err(err(env::MAX_CONNECTIONS, "a positive connection count", &v));
        }
    }
    if let Some(v) = get(env::SHUTDOWN_TIMEOUT_S) {
        l.shutdown_timeout = positive_seconds(env::SHUTDOWN_TIMEOUT_S, &v)?;
    }
    Ok(l)
}

fn positive_seconds(var: &'static str, v: &str) -> Result<Duration, ConfigError> {
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(err(var, "a number of seconds above 0 and at most 86400", v)),
    }
}

fn err(
    var: &'static str,
    expected: impl Into<std::borrow::Cow<'static, str>>,
    given: &str,
) -> ConfigError {
    ConfigError {
        var,
        expected: expected.into(),
        given: given.to_string(),
    }
}

fn parse<T: std::str::FromStr>(
    var: &'static str,
    v: &str,
    expected: &'static str,
) -> Result<T, ConfigError> {
    v.parse().map_err(|_| err(var, expected, v))
}

fn seconds(var: &'static str, v: &str) -> Result<Duration, ConfigError> {
    const EXPECTED: &str = "a non-negative number of seconds";
    let s: f64 = parse(var, v, EXPECTED)?;
    Duration::try_from_secs_f64(s).map_err(|_| err(var, EXPECTED, v))
}

fn samples(v: &str) -> Result<SamplePolicy, ConfigError> {
    const EXPECTED: &str = "a positive count or `auto`";
    if v == "auto" {
        return Ok(SamplePolicy::Auto {
            max: 4,
            threshold: 0.1,
        });
    }
    let n: u32 = parse(env::DEFAULT_SAMPLES, v, EXPECTED)?;
    if n == 0 {
        return Err(err(env::DEFAULT_SAMPLES, EXPECTED, v));
    }
    Ok(SamplePolicy::Fixed {
        n: n.min(MAX_SAMPLES),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<ServeConfig, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        ServeConfig::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn port_precedence_and_keys() {
        let c = from(&[("AIP_HTTP_PORT", "9000")]).expect("ok");
        assert_eq!(c.port, 9000);
        let c = from(&[("PORT", "7000"), ("AIP_HTTP_PORT", "9000")]).expect("ok");
        assert_eq!(c.port, 7000);
        let c = from(&[("API_KEY", "k1"), ("DGEM_SERVER_KEY", " k2 , ,k3")]).expect("ok");
        assert_eq!(c.api_keys, ["k1", "k2", "k3"]);
        assert!(!format!("{c:?}").contains("k1"), "keys are redacted");
    }

    #[test]
    fn limits_and_defaults() {
        let c = from(&[
            ("MAX_INFLIGHT", "-1"),
            ("INFLIGHT_WAIT_S", "0.5"),
            ("DEFAULT_SAMPLES", "64"),
        ])
        .expect("ok");
        assert_eq!(c.max_inflight, 0);
        assert_eq!(c.inflight_wait, Duration::from_millis(500));
        assert_eq!(c.schema_defaults.samples, SamplePolicy::Fixed { n: 32 });
        let e = from(&[("DEFAULT_LAYOUT", "sideways")]).expect_err("bad");
        assert_eq!(
            e.to_string(),
            "`DEFAULT_LAYOUT` must be one of [document_first, schema_first]. Given: `sideways`"
        );
    }
}
