//! `dgem batch`: decide every row of a file under one policy, and
//! `dgem batch-merge`: join the outputs of its shards.
//!
//! Rows are read one at a time ([`dgem_bench::batch::input`]); up to
//! `--workers` are decided at once on one shared engine, and their lines are
//! written in input order to the output, which is also the journal
//! ([`dgem_bench::batch::journal`]): rerun with the same arguments after a
//! kill and it goes on where it stopped. Identical rows are decided once
//! ([`dgem_bench::batch::dedupe`]).
//!
//! Exit codes: 0 every row decided; 1 a user error before the run, or some
//! rows failed (their lines say why; the summary counts them); 2 the model
//! or backend failed and the run stopped (rerun to go on).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use dgem_bench::batch::dedupe::content_hash;
use dgem_bench::batch::input::{self, InputFormat, InputRow, RowSpec};
use dgem_bench::batch::journal::{self, Journal};
use dgem_bench::shard::Shard;
use dgem_service::{Catalogue, DecisionRequest, ReadOptions, Service};
use futures_util::StreamExt as _;
use serde_json::{json, Map, Value};
use sha2::{Digest as _, Sha256};

use crate::commands::after::{HesitationArgs, SetupArgs};
use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

#[cfg(feature = "embedded")]
pub mod bench;
mod progress;
pub mod rows;

use rows::{Answer, Ctx, RowResult, Stop};

/// Distinct rows whose answers are kept for later duplicates. Past it a
/// repeated row is decided again (the same answer, at its cost); the cap
/// bounds memory on a file of millions of distinct rows.
pub const DEDUPE_CAP: usize = 100_000;

/// Arguments of `dgem batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Policy template (a `.json.tmpl` path or a name, as for `dgem decide`);
    /// each row gives its variables.
    #[arg(short = 't', long = "template", conflicts_with = "questions")]
    pub template: Option<PathBuf>,
    /// Ad-hoc questions instead of a template: a JSON file holding the
    /// `questions` list `/api/decide` takes. Each row is then the state: its
    /// `state` field, or the whole row as a JSON object of fields.
    #[arg(long = "questions", value_name = "FILE")]
    pub questions: Option<PathBuf>,
    /// The rows: JSON Lines, CSV (with a header row) or OpenAI Batch request
    /// lines.
    #[arg(short = 'i', long = "input", value_name = "FILE")]
    pub input: PathBuf,
    /// One JSON line per input row, in input order. Rerun with the same
    /// arguments to go on after a kill; `--overwrite` starts over.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// `auto` (`.csv` by name, OpenAI Batch when the first line has
    /// `custom_id` and `body`, else JSON Lines), `jsonl`, `csv` or `openai`.
    #[arg(long = "input-format", default_value = "auto", value_name = "FORMAT")]
    pub input_format: String,
    /// The field that names a row (OpenAI Batch rows use `custom_id`). A row
    /// without it is named by its line, `line-N`.
    #[arg(long = "id-field", default_value = "id", value_name = "FIELD")]
    pub id_field: String,
    /// Take variable VAR from field FIELD (repeatable). With any `--map`,
    /// exactly the mapped fields are variables; without, every field but the
    /// id is one, under its own name.
    #[arg(long = "map", value_name = "VAR=FIELD")]
    pub map: Vec<String>,
    /// A variable every row shares, `key=value` (repeatable); a row's own
    /// field of that name wins.
    #[arg(short = 'v', long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
    /// Decide a row even when a variable the template reads with no default
    /// is missing from it.
    #[arg(long = "allow-missing-vars")]
    pub allow_missing_vars: bool,
    /// Rows decided at once on the shared engine (or in flight to
    /// `--backend`).
    #[arg(short = 'w', long = "workers", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,
    /// Decide only shard I of N (0-based): the rows whose id hashes to I, the
    /// split of `dgem bench --shard`. Also read from `DGEM_BENCH_SHARD`,
    /// Cloud Run Jobs' task index and count, and Kubernetes'
    /// `JOB_COMPLETION_INDEX` with `DGEM_SHARD_COUNT`. Join the shards'
    /// outputs with `dgem batch-merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Start over, replacing the output, instead of resuming it.
    #[arg(long)]
    pub overwrite: bool,
    /// Decide every row, even one identical to an earlier row.
    #[arg(long = "no-dedupe")]
    pub no_dedupe: bool,
    /// `--seed`, `--samples`, `--layout`, `--isolate`: read options for
    /// every row, as for `dgem decide`.
    #[command(flatten)]
    pub read: ReadOptions,
    #[command(flatten)]
    pub after: HesitationArgs,
    #[command(flatten)]
    pub setup: SetupArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub vllm: crate::vllm::VllmArgs,
}

