//! `dgem stage SRC DEST`: copy model weights into DEST so an engine can start
//! at once (serving.md §10; the library is `dgem-stage`). Progress goes to
//! `DEST/.dgem-stage/progress.json`, which `dgem serve --staging-dir DEST`
//! reports on `/health`; `DEST/.ready` appears when every file is verified.

use std::path::PathBuf;

use clap::Args;
use dgem_stage::{stage, Source, StageConfig, StageError};

use crate::failure::{internal, user, Failure};
use crate::setup;

/// Arguments of `dgem stage`.
#[derive(Debug, Args)]
pub struct StageArgs {
    /// Source: `gs://BUCKET[/PREFIX]`, an http(s) URL publishing `dgem-manifest.json`
    /// (or the manifest's own URL), or a local directory.
    pub src: String,
    /// Destination directory (created if missing; e.g. `/tmp/dgemma` on tmpfs).
    pub dest: PathBuf,
    /// Concurrent range requests for safetensors bodies.
    #[arg(long, env = "DGEM_STAGE_PARALLEL", default_value_t = 64)]
    pub parallel: usize,
    /// Body chunk size in MiB (one range request each).
    #[arg(long, env = "DGEM_STAGE_CHUNK_MIB", default_value_t = 64)]
    pub chunk_mib: u64,
    /// Attempts per range request (dropped connections, 429 and 5xx are retried).
    #[arg(long, env = "DGEM_STAGE_ATTEMPTS", default_value_t = 4)]
    pub attempts: u32,
    /// Bearer token for Cloud Storage (prefer `--token-env`: flags show up in `ps`).
    #[arg(long)]
    pub token: Option<String>,
    /// Environment variable holding the bearer token.
    #[arg(long, default_value = "GCS_TOKEN")]
    pub token_env: String,
    /// Do not ask the GCE/Cloud Run metadata server for a token when none is given.
    #[arg(long, env = "DGEM_STAGE_NO_METADATA")]
    pub no_metadata: bool,
    /// Cloud Storage JSON API base URL (tests and emulators).
    #[arg(long, env = "DGEM_GCS_API", default_value = dgem_stage::source::GCS_API)]
    pub gcs_api: String,
}

/// Stage, print a one-line summary to stderr and the summary JSON to stdout.
pub fn run(args: StageArgs) -> Result<(), Failure> {
    check_flags(&args).map_err(|m| user(anyhow::anyhow!(m)))?;
    let source = Source::parse(&args.src).map_err(user)?;
    let mut cfg = StageConfig::new(source, args.dest.clone());
    cfg.parallel = args.parallel;
    cfg.chunk_size = args.chunk_mib.saturating_mul(1 << 20);
    cfg.attempts = args.attempts;
    cfg.gcs_api = args.gcs_api.clone();
    let rt = setup::runtime()?;
    rt.block_on(async move {
        cfg.token = token(&args, &cfg.source).await;
        let summary = stage(cfg).await.map_err(classify)?;
        let gib = summary.bytes_total as f64 / f64::from(1u32 << 30);
        let mib_s = summary.bytes_fetched as f64 / f64::from(1u32 << 20) / summary.seconds.max(1e-3);
        eprintln!(
            "dgem stage: {gib:.2} GiB in {} files staged into {} in {:.1} s ({mib_s:.0} MiB/s fetched)",
            summary.files,
            args.dest.display(),
            summary.seconds
        );
        let json = serde_json::to_string(&summary).map_err(internal)?;
        println!("{json}");
        Ok(())
    })
}

/// Range-check the numeric flags in the units the user typed them in.
///
/// # Errors
/// A message naming the flag, the allowed range and the value received.
fn check_flags(args: &StageArgs) -> Result<(), String> {
    if !(1..=1024).contains(&args.parallel) {
        return Err(format!(
            "`--parallel` must be between 1 and 1024. Given: `{}`",
            args.parallel
        ));
    }
    if !(1..=4096).contains(&args.chunk_mib) {
        return Err(format!(
            "`--chunk-mib` must be between 1 and 4096 (MiB). Given: `{}`",
            args.chunk_mib
        ));
    }
    if !(1..=100).contains(&args.attempts) {
        return Err(format!(
            "`--attempts` must be between 1 and 100. Given: `{}`",
            args.attempts
        ));
    }
    Ok(())
}

/// `--token`, then the variable named by `--token-env`, then (for buckets) the
/// metadata server; none is fine for public sources.
async fn token(args: &StageArgs, source: &Source) -> Option<String> {
    if let Some(t) = args.token.clone().filter(|t| !t.is_empty()) {
        return Some(t);
    }
    if let Some(t) = std::env::var(&args.token_env)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        return Some(t.trim().to_string());
    }
    if !source.is_gcs() || args.no_metadata {
        return None;
    }
    let host = std::env::var("GCE_METADATA_HOST")
        .unwrap_or_else(|_| dgem_stage::token::METADATA_HOST.to_string());
    match dgem_stage::token::metadata_token(&host).await {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(error = %e, "no metadata-server token; trying the bucket without one");
            None
        }
    }
}

/// Bad settings and file lists are the user's; the rest is an internal failure.
fn classify(e: StageError) -> Failure {
    match e {
        StageError::Config { .. } | StageError::Manifest { .. } => user(e),
        StageError::Http {
            status: Some(401 | 403 | 404),
            ..
        } => user(e),
        _ => internal(e),
    }
}
