//! Connection limits over real TCP (issue 12, defect 3): half-sent request
//! heads are cut at the header-read timeout, the connection cap holds new
//! clients back until one closes, and the drain after the shutdown signal ends
//! at its deadline even when a request never finishes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::routing::{get, post};
use axum::Router;
use dgem_server::conn::{serve_app, ConnLimits};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

fn app() -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/echo", post(|b: Bytes| async move { b.len().to_string() }))
        .route(
            "/stuck",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(600)).await;
                "late"
            }),
        )
}

async fn start(
    limits: ConnLimits,
) -> (
    std::net::SocketAddr,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve_app(listener, app(), limits, async move {
        let _ = stopped.await;
    }));
    (addr, stop, server)
}

/// Read until the peer closes (Ok(bytes)) or `limit` passes (Err).
async fn read_to_close(s: &mut TcpStream, limit: Duration) -> Result<Vec<u8>, ()> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(out),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return Err(()),
        }
    }
}

async fn get_health(s: &mut TcpStream) {
    s.write_all(b"GET /health HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
}

#[tokio::test]
async fn half_sent_request_head_is_cut_at_the_header_read_timeout() {
    let (addr, stop, server) = start(ConnLimits {
        header_read_timeout: Duration::from_millis(300),
        ..ConnLimits::default()
    })
    .await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\n")
        .await
        .unwrap();
    let t0 = Instant::now();
    let got = read_to_close(&mut slow, Duration::from_secs(5)).await;
    assert!(got.is_ok(), "the server kept a half-sent head open for 5 s");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // An idle kept-alive connection is cut the same way.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert!(read_to_close(&mut idle, Duration::from_secs(5))
        .await
        .is_ok());
    // A whole request is still served.
    let mut ok = TcpStream::connect(addr).await.unwrap();
    get_health(&mut ok).await;
    let body = read_to_close(&mut ok, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&body).starts_with("HTTP/1.1 200"));
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn connection_cap_holds_new_clients_until_one_closes() {
    let (addr, stop, server) = start(ConnLimits {
        max_connections: 2,
        ..ConnLimits::default()
    })
    .await;
    let a = TcpStream::connect(addr).await.unwrap();
    let _b = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The third connects (kernel backlog) but is not served while two are open.
    let mut c = TcpStream::connect(addr).await.unwrap();
    get_health(&mut c).await;
    assert!(
        read_to_close(&mut c, Duration::from_millis(500))
            .await
            .is_err(),
        "served past the cap"
    );
    drop(a);
    let body = read_to_close(&mut c, Duration::from_secs(5))
        .await
        .expect("served once a slot freed");
    assert!(String::from_utf8_lossy(&body).starts_with("HTTP/1.1 200"));
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_drain_ends_at_its_deadline() {
    let (addr, stop, server) = start(ConnLimits {
        shutdown_timeout: Duration::from_millis(400),
        ..ConnLimits::default()
    })
    .await;
    let mut stuck = TcpStream::connect(addr).await.unwrap();
    stuck
        .write_all(b"GET /stuck HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve_app returned")
        .unwrap()
        .unwrap();
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(350) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // The listener is closed: nothing new is accepted.
    assert!(TcpStream::connect(addr).await.is_err());
}

/// Found by a hostile-input run: a client that promised 1000 body bytes and
/// sent 10 held its connection until the 300 s request timeout. The body read
/// timeout ends it.
#[tokio::test]
async fn stalled_request_body_is_cut_at_the_body_read_timeout() {
    let (addr, stop, server) = start(ConnLimits {
        body_read_timeout: Duration::from_millis(400),
        ..ConnLimits::default()
    })
    .await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 1000\r\n\r\n0123456789")
        .await
        .unwrap();
    let t0 = Instant::now();
    let got = read_to_close(&mut s, Duration::from_secs(5))
        .await
        .expect("answered and closed well before 5 s");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 4"), "{text}");
    // A whole body is read as usual.
    let mut ok = TcpStream::connect(addr).await.unwrap();
    ok.write_all(
        b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc",
    )
    .await
    .unwrap();
    let body = read_to_close(&mut ok, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&body).ends_with("\r\n\r\n3"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
