//! `dgem bench-speed`: the embedded engine against llama.cpp's own prompt
//! evaluation of the same token ids, in one process and one time window.
//!
//! Each round runs, in this order: the **baseline** (the vendored llama.cpp
//! decoding the cold decision's longest prompt in one batch on an empty KV
//! cache, logits at the last row only, on the same model thread and context;
//! when the decision makes one backend call per question read apart, the
//! longest prompt of each call, each after the prefix it shares with the
//! call before, which is cached first and not timed, the times summed),
//! then dgem's decisions — **cold** (empty KV cache, calibration priors
//! cached), **warm** (the same decision again), **first of policy** (a policy
//! whose priors are not cached yet, empty KV cache), **1 question** vs **8
//! questions** (same state, empty KV cache), and `schema_first` **cold** vs
//! **policy cached** (another state of the same policy read just before).
//! Rounds are interleaved so that load on a shared machine spreads over every
//! scenario alike; each ratio is taken within a round, then summarized as
//! median / min / max over the rounds. No number here is asserted by a test:
//! machines are noisy, so read ratios, not absolute times.
//!
//! Overhead outside the model = a decision's wall time minus the queue and
//! model time its backend calls reported (engine work: prompts, tokenizing,
//! readout, calibration bookkeeping; no HTTP), at 1 and at 16 concurrent
//! callers, and for a state no earlier decision tokenized. `tokenize` times
//! one encode of the cold prompt's text as the engine does it (its lines
//! cached), `tokenize_llama` one llama.cpp encode of the whole text (the
//! tokenizer's share of the overhead before the line cache). `q8_per_token`
//! divides the prompt lengths out of q8 / q1.
//!
//! Throughput: `serial_16` decides 16 states no earlier decision read, one
//! after another (ms per decision); `concurrent_16` decides 16 other new
//! states from 16 callers at once; `throughput_16` is decisions per second at
//! 16 callers over 1 caller (serial / concurrent time per decision, per round).
//! The embedded engine runs one model call at a time, so concurrent callers
//! wait in its queue: this row measures what that costs or saves.
//!
//! One read: `prior_cold` is the cold decision under `--order-debias prior`
//! once the policy's position prior is learned (the canonical listing read
//! once, the prior divided out), `prior_first_of_policy` the first decision
//! of a new policy under it (one of the decisions the prior is learned from:
//! every cyclic listing read), divided by `prior_cold` (goal ≤ 2×).
//! `prior_schema_first_cached` is a new state of a known `schema_first`
//! policy (prior learned, its prefix cached by the decision just before),
//! divided by `new_tokens`: llama.cpp's own evaluation of the tokens of that
//! decision's prompt that the one before did not share, with the shared
//! prefix in the cache (goal ≤ 1.2×: a known policy costs its new tokens).
//!
//! `--one-read` measures only the one-read rows, for a model too slow for
//! the whole table: `baseline` (then the one-read prompt), `prior_*`,
//! `new_tokens`, `prior_schema_first_from_disk` (the cached row after the
//! in-memory cache was emptied, so the policy prefix comes from the disk
//! store as a new process would find it) and the throughput rows, read once
//! on the known `schema_first` policy. Without it the disk store is off, so
//! the cold rows stay cold.
//!
//! `--apart` measures only the long-state rows, as a receipt of their own:
//! `baseline` (the 1-question prompt), `long_q1` and `long_q12` under
//! `document_first`, and the same two under `schema_first`, where each
//! question's prompt reads the state after its own policy prefix.
//!
//! Contention: `contended_1` is the cold decision while one other CPU-bound
//! process runs (a shell busy loop the bench starts for the row and stops
//! after it), `contended_all` the same with one busy loop per core; both are
//! divided by the idle cold decision of the same round (goal for one busy
//! process: ≤ 2.5×). The engine picks each call's threads from the load
//! (`--follow-load`, on by default).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use clap::Args;
use dgem_backend::{Backend, BackendError, BackendInfo, ForwardOutput, Health, SequenceRead};
use dgem_backend_llama::LlamaBackend;
use dgem_core::schema::{Layout, SchemaDefaults, ValidSchema};
use dgem_core::tokenizer::{TokenId, Tokenizer};
use dgem_engine::{DecideRequest, Engine, EngineConfig};
use serde_json::{json, Value};

use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

mod report;
mod rows;

