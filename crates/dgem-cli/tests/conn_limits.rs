//! Connection limits of the real `dgem serve` binary over raw TCP: a client
//! that sends half a request head (or trickles it) is cut off by the
//! header-read timeout (`HEADER_READ_TIMEOUT_S`), one that stops halfway
//! through a body gets a 4xx after `BODY_READ_TIMEOUT_S`, the connection cap
//! (`MAX_CONNECTIONS`) holds extra clients back until a slot frees, and
//! SIGTERM with a half-open connection held exits within the drain deadline
//! (`SHUTDOWN_TIMEOUT_S`). The names are those of `dgem_server::config::env`.
//! Needs `DGEM_TEST_MODEL` (set by `scripts/test`); skipped without it locally.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
#[path = "common/server.rs"]
mod server;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Loading the model and the warm-up decision, on a busy CI machine.
const READY: Duration = Duration::from_secs(300);
/// Slack on top of every configured timeout (a loaded CI machine).
const MARGIN: Duration = Duration::from_secs(4);
/// A half-sent request head.
const HALF_HEAD: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: dgem\r\nContent-";

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to dgem serve");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    s
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Read from `s` until the server closes it (end of stream or a reset), at
/// most until `since + limit`; how long after `since` it closed.
fn closed_after(s: &mut TcpStream, since: Instant, limit: Duration) -> Option<Duration> {
    let mut buf = [0u8; 1024];
    while since.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return Some(since.elapsed()),
            // A response before the close (a 408) is fine.
            Ok(_) => {}
            Err(e) if timed_out(&e) => {}
            Err(_) => return Some(since.elapsed()),
        }
    }
    None
}

/// Send one byte of a never-ending head every 200 ms until the server closes
/// the connection; how long that took, or `None` within `limit`.
fn trickle_until_closed(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let head = b"GET /health HTTP/1.1\r\nHost: dgem\r\nX-Slow: ".iter();
    let mut buf = [0u8; 1024];
    for byte in head.chain(std::iter::repeat(&b'a')) {
        if started.elapsed() > limit {
            return None;
        }
        if s.write_all(&[*byte]).is_err() {
            return Some(started.elapsed());
        }
        match s.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if timed_out(&e) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

/// Read one HTTP response from `s` within `limit`: its status and body.
fn read_response(s: &mut TcpStream, limit: Duration) -> Result<(u16, String), String> {
    let started = Instant::now();
    let mut got: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let body = String::from_utf8_lossy(&got[end + 4..end + 4 + length]);
                return Ok((status, body.into_owned()));
            }
        }
        let so_far = String::from_utf8_lossy(&got).into_owned();
        if started.elapsed() > limit {
            return Err(format!(
                "no whole response within {limit:?}; got {so_far:?}"
            ));
        }
        match s.read(&mut buf) {
            Ok(0) => return Err(format!("closed without a whole response; got {so_far:?}")),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(format!("{e}; got {so_far:?}")),
        }
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .expect("http client")
}

