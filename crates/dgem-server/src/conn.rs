//! Connection-level limits for every listener dgem opens (`dgem serve`,
//! `dgem gateway`): a header-read timeout, a cap on open connections and a
//! deadline on the graceful drain at shutdown.
//!
//! `axum::serve` sets none of these: a client that sends half a request head
//! holds its connection (and the process, after SIGTERM) forever, and idle
//! connections pile up until file descriptors run out. This module runs the
//! same axum [`Router`] through hyper's HTTP/1 connection builder directly,
//! because that is where hyper exposes the header-read timer:
//!
//! - **Header read** ([`ConnLimits::header_read_timeout`]): a request head must
//!   arrive in full within this time. hyper starts the timer whenever the
//!   connection waits for a head, including between requests on a keep-alive
//!   connection, so it is also the idle timeout of a kept-alive connection.
//! - **Body read** ([`ConnLimits::body_read_timeout`]): once the head is in,
//!   each piece of the body must arrive within this time (tower-http's
//!   `RequestBodyTimeoutLayer`), so a client that promises 1000 bytes and
//!   sends 10 holds its connection for this long, not for the whole request
//!   timeout; the handler then answers 400. The whole body must also arrive
//!   within this time of the head ([`deadline`]): a body trickled a byte at
//!   a time is answered 408 then, not held until the request timeout.
//! - **Connections** ([`ConnLimits::max_connections`]): at the cap, the accept
//!   loop stops accepting; new clients wait in the kernel's backlog until a
//!   connection closes.
//! - **Shutdown** ([`ConnLimits::shutdown_timeout`]): when the shutdown signal
//!   comes, the listener closes, every connection is told to finish its
//!   request in flight and close; connections still open at the deadline are
//!   dropped. Cloud Run sends SIGKILL 10 s after SIGTERM, hence the default of
//!   8 s (the model thread may need one more read to stop).

pub mod deadline;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::timeout::RequestBodyTimeoutLayer;

/// Connection limits of one listener (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// A request head must arrive within this time; also the idle timeout of a
    /// kept-alive connection (default 30 s, hyper's own default).
    pub header_read_timeout: Duration,
    /// Longest pause between two pieces of a request body (default 30 s).
    pub body_read_timeout: Duration,
    /// Most connections open at once (default 1024).
    pub max_connections: usize,
    /// How long the drain after the shutdown signal may take (default 8 s:
    /// Cloud Run kills 10 s after SIGTERM, and a model call in progress needs
    /// up to one more read to notice its caller is gone).
    pub shutdown_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 1024,
            shutdown_timeout: Duration::from_secs(8),
        }
    }
}

/// Serve `app` on `listener` with `limits` until `shutdown` resolves, then
/// drain (see the module docs). Accept errors (a full file-descriptor table)
/// are logged and retried after a short pause, never fatal.
///
/// # Errors
/// Never at present; the `Result` leaves room for listener errors that should
/// stop the server.
pub async fn serve_app(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(
            tower::ServiceBuilder::new()
                .layer(RequestBodyTimeoutLayer::new(limits.body_read_timeout))
                .map_request(move |r: axum::http::Request<_>| {
                    r.map(|b| {
                        axum::body::Body::new(deadline::DeadlineBody::new(
                            b,
                            limits.body_read_timeout,
                        ))
                    })
                })
                .service(app.clone()),
        );
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection closed with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    let open = graceful.count();
    tracing::info!(
        open,
        deadline_s = limits.shutdown_timeout.as_secs_f64(),
        "draining connections"
    );
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("every connection closed"),
        () = tokio::time::sleep(limits.shutdown_timeout) => {
            tracing::warn!(deadline_s = limits.shutdown_timeout.as_secs_f64(), "shutdown deadline passed; dropping the connections still open");
        }
    }
    Ok(())
}
