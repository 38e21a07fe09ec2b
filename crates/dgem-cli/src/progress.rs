//! indicatif progress bars for model downloads and a spinner for long
//! decisions (hidden when stderr is not a TTY), and the reporter that shows
//! `dgem serve`'s first-start download on `/health`.

use std::sync::Arc;

use dgem_server::loading::{LoadingDecider, LOADING_MODEL, PULLING_MODEL};
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
    /// A wait or a heartbeat: a line of its own, above the bar when it is
    /// drawn.
    fn note(&self, msg: &str) {
        if self.bar.is_hidden() {
            eprintln!("{msg}");
        } else {
            self.bar.println(msg);
        }
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

/// Reports the default model's pull for `dgem serve`: each stage, wait and
/// heartbeat becomes `/health`'s `detail` under phase `pulling_model` and a
/// `dgem serve:` line on stderr; when the pull is over the phase is
/// `loading_model` again.
#[derive(Debug)]
pub struct ServeProgress {
    loading: Arc<LoadingDecider>,
}

impl ServeProgress {
    /// A reporter into `loading`'s health.
    pub fn new(loading: Arc<LoadingDecider>) -> Self {
        Self { loading }
    }
}

impl dgem_model::Progress for ServeProgress {
    fn stage(&self, msg: &str) {
        self.loading.report(PULLING_MODEL, Some(msg.to_owned()));
        eprintln!("dgem serve: {msg}");
    }
    fn finish(&self) {
        self.loading.report(LOADING_MODEL, None);
    }
}
