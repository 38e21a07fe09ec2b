//! `dgem batch` end to end: the real binary, on the in-process fake vLLM
//! (fast, scripted probabilities) and on the embedded model.
#![allow(clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dgem_fake_vllm::{scripts, FakeConfig, FakeVllm};
use serde_json::{json, Value};

mod common;
use common::TINY_TOKENIZER;
#[path = "common/server.rs"]
mod server;

/// A one-question policy over `{{.ticket}}`.
const POLICY: &str = r#"{"schema": {"questions": [{"id": "u", "type": "noul", "instructions": "Urgent?"}]}, "state": {"ticket": "{{.ticket}}"}}"#;

struct Setup {
    dir: tempfile::TempDir,
    fake: FakeVllm,
}

impl Setup {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), TINY_TOKENIZER).unwrap();
        std::fs::write(dir.path().join("p.json.tmpl"), POLICY).unwrap();
        let script = scripts::weights(|_, _, id| if id == 1 { 3.0 } else { 1.0 });
        let fake = FakeVllm::start(FakeConfig {
            script: Arc::new(script),
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        Self { dir, fake }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `dgem batch` on the fake, with `extra` arguments.
    fn args(&self, input: &Path, output: &Path, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "batch".into(),
            "-t".into(),
            self.path("p.json.tmpl").display().to_string(),
            "-i".into(),
            input.display().to_string(),
            "-o".into(),
            output.display().to_string(),
            "--backend".into(),
            format!("vllm={}", self.fake.url()),
            "--tokenizer".into(),
            self.path("tokenizer.json").display().to_string(),
        ];
        a.extend(extra.iter().map(|s| (*s).to_string()));
        a
    }
}

fn command(args: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dgem"));
    cmd.current_dir(common::root())
        .args(args)
        .env_remove("DGEM_MODEL_PATH")
        .env("DGEM_MODEL_DIR", "/nonexistent/dgem-test-cache")
        .stdin(Stdio::null());
    cmd
}

/// Run the binary off the async runtime (the fake vLLM lives on it).
async fn run(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || command(&args).output().unwrap())
        .await
        .unwrap()
}

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The line without what differs from run to run: timings and the chat
/// route's response id and creation time.
fn timeless(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "timing" | "created") && !k.ends_with("_ms"))
                .map(|(k, x)| (k.clone(), timeless(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(timeless).collect()),
        other => other.clone(),
    }
}

/// The run exited `code` and its stderr says `needle`.
fn exits_saying(o: &Output, code: i32, needle: &str) {
    let err = common::stderr(o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "want `{needle}` in: {err}");
}

