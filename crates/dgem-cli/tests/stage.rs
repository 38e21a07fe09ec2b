//! `dgem stage` end to end on a local directory: exact bytes, `.ready`, the
//! progress file and the JSON summary; a bad source is a user error (exit 1).
//! The HTTP, Cloud Storage, fault and resume paths are tested in `dgem-stage`.

mod common;

/// A valid safetensors file: 8-byte LE header length, JSON header, `body` bytes.
fn safetensors(body: usize) -> Vec<u8> {
    let mut header =
        format!(r#"{{"w":{{"dtype":"U8","shape":[{body}],"data_offsets":[0,{body}]}}}}"#)
            .into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend((0..body).map(|i| (i * 31 % 251) as u8));
    out
}

#[test]
fn stages_a_local_directory_and_prints_a_summary() {
    let src = tempfile::tempdir().expect("src");
    let dest = tempfile::tempdir().expect("dest");
    let model = safetensors(3 << 20);
    let config = br#"{"model_type":"gemma3"}"#.to_vec();
    std::fs::write(src.path().join("model.safetensors"), &model).expect("write");
    std::fs::write(src.path().join("config.json"), &config).expect("write");
    let (s, d) = (
        src.path().display().to_string(),
        dest.path().display().to_string(),
    );
    let out = common::dgem(
        &["stage", &s, &d, "--parallel", "4", "--chunk-mib", "1"],
        None,
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary JSON");
    assert_eq!(summary["files"], 2);
    assert_eq!(summary["bytes_total"], (model.len() + config.len()) as u64);
    assert_eq!(
        std::fs::read(dest.path().join("model.safetensors")).expect("model"),
        model
    );
    assert_eq!(
        std::fs::read(dest.path().join("config.json")).expect("config"),
        config
    );
    assert!(dest.path().join(".ready").is_file());
    let progress: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dest.path().join(".dgem-stage/progress.json")).expect("progress"),
    )
    .expect("progress JSON");
    assert_eq!(progress["phase"], "done");
    assert_eq!(progress["bytes_staged"], summary["bytes_total"]);
}

#[test]
fn a_bad_source_is_a_user_error() {
    let dest = tempfile::tempdir().expect("dest");
    let d = dest.path().display().to_string();
    let out = common::dgem(&["stage", "ftp://example.invalid/w", &d], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::stderr(&out).contains(
            "`source` must be gs://BUCKET[/PREFIX], an http(s):// URL or an existing local directory. Given: `ftp://example.invalid/w`"
        ),
        "{}",
        common::stderr(&out)
    );
    assert!(!dest.path().join(".ready").exists());
}

#[test]
fn zero_chunk_parallel_or_attempts_names_the_flag_and_range() {
    let src = tempfile::tempdir().expect("src");
    let dest = tempfile::tempdir().expect("dest");
    let (s, d) = (
        src.path().display().to_string(),
        dest.path().display().to_string(),
    );
    for (flag, want) in [
        (
            "--chunk-mib",
            "`--chunk-mib` must be between 1 and 4096 (MiB). Given: `0`",
        ),
        (
            "--parallel",
            "`--parallel` must be between 1 and 1024. Given: `0`",
        ),
        (
            "--attempts",
            "`--attempts` must be between 1 and 100. Given: `0`",
        ),
    ] {
        let out = common::dgem(&["stage", &s, &d, flag, "0"], None);
        assert_eq!(out.status.code(), Some(1), "{flag}");
        assert!(
            common::stderr(&out).contains(want),
            "{}",
            common::stderr(&out)
        );
        assert!(!dest.path().join(".ready").exists());
    }
}

#[test]
fn staging_a_directory_into_itself_is_refused() {
    let src = tempfile::tempdir().expect("src");
    std::fs::write(src.path().join("config.json"), b"{}").expect("write");
    let s = src.path().display().to_string();
    let out = common::dgem(&["stage", &s, &s], None);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out)
            .contains("`DEST` must be a directory that is not the local SRC directory"),
        "{}",
        common::stderr(&out)
    );
    assert!(!src.path().join(".ready").exists());
    assert!(!src.path().join(".dgem-stage").exists());
}

#[test]
fn an_http_error_is_printed_once() {
    let dest = tempfile::tempdir().expect("dest");
    let d = dest.path().display().to_string();
    // Nothing listens on port 9 of localhost: a connection error, reported once.
    let out = common::dgem(
        &["stage", "http://127.0.0.1:9/w/", &d, "--attempts", "1"],
        None,
    );
    assert_ne!(out.status.code(), Some(0));
    let err = common::stderr(&out);
    assert_eq!(
        err.matches("request to http://127.0.0.1:9/w/dgem-manifest.json failed")
            .count(),
        1,
        "{err}"
    );
}