async fn health_within(base: &str, limit: Duration) -> Result<u16, String> {
    http()
        .get(format!("{base}/health"))
        .timeout(limit)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_half_sent_head_is_cut_off_by_the_header_timeout() {
    let Some(model) = common::model() else { return };
    let env = [("HEADER_READ_TIMEOUT_S", "2")];
    let served = server::serve_with_env(&model, &[], &env, READY).await;
    let limit = Duration::from_secs(2) + MARGIN;

    // Half a head, then nothing.
    let mut s = connect(served.addr());
    s.write_all(HALF_HEAD).expect("send half a head");
    let sent = Instant::now();
    let closed = closed_after(&mut s, sent, limit);
    assert!(
        closed.is_some_and(|t| t >= Duration::from_millis(1500)),
        "a half-sent head must be cut off about 2 s after it started; closed after {closed:?}"
    );

    // Nothing at all: the same timer runs on a silent connection.
    let mut silent = connect(served.addr());
    let closed = closed_after(&mut silent, Instant::now(), limit);
    assert!(
        closed.is_some(),
        "a connection that sends nothing must be closed within {limit:?}"
    );

    // A head trickled a byte at a time: the limit is on the whole head.
    let mut trickle = connect(served.addr());
    let closed = trickle_until_closed(&mut trickle, limit);
    assert!(
        closed.is_some(),
        "a head trickled byte by byte must be cut off within {limit:?}"
    );

    // None of it hurt the server.
    assert_eq!(health_within(&served.base, MARGIN).await, Ok(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_halfway_gets_a_4xx_after_the_body_timeout() {
    let Some(model) = common::model() else { return };
    let env = [("BODY_READ_TIMEOUT_S", "2")];
    let served = server::serve_with_env(&model, &["--studio"], &env, READY).await;
    let limit = Duration::from_secs(2) + MARGIN;
    // A JSON 4xx naming the body on every POST route, not a 5xx or a hang.
    let mut failures = Vec::new();
    let paths = [
        "/v1/systemone",
        "/v1/chat/completions",
        "/api/decide",
        "/mcp",
        "/nope",
    ];
    for path in paths {
        let mut s = connect(served.addr());
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: dgem\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n\
             {{\"state\":"
        );
        s.write_all(head.as_bytes()).expect("send a partial body");
        match read_response(&mut s, limit) {
            Ok((status, body)) => {
                let message = serde_json::from_str::<Value>(&body)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(str::to_lowercase))
                    .unwrap_or_default();
                if !(400..500).contains(&status) || !message.contains("body") {
                    failures.push(format!("{path}: status {status}, body {body}"));
                }
            }
            Err(why) => failures.push(format!("{path}: {why}")),
        }
    }
    assert!(
        failures.is_empty(),
        "a body that stops halfway must get a JSON 4xx naming the body within {limit:?}:\n{}",
        failures.join("\n")
    );

    // None of it hurt the server.
    assert_eq!(health_within(&served.base, MARGIN).await, Ok(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_extra_clients_until_a_slot_frees() {
    let Some(model) = common::model() else { return };
    // The header timeout is long so that the held sockets stay open throughout.
    let env = [("MAX_CONNECTIONS", "8"), ("HEADER_READ_TIMEOUT_S", "60")];
    let served = server::serve_with_env(&model, &[], &env, READY).await;
    assert_eq!(health_within(&served.base, MARGIN).await, Ok(200));

    // Eight idle connections fill the cap; four more wait in the backlog.
    let held: Vec<TcpStream> = (0..8).map(|_| connect(served.addr())).collect();
    let extra: Vec<TcpStream> = (0..4).map(|_| connect(served.addr())).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at_cap = health_within(&served.base, Duration::from_millis(1500)).await;
    assert!(
        at_cap.is_err(),
        "with 8 of MAX_CONNECTIONS=8 open, a ninth client must wait; got {at_cap:?}"
    );

    // Closing the held ones frees the slots at once.
    drop(held);
    drop(extra);
    let started = Instant::now();
    assert_eq!(health_within(&served.base, MARGIN).await, Ok(200));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a freed slot must serve the next client at once, took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_half_open_connection_exits_within_the_drain_deadline() {
    let Some(model) = common::model() else { return };
    let env = [
        ("SHUTDOWN_TIMEOUT_S", "2"),
        ("HEADER_READ_TIMEOUT_S", "60"),
        ("BODY_READ_TIMEOUT_S", "60"),
    ];
    let mut served = server::serve_with_env(&model, &[], &env, READY).await;
    let addr = served.addr().to_string();

    // One connection half-way through its head, one half-way through its body.
    let mut half_head = connect(&addr);
    half_head.write_all(HALF_HEAD).expect("send half a head");
    let mut half_body = connect(&addr);
    half_body
        .write_all(
            b"POST /v1/systemone HTTP/1.1\r\nHost: dgem\r\nContent-Type: application/json\r\n\
              Content-Length: 1000\r\n\r\n{\"state\":",
        )
        .expect("send half a body");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let signalled = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &served.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success(), "kill -TERM failed: {kill}");

    // While draining, the listener is closed: a new client is refused.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let socket = addr.parse().expect("a socket address");
    let late = TcpStream::connect_timeout(&socket, Duration::from_secs(1));
    assert!(
        late.is_err(),
        "after SIGTERM the listener must be closed, but a new connection was accepted"
    );

    let deadline = Duration::from_secs(2) + MARGIN;
    let exit = served.wait_exit(Duration::from_secs(20)).await;
    let took = signalled.elapsed();
    let status = exit.expect("dgem serve did not exit within 20 s of SIGTERM");
    assert!(
        took <= deadline,
        "SIGTERM with SHUTDOWN_TIMEOUT_S=2 must exit within {deadline:?}, took {took:?}"
    );
    assert!(status.success(), "a drained shutdown exits 0, got {status}");
    // The held connections went with the process.
    for s in [&mut half_head, &mut half_body] {
        assert!(
            closed_after(s, Instant::now(), MARGIN).is_some(),
            "a held connection was left open after exit"
        );
    }
}
