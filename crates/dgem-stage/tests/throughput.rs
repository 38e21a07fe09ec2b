//! Staging throughput from the local fake server (run on demand:
//! `cargo test -p dgem-stage --release --test throughput -- --ignored --nocapture`).
#![allow(clippy::print_stderr)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::Fake;
use dgem_stage::{stage, Source, StageConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: stages 256 MiB"]
async fn stages_256_mib_over_loopback() {
    let model = common::safetensors(3, 256 << 20);
    let want = common::sha256(&model);
    let mut files = BTreeMap::new();
    files.insert("model.safetensors".to_string(), model);
    let fake = Arc::new(Fake {
        files,
        ..Fake::default()
    });
    let base = common::start(fake).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = StageConfig {
        parallel: 16,
        chunk_size: 16 << 20,
        read_timeout: Duration::from_secs(30),
        ..StageConfig::new(
            Source::parse(&format!("{base}/files/")).expect("src"),
            dir.path().into(),
        )
    };
    let s = stage(cfg).await.expect("staged");
    let got = std::fs::read(dir.path().join("model.safetensors")).expect("staged file");
    assert_eq!(common::sha256(&got), want);
    let mib = s.bytes_fetched as f64 / f64::from(1u32 << 20);
    eprintln!(
        "staged {mib:.0} MiB in {:.2} s = {:.0} MiB/s (incl. sha256 verify)",
        s.seconds,
        mib / s.seconds
    );
}