use report::report;
use rows::{concurrent_overhead, cyclic_rows, throughput, tokenizer_rows, BusyLoops};

/// Arguments of `dgem bench-speed`.
#[derive(Debug, Args)]
pub struct SpeedArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Interleaved rounds (at least 5 for a median worth reading).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Also write the per-round times and the summary as JSON to this file.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Measure the one-read rows only (`--order-debias prior`: `baseline`,
    /// `prior_*`, `new_tokens` and the throughput rows read once), for a model
    /// too slow for the whole table, e.g. `--model qwen2.5-coder-1.5b`.
    #[arg(long)]
    pub one_read: bool,
    /// Measure only the rows of questions read apart on a long state:
    /// `baseline` (llama.cpp's evaluation of the 1-question prompt), then 1
    /// and 12 questions under `document_first` (`long_q1`, `long_q12`: every
    /// question's prompt goes on from the KV prefix of the state and the
    /// question block's head, goal ≤ 3×) and
    /// under `schema_first` (`long_q1_schema_first`, `long_q12_schema_first`:
    /// the state is read after each question's own policy prefix).
    #[arg(long, conflicts_with = "one_read")]
    pub apart: bool,
}

/// One backend call as the recorder saw it.
#[derive(Debug, Clone)]
struct Call {
    /// Tokens of each read, up to its last slot (what the model must evaluate).
    prompts: Vec<Vec<TokenId>>,
}

/// A pass-through [`Backend`] that records every `forward` call, so the bench
/// can hand the baseline the very token ids dgem evaluated.
#[derive(Debug)]
struct Recorder {
    inner: Arc<LlamaBackend>,
    calls: Mutex<Vec<Call>>,
}

impl Recorder {
    fn take(&self) -> Vec<Call> {
        self.calls
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default()
    }
}

#[async_trait]
impl Backend for Recorder {
    fn info(&self) -> &BackendInfo {
        self.inner.info()
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        self.inner.tokenizer()
    }

    async fn forward(&self, reads: Vec<SequenceRead>) -> Result<ForwardOutput, BackendError> {
        let prompts = reads
            .iter()
            .map(|r| {
                let end = r.slots.iter().map(|s| s.pos).max().unwrap_or(0);
                r.tokens[..end.min(r.tokens.len())].to_vec()
            })
            .collect();
        let out = self.inner.forward(reads).await?;
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(Call { prompts });
        }
        Ok(out)
    }

    async fn health(&self) -> Health {
        self.inner.health().await
    }
}

/// The support-triage policy the issue measured, with `extra` appended to
/// its instructions (a new policy text: priors not cached) and `layout`.
fn triage(extra: &str, layout: Layout) -> Result<ValidSchema, Failure> {
    schema(
        json!({
            "instructions": format!("You are sorting customer tickets for a software company. Base every answer on the ticket text only; do not guess at facts it does not state.{extra}"),
            "questions": [
                {"id": "urgent", "type": "boolean", "instructions": "Does this ticket need someone today?",
                 "criteria": {"true": "a live outage, lost data, a wrong or duplicate charge, or a customer who is blocked from working",
                              "false": "a question, a request or a minor annoyance that can wait in the normal queue"}},
                {"id": "team", "type": "choice", "instructions": "Which team should own this ticket?",
                 "options": [{"name": "billing", "description": "charges, refunds, invoices, plans, payment methods"},
                             {"name": "support", "description": "how-to questions, account settings, passwords, general help"},
                             {"name": "engineering", "description": "outages, errors, bugs, crashes, slow or broken features"}]},
                {"id": "sentiment", "type": "score", "instructions": "How upset does the customer sound?",
                 "levels": ["calm", "annoyed", "frustrated", "furious"]}
            ]
        }),
        layout,
    )
}

/// A policy of `n` (at most 12) yes/no questions about one ticket (for 1 vs
/// 8 questions, and 1 vs 12 on a long state).
fn questions(n: usize) -> Result<ValidSchema, Failure> {
    const ASKED: [&str; 12] = [
        "Does the customer ask for money back?",
        "Is a service down for the customer?",
        "Does the customer mention a deadline?",
        "Is the customer locked out of the account?",
        "Does the ticket report a bug?",
        "Does the customer threaten to leave?",
        "Is a payment method mentioned?",
        "Does the ticket ask a how-to question?",
        "Does the customer name a competitor?",
        "Is more than one product affected?",
        "Does the customer ask to talk to a person?",
        "Has the customer written about this before?",
    ];
    let qs: Vec<Value> = ASKED
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, q)| json!({"id": format!("q{i}"), "type": "boolean", "instructions": q}))
        .collect();
    schema(
        json!({"instructions": "Answer each question about the ticket.", "questions": qs}),
        Layout::DocumentFirst,
    )
}

