//! `dgem host`: a warm model host, so a second `dgem decide` in a shell
//! does not load the model again.
//!
//! Loading a GGUF and building its first caches is most of a one-shot call:
//! on 2 cores, `dgem bench-host` measured a 1.5B `dgem decide` that loads the
//! model at 1,584 ms, one answered by a warm host at 431 ms, and a warm
//! decision in process at 414 ms (medians, with the model file in the page
//! cache; `benchmarks/results/qwen2.5-coder-1.5b/host.json`). `dgem host start` starts a background process that loads the
//! model once, with the model flags it was given, and answers decisions on
//! a Unix socket. `dgem decide` with the same model flags finds the socket
//! and sends its request there instead of loading the model itself. Its
//! output is the same bytes the in-process path prints, because the host
//! renders it with the same code.
//!
//! - **Where:** `$DGEM_HOST_DIR`, else `$XDG_RUNTIME_DIR/dgem`, else
//!   `$XDG_CACHE_HOME/dgem/host` (`~/.cache/dgem/host`). A folder dgem makes
//!   is mode 0700; one that exists must already be the user's own and
//!   closed to others (it is never chmodded), or no host is used. Each
//!   socket is 0600, and a client talks only to a socket the user owns.
//! - **Which host:** a socket's name is a hash of what decides the answers
//!   and how the model loads: the dgem binary (its path, size and
//!   modification time, so a rebuild never talks to the old host), dgem's
//!   version, the model flags, the model file itself when `--model` names
//!   one (resolved, with its size and time), and the model folder.
//! - **How long:** a host exits after `--idle-timeout` seconds (default 900)
//!   without a request, on `dgem host stop`, or on SIGTERM/Ctrl-C. It
//!   removes its socket on the way out.
//! - **What goes to it:** `decide` on the embedded model with no `--plan`,
//!   no `--image`, no `--cascade-provider` and no `--calibration-file`;
//!   anything else runs in process as before. `--host off` (or
//!   `DGEM_USE_HOST=off`) never uses one. A host that does not answer in
//!   time, or cannot read the request, is passed over with a note and the
//!   decision is made in process.
//!
//! The wire is one JSON line each way ([`wire`]): small, and needing no
//! HTTP stack on either side of a local socket. [`serve`] is the host side.
//!
//! Load-time warnings (such as a user GGUF's missing temperatures) are
//! printed once, in the host's log beside its socket, not on every
//! `decide`.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;

use crate::failure::{internal, user, Failure};
use crate::setup::{self, ModelArgs};

#[cfg(feature = "bench")]
pub mod bench;
pub mod serve;
pub mod wire;

use wire::{Envelope, MAX_LINE, PROTOCOL};
pub use wire::{HostReply, HostRequest};

/// How long `host start` waits for the host it started to be ready (a
/// first run may pull the model).
const START_TIMEOUT: Duration = Duration::from_secs(900);

/// How long `host stop` waits for the host to exit after it answered.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// Time a client allows a host beyond the model's own queue and model
/// timeouts before deciding in process.
const REPLY_MARGIN: Duration = Duration::from_secs(30);

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
    /// Exit after this many seconds without a decision (at most a week).
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

/// This process's user id (the owner of `/proc/self`); `None` where that
/// cannot be read, and then no host is used.
fn my_uid() -> Option<u32> {
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Whether `path` is the user's own and closed to group and others.
fn private(path: &Path) -> bool {
    match (std::fs::symlink_metadata(path), my_uid()) {
        (Ok(m), Some(uid)) => m.uid() == uid && m.mode() & 0o077 == 0,
        _ => false,
    }
}

/// The folder of host sockets (see the module docs); not made here (a
/// `decide` that finds no host must leave nothing behind).
pub fn host_dir_path() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("DGEM_HOST_DIR") {
        return d;
    }
    if let Some(r) = var("XDG_RUNTIME_DIR") {
        return r.join("dgem");
    }
    let cache = var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")));
    match cache {
        Some(c) => c.join("dgem").join("host"),
        None => std::env::temp_dir().join(format!("dgem-host-{}", my_uid().unwrap_or(0))),
    }
}

/// [`host_dir_path`], made mode 0700 if it is missing; an existing one must
/// already be private (see the module docs).
///
/// # Errors
/// A user [`Failure`] naming the folder when it is not private; an
/// internal one when it cannot be made.
pub fn host_dir() -> Result<PathBuf, Failure> {
    let dir = host_dir_path();
    if !dir.exists() {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| internal(anyhow::anyhow!("host folder {}: {e}", parent.display())))?;
        }
        match std::fs::create_dir(&dir) {
            Ok(()) => set_mode(&dir, 0o700)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(internal(anyhow::anyhow!(
                    "host folder {}: {e}",
                    dir.display()
                )))
            }
        }
    }
    if !private(&dir) {
        return Err(user(anyhow::anyhow!(
            "host folder {} must be yours and closed to others (mode 700); dgem does not change an existing folder: set `DGEM_HOST_DIR` to a folder of your own",
            dir.display()
        )));
    }
    Ok(dir)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| internal(anyhow::anyhow!("{}: {e}", path.display())))
}

