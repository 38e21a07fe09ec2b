//! `dgem host`: a warm model host, so a second `dgem decide` in a shell
//! does not load the model again.
//!
//! Loading a GGUF and building its first caches takes seconds (about 3 s for
//! the 1.5B on 2 cores), while a warm decision of a known policy takes well
//! under one. `dgem host start` starts a background process that loads the
//! model once, with the model flags it was given, and answers decisions on
//! a Unix socket. `dgem decide` with the same model flags finds the socket
//! and sends its request there instead of loading the model itself. Its
//! output is the same bytes the in-process path prints, because the host
//! renders it with the same code.
//!
//! - **Where:** `$DGEM_HOST_DIR`, else `$XDG_RUNTIME_DIR/dgem`, else
//!   `host/` beside the model folder (`~/.cache/dgem/host`). The folder is made mode 0700, and each socket is
//!   0600. A socket's name holds a hash of the dgem binary, its version and
//!   the model flags, so a host is only found by a `decide` that would load
//!   the same model the same way.
//! - **How long:** a host exits after `--idle-timeout` seconds (default 900)
//!   without a request, on `dgem host stop`, or on SIGTERM/Ctrl-C. It
//!   removes its socket on the way out.
//! - **What goes to it:** `decide` on the embedded model with no `--plan`,
//!   no `--image`, no `--cascade-provider` and no `--calibration-file`;
//!   anything else runs in process as before. `--host off` (or
//!   `DGEM_HOST=off`) never uses one.
//!
//! The wire is one JSON line each way ([`HostRequest`], [`HostReply`]):
//! small, and needing no HTTP stack on either side of a local socket.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use dgem_service::{Catalogue, DecisionRequest, Service};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

#[cfg(feature = "bench")]
pub mod bench;

/// How long `decide` waits for a host's reply before deciding in process
/// instead (a host busy with another decision answers when it is done).
const REPLY_TIMEOUT: Duration = Duration::from_secs(600);
/// How long `host start` waits for the host it started to be ready (a
/// first run may pull the model).
const START_TIMEOUT: Duration = Duration::from_secs(900);
/// Largest request or reply line (a policy and its state, or the output).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// `dgem host` subcommands.
#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Start a host in the background for these model flags; returns once
    /// it is ready (or at once if one already runs).
    Start(HostArgs),
    /// Run a host in the foreground (what `start` runs in the background;
    /// for a service manager).
    Run(HostArgs),
    /// Stop the host of these model flags.
    Stop(HostArgs),
    /// Say whether a host of these model flags is running, and where.
    Status(HostArgs),
}

/// Arguments of the `dgem host` subcommands.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// Exit after this many seconds without a request.
    #[arg(
        long = "idle-timeout",
        env = "DGEM_HOST_IDLE_S",
        default_value_t = 900.0,
        value_name = "SECONDS"
    )]
    pub idle_timeout: f64,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// What `decide` asks a host for.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HostRequest {
    /// Is it there and ready?
    Ping,
    /// Exit now.
    Stop,
    /// Decide, and render the output as `dgem decide` prints it.
    Decide {
        /// The template's name, as the caller found it.
        policy: String,
        /// Its text (read by the caller, from the caller's folder).
        text: String,
        /// The decision service's request.
        request: Box<DecisionRequest>,
        /// `--json`.
        json: bool,
        /// `--stats`.
        stats: bool,
    },
}

/// A host's answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct HostReply {
    /// The exit code `decide` would have: 0 ok, 1 user error, 2 internal.
    pub exit: u8,
    /// What `decide` prints on stdout.
    pub stdout: String,
    /// The error message when `exit` is not 0.
    pub error: String,
}

impl HostReply {
    fn ok(stdout: String) -> Self {
        Self {
            exit: 0,
            stdout,
            error: String::new(),
        }
    }

    fn failed(f: &Failure) -> Self {
        Self {
            exit: match f {
                Failure::User(_) => 1,
                Failure::Internal(_) => 2,
            },
            stdout: String::new(),
            error: f.message(),
        }
    }

    /// The reply as `decide`'s own result: stdout printed, a failure with
    /// the host's message.
    ///
    /// # Errors
    /// The [`Failure`] the host reported.
    pub fn into_result(self) -> Result<(), Failure> {
        print!("{}", self.stdout);
        match self.exit {
            0 => Ok(()),
            1 => Err(user(anyhow::anyhow!("{}", self.error))),
            _ => Err(internal(anyhow::anyhow!("{}", self.error))),
        }
    }
}

/// The folder of host sockets (see the module docs); not made here (a
/// `decide` that finds no host must leave nothing behind).
pub fn host_dir_path() -> PathBuf {
    match (
        std::env::var_os("DGEM_HOST_DIR"),
        std::env::var_os("XDG_RUNTIME_DIR"),
    ) {
        (Some(d), _) if !d.is_empty() => PathBuf::from(d),
        (_, Some(r)) if !r.is_empty() => PathBuf::from(r).join("dgem"),
        _ => dgem_model::model_dir()
            .parent()
            .map_or_else(std::env::temp_dir, Path::to_path_buf)
            .join("host"),
    }
}