/// Arguments of `dgem batch-merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The merged output, in input order.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// The shards' outputs.
    #[arg(required = true, value_name = "PART")]
    pub parts: Vec<PathBuf>,
}

/// How a run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Rows of this shard in the input.
    pub rows: usize,
    /// Lines kept from an earlier run.
    pub resumed: usize,
    /// Rows decided in this run.
    pub decided: usize,
    /// Rows answered as an identical earlier row.
    pub duplicates: usize,
    /// Rows whose line is an error (in this run or kept).
    pub failed: usize,
}

fn bench_err(e: dgem_bench::BenchError) -> Failure {
    if e.is_user_error() {
        user(e)
    } else {
        internal(e)
    }
}

/// `KEY=VALUE` pairs of `--var` and `--map`.
fn pairs(flag: &str, given: &[String]) -> Result<Vec<(String, String)>, Failure> {
    given
        .iter()
        .map(|g| match g.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(user(anyhow::anyhow!(
                "`{flag}` must be NAME=VALUE, e.g. `{flag} ticket=body`. Given: `{g}`"
            ))),
        })
        .collect()
}

/// The request every row starts from, the catalogue it is prepared on, and
/// the policy text that goes into the fingerprint.
fn base_request(args: &BatchArgs) -> Result<(DecisionRequest, Catalogue, Value), Failure> {
    let mut catalogue = Catalogue::new(crate::commands::templates::catalogue());
    let mut req = DecisionRequest {
        read: args.read.clone(),
        after: args.after.to_options()?,
        allow_missing_vars: Some(args.allow_missing_vars),
        ..DecisionRequest::default()
    };
    let policy = if let Some(t) = &args.template {
        let found = crate::commands::templates::find(t)?;
        catalogue = catalogue.with_policy_text(found.name.clone(), found.text.clone());
        req.template = Some(found.name.clone());
        let vars: Map<String, Value> = args
            .vars
            .iter()
            .map(|v| dgem_core::vars::parse_var(v))
            .collect::<Result<_, _>>()
            .map_err(user)?;
        req.variables = Some(vars);
        json!({"template": found.name, "text": found.text})
    } else if let Some(q) = &args.questions {
        let text = std::fs::read_to_string(q)
            .with_context(|| format!("`--questions` could not read `{}`", q.display()))
            .map_err(user)?;
        let questions: Value = serde_json::from_str(&text)
            .with_context(|| format!("`--questions` `{}` is not JSON", q.display()))
            .map_err(user)?;
        // A file holding `{"questions": [...]}` is taken too.
        let questions = match questions {
            Value::Object(mut m) if m.contains_key("questions") => {
                m.remove("questions").unwrap_or_default()
            }
            other => other,
        };
        if !args.vars.is_empty() {
            return Err(user(anyhow::anyhow!(
                "`--var` sets template variables; with `--questions` each row is the state"
            )));
        }
        req.questions = Some(questions.clone());
        json!({"questions": questions})
    } else {
        Value::Null
    };
    Ok((req, catalogue, policy))
}

/// One file to decide: where its rows are, where its lines go, and how.
#[derive(Debug, Clone)]
pub struct Job {
    /// The input file.
    pub input: PathBuf,
    /// The output file (also the journal).
    pub output: PathBuf,
    /// The input's form; `None` detects it.
    pub format: Option<InputFormat>,
    /// How rows become variables.
    pub spec: RowSpec,
    /// The shard to decide, if any.
    pub shard: Option<Shard>,
    /// Rows decided at once (at least 1).
    pub workers: usize,
    /// Decide identical rows once.
    pub dedupe: bool,
    /// Start over instead of resuming.
    pub overwrite: bool,
    /// What besides the rows the answers depend on (policy, request,
    /// model, backend): hashed with the job's own settings into the
    /// output's fingerprint.
    pub depends_on: Value,
}

/// A job whose output is open: the rows still to decide.
pub struct Opened {
    rows: Box<dyn Iterator<Item = Result<InputRow, dgem_bench::BenchError>> + Send>,
    journal: Journal,
    state: Written,
    /// The counts so far (kept lines included).
    pub summary: Summary,
}