/// Path, size and modification time of `path`, when it is a file.
fn file_identity(path: &Path) -> String {
    match (std::fs::canonicalize(path), std::fs::metadata(path)) {
        (Ok(p), Ok(m)) => format!("{}:{}:{}", p.display(), m.len(), m.mtime()),
        _ => String::new(),
    }
}

/// The 16-hex-digit key of a host loaded with `model`'s flags by this
/// binary (see the module docs).
pub fn key_of(model: &ModelArgs) -> String {
    let exe = std::env::current_exe()
        .map(|p| file_identity(&p))
        .unwrap_or_default();
    let file = model
        .model
        .as_deref()
        .map(file_identity)
        .unwrap_or_default();
    let key = format!(
        "{exe}\n{}\n{model:?}\n{file}\n{}",
        env!("CARGO_PKG_VERSION"),
        dgem_model::model_dir().display()
    );
    hex::encode(Sha256::digest(key.as_bytes()))[..16].to_string()
}

/// The socket of a host loaded with `model`'s flags by this binary (the
/// folder is not made).
pub fn socket_path(model: &ModelArgs) -> PathBuf {
    socket_in(&host_dir_path(), model)
}

/// The socket in folder `dir` of a host loaded with `model`'s flags.
pub fn socket_in(dir: &Path, model: &ModelArgs) -> PathBuf {
    dir.join(format!("host-{}.sock", key_of(model)))
}

/// Send `req` to the host at `socket` and read its reply; `None` when no
/// host answers there (no socket, one the user does not own, a timeout).
pub async fn ask(socket: &Path, req: HostRequest, timeout: Duration) -> Option<HostReply> {
    let folder_ok = socket.parent().is_some_and(private);
    let owned = std::fs::symlink_metadata(socket).is_ok_and(|m| Some(m.uid()) == my_uid());
    if !(folder_ok && owned) {
        return None;
    }
    let mut line = serde_json::to_string(&Envelope {
        protocol: PROTOCOL,
        request: req,
    })
    .ok()?;
    if line.len() > MAX_LINE {
        return None;
    }
    line.push('\n');
    let talk = async {
        let stream = UnixStream::connect(socket).await.ok()?;
        let (read, mut write) = stream.into_split();
        write.write_all(line.as_bytes()).await.ok()?;
        write.shutdown().await.ok()?;
        let mut reply = String::new();
        BufReader::new(read).read_line(&mut reply).await.ok()?;
        serde_json::from_str(&reply).ok()
    };
    tokio::time::timeout(timeout, talk).await.ok().flatten()
}

