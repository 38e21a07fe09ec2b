//! `dgem bench-host`: what a second `dgem decide` in a shell costs with a
//! warm host, against what it could cost at best: an in-process warm
//! decision plus starting a process.
//!
//! In one run, with the same model flags throughout, and new tickets of
//! `support_triage` each round:
//!
//! - **process start**: `dgem --version`, wall time;
//! - **warm**: a decision in this process on an engine already loaded, with
//!   the policy's priors read and its order prior learned (both the host
//!   and this engine first decide `PRIOR_DECISIONS` = 3 other tickets, the
//!   states a learned prior needs; see `dgem_engine::policy_prior`);
//! - **via host**: a `dgem host run` is started on a private socket folder
//!   and read once for the policy's priors; each round then runs
//!   `dgem decide … --json` as a shell would, wall time;
//! - **no host**: the same call with `--host off`, which loads the model
//!   itself (what every call cost before the host), for scale.
//!
//! The receipt holds each round's milliseconds, their medians, and the ratio
//! `via host / (warm + process start)` (goal ≤ 1.5).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser};
use dgem_service::{Catalogue, DecisionRequest, Service};
use serde_json::{json, Map, Value};

use super::{ask, HostRequest};
use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

const POLICY: &str = "support_triage";

/// Arguments of `dgem bench-host`.
#[derive(Debug, Args)]
pub struct BenchHostArgs {
    /// Rounds; medians are over rounds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// The model (a name from `dgem model list`, or a GGUF path); the
    /// host, the `decide` calls and the warm engine all use it.
    #[arg(long = "model", value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// Write the JSON receipt here.
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
}

/// The model flags as `ModelArgs`, parsed as a child process parses them.
#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    model: ModelArgs,
}

fn ticket(n: u32) -> String {
    format!(
        "My invoice shows a charge I do not recognise, please explain it. Reference {}.",
        90_000 + n
    )
}

/// Median of `xs` (the mean of the middle two for an even count; 0 for
/// none).
fn median(xs: &[f64]) -> f64 {
    dgem_bench::metrics::stats::percentile(xs, 0.5)
}

/// A child `dgem` with `args`, the model flag, and the private host folder.
fn dgem(args: &[&str], model: &[String], dir: &std::path::Path) -> Result<Command, Failure> {
    let mut c = Command::new(std::env::current_exe().map_err(internal)?);
    c.args(args)
        .args(model)
        .env("DGEM_HOST_DIR", dir)
        .env_remove("DGEM_USE_HOST")
        .stdin(Stdio::null());
    Ok(c)
}

/// Wall ms of one child run; it must exit 0.
fn timed(mut c: Command) -> Result<f64, Failure> {
    let started = Instant::now();
    let o = c.output().map_err(internal)?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    if !o.status.success() {
        return Err(internal(anyhow::anyhow!(
            "a child dgem failed: {}",
            String::from_utf8_lossy(&o.stderr)
        )));
    }
    Ok(ms)
}

