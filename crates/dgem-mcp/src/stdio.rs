//! MCP over stdio: one JSON-RPC message per line in, one per line out.
//!
//! Why this transport and not rmcp's `transport::stdio()`: with rmcp's, a line
//! it could not parse (a trailing comma, a NaN id, a NUL, two objects on one
//! line, a 20 MB line) got no reply at all, where `POST /mcp` answers -32700;
//! and at the end of its input (`printf 'initialize…\ninitialized…\ntools/call…\n'
//! | dgem mcp`) the session was cancelled after a short drain, so the call's
//! answer was lost ("timed out draining in-flight responses") and the process
//! exited 0. Here:
//!
//! - every line is checked by the same envelope check as `POST /mcp`
//!   ([`crate::jsonrpc`]: -32700 for what is not JSON, not UTF-8 or holds a
//!   duplicate key, -32600 for what is not one request object, -32602 for bad
//!   params) and a bad line is answered with that error at once, with the
//!   request's `id` when it has one; a line over [`MAX_LINE_BYTES`] is
//!   skipped to its end and answered -32600, never held in memory;
//! - at the end of input the session ends only once every request read has
//!   been answered, waiting at most [`DRAIN_LIMIT`] (a decision's own time
//!   limit, [`crate::MCP_TIMEOUT`]).
//!
//! Blank lines are skipped. Lines are read on a task of their own and handed
//! over through a bounded channel, so rmcp may drop a pending `receive`
//! without losing a message.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Notify};

use crate::jsonrpc::{self, INVALID_REQUEST};

/// Longest line read as a message, bytes: the `POST /mcp` body limit.
pub const MAX_LINE_BYTES: usize = crate::MCP_MAX_BODY_BYTES;

/// Longest wait at the end of input for the answers of requests in flight.
pub const DRAIN_LIMIT: Duration = crate::MCP_TIMEOUT;

/// Messages read ahead of rmcp (a bounded queue: the reader waits when full).
const QUEUE: usize = 64;

type Output = Arc<tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>>;

/// Write `line` and a newline, then flush.
async fn write_line(out: &Output, line: &[u8]) -> std::io::Result<()> {
    let mut w = out.lock().await;
    w.write_all(line).await?;
    w.write_all(b"\n").await?;
    w.flush().await
}

/// The line-per-message transport of the module docs.
pub struct LineTransport {
    rx: mpsc::Receiver<ClientJsonRpcMessage>,
    out: Output,
    /// Ids of the requests read and not answered yet.
    in_flight: Arc<Mutex<HashSet<RequestId>>>,
    /// Woken whenever an answer is written.
    answered: Arc<Notify>,
    /// When the end of input was seen (kept across a dropped `receive`).
    ended: Option<Instant>,
}

impl std::fmt::Debug for LineTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineTransport")
            .field("in_flight", &self.pending())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl LineTransport {
    /// A transport reading `input` and writing `output`; spawns the reader
    /// task on the current tokio runtime.
    pub fn new<R, W>(input: R, output: W) -> Self
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let out: Output = Arc::new(tokio::sync::Mutex::new(Box::new(output)));
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(read_lines(BufReader::new(input), tx, Arc::clone(&out)));
        Self {
            rx,
            out,
            in_flight: Arc::default(),
            answered: Arc::new(Notify::new()),
            ended: None,
        }
    }

    fn pending(&self) -> usize {
        self.in_flight.lock().map_or(0, |s| s.len())
    }
}

