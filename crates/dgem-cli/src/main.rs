//! `dgem`: a zero-shot decision engine.
//!
//! `main` parses arguments, sets up tracing (to stderr, so stdout stays clean for
//! `--json`), runs one command and maps its outcome to an exit code:
//! 0 ok, 1 user error (bad template, variable, schema), 2 internal or backend error.
#![allow(clippy::print_stdout, clippy::print_stderr)]

/// mimalloc instead of glibc malloc: under 64 concurrent decisions on the vLLM
/// path glibc's malloc and free took about 30 % of the CPU samples, 11 % in
/// lock waits and consolidation (`perf record` of `dgem bench-proxy`); see
/// docs/benchmarks.md for the before and after. Cargo feature `mimalloc`, on by
/// default; without it the system allocator is used.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod commands;
mod failure;
mod flag_error;
mod otel;
mod progress;
mod pull;
mod setup;
mod vllm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// What the trace exporter takes: spans at `info` and above, but none of
/// llama.cpp's own log lines or the HTTP client's internals.
fn otel_filter() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new()
        .with_default(tracing::Level::INFO)
        .with_target("llama-cpp-2", tracing::level_filters::LevelFilter::OFF)
        .with_target("reqwest", tracing::level_filters::LevelFilter::OFF)
        .with_target("hyper", tracing::level_filters::LevelFilter::OFF)
        .with_target("hyper_util", tracing::level_filters::LevelFilter::OFF)
        .with_target("h2", tracing::level_filters::LevelFilter::OFF)
        .with_target("opentelemetry", tracing::level_filters::LevelFilter::OFF)
        .with_target(
            "opentelemetry_sdk",
            tracing::level_filters::LevelFilter::OFF,
        )
        .with_target(
            "opentelemetry_otlp",
            tracing::level_filters::LevelFilter::OFF,
        )
}

/// `dgem --version`: the version and, in a build with the `bench` feature, the
/// commit the binary was built from and whether its sources differed from it
/// (what every benchmark receipt records as `dgem.git_revision` and
/// `dgem.git_dirty`). `-V` prints the version alone.
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        #[cfg(feature = "bench")]
        {
            let v = dgem_bench::receipt::VersionInfo::current();
            let tree = match v.git_dirty {
                Some(false) => "clean",
                Some(true) => "sources changed from that commit",
                None => "sources unknown",
            };
            format!("{} (commit {}, {tree})", v.version, v.git_revision)
        }
        #[cfg(not(feature = "bench"))]
        {
            env!("CARGO_PKG_VERSION").to_owned()
        }
    })
}