/// Stops the host when the bench ends, however it ends.
struct Host(std::process::Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run `dgem bench-host`.
pub fn run(args: BenchHostArgs) -> Result<(), Failure> {
    let version = dgem_bench::receipt::VersionInfo::current();
    let model: Vec<String> = args
        .model
        .iter()
        .flat_map(|m| ["--model".to_string(), m.clone()])
        .collect();
    let mut argv = vec!["flags".to_string()];
    argv.extend(model.iter().cloned());
    let flags = Flags::try_parse_from(&argv).map_err(|e| user(anyhow::anyhow!("{e}")))?;
    let dir = std::env::temp_dir().join(format!("dgem-bench-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(internal)?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(internal)?;
    }
    let socket = super::socket_in(&dir, &flags.model);
    // The host, as `dgem host run` runs it.
    let mut h = dgem(&["host", "run", "--idle-timeout", "600"], &model, &dir)?;
    let _host = Host(
        h.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(internal)?,
    );
    let rt = setup::runtime()?;
    let started = Instant::now();
    while rt
        .block_on(ask(&socket, HostRequest::Ping, Duration::from_secs(5)))
        .is_none()
    {
        if started.elapsed() > Duration::from_secs(900) {
            return Err(internal(anyhow::anyhow!("the host was not ready in 900 s")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The warm engine in this process.
    let engine: Arc<dyn dgem_engine::Decider> = Arc::new(setup::engine(&flags.model)?);
    let service = Service::new(Catalogue::new(crate::commands::templates::catalogue()));
    let warm = |n: u32| -> Result<f64, Failure> {
        let mut vars = Map::new();
        vars.insert("ticket".into(), json!(ticket(n)));
        let req = DecisionRequest {
            template: Some(POLICY.into()),
            variables: Some(vars),
            ..DecisionRequest::default()
        };
        let prepared = service
            .prepare(None, req)
            .map_err(crate::commands::after::service_failure)?;
        let t = Instant::now();
        rt.block_on(service.decide(engine.as_ref(), prepared))
            .map_err(crate::failure::decider)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let decide = |n: u32| -> Result<f64, Failure> {
        let var = format!("ticket={}", ticket(n));
        timed(dgem(
            &["decide", "-t", POLICY, "-v", &var, "--json"],
            &model,
            &dir,
        )?)
    };
    // Priors and caches of the policy, each way: `--order-debias prior` reads
    // a policy's first PRIOR_DECISIONS distinct states in every listing to
    // learn its prior, so the rounds start once both the host and this
    // engine have read that many (tickets the rounds never use).
    for i in 0..dgem_engine::policy_prior::PRIOR_DECISIONS as u32 {
        warm(500 + i)?;
        decide(600 + i)?;
    }
    let alone = |n: u32| -> Result<f64, Failure> {
        let var = format!("ticket={}", ticket(n));
        timed(dgem(
            &[
                "decide", "-t", POLICY, "-v", &var, "--json", "--host", "off",
            ],
            &model,
            &dir,
        )?)
    };
    let (mut start_ms, mut warm_ms, mut host_ms, mut alone_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..args.rounds {
        start_ms.push(timed(dgem(&["--version"], &[], &dir)?)?);
        warm_ms.push(warm(10 + 3 * r)?);
        host_ms.push(decide(11 + 3 * r)?);
        alone_ms.push(alone(12 + 3 * r)?);
        let i = r as usize;
        eprintln!(
            "round {}: process start {:.0} ms, warm {:.0} ms, via host {:.0} ms, no host {:.0} ms",
            r + 1,
            start_ms[i],
            warm_ms[i],
            host_ms[i],
            alone_ms[i]
        );
    }
    let _ = rt.block_on(ask(&socket, HostRequest::Stop, Duration::from_secs(5)));
    let _ = std::fs::remove_dir_all(&dir);
    let ratio = median(&host_ms) / (median(&start_ms) + median(&warm_ms));
    let info = engine.info();
    println!(
        "a second `dgem decide` via a warm host, {} rounds on {}:\n  process start {:.0} ms, warm decision {:.0} ms, via host {:.0} ms, no host {:.0} ms (medians)\n  ratio via host / (warm + start) = {ratio:.2} (goal ≤ 1.5)",
        args.rounds,
        info.model_id,
        median(&start_ms),
        median(&warm_ms),
        median(&host_ms),
        median(&alone_ms)
    );
    if let Some(out) = &args.out {
        let receipt: Value = json!({
            "dgem": version,
            "created_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "model": info.model_id,
            "policy": POLICY,
            "rounds": args.rounds,
            "scenarios": {
                "process_start": {"what": "`dgem --version`, wall ms", "ms": start_ms, "median_ms": median(&start_ms)},
                "warm": {"what": "in-process warm decision, ms", "ms": warm_ms, "median_ms": median(&warm_ms)},
                "via_host": {"what": "`dgem decide --json` with a warm host, wall ms", "ms": host_ms, "median_ms": median(&host_ms)},
                "no_host": {"what": "`dgem decide --json --host off` (loads the model), wall ms", "ms": alone_ms, "median_ms": median(&alone_ms)},
                "via_host_ratio": {"what": "via_host / (warm + process_start)", "median": ratio, "goal": 1.5},
            },
        });
        let text = serde_json::to_string_pretty(&receipt).map_err(internal)? + "\n";
        std::fs::write(out, text)
            .map_err(|e| user(anyhow::anyhow!("`--out` {}: {e}", out.display())))?;
    }
    Ok(())
}
