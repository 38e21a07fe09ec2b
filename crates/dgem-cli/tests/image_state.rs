//! An image is a state, on every surface (issue 42): one multimodal policy
//! in a templates folder outside the repository, whose one text variable is
//! optional context with a placeholder, decided with only an image through
//! `dgem decide --image`, `/api/decide`, MCP `decide_policy` (over `/mcp`),
//! the chat route and `/v1/systemone` multipart, on the fake vLLM. The
//! placeholder never reaches the model and `diagnostics.warnings` says so.
//! Without an image the policy is refused naming both; the embedded engine
//! still refuses an image, as before.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgem_fake_vllm::{scripts, FakeConfig, FakeVllm};
use dgem_testkit::gguf::tiny::{Arch, TinyModel};
use serde_json::{json, Value};

mod common;

use common::TINY_TOKENIZER;

/// A 1×1 PNG.
const PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// The placeholder the policy writes for its unset text variable.
const PLACEHOLDER: &str = "No description of the scene was given.";

/// An original detection policy: the questions are about the photo, the
/// text variable is context.
const DETECTION: &str = r#"{"schema": {"questions": [
  {"id": "forklift", "type": "noul", "instructions": "Is a forklift visible in the photo?"}
]},
"state": {"scene_description": {{ default "No description of the scene was given." .scene_description | toJson }}}}"#;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A folder outside the repository with `templates/detect.json.tmpl`, the
/// tiny tokenizer and a PNG.
struct Folder {
    dir: tempfile::TempDir,
}

impl Folder {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("templates")).unwrap();
        std::fs::write(dir.path().join("templates/detect.json.tmpl"), DETECTION).unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), TINY_TOKENIZER).unwrap();
        std::fs::write(dir.path().join("dot.png"), png()).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `dgem ARGS` run in this folder, its templates found there.
    fn dgem(&self, args: &[&str]) -> Output {
        command(self.dir.path()).args(args).output().unwrap()
    }
}

fn png() -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(PNG_B64)
        .unwrap()
}

/// The binary run in `cwd` with no inherited model, templates or keys.
fn command(cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dgem"));
    cmd.current_dir(cwd)
        .env_remove("DGEM_TEMPLATES")
        .env_remove("DGEM_CONFIG")
        .env_remove("DGEM_MODEL_PATH")
        .env_remove("API_KEY")
        .env_remove("DGEM_SERVER_KEY")
        .env("DGEM_MODEL_DIR", "/nonexistent/dgem-test-cache")
        .stdin(Stdio::null());
    cmd
}

