//! A cancellation handle for a pull: one side calls [`CancelToken::cancel`]
//! (a signal handler, a server shutting down), the pull notices at its next
//! wait and stops.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Shared "stop now" flag with a wake-up: clones share one flag, so the
/// caller keeps a clone and hands another to [`crate::PullConfig`].
///
/// Waits ([`CancelToken::wait_timeout`]) return as soon as the token is
/// cancelled, so a pull that sleeps through a `Retry-After` stops at once.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<(Mutex<bool>, Condvar)>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancel: every clone reports [`is_cancelled`](Self::is_cancelled) from
    /// now on and every wait returns. Cancelling twice is harmless.
    pub fn cancel(&self) {
        let (flag, wake) = &*self.inner;
        *flag.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
    }

    /// Whether [`cancel`](Self::cancel) was called on any clone.
    pub fn is_cancelled(&self) -> bool {
        *self.inner.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleep up to `timeout`, waking early on cancellation; `true` when
    /// cancelled.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let (flag, wake) = &*self.inner;
        let until = Instant::now() + timeout;
        let mut cancelled = flag.lock().unwrap_or_else(PoisonError::into_inner);
        while !*cancelled {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            cancelled = wake
                .wait_timeout(cancelled, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *cancelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_returns_early_when_another_clone_cancels() {
        let token = CancelToken::new();
        assert!(!token.is_cancelled());
        assert!(!token.wait_timeout(Duration::from_millis(10)));
        let other = token.clone();
        let started = Instant::now();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.cancel();
        });
        assert!(token.wait_timeout(Duration::from_secs(10)));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(canceller.join().is_ok());
        assert!(token.is_cancelled());
        // Once cancelled, a wait does not sleep at all.
        let again = Instant::now();
        assert!(token.wait_timeout(Duration::from_secs(10)));
        assert!(again.elapsed() < Duration::from_millis(100));
    }
}
