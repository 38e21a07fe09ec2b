//! [`RemoteDgem`] over real TCP on port 0: a tolerant decision reply, a
//! connection dropped mid-reply (retryable, so it fails over), a 4xx kept as
//! is, health phases, and upstream replies that are not valid decisions for
//! the request (each a `BadReply` that fails over).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::routing::{get, post};
use axum::{Json, Router};
use dgem_backend::{BackendError, Health};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideError, DecideRequest, Decider};
use dgem_gateway::routing::fails_over;
use dgem_gateway::{RemoteConfig, RemoteDgem};
use futures_util::FutureExt as _;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn target(base: &str) -> RemoteDgem {
    RemoteDgem::new(RemoteConfig::new(&format!("{base}/v1"))).unwrap()
}

fn call() -> DecideRequest {
    DecideRequest {
        schema: ValidSchema::from_value(
            &json!({"questions": [{"id": "u", "type": "boolean"}]}),
            &SchemaDefaults::default(),
        )
        .unwrap(),
        state: json!("x"),
        seed: 42,
    }
}

/// The backend error inside a decider failure.
fn backend(e: DecideError) -> BackendError {
    match e {
        DecideError::Backend(b) => b,
        other => panic!("not a backend error: {other}"),
    }
}

#[tokio::test]
async fn decides_through_the_chat_route() {
    async fn chat(Json(b): Json<Value>) -> Json<Value> {
        assert_eq!(b["messages"][0]["role"], "system");
        // A plain string state goes wrapped, as the original gateway sends it.
        assert_eq!(b["messages"][1]["content"], "{\"state\": \"x\"}");
        let content = json!({"answers": {"u": {"type": "noul", "label": "yes", "probabilities": {"yes": 0.9, "no": 0.1}}}, "diagnostics": {"timing": {"total_ms": 3.0}}});
        Json(
            json!({"choices": [{"message": {"role": "assistant", "content": content.to_string()}}]}),
        )
    }
    async fn health() -> Json<Value> {
        Json(
            json!({"status": "ok", "phase": "loading_model", "ready": false, "bytes_staged_gb": 1.5}),
        )
    }
    let base = serve(
        Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/health", get(health)),
    )
    .await;
    let t = target(&base);
    let d = t.decide(call()).await.unwrap();
    let env = d.envelope();
    assert_eq!(env["answers"]["u"]["label"], "yes");
    assert!(
        (env["answers"]["u"]["probabilities"]["yes"]
            .as_f64()
            .unwrap()
            - 0.9)
            .abs()
            < 1e-9
    );
    assert!(
        (env["answers"]["u"]["entropy"].as_f64().unwrap() - 0.325_082_973_391_448_2).abs() < 1e-9
    );
    let h = t.health().await;
    assert_eq!(
        h,
        Health::Starting {
            phase: "loading_model".into(),
            bytes_staged_gb: Some(1.5)
        }
    );
    assert!(h.is_warming());
}

#[tokio::test]
async fn connection_dropped_mid_reply_is_retryable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let _ = sock.read(&mut buf).await.unwrap();
        // Promise 1000 bytes, send 10, then drop the connection.
        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"choices\"").await.unwrap();
        drop(sock);
    });
    let err = backend(
        target(&format!("http://{addr}"))
            .decide(call())
            .await
            .unwrap_err(),
    );
    // The headers came, so the replica is up: a cut body is a reply that
    // does not answer (it fails over at once, without a health probe).
    assert!(
        matches!(&err, BackendError::BadReply(m) if m.contains("cut after 10 byte(s)")),
        "{err}"
    );
    assert!(fails_over(&err));
}

#[tokio::test]
async fn refused_and_client_errors() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = target(&format!("http://127.0.0.1:{port}"));
    let err = backend(t.decide(call()).await.unwrap_err());
    assert!(
        matches!(err, BackendError::Connection(_)) && fails_over(&err),
        "{err}"
    );
    assert_eq!(t.health().await.phase(), "unreachable");
    async fn reject() -> (axum::http::StatusCode, Json<Value>) {
        (
            axum::http::StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "questions[0].type must be one of …"}})),
        )
    }
    async fn cold() -> axum::http::StatusCode {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    }
    let base = serve(
        Router::new()
            .route("/v1/chat/completions", post(reject))
            .route("/health", get(cold)),
    )
    .await;
    let t: Arc<dyn Decider> = Arc::new(target(&base));
    let err = backend(t.decide(call()).await.unwrap_err());
    assert_eq!(
        err,
        BackendError::Upstream {
            status: 400,
            body: "{\"error\":{\"message\":\"questions[0].type must be one of …\"}}".into()
        }
    );
    assert!(!fails_over(&err));
    assert_eq!(t.health().await.phase(), "scaled_to_zero");
}

/// A server that answers every chat request 200 with `reply` as the body.
async fn answering(reply: &'static str) -> String {
    serve(Router::new().route(
        "/v1/chat/completions",
        post(move || async move { ([("content-type", "application/json")], reply) }),
    ))
    .await
}

fn wrapped(content: &Value) -> &'static str {
    let body =
        json!({"choices": [{"message": {"role": "assistant", "content": content.to_string()}}]});
    Box::leak(body.to_string().into_boxed_str())
}

