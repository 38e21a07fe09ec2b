//! `dgem serve --config FILE`: the server's settings in a TOML file, as an
//! alternative to environment variables.
//!
//! Every key is the snake_case name of a setting; the environment variable
//! of the same setting wins over the file, and a flag wins over both
//! (flag > environment > file > default). A key the server does not know is
//! an error that lists the known ones, so a typo does not silently leave a
//! default in place; a value of the wrong type names the file, the key, what
//! is allowed and what was given.
//!
//! ```toml
//! port = 8080
//! api_keys = ["key-one", "key-two"]
//! max_inflight = 4
//! request_timeout_s = 120
//! cors_origins = ["https://app.example.com"]
//! default_samples = "auto"
//! studio = true
//! model = "/models/gemma-3-4b-it-q4_k_m.gguf"
//! threads = 4
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::config::{env, ConfigError};

/// Keys that set a [`crate::ServeConfig`] field, with the environment
/// variable they stand for (its parsing and limits apply).
pub const SERVER_KEYS: &[(&str, &str)] = &[
    ("port", env::PORT),
    ("api_keys", env::DGEM_SERVER_KEY),
    ("max_inflight", env::MAX_INFLIGHT),
    ("inflight_wait_s", env::INFLIGHT_WAIT_S),
    ("request_timeout_s", env::REQUEST_TIMEOUT_S),
    ("max_body_bytes", env::MAX_BODY_BYTES),
    ("default_samples", env::DEFAULT_SAMPLES),
    ("default_layout", env::DEFAULT_LAYOUT),
    ("default_isolate", env::DEFAULT_ISOLATE),
    ("served_model", env::DGEM_SERVED_MODEL),
    ("staging_dir", env::DGEM_STAGING_DIR),
    ("header_read_timeout_s", env::HEADER_READ_TIMEOUT_S),
    ("body_read_timeout_s", env::BODY_READ_TIMEOUT_S),
    ("max_connections", env::MAX_CONNECTIONS),
    ("shutdown_timeout_s", env::SHUTDOWN_TIMEOUT_S),
    ("cors_origins", env::DGEM_CORS_ORIGINS),
];

/// Keys the `dgem serve` command reads itself (its flags): `host`, `studio`,
/// `templates`, `warmup`, `warm_priors`, `model`, `threads`, `context`.
pub const COMMAND_KEYS: &[&str] = &[
    "host",
    "studio",
    "templates",
    "warmup",
    "warm_priors",
    "model",
    "threads",
    "context",
];

/// A config file that cannot be used.
#[derive(Debug, Error)]
pub enum FileError {
    /// The file cannot be read.
    #[error("`--config` {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not TOML (the message has the line and column).
    #[error("`--config` {path}: not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A key the server does not read.
    #[error("`--config` {path}: unknown key `{key}`; the keys are [{allowed}]")]
    Unknown {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// Every known key, comma-separated.
        allowed: String,
    },
    /// A value of the wrong type or out of its limits.
    #[error("`--config` {path}: `{key}` must be {expected}. Given: {given}")]
    Value {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is allowed.
        expected: String,
        /// The value found.
        given: String,
    },
}

/// The settings of a config file, as text in the form of the environment
/// variable each stands for (lists joined with commas).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigFile {
    /// The file read.
    pub path: PathBuf,
    /// Key → value text.
    pub values: BTreeMap<String, String>,
}

fn text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Array(a) => a
            .iter()
            .map(|x| match x {
                toml::Value::Array(_) | toml::Value::Table(_) => None,
                other => text(other),
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.join(",")),
        toml::Value::Datetime(_) | toml::Value::Table(_) => None,
    }
}

impl ConfigFile {
    /// Read and check `path`.
    ///
    /// # Errors
    /// [`FileError`] naming the file and the key at fault.
    pub fn read(path: &Path) -> Result<Self, FileError> {
        let body = std::fs::read_to_string(path).map_err(|source| FileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &body)
    }

