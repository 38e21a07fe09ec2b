//! `dgem batch`'s progress: an indicatif bar (rows done, rows/s, ETA,
//! failures) when stderr is a terminal, else a plain line every
//! [`PLAIN_EVERY`] (a log file or a job's output gets a few lines, not a
//! redraw per row).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the plain-line form reports.
pub const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// The progress of one run.
pub struct Bar {
    bar: ProgressBar,
    /// When the last plain line was printed.
    plain: Mutex<Instant>,
    started: Instant,
    resumed: u64,
    /// Plain lines when the bar is not drawn (off for [`Bar::hidden`]).
    plain_lines: bool,
}

impl Bar {
    /// A bar over `total` rows, `done` of them kept from an earlier run.
    pub fn new(total: usize, done: usize) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "batch [{bar:30}] {pos}/{len} rows {per_sec} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_position(done as u64);
        bar.reset_eta();
        if done > 0 {
            let msg = format!("batch: resuming, {done} of {total} rows already written");
            if bar.is_hidden() {
                eprintln!("{msg}");
            } else {
                bar.println(msg);
            }
        }
        Self {
            bar,
            plain: Mutex::new(Instant::now()),
            started: Instant::now(),
            resumed: done as u64,
            plain_lines: true,
        }
    }

    /// A bar that reports nothing (a benchmark's rounds).
    pub fn hidden() -> Self {
        Self {
            bar: ProgressBar::hidden(),
            plain: Mutex::new(Instant::now()),
            started: Instant::now(),
            resumed: 0,
            plain_lines: false,
        }
    }

    /// One more row written; `failed` rows so far.
    pub fn advance(&self, failed: usize) {
        self.bar.inc(1);
        if failed > 0 {
            self.bar.set_message(format!("{failed} failed"));
        }
        if !self.bar.is_hidden() || !self.plain_lines {
            return;
        }
        let Ok(mut last) = self.plain.lock() else {
            return;
        };
        if last.elapsed() < PLAIN_EVERY {
            return;
        }
        let done = self.bar.position();
        let total = self.bar.length().unwrap_or(done);
        let ran = done.saturating_sub(self.resumed) as f64;
        let rate = ran / self.started.elapsed().as_secs_f64().max(1e-9);
        let eta = if rate > 0.0 {
            format!("{:.0} s", total.saturating_sub(done) as f64 / rate)
        } else {
            "…".into()
        };
        eprintln!("batch: {done}/{total} rows, {rate:.2} rows/s, eta {eta}, {failed} failed");
        *last = Instant::now();
    }

    /// Remove the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