/// Issue 12, defect 5: upstream replies that are not valid decisions for the
/// request were accepted as success (answers for other ids, negative
/// probabilities, sums of 0.5 renormalized, a non-JSON body).
#[tokio::test]
async fn gateway_refuses_bad_upstream_replies_as_bad_reply() {
    let cases: Vec<(&str, &'static str, &str)> = vec![
        ("not JSON", "<html>oops</html>", "not JSON"),
        (
            "answers for other ids",
            wrapped(
                &json!({"answers": {"other": {"label": "yes", "probabilities": {"yes": 0.9, "no": 0.1}}}}),
            ),
            "answers.u",
        ),
        (
            "negative probability",
            wrapped(
                &json!({"answers": {"u": {"label": "yes", "probabilities": {"yes": 1.2, "no": -0.2}}}}),
            ),
            "answers.u.probabilities",
        ),
        (
            "sum of 0.5",
            wrapped(
                &json!({"answers": {"u": {"label": "yes", "probabilities": {"yes": 0.25, "no": 0.25}}}}),
            ),
            "answers.u.probabilities",
        ),
        (
            "labels that are not the question's",
            wrapped(
                &json!({"answers": {"u": {"label": "maybe", "probabilities": {"maybe": 1.0}}}}),
            ),
            "answers.u.probabilities",
        ),
        (
            "success false",
            r#"{"success": false, "error": "model crashed"}"#,
            "model crashed",
        ),
    ];
    for (what, reply, names) in cases {
        let base = answering(reply).await;
        let err = backend(target(&base).decide(call()).await.unwrap_err());
        assert!(matches!(err, BackendError::BadReply(_)), "{what}: {err:?}");
        assert!(fails_over(&err), "{what}");
        assert!(err.to_string().contains(names), "{what}: {err}");
    }
}

/// Yes/no answers keyed `true`/`false` are read as yes/no, not as `0.000`.
#[tokio::test]
async fn true_false_keys_are_read_as_yes_no() {
    let base = answering(wrapped(
        &json!({"answers": {"u": {"label": "true", "probabilities": {"true": 0.7, "false": 0.3}}}}),
    ))
    .await;
    let d = target(&base).decide(call()).await.unwrap();
    let env = d.envelope();
    assert_eq!(env["answers"]["u"]["label"], "yes");
    assert!(
        (env["answers"]["u"]["probabilities"]["yes"]
            .as_f64()
            .unwrap()
            - 0.7)
            .abs()
            < 1e-9
    );
}

/// One decision through `g` in `mode`.
async fn route(
    g: &dgem_gateway::Gateway,
    mode: &str,
) -> Result<dgem_gateway::Routed<dgem_engine::Decision>, dgem_gateway::GatewayError> {
    let req = call();
    g.route(Some(mode), move |r| {
        let req = req.clone();
        async move { r.decider.decide(req).await.map_err(backend) }.boxed()
    })
    .await
}

/// A primary answering 200 with a non-JSON body gave the caller 400 on every
/// request and never reached the healthy secondary; now it fails over.
#[tokio::test]
async fn primary_with_a_malformed_reply_fails_over_to_the_secondary() {
    use dgem_gateway::{BackendSpec, Gateway, GatewayConfig, Kind, Replica};
    let bad = answering("not json at all").await;
    let good = answering(wrapped(
        &json!({"answers": {"u": {"label": "no", "probabilities": {"yes": 0.2, "no": 0.8}}}}),
    ))
    .await;
    // Two backends, each one remote replica.
    let gateway = |first: (&str, Kind, &str), second: (&str, Kind, &str), default: Option<&str>| {
        let spec = |(name, kind, base): (&str, Kind, &str)| BackendSpec {
            name: name.into(),
            kind,
            replicas: vec![Replica::remote(target(base))],
        };
        Gateway::new(GatewayConfig {
            backends: vec![spec(first), spec(second)],
            default: default.map(str::to_string),
            allowed: None,
            route: dgem_gateway::RouteConfig::default(),
        })
        .unwrap()
    };
    let g = gateway(
        ("cloudrun", Kind::Cloudrun, &bad),
        ("local", Kind::Local, &good),
        None,
    );
    // `cloudrun` alone has nowhere to go: a 502-class upstream failure naming the reply.
    let only = route(&g, "cloudrun").await.unwrap_err();
    assert_eq!(only.status(), axum::http::StatusCode::BAD_GATEWAY, "{only}");
    assert!(only.to_string().contains("not JSON"), "{only}");
    // `vertex_first` walks vertex (malformed) then cloudrun: the healthy one answers.
    let g = gateway(
        ("vertex", Kind::Vertex, &bad),
        ("cloudrun", Kind::Cloudrun, &good),
        Some("vertex_first"),
    );
    let routed = route(&g, "vertex_first").await.unwrap();
    assert_eq!((routed.backend.as_str(), routed.attempts), ("cloudrun", 2));
    assert_eq!(routed.value.envelope()["answers"]["u"]["label"], "no");
    // The composite decider takes the same path.
    let d = g.decide(call()).await.unwrap();
    assert_eq!(d.envelope()["answers"]["u"]["label"], "no");
}
