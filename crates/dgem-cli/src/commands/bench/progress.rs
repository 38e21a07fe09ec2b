//! The progress bar of the bench commands and its ETA (moved from `bench.rs`
//! unchanged).

use dgem_bench::runner::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Items the ETA's rate is measured over: the last this many finished.
pub const ETA_WINDOW: usize = 20;

/// Time left from the finish times of the last [`ETA_WINDOW`] items: their
/// rate, not the whole run's average (which a slow first item, model load or
/// a resumed run would skew), so the estimate does not jump. `None` until two
/// items have finished in this session.
pub fn eta_from_window(
    window: &std::collections::VecDeque<std::time::Instant>,
    remaining: u64,
) -> Option<std::time::Duration> {
    let (first, last) = (window.front()?, window.back()?);
    let spans = window.len().checked_sub(1).filter(|n| *n > 0)?;
    let per_item = last.duration_since(*first).as_secs_f64() / spans as f64;
    Some(std::time::Duration::from_secs_f64(
        per_item * remaining as f64,
    ))
}

/// A progress bar on stderr (indicatif hides it when stderr is not a
/// terminal), with the ETA of [`eta_from_window`].
pub(super) struct Bar {
    bar: ProgressBar,
    window: std::sync::Mutex<std::collections::VecDeque<std::time::Instant>>,
}

impl Bar {
    pub(super) fn new(name: &str) -> Self {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        let style =
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(name.to_owned());
        Self {
            bar,
            window: std::sync::Mutex::new(std::collections::VecDeque::with_capacity(ETA_WINDOW)),
        }
    }
}

impl Progress for Bar {
    fn begin(&self, total: usize, done: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        if done > 0 {
            self.bar
                .println(format!("resuming: {done} of {total} rows already done"));
        }
    }
    fn advance(&self, id: &str) {
        self.bar.inc(1);
        let remaining = self
            .bar
            .length()
            .unwrap_or(0)
            .saturating_sub(self.bar.position());
        let eta = match self.window.lock() {
            Ok(mut w) => {
                w.push_back(std::time::Instant::now());
                while w.len() > ETA_WINDOW {
                    w.pop_front();
                }
                eta_from_window(&w, remaining)
            }
            Err(_) => None,
        };
        let eta = eta.map_or_else(
            || "eta …".to_string(),
            |d| format!("eta {}", indicatif::HumanDuration(d)),
        );
        self.bar.set_message(format!("{eta} · {id}"));
    }
    fn end(&self) {
        self.bar.finish_and_clear();
    }
}
