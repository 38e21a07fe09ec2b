//! Issue 27 item 8, the gateway's share of the hostile run: every
//! pass-through and decision route (chat, streamed chat, System One,
//! `/api/decide`) in front of a primary that breaks its reply in one of 22
//! ways, once with a healthy secondary behind it (`vertex_first`) and once
//! alone (`vertex`): 176 requests over real TCP, each through a fresh gateway
//! (fresh breakers). Every outcome is classified:
//!
//! * **right**: the secondary's answer after a failover; the primary's answer
//!   read as the check reads it (renormalized, a refusal as an abstention);
//!   or, with no backend left, a JSON error in the 5xx range that names an
//!   upstream failure (502/503/504, or the upstream's own 500 passed back);
//! * **crash** (the request panicked the router), **hang** (no reply within
//!   10 s), **own 5xx** (a 500 the gateway made itself), **silent wrong** (a
//!   200 whose numbers are neither the secondary's nor the primary's as
//!   read).
//!
//! The table per route is printed; every count but `right` must be 0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

#[path = "common/routes.rs"]
mod routes;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::Router;
use dgem_gateway::{RemoteConfig, RouteConfig};
use http_body_util::BodyExt as _;
use routes::{
    answers, envelope_of, request, two_backends, u_yes, wire, wire_envelope, Route, ROUTES,
};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tower::ServiceExt as _;

/// How the primary breaks its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    NotJson,
    Html,
    Empty,
    TruncatedJson,
    OtherIds,
    MissingOption,
    ExtraOption,
    NegativeProbability,
    ProbabilityAsString,
    NullProbability,
    AnswersNotObject,
    SumFarOff,
    /// Sums 0.99: accepted, renormalized.
    Rounded,
    /// A `refusal` entry: accepted, an abstention.
    Refusal,
    SuccessFalse,
    Status500,
    Status502,
    Status503,
    Status429,
    StallAfterHeaders,
    CutBody,
    HangBeforeHeaders,
}

const FAULTS: [Fault; 22] = [
    Fault::NotJson,
    Fault::Html,
    Fault::Empty,
    Fault::TruncatedJson,
    Fault::OtherIds,
    Fault::MissingOption,
    Fault::ExtraOption,
    Fault::NegativeProbability,
    Fault::ProbabilityAsString,
    Fault::NullProbability,
    Fault::AnswersNotObject,
    Fault::SumFarOff,
    Fault::Rounded,
    Fault::Refusal,
    Fault::SuccessFalse,
    Fault::Status500,
    Fault::Status502,
    Fault::Status503,
    Fault::Status429,
    Fault::StallAfterHeaders,
    Fault::CutBody,
    Fault::HangBeforeHeaders,
];

/// The primary's valid answer (before a fault): `u` yes 0.6, `c` blue.
fn primary_answers() -> Map<String, Value> {
    answers(0.6, [0.1, 0.2, 0.7])
}

