//! Staging end to end against a local range-capable HTTP server (and a fake
//! Cloud Storage JSON API), with dropped connections, short bodies, wrong
//! bytes, an aborted run that resumes, and a local-directory source.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Fake, Seen};
use dgem_stage::{read_progress, stage, Phase, Source, StageConfig, StageError};

const M1: &str = "model-00001-of-00002.safetensors";
const M2: &str = "model-00002-of-00002.safetensors";
const CHUNK: u64 = 64 << 10;
const PROBE: u64 = 4096;

fn files() -> BTreeMap<String, Vec<u8>> {
    let mut f = BTreeMap::new();
    f.insert(
        "config.json".to_string(),
        br#"{"model_type":"gemma3"}"#.to_vec(),
    );
    f.insert("tokenizer.json".to_string(), common::bytes(7, 5000));
    f.insert(M1.to_string(), common::safetensors(1, 300_000));
    f.insert(M2.to_string(), common::safetensors(2, 100_000));
    f
}

async fn server() -> (Arc<Fake>, String) {
    let fake = Arc::new(Fake {
        files: files(),
        token: "tok-123".into(),
        ..Fake::default()
    });
    let base = common::start(fake.clone()).await;
    (fake, base)
}

fn config(source: Source, dest: &Path) -> StageConfig {
    StageConfig {
        parallel: 4,
        chunk_size: CHUNK,
        head_probe: PROBE,
        backoff: Duration::from_millis(5),
        read_timeout: Duration::from_secs(10),
        ..StageConfig::new(source, dest.to_path_buf())
    }
}

fn http(base: &str) -> Source {
    Source::parse(&format!("{base}/files/")).expect("source")
}

/// Body chunk offsets of a staged safetensors file.
fn chunk_offsets(size: u64) -> Vec<u64> {
    (PROBE..size).step_by(CHUNK as usize).collect()
}

fn assert_staged(dest: &Path) {
    for (path, want) in files() {
        let got = std::fs::read(dest.join(&path)).expect("staged file");
        assert_eq!(got.len(), want.len(), "{path} size");
        assert_eq!(common::sha256(&got), common::sha256(&want), "{path} bytes");
    }
    assert!(dest.join(".ready").is_file(), ".ready written");
    let leftovers: Vec<_> = std::fs::read_dir(dest)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".dgem-part"))
        .collect();
    assert!(leftovers.is_empty(), "no partial small files left");
}

fn requests_for(seen: &[Seen], file: &str) -> Vec<Option<u64>> {
    seen.iter()
        .filter(|(p, _)| p == file)
        .map(|(_, o)| *o)
        .collect()
}

#[tokio::test]
async fn http_manifest_stages_exact_bytes_headers_first() {
    let (fake, base) = server().await;
    let dir = tempfile::tempdir().expect("tmp");
    let summary = stage(config(http(&base), dir.path()))
        .await
        .expect("staged");
    assert_staged(dir.path());
    let total: u64 = files().values().map(|b| b.len() as u64).sum();
    assert_eq!(summary.files, 4);
    assert_eq!(summary.bytes_total, total);
    assert_eq!(summary.bytes_fetched, total);
    let p = read_progress(dir.path()).expect("progress");
    assert_eq!(p.phase, Phase::Done);
    assert!(p.headers_ready);
    assert_eq!((p.bytes_staged, p.bytes_total), (total, total));
    assert_eq!((p.files_done, p.files_total), (4, 4));
    assert!(p.stage_end_ts.is_some() && p.error.is_none());
    // Every header (offset 0) was requested before the first body chunk.
    let seen = fake.seen();
    let last_head = seen
        .iter()
        .rposition(|(_, o)| *o == Some(0))
        .expect("heads");
    let first_body = seen
        .iter()
        .position(|(_, o)| o.is_some_and(|o| o > 0))
        .expect("bodies");
    assert!(last_head < first_body, "headers first: {seen:?}");
    let m1 = files()[M1].len() as u64;
    let mut want = vec![Some(0)];
    want.extend(chunk_offsets(m1).into_iter().map(Some));
    let mut got = requests_for(&seen, M1);
    got.sort();
    assert_eq!(got, want, "one request per chunk, no repeats");
}