impl Job {
    /// Open the input and the output: count the shard's rows, resume the
    /// output when it was written under the same arguments, and check that
    /// each kept line answers its input row.
    ///
    /// # Errors
    /// A user [`Failure`] for an unreadable input or output, an output of
    /// other arguments, or an input that changed under a kept output.
    pub fn open(&self) -> Result<Opened, Failure> {
        let open = || {
            input::open(&self.input, self.format, self.spec.clone())
                .map_err(|e| user(anyhow::anyhow!("`--input` {}: {e}", self.input.display())))
        };
        let rows = open()?;
        let format = rows.format();
        let shard = self.shard;
        let in_shard = move |r: &Result<InputRow, dgem_bench::BenchError>| match (shard, r) {
            (Some(s), Ok(row)) => s.contains(&row.id),
            _ => true,
        };
        // One pass to count the shard's rows (for the progress bar and ETA).
        let total = open()?.filter(in_shard).count();
        let print = json!({
            "depends_on": self.depends_on,
            "format": format,
            "spec": self.spec,
            "shard": self.shard,
            "dedupe": self.dedupe,
            "dgem": env!("CARGO_PKG_VERSION"),
        });
        let print = hex::encode(Sha256::digest(print.to_string().as_bytes()));
        // An output that cannot be opened is the path the user gave: exit 1.
        let opened = Journal::open(&self.output, &print, self.overwrite).map_err(user)?;
        if opened.dropped_bytes > 0 {
            tracing::info!(
                bytes = opened.dropped_bytes,
                "dropped a line cut short by a kill"
            );
        }
        let mut summary = Summary {
            rows: total,
            resumed: opened.kept.len(),
            ..Summary::default()
        };
        let mut rows = rows.filter(in_shard);
        let mut state = Written::default();
        for (i, kept) in opened.kept.iter().enumerate() {
            let row = match rows.next() {
                Some(r) => r.map_err(bench_err)?,
                None => {
                    return Err(user(anyhow::anyhow!(
                        "`--output` {} holds {} lines but the input has only {i} rows: the input changed; pass `--overwrite` to start again",
                        self.output.display(),
                        opened.kept.len()
                    )))
                }
            };
            state.restore(&row, kept, i + 1, self, &mut summary)?;
        }
        Ok(Opened {
            rows: Box::new(rows),
            journal: opened.journal,
            state,
            summary,
        })
    }
}

impl Opened {
    /// Whether every row already has its line.
    pub fn complete(&self) -> bool {
        self.summary.resumed == self.summary.rows
    }

    /// Decide the remaining rows on `ctx`, writing their lines in input
    /// order, then sync the output.
    ///
    /// # Errors
    /// An internal [`Failure`] when the model or backend keeps failing or
    /// the output cannot be written; the lines written so far stay.
    pub async fn run(
        mut self,
        ctx: &Arc<Ctx>,
        job: &Job,
        bar: &progress::Bar,
    ) -> Result<Summary, Failure> {
        let result = drive(
            ctx,
            self.rows,
            &mut self.journal,
            &mut self.state,
            &mut self.summary,
            job,
            bar,
        )
        .await;
        self.journal.finish().map_err(bench_err)?;
        result.map(|()| self.summary)
    }
}

