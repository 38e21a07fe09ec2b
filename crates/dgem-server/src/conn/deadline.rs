//! A whole-body deadline: a request body must arrive in full within
//! [`super::ConnLimits::body_read_timeout`] of its head.
//!
//! tower-http's body timeout (kept beside this one) bounds each *pause*
//! between pieces of a body; a client trickling one byte every 10 s never
//! pauses long enough and held its connection until the 300 s request limit,
//! then got 504 (issue 38). This wrapper fails the body once the deadline
//! passes; the body readers turn that failure into 408 (`body::rejection`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The error a body past its deadline fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body did not arrive within {} s", .0.as_secs_f64())]
pub struct BodyDeadline(pub Duration);

/// `inner` with a deadline counted from its creation (the request head).
pub struct DeadlineBody<B> {
    inner: Pin<Box<B>>,
    sleep: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl<B> std::fmt::Debug for DeadlineBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineBody")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl<B> DeadlineBody<B> {
    /// Wrap `inner`; the deadline is `limit` from now.
    pub fn new(inner: B, limit: Duration) -> Self {
        Self {
            inner: Box::pin(inner),
            sleep: Box::pin(tokio::time::sleep(limit)),
            limit,
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = this.inner.as_mut().poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyDeadline(this.limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `err` or anything in its source chain is a [`BodyDeadline`].
pub fn is_deadline(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = at {
        if e.is::<BodyDeadline>() {
            return true;
        }
        at = e.source();
    }
    false
}
