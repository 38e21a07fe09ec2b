//! `dgem decide`: one decision on the embedded model (or on vLLM with
//! `--backend vllm=URL`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use dgem_core::payload::{parse_named_payload, Payload};
use dgem_core::schema::{Layout, SamplePolicy, SchemaDefaults, ValidSchema};
use dgem_core::vars::{load_vars_file, merge_vars, parse_var};
use dgem_engine::{DecideRequest, Decision};
use serde_json::{Map, Value};

use crate::commands::after::{HesitationArgs, SetupArgs};
use crate::commands::output;
use crate::failure::{engine, internal, user, Failure};
use crate::setup::{self, ModelArgs};

/// Template variables.
#[derive(Debug, Clone, Args)]
pub struct VarArgs {
    /// A template variable `key=value` (repeatable). `true`/`false` become booleans,
    /// JSON arrays/objects are parsed, everything else stays a string.
    #[arg(short = 'v', long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
    /// A JSON file of variables; `-v` overrides its keys.
    #[arg(short = 'd', long = "data", value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// Render even when a variable the template reads with no `default` is
    /// not given (or is `null`): the policy then holds Go's `<no value>` (or
    /// `null`) in its place. Without it that is refused (exit 1), naming the
    /// variable; `decide` also stops refusing a call that gives none of the
    /// template's state variables.
    #[arg(long = "allow-missing-vars")]
    pub allow_missing_vars: bool,
}

/// Arguments of `dgem decide`.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// Policy template: a `.json.tmpl` path, or a name (e.g. `support_triage`)
    /// looked up in `DGEM_TEMPLATES` or `templates/`, then among the built-in
    /// policies (`dgem templates list`). A policy that reads state variables
    /// needs at least one of them (`-v`/`-d`): without, it would decide on its
    /// placeholder text (exit 1).
    #[arg(short = 't', long = "template")]
    pub template: PathBuf,
    #[command(flatten)]
    pub vars: VarArgs,
    /// Print the `{answers, diagnostics}` envelope as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print timing, token and per-question diagnostics after the table.
    #[arg(short = 's', long)]
    pub stats: bool,
    /// Reads to average: a count (1–32) or `auto`. Overrides the template.
    #[arg(long)]
    pub samples: Option<String>,
    /// Prompt layout: `document_first` or `schema_first`. Overrides the template.
    #[arg(long)]
    pub layout: Option<String>,
    /// Base seed for the reads.
    #[arg(long, default_value_t = 42)]
    pub seed: i64,
    /// An image the decision is about (repeatable; png, jpeg, webp or gif, at
    /// most 10 MiB each, 16 in all). The images go ahead of the rendered
    /// state's text. Only a vision backend reads them (`--backend vllm=URL`);
    /// the embedded model has no vision and refuses them (exit 1).
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// Resolve every read (prompts, slot positions, label token ids, scoring
    /// method, reads per stage) without running the model, and print it as JSON.
    /// Embedded engine only.
    #[arg(long)]
    pub plan: bool,
    #[command(flatten)]
    pub after: HesitationArgs,
    #[command(flatten)]
    pub setup: SetupArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub vllm: crate::vllm::VllmArgs,
}

/// A policy template rendered with the command's variables.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The rendered `{schema, state}`.
    pub payload: Payload,
    /// The variables given (`-d` file, then `-v`).
    pub vars: Map<String, Value>,
    /// The template's name in messages (a path, or the catalogue name).
    pub name: String,
    /// The variables the template reads.
    pub declared: Vec<String>,
    /// `--allow-missing-vars`: placeholders for unset variables are accepted.
    pub allow_missing: bool,
}

impl Loaded {
    /// Refuse a decision that gives none of the template's state variables:
    /// the template would render its placeholder text and the model would
    /// decide on that. The check `/api/decide` and MCP's `decide_policy` make
    /// ([`dgem_core::vars::missing_state_variables`]), on `--var`; none with
    /// `--allow-missing-vars`.
    ///
    /// # Errors
    /// A user [`Failure`] (exit 1) naming the missing variables.
    pub fn require_state(&self) -> Result<(), Failure> {
        if self.allow_missing {
            return Ok(());
        }
        match dgem_core::vars::missing_state_variables(&self.name, &self.vars, &self.declared) {
            Some(msg) => Err(user(anyhow::anyhow!(
                "`--var`: {msg}; pass it with `-v NAME=VALUE` or `-d FILE`"
            ))),
            None => Ok(()),
        }
    }
}

