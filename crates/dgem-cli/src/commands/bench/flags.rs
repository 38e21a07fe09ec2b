//! The `--samples` and `--layout` flags of `dgem bench`, parsed by the same
//! parses as `dgem decide`'s and the request keys'
//! ([`dgem_core::schema::request_samples`], [`dgem_core::words`]).

use dgem_core::schema::{request_samples, Layout, SamplePolicy};
use dgem_core::words;

use crate::failure::{user, Failure};

/// Parse a `--samples` flag (`dgem bench`): a count from 1 to 32 or `auto`.
///
/// # Errors
/// Exit code 1 naming `--samples`, the allowed values and the value given.
pub fn parse_samples(s: &str) -> Result<SamplePolicy, Failure> {
    request_samples::from_flag(s).map_err(|e| user(anyhow::anyhow!("`--samples` {e}")))
}

/// Parse a `--layout` flag (`dgem bench`).
///
/// # Errors
/// Exit code 1 naming `--layout`, the allowed values and the value given.
pub fn parse_layout(s: &str) -> Result<Layout, Failure> {
    words::from_flag::<Layout>(s).map_err(|e| user(anyhow::anyhow!("`--layout` {e}")))
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
