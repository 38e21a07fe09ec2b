//! indicatif progress bars for model downloads and a spinner for long
//! decisions (hidden when stderr is not a TTY).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte progress bar on stderr.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A new bar; draws only when stderr is a terminal.
    pub fn new() -> Self {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{msg:40} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        Self { bar }
    }
}

impl dgem_model::Progress for Bar {
    fn stage(&self, msg: &str) {
        self.bar.set_message(msg.to_owned());
        if !self.bar.is_hidden() {
            return;
        }
        eprintln!("{msg}");
    }
    fn set_len(&self, n: u64) {
        self.bar.set_position(0);
        self.bar.set_length(n);
    }
    fn inc(&self, n: u64) {
        self.bar.inc(n);
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A spinner with `msg` and the elapsed time on stderr while a long step
/// runs (a first decision loads the model and may take seconds). indicatif draws it
/// only when stderr is a terminal, so pipes and logs get nothing; it appears
/// after half a second, so a fast decision does not flicker.
pub fn spinner(msg: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(msg.to_owned());
    let b = bar.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        if !b.is_finished() {
            b.enable_steady_tick(std::time::Duration::from_millis(120));
        }
    });
    bar
}
