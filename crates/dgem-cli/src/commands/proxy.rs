//! `dgem bench-proxy`: what dgem itself costs on the vLLM path.
//!
//! One process, one runtime: the in-process fake vLLM (`dgem-fake-vllm`,
//! which speaks vLLM's wire format and stands in for DiffusionGemma), `dgem
//! serve`'s server (its state, routes and layer stack, as `dgem serve
//! --backend vllm=URL` builds them, on `127.0.0.1:0`; no MCP or Studio routes
//! in front, no warm-up decision) over a `VllmDecider` pointed at the fake
//! with the real tokenizer, and the load ([`super::proxy_load`]).
//!
//! First each ticket of the policy is decided once through dgem, one at a
//! time, and the fake keeps the vLLM requests dgem sent for it. Then, at each
//! level of concurrent clients: **dgem** (the clients send chat decisions to
//! dgem, which reads them from the fake) and **baseline** (the same clients
//! replay, straight to the fake, the vLLM request bodies dgem sent for the
//! same decisions). Both sides run the same client code on the same cores, so
//! p50(dgem) − p50(baseline) is what dgem adds per decision: HTTP in and out,
//! parsing and validation, prompt and canvas, tokenizing, the second loopback
//! hop, the readout and the envelope. No number is asserted by a test:
//! machines are noisy.

mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use dgem_backend_vllm::{CanvasProfile, VllmDecider};
use dgem_engine::Decider as _;
use dgem_fake_vllm::{FakeConfig, FakeVllm};
use dgem_server::{AppState, ServeConfig};
use serde_json::{json, Value};

use super::proxy_load::{self, Call, Phase};
use crate::failure::{internal, user, Failure};
use report::Level;

/// Arguments of `dgem bench-proxy`.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// The served model's tokenizer, as `dgem serve --tokenizer`: a
    /// `tokenizer.json` or a `.gguf`. Default: the small embedded model's
    /// GGUF (`gemma3-270m`, Gemma 3) vocabulary from the model cache (pulled
    /// on first use).
    #[arg(long, env = "DGEM_TOKENIZER", value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// Concurrent clients of each level, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: Vec<u32>,
    /// Measured decisions per level (and as many baseline replays); a side
    /// stops earlier when `--seconds` have passed.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub requests: u32,
    /// Longest a side of a level is measured, seconds.
    #[arg(long, default_value_t = 10.0, value_parser = positive_seconds)]
    pub seconds: f64,
    /// Unmeasured requests before each side of each level (opens the
    /// keep-alive connections and warms the caches).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub warmup: u32,
    /// The server's `MAX_INFLIGHT` (decisions at once; 0 = no gate).
    /// Default: `dgem serve`'s (the `MAX_INFLIGHT` variable, else 8).
    #[arg(long = "max-inflight", value_name = "N")]
    pub max_inflight: Option<usize>,
    /// Seconds the first download of the default tokenizer may take (0 = no
    /// limit), as `dgem serve --pull-timeout`.
    #[arg(long = "pull-timeout", env = "DGEM_PULL_TIMEOUT_S", default_value_t = dgem_model::DEFAULT_PULL_TIMEOUT_S as f64, value_name = "SECONDS", value_parser = crate::setup::parse_seconds)]
    pub pull_timeout: f64,
    /// Also write the receipt (settings, every level's figures) as JSON to this file.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err(format!(
            "must be a number of seconds above 0, at most 3600. Given: `{s}`"
        )),
    }
}

/// The canvas profile of `dgem serve`'s default (`plain`, 64 tokens).
const PROFILE: CanvasProfile = CanvasProfile::Plain;

/// Most vLLM requests the fake keeps: the recording pass's (a decision of
/// the bench policy is a few reads at most); the load is counted, not kept.
const KEEP_REQUESTS: usize = 16 * TICKETS.len();

/// The policy: a boolean, a 4-option choice and a 3-level score.
pub(super) fn policy() -> Value {
    json!({
        "instructions": "You are sorting customer tickets for a software company. Base every answer on the ticket text only; do not guess at facts it does not state.",
        "questions": [
            {"id": "urgent", "type": "boolean", "instructions": "Does this ticket need someone today?",
             "criteria": {"true": "a live outage, lost data, a wrong or duplicate charge, or a customer who is blocked from working",
                          "false": "a question, a request or a minor annoyance that can wait in the normal queue"}},
            {"id": "team", "type": "choice", "instructions": "Which team should own this ticket?",
             "options": [{"name": "billing", "description": "charges, refunds, invoices, plans, payment methods"},
                         {"name": "support", "description": "how-to questions, account settings, passwords, general help"},
                         {"name": "engineering", "description": "outages, errors, bugs, crashes, slow or broken features"},
                         {"name": "security", "description": "suspicious logins, leaked keys, phishing, access that should not exist"}]},
            {"id": "sentiment", "type": "score", "instructions": "How upset does the customer sound?",
             "levels": ["calm", "annoyed", "furious"]}
        ]
    })
}

