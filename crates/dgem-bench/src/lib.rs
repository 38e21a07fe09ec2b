//! # dgem-bench
//!
//! The benchmark harnesses behind `dgem bench*`: dataset loading with
//! line-numbered refusals ([`dataset`], with the field forms it maps in
//! [`mapping`]), a concurrent runner over one shared
//! [`dgem_engine::Engine`] that writes rows as they finish and resumes a killed
//! run ([`runner`]), metric functions with their sources ([`metrics`]), JSON
//! receipts ([`receipt`]), report formats and `--fail-under` gates ([`report`]),
//! the reliability diagram ([`svg`]), one module per harness ([`suites`]),
//! scale-out: a run split by item id ([`shard`]) and the shards' receipts
//! joined again ([`merge`]), and the files of `dgem batch` ([`batch`]).
//!
//! Sits above `dgem-engine` and `dgem-core`; the CLI (`dgem-cli`) adds argument
//! parsing and the progress bar. No clap here.
//!
//! ```
//! use dgem_bench::metrics::{ece_10bin, mcnemar};
//! assert!((ece_10bin(&[(0.9, true), (0.9, false)]) - 0.4).abs() < 1e-12);
//! assert_eq!(mcnemar(0, 0).p_value, 1.0);
//! ```
#![deny(missing_docs)]

pub mod batch;
pub mod calibrate;
pub mod dataset;
mod error;
pub mod mapping;
pub mod merge;
pub mod metrics;
pub mod receipt;
pub mod report;
pub mod runner;
pub mod shard;
pub mod suites;
pub mod svg;

pub use error::BenchError;