#[tokio::test]
async fn dropped_connections_mid_chunk_are_retried() {
    let (fake, base) = server().await;
    let offs = chunk_offsets(files()[M1].len() as u64);
    {
        let mut f = fake.faults.lock().expect("faults");
        f.drop_once.insert((M1.to_string(), offs[1]));
        f.drop_once.insert((M1.to_string(), offs[3]));
    }
    let dir = tempfile::tempdir().expect("tmp");
    stage(config(http(&base), dir.path()))
        .await
        .expect("staged despite drops");
    assert_staged(dir.path());
    let seen = requests_for(&fake.seen(), M1);
    assert_eq!(seen.iter().filter(|o| **o == Some(offs[1])).count(), 2);
    assert_eq!(seen.iter().filter(|o| **o == Some(offs[3])).count(), 2);
    assert_eq!(seen.iter().filter(|o| **o == Some(offs[2])).count(), 1);
}

#[tokio::test]
async fn short_bodies_fail_after_retries_without_ready() {
    let (fake, base) = server().await;
    fake.faults.lock().expect("faults").short_always = true;
    let dir = tempfile::tempdir().expect("tmp");
    let err = stage(config(http(&base), dir.path()))
        .await
        .expect_err("short bodies");
    assert!(matches!(err, StageError::ShortBody { .. }), "{err}");
    assert!(!dir.path().join(".ready").exists());
    let p = read_progress(dir.path()).expect("progress");
    assert_eq!(p.phase, Phase::Failed);
    assert_eq!(p.error.as_deref(), Some(err.to_string().as_str()));
    // 4 attempts for the chunk that failed first.
    let seen = fake.seen();
    let max_tries = seen
        .iter()
        .filter(|(_, o)| o.is_some_and(|o| o > 0))
        .fold(BTreeMap::<&Seen, usize>::new(), |mut m, s| {
            *m.entry(s).or_default() += 1;
            m
        })
        .into_values()
        .max();
    assert_eq!(max_tries, Some(4));
}

#[tokio::test]
async fn wrong_bytes_fail_the_checksum_and_never_mark_ready() {
    let (fake, base) = server().await;
    fake.faults.lock().expect("faults").corrupt = true;
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join(".ready"), "stale").expect("stale marker");
    let err = stage(config(http(&base), dir.path()))
        .await
        .expect_err("corrupt");
    let StageError::Checksum {
        file,
        expected,
        actual,
    } = &err
    else {
        panic!("expected a checksum error, got {err}");
    };
    assert!(file.ends_with(".safetensors"));
    assert_ne!(expected, actual);
    assert!(
        !dir.path().join(".ready").exists(),
        "stale .ready removed, none written"
    );
    // The bad file's journal is gone: a clean rerun fetches it again and succeeds.
    fake.faults.lock().expect("faults").corrupt = false;
    stage(config(http(&base), dir.path()))
        .await
        .expect("clean rerun");
    assert_staged(dir.path());
}

#[tokio::test]
async fn aborted_run_resumes_without_refetching_finished_chunks() {
    let (fake, base) = server().await;
    let m1 = files()[M1].clone();
    let offs = chunk_offsets(m1.len() as u64);
    let last = *offs.last().expect("chunks");
    fake.faults
        .lock()
        .expect("faults")
        .hang
        .insert((M1.to_string(), last));
    let dir = tempfile::tempdir().expect("tmp");
    let task = tokio::spawn(stage(config(http(&base), dir.path())));

    // Wait until every other chunk of M1 and all of M2 are journaled.
    let journal = |f: &str| {
        dir.path()
            .join(".dgem-stage/journal")
            .join(format!("{f}.json"))
    };
    let m2_chunks = chunk_offsets(files()[M2].len() as u64).len();
    let done = |f: &str| -> usize {
        std::fs::read(journal(f))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["done"].as_array().map(Vec::len))
            .unwrap_or(0)
    };
    let mut waited = 0;
    while done(M1) < offs.len() - 1 || done(M2) < m2_chunks {
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
        assert!(waited < 1000, "staging did not reach the hanging chunk");
    }
    // Headers are in place and files full-size while bodies are still missing.
    let on_disk = std::fs::read(dir.path().join(M1)).expect("m1");
    assert_eq!(on_disk.len(), m1.len());
    assert_eq!(on_disk[..PROBE as usize], m1[..PROBE as usize]);
    assert!(
        on_disk[last as usize..].iter().all(|b| *b == 0),
        "last chunk not yet written"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let p = read_progress(dir.path()).expect("progress");
    assert_eq!(p.phase, Phase::Bodies);
    assert!(p.headers_ready);
    assert!(p.bytes_staged < p.bytes_total);
    assert!(!dir.path().join(".ready").exists());

    task.abort();
    assert!(task.await.expect_err("aborted").is_cancelled());
    {
        fake.faults.lock().expect("faults").hang.clear();
    }
    fake.clear_log();
    let summary = stage(config(http(&base), dir.path()))
        .await
        .expect("resumed");
    assert_staged(dir.path());
    let seen: BTreeSet<Seen> = fake.seen().into_iter().collect();
    let want: BTreeSet<Seen> = [
        ("dgem-manifest.json".to_string(), None),
        (M1.to_string(), Some(last)),
    ]
    .into_iter()
    .collect();
    assert_eq!(seen, want, "only the unfinished chunk is fetched again");
    assert_eq!(summary.bytes_fetched, m1.len() as u64 - last);
}