/// What a faulty primary sends: a status line, headers and a body, or a
/// transport-level misbehaviour.
enum Reply {
    Http(u16, &'static str, String),
    Stall,
    Cut,
    Hang,
}

fn faulty_reply(fault: Fault, path: &str, stream: bool) -> Reply {
    let mut a = primary_answers();
    let ok = |a: &Map<String, Value>| {
        let (ct, body) = wire(Route::upstream(path, stream), a);
        Reply::Http(200, ct, body)
    };
    match fault {
        Fault::NotJson => Reply::Http(200, "application/json", "not json at all".into()),
        Fault::Html => Reply::Http(200, "text/html", "<html>error page</html>".into()),
        Fault::Empty => Reply::Http(200, "application/json", String::new()),
        Fault::TruncatedJson => {
            let (ct, body) = wire(Route::upstream(path, stream), &a);
            Reply::Http(200, ct, body[..body.len() / 2].to_string())
        }
        Fault::OtherIds => {
            let v = a.remove("u").unwrap();
            a.insert("someone_else".into(), v);
            ok(&a)
        }
        Fault::MissingOption => {
            a["c"]["probabilities"] = json!({"red": 0.3, "green": 0.7});
            ok(&a)
        }
        Fault::ExtraOption => {
            a["c"]["probabilities"] = json!({"red": 0.1, "green": 0.2, "blue": 0.3, "mauve": 0.4});
            ok(&a)
        }
        Fault::NegativeProbability => {
            a["c"]["probabilities"] = json!({"red": -0.2, "green": 0.5, "blue": 0.7});
            ok(&a)
        }
        Fault::ProbabilityAsString => {
            a["u"]["probabilities"] = json!({"yes": "0.6", "no": "0.4"});
            ok(&a)
        }
        Fault::NullProbability => {
            a["u"]["probabilities"] = json!({"yes": null, "no": 0.4});
            ok(&a)
        }
        Fault::AnswersNotObject => {
            let (ct, body) = wire_envelope(
                Route::upstream(path, stream),
                &json!({"answers": [1, 2], "diagnostics": {}}),
            );
            Reply::Http(200, ct, body)
        }
        Fault::SumFarOff => {
            a["c"]["probabilities"] = json!({"red": 0.1, "green": 0.1, "blue": 0.1});
            ok(&a)
        }
        Fault::Rounded => {
            a["u"]["probabilities"] = json!({"yes": 0.6, "no": 0.39});
            ok(&a)
        }
        Fault::Refusal => {
            a["u"] = json!({"refusal": "not enough context"});
            ok(&a)
        }
        Fault::SuccessFalse => Reply::Http(
            200,
            "application/json",
            json!({"success": false, "error": {"message": "model crashed"}}).to_string(),
        ),
        Fault::Status500 => Reply::Http(
            500,
            "application/json",
            json!({"error": {"message": "boom"}}).to_string(),
        ),
        Fault::Status502 => Reply::Http(502, "text/html", "<html>bad gateway</html>".into()),
        Fault::Status503 => Reply::Http(
            503,
            "application/json",
            json!({"error": {"message": "busy"}}).to_string(),
        ),
        Fault::Status429 => Reply::Http(
            429,
            "application/json",
            json!({"error": {"message": "slow down"}}).to_string(),
        ),
        Fault::StallAfterHeaders => Reply::Stall,
        Fault::CutBody => Reply::Cut,
        Fault::HangBeforeHeaders => Reply::Hang,
    }
}

/// Read one HTTP/1.1 request: (head in lower case, body).
async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((head, buf[head_end..].to_vec()))
}

/// An upstream over raw TCP: `/health` ready; a POST answered by `answer`
/// from (path, whether the request asked for a stream).
/// How an upstream answers a POST: from (path, whether a stream was asked).
type Answer = Arc<dyn Fn(&str, bool) -> Reply + Send + Sync>;

async fn upstream(answer: Answer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let Some((head, body)) = read_request(&mut sock).await else {
                    return;
                };
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let reply = if head.starts_with("get /health") {
                    Reply::Http(
                        200,
                        "application/json",
                        json!({"status": "ok", "phase": "ready", "ready": true}).to_string(),
                    )
                } else {
                    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    answer(&path, req["stream"] == json!(true))
                };
                match reply {
                    Reply::Http(status, ct, body) => {
                        let out = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: {ct}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = sock.write_all(out.as_bytes()).await;
                    }
                    Reply::Stall | Reply::Cut => {
                        let _ = sock
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4000\r\n\r\n{\"choices\": [")
                            .await;
                        if matches!(reply, Reply::Stall) {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                        }
                    }
                    Reply::Hang => tokio::time::sleep(Duration::from_secs(60)).await,
                }
                let _ = sock.shutdown().await;
            });
        }
    });
    base
}

/// A fresh gateway over `primary` (`vertex`) then `secondary` (`cloudrun`),
/// with short budgets so that stalls and hangs cost well under a second.
fn gateway(primary: &str, secondary: &str) -> Router {
    let remote = |base: &str| {
        let mut cfg = RemoteConfig::new(base);
        cfg.idle_timeout = Duration::from_millis(300);
        cfg.first_byte_timeout = Duration::from_millis(800);
        cfg
    };
    let route = RouteConfig {
        attempt_timeout: Duration::from_secs(2),
        wakeup_timeout: Duration::from_secs(2),
        ..RouteConfig::default()
    };
    two_backends(primary, secondary, remote, route).1
}

/// (p of yes for `u`, whether `u` abstained) in a 200 reply.
fn read_u(route: Route, body: &[u8]) -> Option<(f64, bool)> {
    let env = envelope_of(route, body)?;
    Some((
        u_yes(route, body)?,
        env["answers"]["u"]["abstained"] == json!(true),
    ))
}

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    right: usize,
    crash: usize,
    hang: usize,
    own_5xx: usize,
    silent_wrong: usize,
}

