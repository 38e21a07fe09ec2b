//! Threads for one model call: the CPUs this process may use, less those other
//! processes keep busy at the moment the call starts.
//!
//! **Why.** llama.cpp splits every decode over its worker threads, and the
//! workers meet at a barrier after each graph node. When another CPU-bound
//! process holds a core, the scheduler runs it in place of one worker, and the
//! other workers wait at the next barrier for a time slice that comes late.
//! Measured on a 2-core machine with the Gemma 3 270M (`dgem decide` of the
//! support-triage policy, model load included): 3.2 s idle; with two busy
//! loops running, 24.1 s at 2 threads against 7.8 s at 1 thread.
//!
//! **The rule.** The ceiling is the configured thread count
//! ([`crate::LlamaConfig::n_threads`]); its default,
//! [`crate::default_threads`], is Rust's `available_parallelism`, which on
//! Linux follows both the process's CPU affinity (`taskset`, cpusets) and a
//! cgroup CPU quota (containers, Cloud Run). Before each call the model thread
//! samples the kernel's count of runnable tasks (`procs_running` in
//! `/proc/stat`) and this process's own runnable threads (state `R` in
//! `/proc/self/task/*/stat`); the others' count is the difference, and
//! [`threads_for`] gives `clamp(online CPUs − others, 1, ceiling)`. While the
//! first sample shows others, it samples again after 1 and 3 ms and keeps the
//! fewest ([`sample_settled`]), so that a task runnable for an instant (the
//! caller that just sent the request) is not taken for a busy neighbour. On a large
//! host where a container has a small quota, busy neighbours lower the count
//! only once they leave fewer free CPUs than the quota.
//!
//! **Numbers do not move.** ggml's CPU kernels split each operation's rows
//! among the threads and compute every row on one thread, so the thread count
//! changes no result: a decision read at 1 and at 2 threads gave bit-identical
//! probabilities (checked by `thread_count_keeps_numbers` in
//! `tests/forward.rs`).
//!
//! Where `/proc` cannot be read (not Linux, a sandbox), no sample is taken and
//! every call uses the ceiling.

use std::time::Duration;

/// One sample of the machine's load, taken when a model call starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuLoad {
    /// CPUs online on the host (`cpuN` lines of `/proc/stat`), ≥ 1.
    pub online: usize,
    /// Runnable tasks on the whole host (`procs_running`), this process's included.
    pub running: usize,
    /// This process's runnable threads among them (the sampling thread included).
    pub own_running: usize,
}

impl CpuLoad {
    /// Runnable tasks of other processes: `running` less this process's own
    /// (at least the sampling thread).
    pub fn others(&self) -> usize {
        self.running.saturating_sub(self.own_running.max(1))
    }
}

/// Threads for a call under `load`, at most `ceiling` and at least 1 (see the
/// module docs for the rule).
pub fn threads_for(ceiling: usize, load: Option<CpuLoad>) -> usize {
    let ceiling = ceiling.max(1);
    let Some(load) = load else {
        return ceiling;
    };
    load.online.saturating_sub(load.others()).clamp(1, ceiling)
}

/// Pauses between the samples of [`sample_settled`], 4 ms in all at most.
pub const SETTLE_PAUSES: [Duration; 2] = [Duration::from_millis(1), Duration::from_millis(3)];

/// The load a call should follow: [`sample`], and while other processes
/// seem to hold CPUs, up to two more samples after the [`SETTLE_PAUSES`],
/// keeping the one with the fewest others ([`quieter`]).
///
/// One sample counts whatever is runnable at that instant, and the moment a
/// request arrives is the moment its sender is: measured with `dgem
/// bench-host` on the 1.5B, a warm host read most decisions at 1 thread
/// because the `dgem decide` that had just written to its socket was still
/// runnable, and took 861 ms against 445 ms in process (485 ms with
/// `--follow-load off`). A task runnable for a moment is gone a millisecond
/// later; a CPU-bound neighbour is runnable in every sample, so it still
/// lowers the count.
pub fn sample_settled() -> Option<CpuLoad> {
    let mut best = sample()?;
    for pause in SETTLE_PAUSES {
        if best.others() == 0 {
            break;
        }
        std::thread::sleep(pause);
        if let Some(next) = sample() {
            best = quieter(best, next);
        }
    }
    Some(best)
}

/// Of two samples, the one with fewer other runnable tasks (`a` on a tie).
pub fn quieter(a: CpuLoad, b: CpuLoad) -> CpuLoad {
    if b.others() < a.others() {
        b
    } else {
        a
    }
}