/// Read lines until the end of input, answering the bad ones and queueing
/// the rest; closing the queue tells the transport the input ended.
async fn read_lines<R: AsyncBufRead + Unpin>(
    mut input: R,
    tx: mpsc::Sender<ClientJsonRpcMessage>,
    out: Output,
) {
    let mut buf = Vec::new();
    loop {
        let too_long = match read_bounded(&mut input, &mut buf, MAX_LINE_BYTES).await {
            Ok(Some(too_long)) => too_long,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e, "MCP stdio: input failed; ending the session");
                break;
            }
        };
        let reply = if too_long {
            Some((
                INVALID_REQUEST,
                format!("invalid request: a line is at most {MAX_LINE_BYTES} bytes"),
                Value::Null,
            ))
        } else {
            let line = buf.trim_ascii();
            if line.is_empty() {
                continue;
            }
            match jsonrpc::check(line).and_then(|()| {
                serde_json::from_slice::<ClientJsonRpcMessage>(line).map_err(|e| {
                    (
                        INVALID_REQUEST,
                        format!("invalid request: {e}"),
                        Value::Null,
                    )
                })
            }) {
                Ok(msg) => {
                    if tx.send(msg).await.is_err() {
                        // The session ended; nothing reads any more.
                        break;
                    }
                    None
                }
                Err(bad) => Some(bad),
            }
        };
        if let Some((code, message, id)) = reply {
            let body =
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
            if write_line(&out, body.to_string().as_bytes()).await.is_err() {
                break;
            }
        }
    }
}

/// Read one line into `buf` (newline included), keeping at most `limit`
/// bytes of it: `Some(true)` when it was longer (then `buf` is empty and the
/// rest of the line was skipped), `Some(false)` when read whole, `None` at
/// the end of input with nothing read.
async fn read_bounded<R: AsyncBufRead + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let (mut any, mut too_long) = (false, false);
    loop {
        let chunk = input.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(any.then_some(too_long));
        }
        any = true;
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if buf.len() + take > limit.saturating_add(1) {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        input.consume(take);
        if done {
            return Ok(Some(too_long));
        }
    }
}

impl Transport<RoleServer> for LineTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let (out, in_flight, answered) = (
            Arc::clone(&self.out),
            Arc::clone(&self.in_flight),
            Arc::clone(&self.answered),
        );
        async move {
            let id = match &item {
                JsonRpcMessage::Response(r) => Some(r.id.clone()),
                JsonRpcMessage::Error(e) => e.id.clone(),
                _ => None,
            };
            let line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            let written = write_line(&out, &line).await;
            if let Some(id) = id {
                if let Ok(mut set) = in_flight.lock() {
                    set.remove(&id);
                }
                answered.notify_waiters();
            }
            written
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        if self.ended.is_none() {
            if let Some(msg) = self.rx.recv().await {
                if let JsonRpcMessage::Request(r) = &msg {
                    if let Ok(mut set) = self.in_flight.lock() {
                        set.insert(r.id.clone());
                    }
                }
                return Some(msg);
            }
            self.ended = Some(Instant::now());
        }
        let ended = self.ended.unwrap_or_else(Instant::now);
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            let pending = self.pending();
            if pending == 0 {
                return None;
            }
            let left = DRAIN_LIMIT.saturating_sub(ended.elapsed());
            if tokio::time::timeout(left, answered).await.is_err() {
                tracing::warn!(
                    pending,
                    "MCP stdio: input ended and requests were still unanswered after {} s",
                    DRAIN_LIMIT.as_secs()
                );
                return None;
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.out.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_over_the_limit_is_skipped_to_its_end() {
        let text = format!("{}\nnext\n", "x".repeat(50));
        let mut input = BufReader::with_capacity(8, text.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded(&mut input, &mut buf, 10).await.ok(),
            Some(Some(true))
        );
        assert!(buf.is_empty());
        assert_eq!(
            read_bounded(&mut input, &mut buf, 10).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"next\n");
        assert_eq!(
            read_bounded(&mut input, &mut buf, 10).await.ok(),
            Some(None)
        );
    }

    #[tokio::test]
    async fn a_last_line_without_a_newline_is_read() {
        let mut input = BufReader::new(&b"{}"[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded(&mut input, &mut buf, 10).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"{}");
    }
}
