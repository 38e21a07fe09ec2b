//! `dgem decide`: one decision on the embedded model (or on vLLM with
//! `--backend vllm=URL`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use dgem_core::payload::Payload;
use dgem_core::vars::{load_vars_file, merge_vars, parse_var};
use dgem_service::{Catalogue, Decided, DecisionRequest, ReadOptions, Service};
use serde_json::{Map, Value};

use crate::commands::after::{AfterArgs, SetupArgs};
use crate::commands::output;
use crate::failure::{decider, internal, user, Failure};
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
    /// `--seed`, `--samples`, `--layout`, `--isolate`: the decision service's read
    /// options, the same keys `/api/decide` and MCP take.
    #[command(flatten)]
    pub read: ReadOptions,
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
    pub after: AfterArgs,
    #[command(flatten)]
    pub setup: SetupArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub vllm: crate::vllm::VllmArgs,
    /// Send the decision to a warm `dgem host` of the same model flags when
    /// one runs (`dgem host start`), instead of loading the model here;
    /// `off` always decides in this process.
    #[arg(long = "host", env = "DGEM_USE_HOST", default_value = "on", value_parser = crate::setup::parse_on_off_flag, action = clap::ArgAction::Set, value_name = "on|off")]
    pub host: bool,
}

/// Render a template with variables and split it into schema and state, by
/// the decision service's catalogue (the variable rules `decide`, `/api` and
/// MCP share: aliases, unknown names refused with the closest known one). A
/// variable the template reads with no `default` that is not given is refused
/// unless `--allow-missing-vars`; a call that gives none of the state
/// variables renders the placeholder text (`dgem render` shows it; `decide`
/// refuses it).
///
/// # Errors
/// A user [`Failure`] (exit 1): the template cannot be found or read, a
/// variable is malformed, unknown to the template or unset, or the template
/// does not render to a payload.
pub fn load_payload(template: &Path, args: &VarArgs) -> Result<Payload, Failure> {
    let found = crate::commands::templates::find(template)?;
    let vars = given_vars(args)?;
    Catalogue::new(crate::commands::templates::catalogue())
        .with_policy_text(found.name.clone(), found.text)
        .preview(&found.name, vars, args.allow_missing_vars)
        .map_err(crate::commands::after::service_failure)
}

/// The `--image` files as `data:` URLs, each checked (readable, a supported
/// image, not too large) before any model is loaded.
///
/// # Errors
/// A user error naming `--image` and the file.
fn image_urls(files: &[PathBuf]) -> Result<Vec<Value>, Failure> {
    let mut urls = Vec::with_capacity(files.len());
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
        // The checked part's data URL, which the request's `images` take.
        urls.extend(part.pointer("/image_url/url").cloned());
    }
    Ok(urls)
}

/// The variables of `-d FILE` then `-v KEY=VALUE` (which wins).
///
/// # Errors
/// A user [`Failure`] when the file cannot be read or a variable is malformed.
fn given_vars(args: &VarArgs) -> Result<Map<String, Value>, Failure> {
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
    Ok(merge_vars(file_vars, cli))
}

