//! `dgem`: a zero-shot decision engine.
//!
//! `main` parses arguments, sets up tracing (to stderr, so stdout stays clean for
//! `--json`), runs one command and maps its outcome to an exit code:
//! 0 ok, 1 user error (bad template, variable, schema), 2 internal or backend error.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod commands;
mod failure;
mod progress;
mod setup;
mod vllm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// dgem — read a probability for every allowed answer of every question of a
/// policy, in one pass of a model.
#[derive(Debug, Parser)]
#[command(name = "dgem", version, about, long_about = None)]
struct Cli {
    /// Log filter for stderr (e.g. `info`, `dgem_engine=debug`).
    #[arg(
        long,
        env = "DGEM_LOG",
        default_value = "warn,llama-cpp-2=off",
        global = true
    )]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Make one decision: render a policy with variables and read its answers.
    Decide(Box<commands::decide::DecideArgs>),
    /// Fetch, list and verify embedded models.
    #[command(subcommand)]
    Model(commands::model::ModelCommand),
    /// Run a labelled dataset: accuracy by domain and tier, latency, throughput.
    Bench(commands::bench::BenchArgs),
    /// Calibration of the probabilities: ECE, Brier, NLL, AUROC, reliability SVG.
    BenchCalibration(commands::bench::CalibrationArgs),
    /// Fit a temperature per question type on labelled rows (k-fold) and write a calibration file.
    Calibrate(commands::calibrate::CalibrateArgs),
    /// Wide intent sets with bracket routing past 26 options.
    BenchIntents(commands::bench_suites::IntentsArgs),
    /// Listwise reranking: nDCG@10, p-MRR, tie rate, poisoned-passage quarantine.
    BenchRerank(commands::bench_suites::RerankArgs),
    /// Option-order sensitivity: flip rate and total variation distance.
    BenchPermutation(commands::bench_suites::PermutationArgs),
    /// Compare two receipts: metric deltas, flipped items, McNemar's test.
    BenchCompare(commands::bench_suites::CompareArgs),
    /// Render a policy template and print the JSON (no model involved).
    Render(commands::render::RenderArgs),
    /// Print a shell completion script: `dgem completions bash > ~/.local/share/bash-completion/completions/dgem`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// List, show or start policy templates (the shipped ones are built in).
    #[command(subcommand)]
    Templates(commands::templates::TemplatesCommand),
    /// Plan every JevBench row (prompts, slots, label ids, scoring) without running the model.
    Plan(commands::plan::PlanArgs),
    /// Serve decisions over HTTP (OpenAI-compatible and /v1/systemone).
    Serve(commands::serve::ServeArgs),
    /// Serve the decision tools to agents over MCP (stdio).
    Mcp(commands::mcp::McpArgs),
    /// Stage model weights: headers first, full-size files, parallel ranged bodies, `.ready`.
    Stage(commands::stage::StageArgs),
    /// Route decisions across Vertex, Cloud Run, local and remote backends with failover.
    Gateway(Box<commands::gateway::GatewayArgs>),
}

/// `dgem … | head` closes stdout early: Rust ignores SIGPIPE, so the next
/// `println!` panics with "failed printing to stdout: Broken pipe". The
/// reader has what it wanted, so that is a success (exit 0, no message), as
/// for any Unix filter; every other panic keeps the default report. (A hook,
/// because resetting SIGPIPE would need `unsafe`, which the workspace denies.)
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        // `println!` says "failed printing to stdout: Broken pipe"; other
        // writers (clap_complete) carry the io::Error's `BrokenPipe` kind.
        if msg.contains("Broken pipe") || msg.contains("BrokenPipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    quiet_broken_pipe();
    // Usage errors are the user's: exit 1 (clap would use 2, which dgem keeps for
    // internal failures); `--help` and `--version` exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = u8::from(e.use_stderr());
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let outcome = match cli.command {
        Command::Decide(args) => commands::decide::run(*args),
        Command::Model(cmd) => commands::model::run(cmd),
        Command::Templates(cmd) => commands::templates::run(cmd),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Cli::command(), "dgem", &mut std::io::stdout());
            Ok(())
        }
        Command::Bench(args) => return commands::bench::exit(commands::bench::run(args)),
        Command::BenchCalibration(args) => {
            return commands::bench::exit(commands::bench::run_calibration(args))
        }
        Command::Calibrate(args) => commands::calibrate::run(args),
        Command::BenchIntents(args) => {
            return commands::bench::exit(commands::bench_suites::run_intents(args))
        }
        Command::BenchRerank(args) => {
            return commands::bench::exit(commands::bench_suites::run_rerank(args))
        }
        Command::BenchPermutation(args) => {
            return commands::bench::exit(commands::bench_suites::run_permutation(args))
        }
        Command::BenchCompare(args) => {
            return commands::bench::exit(commands::bench_suites::run_compare(args))
        }
        Command::Render(args) => commands::render::run(args),
        Command::Plan(args) => commands::plan::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Mcp(args) => commands::mcp::run(args),
        Command::Stage(args) => commands::stage::run(args),
        Command::Gateway(args) => commands::gateway::run(*args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.report(),
    }
}