/// Whether a 200 reply's `u` is right for `fault` in `mode`.
fn right_answer(fault: Fault, mode: &str, got: Option<(f64, bool)>) -> bool {
    let Some((p, abstained)) = got else {
        return false;
    };
    let near = |x: f64| (p - x).abs() < 1e-6;
    match fault {
        Fault::Rounded => near(0.6 / 0.99) && !abstained,
        Fault::Refusal => near(0.5) && abstained,
        _ => mode == "vertex_first" && near(0.2) && !abstained,
    }
}

#[test]
fn hostile_upstreams_on_every_route() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fault = Arc::new(Mutex::new(Fault::NotJson));
    let f = fault.clone();
    let primary = rt.block_on(upstream(Arc::new(move |path, stream| {
        faulty_reply(*f.lock().unwrap(), path, stream)
    })));
    let secondary = rt.block_on(upstream(Arc::new(|path, stream| {
        let (ct, body) = wire(
            Route::upstream(path, stream),
            &answers(0.2, [0.1, 0.7, 0.2]),
        );
        Reply::Http(200, ct, body)
    })));
    let mut table: Vec<(Route, Tally)> = ROUTES.iter().map(|r| (*r, Tally::default())).collect();
    let mut slowest = Duration::ZERO;
    let mut cases = 0usize;
    for fault_now in FAULTS {
        *fault.lock().unwrap() = fault_now;
        for (route, tally) in &mut table {
            for mode in ["vertex_first", "vertex"] {
                cases += 1;
                let app = gateway(&primary, &secondary);
                let (path, body) = request(*route);
                let req = axum::http::Request::post(path)
                    .header("content-type", "application/json")
                    .header("x-dgem-backend", mode)
                    .body(Body::from(body.to_string()))
                    .unwrap();
                let t0 = Instant::now();
                let outcome = rt.block_on(async {
                    let call = tokio::spawn(async move {
                        let resp = app.oneshot(req).await.unwrap();
                        let status = resp.status().as_u16();
                        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
                        (status, bytes)
                    });
                    tokio::time::timeout(Duration::from_secs(10), call).await
                });
                slowest = slowest.max(t0.elapsed());
                let what = format!("{route:?} {fault_now:?} {mode}");
                match outcome {
                    Err(_) => {
                        eprintln!("HANG: {what}");
                        tally.hang += 1;
                    }
                    Ok(Err(join)) => {
                        eprintln!("CRASH: {what}: {join}");
                        tally.crash += 1;
                    }
                    Ok(Ok((200, bytes))) => {
                        if right_answer(fault_now, mode, read_u(*route, &bytes)) {
                            tally.right += 1;
                        } else {
                            eprintln!("SILENT WRONG: {what}: {}", String::from_utf8_lossy(&bytes));
                            tally.silent_wrong += 1;
                        }
                    }
                    Ok(Ok((status, bytes))) => {
                        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        // An upstream 500 does not fail over: the pass-through
                        // routes hand it back as it is, `/api` as a 502.
                        let upstream_500 = fault_now == Fault::Status500
                            && (status == 500 || (*route == Route::ApiDecide && status == 502));
                        let named = v["error"]["message"].is_string();
                        let fine = named
                            && (matches!(status, 502..=504) || upstream_500)
                            && (mode != "vertex_first" || matches!(fault_now, Fault::Status500));
                        if fine {
                            tally.right += 1;
                        } else if status == 500 {
                            eprintln!("OWN 5xx: {what}: {v}");
                            tally.own_5xx += 1;
                        } else {
                            eprintln!("SILENT WRONG ({status}): {what}: {v}");
                            tally.silent_wrong += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("\nhostile run, gateway: {cases} requests, slowest {slowest:?}");
    eprintln!("| route | requests | right | crash | hang | own 5xx | silent wrong |");
    eprintln!("|---|---|---|---|---|---|---|");
    for (route, t) in &table {
        let n = t.right + t.crash + t.hang + t.own_5xx + t.silent_wrong;
        eprintln!(
            "| {route:?} | {n} | {} | {} | {} | {} | {} |",
            t.right, t.crash, t.hang, t.own_5xx, t.silent_wrong
        );
    }
    assert!(cases >= 150, "{cases} cases");
    for (route, t) in &table {
        assert_eq!(
            (t.crash, t.hang, t.own_5xx, t.silent_wrong),
            (0, 0, 0, 0),
            "{route:?}: {t:?}"
        );
    }
}