/// Tickets of about 60 words, decided round-robin.
pub(super) const TICKETS: [&str; 8] = [
    "Hi, I was charged twice for my annual renewal this morning, once at 9:02 and again at 9:05, both for the full amount on the same card. My bank shows both as settled, not pending. Please refund the duplicate charge before the weekend, because it pushed my account into overdraft and I am now paying fees for your mistake. Order reference 48213.",
    "Since yesterday's update the export button on the reports page does nothing at all: no download, no error, no spinner. I tried Chrome and Firefox, cleared the cache and logged out and back in. My quarterly report is due to the board at noon tomorrow and I cannot get the numbers out any other way. Please help quickly.",
    "Quick question, no rush: how do I change the email address our invoices are sent to? Our office manager left last month and the invoices still go to her old mailbox, which nobody reads now. I looked in the account settings but only found the login email there, not the billing contact. Thanks in advance for pointing me the right way.",
    "We got an alert that someone signed in to our admin account from another country at three in the morning, and two new API keys were created a minute later. Nobody on our team did this. I have already changed the password, but I do not know how to revoke those keys or check what they were used for. Please look into it today.",
    "Your app keeps crashing on my tablet every time I open a shared folder with more than a few hundred files in it. It worked fine until last week. I reinstalled it twice and restarted the device, same thing. It is annoying because I have to walk back to my desk to open those files on the laptop instead. Version 4.12, Android 14.",
    "I would like to move from the monthly plan to the yearly one to get the discount your sales page mentions, but the upgrade screen only shows the monthly price. Will I be charged the difference right away, or at the next renewal date? And do I keep the extra storage I bought in March? Not urgent, just planning next quarter's budget.",
    "This is the third time I write about this and nobody answers. Our whole team has been locked out since Monday because the single sign-on integration rejects every login with an unknown audience error. We are paying for forty seats we cannot use. If this is not fixed today we will cancel and ask for a refund of this month.",
    "Hello, I think I found a small mistake in your documentation: the page about webhooks says retries happen five times, but the dashboard shows eight attempts for a failed delivery. Not a big deal for us, everything still works, I just wanted to let you know so nobody else gets confused by it. Otherwise we are very happy with the service.",
];

/// The chat request `dgem serve` takes: system = policy, user = state.
fn chat_body(model: &str, ticket: &str) -> String {
    json!({"model": model, "messages": [
        {"role": "system", "content": policy().to_string()},
        {"role": "user", "content": json!({"ticket": ticket}).to_string()}]})
    .to_string()
}

/// Run `dgem bench-proxy`.
///
/// # Errors
/// A user [`Failure`] for bad flags or tokenizer; internal when a decision or
/// a baseline request fails, or the servers cannot start.
pub fn run(args: ProxyArgs) -> Result<(), Failure> {
    let rt = crate::setup::runtime()?;
    let fake = rt
        .block_on(FakeVllm::start(FakeConfig {
            canvas_length: PROFILE.canvas_len(),
            keep_requests: Some(KEEP_REQUESTS),
            ..FakeConfig::default()
        }))
        .map_err(|e| internal(anyhow::anyhow!("could not start the fake vLLM: {e}")))?;
    let vllm = crate::vllm::VllmArgs {
        backend: None,
        tokenizer: args.tokenizer.clone(),
        vllm_model: "dgemma".into(),
        canvas: None,
        canvas_profile: PROFILE.name().into(),
        canvas_step: dgem_backend_vllm::DEFAULT_CANVAS_STEP,
        prompt_file: None,
        no_constrained: false,
        ready_wait_s: 180.0,
        vllm_order_debias: dgem_core::order::OrderDebias::Off,
    };
    let decider = crate::vllm::decider(
        fake.url(),
        &vllm,
        args.pull_timeout,
        crate::pull::Fetch::OneShot,
    )?;
    let tokenizer = args.tokenizer.as_ref().map_or_else(
        || "embedded GGUF (default)".to_owned(),
        |p| p.display().to_string(),
    );
    let levels = rt.block_on(bench(&fake, decider, &args))?;
    report::report(&levels, &args, &tokenizer)
}

