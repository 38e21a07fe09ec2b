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

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use dgem_bench::batch::input::{self, InputFormat, RowSpec};
use dgem_bench::batch::journal;
use dgem_bench::shard::Shard;
use dgem_service::{Catalogue, DecisionRequest, ReadOptions, Service};
use serde_json::{json, Map, Value};

use crate::commands::after::{AfterArgs, SetupArgs};
use crate::commands::bench::{bench_err, RunCalibration};
use crate::failure::{user, Failure};
use crate::setup::{self, ModelArgs};

#[cfg(feature = "embedded")]
pub mod bench;
mod calibrate;
pub mod job;
mod progress;
pub mod rows;

pub use job::{Job, Summary};
use rows::Ctx;

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
    /// `batch`: once every row is read, remove each question's mean
    /// log-probability over the run from every row and renormalize (Batch
    /// Calibration, Zhou et al. 2024); the rows as read stay in
    /// `<output>.uncalibrated`. Off (`none`) by default.
    #[arg(long = "calibrate", value_enum, default_value_t = RunCalibration::None)]
    pub calibrate: RunCalibration,
    /// `--seed`, `--samples`, `--layout`, `--isolate`: read options for
    /// every row, as for `dgem decide`.
    #[command(flatten)]
    pub read: ReadOptions,
    #[command(flatten)]
    pub after: AfterArgs,
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
    /// Replace `--output` when it exists (never one of the parts).
    #[arg(long)]
    pub overwrite: bool,
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
        // A shared variable the template does not read (`tickt`) is refused
        // once, up front: it gave every row an error line, and the saved
        // run then needed `--overwrite` after the fix (black-box run). A
        // row's own fields are checked per row.
        let declared = dgem_core::template::template_variables(&found.text);
        dgem_service::check_unknown_variables(&found.name, &vars, &declared)
            .map_err(crate::commands::after::service_failure)?;
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

/// Everything besides the rows and the job's own settings that a row's
/// answer depends on: the policy, the request, and the model, calibration,
/// order-correction and backend settings (not threads, caches or
/// timeouts, which change how fast, not what).
fn depends_on(args: &BatchArgs, base: &DecisionRequest, policy: &Value) -> Value {
    let m = &args.model;
    let v = &args.vllm;
    json!({
        "policy": policy,
        "request": base,
        "model": {
            "model": m.model, "context": m.context, "labels": m.labels.map(|l| format!("{l:?}")),
            "calibration": format!("{:?}", m.calibration), "vocab_diagnostics": m.vocab_diagnostics,
            "model_calibration": m.model_calibration, "order_debias": format!("{:?}", m.order_debias),
            "wording": format!("{:?}", m.wording),
        },
        "setup": {
            "cascade_provider": args.setup.cascade_provider,
            "calibration_file": args.setup.calibration_file,
        },
        "backend": {
            "backend": v.backend, "tokenizer": v.tokenizer, "vllm_model": v.vllm_model,
            "canvas": v.canvas, "canvas_profile": v.canvas_profile, "canvas_step": v.canvas_step,
            "prompt_file": v.prompt_file, "no_constrained": v.no_constrained,
            "order_debias": format!("{:?}", v.vllm_order_debias),
        },
    })
}

