//! The host side: hold the host's lock, load the model, bind the socket,
//! and answer until idle, stopped or signalled.
//!
//! - **One host per key.** A lock file beside the socket (`host-….lock`,
//!   an exclusive `flock` held for the host's whole life) is taken before
//!   the model loads. A second `host run` for the same key stops at once,
//!   and a socket file left by a killed host is replaced only under the
//!   lock, so it can never be a live host's.
//! - **Pings never wait.** Each connection is handled on its own task.
//!   Decisions run one at a time (the engine reads one at a time anyway),
//!   while `status`, `stop` and pings answer at once.
//! - **Bounded.** A client has [`READ_TIMEOUT`] to send its line, at most
//!   [`MAX_LINE`] bytes. A reply has [`WRITE_TIMEOUT`] to be taken.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgem_service::{Catalogue, DecisionRequest, Service};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Mutex, Notify};

use super::wire::{Envelope, HostReply, HostRequest, MAX_LINE, PROTOCOL};
use super::{host_dir, key_of, HostArgs};
use crate::failure::{internal, user, Failure};
use crate::setup;

/// How long a client has to send its request line.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to take its reply.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest `--idle-timeout` (a week).
pub const MAX_IDLE_S: f64 = 7.0 * 24.0 * 3600.0;

/// Take the exclusive lock of a host; `None` when another host holds it.
///
/// # Errors
/// An internal [`Failure`] when the lock file cannot be opened.
pub fn take_lock(lock: &Path) -> Result<Option<std::fs::File>, Failure> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock)
        .map_err(|e| internal(anyhow::anyhow!("host lock {}: {e}", lock.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(internal(anyhow::anyhow!(
            "host lock {}: {e}",
            lock.display()
        ))),
    }
}

/// Whether a host holds the lock at `lock` right now.
pub fn lock_held(lock: &Path) -> bool {
    matches!(take_lock(lock), Ok(None))
}

/// `--idle-timeout` is a number of seconds in (0, [`MAX_IDLE_S`]].
///
/// # Errors
/// A user [`Failure`] naming the flag, the range and the value given.
pub fn check_idle_timeout(args: &HostArgs) -> Result<(), Failure> {
    if args.idle_timeout.is_finite() && args.idle_timeout > 0.0 && args.idle_timeout <= MAX_IDLE_S {
        return Ok(());
    }
    Err(user(anyhow::anyhow!(
        "`--idle-timeout` must be a number of seconds above 0 and at most {MAX_IDLE_S} (a week). Given: `{}`",
        args.idle_timeout
    )))
}

/// `host run`: lock, load the model, bind the socket, answer until idle.
///
/// # Errors
/// A user [`Failure`] for a bad `--idle-timeout` or a host already running;
/// an internal one when the model cannot be loaded or the socket bound.
pub fn run_host(args: &HostArgs) -> Result<(), Failure> {
    check_idle_timeout(args)?;
    let key = key_of(&args.model);
    let dir = host_dir()?;
    let socket = dir.join(format!("host-{key}.sock"));
    // `host start` and `host stop` probe the lock by taking it for a
    // moment: a probe is not a host, so try again for a little while
    // before saying one runs.
    let lock_path = dir.join(format!("host-{key}.lock"));
    let mut lock = take_lock(&lock_path)?;
    for _ in 0..10 {
        if lock.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
        lock = take_lock(&lock_path)?;
    }
    let Some(_lock) = lock else {
        return Err(user(anyhow::anyhow!(
            "a host for these model flags already runs at {}",
            socket.display()
        )));
    };
    let engine: Arc<dyn dgem_engine::Decider> = Arc::new(setup::engine(&args.model)?);
    let rt = setup::runtime()?;
    rt.block_on(async {
        // Under the lock a socket file is a dead host's: replace it.
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)
            .map_err(|e| internal(anyhow::anyhow!("could not bind {}: {e}", socket.display())))?;
        super::set_mode(&socket, 0o600)?;
        eprintln!(
            "dgem host: {} at {}",
            engine.info().model_id,
            socket.display()
        );
        let served = serve(listener, engine, Duration::from_secs_f64(args.idle_timeout)).await;
        let _ = std::fs::remove_file(&socket);
        served
    })
}