/// Sample the load now; `None` where `/proc` cannot be read or parsed.
pub fn sample() -> Option<CpuLoad> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let (online, running) = parse_stat(&stat)?;
    let own_running = own_running().unwrap_or(1);
    Some(CpuLoad {
        online,
        running,
        own_running,
    })
}

/// `(online CPUs, procs_running)` from the text of `/proc/stat`.
fn parse_stat(stat: &str) -> Option<(usize, usize)> {
    let mut online = 0;
    let mut running = None;
    for line in stat.lines() {
        let mut words = line.split_ascii_whitespace();
        match words.next() {
            Some(w)
                if w.len() > 3
                    && w.starts_with("cpu")
                    && w[3..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                online += 1;
            }
            Some("procs_running") => running = words.next().and_then(|n| n.parse().ok()),
            _ => {}
        }
    }
    (online > 0).then_some(())?;
    Some((online, running?))
}

/// This process's threads in state `R` (running or runnable).
fn own_running() -> Option<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            // The thread ended between the listing and the read.
            continue;
        };
        if task_state(&stat) == Some('R') {
            n += 1;
        }
    }
    Some(n)
}

/// The state letter of a `/proc/<pid>/task/<tid>/stat` line: the first field
/// after the command name, which is in parentheses and may hold spaces or `)`.
fn task_state(stat: &str) -> Option<char> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(online: usize, running: usize, own_running: usize) -> Option<CpuLoad> {
        Some(CpuLoad {
            online,
            running,
            own_running,
        })
    }

    #[test]
    fn idle_machine_uses_the_ceiling() {
        assert_eq!(threads_for(2, load(2, 1, 1)), 2);
        // Our own spinning workers are not someone else's load.
        assert_eq!(threads_for(2, load(2, 3, 3)), 2);
    }

    #[test]
    fn one_busy_process_on_two_cores_leaves_one_thread() {
        assert_eq!(threads_for(2, load(2, 2, 1)), 1);
        assert_eq!(threads_for(2, load(2, 3, 1)), 1);
        assert_eq!(threads_for(8, load(8, 4, 1)), 5);
    }

    #[test]
    fn quota_on_a_large_host_drops_only_when_free_cpus_run_short() {
        assert_eq!(threads_for(2, load(64, 30, 1)), 2);
        assert_eq!(threads_for(4, load(64, 62, 1)), 3);
    }

    #[test]
    fn a_waiting_caller_counted_in_one_sample_does_not_halve_the_threads() {
        // The request's sender is runnable in the first sample only; the
        // settled load is the quieter sample, which leaves both threads.
        let first = CpuLoad {
            online: 2,
            running: 2,
            own_running: 1,
        };
        let later = CpuLoad {
            online: 2,
            running: 1,
            own_running: 1,
        };
        assert_eq!(threads_for(2, Some(first)), 1);
        assert_eq!(quieter(first, later), later);
        assert_eq!(threads_for(2, Some(quieter(first, later))), 2);
        // A busy neighbour is in every sample, so it still takes its core.
        assert_eq!(threads_for(2, Some(quieter(first, first))), 1);
        assert_eq!(later.others(), 0);
        assert_eq!(first.others(), 1);
    }

    #[test]
    fn no_sample_or_a_zero_ceiling_still_gives_a_thread() {
        assert_eq!(threads_for(4, None), 4);
        assert_eq!(threads_for(0, None), 1);
        assert_eq!(threads_for(0, load(2, 9, 1)), 1);
        assert_eq!(threads_for(3, load(2, 1, 0)), 2);
    }

    #[test]
    fn parses_proc_stat() {
        let text = "cpu  1 2 3 4\ncpu0 1 2 3 4\ncpu1 1 2 3 4\nintr 5\nctxt 9\nprocs_running 3\nprocs_blocked 0\n";
        assert_eq!(parse_stat(text), Some((2, 3)));
        assert_eq!(parse_stat("cpu 1 2\nprocs_running 3\n"), None);
        assert_eq!(parse_stat("cpu0 1 2\n"), None);
    }

    #[test]
    fn reads_the_state_after_a_command_with_parentheses() {
        assert_eq!(task_state("41 (tokio (rt) x) R 1 41"), Some('R'));
        assert_eq!(task_state("41 (dgem) S 1 41"), Some('S'));
        assert_eq!(task_state("garbled"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn samples_this_machine() {
        let load = sample().expect("/proc is readable on Linux");
        assert!(load.online >= 1);
        // The sampling thread itself is runnable.
        assert!(load.own_running >= 1, "{load:?}");
        assert!(load.running >= 1, "{load:?}");
    }
}
