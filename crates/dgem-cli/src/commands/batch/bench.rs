//! `dgem bench-batch`: decisions per second of `dgem batch` against
//! `dgem serve` driven by concurrent HTTP clients, on one engine in one
//! process, so the ratio compares the two paths and not two machines.
//!
//! Each round decides `--rows` new tickets of `support_triage` both ways,
//! in alternating order (the first path of a round does not always meet the
//! colder caches):
//!
//! - **serve**: `dgem serve`'s router on a local port, sized for its
//!   clients (`MAX_INFLIGHT` = `--clients`, no gate timeout: the router
//!   `dgem batch` runs OpenAI Batch rows on, [`super::chat_route`]),
//!   `--clients` HTTP clients posting the rendered policy as
//!   chat-completions bodies until the tickets run out;
//! - **batch**: the same tickets as a JSON Lines file, decided by the
//!   pipeline `dgem batch` runs (its default workers), into a fresh output.
//!
//! Before the rounds one decision by each path reads the policy's priors, so
//! no round pays for a new policy. The receipt holds every round's
//! decisions/s and the median ratio batch/serve (goal ≥ 1.0: a batch is at
//! least as fast as a server fed by many clients).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Args;
use dgem_bench::batch::input::RowSpec;
use dgem_service::{Catalogue, DecisionRequest, Service};
use serde_json::{json, Map, Value};

use super::{progress, Ctx, Job};
use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

/// The policy both paths decide.
const POLICY: &str = "support_triage";

/// Arguments of `dgem bench-batch`.
#[derive(Debug, Args)]
pub struct BenchBatchArgs {
    /// Rounds (each decides `--rows` tickets by each path); medians are
    /// over rounds. An even count lets each path go first equally often.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// New tickets per path per round.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub rows: u32,
    /// HTTP clients driving `dgem serve`.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub clients: u32,
    /// Rows `dgem batch` decides at once (its `--workers`).
    #[arg(short = 'w', long = "workers", default_value_t = 8)]
    pub workers: usize,
    /// Write the JSON receipt here.
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// A ticket no earlier read has seen.
fn ticket(n: u32) -> String {
    format!(
        "Hello, I was charged twice for my subscription this month and I would like the extra charge refunded. My order reference is {}.",
        70_000 + n
    )
}

/// Median of `xs` (the mean of the middle two for an even count; 0 for
/// none).
fn median(xs: &[f64]) -> f64 {
    dgem_bench::metrics::stats::percentile(xs, 0.5)
}

/// Run `dgem bench-batch`.
pub fn run(args: BenchBatchArgs) -> Result<(), Failure> {
    let decider: Arc<dyn dgem_engine::Decider> = Arc::new(setup::engine(&args.model)?);
    let rt = setup::runtime()?;
    rt.block_on(rounds(decider, &args))
}

async fn rounds(
    decider: Arc<dyn dgem_engine::Decider>,
    args: &BenchBatchArgs,
) -> Result<(), Failure> {
    // The tree as the binary was started on it (a run takes minutes).
    let version = dgem_bench::receipt::VersionInfo::current();
    let catalogue = Catalogue::new(crate::commands::templates::catalogue());
    let service = Service::new(catalogue.clone());
    let ctx = Arc::new(Ctx {
        service,
        decider: decider.clone(),
        base: DecisionRequest {
            template: Some(POLICY.into()),
            ..DecisionRequest::default()
        },
        chat: None,
    });
    // The server, on a local port, as `dgem serve` runs it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(internal)?;
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().map_err(internal)?
    );
    let router = super::chat_route(&decider, args.clients as usize, Arc::default());
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let client = reqwest::Client::new();
    let body = |n: u32| -> Result<Value, Failure> {
        let mut vars = Map::new();
        vars.insert("ticket".into(), json!(ticket(n)));
        let payload = catalogue
            .preview(POLICY, vars, false)
            .map_err(|e| internal(anyhow::anyhow!("{e}")))?;
        Ok(json!({"model": "dgem", "messages": [
            {"role": "system", "content": payload.schema.to_string()},
            {"role": "user", "content": payload.state.to_string()},
        ]}))
    };
    let dir = tempfile_dir()?;
    let mut next = 0u32;
    let mut take = |k: u32| {
        let start = next;
        next += k;
        start..start + k
    };
    // Priors and caches of the policy, read once by each path.
    serve_round(
        &client,
        &url,
        take(1).map(&body).collect::<Result<_, _>>()?,
        1,
    )
    .await?;
    batch_round(&ctx, &dir, 0, take(1), args.workers).await?;
    let mut serve_dps = Vec::new();
    let mut batch_dps = Vec::new();
    for round in 0..args.rounds {
        let serve_bodies: Vec<Value> = take(args.rows).map(&body).collect::<Result<_, _>>()?;
        let batch_tickets = take(args.rows);
        let (s, b) = if round % 2 == 0 {
            let s = serve_round(&client, &url, serve_bodies, args.clients).await?;
            (
                s,
                batch_round(&ctx, &dir, round + 1, batch_tickets, args.workers).await?,
            )
        } else {
            let b = batch_round(&ctx, &dir, round + 1, batch_tickets, args.workers).await?;
            (
                serve_round(&client, &url, serve_bodies, args.clients).await?,
                b,
            )
        };
        eprintln!(
            "round {}: serve {s:.3} decisions/s, batch {b:.3} decisions/s, ratio {:.3}",
            round + 1,
            b / s
        );
        serve_dps.push(s);
        batch_dps.push(b);
    }
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
    let ratios: Vec<f64> = batch_dps
        .iter()
        .zip(&serve_dps)
        .map(|(b, s)| b / s)
        .collect();
    let info = decider.info();
    let receipt = json!({
        "dgem": version,
        "created_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "model": info.model_id,
        "policy": POLICY,
        "rounds": args.rounds,
        "rows": args.rows,
        "clients": args.clients,
        "workers": args.workers,
        "serve_max_inflight": args.clients,
        "scenarios": {
            "serve": {"what": format!("dgem serve, {} HTTP clients: decisions/s", args.clients), "decisions_per_s": serve_dps, "median": median(&serve_dps)},
            "batch": {"what": format!("dgem batch, {} workers: decisions/s", args.workers), "decisions_per_s": batch_dps, "median": median(&batch_dps)},
            "batch_vs_serve": {"what": "batch decisions/s over serve decisions/s", "ratios": ratios, "median": median(&ratios), "goal": 1.0},
        },
    });
    println!(
        "dgem batch vs dgem serve ({} clients), {} rounds of {} decisions on {}:\n  serve  {:.3} decisions/s (median)\n  batch  {:.3} decisions/s (median)\n  ratio  {:.3} (goal ≥ 1.0)",
        args.clients,
        args.rounds,
        args.rows,
        info.model_id,
        median(&serve_dps),
        median(&batch_dps),
        median(&ratios)
    );
    if let Some(out) = &args.out {
        let text = serde_json::to_string_pretty(&receipt).map_err(internal)?;
        std::fs::write(out, text + "\n")
            .map_err(|e| user(anyhow::anyhow!("`--out` {}: {e}", out.display())))?;
    }
    Ok(())
}