/// Render a template with variables and split it into schema and state.
/// A variable the template reads with no `default` that is not given is
/// refused ([`dgem_core::template::render_strict`]) unless
/// `--allow-missing-vars`.
///
/// # Errors
/// A user [`Failure`] (exit 1): the template cannot be found or read, a
/// variable is malformed, unknown to the template or unset, or the template
/// does not render to a payload.
pub fn load_payload(template: &Path, args: &VarArgs) -> Result<Loaded, Failure> {
    let found = crate::commands::templates::find(template)?;
    let text = found.text;
    let file_vars = match &args.data {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read variables file {}", p.display()))
                .map_err(user)?;
            Some(load_vars_file(&t, &p.display().to_string()).map_err(user)?)
        }
        None => None,
    };
    let cli: Vec<(String, Value)> = args
        .vars
        .iter()
        .map(|v| parse_var(v))
        .collect::<Result<_, _>>()
        .map_err(user)?;
    let vars = merge_vars(file_vars, cli);
    let name = found.name;
    // A misspelled `-v tikcet=…` would render the template's placeholder text
    // and decide on that: refuse variables the template does not read.
    let declared = dgem_core::template::template_variables(&text);
    if let Some(msg) =
        dgem_core::vars::unknown_variables(&name, vars.keys().map(String::as_str), &declared)
    {
        return Err(user(anyhow::anyhow!("`--var`: {msg}")));
    }
    let span = tracing::info_span!("template_render", otel.name = "dgem.template.render", template = %name);
    let rendered = span
        .in_scope(|| {
            dgem_core::template::render_strict(&name, &text, &vars, args.allow_missing_vars)
        })
        .map_err(|e| match e {
            dgem_core::TemplateError::Unset { .. } => user(anyhow::anyhow!(
                "`--var`: {e}; pass it with `-v NAME=VALUE` or `-d FILE`, or render the placeholder anyway with `--allow-missing-vars`"
            )),
            other => user(other),
        })?;
    let payload = parse_named_payload(&name, &rendered, &vars).map_err(user)?;
    Ok(Loaded {
        payload,
        vars,
        name,
        declared,
        allow_missing: args.allow_missing_vars,
    })
}

/// Parse `--samples`.
pub fn parse_samples(s: &str) -> Result<SamplePolicy, Failure> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Ok(SamplePolicy::Auto {
            max: 4,
            threshold: 0.1,
        });
    }
    match t.parse::<u32>() {
        Ok(n) if (1..=dgem_core::schema::MAX_SAMPLES).contains(&n) => Ok(SamplePolicy::Fixed { n }),
        _ => Err(user(anyhow::anyhow!(
            "`--samples` must be a count from 1 to 32 or `auto`. Given: `{s}`"
        ))),
    }
}

/// Parse `--layout`.
pub fn parse_layout(s: &str) -> Result<Layout, Failure> {
    match s.trim() {
        "document_first" => Ok(Layout::DocumentFirst),
        "schema_first" => Ok(Layout::SchemaFirst),
        other => Err(user(anyhow::anyhow!(
            "`--layout` must be one of [document_first, schema_first]. Given: `{other}`"
        ))),
    }
}

/// Validate the schema of a payload and apply command-line overrides.
pub fn valid_schema(
    payload: &Payload,
    samples: Option<&str>,
    layout: Option<&str>,
) -> Result<ValidSchema, Failure> {
    let mut schema =
        ValidSchema::from_value(&payload.schema, &SchemaDefaults::default()).map_err(user)?;
    if let Some(s) = samples {
        schema = schema.with_samples(parse_samples(s)?);
    }
    if let Some(l) = layout {
        schema = schema.with_layout(parse_layout(l)?);
    }
    Ok(schema)
}

/// `state` with the `--image` files ahead of its text.
///
/// # Errors
/// A user error naming `--image` and the file: unreadable, not a supported
/// image, too large, or too many images.
fn with_images(state: Value, files: &[PathBuf]) -> Result<Value, Failure> {
    let mut parts = Vec::with_capacity(files.len());
    for f in files {
        // Read at most one byte past the limit, so `/dev/zero` or a huge file
        // is refused at once rather than read into memory.
        let limit = dgem_core::images::MAX_IMAGE_BYTES as u64 + 1;
        let mut bytes = Vec::new();
        std::fs::File::open(f)
            .and_then(|file| {
                std::io::Read::read_to_end(&mut std::io::Read::take(file, limit), &mut bytes)
            })
            .with_context(|| format!("`--image` could not read `{}`", f.display()))
            .map_err(user)?;
        let part = dgem_core::images::image_part(&bytes, &f.display().to_string())
            .map_err(|e| user(anyhow::anyhow!("`--image`: {}", e.message)))?;
        parts.push(part);
    }
    dgem_core::images::with_images(state, parts)
        .map_err(|e| user(anyhow::anyhow!("`--image`: {}", e.message)))
}

