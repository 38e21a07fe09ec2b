//! Hostile and malformed input against the real `dgem serve --studio` binary,
//! and against a `dgem gateway` in front of one: a table of bad requests over
//! every route (the rows are in `bad_inputs/`). Each row names the
//! status it must get and words the error message must contain (a field name,
//! the value sent), so a refusal tells the caller what to fix.
//!
//! HTTP errors share one shape on every route,
//! `{"error": {"message": …, "type": …, "param"?: …}}` (a 404 has no `type`);
//! MCP errors are JSON-RPC errors, or tool results with `isError: true`. Every
//! row runs and the failures are listed together at the end, so one run shows
//! all of them. Connection limits (slow clients, the connection cap, SIGTERM)
//! are in `conn_limits.rs`. Needs `DGEM_TEST_MODEL` (set by `scripts/test`);
//! skipped without it locally.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
#[path = "bad_inputs/decide_rows.rs"]
mod decide_rows;
#[path = "bad_inputs/rows.rs"]
mod rows;
#[path = "common/server.rs"]
mod server;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

/// The key the servers under test require on every POST.
pub const KEY: &str = "bad-inputs-key";
/// The table server's body limit, bytes: above the 262,144-byte state limit
/// of a 4096-token context, so a state that is too long reaches the engine.
const MAX_BODY: &str = "400000";
/// A bad request must be refused before any model work: well under this.
const SLOW: Duration = Duration::from_secs(10);
/// Loading the model and the warm-up decision, on a busy CI machine.
const READY: Duration = Duration::from_secs(300);

/// What a row must get back.
#[derive(Debug, Clone)]
pub enum Expect {
    /// An HTTP error in the shared shape whose message names every needle; a
    /// 405 must also list the methods the route takes in `Allow`.
    Error {
        status: u16,
        needles: Vec<String>,
        allow: Option<&'static str>,
    },
    /// A JSON-RPC error with one of `codes`, its message naming every needle.
    Rpc {
        status: u16,
        codes: &'static [i64],
        needles: Vec<String>,
    },
    /// A tool result with `isError: true` whose text names every needle.
    Tool { needles: Vec<String> },
}

/// One bad request and what it must get.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: &'static str,
    pub method: Method,
    pub path: String,
    pub body: Option<Vec<u8>>,
    pub content_type: Option<String>,
    pub headers: Vec<(&'static str, String)>,
    /// Send the server's key (the rows about auth leave it out).
    pub key: bool,
    /// Send only the head, declaring a body of this many bytes (see [`head_only`]).
    pub declared: Option<usize>,
    pub expect: Expect,
}

fn owned(needles: &[&str]) -> Vec<String> {
    needles.iter().map(|n| (*n).to_string()).collect()
}

impl Row {
    /// A request with `body` sent as JSON unless told otherwise.
    pub fn new(name: &'static str, method: Method, path: &str, body: Option<Vec<u8>>) -> Self {
        Self {
            name,
            content_type: body.as_ref().map(|_| "application/json".to_string()),
            method,
            path: path.to_string(),
            body,
            headers: Vec::new(),
            key: true,
            declared: None,
            expect: Expect::Tool {
                needles: Vec::new(),
            },
        }
    }

    /// Expect an HTTP error `status` whose message names every needle.
    pub fn is(mut self, status: u16, needles: &[&str]) -> Self {
        self.expect = Expect::Error {
            status,
            needles: owned(needles),
            allow: None,
        };
        self
    }

    /// Expect a 405 whose message names the method sent, with `Allow: allow`.
    pub fn not_allowed(mut self, allow: &'static str) -> Self {
        let method = self.method.as_str().to_lowercase();
        self.expect = Expect::Error {
            status: 405,
            needles: vec![method, "not allowed".to_string()],
            allow: Some(allow),
        };
        self
    }

    /// Expect a JSON-RPC error with HTTP `status` and one of `codes`.
    pub fn rpc(mut self, status: u16, codes: &'static [i64], needles: &[&str]) -> Self {
        self.expect = Expect::Rpc {
            status,
            codes,
            needles: owned(needles),
        };
        self
    }

    /// Expect a tool result with `isError: true`.
    pub fn tool(mut self, needles: &[&str]) -> Self {
        self.expect = Expect::Tool {
            needles: owned(needles),
        };
        self
    }