/// Run `dgem batch`.
pub fn run(args: BatchArgs) -> Result<ExitCode, Failure> {
    let format = InputFormat::parse(&args.input_format).map_err(bench_err)?;
    let spec = RowSpec {
        id_field: args.id_field.clone(),
        map: pairs("--map", &args.map)?,
    };
    let shard =
        Shard::resolve(args.shard.as_deref(), |k| std::env::var(k).ok()).map_err(bench_err)?;
    let (base, catalogue, policy) = base_request(&args)?;
    let job = Job {
        input: args.input.clone(),
        output: args.output.clone(),
        format,
        spec,
        shard,
        workers: usize::from(args.workers),
        dedupe: !args.no_dedupe,
        overwrite: args.overwrite,
        depends_on: json!({
            "policy": policy,
            "request": base,
            "model": args.model.model,
            "labels": args.model.labels.map(|l| format!("{l:?}")),
            "backend": args.vllm.backend,
        }),
    };
    // The input's form decides whether a policy is needed; it is checked
    // before the output is touched.
    let format = input::open(&job.input, job.format, job.spec.clone())
        .map_err(|e| user(anyhow::anyhow!("`--input` {}: {e}", job.input.display())))?
        .format();
    if format != InputFormat::Openai && base.template.is_none() && base.questions.is_none() {
        return Err(user(anyhow::anyhow!(
            "`--template` or `--questions` is needed for {} input (only OpenAI Batch rows carry their own questions)",
            if format == InputFormat::Csv { "CSV" } else { "JSON Lines" }
        )));
    }
    let opened = job.open()?;
    if opened.complete() {
        eprintln!(
            "batch: all {} rows are already in {}; nothing to do (`--overwrite` starts over)",
            opened.summary.rows,
            args.output.display()
        );
        return Ok(exit_code(&opened.summary));
    }
    let ctx = Arc::new(build_ctx(&args, base, catalogue, format)?);
    let rt = setup::runtime()?;
    let started = Instant::now();
    let bar = progress::Bar::new(opened.summary.rows, opened.summary.resumed);
    let summary = rt.block_on(opened.run(&ctx, &job, &bar));
    bar.finish();
    let summary = summary?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "batch: {} rows in {}: {} decided, {} duplicates, {} failed, {} resumed from an earlier run; {:.1} s, {:.2} rows/s",
        summary.rows,
        args.output.display(),
        summary.decided,
        summary.duplicates,
        summary.failed,
        summary.resumed,
        secs,
        (summary.decided + summary.duplicates) as f64 / secs.max(1e-9),
    );
    Ok(exit_code(&summary))
}