fn schema(raw: Value, layout: Layout) -> Result<ValidSchema, Failure> {
    // Stated: each row measures the layout it names, whatever the model's own.
    Ok(ValidSchema::from_value(&raw, &SchemaDefaults::default())
        .map_err(|e| internal(anyhow::anyhow!("bench policy: {e}")))?
        .with_layout(layout))
}

const TICKET_A: &str = "I was charged twice for my renewal this morning, please refund the duplicate charge before the weekend.";
/// A ticket of about 2,000 characters, for 1 against 12 questions on a long
/// state (each question read apart goes on from its shared KV prefix).
const LONG_TICKET: &str = "Hello, I am writing on behalf of a team of forty people who have used your planning product for three years. Since the update last Tuesday our shared boards load slowly, sometimes taking a full minute, and twice this week the board for our largest client showed an empty column where yesterday's tasks had been. We reloaded the page, cleared the browser cache, tried two browsers and the desktop app, and the column came back only after an hour. Nobody on our side changed any setting. We also noticed that the invoice for this month lists fifty seats while we pay for forty, and the card on file was charged the higher amount on the first of the month. Our finance lead asked me to get the difference refunded and to confirm that the seat count will be corrected before the next cycle. On top of that, two of our managers cannot sign in with single sign-on since Monday: they see an error page that says the identity provider is not configured, although it worked for months and our administrator has not touched it. They are now using passwords, which our security policy does not allow for longer than a week. We have a client review on Friday that depends on the boards being complete and fast, so I would be grateful for a reply from someone who can look at the account today. I have attached nothing because your form does not accept files, but I can send screen recordings of the empty column and the slow loading if you tell me where. Please also let me know whether other customers have reported the same problem after the update, and whether there is a status page we can follow. If this cannot be fixed this week we will have to consider moving the client work to another tool, which none of us wants after three good years. Thank you for reading this long message; we appreciate the help your team gave us in the past. Our account is registered under the operations department, and our administrator can be reached at the usual address if you need to verify anything at all.";
const TICKET_B: &str =
    "The export button has done nothing since yesterday's update and my report is due at noon.";

/// What one measured decision cost.
#[derive(Debug, Clone)]
struct Timed {
    wall_ms: f64,
    overhead_ms: f64,
    /// The backend calls it made.
    calls: Vec<Call>,
}

struct Bench {
    backend: Arc<LlamaBackend>,
    recorder: Arc<Recorder>,
    engine: Engine,
    /// The same model with `--order-debias prior` (one read per decision).
    prior: Engine,
}

/// Decide `schema` on one ticket, timed: wall time, and the overhead outside
/// the model (wall time minus the queue and model time the decision reports
/// for all its backend calls, calibration included).
async fn timed(engine: &Engine, schema: &ValidSchema, ticket: &str) -> Result<(f64, f64), Failure> {
    let t = Instant::now();
    let d = engine
        .decide(DecideRequest {
            schema: schema.clone(),
            state: json!({ "ticket": ticket }),
            seed: 42,
        })
        .await
        .map_err(|e| internal(anyhow::anyhow!("bench decision: {e}")))?;
    let wall_ms = t.elapsed().as_secs_f64() * 1e3;
    let model = d.diagnostics.timing.queue_ms + d.diagnostics.timing.forward_ms;
    Ok((wall_ms, (wall_ms - model).max(0.0)))
}

impl Bench {
    async fn decide(&self, schema: &ValidSchema, ticket: &str) -> Result<Timed, Failure> {
        self.recorder.take();
        let (wall_ms, overhead_ms) = timed(&self.engine, schema, ticket).await?;
        Ok(Timed {
            wall_ms,
            overhead_ms,
            calls: self.recorder.take(),
        })
    }

    async fn cold(&self, schema: &ValidSchema, ticket: &str) -> Result<Timed, Failure> {
        self.backend.clear_cache().await.map_err(model_failure)?;
        self.decide(schema, ticket).await
    }