    /// Send no key.
    pub fn no_key(mut self) -> Self {
        self.key = false;
        self
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    pub fn content_type(mut self, value: &str) -> Self {
        self.content_type = Some(value.to_string());
        self
    }

    /// Send only the head, with `Content-Length: length` (see [`head_only`]).
    pub fn declares(mut self, length: usize) -> Self {
        self.declared = Some(length);
        self
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        // A fresh connection per row: no row meets one a refusal closed.
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client")
}

fn excerpt(text: &str) -> String {
    let cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// `Ok` when the lowercased `text` contains every needle (lowercased).
fn names_all(text: &str, needles: &[String]) -> Result<(), String> {
    let missing: Vec<&str> = needles
        .iter()
        .map(String::as_str)
        .filter(|n| !text.contains(&n.to_lowercase()))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("the message does not name {missing:?}"))
    }
}

/// The lowercased `error.message` of a body in the shape every HTTP route
/// shares, `{"error": {"message", "type", "param"?}}` (a 404 has no `type`).
fn error_message(body: &Value, status: u16) -> Result<String, String> {
    let Some(error) = body.get("error").and_then(Value::as_object) else {
        return Err("`error` is not an object {message, type}".into());
    };
    let Some(message) = error.get("message").and_then(Value::as_str) else {
        return Err("`error.message` is not a string".into());
    };
    if status != 404 && !error.get("type").is_some_and(Value::is_string) {
        return Err("`error.type` is not a string".into());
    }
    if error.get("param").is_some_and(|p| !p.is_string()) {
        return Err("`error.param` is not a string".into());
    }
    Ok(message.to_lowercase())
}

fn verdict(expect: &Expect, status: u16, allow: Option<&str>, body: &Value) -> Result<(), String> {
    match expect {
        Expect::Error {
            status: want,
            needles,
            allow: want_allow,
        } => {
            if status != *want {
                return Err(format!("want status {want}"));
            }
            names_all(&error_message(body, status)?, needles)?;
            if let Some(w) = want_allow {
                let squash = |s: &str| s.replace(' ', "").to_ascii_uppercase();
                if allow.map(squash) != Some(squash(w)) {
                    return Err(format!("want `Allow: {w}`, got {allow:?}"));
                }
            }
            Ok(())
        }
        Expect::Rpc {
            status: want,
            codes,
            needles,
        } => {
            if status != *want {
                return Err(format!("want status {want}"));
            }
            let code = body["error"]["code"].as_i64();
            if !code.is_some_and(|c| codes.contains(&c)) {
                return Err(format!(
                    "JSON-RPC error code {code:?}, want one of {codes:?}"
                ));
            }
            let message = body["error"]["message"].as_str().unwrap_or("");
            names_all(&message.to_lowercase(), needles)
        }
        Expect::Tool { needles } => {
            if status != 200 {
                return Err("want status 200 with a tool error result".into());
            }
            if body["result"]["isError"] != Value::Bool(true) {
                return Err("want a tool result with `isError: true`".into());
            }
            let text: Vec<&str> = body["result"]["content"]
                .as_array()
                .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
                .unwrap_or_default();
            names_all(&text.join("\n").to_lowercase(), needles)
        }
    }
}

/// Send the head of `row` alone, declaring a body of `length` bytes: a limit
/// that reads `Content-Length` answers at once. (A client that sends the whole
/// oversize body may see the connection reset before it reads the answer, as
/// the server closes without reading the rest.) Returns status, `Allow`, body.
fn head_only(
    base: &str,
    row: &Row,
    length: usize,
) -> Result<(u16, Option<String>, String), String> {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).map_err(|e| format!("no connection: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n",
        row.method.as_str(),
        row.path
    );
    if row.key {
        head.push_str(&format!("X-DGem-Key: {KEY}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())
        .map_err(|e| format!("head not sent: {e}"))?;
    let mut got = Vec::new();
    // The server closes after its answer; a timeout leaves what arrived.
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(format!("no answer to the head; got {}", excerpt(&text)));
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let allow = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("allow")
            .then(|| value.trim().to_string())
    });
    Ok((status, allow, body.to_string()))
}

/// Send `row` with `http`: status, `Allow` and body.
async fn send(
    http: &reqwest::Client,
    base: &str,
    row: &Row,
) -> Result<(u16, Option<String>, String), String> {
    let mut req = http.request(row.method.clone(), format!("{base}{}", row.path));
    if let Some(ct) = &row.content_type {
        req = req.header("content-type", ct.as_str());
    }
    if row.key {
        req = req.header("x-dgem-key", KEY);
    }
    if row.path.starts_with("/mcp") {
        req = req.header("accept", "application/json, text/event-stream");
    }
    for (name, value) in &row.headers {
        req = req.header(*name, value.as_str());
    }
    if let Some(body) = &row.body {
        req = req.body(body.clone());
    }
    let resp = req.send().await.map_err(|e| format!("no answer: {e}"))?;
    let status = resp.status().as_u16();
    let allow = resp
        .headers()
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = resp
        .text()
        .await
        .map_err(|e| format!("status {status}, body unreadable: {e}"))?;
    Ok((status, allow, text))
}

/// Send `row` to `base` and compare the answer with what it expects.
async fn check(http: &reqwest::Client, base: &str, row: &Row) -> Result<(), String> {
    let started = Instant::now();
    let (status, allow, text) = match row.declared {
        Some(length) => head_only(base, row, length)?,
        None => send(http, base, row).await?,
    };
    let took = started.elapsed();
    let seen = format!("got status {status}, body {}", excerpt(&text));
    let body: Value =
        serde_json::from_str(&text).map_err(|_| format!("the body is not JSON; {seen}"))?;
    verdict(&row.expect, status, allow.as_deref(), &body)
        .map_err(|why| format!("{why}; {seen}"))?;
    if took > SLOW {
        return Err(format!(
            "took {took:.1?}: a bad request must be refused before any model work; {seen}"
        ));
    }
    Ok(())
}

/// Run every row against `base`; the failures, one line each.
async fn run_table(base: &str, rows: &[Row]) -> Vec<String> {
    let mut names = HashSet::new();
    for r in rows {
        assert!(names.insert(r.name), "row name `{}` is used twice", r.name);
    }
    let http = client();
    let mut failures = Vec::new();
    for row in rows {
        if let Err(why) = check(&http, base, row).await {
            failures.push(format!(
                "{} ({} {}): {why}",
                row.name,
                row.method.as_str(),
                row.path
            ));
        }
    }
    failures
}

fn assert_no_failures(what: &str, rows: &[Row], failures: &[String]) {
    eprintln!("{what}: {} rows, {} failed", rows.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} {what} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

async fn wait_ok(url: &str, within: Duration) {
    let http = client();
    let started = Instant::now();
    loop {
        if let Ok(r) = http.get(url).send().await {
            if r.status().is_success() {
                return;
            }
        }
        assert!(
            started.elapsed() < within,
            "{url} was not up within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_gets_a_4xx_that_names_the_fault() {
    let Some(model) = common::model() else { return };
    let env = [("API_KEY", KEY), ("MAX_BODY_BYTES", MAX_BODY)];
    let served = server::serve_with_env(&model, &["--studio"], &env, READY).await;
    let rows = rows::serve_rows();
    assert!(rows.len() >= 90, "the table has only {} rows", rows.len());
    let failures = run_table(&served.base, &rows).await;
    // Still serving after all of it.
    wait_ok(&format!("{}/health", served.base), Duration::from_secs(10)).await;
    assert_no_failures("dgem serve", &rows, &failures);
}

/// A `dgem gateway` child process; killed on drop.
#[derive(Debug)]
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_refuses_bad_input_the_same_way() {
    let Some(model) = common::model() else { return };
    let served = server::serve_with_env(&model, &[], &[("API_KEY", KEY)], READY).await;
    let port = server::free_port();
    let child = Command::new(server::dgem_bin())
        .current_dir(common::root())
        .args([
            "gateway",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args(["--templates", "templates", "--local-url", &served.base])
        .args(["--token", KEY])
        .env("API_KEY", KEY)
        .env("DGEM_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn dgem gateway");
    let _gateway = Gateway(child);
    let base = format!("http://127.0.0.1:{port}");
    wait_ok(&format!("{base}/api/backends"), Duration::from_secs(30)).await;
    let rows = rows::gateway_rows();
    let failures = run_table(&base, &rows).await;
    assert_no_failures("dgem gateway", &rows, &failures);
}
