//! The fake vLLM as a process, for trying `dgem serve --backend vllm=URL` by
//! hand (no GPU, no weights): it prints its URL on the first line, then one
//! JSON line per request it accepted (`{"path", "body"}`), so what dgem sent
//! can be read off. Every read gets flat logprobs over the requested labels;
//! a request vLLM would refuse gets vLLM's 400.
//!
//! ```sh
//! cargo run -p dgem-fake-vllm --example fake_vllm > /tmp/fake.jsonl &
//! dgem serve --backend vllm=$(head -1 /tmp/fake.jsonl)
//! ```
#![allow(clippy::print_stdout)]

use std::io::Write as _;
use std::time::Duration;

use dgem_fake_vllm::{FakeConfig, FakeVllm};
use serde_json::json;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<()> {
    let fake = FakeVllm::start(FakeConfig::default()).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", fake.url())?;
    out.flush()?;
    let mut seen = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let reqs = fake.requests();
        for r in reqs.iter().skip(seen) {
            writeln!(out, "{}", json!({"path": r.path, "body": r.body}))?;
        }
        seen = reqs.len();
        out.flush()?;
    }
}