    /// [`Self::cold`] through the `prior` engine: wall ms.
    async fn cold_prior(&self, schema: &ValidSchema, ticket: &str) -> Result<f64, Failure> {
        self.backend.clear_cache().await.map_err(model_failure)?;
        let (wall_ms, _) = timed(&self.prior, schema, ticket).await?;
        self.recorder.take();
        Ok(wall_ms)
    }

    /// A decision through the `prior` engine with the KV cache as the last
    /// one left it: wall ms and the longest prompt of each of its calls.
    async fn warm_prior(
        &self,
        schema: &ValidSchema,
        ticket: &str,
    ) -> Result<(f64, Vec<Vec<TokenId>>), Failure> {
        self.recorder.take();
        let (wall_ms, _) = timed(&self.prior, schema, ticket).await?;
        Ok((wall_ms, call_prompts(&self.recorder.take())))
    }

    /// The longest prompt of each backend call of one cold decision of
    /// `schema`, in call order (one call per question read apart).
    async fn prompts_of(
        &self,
        schema: &ValidSchema,
        ticket: &str,
    ) -> Result<Vec<Vec<TokenId>>, Failure> {
        Ok(call_prompts(&self.cold(schema, ticket).await?.calls))
    }

    /// llama.cpp's own evaluation of a decision's prompts: each one after
    /// what it shares with the one before (that prefix cached first, not
    /// timed), as the engine reuses it. Ms summed, and the tokens evaluated.
    async fn eval_prompts(&self, prompts: &[Vec<TokenId>]) -> Result<(f64, usize), Failure> {
        let (mut ms, mut tokens) = (0.0, 0);
        let mut before: &[TokenId] = &[];
        for p in prompts {
            let (t, new) = self.eval_after(p, before).await?;
            ms += t;
            tokens += new;
            before = p;
        }
        Ok((ms, tokens))
    }

    /// llama.cpp's own evaluation of `prompt` after the prefix it shares
    /// with `before` (cached first, not timed; at least its last token is
    /// evaluated): ms, and the tokens evaluated.
    async fn eval_after(
        &self,
        prompt: &[TokenId],
        before: &[TokenId],
    ) -> Result<(f64, usize), Failure> {
        let shared = shared_before(prompt, before);
        let (ms, _) = self
            .backend
            .prompt_eval(prompt.to_vec(), shared, Vec::new())
            .await
            .map_err(model_failure)?;
        Ok((ms, prompt.len() - shared))
    }
}

/// How much of `prompt` llama.cpp finds cached after `before`: the prefix
/// they share, less at least the last token (evaluated for its logits).
fn shared_before(prompt: &[TokenId], before: &[TokenId]) -> usize {
    prompt
        .iter()
        .zip(before)
        .take_while(|(x, y)| x == y)
        .count()
        .min(prompt.len().saturating_sub(1))
}

/// The tokens [`Bench::eval_prompts`] evaluates for `prompts`, without
/// evaluating them.
fn evaluated_tokens(prompts: &[Vec<TokenId>]) -> usize {
    let mut before: &[TokenId] = &[];
    let mut tokens = 0;
    for p in prompts {
        tokens += p.len() - shared_before(p, before);
        before = p;
    }
    tokens
}

/// The longest prompt of each recorded call, in call order.
fn call_prompts(calls: &[Call]) -> Vec<Vec<TokenId>> {
    calls
        .iter()
        .filter_map(|c| c.prompts.iter().max_by_key(|p| p.len()).cloned())
        .collect()
}

/// `--apart`: 1 against 12 questions on [`LONG_TICKET`], read apart, under
/// each layout; every decision cold (empty KV cache, priors cached).
async fn apart_rows(
    b: &Bench,
    [q1, q12]: [&ValidSchema; 2],
    threads: Option<usize>,
    args: &SpeedArgs,
) -> Result<(), Failure> {
    let sf = |s: &ValidSchema| s.clone().with_layout(Layout::SchemaFirst);
    let (q1_sf, q12_sf) = (sf(q1), sf(q12));
    // Warm-up: every policy's calibration priors.
    for s in [q1, q12, &q1_sf, &q12_sf] {
        b.cold(s, LONG_TICKET).await?;
    }
    let prompts = b.prompts_of(q1, LONG_TICKET).await?;
    let mut times: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut evaluated = 0;
    for round in 0..args.rounds {
        let (base_ms, tokens) = b.eval_prompts(&prompts).await?;
        evaluated = tokens;
        let rows = [
            ("baseline", None),
            ("long_q1", Some(q1)),
            ("long_q12", Some(q12)),
            ("long_q1_schema_first", Some(&q1_sf)),
            ("long_q12_schema_first", Some(&q12_sf)),
        ];
        for (row, schema) in rows {
            let ms = match schema {
                Some(s) => b.cold(s, LONG_TICKET).await?.wall_ms,
                None => base_ms,
            };
            times.entry(row).or_default().push(ms);
        }
        eprintln!("bench-speed: round {} of {} done", round + 1, args.rounds);
    }
    report(&times, evaluated, (0, 0), threads, args)
}