/// Run `dgem decide`: the flags become the decision service's one request
/// ([`dgem_service::DecisionRequest`]), prepared by the service exactly as
/// `/api/decide` and MCP prepare theirs (the same catalogue, variable
/// aliases and checks), then decided and post-read by [`Service::decide`].
pub fn run(args: DecideArgs) -> Result<(), Failure> {
    let found = crate::commands::templates::find(&args.template)?;
    let variables = given_vars(&args.vars)?;
    if !args.images.is_empty() && crate::vllm::backend_url(&args.vllm)?.is_none() {
        return Err(user(anyhow::anyhow!(
            "`--image`: the embedded model has no vision and cannot read images; \
             decide on a vision backend with `--backend vllm=URL`, or drop `--image`"
        )));
    }
    let images = image_urls(&args.images)?;
    let service = Service::new(
        Catalogue::new(crate::commands::templates::catalogue())
            .with_policy_text(found.name.clone(), found.text.clone()),
    );
    let request = DecisionRequest {
        template: Some(found.name.clone()),
        variables: Some(variables),
        allow_missing_vars: Some(args.vars.allow_missing_vars),
        images: (!images.is_empty()).then_some(Value::Array(images)),
        read: args.read.clone(),
        after: args.after.to_options()?,
        ..DecisionRequest::default()
    };
    let prepared = service
        .prepare(None, request.clone())
        .map_err(crate::commands::after::service_failure)?;
    // A policy that reads an image needs one: the engine refuses it too, but
    // here it is refused before any model is loaded.
    dgem_core::images::check_required(&prepared.request.schema, &prepared.request.state)
        .map_err(|e| user(anyhow::anyhow!("{}", e.message)))?;
    if args.plan {
        if crate::vllm::backend_url(&args.vllm)?.is_some() {
            return Err(user(anyhow::anyhow!(
                "`--plan` resolves the embedded engine's reads; it cannot be combined with `--backend vllm=…`"
            )));
        }
        // The plan reads nothing after the read, but a flag it was given
        // is checked as a decision checks it (`--calibration-file` of a
        // missing file exited 0 here).
        args.setup.setup_for(false)?;
        let plan = setup::engine(&args.model)?
            .plan(&prepared.request)
            .map_err(decider)?;
        println!("{}", serde_json::to_string_pretty(&plan).map_err(internal)?);
        return Ok(());
    }
    // A cascade with nowhere to escalate is refused before the read.
    args.setup
        .check_provider(prepared.after.cascade.is_some())?;
    // Flags of the vLLM reader are refused without `--backend` before any
    // host is asked, as in process.
    if crate::vllm::backend_url(&args.vllm)?.is_none() {
        crate::vllm::check_embedded(&args.vllm)?;
    }
    if let Some(done) = via_host(&args, &found, &request)? {
        return done;
    }
    let after = &prepared.after;
    let need_stage2 = after.cascade.is_some() || after.expansion.is_some();
    let service = service.with_after(args.setup.setup_for(need_stage2)?);
    let engine_: std::sync::Arc<dyn dgem_engine::Decider> =
        match crate::vllm::backend_url(&args.vllm)? {
            Some(url) => crate::vllm::shared_decider(
                &url,
                &args.vllm,
                &args.model,
                crate::pull::Fetch::OneShot,
            )?,
            // `check_embedded` ran before the host was asked.
            None => std::sync::Arc::new(setup::engine(&args.model)?),
        };
    let rt = setup::runtime()?;
    let spinner = crate::progress::spinner("deciding…");
    let decided = rt.block_on(service.decide(engine_.as_ref(), prepared));
    spinner.finish_and_clear();
    let decided = decided.map_err(decider)?;
    print!("{}", render(&decided, args.json, args.stats)?);
    Ok(())
}

/// The decision from a warm host of the same model flags (`dgem host`),
/// when one runs and can decide it as this process would: the embedded
/// model, no image, no Stage-2 provider, no calibration file. `None`: decide
/// here.
///
/// # Errors
/// A bad `--backend` spec.
#[cfg(all(unix, feature = "embedded"))]
fn via_host(
    args: &DecideArgs,
    found: &crate::commands::templates::Found,
    request: &DecisionRequest,
) -> Result<Option<Result<(), Failure>>, Failure> {
    let hostable = args.host
        && crate::vllm::backend_url(&args.vllm)?.is_none()
        && args.images.is_empty()
        && args.setup.cascade_provider.is_none()
        && args.setup.calibration_file.is_none();
    if !hostable {
        return Ok(None);
    }
    let ask = crate::commands::host::HostRequest::Decide {
        policy: found.name.clone(),
        text: found.text.clone(),
        request: Box::new(request.clone()),
        json: args.json,
        stats: args.stats,
    };
    Ok(crate::commands::host::try_decide(&args.model, ask)
        .map(crate::commands::host::HostReply::into_result))
}

/// A build without the embedded engine or Unix sockets has no host.
#[cfg(not(all(unix, feature = "embedded")))]
fn via_host(
    _: &DecideArgs,
    _: &crate::commands::templates::Found,
    _: &DecisionRequest,
) -> Result<Option<Result<(), Failure>>, Failure> {
    Ok(None)
}

/// What `dgem decide` prints for `decided`: the envelope as pretty JSON
/// (`json`), or the answer table, the cascade and expansion notes, and with
/// `stats` the diagnostics block. A warm host renders with it too, so its
/// output is the in-process output byte for byte.
///
/// # Errors
/// A user [`Failure`] when a calibration file asked for by name does not
/// fit this model and policy; an internal one when JSON cannot be written.
pub fn render(decided: &Decided, json: bool, stats: bool) -> Result<String, Failure> {
    if let Some(c) = decided.after.calibration.as_ref().filter(|c| !c.applied) {
        return Err(user(anyhow::anyhow!("`--calibration-file`: {}", c.reason)));
    }
    let mut out = String::new();
    if json {
        out.push_str(&serde_json::to_string_pretty(&decided.envelope()).map_err(internal)?);
        out.push('\n');
    } else {
        out.push_str(&output::table(&decided.decision));
        if let Some(c) = &decided.after.cascade {
            out.push_str(&output::cascade(c));
        }
        if let Some(s) = &decided.after.suggestions {
            out.push_str(&output::suggestions(s));
        }
        if stats {
            out.push_str(&output::stats(&decided.decision, decided.elapsed_ms));
        }
    }
    Ok(out)
}
