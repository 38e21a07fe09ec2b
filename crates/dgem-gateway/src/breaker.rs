//! A per-target circuit breaker: closed → open after `failure_threshold`
//! consecutive retryable failures; open → half-open after `open_for`; one trial
//! call in half-open closes it on success or reopens it on failure.
//!
//! Time is [`tokio::time::Instant`], so tests drive it with `tokio::time::pause()`.

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

/// Breaker settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Consecutive retryable failures that open the breaker.
    pub failure_threshold: u32,
    /// How long an open breaker refuses calls before one trial (half-open).
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 3,
            open_for: Duration::from_secs(30),
        }
    }
}

/// What `/api/health` shows as `breaker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls pass.
    Closed,
    /// Calls are refused until the cool-down ends.
    Open,
    /// One trial call is allowed.
    HalfOpen,
}

impl BreakerState {
    /// The wire name (`closed`, `open`, `half_open`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug)]
struct Inner {
    failures: u32,
    opened_at: Option<Instant>,
    trial_in_flight: bool,
}

/// One target's breaker.
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    inner: Mutex<Inner>,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            inner: Mutex::new(Inner {
                failures: 0,
                opened_at: None,
                trial_in_flight: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked mid-update; the
        // counters are still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The state now.
    pub fn state(&self) -> BreakerState {
        let g = self.lock();
        match g.opened_at {
            None => BreakerState::Closed,
            Some(at) if at.elapsed() >= self.config.open_for => BreakerState::HalfOpen,
            Some(_) => BreakerState::Open,
        }
    }

    /// Whether a call may go out now. In half-open only one trial at a time passes.
    pub fn try_acquire(&self) -> bool {
        let mut g = self.lock();
        match g.opened_at {
            None => true,
            Some(at) if at.elapsed() >= self.config.open_for && !g.trial_in_flight => {
                g.trial_in_flight = true;
                true
            }
            Some(_) => false,
        }
    }

    /// Record a success (also a non-retryable answer such as a 4xx: the target
    /// is alive). Closes the breaker.
    pub fn on_success(&self) {
        let mut g = self.lock();
        g.failures = 0;
        g.opened_at = None;
        g.trial_in_flight = false;
    }

    /// Record a retryable failure. Opens (or reopens) the breaker at the threshold
    /// or when a half-open trial fails.
    pub fn on_failure(&self) {
        let mut g = self.lock();
        g.failures = g.failures.saturating_add(1);
        let trial_failed = g.trial_in_flight;
        g.trial_in_flight = false;
        if trial_failed || g.failures >= self.config.failure_threshold {
            g.opened_at = Some(Instant::now());
        }
    }

    /// How long until an open breaker lets a trial through (`None` when it is
    /// not open).
    pub fn retry_in(&self) -> Option<Duration> {
        let g = self.lock();
        g.opened_at
            .map(|at| self.config.open_for.saturating_sub(at.elapsed()))
            .filter(|d| !d.is_zero())
    }

    /// Let a trial through now (half-open), e.g. because the replica's health
    /// probe answers ready again: a replica that came back is not shunned for
    /// the rest of `open_for`.
    pub fn allow_trial(&self) {
        let mut g = self.lock();
        if let Some(at) = g.opened_at {
            let now = Instant::now();
            let back = now.checked_sub(self.config.open_for).unwrap_or(at);
            g.opened_at = Some(back.min(at));
        }
    }

    /// Release a half-open trial slot without a verdict (e.g. the target was
    /// warming, which is not a fault).
    pub fn release(&self) {
        self.lock().trial_in_flight = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_half_opens_and_closes() {
        let b = Breaker::new(BreakerConfig {
            failure_threshold: 2,
            open_for: Duration::from_secs(10),
        });
        assert_eq!(b.state(), BreakerState::Closed);
        b.on_failure();
        assert_eq!(b.state(), BreakerState::Closed);
        b.on_failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.try_acquire());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.try_acquire(), "one trial passes");
        assert!(!b.try_acquire(), "a second concurrent trial does not");
        b.on_failure();
        assert_eq!(b.state(), BreakerState::Open, "failed trial reopens");
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(b.try_acquire());
        b.on_success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.try_acquire());
    }
}