/// `decide`'s way to a host: the reply of the host for `model`'s flags, or
/// `None` when none runs or it could not answer (the caller then decides in
/// process; a host that was there but did not answer is noted on stderr).
pub fn try_decide(model: &ModelArgs, req: HostRequest) -> Option<HostReply> {
    let socket = socket_path(model);
    if !socket.exists() {
        return None;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let wait =
        Duration::from_secs_f64((model.queue_timeout + model.model_timeout).clamp(0.0, 86_400.0))
            + REPLY_MARGIN;
    match rt.block_on(ask(&socket, req, wait)) {
        Some(r) if !r.unreadable => Some(r),
        Some(r) => {
            eprintln!(
                "note: the dgem host at {} could not take this request ({}); deciding here",
                socket.display(),
                r.error.join(": ")
            );
            None
        }
        None => {
            if serve::lock_held(&socket.with_extension("lock")) {
                eprintln!(
                    "note: the dgem host at {} did not answer; deciding here",
                    socket.display()
                );
            }
            None
        }
    }
}

/// Run a `dgem host` subcommand.
///
/// # Errors
/// A user [`Failure`] for bad flags or a host that did not start; an
/// internal one when the model cannot be loaded or the socket bound.
pub fn run(cmd: HostCommand) -> Result<(), Failure> {
    match cmd {
        HostCommand::Run(args) => serve::run_host(&args),
        HostCommand::Start(args) => start(&args),
        HostCommand::Stop(args) => {
            let socket = socket_path(&args.model);
            let rt = setup::runtime()?;
            match rt.block_on(ask(&socket, HostRequest::Stop, Duration::from_secs(10))) {
                Some(r) if r.exit == 0 => {
                    // The host answers before it exits: wait until it has
                    // let go of its lock, so a `host start` right after
                    // this finds no host on its way out.
                    let lock = socket.with_extension("lock");
                    let asked = Instant::now();
                    while serve::lock_held(&lock) && asked.elapsed() < STOP_WAIT {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    if serve::lock_held(&lock) {
                        return Err(internal(anyhow::anyhow!(
                            "asked the host at {} to stop; it has not exited after {} s",
                            socket.display(),
                            STOP_WAIT.as_secs()
                        )));
                    }
                    eprintln!("dgem host: stopped the host at {}", socket.display());
                }
                Some(r) => eprintln!(
                    "dgem host: the host at {} did not stop: {}",
                    socket.display(),
                    r.error.join(": ")
                ),
                None => eprintln!("dgem host: no host runs for these model flags"),
            }
            Ok(())
        }
        HostCommand::Status(args) => {
            let socket = socket_path(&args.model);
            let rt = setup::runtime()?;
            match rt.block_on(ask(&socket, HostRequest::Ping, Duration::from_secs(10))) {
                Some(r) => println!("running at {}: {}", socket.display(), r.stdout.trim()),
                None if serve::lock_held(&socket.with_extension("lock")) => {
                    println!("starting or busy at {}", socket.display());
                }
                None => println!("not running (socket would be {})", socket.display()),
            }
            Ok(())
        }
    }
}

/// `host start`: the same command line with `start` replaced by `run`,
/// spawned in its own process group with its output appended to a log
/// beside the socket; then wait until a host answers.
fn start(args: &HostArgs) -> Result<(), Failure> {
    use std::os::unix::process::CommandExt as _;
    serve::check_idle_timeout(args)?;
    let socket = socket_in(&host_dir()?, &args.model);
    let lock = socket.with_extension("lock");
    let rt = setup::runtime()?;
    let ping = || rt.block_on(ask(&socket, HostRequest::Ping, Duration::from_secs(10)));
    if let Some(r) = ping() {
        eprintln!(
            "dgem host: already running at {} ({})",
            socket.display(),
            r.stdout.trim()
        );
        return Ok(());
    }
    let log = socket.with_extension("log");
    let spawn = || -> Result<(std::process::Child, u64), Failure> {
        let mut argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
        let at = argv.iter().position(|a| a == "start").ok_or_else(|| {
            internal(anyhow::anyhow!(
                "`host start` not found in the command line"
            ))
        })?;
        argv[at] = "run".into();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| internal(anyhow::anyhow!("host log {}: {e}", log.display())))?;
        let from = out.metadata().map(|m| m.len()).unwrap_or(0);
        let err = out.try_clone().map_err(internal)?;
        let exe = std::env::current_exe().map_err(internal)?;
        let child = std::process::Command::new(exe)
            .args(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| internal(anyhow::anyhow!("could not start the host: {e}")))?;
        Ok((child, from))
    };
    // Ours, once spawned, with where its lines begin in the log. While
    // another host holds the lock (one loading, or one on its way out after
    // `host stop`) this waits for it to answer or to let go, then spawns.
    let mut child: Option<(std::process::Child, u64)> = None;
    let started = Instant::now();
    loop {
        if let Some(r) = ping() {
            eprintln!(
                "dgem host: ready at {} ({}); it exits after {:.0} s without a decision, or on `dgem host stop`",
                socket.display(),
                r.stdout.trim(),
                args.idle_timeout
            );
            return Ok(());
        }
        match child.as_mut() {
            None if !serve::lock_held(&lock) => child = Some(spawn()?),
            None => {}
            Some((c, from)) => {
                if let Some(status) = c.try_wait().ok().flatten() {
                    if !serve::lock_held(&lock) {
                        return Err(user(anyhow::anyhow!(
                            "the host exited ({status}) before it was ready{}; its log is {}",
                            log_tail(&log, *from),
                            log.display()
                        )));
                    }
                    // Another host took the lock first: wait for it.
                    child = None;
                }
            }
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(internal(anyhow::anyhow!(
                "no host was ready within {} s; the log is {}",
                START_TIMEOUT.as_secs(),
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last lines (at most 5) a host wrote to `log` past byte `from`, as
/// `": LINE; LINE"`, or nothing: a host that fails at once says why there
/// (a bad flag, a model it cannot load).
fn log_tail(log: &std::path::Path, from: u64) -> String {
    let Ok(text) = std::fs::read(log) else {
        return String::new();
    };
    let start = usize::try_from(from).unwrap_or(0).min(text.len());
    let text = String::from_utf8_lossy(&text[start..]);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(": {}", lines[lines.len().saturating_sub(5)..].join("; "))
}