/// [`host_dir_path`], made (mode 0700) for a host to bind in.
///
/// # Errors
/// An internal [`Failure`] when it cannot be made.
pub fn host_dir() -> Result<PathBuf, Failure> {
    let dir = host_dir_path();
    std::fs::create_dir_all(&dir)
        .map_err(|e| internal(anyhow::anyhow!("host folder {}: {e}", dir.display())))?;
    set_mode(&dir, 0o700)?;
    Ok(dir)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| internal(anyhow::anyhow!("{}: {e}", path.display())))
}

/// The socket of a host loaded with `model`'s flags by this very binary
/// (the folder is not made).
pub fn socket_path(model: &ModelArgs) -> PathBuf {
    socket_in(&host_dir_path(), model)
}

/// The socket in folder `dir` of a host loaded with `model`'s flags by this
/// binary: the name hashes the binary's path, dgem's version and the flags.
pub fn socket_in(dir: &Path, model: &ModelArgs) -> PathBuf {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let key = format!("{exe}\n{}\n{model:?}", env!("CARGO_PKG_VERSION"));
    let hash = hex::encode(Sha256::digest(key.as_bytes()));
    dir.join(format!("host-{}.sock", &hash[..16]))
}

/// Send `req` to the host at `socket` and read its reply; `None` when no
/// host answers there (no socket, a stale one, a timeout).
pub async fn ask(socket: &Path, req: &HostRequest, timeout: Duration) -> Option<HostReply> {
    let talk = async {
        let stream = UnixStream::connect(socket).await.ok()?;
        let (read, mut write) = stream.into_split();
        let mut line = serde_json::to_string(req).ok()?;
        line.push('\n');
        write.write_all(line.as_bytes()).await.ok()?;
        write.shutdown().await.ok()?;
        let mut reply = String::new();
        BufReader::new(read).read_line(&mut reply).await.ok()?;
        serde_json::from_str(&reply).ok()
    };
    tokio::time::timeout(timeout, talk).await.ok().flatten()
}

