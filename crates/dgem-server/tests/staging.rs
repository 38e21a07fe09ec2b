//! `/health` reports weight staging from `dgem stage`'s progress file when the
//! server is given a staging directory (serving.md §9.5, §10.2).

mod common;

use common::{backend, call, config, get, state};
use serde_json::json;

#[tokio::test]
async fn health_reports_staging_progress_then_the_server_phase() {
    let dir = std::env::temp_dir().join(format!("dgem-health-staging-{}", std::process::id()));
    std::fs::create_dir_all(dir.join(".dgem-stage")).expect("dir");
    let progress = dir.join(".dgem-stage/progress.json");
    let cfg = dgem_server::ServeConfig {
        staging_dir: Some(dir.clone()),
        ..config()
    };
    let app = dgem_server::router(state(backend(), cfg));

    std::fs::write(
        &progress,
        r#"{"phase":"bodies","headers_ready":true,"bytes_staged":2147483648,"bytes_total":18822798622,"stage_start_ts":5.0,"stage_end_ts":null,"error":null}"#,
    )
    .expect("write");
    let h = call(&app, get("/health")).await;
    assert_eq!(h.status, 200);
    assert_eq!(h.body["phase"], json!("staging_tmpfs"));
    assert_eq!(h.body["staging_phase"], json!("bodies"));
    assert_eq!(h.body["bytes_staged_gb"], json!(2.0));
    assert_eq!(h.body["bytes_total_gb"], json!(17.53));
    assert_eq!(h.body["stage_start_ts"], json!(5.0));

    std::fs::write(
        &progress,
        r#"{"phase":"done","headers_ready":true,"bytes_staged":18822798622,"bytes_total":18822798622,"stage_start_ts":5.0,"stage_end_ts":70.0,"error":null}"#,
    )
    .expect("write");
    let h = call(&app, get("/health")).await.body;
    assert_ne!(
        h["phase"],
        json!("staging_tmpfs"),
        "server phase once staged"
    );
    assert_eq!(h["staging_phase"], json!("done"));
    assert_eq!(h["bytes_staged_gb"], json!(17.53));
    assert_eq!(h["stage_end_ts"], json!(70.0));
    let _ = std::fs::remove_dir_all(&dir);
}