/// Start the server, record a decision of each ticket, measure every level.
async fn bench(
    fake: &FakeVllm,
    decider: VllmDecider,
    args: &ProxyArgs,
) -> Result<Vec<Level>, Failure> {
    let mut config = ServeConfig::from_env().map_err(user)?;
    config.host = std::net::Ipv4Addr::LOCALHOST.into();
    config.port = 0;
    config.warmup = false;
    config.api_keys.clear();
    config.cors_origins.clear();
    if let Some(n) = args.max_inflight {
        config.max_inflight = n;
    }
    config.model_name = decider.info().model_id;
    let model = config.model_name.clone();
    let max_inflight = config.max_inflight;
    let listener = dgem_server::bind(config.addr())
        .await
        .map_err(|e| internal(anyhow::anyhow!("could not bind 127.0.0.1:0: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| internal(anyhow::anyhow!("no local address: {e}")))?;
    let state = AppState::new(Arc::new(decider), config);
    let server = tokio::spawn(dgem_server::serve(listener, state, std::future::pending()));
    let result = measure(fake, &format!("http://{addr}"), &model, max_inflight, args).await;
    server.abort();
    result
}

async fn measure(
    fake: &FakeVllm,
    base: &str,
    model: &str,
    max_inflight: usize,
    args: &ProxyArgs,
) -> Result<Vec<Level>, Failure> {
    let chat = format!("{base}/v1/chat/completions");
    let dgem: Vec<Vec<Call>> = TICKETS
        .iter()
        .map(|t| {
            vec![Call {
                url: chat.clone(),
                body: chat_body(model, t),
            }]
        })
        .collect();
    let baseline = record(fake, &dgem).await?;
    let reads = baseline.iter().map(Vec::len).sum::<usize>() as f64 / baseline.len() as f64;
    let (dgem, baseline) = (Arc::new(dgem), Arc::new(baseline));
    let mut levels = Vec::new();
    for &clients in &args.clients {
        let clients = clients as usize;
        let d = side(&dgem, clients, args).await?;
        let b = side(&baseline, clients, args).await?;
        eprintln!(
            "bench-proxy: {clients} clients: dgem {} decisions in {:.1} s, baseline {} in {:.1} s",
            d.items(),
            d.elapsed_s,
            b.items(),
            b.elapsed_s
        );
        levels.push(Level {
            clients,
            dgem: d,
            baseline: b,
            vllm_requests_per_decision: reads,
            max_inflight,
        });
    }
    Ok(levels)
}

/// Warm-up, then the measured phase, on a fresh keep-alive client.
async fn side(
    items: &Arc<Vec<Vec<Call>>>,
    clients: usize,
    args: &ProxyArgs,
) -> Result<Phase, Failure> {
    let http = proxy_load::client(clients).map_err(internal)?;
    let max = Duration::from_secs_f64(args.seconds);
    if args.warmup > 0 {
        proxy_load::run(&http, items, clients, args.warmup as usize, max).await;
    }
    Ok(proxy_load::run(&http, items, clients, args.requests as usize, max).await)
}

/// Decide each ticket once through dgem, one at a time, checking the
/// envelope, and return for each the vLLM requests dgem sent for it, as
/// calls straight to the fake.
async fn record(fake: &FakeVllm, dgem: &[Vec<Call>]) -> Result<Vec<Vec<Call>>, Failure> {
    let http = proxy_load::client(1).map_err(internal)?;
    let mut out = Vec::new();
    for item in dgem {
        let (kept, accepted) = (fake.requests().len(), fake.accepted());
        for call in item {
            let reply = http
                .post(&call.url)
                .header("content-type", "application/json")
                .body(call.body.clone())
                .send()
                .await
                .map_err(|e| internal(anyhow::anyhow!("the recording decision: {e}")))?;
            let status = reply.status().as_u16();
            let text = reply.text().await.map_err(internal)?;
            if status != 200 {
                return Err(internal(anyhow::anyhow!(
                    "the recording decision failed: status {status}: {text}"
                )));
            }
            check_envelope(&text)?;
        }
        let sent: Vec<Call> = fake
            .requests()
            .into_iter()
            .skip(kept)
            .map(|r| Call {
                url: format!("{}{}", fake.url(), r.path),
                body: r.body.to_string(),
            })
            .collect();
        if sent.is_empty() || fake.accepted() - accepted != sent.len() {
            return Err(internal(anyhow::anyhow!(
                "the fake kept {} of the {} vLLM requests of a recording decision (keeps {KEEP_REQUESTS})",
                sent.len(),
                fake.accepted() - accepted
            )));
        }
        out.push(sent);
    }
    Ok(out)
}

/// The chat reply holds an envelope with an answer to every question.
fn check_envelope(text: &str) -> Result<(), Failure> {
    let reply: Value = serde_json::from_str(text).map_err(internal)?;
    let content = reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    let env: Value = serde_json::from_str(content)
        .map_err(|e| internal(anyhow::anyhow!("the reply holds no envelope ({e}): {text}")))?;
    for q in ["urgent", "team", "sentiment"] {
        if env["answers"][q]["probabilities"].is_null() {
            return Err(internal(anyhow::anyhow!(
                "the envelope has no probabilities for `{q}`: {content}"
            )));
        }
    }
    Ok(())
}