/// dgem — read a probability for every allowed answer of every question of a
/// policy, in one pass of a model.
#[derive(Debug, Parser)]
#[command(name = "dgem", version, long_version = long_version(), about, long_about = None)]
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
    #[command(
        after_help = "Examples:\n  dgem decide -t support_triage -v ticket=\"I was charged twice\"\n  dgem decide -t support_triage -d vars.json --json\n  dgem decide -t ./my_policy.json.tmpl -v text=\"the build is red\" --samples auto --stats"
    )]
    Decide(Box<commands::decide::DecideArgs>),
    #[cfg(all(unix, feature = "embedded"))]
    /// A warm model host, so `dgem decide` does not load the model each call.
    #[command(
        subcommand,
        after_help = "Examples:\n  dgem host start\n  dgem decide -t support_triage -v ticket=\"I was charged twice\"   # answered by the host\n  dgem host status\n  dgem host stop"
    )]
    Host(commands::host::HostCommand),
    /// Fetch, list and verify embedded models.
    #[command(
        subcommand,
        after_help = "Examples:\n  dgem model pull\n  dgem model list\n  dgem model verify"
    )]
    Model(commands::model::ModelCommand),
    #[cfg(feature = "bench")]
    /// Run a labelled dataset: accuracy by domain and tier, latency, throughput.
    #[command(
        after_help = "Examples:\n  dgem bench -o results/bench.json\n  dgem bench -n 10 --format md\n  dgem bench --shard 0/4 -o shard-0.json --resume\n  dgem bench --fail-under item_accuracy=0.5 --csv-dir out/"
    )]
    Bench(commands::bench::BenchArgs),
    #[cfg(feature = "bench")]
    /// Calibration of the probabilities: ECE, Brier, NLL, AUROC, reliability SVG.
    #[command(
        after_help = "Examples:\n  dgem bench-calibration -o results/calibration.json\n  dgem bench-calibration --from-receipt results/bench.json --svg reliability.svg"
    )]
    BenchCalibration(commands::bench::CalibrationArgs),
    #[cfg(feature = "bench")]
    /// Fit a temperature per question type on labelled rows (k-fold) and write a calibration file.
    #[command(
        after_help = "Examples:\n  dgem calibrate --dataset data/eval_dataset.jsonl --out calibration.json\n  dgem decide -t support_triage -v ticket=... --calibration-file calibration.json"
    )]
    Calibrate(commands::calibrate::CalibrateArgs),
    #[cfg(feature = "bench")]
    /// Wide intent sets with bracket routing past 26 options.
    #[command(
        after_help = "Examples:\n  dgem bench-intents -o results/intents.json\n  dgem bench-intents -d data/intents/clinc150_eval.jsonl -n 10"
    )]
    BenchIntents(commands::bench_suites::IntentsArgs),
    #[cfg(feature = "bench")]
    /// Listwise reranking: nDCG@10, p-MRR, tie rate, poisoned-passage quarantine.
    #[command(after_help = "Examples:\n  dgem bench-rerank -o results/rerank.json --format md")]
    BenchRerank(commands::bench_suites::RerankArgs),
    #[cfg(feature = "bench")]
    /// Option-order sensitivity: flip rate and total variation distance.
    #[command(after_help = "Examples:\n  dgem bench-permutation -o results/permutation.json")]
    BenchPermutation(commands::bench_suites::PermutationArgs),
    #[cfg(feature = "bench")]
    /// Compare two receipts: metric deltas, flipped items, McNemar's test.
    #[command(
        after_help = "Examples:\n  dgem bench-compare results/before.json results/after.json\n  dgem bench-compare a.json b.json --fail-under mcnemar_p=0.05"
    )]
    BenchCompare(commands::bench_suites::CompareArgs),
    #[cfg(feature = "bench")]
    /// JevBench rows: chance-corrected accuracy, ECE, Brier and JevBench's composite scores.
    #[command(
        after_help = "Examples:\n  dgem bench-jev -o results/jev.json\n  dgem bench-jev -d jevbench_public.jsonl --endpoint-kind gpu --format md"
    )]
    BenchJev(commands::bench_suites::JevArgs),
    #[cfg(all(feature = "bench", feature = "embedded"))]
    /// Speed of the embedded engine against llama.cpp's own prompt evaluation, as ratios.
    #[command(
        after_help = "Examples:\n  dgem bench-speed\n  dgem bench-speed --rounds 9 --threads 2 -o results/speed.json"
    )]
    BenchSpeed(commands::speed::SpeedArgs),
    #[cfg(feature = "bench")]
    /// dgem's own cost on the vLLM path: `dgem serve` over an in-process fake vLLM, against the fake alone.
    #[command(
        after_help = "Examples:\n  dgem bench-proxy\n  dgem bench-proxy --clients 1,16,64 --requests 5000 -o benchmarks/results/proxy.json\n  dgem bench-proxy --tokenizer tokenizer.json --seconds 5"
    )]
    BenchProxy(commands::proxy::ProxyArgs),
    #[cfg(feature = "bench")]
    /// Join the receipts of a run's shards (`--shard I/N`) into one receipt.
    BenchMerge(commands::bench_suites::MergeArgs),
    #[cfg(feature = "bench")]
    /// Decide every row of a JSON Lines, CSV or OpenAI Batch file; resumable and shardable.
    #[command(
        after_help = "Examples:\n  dgem batch -t support_triage -i tickets.jsonl -o decisions.jsonl\n  dgem batch -t support_triage -i tickets.csv --map ticket=body -o decisions.jsonl\n  dgem batch -i openai_requests.jsonl -o openai_responses.jsonl\n  dgem batch -t support_triage -i tickets.jsonl -o part-0.jsonl --shard 0/4"
    )]
    Batch(Box<commands::batch::BatchArgs>),
    #[cfg(all(unix, feature = "bench", feature = "embedded"))]
    /// A second `dgem decide` via a warm `dgem host`, against an in-process warm decision plus process start.
    #[command(
        after_help = "Examples:\n  dgem bench-host\n  dgem bench-host --model qwen2.5-coder-1.5b -o benchmarks/results/host.json"
    )]
    BenchHost(commands::host::bench::BenchHostArgs),
    #[cfg(all(feature = "bench", feature = "embedded"))]
    /// Decisions/s of `dgem batch` against `dgem serve` driven by 16 HTTP clients, on one engine.
    #[command(
        after_help = "Examples:\n  dgem bench-batch\n  dgem bench-batch --rounds 6 --rows 16 -o benchmarks/results/batch_throughput.json"
    )]
    BenchBatch(commands::batch::bench::BenchBatchArgs),
    #[cfg(feature = "bench")]
    /// Join the outputs of `dgem batch --shard I/N` runs into one file in input order.
    #[command(
        after_help = "Examples:\n  dgem batch-merge -o decisions.jsonl part-0.jsonl part-1.jsonl"
    )]
    BatchMerge(commands::batch::MergeArgs),
    /// Render a policy template and print the JSON (no model involved).
    #[command(
        after_help = "Examples:\n  dgem render -t support_triage -v ticket=\"refund please\""
    )]
    Render(commands::render::RenderArgs),
    /// Print a shell completion script: `dgem completions bash > ~/.local/share/bash-completion/completions/dgem`.
    #[command(
        after_help = "Examples:\n  dgem completions bash > ~/.local/share/bash-completion/completions/dgem\n  dgem completions zsh > \"${fpath[1]}/_dgem\"\n  dgem completions fish > ~/.config/fish/completions/dgem.fish"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// List, show or start policy templates (the shipped ones are built in).
    #[command(
        subcommand,
        after_help = "Examples:\n  dgem templates list\n  dgem templates show support_triage\n  dgem templates init my_policy --dir templates"
    )]
    Templates(commands::templates::TemplatesCommand),
    #[cfg(feature = "bench")]
    /// Plan every JevBench row (prompts, slots, label ids, scoring) without running the model.
    #[command(
        after_help = "Examples:\n  dgem plan -d data/jevbench_style.jsonl\n  dgem plan -d rows.jsonl --rows --allow-refused"
    )]
    Plan(commands::plan::PlanArgs),
    /// Serve decisions over HTTP (OpenAI-compatible and /v1/systemone).
    #[command(
        after_help = "Examples:\n  dgem serve --port 8080\n  dgem serve --studio --cors-origin http://localhost:3000\n  API_KEY=s3cret MAX_INFLIGHT=4 dgem serve --no-warmup\n  curl -s localhost:8080/openapi.json"
    )]
    Serve(Box<commands::serve::ServeArgs>),
    #[cfg(feature = "mcp")]
    /// Serve the decision tools to agents over MCP (stdio).
    #[command(after_help = "Examples:\n  dgem mcp\n  dgem mcp --templates ./policies")]
    Mcp(commands::mcp::McpArgs),
    /// Stage model weights: headers first, full-size files, parallel ranged bodies, `.ready`.
    #[command(
        after_help = "Examples:\n  dgem stage gs://my-bucket/dgemma /tmp/dgemma\n  dgem stage https://weights.example.com/dgemma/ /tmp/dgemma --parallel 32"
    )]
    Stage(commands::stage::StageArgs),
    #[cfg(feature = "gateway")]
    /// Route decisions across Vertex, Cloud Run, local and remote backends with failover.
    #[command(
        after_help = "Examples:\n  dgem gateway --embedded\n  dgem gateway --cloudrun-url https://dgem-xyz.a.run.app --local-url http://127.0.0.1:8080"
    )]
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
            match flag_error::message(&e) {
                Some(m) => eprintln!("error: {m}"),
                None => {
                    let _ = e.print();
                }
            }
            return ExitCode::from(code);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // The log filter (`--log`) is for stderr only: traces take every span at
    // `info` and above, whatever is printed.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let (otel, _otel_guard) = match otel::layer() {
        Ok(Some((layer, guard))) => (Some(layer.with_filter(otel_filter())), Some(guard)),
        Ok(None) => (None, None),
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(1);
        }
    };
    tracing_subscriber::registry().with(fmt).with(otel).init();
    let outcome = match cli.command {
        Command::Decide(args) => commands::decide::run(*args),
        Command::Model(cmd) => commands::model::run(cmd),
        #[cfg(all(unix, feature = "embedded"))]
        Command::Host(cmd) => commands::host::run(cmd),
        Command::Templates(cmd) => commands::templates::run(cmd),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Cli::command(), "dgem", &mut std::io::stdout());
            Ok(())
        }
        #[cfg(feature = "bench")]
        Command::Bench(args) => return commands::bench::exit(commands::bench::run(args)),
        #[cfg(feature = "bench")]
        Command::BenchCalibration(args) => {
            return commands::bench::exit(commands::bench::run_calibration(args))
        }
        #[cfg(feature = "bench")]
        Command::Calibrate(args) => commands::calibrate::run(args),
        #[cfg(feature = "bench")]
        Command::BenchIntents(args) => {
            return commands::bench::exit(commands::bench_suites::run_intents(args))
        }
        #[cfg(feature = "bench")]
        Command::BenchRerank(args) => {
            return commands::bench::exit(commands::bench_suites::run_rerank(args))
        }
        #[cfg(feature = "bench")]
        Command::BenchPermutation(args) => {
            return commands::bench::exit(commands::bench_suites::run_permutation(args))
        }
        #[cfg(feature = "bench")]
        Command::BenchJev(args) => {
            return commands::bench::exit(commands::bench_suites::run_jev(args))
        }
        #[cfg(all(feature = "bench", feature = "embedded"))]
        Command::BenchSpeed(args) => commands::speed::run(args),
        #[cfg(feature = "bench")]
        Command::BenchProxy(args) => commands::proxy::run(args),
        #[cfg(feature = "bench")]
        Command::Batch(args) => {
            return commands::batch::run(*args).unwrap_or_else(failure::Failure::report)
        }
        #[cfg(feature = "bench")]
        Command::BatchMerge(args) => commands::batch::merge(args),
        #[cfg(all(feature = "bench", feature = "embedded"))]
        Command::BenchBatch(args) => commands::batch::bench::run(args),
        #[cfg(all(unix, feature = "bench", feature = "embedded"))]
        Command::BenchHost(args) => commands::host::bench::run(args),
        #[cfg(feature = "bench")]
        Command::BenchMerge(args) => {
            return commands::bench::exit(commands::bench_suites::run_merge(args))
        }
        #[cfg(feature = "bench")]
        Command::BenchCompare(args) => {
            return commands::bench::exit(commands::bench_suites::run_compare(args))
        }
        Command::Render(args) => commands::render::run(args),
        #[cfg(feature = "bench")]
        Command::Plan(args) => commands::plan::run(args),
        Command::Serve(args) => commands::serve::run(*args),
        #[cfg(feature = "mcp")]
        Command::Mcp(args) => commands::mcp::run(args),
        Command::Stage(args) => commands::stage::run(args),
        #[cfg(feature = "gateway")]
        Command::Gateway(args) => commands::gateway::run(*args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.report(),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::Cli;

    /// Regression (issue 16): `--help` had no examples. Every subcommand's
    /// help now ends with some.
    #[test]
    fn every_subcommand_help_has_examples() {
        let cli = Cli::command();
        let missing: Vec<String> = cli
            .get_subcommands()
            .filter(|c| c.get_name() != "help")
            .filter(|c| {
                !c.get_after_help()
                    .is_some_and(|h| h.to_string().starts_with("Example"))
            })
            .map(|c| c.get_name().to_string())
            .collect();
        assert!(missing.is_empty(), "no examples in --help: {missing:?}");
    }

    /// Every command that reads dataset rows takes `--allow-refused` (a
    /// refused row exits 1 without it); the commands that read receipts do not.
    #[test]
    #[cfg(feature = "bench")]
    fn every_row_reading_command_takes_allow_refused() {
        use clap::Parser as _;
        for cmd in [
            "plan",
            "bench",
            "bench-calibration",
            "bench-intents",
            "bench-rerank",
            "bench-permutation",
            "bench-jev",
        ] {
            let parsed = Cli::try_parse_from(["dgem", cmd, "-d", "x.jsonl", "--allow-refused"]);
            assert!(parsed.is_ok(), "{cmd}: {:?}", parsed.err());
        }
        for cmd in ["bench-merge", "bench-compare"] {
            let c = Cli::command();
            let sub = c.find_subcommand(cmd).expect("subcommand");
            assert!(
                sub.get_arguments()
                    .all(|a| a.get_long() != Some("allow-refused")),
                "{cmd}"
            );
        }
    }
}
