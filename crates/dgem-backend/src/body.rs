//! Reading an upstream's reply body under an idle budget.
//!
//! A remote backend (a dgem server behind the gateway, vLLM behind `dgem
//! serve`) writes its reply body in one go once the answer is ready, so once
//! the headers are in, a pause mid-body is a broken upstream rather than a
//! slow model. [`read_idle`] reads the body chunk by chunk, each within the
//! idle budget of the one before, so a reply that stalls after its headers
//! fails in that budget (default [`DEFAULT_IDLE_TIMEOUT`], 5 s) instead of the
//! whole call's limit, and one cut short fails at once.

use std::fmt::Display;
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};
use thiserror::Error;

/// Default longest silence of a reply body after its headers: 5 s.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a reply body could not be read whole.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BodyFault {
    /// No byte came for the idle budget.
    #[error("the reply stalled: no byte for {idle_ms} ms after {received} byte(s) of its body")]
    Stalled {
        /// The idle budget, ms.
        idle_ms: u64,
        /// Bytes received before the stall.
        received: usize,
    },
    /// The stream failed before its end (connection closed or reset).
    #[error("the reply was cut after {received} byte(s) of its body: {cause}")]
    Cut {
        /// Bytes received before the cut.
        received: usize,
        /// The transport's words.
        cause: String,
    },
    /// The body grew past `limit` bytes.
    #[error("the reply exceeds {limit} bytes")]
    TooLarge {
        /// The most bytes accepted.
        limit: usize,
    },
}

/// Read `body` to its end: every chunk within `idle` of the previous one, at
/// most `limit` bytes in all.
///
/// # Errors
/// [`BodyFault::Stalled`] after `idle` without a byte, [`BodyFault::Cut`] when
/// the stream yields an error, [`BodyFault::TooLarge`] past `limit`.
pub async fn read_idle<S, B, E>(body: S, idle: Duration, limit: usize) -> Result<Vec<u8>, BodyFault>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: Display,
{
    let mut body = std::pin::pin!(body);
    let mut out: Vec<u8> = Vec::new();
    loop {
        match tokio::time::timeout(idle, body.next()).await {
            Err(_) => {
                return Err(BodyFault::Stalled {
                    idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX),
                    received: out.len(),
                })
            }
            Ok(None) => return Ok(out),
            Ok(Some(Err(e))) => {
                return Err(BodyFault::Cut {
                    received: out.len(),
                    cause: e.to_string(),
                })
            }
            Ok(Some(Ok(chunk))) => {
                let chunk = chunk.as_ref();
                if out.len() + chunk.len() > limit {
                    return Err(BodyFault::TooLarge { limit });
                }
                out.extend_from_slice(chunk);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use futures_util::stream;

    #[tokio::test]
    async fn reads_every_chunk_in_order() {
        let s = stream::iter(vec![Ok::<_, String>(b"ab".to_vec()), Ok(b"cd".to_vec())]);
        assert_eq!(
            read_idle(s, DEFAULT_IDLE_TIMEOUT, 10).await.unwrap(),
            b"abcd"
        );
    }

    #[tokio::test]
    async fn a_cut_names_the_bytes_received() {
        let s = stream::iter(vec![Ok(b"abc".to_vec()), Err("reset by peer".to_string())]);
        let e = read_idle(s, DEFAULT_IDLE_TIMEOUT, 10).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "the reply was cut after 3 byte(s) of its body: reset by peer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_fails_after_the_idle_budget() {
        let s = stream::iter(vec![Ok::<_, String>(b"ab".to_vec())]).chain(stream::pending());
        let e = read_idle(s, Duration::from_millis(250), 10)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            BodyFault::Stalled {
                idle_ms: 250,
                received: 2
            }
        );
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_refused() {
        let s = stream::iter(vec![Ok::<_, String>(vec![0u8; 6]), Ok(vec![0u8; 6])]);
        assert_eq!(
            read_idle(s, DEFAULT_IDLE_TIMEOUT, 10).await.unwrap_err(),
            BodyFault::TooLarge { limit: 10 }
        );
    }
}