/// Refuse combinations that cannot be honoured, before anything is read:
/// a template for OpenAI Batch rows, no policy for other rows, and
/// `--calibrate batch` where it would not mean what it says.
fn check_combination(
    args: &BatchArgs,
    base: &DecisionRequest,
    format: InputFormat,
    shard: Option<Shard>,
) -> Result<(), Failure> {
    let openai = format == InputFormat::Openai;
    if openai && (args.template.is_some() || args.questions.is_some()) {
        return Err(user(anyhow::anyhow!(
            "`--template`/`--questions` apply to rows of fields; OpenAI Batch rows carry their own questions in each body: drop the flag"
        )));
    }
    if !openai && base.template.is_none() && base.questions.is_none() {
        return Err(user(anyhow::anyhow!(
            "`--template` or `--questions` is needed for {} input (only OpenAI Batch rows carry their own questions)",
            if format == InputFormat::Csv { "CSV" } else { "JSON Lines" }
        )));
    }
    if args.calibrate == RunCalibration::Batch {
        let why = if openai {
            Some("OpenAI Batch input is answered with chat responses, which it does not rewrite")
        } else if shard.is_some() {
            Some("a shard holds part of the run, and each shard would be corrected by its own rows only")
        } else if !base.after.is_empty() {
            Some("the post-read options (temperature, abstention, cascade, expansion) act on the read before the run is complete")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(user(anyhow::anyhow!(
                "`--calibrate batch` cannot be used here: {why}"
            )));
        }
    }
    Ok(())
}

/// Ad-hoc questions are checked once, up front (with a stand-in state),
/// rather than failing every row.
fn check_questions(catalogue: &Catalogue, base: &DecisionRequest) -> Result<(), Failure> {
    if base.questions.is_none() {
        return Ok(());
    }
    let probe = DecisionRequest {
        state: Some(json!("a stand-in state to check the questions")),
        ..base.clone()
    };
    Service::new(catalogue.clone())
        .prepare(None, probe)
        .map(|_| ())
        .map_err(|e| user(anyhow::anyhow!("`--questions`: {e}")))
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
    check_questions(&catalogue, &base)?;
    args.setup.check_provider(
        base.after
            .cascade_mode
            .is_some_and(|m| m != dgem_cascade::options::CascadeSwitch::Off),
    )?;
    let calibrated = args.calibrate == RunCalibration::Batch;
    let job = Job {
        input: args.input.clone(),
        // With `--calibrate batch` the rows as read go to the journal, and
        // the output is written from it once it is complete.
        output: if calibrated {
            calibrate::raw_path(&args.output)
        } else {
            args.output.clone()
        },
        format,
        spec,
        shard,
        workers: usize::from(args.workers),
        dedupe: !args.no_dedupe,
        overwrite: args.overwrite,
        ordered: base.questions.is_some(),
        depends_on: depends_on(&args, &base, &policy),
    };
    // The input's form decides what is needed; it is checked before the
    // output is touched.
    let format = input::open(&job.input, job.format, job.spec.clone())
        .map_err(|e| user(anyhow::anyhow!("`--input` {}: {e}", job.input.display())))?
        .format();
    check_combination(&args, &base, format, shard)?;
    if calibrated {
        refuse_input_as_output(&job.input, &[&args.output, &job.output])?;
    } else {
        refuse_input_as_output(&job.input, &[&args.output])?;
    }
    let calibrated_print = format!("{}+calibrate-batch", job.fingerprint(format));
    if calibrated {
        calibrate::claim(&args.output, &calibrated_print, args.overwrite)?;
    }
    let opened = job.open()?;
    if opened.complete() {
        if opened.summary.input_rows == 0 {
            eprintln!(
                "batch: `--input` {} holds no rows; nothing to decide",
                job.input.display()
            );
        } else if opened.summary.rows == 0 {
            eprintln!(
                "batch: this shard holds none of the {} rows of `--input` {}; nothing to decide",
                opened.summary.input_rows,
                job.input.display()
            );
        } else {
            eprintln!(
                "batch: all {} rows are already in {}; nothing to decide (`--overwrite` starts over)",
                opened.summary.rows,
                job.output.display()
            );
        }
        let summary = opened.close()?;
        if calibrated {
            let service = Service::new(catalogue);
            write_calibrated(&service, &base, &job, &args, &calibrated_print, &summary)?;
        }
        return Ok(exit_code(&summary));
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
    if calibrated {
        write_calibrated(
            &ctx.service,
            &ctx.base,
            &job,
            &args,
            &calibrated_print,
            &summary,
        )?;
    }
    Ok(exit_code(&summary))
}

/// Write the calibrated output from the complete journal, and say what the
/// calibration did.
fn write_calibrated(
    service: &Service,
    base: &DecisionRequest,
    job: &Job,
    args: &BatchArgs,
    fingerprint: &str,
    summary: &Summary,
) -> Result<(), Failure> {
    let r = calibrate::write(service, base, job, &args.output, fingerprint, summary)?;
    report_calibration(&r);
    Ok(())
}

fn report_calibration(r: &calibrate::Report) {
    for (q, rows, corrected) in &r.questions {
        if *corrected {
            eprintln!("batch calibration: `{q}` corrected over {rows} rows");
        } else {
            eprintln!(
                "batch calibration: `{q}` left as read: {rows} rows answered it, fewer than the {} it needs",
                dgem_bench::batch::calibrate::MIN_ROWS
            );
        }
    }
    eprintln!("batch calibration: {} answers changed label", r.flipped);
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
        Some(url) => {
            crate::vllm::shared_decider(&url, &args.vllm, &args.model, crate::pull::Fetch::OneShot)?
        }
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
/// rows, admitting `workers` decisions at once (serve's `MAX_INFLIGHT`);
/// `dgem bench-batch` serves the same router on a port for its clients.
pub fn chat_route(
    decider: &Arc<dyn dgem_engine::Decider>,
    workers: usize,
    after: Arc<dgem_cascade::AfterSetup>,
) -> axum::Router {
    // The batch bounds what is in flight; the route must not turn a row
    // away for waiting its turn behind the others (a slow engine with many
    // workers queues for minutes), so its own waits are off.
    let config = dgem_server::ServeConfig {
        max_inflight: workers,
        inflight_wait: std::time::Duration::from_secs(24 * 3600),
        request_timeout: std::time::Duration::from_secs(24 * 3600),
        ..dgem_server::ServeConfig::default()
    };
    dgem_server::router(dgem_server::AppState::with_after(
        decider.clone(),
        config,
        after,
    ))
}

/// Whether `a` and `b` name one existing file: the same device and inode,
/// so a symlink, a relative path or a hard link to it counts.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    matches!(
        (std::fs::metadata(a), std::fs::metadata(b)),
        (Ok(x), Ok(y)) if x.dev() == y.dev() && x.ino() == y.ino()
    )
}

