//! Issue 27 item 8, the CLI's share of the hostile run (the gateway's 176
//! broken-upstream requests are in `crates/dgem-gateway/tests/hostile.rs`):
//!
//! * **variables**: every built-in policy under 15 kinds of bad or borderline
//!   template variables (none, misspelled, unknown, `null`, empty, knob only,
//!   malformed `-v`, a bad `-d` file, partial, a caller's own `<no value>`
//!   text, `--allow-missing-vars`) through `dgem decide` and `dgem render`;
//! * **index**: `dgem model pull` of the default model into an empty folder
//!   against a package index that answers 429/503 with good, far, dated or
//!   garbage `Retry-After`, 500, 404, garbage, hangs, or is not there, under
//!   `--pull-timeout 4`;
//! * **signals**: SIGTERM to `dgem serve` while it loads the model, while it
//!   is ready and idle, during a decision, and twice in a row (model needed).
//!
//! Every run is classified **right** (a refusal exits 1 naming what is
//! wrong; an accepted input exits 0 with no placeholder; a failed pull exits
//! non-zero saying why and leaves nothing behind; a signal ends the process
//! within the 8 s shutdown deadline), **crash** (killed by a signal, or an
//! exit code that is not 0, 1 or 2), **hang** (past its bound) or **silent
//! wrong** (exit 0 where a refusal was due, a placeholder in the output, a
//! message that does not name the field). A table per surface is printed;
//! every count but `right` must be 0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;
#[path = "common/server.rs"]
mod server;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    right: usize,
    crash: usize,
    hang: usize,
    silent_wrong: usize,
}

impl Tally {
    fn add(&mut self, verdict: Verdict, what: &str) {
        match verdict {
            Verdict::Right => self.right += 1,
            Verdict::Crash(why) => {
                eprintln!("CRASH: {what}: {why}");
                self.crash += 1;
            }
            Verdict::Hang => {
                eprintln!("HANG: {what}");
                self.hang += 1;
            }
            Verdict::SilentWrong(why) => {
                eprintln!("SILENT WRONG: {what}: {why}");
                self.silent_wrong += 1;
            }
        }
    }

    fn print(&self, surface: &str) {
        let n = self.right + self.crash + self.hang + self.silent_wrong;
        eprintln!("| surface | runs | right | crash | hang | silent wrong |");
        eprintln!("|---|---|---|---|---|---|");
        eprintln!(
            "| {surface} | {n} | {} | {} | {} | {} |",
            self.right, self.crash, self.hang, self.silent_wrong
        );
    }

    fn assert_clean(&self, surface: &str, at_least: usize) {
        let n = self.right + self.crash + self.hang + self.silent_wrong;
        assert!(n >= at_least, "{surface}: only {n} runs");
        assert_eq!(
            (self.crash, self.hang, self.silent_wrong),
            (0, 0, 0),
            "{surface}: {self:?}"
        );
    }
}

#[derive(Debug)]
enum Verdict {
    Right,
    Crash(String),
    Hang,
    SilentWrong(String),
}

/// Run `dgem args` with `envs`, killed after `bound`; `None` when it hung.
fn run(args: &[&str], envs: &[(&str, &str)], bound: Duration) -> Option<Output> {
    let mut cmd = Command::new(server::dgem_bin());
    cmd.current_dir(common::root())
        .args(args)
        .env_remove("DGEM_MODEL_PATH")
        .env_remove("DGEM_PULL_TIMEOUT_S")
        .env("DGEM_MODEL_DIR", "/nonexistent/dgem-hostile")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn dgem");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(bound) {
        Ok(out) => Some(out.expect("wait for dgem")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            None
        }
    }
}

/// Crash when killed by a signal or an exit code outside 0, 1, 2.
fn crashed(o: &Output) -> Option<String> {
    match o.status.code() {
        Some(0..=2) => None,
        Some(c) => Some(format!("exit {c}: {}", String::from_utf8_lossy(&o.stderr))),
        None => Some(format!("killed by a signal: {}", o.status)),
    }
}

