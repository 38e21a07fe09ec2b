//! The preflight: before pip runs for a part, dgem asks the package index
//! for the project's simple page (PEP 503) itself, so a rate limit is seen
//! and reported instead of waited out in silence.
//!
//! pip (through urllib3) honours `Retry-After` on a 429 or 503 without a
//! word at its default verbosity, up to five times per request: a
//! `Retry-After: 253` looked like a hang. Here a 429/503 with `Retry-After`
//! is reported through [`Progress::note`] (`waiting 253 s: the package index
//! asked to retry later`) and waited out (cancellable, and bounded by the
//! pull's limit: a wait that would end past it fails at once, saying so),
//! then the page is asked again; any other answer lets pip run. An index
//! that cannot be reached is not asked again during the pull (pip then says
//! what is wrong), so an offline machine pays for one failed request only.

use std::time::{Duration, SystemTime};

use super::budget::{Budget, Stop};
use crate::error::{secs, ModelError};
use crate::progress::Progress;

/// The longest one preflight request may take (less when the pull's limit
/// is nearer).
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest wait a `Retry-After` gets (a `0` would otherwise ask again
/// in a tight loop).
const MIN_WAIT: Duration = Duration::from_secs(1);

/// What the index said to the preflight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Anything pip should see for itself (200, 404, a 5xx without `Retry-After`).
    Go,
    /// 429 or 503 with a `Retry-After` of this long.
    RetryAfter {
        /// The HTTP status.
        status: u16,
        /// How long the index asked to wait.
        wait: Duration,
    },
    /// No answer (connection refused, DNS, timeout): the reason.
    Unreachable(String),
}

/// Asks one index, for the parts of one pull.
#[derive(Debug)]
pub(crate) struct Preflight {
    index: String,
    reachable: bool,
}

impl Preflight {
    /// A preflight against the simple index at `index` (e.g.
    /// `https://pypi.org/simple/`).
    pub(crate) fn new(index: &str) -> Self {
        Self {
            index: index.to_owned(),
            reachable: true,
        }
    }

    /// Ask for `package` until the index stops asking to retry later,
    /// reporting each wait; `what` names the part (`part 2 of 4`). Returns
    /// whether it waited.
    ///
    /// # Errors
    /// [`ModelError::PullTimedOut`] when a `Retry-After` ends past the pull's
    /// limit (at once, without waiting) or the limit runs out;
    /// [`ModelError::PullCancelled`] when cancelled.
    pub(crate) fn wait_for_index(
        &mut self,
        package: &str,
        what: &str,
        budget: &Budget,
        progress: &dyn Progress,
    ) -> Result<bool, ModelError> {
        let url = simple_page(&self.index, package);
        let mut waited = false;
        while self.reachable {
            if let Some(stop) = budget.check() {
                return Err(budget.error(stop, format!("before downloading {what}")));
            }
            let timeout = budget.left().map_or(ASK_TIMEOUT, |l| l.min(ASK_TIMEOUT));
            let (status, wait) = match ask(&url, timeout) {
                Answer::Go => break,
                Answer::Unreachable(_) => {
                    self.reachable = false;
                    break;
                }
                Answer::RetryAfter { status, wait } => (status, wait.max(MIN_WAIT)),
            };
            if let Some(left) = budget.left() {
                if wait > left {
                    return Err(budget.error(
                        Stop::Deadline,
                        format!(
                            "the package index answered {status} for {what} and asked to retry \
                             after {} s, which ends past the limit ({:.1} s left), so the \
                             pull stopped at once instead of waiting ({url})",
                            secs(wait),
                            left.as_secs_f64()
                        ),
                    ));
                }
            }
            progress.note(&format!(
                "waiting {} s: the package index asked to retry later",
                secs(wait)
            ));
            waited = true;
            budget.sleep(wait).map_err(|stop| {
                budget.error(
                    stop,
                    format!(
                        "while waiting {} s for the package index before downloading {what}",
                        secs(wait)
                    ),
                )
            })?;
        }
        Ok(waited)
    }
}

/// The simple page of `package` under `index`: `<index>/<normalized name>/`.
pub(crate) fn simple_page(index: &str, package: &str) -> String {
    format!("{}/{}/", index.trim_end_matches('/'), normalize(package))
}

/// A project name as PEP 503 normalizes it: lowercase, every run of `-`, `_`
/// and `.` one `-`.
fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_run {
                out.push('-');
            }
            in_run = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_run = false;
        }
    }
    out
}

/// A `Retry-After` value: delay-seconds or an HTTP date (then the time from
/// `now` to it, 0 when past).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(s) = value.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `GET url` with `timeout`, on a thread of its own (so any caller, inside
/// an async runtime or not, may block on it).
fn ask(url: &str, timeout: Duration) -> Answer {
    std::thread::scope(|s| {
        s.spawn(|| ask_blocking(url, timeout))
            .join()
            .unwrap_or_else(|_| Answer::Unreachable("the preflight thread panicked".into()))
    })
}

fn ask_blocking(url: &str, timeout: Duration) -> Answer {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Answer::Unreachable(format!("no runtime for the preflight: {e}")),
    };
    rt.block_on(async {
        let client = match reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!(
                "dgem/",
                env!("CARGO_PKG_VERSION"),
                " (model pull preflight)"
            ))
            .build()
        {
            Ok(c) => c,
            Err(e) => return Answer::Unreachable(e.to_string()),
        };
        let resp = match client
            .get(url)
            .header(reqwest::header::ACCEPT, "text/html")
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => return Answer::Unreachable(e.to_string()),
        };
        let status = resp.status().as_u16();
        let wait = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        match (status, wait) {
            (429 | 503, Some(wait)) => Answer::RetryAfter { status, wait },
            _ => Answer::Go,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_page_normalizes_the_project_name() {
        assert_eq!(
            simple_page("https://pypi.org/simple/", "Gemma3_270m.Q4--part1"),
            "https://pypi.org/simple/gemma3-270m-q4-part1/"
        );
        assert_eq!(
            simple_page("http://127.0.0.1:9/simple", "toy-model-part1"),
            "http://127.0.0.1:9/simple/toy-model-part1/"
        );
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(
            parse_retry_after(" 253 ", now),
            Some(Duration::from_secs(253))
        );
        // Wed, 21 Oct 2015 07:28:00 GMT is 1445412480.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:30:00 GMT", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}