/// Refuse an output (or the file it is journalled in, or its sidecar) that
/// is the input file: writing it would replace the rows before they are
/// read (a black-box run lost its input this way, exit 0).
fn refuse_input_as_output(input: &Path, outputs: &[&Path]) -> Result<(), Failure> {
    let given = outputs.first().copied().unwrap_or(input);
    for out in outputs {
        for path in [out.to_path_buf(), journal::sidecar_path(out)] {
            if same_file(input, &path) {
                let what = if path == given {
                    String::new()
                } else {
                    format!(" (the file {} it writes beside it)", path.display())
                };
                return Err(user(anyhow::anyhow!(
                    "`--output` {}{what} is the `--input` file: writing decisions there would replace its rows; give another path",
                    given.display()
                )));
            }
        }
    }
    Ok(())
}

/// Run `dgem batch-merge`.
pub fn merge(args: MergeArgs) -> Result<(), Failure> {
    for part in &args.parts {
        if same_file(part, &args.output) || same_file(&journal::sidecar_path(part), &args.output) {
            return Err(user(anyhow::anyhow!(
                "`--output` {} is one of the parts or its sidecar: merging there would replace it; give another path",
                args.output.display()
            )));
        }
    }
    if args.output.exists() && !args.overwrite {
        return Err(user(anyhow::anyhow!(
            "`--output` {} already exists; pass `--overwrite` to replace it",
            args.output.display()
        )));
    }
    let n = journal::merge(&args.parts, &args.output).map_err(bench_err)?;
    eprintln!(
        "batch-merge: {n} rows from {} parts in {}",
        args.parts.len(),
        args.output.display()
    );
    Ok(())
}
