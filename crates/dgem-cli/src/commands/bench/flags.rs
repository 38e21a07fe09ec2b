//! The `--samples` and `--layout` flags of `dgem bench`, parsed by the
//! decision service's parsers (moved from `bench.rs` unchanged).

use dgem_core::schema::{Layout, SamplePolicy};
use dgem_service::ReadOptions;
use serde_json::Value;

use crate::failure::{user, Failure};

/// Parse a `--samples` flag (`dgem bench`): a count from 1 to 32 or `auto`,
/// by the decision service's parser.
///
/// # Errors
/// Exit code 1 naming `--samples`, the allowed values and the value given.
pub fn parse_samples(s: &str) -> Result<SamplePolicy, Failure> {
    let read = ReadOptions {
        samples: dgem_service::options::json_or_string(s).ok(),
        ..ReadOptions::default()
    };
    match read.samples() {
        Ok(Some(p)) => Ok(p),
        _ => Err(user(anyhow::anyhow!(
            "`--samples` must be a count from 1 to 32 or `auto`. Given: `{s}`"
        ))),
    }
}

/// Parse a `--layout` flag (`dgem bench`), by the decision service's parser.
///
/// # Errors
/// Exit code 1 naming `--layout`, the allowed values and the value given.
pub fn parse_layout(s: &str) -> Result<Layout, Failure> {
    let read = ReadOptions {
        layout: Some(Value::String(s.to_string())),
        ..ReadOptions::default()
    };
    match read.layout() {
        Ok(Some(l)) => Ok(l),
        _ => Err(user(anyhow::anyhow!(
            "`--layout` must be one of [document_first, schema_first]. Given: `{}`",
            s.trim()
        ))),
    }
}

/// `--calibrate`: a correction applied once every row of a run is read
/// (`dgem batch`, `dgem bench-calibration`, `dgem bench-jev`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunCalibration {
    /// The reads as they are.
    #[default]
    None,
    /// Batch calibration: each question's mean log-probability over the
    /// run removed from every row, then renormalized (Zhou et al., ICLR
    /// 2024; `dgem_bench::batch::calibrate`).
    Batch,
}