#[tokio::test]
async fn gcs_listing_and_media_with_bearer_token() {
    let (fake, base) = server().await;
    let dir = tempfile::tempdir().expect("tmp");
    let src = Source::parse("gs://wts/dgemma").expect("gs");
    let mut cfg = config(src.clone(), dir.path());
    cfg.gcs_api = base.clone();
    cfg.token = Some("tok-123".into());
    assert!(!format!("{cfg:?}").contains("tok-123"), "token redacted");
    stage(cfg.clone()).await.expect("staged from fake GCS");
    assert_staged(dir.path());
    let lists = fake.seen().iter().filter(|(p, _)| p == "list:wts").count();
    assert_eq!(lists, 2, "both listing pages read");

    let dir2 = tempfile::tempdir().expect("tmp");
    cfg.dest = dir2.path().to_path_buf();
    cfg.token = None;
    let err = stage(cfg).await.expect_err("no token");
    match &err {
        StageError::Http {
            status, retryable, ..
        } => {
            assert_eq!(*status, Some(401));
            assert!(!retryable);
        }
        other => panic!("expected HTTP 401, got {other}"),
    }
    assert!(!dir2.path().join(".ready").exists());
}

#[tokio::test]
async fn long_header_is_read_in_a_second_request() {
    let (fake, base) = server().await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(
        Source::parse(&format!("{base}/files/nosha/")).expect("src"),
        dir.path(),
    );
    cfg.head_probe = 16;
    stage(cfg).await.expect("staged");
    assert_staged(dir.path());
    let m2 = format!("nosha/{M2}");
    let seen = requests_for(&fake.seen(), &m2);
    // The `HEAD` (logged without a range) that reads the ETag fingerprint, then the probe.
    assert_eq!(seen[..3], [None, Some(0), Some(16)]);
}

#[tokio::test]
async fn local_directory_source() {
    let src = tempfile::tempdir().expect("src");
    for (p, b) in files() {
        std::fs::write(src.path().join(p), b).expect("write");
    }
    std::fs::create_dir_all(src.path().join("sub")).expect("sub");
    std::fs::write(src.path().join("sub/extra.bin"), common::bytes(9, 1000)).expect("sub file");
    std::fs::write(src.path().join(".hidden"), b"skip").expect("hidden");
    let dir = tempfile::tempdir().expect("tmp");
    let source = Source::parse(&src.path().display().to_string()).expect("local");
    let summary = stage(config(source, dir.path())).await.expect("staged");
    assert_staged(dir.path());
    assert_eq!(summary.files, 5);
    assert_eq!(
        std::fs::read(dir.path().join("sub/extra.bin")).expect("sub"),
        common::bytes(9, 1000)
    );
    assert!(!dir.path().join(".hidden").exists());
}

#[tokio::test]
async fn not_a_safetensors_file_is_rejected() {
    let src = tempfile::tempdir().expect("src");
    let mut bad = u64::MAX.to_le_bytes().to_vec();
    bad.extend_from_slice(&[0u8; 100]);
    std::fs::write(src.path().join("bad.safetensors"), bad).expect("write");
    let dir = tempfile::tempdir().expect("tmp");
    let source = Source::parse(&src.path().display().to_string()).expect("local");
    let err = stage(config(source, dir.path()))
        .await
        .expect_err("bad header");
    assert_eq!(
        err.to_string(),
        "`bad.safetensors` is not a safetensors file: header length 18446744073709551615 must be at most 104857600 and fit in the file (108 bytes)"
    );
    assert!(!dir.path().join(".ready").exists());
}

#[tokio::test]
async fn bad_settings_name_the_field() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(Source::parse("gs://b/p").expect("gs"), dir.path());
    cfg.parallel = 0;
    let err = stage(cfg).await.expect_err("parallel 0");
    assert_eq!(
        err.to_string(),
        "`parallel` must be between 1 and 1024. Given: `0`"
    );
}