async fn fake() -> FakeVllm {
    let script = scripts::weights(|_, _, id| if id == 1 { 3.0 } else { 1.0 });
    FakeVllm::start(FakeConfig {
        script: Arc::new(script),
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

/// Start `dgem serve --studio ARGS` in `folder`; its base URL once `/health`
/// answers.
async fn serve(folder: &Folder, args: &[&str]) -> (Killed, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let child = command(folder.dir.path())
        .args(["serve", "--studio", "--no-warmup", "--host", "127.0.0.1"])
        .args(["--port", &port])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut served = Killed(child);
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    loop {
        if let Ok(r) = reqwest::get(format!("{base}/health")).await {
            if r.status().is_success() {
                return (served, base);
            }
        }
        if let Ok(Some(status)) = served.0.try_wait() {
            panic!("dgem serve exited at start-up: {status}");
        }
        assert!(started.elapsed() < Duration::from_secs(60), "not up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The content parts of the fake's last request.
fn last_parts(fake: &FakeVllm) -> Value {
    fake.requests().last().unwrap().body["messages"][0]["content"].clone()
}

/// The image alone reached the model: no text part holds the placeholder.
fn image_only(parts: &Value) {
    assert!(!parts.to_string().contains(PLACEHOLDER), "{parts}");
    let list = parts.as_array().unwrap();
    assert!(list.iter().any(|p| p["type"] == "image_url"), "{parts}");
}

fn warned(diagnostics: &Value) {
    let w = diagnostics["warnings"].to_string();
    assert!(
        w.contains("`scene_description`") && w.contains("left out of the state"),
        "{diagnostics}"
    );
}

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18")
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_decides_a_multimodal_policy_on_its_image_alone() {
    let folder = Folder::new();
    let fake = fake().await;
    let backend = format!("vllm={}", fake.url());
    let tok = folder.path("tokenizer.json");
    let img = folder.path("dot.png");
    let args = [
        "decide",
        "-t",
        "detect",
        "--json",
        "--backend",
        &backend,
        "--tokenizer",
        tok.to_str().unwrap(),
        "--image",
        img.to_str().unwrap(),
    ];
    let folder_ref = &folder;
    let o = tokio::task::block_in_place(|| folder_ref.dgem(&args));
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let envelope: Value = serde_json::from_slice(&o.stdout).unwrap();
    warned(&envelope["diagnostics"]);
    image_only(&last_parts(&fake));

    // Without the image: refused naming both, before any model call.
    let n = fake.requests().len();
    let o = tokio::task::block_in_place(|| folder_ref.dgem(&args[..8]));
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("give an image") && err.contains("[scene_description]"),
        "{err}"
    );
    assert_eq!(fake.requests().len(), n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_http_surface_decides_a_multimodal_policy_on_its_image_alone() {
    let folder = Folder::new();
    let fake = fake().await;
    let backend = format!("vllm={}", fake.url());
    let tok = folder.path("tokenizer.json");
    let (_served, base) = serve(
        &folder,
        &["--backend", &backend, "--tokenizer", tok.to_str().unwrap()],
    )
    .await;
    let url = format!("data:image/png;base64,{PNG_B64}");

    // /api/decide, the policy from the folder.
    let (status, body) = post(
        &format!("{base}/api/decide"),
        &json!({"template": "detect", "images": [url]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    warned(&body["diagnostics"]);
    image_only(&last_parts(&fake));
    // Without it: 400 naming both.
    let (status, body) = post(
        &format!("{base}/api/decide"),
        &json!({"template": "detect"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let msg = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("give an image") && msg.contains("[scene_description]"),
        "{body}"
    );
    // MCP: the same refusal without an image, and ad-hoc questions on an
    // image alone (no `state`).
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "decide_policy", "arguments": {"template": "detect"}}});
    let (_, reply) = post(&format!("{base}/mcp"), &call).await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert!(reply.to_string().contains("give an image"), "{reply}");
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "decide_custom_questions", "arguments": {
            "questions": [{"id": "forklift", "type": "noul", "question": "A forklift in the photo?"}],
            "images": [url]}}});
    let (_, reply) = post(&format!("{base}/mcp"), &call).await;
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    image_only(&last_parts(&fake));
    // /v1/systemone with JSON `images` and no state.
    let (status, body) = post(
        &format!("{base}/v1/systemone"),
        &json!({"images": [url], "questions": {"forklift": {"type": "noul"}}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_parts(&fake)[0]["type"], "image_url");

    // MCP decide_policy over /mcp.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "decide_policy", "arguments": {"template": "detect", "images": [url]}}});
    let (status, reply) = post(&format!("{base}/mcp"), &call).await;
    assert_eq!(status, 200, "{reply}");
    let result = &reply["result"];
    assert_eq!(result["isError"], false, "{reply}");
    assert!(
        result.to_string().contains("left out of the state"),
        "the warning reaches the MCP client: {reply}"
    );
    image_only(&last_parts(&fake));

    // The chat route: the policy's schema as the system message, a user
    // message that is only an image.
    let schema = json!({"questions": [{"id": "forklift", "type": "noul",
        "instructions": "Is a forklift visible in the photo?"}]});
    let chat = json!({"model": "dgemma", "messages": [
        {"role": "system", "content": schema.to_string()},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]});
    let (status, body) = post(&format!("{base}/v1/chat/completions"), &chat).await;
    assert_eq!(status, 200, "{body}");
    image_only(&last_parts(&fake));

    // /v1/systemone multipart: questions and an image file, no state.
    let request = json!({"questions": {"forklift": {"type": "noul",
        "instructions": "Is a forklift visible in the photo?"}}});
    let mut multipart = format!(
        "--XX\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{request}\r\n--XX\r\nContent-Disposition: form-data; name=\"img\"; filename=\"dot.png\"\r\nContent-Type: image/png\r\n\r\n"
    )
    .into_bytes();
    multipart.extend(png());
    multipart.extend(b"\r\n--XX--\r\n");
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/systemone"))
        .header("content-type", "multipart/form-data; boundary=XX")
        .body(multipart)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let parts = last_parts(&fake);
    assert_eq!(parts[0]["type"], "image_url", "{parts}");
    // The text part is the prompt; the state's text in it is empty.
    let prompt = parts[1]["text"].as_str().unwrap_or_default();
    assert!(prompt.contains("<user_text>\n\n</user_text>"), "{parts}");
}

/// On the embedded engine (a tiny model here) an image the policy stands on
/// is still refused: the engine's "no vision", on `/api/decide` and MCP,
/// never a decision on the text alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_engine_still_refuses_an_image_it_cannot_read() {
    let folder = Folder::new();
    let model = folder.path("tiny.gguf");
    std::fs::write(
        &model,
        TinyModel::new(Arch::Qwen2).tied(true).gguf().bytes(),
    )
    .unwrap();
    let (_served, base) = serve(&folder, &["--model", model.to_str().unwrap()]).await;
    let url = format!("data:image/png;base64,{PNG_B64}");
    // The server binds before its model is loaded: 503 until it is.
    let started = Instant::now();
    let (status, body) = loop {
        let (status, body) = post(
            &format!("{base}/api/decide"),
            &json!({"template": "detect", "images": [url]}),
        )
        .await;
        if status != 503 || started.elapsed() > Duration::from_secs(60) {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["param"], "images", "{body}");
    assert!(body.to_string().contains("has no vision"), "{body}");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "decide_policy", "arguments": {"template": "detect", "images": [url]}}});
    let (_, reply) = post(&format!("{base}/mcp"), &call).await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert!(reply.to_string().contains("has no vision"), "{reply}");
}
