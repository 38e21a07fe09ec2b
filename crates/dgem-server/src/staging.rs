//! Weight-staging progress on `/health` (serving.md §9.5 `bytes_staged_gb`,
//! §10.2 step 5). `dgem stage` (crate `dgem-stage`, another process in the
//! serving container) writes `DIR/.dgem-stage/progress.json` atomically; this
//! module reads it on each `/health` and merges it in. The file's format is
//! documented in `dgem_stage::progress`; only the keys used here are read, so
//! this crate does not depend on the staging crate.

use std::path::Path;

use serde_json::{json, Map, Value};

/// Progress file, relative to the staging directory (`dgem_stage::PROGRESS_FILE`).
pub const PROGRESS_FILE: &str = ".dgem-stage/progress.json";

/// Bytes per GiB, the unit of `bytes_staged_gb`.
const GIB: f64 = (1u64 << 30) as f64;

/// Merge staging progress from `dir` into a `/health` body:
/// `bytes_staged_gb` / `bytes_total_gb` (GiB, 2 decimals), `staging_phase`
/// (`not_started`, `listing`, `headers`, `bodies`, `verifying`, `done`,
/// `failed`), the timestamps, `staging_error`; and, while staging is under way,
/// `phase: "staging_tmpfs"` (or `staging_failed`) in place of the server phase.
pub fn merge(dir: &Path, body: &mut Map<String, Value>) {
    // A tiny file on tmpfs: reading it inline costs microseconds.
    let parsed = std::fs::read(dir.join(PROGRESS_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<Map<String, Value>>(&b).ok());
    let Some(p) = parsed else {
        body.insert("staging_phase".into(), json!("not_started"));
        return;
    };
    let gb = |k: &str| {
        let bytes = p.get(k).and_then(Value::as_u64).unwrap_or(0) as f64;
        (bytes / GIB * 100.0).round() / 100.0
    };
    body.insert("bytes_staged_gb".into(), json!(gb("bytes_staged")));
    body.insert("bytes_total_gb".into(), json!(gb("bytes_total")));
    let phase = p.get("phase").and_then(Value::as_str).unwrap_or("unknown");
    body.insert("staging_phase".into(), json!(phase));
    for key in ["stage_start_ts", "stage_end_ts"] {
        if let Some(v) = p.get(key).filter(|v| !v.is_null()) {
            body.insert(key.into(), v.clone());
        }
    }
    if let Some(e) = p.get("error").filter(|v| !v.is_null()) {
        body.insert("staging_error".into(), e.clone());
    }
    match phase {
        "done" => {}
        "failed" => {
            body.insert("phase".into(), json!("staging_failed"));
        }
        _ => {
            body.insert("phase".into(), json!("staging_tmpfs"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(progress: Option<&str>) -> Map<String, Value> {
        let dir = std::env::temp_dir().join(format!(
            "dgem-staging-{}-{}",
            std::process::id(),
            progress.map_or(0, str::len)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        if let Some(p) = progress {
            std::fs::create_dir_all(dir.join(".dgem-stage")).expect("dir");
            std::fs::write(dir.join(PROGRESS_FILE), p).expect("write");
        }
        let mut m = Map::new();
        m.insert("phase".into(), json!("ready"));
        m.insert("bytes_staged_gb".into(), json!(0.0));
        merge(&dir, &mut m);
        let _ = std::fs::remove_dir_all(&dir);
        m
    }

    #[test]
    fn reports_live_progress_then_keeps_the_server_phase() {
        let m = merged(Some(
            r#"{"phase":"bodies","bytes_staged":5368709120,"bytes_total":18822798622,"stage_start_ts":10.5,"stage_end_ts":null,"error":null}"#,
        ));
        assert_eq!(m["phase"], json!("staging_tmpfs"));
        assert_eq!(m["staging_phase"], json!("bodies"));
        assert_eq!(m["bytes_staged_gb"], json!(5.0));
        assert_eq!(m["bytes_total_gb"], json!(17.53));
        assert_eq!(m["stage_start_ts"], json!(10.5));
        assert!(!m.contains_key("stage_end_ts"));
        let m = merged(Some(
            r#"{"phase":"done","bytes_staged":18822798622,"bytes_total":18822798622,"stage_end_ts":99.0}"#,
        ));
        assert_eq!(m["phase"], json!("ready"));
        assert_eq!(m["bytes_staged_gb"], json!(17.53));
        assert_eq!(m["stage_end_ts"], json!(99.0));
        let m = merged(Some(
            r#"{"phase":"failed","bytes_staged":0,"bytes_total":1,"error":"HTTP 403"}"#,
        ));
        assert_eq!(m["phase"], json!("staging_failed"));
        assert_eq!(m["staging_error"], json!("HTTP 403"));
        let m = merged(None);
        assert_eq!(m["staging_phase"], json!("not_started"));
        assert_eq!(m["phase"], json!("ready"));
    }
}
