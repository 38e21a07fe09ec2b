//! OpenTelemetry traces (issue 16, item 12): with `OTEL_EXPORTER_OTLP_ENDPOINT`
//! set, `dgem decide` and `dgem serve` export their spans over OTLP/HTTP
//! (protobuf) to a local receiver, which decodes them with the OTLP protobuf
//! types and checks names, nesting and the service name. Without the
//! variable nothing is sent. Needs the real model (`DGEM_TEST_MODEL`; under
//! CI a missing model fails).
#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;
#[path = "common/server.rs"]
mod server;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

use common::{model, root};

#[derive(Default, Clone)]
struct Received {
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
    content_types: Arc<Mutex<Vec<String>>>,
}

async fn receiver() -> (String, Received, tokio::task::JoinHandle<()>) {
    let got = Received::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: HeaderMap, body: Bytes| {
            let g = g.clone();
            async move {
                let ct = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                g.content_types.lock().unwrap().push(ct);
                let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                for rs in req.resource_spans {
                    if let Some(r) = &rs.resource {
                        for kv in &r.attributes {
                            if kv.key == "service.name" {
                                let v = format!("{:?}", kv.value);
                                g.services.lock().unwrap().push(v);
                            }
                        }
                    }
                    for ss in rs.scope_spans {
                        g.spans.lock().unwrap().extend(ss.spans);
                    }
                }
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), got, task)
}

fn names(got: &Received) -> Vec<String> {
    got.spans
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.name.clone())
        .collect()
}

fn find(got: &Received, name: &str) -> Option<Span> {
    got.spans
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.name == name)
        .cloned()
}

/// Whether `child` sits under `ancestor` (same trace, parent chain).
fn under(got: &Received, child: &Span, ancestor: &Span) -> bool {
    let spans = got.spans.lock().unwrap().clone();
    let mut cur = child.clone();
    for _ in 0..16 {
        if cur.trace_id != ancestor.trace_id {
            return false;
        }
        if cur.parent_span_id == ancestor.span_id {
            return true;
        }
        match spans.iter().find(|s| s.span_id == cur.parent_span_id) {
            Some(p) => cur = p.clone(),
            None => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_is_exported_as_nested_spans() {
    let Some(m) = model() else { return };
    let (endpoint, got, _task) = receiver().await;
    let dir = std::path::Path::new(&m).parent().unwrap().to_path_buf();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(root())
        .args([
            "decide",
            "-t",
            "support_triage",
            "-v",
            "ticket=I was charged twice",
            "--json",
        ])
        .env("DGEM_MODEL_PATH", common::SMALL_MODEL)
        .env("DGEM_MODEL_DIR", &dir)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_SERVICE_NAME", "dgem-test")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The process flushed before it exited.
    let n = names(&got);
    for want in [
        "dgem.template.render",
        "dgem.orchestrate",
        "dgem.forward_pass",
    ] {
        assert!(n.iter().any(|x| x == want), "no `{want}` in {n:?}");
    }
    let orch = find(&got, "dgem.orchestrate").unwrap();
    let fwd = find(&got, "dgem.forward_pass").unwrap();
    assert!(
        under(&got, &fwd, &orch),
        "forward pass is not inside the decision"
    );
    assert!(fwd.end_time_unix_nano > fwd.start_time_unix_nano);
    assert!(got
        .services
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.contains("dgem-test")));
    assert!(got
        .content_types
        .lock()
        .unwrap()
        .iter()
        .all(|c| c == "application/x-protobuf"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_request_is_the_root_of_its_decision() {
    let Some(m) = model() else { return };
    let (endpoint, got, _task) = receiver().await;
    let served = server::serve_with_env(
        &m,
        &["--no-warmup"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            // Send batches every 200 ms instead of 5 s.
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
        Duration::from_secs(120),
    )
    .await;
    let body = serde_json::json!({"messages": [
        {"role": "system", "content": "{\"questions\": [{\"id\": \"urgent\", \"type\": \"boolean\"}]}"},
        {"role": "user", "content": "{\"ticket\": \"the site is down\"}"}
    ]});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", served.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let started = Instant::now();
    while find(&got, "dgem.forward_pass").is_none()
        || find(&got, "POST /v1/chat/completions").is_none()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "spans did not arrive: {:?}",
            names(&got)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let req = find(&got, "POST /v1/chat/completions").unwrap();
    let fwd = find(&got, "dgem.forward_pass").unwrap();
    assert!(under(&got, &fwd, &req), "{:?}", names(&got));
    // Kind server (2 in OTLP's enum).
    assert_eq!(req.kind, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_sent() {
    let Some(m) = model() else { return };
    let (endpoint, got, _task) = receiver().await;
    let dir = std::path::Path::new(&m).parent().unwrap().to_path_buf();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_dgem"))
        .current_dir(root())
        .args(["decide", "-t", "support_triage", "-v", "ticket=x"])
        .env("DGEM_MODEL_PATH", common::SMALL_MODEL)
        .env("DGEM_MODEL_DIR", &dir)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        // The receiver's address is known, but nothing points dgem at it.
        .env("DGEM_OTEL_UNUSED", &endpoint)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(names(&got).is_empty());
}
