//! Issue 38 item 3, fault run: one of two replicas dies (its whole runtime
//! stops at once, as under `kill -9`: every socket closes, requests in flight
//! on it are cut) while 32 clients decide through the gateway. No request may
//! be lost: each one that was on the dead replica fails over to the live one.
//! The replicas are real `dgem serve` routers on loopback TCP over the
//! testkit's scripted backend (40 ms per model call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::DecideRequest;
use dgem_gateway::replica::decide_error;
use dgem_gateway::{
    BackendSpec, Gateway, GatewayConfig, Kind, RemoteConfig, RemoteDgem, Replica, RouteConfig,
};
use dgem_testkit::{scripts, ScriptedBackend};
use futures_util::FutureExt as _;
use serde_json::json;

/// A `dgem serve` app on its own runtime and thread; returns its base URL and
/// the runtime (drop it, `shutdown_background`, to kill the replica).
fn replica() -> (String, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let backend = ScriptedBackend::new(scripts::want_marker(0.8));
        backend.set_delay(Duration::from_millis(40));
        let state = dgem_server::AppState::new(
            Arc::new(dgem_testkit::engine(backend)),
            dgem_server::ServeConfig {
                warmup: false,
                max_inflight: 64,
                ..dgem_server::ServeConfig::default()
            },
        );
        let listener = dgem_server::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        tx.send(listener.local_addr().unwrap()).unwrap();
        let _ = dgem_server::serve(listener, state, std::future::pending()).await;
    });
    let addr = rx.recv().unwrap();
    (format!("http://{addr}"), rt)
}

fn request(i: usize) -> DecideRequest {
    DecideRequest {
        schema: ValidSchema::from_value(
            &json!({"questions": [{"id": "u", "type": "boolean"}]}),
            &SchemaDefaults::default(),
        )
        .unwrap(),
        state: json!(format!("want_yes ticket {i}")),
        seed: 42,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_two_replicas_under_32_clients_loses_no_request() {
    let (a, rt_a) = replica();
    let (b, rt_b) = replica();
    let remote =
        |base: &str| Replica::remote(RemoteDgem::new(RemoteConfig::new(base)).expect("client"));
    let gateway = Arc::new(
        Gateway::new(GatewayConfig {
            backends: vec![BackendSpec {
                name: "local".into(),
                kind: Kind::Local,
                replicas: vec![remote(&a), remote(&b)],
            }],
            default: None,
            allowed: None,
            route: RouteConfig::default(),
        })
        .unwrap(),
    );
    let done = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..32)
        .map(|c| {
            let (gateway, done) = (gateway.clone(), done.clone());
            tokio::spawn(async move {
                let mut failures = Vec::new();
                for k in 0..12 {
                    let req = request(c * 100 + k);
                    let routed = gateway
                        .route(None, |replica| {
                            let req = req.clone();
                            async move { replica.decider.decide(req).await.map_err(decide_error) }
                                .boxed()
                        })
                        .await;
                    match routed {
                        Ok(r) => assert_eq!(
                            r.value.answers["u"]
                                .as_ref()
                                .map(|a| a.answer_name().to_string()),
                            Some("yes".to_string())
                        ),
                        Err(e) => failures.push(e.to_string()),
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
                failures
            })
        })
        .collect();
    // Kill replica A once a quarter of the requests are done, with requests
    // in flight on it.
    while done.load(Ordering::SeqCst) < 32 * 12 / 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rt_a.shutdown_background();
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.unwrap());
    }
    // A runtime may not be dropped inside another: stop it this way.
    rt_b.shutdown_background();
    assert_eq!(done.load(Ordering::SeqCst), 32 * 12);
    assert!(
        failures.is_empty(),
        "{} of {} requests lost: {:?}",
        failures.len(),
        32 * 12,
        failures.first()
    );
}