/// A refusal is right when it exits 1 and its message holds every `names`.
fn refused_naming(o: Option<Output>, names: &[&str]) -> Verdict {
    let Some(o) = o else { return Verdict::Hang };
    if let Some(c) = crashed(&o) {
        return Verdict::Crash(c);
    }
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(1) {
        return Verdict::SilentWrong(format!("{} (a refusal was due): {err}", o.status));
    }
    match names.iter().find(|n| !err.contains(*n)) {
        Some(n) => Verdict::SilentWrong(format!("the message does not name `{n}`: {err}")),
        None => Verdict::Right,
    }
}

/// An acceptance is right when it exits 0, its output holds `must` and no
/// placeholder unless `placeholders_allowed`.
fn accepted(o: Option<Output>, must: &str, placeholders_allowed: bool) -> Verdict {
    let Some(o) = o else { return Verdict::Hang };
    if let Some(c) = crashed(&o) {
        return Verdict::Crash(c);
    }
    let out = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        return Verdict::SilentWrong(format!("refused: {}", String::from_utf8_lossy(&o.stderr)));
    }
    if !out.contains(must) {
        return Verdict::SilentWrong(format!("`{must}` missing from {out}"));
    }
    if !placeholders_allowed && out.contains("<no value>") {
        return Verdict::SilentWrong(format!("a placeholder in {out}"));
    }
    Verdict::Right
}

/// (policy, its state variables) of the built-in policies.
const POLICIES: [(&str, &[&str]); 6] = [
    ("support_triage", &["ticket"]),
    ("code_review", &["diff"]),
    ("pr_risk", &["diff", "summary"]),
    ("prompt_injection", &["user_input"]),
    ("security_incident", &["alert"]),
    ("agent_tool_gate", &["task", "tool_call", "context"]),
];

/// `name` with its second and third letters swapped (`ticket` → `tciket`),
/// or with an `x` appended when it has three letters or fewer.
fn misspelled(name: &str) -> String {
    let mut c: Vec<char> = name.chars().collect();
    if c.len() > 3 {
        c.swap(1, 2);
    } else {
        c.push('x');
    }
    c.into_iter().collect()
}