/// A folder for the rounds' files, removed at exit.
fn tempfile_dir() -> Result<PathBuf, Failure> {
    let dir = std::env::temp_dir().join(format!("dgem-bench-batch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(internal)?;
    Ok(dir)
}

/// Decisions/s of `bodies` posted by `clients` clients until none is left.
async fn serve_round(
    client: &reqwest::Client,
    url: &str,
    bodies: Vec<Value>,
    clients: u32,
) -> Result<f64, Failure> {
    let n = bodies.len();
    let queue = Arc::new(Mutex::new(VecDeque::from(bodies)));
    let started = Instant::now();
    let workers = (0..clients).map(|_| {
        let queue = queue.clone();
        let client = client.clone();
        let url = url.to_string();
        async move {
            loop {
                let Some(body) = queue.lock().ok().and_then(|mut q| q.pop_front()) else {
                    return Ok::<(), Failure>(());
                };
                let r = client
                    .post(&url)
                    .json(&body)
                    .send()
                    .await
                    .map_err(internal)?;
                let status = r.status();
                let text = r.text().await.map_err(internal)?;
                if !status.is_success() {
                    return Err(internal(anyhow::anyhow!("serve answered {status}: {text}")));
                }
            }
        }
    });
    for r in futures_util::future::join_all(workers).await {
        r?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// Decisions/s of `dgem batch`'s pipeline over `tickets`, as a file.
async fn batch_round(
    ctx: &Arc<Ctx>,
    dir: &std::path::Path,
    round: u32,
    tickets: std::ops::Range<u32>,
    workers: usize,
) -> Result<f64, Failure> {
    let input = dir.join(format!("in-{round}.jsonl"));
    let n = tickets.len();
    let text: String = tickets
        .map(|i| format!("{}\n", json!({"id": format!("t{i}"), "ticket": ticket(i)})))
        .collect();
    std::fs::write(&input, text).map_err(internal)?;
    let job = Job {
        input,
        output: dir.join(format!("out-{round}.jsonl")),
        format: None,
        spec: RowSpec {
            id_field: "id".into(),
            map: Vec::new(),
        },
        shard: None,
        workers,
        dedupe: true,
        overwrite: true,
        ordered: false,
        depends_on: Value::Null,
    };
    let started = Instant::now();
    let opened = job.open()?;
    let summary = opened.run(ctx, &job, &progress::Bar::hidden()).await?;
    let secs = started.elapsed().as_secs_f64();
    if summary.failed > 0 || summary.decided != n {
        return Err(internal(anyhow::anyhow!(
            "the batch round decided {} of {n} rows ({} failed)",
            summary.decided,
            summary.failed
        )));
    }
    Ok(n as f64 / secs)
}