#[tokio::test]
async fn resume_refetches_a_source_file_rewritten_with_the_same_size() {
    let src = tempfile::tempdir().expect("src");
    for (p, b) in files() {
        std::fs::write(src.path().join(p), b).expect("write");
    }
    let dir = tempfile::tempdir().expect("tmp");
    let source = Source::parse(&src.path().display().to_string()).expect("local");
    stage(config(source.clone(), dir.path()))
        .await
        .expect("first run");
    // Same sizes, new bytes; make sure the mtime moves even on coarse clocks.
    std::thread::sleep(Duration::from_millis(20));
    let new_config = br#"{"model_type":"gemma4"}"#.to_vec();
    let new_m2 = common::safetensors(3, 100_000);
    assert_eq!(new_m2.len(), files()[M2].len());
    std::fs::write(src.path().join("config.json"), &new_config).expect("rewrite");
    std::fs::write(src.path().join(M2), &new_m2).expect("rewrite");
    let summary = stage(config(source, dir.path())).await.expect("second run");
    assert_eq!(
        summary.bytes_fetched,
        (new_config.len() + new_m2.len()) as u64
    );
    assert_eq!(
        std::fs::read(dir.path().join("config.json")).expect("config"),
        new_config
    );
    assert_eq!(std::fs::read(dir.path().join(M2)).expect("m2"), new_m2);
    assert_eq!(std::fs::read(dir.path().join(M1)).expect("m1"), files()[M1]);
    assert!(dir.path().join(".ready").is_file());
}

#[tokio::test]
async fn dest_equal_to_inside_or_containing_a_local_source_is_refused() {
    let root = tempfile::tempdir().expect("root");
    let src = root.path().join("src");
    std::fs::create_dir_all(&src).expect("src");
    std::fs::write(src.join("config.json"), b"{}").expect("write");
    let source = Source::parse(&src.display().to_string()).expect("local");
    for dest in [src.clone(), src.join("staged"), root.path().to_path_buf()] {
        let err = stage(config(source.clone(), &dest))
            .await
            .expect_err("overlap");
        assert_eq!(
            err.to_string(),
            format!(
                "`DEST` must be a directory that is not the local SRC directory, not inside it and not containing it. Given: `{} (SRC is {})`",
                dest.display(),
                src.display()
            )
        );
        assert!(!dest.join(".ready").exists());
        assert!(!dest.join(".dgem-stage").exists());
    }
    assert!(!src.join("staged").exists());
}

#[tokio::test]
async fn resume_refetches_an_http_file_whose_etag_changed() {
    let (fake, base) = server().await;
    let dir = tempfile::tempdir().expect("tmp");
    let src = Source::parse(&format!("{base}/files/nosha/")).expect("src");
    stage(config(src.clone(), dir.path()))
        .await
        .expect("first run");
    // Pretend the staged config.json came from an older version of the file.
    let jpath = dir.path().join(".dgem-stage/journal/config.json.json");
    let mut j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&jpath).expect("journal")).expect("json");
    let want = format!(
        "http-etag:\"{}\"",
        &common::sha256(&files()["config.json"])[..16]
    );
    assert_eq!(j["fingerprint"], serde_json::Value::String(want));
    j["fingerprint"] = serde_json::json!("http-etag:\"old\"");
    std::fs::write(&jpath, serde_json::to_vec(&j).expect("json")).expect("write");
    std::fs::write(
        dir.path().join("config.json"),
        br#"{"model_type":"gemmaX"}"#,
    )
    .expect("stale bytes, same size");
    fake.clear_log();
    let summary = stage(config(src, dir.path())).await.expect("second run");
    assert_eq!(summary.bytes_fetched, files()["config.json"].len() as u64);
    assert_staged(dir.path());
    let gets = requests_for(&fake.seen(), "nosha/config.json");
    assert_eq!(gets, [None, Some(0)], "HEAD, then the whole file again");
}

/// Issue 12, defect 10: bytes corrupted at the destination after a finished
/// run went undetected on resume (only the size was checked). A finished file
/// whose sha256 is known is hashed again, and fetched again when it differs.
#[tokio::test]
async fn resume_refetches_a_finished_file_corrupted_at_the_destination() {
    let (fake, base) = server().await;
    let dir = tempfile::tempdir().expect("tmp");
    stage(config(http(&base), dir.path()))
        .await
        .expect("first run");
    let m1 = dir.path().join(M1);
    let mut bytes = std::fs::read(&m1).expect("m1");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&m1, &bytes).expect("corrupt");
    fake.clear_log();
    let summary = stage(config(http(&base), dir.path()))
        .await
        .expect("second run");
    assert_staged(dir.path());
    assert_eq!(summary.bytes_fetched, files()[M1].len() as u64);
    assert!(fake
        .seen()
        .iter()
        .all(|(p, _)| p == M1 || p == "dgem-manifest.json"));
}