/// Run `dgem decide`.
pub fn run(args: DecideArgs) -> Result<(), Failure> {
    let loaded = load_payload(&args.template, &args.vars)?;
    // Reported after the flags are checked, and before any model is loaded.
    let state_given = loaded.require_state();
    let mut payload = loaded.payload;
    if !args.images.is_empty() && crate::vllm::backend_url(&args.vllm)?.is_none() {
        return Err(user(anyhow::anyhow!(
            "`--image`: the embedded model has no vision and cannot read images; \
             decide on a vision backend with `--backend vllm=URL`, or drop `--image`"
        )));
    }
    payload.state = with_images(std::mem::take(&mut payload.state), &args.images)?;
    let (raw, injected) = args.after.inject(&payload.schema)?;
    payload.schema = raw;
    let schema = valid_schema(&payload, args.samples.as_deref(), args.layout.as_deref())?;
    // No state, no decision (as on /api and MCP).
    state_given?;
    // A policy that reads an image needs one: the engine refuses it too, but
    // here it is refused before any model is loaded.
    dgem_core::images::check_required(&schema, &payload.state)
        .map_err(|e| user(anyhow::anyhow!("{}", e.message)))?;
    if args.plan {
        if crate::vllm::backend_url(&args.vllm)?.is_some() {
            return Err(user(anyhow::anyhow!(
                "`--plan` resolves the embedded engine's reads; it cannot be combined with `--backend vllm=…`"
            )));
        }
        let plan = setup::engine(&args.model)?
            .plan(&DecideRequest {
                schema,
                state: payload.state.clone(),
                seed: args.seed,
            })
            .map_err(engine)?;
        println!("{}", serde_json::to_string_pretty(&plan).map_err(internal)?);
        return Ok(());
    }
    let template_name = args.template.to_string_lossy().into_owned();
    let hesitation = args.after.request(&schema, &template_name, injected)?;
    let need_stage2 = hesitation.cascade.is_some() || hesitation.expansion.is_some();
    let after = args.setup.setup_for(need_stage2)?;
    let engine_: std::sync::Arc<dyn dgem_engine::Decider> =
        match crate::vllm::backend_url(&args.vllm)? {
            Some(url) => crate::vllm::shared_decider(
                &url,
                &args.vllm,
                args.model.pull_timeout,
                crate::pull::Fetch::OneShot,
            )?,
            None => {
                crate::vllm::check_embedded(&args.vllm)?;
                std::sync::Arc::new(setup::engine(&args.model)?)
            }
        };
    let rt = setup::runtime()?;
    let started = std::time::Instant::now();
    let spinner = crate::progress::spinner("deciding…");
    let decided = rt.block_on(engine_.decide(DecideRequest {
        schema: schema.clone(),
        state: payload.state.clone(),
        seed: args.seed,
    }));
    let mut decision: Decision = match decided {
        Ok(d) => d,
        Err(e) => {
            spinner.finish_and_clear();
            return Err(engine(e));
        }
    };
    let images = dgem_core::images::image_urls(&payload.state);
    let finished =
        rt.block_on(after.finish(&mut decision, &schema, &payload.state, &images, &hesitation));
    spinner.finish_and_clear();
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    // A calibration file asked for by name must fit this model and policy.
    if let Some(c) = finished.calibration.as_ref().filter(|c| !c.applied) {
        return Err(user(anyhow::anyhow!("`--calibration-file`: {}", c.reason)));
    }
    if args.json {
        let mut envelope = decision.envelope();
        if let (Some(extra), Some(m)) = (finished.to_json(), envelope.as_object_mut()) {
            m.extend(extra);
        }
        let text = serde_json::to_string_pretty(&envelope).map_err(internal)?;
        println!("{text}");
    } else {
        print!("{}", output::table(&decision));
        if let Some(c) = &finished.cascade {
            print!("{}", output::cascade(c));
        }
        if let Some(s) = &finished.suggestions {
            print!("{}", output::suggestions(s));
        }
        if args.stats {
            print!("{}", output::stats(&decision, wall_ms));
        }
    }
    Ok(())
}