fn model_failure(e: BackendError) -> Failure {
    internal(anyhow::anyhow!("model call: {e}"))
}

/// Run `dgem bench-speed`.
///
/// # Errors
/// A user [`Failure`] for bad model flags; internal when the model fails.
pub fn run(mut args: SpeedArgs) -> Result<(), Failure> {
    // The cold rows of the full table must not find a policy prefix on disk;
    // the one-read rows have none that are cold under `schema_first`, and
    // `prior_schema_first_from_disk` reads the prefix a round before kept.
    args.model.kv_store = args.one_read;
    let (backend, config) = setup::load_llama(&args.model)?;
    let rt = setup::runtime()?;
    rt.block_on(run_rounds(backend, config, &args))
}

async fn run_rounds(
    backend: Arc<LlamaBackend>,
    config: EngineConfig,
    args: &SpeedArgs,
) -> Result<(), Failure> {
    let recorder = Arc::new(Recorder {
        inner: Arc::clone(&backend),
        calls: Mutex::new(Vec::new()),
    });
    let threads = args.model.threads;
    let prior = Engine::new(
        Arc::clone(&recorder) as Arc<dyn Backend>,
        EngineConfig {
            calibration_store: None,
            order_debias: dgem_core::order::OrderDebias::Prior {
                max_orders: dgem_core::order::DEFAULT_MAX_ORDERS,
            },
            ..config.clone()
        },
    );
    let engine = Engine::new(
        Arc::clone(&recorder) as Arc<dyn Backend>,
        EngineConfig {
            // Priors in memory only: "first of policy" stays first every round.
            calibration_store: None,
            // The default reader's rows, whatever the model reads with under
            // `--order-debias auto`.
            order_debias: dgem_core::order::OrderDebias::default(),
            ..config
        },
    );
    let b = Bench {
        backend,
        recorder,
        engine,
        prior,
    };
    let main = triage("", Layout::DocumentFirst)?;
    let sf = triage("", Layout::SchemaFirst)?;
    let (q1, q8) = (questions(1)?, questions(8)?);
    if args.apart {
        return apart_rows(&b, [&q1, &questions(12)?], threads, args).await;
    }
    // Warm-up: priors of every cached-prior scenario, and the cold prompt.
    if !args.one_read {
        for s in [&main, &sf, &q1, &q8] {
            b.cold(s, TICKET_A).await?;
            b.cold(s, TICKET_B).await?;
        }
    }
    // The `prior` engine learns each policy's prior from its first distinct
    // states (read in every cyclic listing); later ones read once.
    for s in [&main, &sf] {
        for i in 0..dgem_engine::policy_prior::PRIOR_DECISIONS {
            b.cold_prior(s, &format!("{TICKET_B} (Earlier ticket {i}.)"))
                .await?;
        }
    }
    // The baseline's prompts: one per backend call of the decision (one per
    // question when they are read apart), each evaluated after what it
    // shares with the one before.
    let prompts = if args.one_read {
        b.backend.clear_cache().await.map_err(model_failure)?;
        b.warm_prior(&main, TICKET_A).await?.1
    } else {
        b.prompts_of(&main, TICKET_A).await?
    };
    let Some(prompt) = prompts.first().filter(|p| !p.is_empty()) else {
        return Err(user(anyhow::anyhow!("the bench policy read no prompt")));
    };
    // The 8-question decision evaluates more tokens than the 1-question one
    // (each question adds its text): print both so the q8/q1 ratio can be
    // read against them.
    let q_tokens = if args.one_read {
        (0, 0)
    } else {
        (
            evaluated_tokens(&b.prompts_of(&q1, TICKET_A).await?),
            evaluated_tokens(&b.prompts_of(&q8, TICKET_A).await?),
        )
    };
    // The cold prompt as text (BOS left out, chat markup written out), for
    // the tokenizer's share of the overhead.
    let tok = b.backend.llama_tokenizer().clone();
    let prompt_text = tok.decode(prompt.get(1..).unwrap_or_default());
    let cores = dgem_backend_llama::cpu::sample().map_or(2, |l| l.online);
    let mut times: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut prompt_tokens = 0;
    let mut push = |k: &'static str, v: f64| times.entry(k).or_default().push(v);
    for round in 0..args.rounds {
        if !args.one_read {
            tokenizer_rows(&b, &main, &tok, &prompt_text, round, &mut push).await?;
        }
        let (base_ms, evaluated) = b.eval_prompts(&prompts).await?;
        prompt_tokens = evaluated;
        push("baseline", base_ms);
        if !args.one_read {
            cyclic_rows(&b, [&main, &sf, &q1, &q8], round, &mut push).await?;
        }
        push("prior_cold", b.cold_prior(&main, TICKET_A).await?);
        let fresh_prior = triage(
            &format!(" (Policy revision {round}, read once.)"),
            Layout::DocumentFirst,
        )?;
        push(
            "prior_first_of_policy",
            b.cold_prior(&fresh_prior, TICKET_A).await?,
        );
        // A known policy: its prior learned, its prefix cached by the
        // decision just before, and a state no earlier decision read.
        let (_, before) = b
            .warm_prior(&sf, &format!("{TICKET_A} (Reference {}.)", 9_000 + round))
            .await?;
        let (ms, now) = b
            .warm_prior(&sf, &format!("{TICKET_B} (Reference {}.)", 9_500 + round))
            .await?;
        push("prior_schema_first_cached", ms);
        // Each call's prompt after what the same call of the decision before
        // left: the tokens new to this decision.
        let mut new_ms = 0.0;
        for (i, p) in now.iter().enumerate() {
            let last = before.get(i).map_or(&[][..], Vec::as_slice);
            new_ms += b.eval_after(p, last).await?.0;
        }
        push("new_tokens", new_ms);
        if args.one_read {
            // As a new process finds it: nothing in memory (the model loaded,
            // the policy's prior learned), its prefix in the disk store.
            b.backend.clear_cache().await.map_err(model_failure)?;
            let (ms, _) = b
                .warm_prior(&sf, &format!("{TICKET_B} (Reference {}.)", 9_700 + round))
                .await?;
            push("prior_schema_first_from_disk", ms);
            // Throughput of one-read decisions of the known policy.
            let (serial, concurrent) = throughput(&b.prior, &b, &sf, round, 16).await?;
            push("serial_16", serial);
            push("concurrent_16", concurrent);
        } else {
            for (row, loops) in [("contended_1", 1), ("contended_all", cores)] {
                let _busy = BusyLoops::start(loops)?;
                push(row, b.cold(&main, TICKET_A).await?.wall_ms);
            }
            // 16 callers at once on the warm decision: each one's wall time minus
            // the queue and model time of its own calls.
            let many = concurrent_overhead(&b, &main, 16).await?;
            for o in many {
                push("overhead_16", o);
            }
            // Throughput: 16 states no earlier decision read, one caller after
            // another, then 16 other new states from 16 callers at once.
            let (serial, concurrent) = throughput(&b.engine, &b, &main, round, 16).await?;
            push("serial_16", serial);
            push("concurrent_16", concurrent);
        }
        eprintln!("bench-speed: round {} of {} done", round + 1, args.rounds);
    }
    report(&times, prompt_tokens, q_tokens, threads, args)
}

#[cfg(test)]
mod tests {
    use super::evaluated_tokens;

    #[test]
    fn evaluated_tokens_count_each_prompt_past_what_the_one_before_left() {
        // Alone: every token. After a prompt sharing 3 tokens: the other 2.
        // The same prompt again: its last token, evaluated for its logits.
        let a = vec![1, 2, 3, 4];
        let b = vec![1, 2, 3, 7, 8];
        assert_eq!(evaluated_tokens(std::slice::from_ref(&a)), 4);
        assert_eq!(evaluated_tokens(&[a.clone(), b.clone()]), 4 + 2);
        assert_eq!(evaluated_tokens(&[b.clone(), b]), 5 + 1);
        assert_eq!(evaluated_tokens(&[]), 0);
    }
}