    /// Check the TOML `body` of `path`.
    ///
    /// # Errors
    /// [`FileError`] naming the file and the key at fault.
    pub fn parse(path: &Path, body: &str) -> Result<Self, FileError> {
        let table: toml::Table = body
            .parse()
            .map_err(|e: toml::de::Error| FileError::Syntax {
                path: path.to_path_buf(),
                message: e.to_string().trim().to_string(),
            })?;
        let mut values = BTreeMap::new();
        for (key, v) in &table {
            let known =
                SERVER_KEYS.iter().any(|(k, _)| k == key) || COMMAND_KEYS.contains(&key.as_str());
            if !known {
                let allowed: Vec<&str> = SERVER_KEYS
                    .iter()
                    .map(|(k, _)| *k)
                    .chain(COMMAND_KEYS.iter().copied())
                    .collect();
                return Err(FileError::Unknown {
                    path: path.to_path_buf(),
                    key: key.clone(),
                    allowed: allowed.join(", "),
                });
            }
            let t = text(v).ok_or_else(|| FileError::Value {
                path: path.to_path_buf(),
                key: key.clone(),
                expected: "a string, number, boolean or a list of them".into(),
                given: v.to_string(),
            })?;
            values.insert(key.clone(), t);
        }
        Ok(Self {
            path: path.to_path_buf(),
            values,
        })
    }

    /// The value of a command key (`host`, `studio`, …), if the file sets it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// The file's value for environment variable `var`, in that variable's form.
    pub fn env_value(&self, var: &str) -> Option<String> {
        SERVER_KEYS
            .iter()
            .find(|(_, v)| *v == var)
            .and_then(|(k, _)| self.values.get(*k).cloned())
    }

    /// Resolve the server settings: the environment through `env`, then this
    /// file, then the defaults.
    ///
    /// # Errors
    /// A [`FileError::Value`] naming the file's key when the bad value came
    /// from the file; the environment's [`ConfigError`] (as a value error
    /// naming the variable) when it came from there.
    pub fn serve_config(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<crate::ServeConfig, FileError> {
        let from_env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        crate::ServeConfig::from_lookup(|k| from_env(k).or_else(|| self.env_value(k))).map_err(
            |e: ConfigError| {
                let key = SERVER_KEYS
                    .iter()
                    .find(|(_, v)| *v == e.var)
                    .map(|(k, _)| *k)
                    .filter(|_| from_env(e.var).is_none());
                match key {
                    Some(k) => FileError::Value {
                        path: self.path.clone(),
                        key: k.to_string(),
                        expected: e.expected.to_string(),
                        given: format!("`{}`", e.given),
                    },
                    None => FileError::Value {
                        path: self.path.clone(),
                        key: format!("(environment) {}", e.var),
                        expected: e.expected.to_string(),
                        given: format!("`{}`", e.given),
                    },
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    fn parse(body: &str) -> Result<ConfigFile, FileError> {
        ConfigFile::parse(Path::new("serve.toml"), body)
    }

    #[test]
    fn file_values_apply_and_the_environment_wins() {
        let f = parse(
            "port = 9001\nmax_inflight = 3\napi_keys = [\"a\", \"b\"]\ncors_origins = [\"https://x.example\"]\nrequest_timeout_s = 12.5\nstudio = true\n",
        )
        .unwrap();
        let c = f.serve_config(|_| None).unwrap();
        assert_eq!(c.port, 9001);
        assert_eq!(c.max_inflight, 3);
        assert_eq!(c.api_keys, ["a", "b"]);
        assert_eq!(c.cors_origins, ["https://x.example"]);
        assert_eq!(c.request_timeout, Duration::from_secs_f64(12.5));
        assert_eq!(f.get("studio"), Some("true"));
        let c = f
            .serve_config(|k| (k == "MAX_INFLIGHT").then(|| "7".to_string()))
            .unwrap();
        assert_eq!(c.max_inflight, 7);
        assert_eq!(c.port, 9001);
    }

    #[test]
    fn unknown_keys_bad_types_and_bad_values_name_the_key() {
        let e = parse("max_inflite = 3\n").unwrap_err().to_string();
        assert!(
            e.contains("unknown key `max_inflite`") && e.contains("max_inflight"),
            "{e}"
        );
        let e = parse("port = [[1]]\n").unwrap_err().to_string();
        assert!(e.contains("`port`"), "{e}");
        let e = parse("port = \n").unwrap_err().to_string();
        assert!(e.contains("not valid TOML") && e.contains("line 1"), "{e}");
        let e = parse("port = 99999\n")
            .unwrap()
            .serve_config(|_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("serve.toml") && e.contains("`port`") && e.contains("`99999`"),
            "{e}"
        );
        let e = parse("default_layout = \"sideways\"\n")
            .unwrap()
            .serve_config(|_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`default_layout`") && e.contains("document_first"),
            "{e}"
        );
    }
}