#[test]
fn hostile_template_variables() {
    let bound = Duration::from_secs(30);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let not_json = write("not_json.json", "{ticket: oops");
    let array = write("array.json", "[1, 2]");
    let mut t = Tally::default();
    for (policy, state) in POLICIES {
        let first = state[0];
        let all: Vec<String> = state
            .iter()
            .map(|v| format!("{v}=a real {v} text for the {policy} policy"))
            .collect();
        let mut with_all: Vec<&str> = Vec::new();
        for a in &all {
            with_all.extend(["-v", a.as_str()]);
        }
        let what = |case: &str| format!("{policy}: {case}");
        // 1. No variables at all.
        t.add(
            refused_naming(run(&["decide", "-t", policy], &[], bound), &[first]),
            &what("no variables"),
        );
        // 2. The state variable misspelled: named, with the right one suggested.
        let typo = misspelled(first);
        let arg = format!("{typo}=the text");
        t.add(
            refused_naming(
                run(&["decide", "-t", policy, "-v", &arg], &[], bound),
                &[&typo, first],
            ),
            &what("misspelled"),
        );
        // 3. An unknown variable beside the real ones.
        let mut args = vec!["decide", "-t", policy];
        args.extend(&with_all);
        args.extend(["-v", "colour=red"]);
        t.add(
            refused_naming(run(&args, &[], bound), &["colour"]),
            &what("unknown variable"),
        );
        // 4. The state variable given as JSON null.
        let null_file = write(
            &format!("{policy}_null.json"),
            &format!("{{\"{first}\": null}}"),
        );
        t.add(
            refused_naming(
                run(&["decide", "-t", policy, "-d", &null_file], &[], bound),
                &[first],
            ),
            &what("null"),
        );
        // 5. The state variable empty.
        let arg = format!("{first}=");
        t.add(
            refused_naming(
                run(&["decide", "-t", policy, "-v", &arg], &[], bound),
                &[first],
            ),
            &what("empty"),
        );
        // 6. Only the knob.
        t.add(
            refused_naming(
                run(&["decide", "-t", policy, "-v", "samples=3"], &[], bound),
                &[first],
            ),
            &what("knob only"),
        );
        // 7. A malformed -v.
        t.add(
            refused_naming(
                run(&["decide", "-t", policy, "-v", first], &[], bound),
                &[first],
            ),
            &what("malformed -v"),
        );
        // 8–9. A -d file that is not JSON, or not an object.
        t.add(
            refused_naming(
                run(&["decide", "-t", policy, "-d", &not_json], &[], bound),
                &["not_json.json"],
            ),
            &what("-d not JSON"),
        );
        t.add(
            refused_naming(
                run(&["decide", "-t", policy, "-d", &array], &[], bound),
                &["array.json"],
            ),
            &what("-d an array"),
        );
        // 10. Everything given: rendered, no placeholder.
        let mut args = vec!["render", "-t", policy];
        args.extend(&with_all);
        t.add(
            accepted(run(&args, &[], bound), "a real", false),
            &what("all given"),
        );
        // 11. A caller's own `<no value>` text is the caller's, not a placeholder.
        let arg = format!("{first}=the log said <no value> twice");
        let mut args = vec!["render", "-t", policy, "-v", &arg];
        for a in all.iter().skip(1) {
            args.extend(["-v", a.as_str()]);
        }
        t.add(
            accepted(
                run(&args, &[], bound),
                "the log said <no value> twice",
                true,
            ),
            &what("caller's <no value> text"),
        );
        // 12. `--allow-missing-vars` renders what the caller asked for.
        t.add(
            accepted(
                run(
                    &["render", "-t", policy, "--allow-missing-vars"],
                    &[],
                    bound,
                ),
                "questions",
                true,
            ),
            &what("--allow-missing-vars"),
        );
        // 13. Only the first state variable: the others are refused by name
        // unless the policy gives them a default (then no placeholder).
        let arg = all[0].clone();
        let o = run(&["render", "-t", policy, "-v", &arg], &[], bound);
        let verdict = match o.as_ref().map(|o| o.status.code()) {
            Some(Some(1)) if state.len() > 1 => refused_naming(o, &[state[1]]),
            _ => accepted(o, "a real", false),
        };
        t.add(verdict, &what("partial"));
        // 14. The misspelled variable on render too (a preview must not hide it).
        let arg = format!("{typo}=the text");
        t.add(
            refused_naming(
                run(&["render", "-t", policy, "-v", &arg], &[], bound),
                &[&typo],
            ),
            &what("render misspelled"),
        );
        // 15. A name that is not a policy.
        let bad = format!("{policy}_nope");
        t.add(
            refused_naming(
                run(&["decide", "-t", &bad, "-v", "x=y"], &[], bound),
                &[&bad],
            ),
            &what("unknown policy"),
        );
    }
    eprintln!("\nhostile run, template variables (dgem decide / dgem render):");
    t.print("variables");
    t.assert_clean("variables", 90);
}