fn tickets(n: usize) -> String {
    (0..n)
        .map(|i| format!("{}\n", json!({"id": format!("t{i}"), "ticket": format!("ticket number {i} about an invoice")})))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_are_written_in_input_order_with_errors_and_duplicates() {
    let s = Setup::new().await;
    let input = s.path("in.jsonl");
    std::fs::write(
        &input,
        "{\"id\": \"a\", \"ticket\": \"refund\"}\nnot json\n{\"id\": \"c\", \"tickt\": \"typo\"}\n{\"ticket\": \"refund\", \"id\": \"d\"}\n\n{\"ticket\": \"crash\"}\n",
    )
    .unwrap();
    let out = s.path("out.jsonl");
    let o = run(s.args(&input, &out, &[])).await;
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "two rows failed: {err}");
    assert!(
        err.contains("5 rows") && err.contains("2 decided, 1 duplicates, 2 failed"),
        "{err}"
    );
    let got = lines(&out);
    let ids: Vec<&str> = got.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "line-2", "c", "d", "line-6"]);
    let rows: Vec<u64> = got.iter().map(|l| l["row"].as_u64().unwrap()).collect();
    assert_eq!(rows, [0, 1, 2, 3, 4]);
    // The scripted read: `yes` weighs 3, `no` 1.
    let p = got[0]["decision"]["answers"]["u"]["noul"].as_f64().unwrap();
    assert!((p - 0.75).abs() < 1e-9, "{p}");
    assert_eq!(got[1]["error"]["field"], "line");
    assert_eq!(got[2]["error"]["field"], "variables");
    assert!(got[2]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("did you mean `ticket`"));
    // `d` has `a`'s content (in another key order): decided once.
    assert_eq!(got[3]["duplicate_of"], "a");
    assert_eq!(got[3]["decision"], got[0]["decision"]);
    assert_eq!(s.fake.requests().len(), 2, "a and line-6 only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_at_random_points_resumes_without_losing_or_repeating_rows() {
    let s = Setup::new().await;
    let input = s.path("in.jsonl");
    std::fs::write(&input, tickets(100)).unwrap();
    let whole = s.path("whole.jsonl");
    let o = run(s.args(&input, &whole, &["-w", "4"])).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out = s.path("out.jsonl");
    let args = s.args(&input, &out, &["-w", "4"]);
    // Kill points from a fixed LCG: 30–120 ms into each try (a whole run
    // takes a few hundred ms on the fake, so most tries are killed).
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut kills = 0;
    for _ in 0..40 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let after = Duration::from_millis(30 + (x >> 33) % 90);
        let args = args.clone();
        let finished = tokio::task::spawn_blocking(move || {
            let mut child = command(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(after);
            match child.try_wait().unwrap() {
                Some(status) => status.code() == Some(0),
                None => {
                    child.kill().unwrap(); // SIGKILL
                    child.wait().unwrap();
                    false
                }
            }
        })
        .await
        .unwrap();
        if finished {
            break;
        }
        kills += 1;
        let written = std::fs::read(&out).map_or(0, |b| b.iter().filter(|c| **c == b'\n').count());
        eprintln!("killed after {after:?}: {written} lines written");
    }
    // Whatever the kills left, one more run completes it.
    let o = run(args).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(
        kills >= 2,
        "{kills} runs were killed: the test proves little"
    );
    let (a, b) = (lines(&whole), lines(&out));
    assert_eq!(a.len(), 100);
    assert_eq!(b.len(), 100);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(timeless(x), timeless(y));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_merge_back_into_the_unsharded_output() {
    let s = Setup::new().await;
    let input = s.path("in.jsonl");
    std::fs::write(&input, tickets(30)).unwrap();
    let whole = s.path("whole.jsonl");
    assert_eq!(
        run(s.args(&input, &whole, &[])).await.status.code(),
        Some(0)
    );
    let mut parts = Vec::new();
    for i in 0..3 {
        let part = s.path(&format!("part-{i}.jsonl"));
        let shard = format!("{i}/3");
        let o = run(s.args(&input, &part, &["--shard", &shard])).await;
        assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
        let n = lines(&part).len();
        assert!(n > 0 && n < 30, "shard {i} has {n} rows");
        parts.push(part.display().to_string());
    }
    let merged = s.path("merged.jsonl");
    let mut args = vec![
        "batch-merge".to_string(),
        "-o".into(),
        merged.display().to_string(),
    ];
    args.extend(parts.iter().cloned());
    let o = run(args).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let (a, b) = (lines(&whole), lines(&merged));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(timeless(x), timeless(y));
    }
    // One part missing: refused, naming the gap.
    let mut args = vec![
        "batch-merge".to_string(),
        "--overwrite".into(),
        "-o".into(),
        merged.display().to_string(),
    ];
    args.extend(parts[1..].iter().cloned());
    let o = run(args).await;
    exits_saying(&o, 1, "rows are missing");
    // The merge overwrote any file, its own parts included (found by a
    // black-box run): an existing output needs `--overwrite`, and a part is
    // never the output.
    let before = std::fs::read(&merged).unwrap();
    let mut args = vec![
        "batch-merge".to_string(),
        "-o".into(),
        merged.display().to_string(),
    ];
    args.extend(parts.iter().cloned());
    exits_saying(&run(args).await, 1, "already exists; pass `--overwrite`");
    assert_eq!(std::fs::read(&merged).unwrap(), before);
    let part0 = std::fs::read(&parts[0]).unwrap();
    let mut args = vec![
        "batch-merge".to_string(),
        "--overwrite".into(),
        "-o".into(),
        parts[0].clone(),
    ];
    args.extend(parts.iter().cloned());
    exits_saying(&run(args).await, 1, "is one of the parts");
    assert_eq!(std::fs::read(&parts[0]).unwrap(), part0);
    // A shard of another run (other options over the same input) does not
    // join these.
    let other = s.path("other-1.jsonl");
    let o = run(s.args(&input, &other, &["--shard", "1/3", "--no-dedupe"])).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let args = vec![
        "batch-merge".to_string(),
        "--overwrite".into(),
        "-o".into(),
        merged.display().to_string(),
        parts[0].clone(),
        other.display().to_string(),
        parts[2].clone(),
    ];
    exits_saying(&run(args).await, 1, "were written by different runs");
}