fn exit_code(s: &Summary) -> ExitCode {
    if s.failed > 0 {
        eprintln!(
            "batch: {} of {} rows failed; their lines give the field and the reason",
            s.failed, s.rows
        );
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The service, the decider and (for OpenAI Batch input) the chat route.
fn build_ctx(
    args: &BatchArgs,
    base: DecisionRequest,
    catalogue: Catalogue,
    format: InputFormat,
) -> Result<Ctx, Failure> {
    // A batch runs like `serve`: the Stage-2 provider, when one is named, is
    // built up front (a policy of the file may ask for the cascade).
    let after = args.setup.setup()?;
    let decider: Arc<dyn dgem_engine::Decider> = match crate::vllm::backend_url(&args.vllm)? {
        Some(url) => crate::vllm::shared_decider(
            &url,
            &args.vllm,
            args.model.pull_timeout,
            crate::pull::Fetch::OneShot,
        )?,
        None => {
            crate::vllm::check_embedded(&args.vllm)?;
            Arc::new(setup::engine(&args.model)?)
        }
    };
    let chat = (format == InputFormat::Openai)
        .then(|| chat_route(&decider, usize::from(args.workers), after.clone()));
    Ok(Ctx {
        service: Service::new(catalogue).with_after(after),
        decider,
        base,
        chat,
    })
}

/// `dgem serve`'s routes over `decider`, run in process for OpenAI Batch
/// rows, admitting `workers` decisions at once (serve's `MAX_INFLIGHT`).
pub fn chat_route(
    decider: &Arc<dyn dgem_engine::Decider>,
    workers: usize,
    after: Arc<dgem_cascade::AfterSetup>,
) -> axum::Router {
    let config = dgem_server::ServeConfig {
        max_inflight: workers,
        ..dgem_server::ServeConfig::default()
    };
    dgem_server::router(dgem_server::AppState::with_after(
        decider.clone(),
        config,
        after,
    ))
}

/// What the run has written, for answering duplicates.
#[derive(Default)]
struct Written {
    /// Content hash → the id of the first row with it (set as rows start).
    seen: HashMap<String, String>,
    /// Content hash → its answer (set as lines are written).
    answers: HashMap<String, RowResult>,
    /// Whether the output is in OpenAI Batch's form.
    openai: bool,
}

impl Written {
    /// Check that `kept` (a line of an earlier run) answers `row`, and learn
    /// its answer for later duplicates.
    fn restore(
        &mut self,
        row: &InputRow,
        kept: &str,
        line_no: usize,
        job: &Job,
        summary: &mut Summary,
    ) -> Result<(), Failure> {
        let value: Value = serde_json::from_str(kept).map_err(internal)?;
        let parsed = rows::parse_line(&value);
        let matches = journal::row_of(&value) == Some(row.index)
            && parsed.as_ref().is_some_and(|(id, _)| *id == row.id);
        if !matches {
            return Err(user(anyhow::anyhow!(
                "`--output` {}: line {} does not answer input row {} (`{}`): the input changed since it was written; pass `--overwrite` to start again",
                job.output.display(),
                line_no,
                row.index,
                row.id
            )));
        }
        self.openai = value.get("custom_id").is_some();
        let Some((_, result)) = parsed else {
            return Ok(());
        };
        if result.as_ref().map_or(true, Answer::failed) {
            summary.failed += 1;
        }
        if let (Ok(item), true) = (&row.item, job.dedupe) {
            let hash = content_hash(item);
            if !self.seen.contains_key(&hash) && self.seen.len() < DEDUPE_CAP {
                self.seen.insert(hash.clone(), row.id.clone());
                self.answers.insert(hash, result);
            }
        }
        Ok(())
    }
}

/// What a row's future yields.
enum Done {
    /// Decided (or refused) in this run; the hash when it may be reused.
    Fresh(RowResult, Option<String>),
    /// The same content as the row that first had this hash.
    Duplicate(String, String),
}

async fn drive(
    ctx: &Arc<Ctx>,
    rows: impl Iterator<Item = Result<InputRow, dgem_bench::BenchError>>,
    journal: &mut Journal,
    state: &mut Written,
    summary: &mut Summary,
    job: &Job,
    bar: &progress::Bar,
) -> Result<(), Failure> {
    let openai = ctx.chat.is_some();
    state.openai = openai;
    let dedupe = job.dedupe;
    let seen = &mut state.seen;
    let stream = futures_util::stream::iter(rows).map(|r| {
        let ctx = ctx.clone();
        let planned: Result<(InputRow, Option<Done>, Option<String>), Failure> =
            r.map_err(bench_err).map(|row| match &row.item {
                Err(e) => {
                    let e = e.clone();
                    (row, Some(Done::Fresh(Err(e), None)), None)
                }
                Ok(item) => {
                    let hash = content_hash(item);
                    match seen.get(&hash) {
                        Some(first) if dedupe => {
                            let first = first.clone();
                            (row, Some(Done::Duplicate(hash, first)), None)
                        }
                        _ => {
                            if dedupe && seen.len() < DEDUPE_CAP {
                                seen.insert(hash.clone(), row.id.clone());
                                (row, None, Some(hash))
                            } else {
                                (row, None, None)
                            }
                        }
                    }
                }
            });
        async move {
            let (row, done, hash) = planned?;
            let done = match done {
                Some(d) => d,
                None => {
                    let item = row
                        .item
                        .as_ref()
                        .map_err(|e| internal(anyhow::anyhow!("{}", e.message)))?;
                    let result = rows::decide(&ctx, item)
                        .await
                        .map_err(|Stop(e)| internal(e))?;
                    Done::Fresh(result, hash)
                }
            };
            Ok::<_, Failure>((row, done))
        }
    });
    let mut stream = stream.buffered(job.workers.max(1));
    while let Some(next) = stream.next().await {
        let (row, done) = next?;
        let (result, duplicate_of) = match done {
            Done::Fresh(result, hash) => {
                if let Some(h) = hash {
                    state.answers.insert(h, result.clone());
                }
                if result.as_ref().is_ok_and(|a| !a.failed()) {
                    summary.decided += 1;
                }
                (result, None)
            }
            Done::Duplicate(hash, first) => {
                let result = state.answers.get(&hash).cloned().ok_or_else(|| {
                    internal(anyhow::anyhow!(
                        "row `{}` repeats row `{first}`, whose answer was not kept",
                        row.id
                    ))
                })?;
                summary.duplicates += 1;
                (result, Some(first))
            }
        };
        let failed = result.as_ref().map_or(true, Answer::failed);
        if failed {
            summary.failed += 1;
        }
        let line = rows::line(openai, &row, &result, duplicate_of.as_deref());
        journal.append(&line.to_string()).map_err(bench_err)?;
        bar.advance(summary.failed);
    }
    Ok(())
}

/// Run `dgem batch-merge`.
pub fn merge(args: MergeArgs) -> Result<(), Failure> {
    let n = journal::merge(&args.parts, &args.output).map_err(bench_err)?;
    eprintln!(
        "batch-merge: {n} rows from {} parts in {}",
        args.parts.len(),
        args.output.display()
    );
    Ok(())
}