/// How the stub index answers every request.
#[derive(Debug, Clone, Copy)]
enum Index {
    RetryAfter(&'static str, u16),
    NoRetryAfter429,
    Status(u16),
    Garbage,
    Hang,
}

/// A stub package index on 127.0.0.1 answering as `mode`.
async fn index(mode: Index) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/simple/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 8192];
                let _ = sock.read(&mut buf).await;
                let (head, body) = match mode {
                    Index::RetryAfter(after, status) => (
                        format!("HTTP/1.1 {status} X\r\nretry-after: {after}\r\n"),
                        String::new(),
                    ),
                    Index::NoRetryAfter429 => ("HTTP/1.1 429 X\r\n".to_string(), String::new()),
                    Index::Status(s) => (format!("HTTP/1.1 {s} X\r\n"), "<html>no</html>".into()),
                    Index::Garbage => (
                        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n".to_string(),
                        "<html><a href=\"nothing.whl\">nothing</a>\u{0}\u{1}</html>".into(),
                    ),
                    Index::Hang => {
                        tokio::time::sleep(Duration::from_secs(120)).await;
                        return;
                    }
                };
                let out = format!(
                    "{head}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(out.as_bytes()).await;
            });
        }
    });
    base
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_package_index() {
    if !server::pip_available() {
        return;
    }
    let date: &'static str = Box::leak(httpdate_in(Duration::from_secs(2)).into_boxed_str());
    let cases: Vec<(&str, Option<Index>)> = vec![
        ("429 Retry-After 1", Some(Index::RetryAfter("1", 429))),
        ("429 Retry-After 253", Some(Index::RetryAfter("253", 429))),
        (
            "429 Retry-After HTTP date",
            Some(Index::RetryAfter(date, 429)),
        ),
        (
            "429 Retry-After garbage",
            Some(Index::RetryAfter("soon-ish", 429)),
        ),
        (
            "429 Retry-After negative",
            Some(Index::RetryAfter("-5", 429)),
        ),
        ("429 without Retry-After", Some(Index::NoRetryAfter429)),
        ("503 Retry-After 1", Some(Index::RetryAfter("1", 503))),
        ("500", Some(Index::Status(500))),
        ("404", Some(Index::Status(404))),
        ("garbage page", Some(Index::Garbage)),
        ("hangs", Some(Index::Hang)),
        ("no index listening", None),
    ];
    let mut t = Tally::default();
    let mut slowest = Duration::ZERO;
    for (what, mode) in cases {
        let url = match mode {
            Some(m) => index(m).await,
            None => format!("http://127.0.0.1:{}/simple/", server::free_port()),
        };
        let models = tempfile::tempdir().unwrap();
        let models_path = models.path().to_string_lossy().into_owned();
        let t0 = Instant::now();
        let url2 = url.clone();
        let out = tokio::task::spawn_blocking(move || {
            run(
                &["model", "pull", "--pull-timeout", "4"],
                &[
                    ("PIP_INDEX_URL", url2.as_str()),
                    ("DGEM_MODEL_DIR", models_path.as_str()),
                ],
                Duration::from_secs(20),
            )
        })
        .await
        .unwrap();
        let took = t0.elapsed();
        slowest = slowest.max(took);
        let verdict = match out {
            None => Verdict::Hang,
            Some(o) => match crashed(&o) {
                Some(c) => Verdict::Crash(c),
                None => {
                    let err = String::from_utf8_lossy(&o.stderr).to_string();
                    let left = leftovers(models.path());
                    if o.status.success() {
                        Verdict::SilentWrong(format!("a pull from a broken index succeeded: {err}"))
                    } else if !left.is_empty() {
                        Verdict::SilentWrong(format!("left behind {left:?}"))
                    } else if took > Duration::from_secs(12) {
                        Verdict::SilentWrong(format!("took {took:?} under a 4 s pull timeout"))
                    } else if err.trim().is_empty() {
                        Verdict::SilentWrong("failed without a word".into())
                    } else {
                        Verdict::Right
                    }
                }
            },
        };
        t.add(verdict, what);
    }
    eprintln!(
        "\nhostile run, package index (dgem model pull --pull-timeout 4), slowest {slowest:?}:"
    );
    t.print("index");
    t.assert_clean("index", 12);
}