/// `decide`'s way to a host: the reply of the host for `model`'s flags, or
/// `None` when none runs (the caller then decides in process).
pub fn try_decide(model: &ModelArgs, req: HostRequest) -> Option<HostReply> {
    let socket = socket_path(model);
    if !socket.exists() {
        return None;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(ask(&socket, &req, REPLY_TIMEOUT))
}

/// Run a `dgem host` subcommand.
///
/// # Errors
/// A user [`Failure`] for bad flags or a host that did not start; an
/// internal one when the model cannot be loaded or the socket bound.
pub fn run(cmd: HostCommand) -> Result<(), Failure> {
    match cmd {
        HostCommand::Run(args) => run_host(&args),
        HostCommand::Start(args) => start(&args),
        HostCommand::Stop(args) => {
            let socket = socket_path(&args.model);
            let rt = setup::runtime()?;
            match rt.block_on(ask(&socket, &HostRequest::Stop, Duration::from_secs(10))) {
                Some(_) => eprintln!("dgem host: stopped the host at {}", socket.display()),
                None => eprintln!("dgem host: no host runs for these model flags"),
            }
            Ok(())
        }
        HostCommand::Status(args) => {
            let socket = socket_path(&args.model);
            let rt = setup::runtime()?;
            match rt.block_on(ask(&socket, &HostRequest::Ping, Duration::from_secs(10))) {
                Some(r) => println!("running at {}: {}", socket.display(), r.stdout.trim()),
                None => println!("not running (socket would be {})", socket.display()),
            }
            Ok(())
        }
    }
}

/// `host start`: the same command line with `start` replaced by `run`,
/// spawned in its own process group with its output in a log beside the
/// socket; then wait until it answers.
fn start(args: &HostArgs) -> Result<(), Failure> {
    use std::os::unix::process::CommandExt as _;
    let socket = socket_in(&host_dir()?, &args.model);
    let rt = setup::runtime()?;
    if let Some(r) = rt.block_on(ask(&socket, &HostRequest::Ping, Duration::from_secs(10))) {
        eprintln!(
            "dgem host: already running at {} ({})",
            socket.display(),
            r.stdout.trim()
        );
        return Ok(());
    }
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let at = argv.iter().position(|a| a == "start").ok_or_else(|| {
        internal(anyhow::anyhow!(
            "`host start` not found in the command line"
        ))
    })?;
    argv[at] = "run".into();
    let log = socket.with_extension("log");
    let out = std::fs::File::create(&log)
        .map_err(|e| internal(anyhow::anyhow!("host log {}: {e}", log.display())))?;
    let err = out.try_clone().map_err(internal)?;
    let exe = std::env::current_exe().map_err(internal)?;
    let mut child = std::process::Command::new(exe)
        .args(&argv)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| internal(anyhow::anyhow!("could not start the host: {e}")))?;
    let started = Instant::now();
    loop {
        if let Some(r) = rt.block_on(ask(&socket, &HostRequest::Ping, Duration::from_secs(10))) {
            eprintln!(
                "dgem host: ready at {} ({}); it exits after {:.0} s idle, or on `dgem host stop`",
                socket.display(),
                r.stdout.trim(),
                args.idle_timeout
            );
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(user(anyhow::anyhow!(
                "the host exited ({status}) before it was ready; its log is {}",
                log.display()
            )));
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(internal(anyhow::anyhow!(
                "the host was not ready within {} s; its log is {}",
                START_TIMEOUT.as_secs(),
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `host run`: load the model, bind the socket, answer until idle.
fn run_host(args: &HostArgs) -> Result<(), Failure> {
    if !(args.idle_timeout.is_finite() && args.idle_timeout > 0.0) {
        return Err(user(anyhow::anyhow!(
            "`--idle-timeout` must be a number of seconds above 0. Given: `{}`",
            args.idle_timeout
        )));
    }
    let socket = socket_in(&host_dir()?, &args.model);
    let engine: Arc<dyn dgem_engine::Decider> = Arc::new(setup::engine(&args.model)?);
    let rt = setup::runtime()?;
    rt.block_on(async {
        let listener = bind(&socket).await?;
        set_mode(&socket, 0o600)?;
        let model = engine.info().model_id;
        eprintln!("dgem host: {model} at {}", socket.display());
        let served = serve(listener, engine, Duration::from_secs_f64(args.idle_timeout)).await;
        let _ = std::fs::remove_file(&socket);
        served
    })
}

/// Bind `socket`, replacing a stale file no host answers on; refuse when a
/// live host holds it.
async fn bind(socket: &Path) -> Result<UnixListener, Failure> {
    if socket.exists() {
        if ask(socket, &HostRequest::Ping, Duration::from_secs(5))
            .await
            .is_some()
        {
            return Err(user(anyhow::anyhow!(
                "a host already runs at {}",
                socket.display()
            )));
        }
        let _ = std::fs::remove_file(socket);
    }
    UnixListener::bind(socket)
        .map_err(|e| internal(anyhow::anyhow!("could not bind {}: {e}", socket.display())))
}

/// Answer requests one at a time until `idle` passes without one, a stop
/// request, or a shutdown signal.
async fn serve(
    listener: UnixListener,
    engine: Arc<dyn dgem_engine::Decider>,
    idle: Duration,
) -> Result<(), Failure> {
    let model = engine.info().model_id;
    let shutdown = dgem_server::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            () = tokio::time::sleep(idle) => {
                eprintln!("dgem host: idle for {} s, exiting", idle.as_secs());
                return Ok(());
            }
            () = &mut shutdown => return Ok(()),
        };
        let Ok((stream, _)) = conn else { continue };
        let (read, mut write) = stream.into_split();
        let mut line = String::new();
        let got = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_LINE as u64))
            .read_line(&mut line)
            .await;
        let reply = match got
            .ok()
            .and_then(|_| serde_json::from_str::<HostRequest>(&line).ok())
        {
            Some(HostRequest::Ping) => {
                HostReply::ok(format!("{model}, dgem {}", env!("CARGO_PKG_VERSION")))
            }
            Some(HostRequest::Stop) => {
                let _ = reply_to(&mut write, &HostReply::ok("stopping".into())).await;
                return Ok(());
            }
            Some(HostRequest::Decide {
                policy,
                text,
                request,
                json,
                stats,
            }) => {
                let started = Instant::now();
                let reply = decide(&engine, policy.clone(), text, *request, json, stats).await;
                eprintln!(
                    "dgem host: decided `{policy}` in {:.0} ms (exit {})",
                    started.elapsed().as_secs_f64() * 1e3,
                    reply.exit
                );
                reply
            }
            None => HostReply::failed(&internal(anyhow::anyhow!(
                "the host could not read the request (a dgem of another version?)"
            ))),
        };
        let _ = reply_to(&mut write, &reply).await;
    }
}

async fn reply_to(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    reply: &HostReply,
) -> std::io::Result<()> {
    let mut line = serde_json::to_string(reply).unwrap_or_default();
    line.push('\n');
    write.write_all(line.as_bytes()).await?;
    write.shutdown().await
}

/// One decision, as `dgem decide` makes and prints it.
async fn decide(
    engine: &Arc<dyn dgem_engine::Decider>,
    policy: String,
    text: String,
    request: DecisionRequest,
    json: bool,
    stats: bool,
) -> HostReply {
    let service = Service::new(
        Catalogue::new(crate::commands::templates::catalogue()).with_policy_text(policy, text),
    );
    let result = async {
        let prepared = service
            .prepare(None, request)
            .map_err(crate::commands::after::service_failure)?;
        dgem_core::images::check_required(&prepared.request.schema, &prepared.request.state)
            .map_err(|e| user(anyhow::anyhow!("{}", e.message)))?;
        let decided = service
            .decide(engine.as_ref(), prepared)
            .await
            .map_err(crate::failure::engine)?;
        crate::commands::decide::render(&decided, json, stats)
    }
    .await;
    match result {
        Ok(out) => HostReply::ok(out),
        Err(f) => HostReply::failed(&f),
    }
}