/// `-o` naming the input file with `--overwrite` emptied the input and
/// exited 0 ("all 0 rows are already in …"; found by a black-box run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_that_is_the_input_file_is_refused() {
    let s = Setup::new().await;
    let input = s.path("in.jsonl");
    std::fs::write(&input, tickets(3)).unwrap();
    let before = std::fs::read(&input).unwrap();
    let o = run(s.args(&input, &input, &["--overwrite"])).await;
    exits_saying(&o, 1, "is the `--input` file");
    assert_eq!(std::fs::read(&input).unwrap(), before, "the input is kept");
    // Another name for the same file (a hard link) is the same file.
    let linked = s.path("linked.jsonl");
    std::fs::hard_link(&input, &linked).unwrap();
    let o = run(s.args(&input, &linked, &["--overwrite"])).await;
    exits_saying(&o, 1, "is the `--input` file");
    assert_eq!(std::fs::read(&input).unwrap(), before, "the input is kept");
    // An input of no rows says so rather than "all 0 rows are already in".
    let empty = s.path("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let o = run(s.args(&empty, &s.path("e.out.jsonl"), &[])).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("holds no rows"),
        "{}",
        common::stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_input_with_a_column_map() {
    let s = Setup::new().await;
    let input = s.path("in.csv");
    std::fs::write(
        &input,
        "ref,body,team\nr1,\"charged twice, please refund\",x\nr2,the app crashes,y\n",
    )
    .unwrap();
    let out = s.path("out.jsonl");
    let o = run(s.args(&input, &out, &["--id-field", "ref", "--map", "ticket=body"])).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let got = lines(&out);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1]["id"], "r2");
    assert!(got[0]["decision"]["answers"]["u"]["noul"].is_number());
    // A map naming a column the file lacks fails before any row is read.
    let o = run(s.args(&input, &s.path("o2.jsonl"), &["--map", "ticket=text"])).await;
    exits_saying(&o, 1, "no column `text`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_batch_lines_get_openai_response_lines() {
    let s = Setup::new().await;
    let input = s.path("requests.jsonl");
    let schema = json!({"questions": [{"id": "u", "type": "noul", "instructions": "Urgent?"}]});
    let body = json!({"model": "dgem", "messages": [
        {"role": "system", "content": schema.to_string()},
        {"role": "user", "content": "\"the site is down\""}]});
    let rows = [
        json!({"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions", "body": body}),
        json!({"custom_id": "q2", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}}),
        json!({"custom_id": "q3", "method": "POST", "url": "/v1/embeddings", "body": {}}),
    ];
    std::fs::write(
        &input,
        rows.iter().map(|r| format!("{r}\n")).collect::<String>(),
    )
    .unwrap();
    let out = s.path("responses.jsonl");
    let mut args = s.args(&input, &out, &[]);
    args.drain(1..3); // no `-t`: each body carries its questions
    let o = run(args).await;
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    let got = lines(&out);
    assert_eq!(got[0]["id"], "batch_req_0");
    assert_eq!(got[0]["custom_id"], "q1");
    assert_eq!(got[0]["response"]["status_code"], 200);
    let content: Value = serde_json::from_str(
        got[0]["response"]["body"]["choices"][0]["message"]["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!((content["answers"]["u"]["noul"].as_f64().unwrap() - 0.75).abs() < 1e-9);
    assert_eq!(got[0]["error"], Value::Null);
    // A body the chat route refuses: its 400, as serve would answer it.
    assert_eq!(got[1]["response"]["status_code"], 400);
    assert_eq!(
        got[1]["response"]["body"]["error"]["type"],
        "invalid_request_error"
    );
    // A line that is not a chat request: an error object naming the field.
    assert_eq!(got[2]["response"], Value::Null);
    assert_eq!(got[2]["error"]["param"], "url");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_rows_finish_and_rerunning_does_nothing() {
    let s = Setup::new().await;
    let input = s.path("in.jsonl");
    // 10,000 rows, 2,500 distinct: three of every four are repeats.
    let text: String = (0..10_000)
        .map(|i| {
            format!(
                "{}\n",
                json!({"id": format!("r{i}"), "ticket": format!("ticket {}", i % 2_500)})
            )
        })
        .collect();
    std::fs::write(&input, text).unwrap();
    let out = s.path("out.jsonl");
    let o = run(s.args(&input, &out, &["-w", "16"])).await;
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("2500 decided, 7500 duplicates, 0 failed"),
        "{err}"
    );
    let got = lines(&out);
    assert_eq!(got.len(), 10_000);
    assert!(got.iter().enumerate().all(|(i, l)| l["row"] == json!(i)));
    // Row 9,999 holds ticket 2,499, first seen in row 2,499.
    assert_eq!(got[9_999]["duplicate_of"], "r2499");
    let before = s.fake.requests().len();
    let o = run(s.args(&input, &out, &[])).await;
    exits_saying(&o, 0, "nothing to decide");
    assert_eq!(
        s.fake.requests().len(),
        before,
        "a finished run reads nothing again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_exit_1_naming_them_and_lose_nothing() {
    let s = Setup::new().await;
    let out = s.path("out.jsonl");
    // An input that does not exist.
    let o = run(s.args(&s.path("missing.jsonl"), &out, &[])).await;
    exits_saying(&o, 1, "missing.jsonl");
    // An output that cannot be created (its folder is a file).
    let input = s.path("in.jsonl");
    std::fs::write(&input, tickets(2)).unwrap();
    let blocked = s.path("in.jsonl").join("out.jsonl");
    let o = run(s.args(&input, &blocked, &[])).await;
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("in.jsonl/out.jsonl"),
        "{}",
        common::stderr(&o)
    );
    // A file `dgem batch` did not write is not resumed over.
    std::fs::write(&out, "my own notes\n").unwrap();
    let o = run(s.args(&input, &out, &[])).await;
    exits_saying(&o, 1, "--overwrite");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "my own notes\n");
    // Other arguments over a finished output: refused, not mixed.
    let o = run(s.args(&input, &s.path("o2.jsonl"), &[])).await;
    assert_eq!(o.status.code(), Some(0));
    let o = run(s.args(&input, &s.path("o2.jsonl"), &["--seed", "7"])).await;
    exits_saying(&o, 1, "under other arguments");
    // A shared variable the template does not read is refused before any
    // row (every row got an error line; black-box run), and writes nothing.
    let o3 = s.path("o3.jsonl");
    let o = run(s.args(&input, &o3, &["-v", "tickt=x"])).await;
    exits_saying(&o, 1, "did you mean `ticket`");
    assert!(!o3.exists(), "nothing written");
    // So is `--cascade` with no Stage-2 provider, as `decide` refuses it.
    let o = run(s.args(&input, &o3, &["--cascade", "entropy"])).await;
    exits_saying(&o, 1, "`--cascade` needs a Stage-2 provider");
    assert!(!o3.exists(), "nothing written");
}

