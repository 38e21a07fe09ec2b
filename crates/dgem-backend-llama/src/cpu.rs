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
//! [`threads_for`] gives `clamp(online CPUs − others, 1, ceiling)`. While that
//! would give fewer threads than it could, it samples twice more, after 1 ms
//! and a further 3 ms, and follows the median ([`sample_settled`], [`settle`]), so that a
//! task runnable for an instant (the caller that just sent the request) is
//! not taken for a busy neighbour. On a large
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

/// Pauses before the second and third samples of [`sample_settled`]: about
/// 4 ms in all (plus timer slack and two reads of `/proc`).
pub const SETTLE_PAUSES: [Duration; 2] = [Duration::from_millis(1), Duration::from_millis(3)];

/// The load a call with at most `ceiling` threads should follow:
/// [`settle`] over [`sample`], pausing [`SETTLE_PAUSES`] between samples.
///
/// One sample counts whatever is runnable at that instant, and the moment a
/// request arrives is the moment its sender is: with one sample, a warm host
/// read most decisions at 1 thread because the `dgem decide` that had just
/// written to its socket was still runnable (`dgem bench-host` on the 1.5B,
/// one run: 861 ms via the host against 445 ms in process; 485 ms with
/// `--follow-load off`).
pub fn sample_settled(ceiling: usize) -> Option<CpuLoad> {
    settle(ceiling, sample(), |pause| {
        std::thread::sleep(pause);
        sample()
    })
}

/// The load to follow, from a `first` sample and, only while `first` would
/// give fewer threads than the most any load could (`ceiling`, or the CPUs
/// online when fewer), two more from `next` (called with the pause to wait
/// first): the median of the three by [`CpuLoad::others`].
///
/// A task runnable for an instant (the caller that just sent the request, a
/// thread between two system calls) is in one sample and not the median; a
/// CPU-bound neighbour is in every sample, and one runnable most of the time
/// is counted nearly as often as with a single sample (when it is in the
/// first and in one of the next two). On an idle machine, or one whose free
/// CPUs already cover `ceiling`, nothing more is sampled.
/// `None` when `first` is (no `/proc`); a failed later sample counts as
/// `first` again.
pub fn settle(
    ceiling: usize,
    first: Option<CpuLoad>,
    mut next: impl FnMut(Duration) -> Option<CpuLoad>,
) -> Option<CpuLoad> {
    let first = first?;
    // The most threads any load could give: the ceiling, or the CPUs online
    // when `--threads` asks for more.
    let best = first.online.clamp(1, ceiling.max(1));
    if threads_for(ceiling, Some(first)) >= best {
        return Some(first);
    }
    let mut three = [first; 3];
    for (slot, pause) in three.iter_mut().skip(1).zip(SETTLE_PAUSES) {
        *slot = next(pause).unwrap_or(first);
    }
    three.sort_by_key(CpuLoad::others);
    Some(three[1])
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

    fn cpu(online: usize, running: usize, own_running: usize) -> CpuLoad {
        CpuLoad {
            online,
            running,
            own_running,
        }
    }

    fn load(online: usize, running: usize, own_running: usize) -> Option<CpuLoad> {
        Some(cpu(online, running, own_running))
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
        // The request's sender is runnable in the first sample only.
        let (first, quiet) = (cpu(2, 2, 1), cpu(2, 1, 1));
        assert_eq!(threads_for(2, Some(first)), 1);
        let mut pauses = Vec::new();
        let settled = settle(2, Some(first), |p| {
            pauses.push(p);
            Some(quiet)
        });
        assert_eq!(settled, Some(quiet));
        assert_eq!(threads_for(2, settled), 2);
        assert_eq!(pauses, SETTLE_PAUSES.to_vec());
    }

    #[test]
    fn a_neighbour_in_most_samples_still_takes_its_core() {
        let (busy, quiet) = (cpu(2, 2, 1), cpu(2, 1, 1));
        // Busy in every sample, or in two of three: the median is busy.
        assert_eq!(settle(2, Some(busy), |_| Some(busy)), Some(busy));
        let mut later = [quiet, busy].into_iter();
        assert_eq!(settle(2, Some(busy), |_| later.next()), Some(busy));
        // A failed later sample counts as the first.
        assert_eq!(settle(2, Some(busy), |_| None), Some(busy));
    }

    #[test]
    fn nothing_more_is_sampled_when_the_first_already_allows_the_ceiling() {
        let idle = cpu(2, 1, 1);
        // A large host with others running but free CPUs to spare.
        let roomy = cpu(64, 30, 1);
        // Last: `--threads 4` on 2 idle cores, where 2 threads is the most
        // any load could give.
        for (ceiling, first) in [(2, idle), (2, roomy), (4, idle)] {
            let mut calls = 0;
            let settled = settle(ceiling, Some(first), |_| {
                calls += 1;
                None
            });
            assert_eq!(settled, Some(first));
            assert_eq!(calls, 0, "ceiling {ceiling}, {first:?}");
        }
        assert_eq!(settle(2, None, |_| Some(idle)), None);
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