/// An HTTP date `after` from now (`Retry-After` may be one).
fn httpdate_in(after: Duration) -> String {
    let out = Command::new("date")
        .args([
            "-u",
            "-d",
            &format!(
                "@{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    + after.as_secs()
            ),
            "+%a, %d %b %Y %H:%M:%S GMT",
        ])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A `dgem serve` on the real model (a free port, stderr kept), killed on drop.
struct Serve {
    child: std::process::Child,
    base: String,
}

impl Serve {
    fn start(model: &str) -> Self {
        let port = server::free_port();
        let child = Command::new(server::dgem_bin())
            .current_dir(common::root())
            .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
            .env("DGEM_MODEL_DIR", Path::new(model).parent().unwrap())
            .env("DGEM_MODEL_PATH", common::SMALL_MODEL)
            .env("DGEM_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn dgem serve");
        Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    fn sigterm(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// How it ended within `within` after the signal, or a hang.
    async fn ended_within(&mut self, within: Duration) -> Verdict {
        let t0 = Instant::now();
        while t0.elapsed() < within {
            if let Ok(Some(status)) = self.child.try_wait() {
                return match status.code() {
                    Some(0..=2) => Verdict::Right,
                    Some(c) => Verdict::Crash(format!("exit {c}")),
                    None => Verdict::Crash(format!("killed by a signal: {status}")),
                };
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Verdict::Hang
    }

    /// The `/health` phase, polled until `want(phase)` or 60 s.
    async fn phase_until(&self, want: impl Fn(&str) -> bool) -> String {
        let http = reqwest::Client::new();
        let t0 = Instant::now();
        let mut last = String::new();
        while t0.elapsed() < Duration::from_secs(60) {
            if let Ok(r) = http.get(format!("{}/health", self.base)).send().await {
                if let Ok(v) = r.json::<serde_json::Value>().await {
                    last = v["phase"].as_str().unwrap_or_default().to_string();
                    if want(&last) {
                        return last;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        last
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM at every phase of `dgem serve` on the real model: while the model
/// loads, once ready and idle, during a decision, and a second SIGTERM during
/// the drain. Each ends within the 8 s shutdown deadline, exit 0–2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The guard serializes model processes across this binary's tests (a std
// mutex on purpose: `common::one_model_run` is shared with sync tests).
#[allow(clippy::await_holding_lock)]
async fn hostile_signals_at_every_phase() {
    let Some(model) = common::model() else { return };
    let _one = common::one_model_run();
    let deadline = Duration::from_secs(8);
    let mut t = Tally::default();
    for phase in ["loading", "ready", "deciding", "twice"] {
        let mut s = Serve::start(&model);
        let seen = match phase {
            "loading" => s.phase_until(|p| !p.is_empty()).await,
            _ => s.phase_until(|p| p == "ready").await,
        };
        let decision = if phase == "deciding" || phase == "twice" {
            let url = format!("{}/v1/chat/completions", s.base);
            let body = serde_json::json!({"messages": [
                {"role": "system", "content": "{\"questions\": [{\"id\": \"u\", \"type\": \"boolean\"}]}"},
                {"role": "user", "content": "{\"ticket\": \"the site is down\"}"}]});
            let h = tokio::spawn(async move {
                reqwest::Client::new()
                    .post(url)
                    .json(&body)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some(h)
        } else {
            None
        };
        s.sigterm();
        if phase == "twice" {
            tokio::time::sleep(Duration::from_millis(100)).await;
            s.sigterm();
        }
        let verdict = s.ended_within(deadline).await;
        if let Some(h) = decision {
            // The decision in flight either finished or was cut with the
            // connection; it never hangs the client past the deadline.
            let _ = tokio::time::timeout(Duration::from_secs(2), h).await;
        }
        t.add(
            verdict,
            &format!("SIGTERM while {phase} (health said `{seen}`)"),
        );
    }
    eprintln!("\nhostile run, signals (dgem serve, real model):");
    t.print("signals");
    t.assert_clean("signals", 4);
}
