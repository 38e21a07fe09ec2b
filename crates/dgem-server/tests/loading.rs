//! `/health` during a first start's download (issue 27 item 4): the loader's
//! phase (`pulling_model`) and what it is doing (`detail`) are shown until
//! the model is in place, and `detail` goes once the download is over.
#![allow(clippy::unwrap_used)]

mod common;

use common::{call, config, get};
use dgem_server::loading::{LoadingDecider, LOADING_MODEL, PULLING_MODEL};
use serde_json::json;

#[tokio::test]
async fn health_shows_a_pull_as_pulling_model_with_its_detail() {
    let loading = LoadingDecider::new("gemma-3-270m-q4_k_m");
    let wait = "waiting 253 s: the package index asked to retry later";
    loading.report(PULLING_MODEL, Some(wait.into()));
    let st = dgem_server::AppState::new(loading.clone(), config());
    let app = dgem_server::router(st);
    let h = call(&app, get("/health")).await;
    assert_eq!(h.status, 200);
    assert_eq!(
        (
            h.body["phase"].clone(),
            h.body["detail"].clone(),
            h.body["ready"].clone()
        ),
        (json!("pulling_model"), json!(wait), json!(false))
    );

    // The download is over: the GGUF loads, and there is nothing to detail
    // (the phase may come from a cached probe; the detail is read fresh).
    loading.report(LOADING_MODEL, None);
    let h = call(&app, get("/health")).await;
    assert!(h.body.get("detail").is_none(), "{}", h.body);
    assert_eq!(h.body["ready"], json!(false));
}
