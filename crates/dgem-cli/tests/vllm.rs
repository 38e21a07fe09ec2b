//! `dgem serve --backend vllm=URL` end to end: the real binary against the
//! in-process fake vLLM, asserting that the envelope's probabilities are the
//! ones the fake scripted.
#![allow(clippy::print_stderr, clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgem_fake_vllm::{scripts, FakeConfig, FakeVllm};
use serde_json::{json, Value};

mod common;

/// A WordLevel `tokenizer.json`: `yes` = 1, `no` = 2, everything else `[UNK]`.
const TINY_TOKENIZER: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null, "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "yes": 1, "no": 2}, "unk_token": "[UNK]"}
}"#;

/// Write [`TINY_TOKENIZER`] into `dir`; its path.
fn tiny_tokenizer(dir: &std::path::Path) -> std::path::PathBuf {
    let tok = dir.join("tokenizer.json");
    std::fs::write(&tok, TINY_TOKENIZER).unwrap();
    tok
}

/// Run the binary off the async runtime (the fake vLLM lives on it).
async fn dgem_off_runtime(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        common::dgem(&refs, None)
    })
    .await
    .unwrap()
}

/// POST `body` as JSON to `url`, assert the status, return the reply JSON.
async fn post_expect(client: &reqwest::Client, url: &str, body: &Value, status: u16) -> Value {
    let r = client.post(url).json(body).send().await.unwrap();
    let got = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(got, status, "{url}: {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// The run exited 1 and its stderr says `needle`.
fn exits_1_saying(o: &std::process::Output, needle: &str) {
    let err = common::stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(needle), "want `{needle}` in: {err}");
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Start `dgem serve` against `url` and wait until its `/health` answers.
async fn serve(url: &str, extra: &[&str], model_dir: &str) -> (Server, String) {
    let port = free_port().to_string();
    let backend = format!("vllm={url}");
    let mut args = vec![
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--backend",
        &backend,
    ];
    args.extend_from_slice(extra);
    let child = Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(common::root())
        .args(&args)
        .env("DGEM_MODEL_DIR", model_dir)
        .env_remove("DGEM_MODEL_PATH")
        .env_remove("API_KEY")
        .env_remove("DGEM_SERVER_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let server = Server(child);
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if let Ok(r) = client.get(format!("{base}/health")).send().await {
            if r.status().is_success() {
                return (server, base);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("dgem serve did not come up on {base}");
}

async fn decide(base: &str) -> Value {
    let schema =
        json!({"questions": [{"id": "urgent", "type": "noul", "instructions": "Act today?"}]});
    let body = json!({"model": "dgemma", "messages": [
        {"role": "system", "content": schema.to_string()},
        {"role": "user", "content": json!({"ticket": "card charged twice"}).to_string()}]});
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let reply: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{reply}");
    serde_json::from_str(reply["choices"][0]["message"]["content"].as_str().unwrap()).unwrap()
}

async fn fake(yes: u32) -> FakeVllm {
    let script = scripts::weights(move |_, _, id| if id == yes { 3.0 } else { 1.0 });
    FakeVllm::start(FakeConfig {
        script: Arc::new(script),
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_vllm_backend_returns_the_scripted_probabilities() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let fake = fake(1).await;
    let (_server, base) = serve(
        fake.url(),
        &["--tokenizer", tok.to_str().unwrap()],
        "/nonexistent/dgem-test-cache",
    )
    .await;
    let env = decide(&base).await;
    let p = env["answers"]["urgent"]["noul"].as_f64().unwrap();
    assert!((p - 0.75).abs() < 1e-9, "{env}");
    assert_eq!(env["diagnostics"]["engine"], "vllm");
    let reads: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .collect();
    assert!(!reads.is_empty());
    assert_eq!(
        reads.last().unwrap().body["logprob_token_ids"],
        json!([1, 2])
    );
}

/// Real model: no `--tokenizer`, so the embedded GGUF's Gemma vocabulary is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_vllm_backend_defaults_to_the_embedded_gguf_vocabulary() {
    let Some(model) = common::model() else {
        return;
    };
    use dgem_core::tokenizer::Tokenizer as _;
    let vocab = dgem_backend_llama::LlamaTokenizer::load(&model).unwrap();
    let yes = *vocab.encode("urgent: yes").unwrap().last().unwrap();
    let fake = fake(yes).await;
    let dir = std::path::Path::new(&model)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let (_server, base) = serve(fake.url(), &[], &dir).await;
    let env = decide(&base).await;
    let p = env["answers"]["urgent"]["noul"].as_f64().unwrap();
    assert!((p - 0.75).abs() < 1e-9, "{env}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_the_canvas_of_the_deployment_profile() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let fake = fake(1).await;
    let client = reqwest::Client::new();
    let tok = tok.to_str().unwrap();
    for (extra, want) in [
        (
            vec![],
            json!({"length": 64, "step": 16, "profile": "plain"}),
        ),
        (
            vec!["--canvas-profile", "l4"],
            json!({"length": 32, "step": 16, "profile": "l4"}),
        ),
        (
            vec!["--canvas-profile", "l4", "--canvas", "96"],
            json!({"length": 96, "step": 16, "profile": null}),
        ),
    ] {
        let mut args = vec!["--tokenizer", tok];
        args.extend(extra.iter().copied());
        let (_server, base) = serve(fake.url(), &args, "/nonexistent/dgem-test-cache").await;
        let h: Value = client
            .get(format!("{base}/health"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(h["canvas"], want, "{extra:?}");
    }
}

#[test]
fn an_unknown_canvas_profile_exits_1_naming_the_choices() {
    let o = common::dgem(
        &[
            "serve",
            "--backend",
            "vllm=http://127.0.0.1:9",
            "--canvas-profile",
            "a100",
        ],
        None,
    );
    exits_1_saying(
        &o,
        "`--canvas-profile` must be one of [plain, l4, rtxpro6000]. Given: `a100`",
    );
}

#[test]
fn a_bad_backend_spec_exits_1_naming_the_flag() {
    let o = common::dgem(&["serve", "--backend", "tgi=http://x"], None);
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("`--backend` must be `vllm=<http(s) URL>`"),
        "{}",
        common::stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_with_vllm_backend_prints_the_scripted_envelope() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let tmpl = dir.path().join("p.json.tmpl");
    std::fs::write(
        &tmpl,
        r#"{"schema": {"samples": 2, "questions": [{"id": "u", "type": "noul"}]}, "state": {"x": 1}}"#,
    )
    .unwrap();
    let fake = fake(1).await;
    let backend = format!("vllm={}", fake.url());
    let args: Vec<String> = vec![
        "decide".into(),
        "-t".into(),
        tmpl.to_str().unwrap().into(),
        "--json".into(),
        "--backend".into(),
        backend,
        "--tokenizer".into(),
        tok.to_str().unwrap().into(),
    ];
    let o = dgem_off_runtime(args).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let env: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        (env["answers"]["u"]["noul"].as_f64().unwrap() - 0.75).abs() < 1e-9,
        "{env}"
    );
    assert_eq!(env["diagnostics"]["samples"]["n"], 2);
    assert_eq!(fake.requests().len(), 2);
}

/// A 1×1 PNG.
const PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAACklEQVR4nGMAAQAABQABDQottAAAAABJRU5ErkJggg==";

fn png_bytes() -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(PNG_B64)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_with_images_sends_them_as_content_parts_to_vllm() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let img = dir.path().join("dot.png");
    std::fs::write(&img, png_bytes()).unwrap();
    let tmpl = dir.path().join("p.json.tmpl");
    std::fs::write(
        &tmpl,
        r#"{"schema": {"questions": [{"id": "u", "type": "noul"}]}, "state": "is this a dot"}"#,
    )
    .unwrap();
    let fake = fake(1).await;
    let backend = format!("vllm={}", fake.url());
    let p = |x: &std::path::Path| x.to_str().unwrap().to_owned();
    let args: Vec<String> = [
        "decide",
        "-t",
        &p(&tmpl),
        "--json",
        "--backend",
        &backend,
        "--tokenizer",
        &p(&tok),
        "--image",
        &p(&img),
        "--image",
        &p(&img),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let o = dgem_off_runtime(args).await;
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let reqs = fake.requests();
    let parts = reqs[0].body["messages"][0]["content"]
        .as_array()
        .unwrap()
        .clone();
    let url = format!("data:image/png;base64,{PNG_B64}");
    assert_eq!(parts.len(), 3, "two images, then the text");
    assert_eq!(parts[0]["image_url"]["url"], url);
    assert_eq!(parts[1]["image_url"]["url"], url);
    assert!(parts[2]["text"].as_str().unwrap().contains("is this a dot"));
}

#[test]
fn decide_with_an_image_on_the_embedded_model_exits_1_naming_the_backend() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("dot.png");
    std::fs::write(&img, png_bytes()).unwrap();
    let o = common::dgem(
        &[
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=hi",
            "--image",
            img.to_str().unwrap(),
        ],
        None,
    );
    exits_1_saying(&o, "`--image`: the embedded model has no vision");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_an_image_exits_1_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "plain words").unwrap();
    let fake = fake(1).await;
    let backend = format!("vllm={}", fake.url());
    let args: Vec<String> = [
        "decide",
        "-t",
        "support_triage",
        "-v",
        "ticket=hi",
        "--backend",
        &backend,
        "--tokenizer",
        tok.to_str().unwrap(),
        "--image",
        notes.to_str().unwrap(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let o = dgem_off_runtime(args).await;
    exits_1_saying(
        &o,
        "notes.txt: the bytes are not a supported image (image/png",
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_forwards_systemone_and_api_images_and_refuses_remote_urls() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let fake = fake(1).await;
    let (_server, base) = serve(
        fake.url(),
        &["--tokenizer", tok.to_str().unwrap(), "--studio"],
        "/nonexistent/dgem-test-cache",
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("data:image/png;base64,{PNG_B64}");
    // /v1/systemone: the JSON `images` list goes ahead of the state's text.
    let body = json!({"state": "what is it", "images": [url, {"content_type": "image/png", "base64": PNG_B64}],
                      "questions": {"u": {"type": "noul", "instructions": "A dot?"}}});
    post_expect(&client, &format!("{base}/v1/systemone"), &body, 200).await;
    let parts = fake.requests().last().unwrap().body["messages"][0]["content"].clone();
    assert_eq!(parts.as_array().map(Vec::len), Some(3), "{parts}");
    assert_eq!(parts[1]["image_url"]["url"], url);
    // /api/decide takes `images` too.
    let n = fake.requests().len();
    let body = json!({"questions": [{"id": "u", "type": "noul", "question": "A dot?"}],
                      "state": "look", "images": [url]});
    post_expect(&client, &format!("{base}/api/decide"), &body, 200).await;
    let last = fake.requests();
    assert!(last.len() > n);
    assert_eq!(
        last.last().unwrap().body["messages"][0]["content"][0]["image_url"]["url"],
        url
    );
    // A remote URL on chat: 400 naming the part, nothing sent upstream.
    let n = fake.requests().len();
    let schema = json!({"questions": [{"id": "u", "type": "noul"}]});
    let body = json!({"messages": [
        {"role": "system", "content": schema.to_string()},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
                                     {"type": "text", "text": "look"}]}]});
    let e = post_expect(&client, &format!("{base}/v1/chat/completions"), &body, 400).await;
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("state[0]: remote image URLs"),
        "{e}"
    );
    assert_eq!(e["error"]["param"], "state[0]");
    assert_eq!(fake.requests().len(), n);
}

#[test]
fn a_bad_prompt_file_stops_serve_at_start_up_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let f = dir.path().join("wording.json");
    std::fs::write(&f, r#"{"lead": "Hello {user}"}"#).unwrap();
    let o = common::dgem(
        &[
            "serve",
            "--backend",
            "vllm=http://127.0.0.1:9",
            "--tokenizer",
            tok.to_str().unwrap(),
            "--prompt-file",
            f.to_str().unwrap(),
        ],
        None,
    );
    exits_1_saying(
        &o,
        "`lead` has the placeholder `{user}`; allowed here: none",
    );
}

/// Regression: `--wording` with the vLLM reader was ignored in silence (the
/// vLLM reader's sentences are dgem's own or `--prompt-file`'s); every
/// command that takes it refuses it before reading, naming the flag.
#[test]
fn wording_with_the_vllm_reader_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let tok = tok.to_str().unwrap();
    let backend = ["--backend", "vllm=http://127.0.0.1:9", "--tokenizer", tok];
    for cmd in [
        &["decide", "-t", "support_triage", "-v", "ticket=x"][..],
        &["serve"][..],
    ] {
        let mut args = cmd.to_vec();
        args.extend(backend);
        args.extend(["--wording", "compact"]);
        let o = common::dgem(&args, None);
        exits_1_saying(
            &o,
            "`--wording` sets the embedded model's question block; with `--backend vllm=URL` the sentences are dgem's own or those of `--prompt-file FILE`. Given: `--wording compact`",
        );
    }
}

/// Readiness follows vLLM live: `/health` says `vllm_ready: false` with the
/// phase while vLLM answers 503, and turns ready again once it answers 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_vllm_down_and_back_up_without_a_warm_up() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let fake = fake(1).await;
    let (_server, base) = serve(
        fake.url(),
        &["--tokenizer", tok.to_str().unwrap(), "--no-warmup"],
        "/nonexistent/dgem-test-cache",
    )
    .await;
    let client = reqwest::Client::new();
    let health = || async {
        let h: Value = client
            .get(format!("{base}/health"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (h["vllm_ready"].clone(), h["phase"].clone())
    };
    // Poll until each state shows (the probe result is cached for 1 s).
    let wait_for = |want: (Value, Value)| {
        let health = &health;
        async move {
            let started = Instant::now();
            loop {
                let got = health().await;
                if got == want {
                    return;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "still {got:?}, want {want:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    wait_for((json!(true), json!("ready"))).await;
    assert_eq!(fake.requests().len(), 0, "--no-warmup: no decision at boot");
    fake.set_not_ready_polls(1_000_000);
    wait_for((json!(false), json!("waiting_for_vllm"))).await;
    let r = client.get(format!("{base}/ready")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    fake.set_not_ready_polls(0);
    wait_for((json!(true), json!("ready"))).await;
    let r = client.get(format!("{base}/ready")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

/// Regressions from a hostile run of the CLI's vLLM flags: `--image /dev/zero`
/// read without end, canvas errors named internal fields, and a `--prompt-file`
/// on the embedded model was silently ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_image_canvas_and_prompt_file_mistakes_exit_1_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let tok = tok.to_str().unwrap().to_owned();
    let fake = fake(1).await;
    let backend = format!("vllm={}", fake.url());
    let run = |extra: &[&str]| {
        let mut args: Vec<String> = ["decide", "-t", "support_triage", "-v", "ticket=hi"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        dgem_off_runtime(args)
    };
    let started = Instant::now();
    let o = run(&[
        "--backend",
        &backend,
        "--tokenizer",
        &tok,
        "--image",
        "/dev/zero",
    ])
    .await;
    exits_1_saying(&o, "at most 10 MiB");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "read only what the limit needs"
    );
    let o = run(&["--backend", &backend, "--tokenizer", &tok, "--canvas", "4"]).await;
    exits_1_saying(
        &o,
        "`--canvas` must be a canvas length from 8 to 4096 tokens. Given: `4`",
    );
    let o = run(&["--backend", &backend, "--tokenizer", &tok, "--canvas", "8"]).await;
    exits_1_saying(&o, "`--canvas-step` must be from 1 to the canvas length 8");
    let wording = dir.path().join("w.json");
    std::fs::write(&wording, r#"{"lead": "Answer."}"#).unwrap();
    let o = run(&["--prompt-file", wording.to_str().unwrap()]).await;
    exits_1_saying(&o, "`--prompt-file`");
    exits_1_saying(&o, "add `--backend vllm=URL`");
    // The vLLM reader's order debiasing is not silently dropped on the embedded model.
    let o = run(&["--vllm-order-debias", "cyclic"]).await;
    exits_1_saying(&o, "`--vllm-order-debias` sets the vLLM reader");
    let o = run(&[
        "--backend",
        &backend,
        "--tokenizer",
        &tok,
        "--vllm-order-debias",
        "often",
    ])
    .await;
    exits_1_saying(&o, "`order_debias` must be one of [off, cyclic]");
    assert!(fake.requests().is_empty());
}

/// Regression (hostile run): on `/v1/systemone` a `state` given as content
/// parts was written as JSON text (base64 and URLs included) on a vision
/// backend, and a misspelled `imges` was ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_states_are_read_as_images_with_their_own_indices_and_misspellings_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tiny_tokenizer(dir.path());
    let fake = fake(1).await;
    let (_server, base) = serve(
        fake.url(),
        &["--tokenizer", tok.to_str().unwrap(), "--studio"],
        "/nonexistent/dgem-test-cache",
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("data:image/png;base64,{PNG_B64}");
    let n = fake.requests().len();
    let body = json!({"state": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "hi"}],
                      "questions": {"u": {"type": "noul"}}});
    post_expect(&client, &format!("{base}/v1/systemone"), &body, 200).await;
    let reqs = fake.requests();
    let parts = reqs[n..].last().unwrap().body["messages"][0]["content"].clone();
    assert_eq!(parts[0]["image_url"]["url"], url, "{parts}");
    let body = json!({"state": [{"type": "image_url", "image_url": {"url": "http://169.254.169.254/"}}],
                      "questions": {"u": {"type": "noul"}}});
    let e = post_expect(&client, &format!("{base}/v1/systemone"), &body, 422).await;
    assert_eq!(e["error"]["param"], "state[0]", "{e}");
    // Beside an `images` list the parts keep their own indices (was `state[2]`).
    let body = json!({"state": [{"type": "image_url", "image_url": {"url": "http://169.254.169.254/"}}],
                      "images": [url, url], "questions": {"u": {"type": "noul"}}});
    let e = post_expect(&client, &format!("{base}/v1/systemone"), &body, 422).await;
    assert_eq!(e["error"]["param"], "state[0]", "{e}");
    // /api/decide: a parts state beside `images` is checked, not written as text.
    let body = json!({"state": [{"type": "image_url", "image_url": {"url": "http://169.254.169.254/"}}],
                      "images": [url], "questions": [{"id": "u", "type": "noul", "question": "A dot?"}]});
    let e = post_expect(&client, &format!("{base}/api/decide"), &body, 400).await;
    assert_eq!(e["error"]["param"], "state[0]", "{e}");
    // An image in the system message is refused, not dropped.
    let schema = json!({"questions": [{"id": "u", "type": "noul"}]}).to_string();
    let body = json!({"messages": [
        {"role": "system", "content": [{"type": "text", "text": schema}, {"type": "image_url", "image_url": {"url": url}}]},
        {"role": "user", "content": "{\"a\": 1}"}]});
    let e = post_expect(&client, &format!("{base}/v1/chat/completions"), &body, 400).await;
    assert_eq!(e["error"]["param"], "messages[0].content", "{e}");
    let body = json!({"state": "hi", "imges": [url], "questions": {"u": {"type": "noul"}}});
    let e = post_expect(&client, &format!("{base}/v1/systemone"), &body, 422).await;
    assert_eq!(e["error"]["param"], "imges", "{e}");
}

/// `--vllm-order-debias cyclic` end to end: a vLLM whose reads favour the
/// first listed letter 4:1:1 whatever it labels answers by position with the
/// default (one read, the policy's order) and uniformly with cyclic listings
/// (three reads, one per rotation), saying how much the order moved it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_order_debias_cancels_a_vllm_position_prior_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("tokenizer.json");
    std::fs::write(
        &tok,
        TINY_TOKENIZER.replace(r#""no": 2}"#, r#""no": 2, "A": 3, "B": 4, "C": 5}"#),
    )
    .unwrap();
    let script = scripts::weights(|_, _, id| if id == 3 { 4.0 } else { 1.0 });
    let fake = FakeVllm::start(FakeConfig {
        script: Arc::new(script),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let schema = json!({"questions": [
        {"id": "tier", "type": "choice", "options": ["medium", "high", "low"]}]});
    let body = json!({"model": "dgemma", "messages": [
        {"role": "system", "content": schema.to_string()},
        {"role": "user", "content": json!({"ticket": "the card was charged twice"}).to_string()}]});
    let client = reqwest::Client::new();
    let tok = tok.to_str().unwrap();
    for (flag, reads, top) in [("off", 1, 4.0 / 6.0), ("cyclic", 3, 1.0 / 3.0)] {
        let (_server, base) = serve(
            fake.url(),
            &[
                "--tokenizer",
                tok,
                "--no-warmup",
                "--vllm-order-debias",
                flag,
            ],
            "/nonexistent/dgem-test-cache",
        )
        .await;
        let before = fake.requests().len();
        let reply = post_expect(&client, &format!("{base}/v1/chat/completions"), &body, 200).await;
        let env: Value =
            serde_json::from_str(reply["choices"][0]["message"]["content"].as_str().unwrap())
                .unwrap();
        assert_eq!(fake.requests().len() - before, reads, "{flag}: {env}");
        let tier = &env["answers"]["tier"];
        let best = tier["probabilities"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_f64().unwrap())
            .fold(0.0, f64::max);
        assert!((best - top).abs() < 1e-9, "{flag}: {env}");
        if flag == "off" {
            // The policy lists `medium` first: position decides.
            assert_eq!(tier["choice"], "medium", "{env}");
            assert!(tier.get("order_sensitivity").is_none(), "{env}");
        } else {
            assert_eq!(tier["order_sensitivity"]["orders"], 3, "{env}");
            assert_eq!(tier["order_sensitivity"]["method"], "cyclic", "{env}");
        }
    }
}