/// What every connection shares.
struct Shared {
    engine: Arc<dyn dgem_engine::Decider>,
    /// Decisions run one at a time.
    deciding: Mutex<()>,
    /// Decisions made (reported by pings).
    decided: AtomicU64,
    /// Milliseconds since `started` of the last decision's end.
    last: AtomicU64,
    started: Instant,
    stop: Notify,
}

impl Shared {
    fn touch(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }
}

/// Answer until `idle` passes without a decision, a stop request, or a
/// shutdown signal.
async fn serve(
    listener: UnixListener,
    engine: Arc<dyn dgem_engine::Decider>,
    idle: Duration,
) -> Result<(), Failure> {
    let shared = Arc::new(Shared {
        engine,
        deciding: Mutex::new(()),
        decided: AtomicU64::new(0),
        last: AtomicU64::new(0),
        started: Instant::now(),
        stop: Notify::new(),
    });
    let shutdown = dgem_server::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let left = idle.saturating_sub(shared.idle_for());
        tokio::select! {
            c = listener.accept() => {
                if let Ok((stream, _)) = c {
                    tokio::spawn(handle(stream, shared.clone()));
                }
            }
            () = tokio::time::sleep(left) => {
                if shared.idle_for() >= idle {
                    eprintln!("dgem host: no decision for {} s, exiting", idle.as_secs());
                    return Ok(());
                }
            }
            () = shared.stop.notified() => return Ok(()),
            () = &mut shutdown => return Ok(()),
        }
    }
}

/// One connection: read its line, answer it.
async fn handle(stream: UnixStream, shared: Arc<Shared>) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_LINE as u64 + 1));
    let got = tokio::time::timeout(READ_TIMEOUT, reader.read_line(&mut line)).await;
    let reply = match got {
        Ok(Ok(n)) if n > MAX_LINE => {
            HostReply::unreadable("the request is larger than a host takes")
        }
        Ok(Ok(_)) => match serde_json::from_str::<Envelope>(&line) {
            Ok(env) if env.protocol == PROTOCOL => answer(env.request, &shared).await,
            Ok(env) => HostReply::unreadable(&format!(
                "the host speaks protocol {PROTOCOL}, the request {}",
                env.protocol
            )),
            Err(_) => HostReply::unreadable("the host could not read the request"),
        },
        _ => return,
    };
    let mut text = serde_json::to_string(&reply).unwrap_or_default();
    text.push('\n');
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        write.write_all(text.as_bytes()).await?;
        write.shutdown().await
    })
    .await;
}

async fn answer(req: HostRequest, shared: &Shared) -> HostReply {
    match req {
        HostRequest::Ping => HostReply::ok(format!(
            "{}, dgem {}, {} decisions",
            shared.engine.info().model_id,
            env!("CARGO_PKG_VERSION"),
            shared.decided.load(Ordering::Relaxed)
        )),
        HostRequest::Stop => {
            shared.stop.notify_one();
            HostReply::ok("stopping".into())
        }
        HostRequest::Decide {
            policy,
            text,
            request,
            json,
            stats,
        } => {
            let _one = shared.deciding.lock().await;
            let started = Instant::now();
            let reply = decide(&shared.engine, policy.clone(), text, *request, json, stats).await;
            shared.decided.fetch_add(1, Ordering::Relaxed);
            shared.touch();
            eprintln!(
                "dgem host: decided `{policy}` in {:.0} ms (exit {})",
                started.elapsed().as_secs_f64() * 1e3,
                reply.exit
            );
            reply
        }
    }
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
            .map_err(crate::failure::decider)?;
        crate::commands::decide::render(&decided, json, stats)
    }
    .await;
    match result {
        Ok(out) => HostReply::ok(out),
        Err(f) => HostReply::failed(&f),
    }
}