/// The embedded model decides a small file; its lines are the envelopes
/// `dgem decide --json` prints.
#[test]
fn the_embedded_model_decides_a_file_as_decide_does() {
    let Some(model) = common::model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"id\": \"a\", \"ticket\": \"I was charged twice this month\"}\n{\"id\": \"b\", \"ticket\": \"The app crashes on start\"}\n",
    )
    .unwrap();
    let out = dir.path().join("out.jsonl");
    let o = common::dgem(
        &[
            "batch",
            "-t",
            "support_triage",
            "-i",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        Some(&model),
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let got = lines(&out);
    let single = common::dgem(
        &[
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=The app crashes on start",
            "--json",
        ],
        Some(&model),
    );
    let single: Value = serde_json::from_slice(&single.stdout).unwrap();
    assert_eq!(got[1]["id"], "b");
    assert_eq!(
        timeless(&got[1]["decision"]["answers"]),
        timeless(&single["answers"]),
        "a row is decided as `dgem decide` decides it"
    );
}

/// docs/batch.md's Ray recipe posts the JSON block under `<!-- ray-request -->`
/// to `dgem serve` and reads `choices[0].message.content` as the envelope,
/// keeping `answers.<id>.label` and `.probabilities`: the block is posted
/// verbatim to the real binary on the real model, and those fields checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ray_recipe_request_gets_the_response_it_reads() {
    let Some(model) = common::model() else { return };
    let doc = std::fs::read_to_string(common::root().join("docs/batch.md")).unwrap();
    let after = doc
        .split("<!-- ray-request -->")
        .nth(1)
        .expect("the marked block");
    let block = after
        .split("```json")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a json block after the marker");
    let body: Value = serde_json::from_str(block).expect("the documented request is JSON");
    let served = server::serve(&model, &["--no-warmup"], Duration::from_secs(120)).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", served.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let reply: Value = r.json().await.unwrap();
    let content = reply["choices"][0]["message"]["content"]
        .as_str()
        .expect("content text");
    let env: Value = serde_json::from_str(content).expect("the content is the envelope");
    for (q, allowed) in [
        ("urgent", vec!["yes", "no"]),
        ("team", vec!["billing", "support", "engineering"]),
    ] {
        let a = &env["answers"][q];
        let label = a["label"].as_str().expect("a label");
        assert!(allowed.contains(&label), "{q}: {label}");
        let p = a["probabilities"].as_object().expect("probabilities");
        let keys: Vec<&str> = p.keys().map(String::as_str).collect();
        assert_eq!(keys, allowed, "{q}");
        let total: f64 = p.values().map(|v| v.as_f64().unwrap()).sum();
        assert!((total - 1.0).abs() < 1e-6, "{q}: {total}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_batch_removes_the_runs_lean_and_keeps_the_reads() {
    let s = Setup::new().await;
    let input = s.path("in.jsonl");
    std::fs::write(&input, tickets(10)).unwrap();
    let out = s.path("out.jsonl");
    let o = run(s.args(&input, &out, &["--calibrate", "batch"])).await;
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("`u` corrected over 10 rows"), "{err}");
    // The fake reads every row 0.75 `yes`: that lean is all the run shows,
    // so once it is removed every row is even, and the read is kept.
    let got = lines(&out);
    assert_eq!(got.len(), 10);
    for l in &got {
        let a = &l["decision"]["answers"]["u"];
        assert!(
            (a["probabilities"]["yes"].as_f64().unwrap() - 0.5).abs() < 1e-9,
            "{a}"
        );
        assert!(
            (a["uncalibrated"]["yes"].as_f64().unwrap() - 0.75).abs() < 1e-9,
            "{a}"
        );
        assert_eq!(
            l["decision"]["diagnostics"]["batch_calibration"]["u"]["rows"],
            10
        );
    }
    let raw = lines(&s.path("out.jsonl.uncalibrated"));
    assert!((raw[0]["decision"]["answers"]["u"]["noul"].as_f64().unwrap() - 0.75).abs() < 1e-9);
    // Too few rows for an estimate: left as read, and said so.
    std::fs::write(&input, tickets(3)).unwrap();
    let small = s.path("small.jsonl");
    let o = run(s.args(&input, &small, &["--calibrate", "batch"])).await;
    exits_saying(&o, 0, "left as read: 3 rows");
    let a = &lines(&small)[0]["decision"]["answers"]["u"];
    assert!((a["probabilities"]["yes"].as_f64().unwrap() - 0.75).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_batch_is_refused_where_it_would_mislead_and_spares_other_files() {
    let s = Setup::new().await;
    let input = s.path("in.jsonl");
    std::fs::write(&input, tickets(10)).unwrap();
    let out = s.path("out.jsonl");
    for (extra, why) in [
        (
            &["--shard", "0/2"][..],
            "each shard would be corrected by its own rows",
        ),
        (&["--abstain-below", "0.6"][..], "post-read options"),
    ] {
        let mut a = vec!["--calibrate", "batch"];
        a.extend_from_slice(extra);
        let o = run(s.args(&input, &out, &a)).await;
        assert_eq!(o.status.code(), Some(1), "{extra:?}");
        assert!(common::stderr(&o).contains(why), "{}", common::stderr(&o));
    }
    // A file of the user's at `-o` is neither read nor replaced.
    std::fs::write(&out, "my notes\n").unwrap();
    let o = run(s.args(&input, &out, &["--calibrate", "batch"])).await;
    exits_saying(&o, 1, "--overwrite");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "my notes\n");
    assert_eq!(
        s.fake.requests().len(),
        0,
        "refused before any row was read"
    );
    // An uncalibrated run may not take over a calibrated output either.
    let o = run(s.args(&input, &out, &["--calibrate", "batch", "--overwrite"])).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let o = run(s.args(&input, &out, &[])).await;
    exits_saying(&o, 1, "under other arguments");
}

/// A disk that fills mid-run (a file-size limit stands in for it: writes
/// past 4 KiB fail with EFBIG): the run stops with an error naming the
/// output, the lines before stay whole, and a rerun finishes the file as an
/// uninterrupted run writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_run_clearly_and_loses_nothing() {
    let s = Setup::new().await;
    let input = s.path("in.jsonl");
    std::fs::write(&input, tickets(30)).unwrap();
    let whole = s.path("whole.jsonl");
    assert_eq!(
        run(s.args(&input, &whole, &[])).await.status.code(),
        Some(0)
    );
    let out = s.path("out.jsonl");
    let args = s.args(&input, &out, &[]);
    let limited = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg("-c")
            .arg("ulimit -f 4; trap '' XFSZ; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_dgem"))
            .args(&args)
            .current_dir(common::root())
            .env_remove("DGEM_MODEL_PATH")
            .env("DGEM_MODEL_DIR", "/nonexistent/dgem-test-cache")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let err = common::stderr(&limited);
    assert_eq!(limited.status.code(), Some(2), "{err}");
    assert!(
        err.contains("out.jsonl") && err.contains("File too large"),
        "{err}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.len() <= 4096);
    // Every complete line is whole JSON; at most the last is cut short.
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let kept = complete.lines().count();
    assert!(kept > 0 && kept < 30, "{kept} lines before the disk filled");
    for l in complete.lines() {
        serde_json::from_str::<Value>(l).unwrap();
    }
    let o = run(s.args(&input, &out, &[])).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let (a, b) = (lines(&whole), lines(&out));
    assert_eq!(a.len(), 30);
    assert_eq!(b.len(), 30);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(timeless(x), timeless(y));
    }
}

/// `dgem bench-batch` runs both paths on the real model and writes a
/// receipt with every round's decisions/s and the ratio (its figures are a
/// benchmark's, not asserted here).
#[test]
fn bench_batch_writes_both_paths_and_their_ratio() {
    let Some(model) = common::model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("batch_throughput.json");
    let o = common::dgem(
        &[
            "bench-batch",
            "--rounds",
            "1",
            "--rows",
            "2",
            "--clients",
            "2",
            "-o",
            out.to_str().unwrap(),
        ],
        Some(&model),
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let s = &r["scenarios"];
    for path in ["serve", "batch"] {
        let dps = s[path]["decisions_per_s"].as_array().unwrap();
        assert_eq!(dps.len(), 1);
        assert!(dps[0].as_f64().unwrap() > 0.0, "{path}: {dps:?}");
    }
    let ratio = s["batch_vs_serve"]["median"].as_f64().unwrap();
    let want = s["batch"]["median"].as_f64().unwrap() / s["serve"]["median"].as_f64().unwrap();
    assert!((ratio - want).abs() < 1e-9, "{ratio} vs {want}");
    assert_eq!(s["batch_vs_serve"]["goal"], 1.0);
    assert_eq!(r["clients"], 2);
}
