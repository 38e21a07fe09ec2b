//! Routing, failover, breakers, retry budget and cold-start holds with
//! scripted targets under paused tokio time (no real sleeps).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{refused, request, send, upstream, Scripted, Step};
use dgem_backend::{BackendError, Health};
use dgem_engine::templates::TemplateDir;
use dgem_gateway::replica::decide_error;
use dgem_gateway::{
    BackendSpec, BreakerConfig, Gateway, GatewayConfig, GatewayError, GatewayState, Kind,
    RouteConfig,
};
use futures_util::FutureExt as _;
use serde_json::json;

const MS: Duration = Duration::from_millis(1);

fn spec(name: &str, kind: Kind, targets: Vec<Arc<Scripted>>) -> BackendSpec {
    BackendSpec {
        name: name.into(),
        kind,
        replicas: targets.iter().map(Scripted::replica).collect(),
    }
}

fn gateway(backends: Vec<BackendSpec>, route: RouteConfig) -> Gateway {
    Gateway::new(GatewayConfig {
        backends,
        default: None,
        allowed: None,
        route,
    })
    .unwrap()
}

fn route() -> RouteConfig {
    RouteConfig {
        backoff_initial: Duration::from_secs(1),
        backoff_max: Duration::from_secs(8),
        breaker: BreakerConfig {
            failure_threshold: 2,
            open_for: Duration::from_secs(30),
        },
        ..RouteConfig::default()
    }
}

async fn decide(g: &Gateway, mode: Option<&str>) -> Result<(String, u32), GatewayError> {
    let req = request();
    g.route(mode, |r| {
        let req = req.clone();
        async move { r.decider.decide(req).await.map_err(decide_error) }.boxed()
    })
    .await
    .map(|r| (r.backend, r.attempts))
}

#[tokio::test(start_paused = true)]
async fn each_mode_and_the_default() {
    let v = Scripted::new("vertex", vec![]);
    let c = Scripted::new("cloudrun", vec![]);
    let l = Scripted::new("local", vec![]);
    let g = gateway(
        vec![
            spec("vertex", Kind::Vertex, vec![v.clone()]),
            spec("cloudrun", Kind::Cloudrun, vec![c.clone()]),
            spec("local", Kind::Local, vec![l.clone()]),
        ],
        route(),
    );
    assert_eq!(
        g.default_backend(),
        "vertex_first",
        "vertex_first is the default when Vertex is configured"
    );
    assert_eq!(
        g.available(),
        ["vertex_first", "vertex", "cloudrun", "local"]
    );
    assert_eq!(decide(&g, None).await.unwrap(), ("vertex".into(), 1));
    assert_eq!(
        decide(&g, Some("vertex")).await.unwrap(),
        ("vertex".into(), 1)
    );
    assert_eq!(
        decide(&g, Some("cloudrun")).await.unwrap(),
        ("cloudrun".into(), 1)
    );
    assert_eq!(
        decide(&g, Some("local")).await.unwrap(),
        ("local".into(), 1)
    );
    assert_eq!((v.calls(), c.calls(), l.calls()), (2, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn allow_list_and_header_override() {
    let c = Scripted::new("cloudrun", vec![]);
    let l = Scripted::new("local", vec![]);
    let g = Gateway::new(GatewayConfig {
        backends: vec![
            spec("cloudrun", Kind::Cloudrun, vec![c.clone()]),
            spec("local", Kind::Local, vec![l.clone()]),
        ],
        default: Some("cloudrun".into()),
        allowed: Some(vec!["cloudrun".into(), "local".into()]),
        route: route(),
    })
    .unwrap();
    let app = dgem_gateway::router(GatewayState {
        gateway: Arc::new(g),
        templates: TemplateDir::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../templates")),
        after: Arc::default(),
    });
    let body = json!({"variables": {"ticket": "x"}});
    let (s, used, r) = send(
        &app,
        "POST",
        "/api/decide/support_triage",
        &[],
        Some(body.clone()),
    )
    .await;
    assert_eq!(
        (s.as_u16(), used.as_deref()),
        (200, Some("cloudrun")),
        "{r}"
    );
    let (_, used, _) = send(
        &app,
        "POST",
        "/api/decide/support_triage",
        &[("X-DGem-Backend", "local")],
        Some(body.clone()),
    )
    .await;
    assert_eq!(used.as_deref(), Some("local"));
    // Body field works, header wins over it.
    let mut b2 = body.clone();
    b2["backend"] = json!("local");
    let (_, used, _) = send(
        &app,
        "POST",
        "/api/decide/support_triage",
        &[],
        Some(b2.clone()),
    )
    .await;
    assert_eq!(used.as_deref(), Some("local"));
    let (_, used, _) = send(
        &app,
        "POST",
        "/api/decide/support_triage",
        &[("x-dgem-backend", "cloudrun")],
        Some(b2),
    )
    .await;
    assert_eq!(used.as_deref(), Some("cloudrun"));
    let (s, _, r) = send(
        &app,
        "POST",
        "/api/decide/support_triage",
        &[("x-dgem-backend", "vertex")],
        Some(body),
    )
    .await;
    assert_eq!(s.as_u16(), 400);
    assert_eq!(
        r["error"]["message"],
        "backend `vertex` is not available on this gateway; allowed: [cloudrun, local]"
    );
    assert_eq!(r["error"]["type"], "backend_unavailable");
    // Startup validation.
    let bad = Gateway::new(GatewayConfig {
        backends: vec![spec("local", Kind::Local, vec![l])],
        default: Some("cloudrun".into()),
        allowed: None,
        route: route(),
    });
    assert!(bad
        .unwrap_err()
        .to_string()
        .contains("`--default-backend` must be one of [local]. Given: `cloudrun`"));
}

#[tokio::test(start_paused = true)]
async fn mid_request_failure_fails_over_to_the_next_replica() {
    // Vertex dies 3 s into the request (reference §4.4 did not fail over here).
    let v = Scripted::new(
        "vertex",
        vec![Step::Err(
            Duration::from_secs(3),
            BackendError::Connection("connection reset by peer".into()),
        )],
    );
    let c = Scripted::new("cloudrun", vec![Step::Ok(200 * MS)]);
    let g = gateway(
        vec![
            spec("vertex", Kind::Vertex, vec![v.clone()]),
            spec("cloudrun", Kind::Cloudrun, vec![c.clone()]),
        ],
        route(),
    );
    let t0 = tokio::time::Instant::now();
    assert_eq!(
        decide(&g, Some("vertex_first")).await.unwrap(),
        ("cloudrun".into(), 2)
    );
    assert_eq!(t0.elapsed(), Duration::from_millis(3200));
    // A timeout on one replica of a backend fails over to its other replica.
    let a = Scripted::new("a", vec![Step::Ok(Duration::from_secs(500))]);
    let b = Scripted::new("b", vec![]);
    let g = gateway(
        vec![spec("local", Kind::Local, vec![a.clone(), b.clone()])],
        route(),
    );
    assert_eq!(decide(&g, None).await.unwrap(), ("local".into(), 2));
    assert_eq!((a.calls(), b.calls()), (1, 1));
    for status in [429, 502, 503, 504] {
        let a = Scripted::new("a", vec![Step::Err(MS, upstream(status))]);
        let g = gateway(
            vec![spec(
                "local",
                Kind::Local,
                vec![a, Scripted::new("b", vec![])],
            )],
            route(),
        );
        assert_eq!(decide(&g, None).await.unwrap().1, 2, "{status} fails over");
    }
}

#[tokio::test(start_paused = true)]
async fn client_errors_never_fail_over() {
    for e in [
        upstream(400),
        upstream(422),
        upstream(500),
        BackendError::InvalidRequest("state too long".into()),
    ] {
        let a = Scripted::new("a", vec![Step::Err(MS, e.clone())]);
        let b = Scripted::new("b", vec![]);
        let g = gateway(
            vec![spec("local", Kind::Local, vec![a.clone(), b.clone()])],
            route(),
        );
        let err = decide(&g, None).await.unwrap_err();
        assert!(matches!(err, GatewayError::Rejected { .. }), "{e}: {err}");
        assert_eq!(b.calls(), 0, "{e} must not fail over");
    }
    let a = Scripted::new("a", vec![Step::Err(MS, upstream(422))]);
    let g = gateway(vec![spec("local", Kind::Local, vec![a])], route());
    assert_eq!(decide(&g, None).await.unwrap_err().status().as_u16(), 422);
}

async fn breakers(g: &Gateway) -> Vec<&'static str> {
    g.health()
        .await
        .iter()
        .map(|s| s.breaker.as_str())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn breaker_opens_half_opens_and_closes() {
    let a = Scripted::new(
        "a",
        vec![
            Step::Err(MS, refused()),
            Step::Err(MS, refused()),
            Step::Err(MS, refused()),
        ],
    );
    let b = Scripted::new("b", vec![]);
    let g = gateway(
        vec![spec("local", Kind::Local, vec![a.clone(), b.clone()])],
        route(),
    );
    decide(&g, None).await.unwrap();
    decide(&g, None).await.unwrap();
    assert_eq!(
        breakers(&g).await,
        ["open", "closed"],
        "two failures open a's breaker"
    );
    decide(&g, None).await.unwrap();
    assert_eq!(a.calls(), 2, "open breaker: a is skipped");
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(breakers(&g).await, ["half_open", "closed"]);
    decide(&g, None).await.unwrap();
    assert_eq!(a.calls(), 3, "half-open trial goes out");
    assert_eq!(
        breakers(&g).await,
        ["open", "closed"],
        "failed trial reopens"
    );
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(decide(&g, None).await.unwrap(), ("local".into(), 1));
    assert_eq!(
        breakers(&g).await,
        ["closed", "closed"],
        "successful trial closes"
    );
    // All breakers open: 503 without calling anything.
    let x = Scripted::new(
        "x",
        vec![Step::Err(MS, refused()), Step::Err(MS, refused())],
    );
    let g = gateway(vec![spec("local", Kind::Local, vec![x.clone()])], route());
    assert!(decide(&g, None).await.is_err());
    assert!(decide(&g, None).await.is_err());
    let err = decide(&g, None).await.unwrap_err();
    assert_eq!((err.status().as_u16(), x.calls()), (503, 2), "{err}");
    // Issue 12, defect 10: the 503 had no Retry-After.
    assert_eq!(err.retry_after_s(), Some(30), "{err}");
}

/// Issue 12, defect 10: a replica that came back was shunned for the rest of
/// the breaker's 30 s. When every breaker of the chain is open, a replica whose
/// health answers ready gets a trial at once.
#[tokio::test(start_paused = true)]
async fn replica_that_came_back_is_tried_before_its_breaker_times_out() {
    let unreachable = || Health::Failed {
        phase: "unreachable".into(),
        reason: "refused".into(),
    };
    let x = Scripted::new(
        "x",
        vec![Step::Err(MS, refused()), Step::Err(MS, refused())],
    )
    .with_health(vec![unreachable(), unreachable(), Health::Ready]);
    let g = gateway(vec![spec("local", Kind::Local, vec![x.clone()])], route());
    assert!(decide(&g, None).await.is_err());
    assert!(decide(&g, None).await.is_err());
    let t0 = tokio::time::Instant::now();
    assert_eq!(decide(&g, None).await.unwrap(), ("local".into(), 1));
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(x.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn cold_start_is_held_until_ready() {
    let warming = |gb: f64| Health::Starting {
        phase: "staging_tmpfs".into(),
        bytes_staged_gb: Some(gb),
    };
    let c = Scripted::new("cloudrun", vec![Step::Err(MS, upstream(503))]).with_health(vec![
        Health::starting("scaled_to_zero"),
        warming(2.0),
        warming(9.0),
        Health::Ready,
    ]);
    let g = gateway(
        vec![spec("cloudrun", Kind::Cloudrun, vec![c.clone()])],
        route(),
    );
    let t0 = tokio::time::Instant::now();
    assert_eq!(decide(&g, None).await.unwrap(), ("cloudrun".into(), 2));
    // Backoff 1 s, 2 s, 4 s between health polls, then the retry.
    assert_eq!(t0.elapsed(), Duration::from_millis(7001));
    assert_eq!(c.health_calls(), 4);
    let rows = g.health().await;
    assert_eq!(
        (rows[0].health.phase(), rows[0].breaker.as_str()),
        ("ready", "closed"),
        "warming is not a fault"
    );
}

#[tokio::test(start_paused = true)]
async fn cold_start_hold_gives_up_at_the_wakeup_timeout() {
    let c = Scripted::new("cloudrun", vec![Step::Err(MS, upstream(503))])
        .with_health(vec![Health::starting("loading_vllm_siglip")]);
    let g = gateway(
        vec![spec("cloudrun", Kind::Cloudrun, vec![c.clone()])],
        RouteConfig {
            wakeup_timeout: Duration::from_secs(60),
            ..route()
        },
    );
    let t0 = tokio::time::Instant::now();
    let err = decide(&g, None).await.unwrap_err();
    assert_eq!(err.status().as_u16(), 504);
    assert!(
        err.to_string().contains("still `loading_vllm_siglip`"),
        "{err}"
    );
    assert!(t0.elapsed() <= Duration::from_secs(60));
    assert_eq!(c.calls(), 1, "a warming backend is polled, not hammered");
}

#[tokio::test(start_paused = true)]
async fn unreachable_backend_is_not_held() {
    let l = Scripted::new("local", vec![Step::Err(MS, refused())]);
    let g = gateway(vec![spec("local", Kind::Local, vec![l])], route());
    let t0 = tokio::time::Instant::now();
    let err = decide(&g, None).await.unwrap_err();
    assert_eq!(err.status().as_u16(), 502);
    assert_eq!(err.to_string(), "upstream (local) decision failed after 1 attempt(s): connection failed: connection refused");
    assert!(t0.elapsed() < Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn attempts_are_capped_and_the_retry_budget_is_shared() {
    let reps: Vec<Arc<Scripted>> = (0..5)
        .map(|_| Scripted::new("r", vec![Step::Err(MS, refused())]))
        .collect();
    let g = gateway(
        vec![spec("local", Kind::Local, reps.clone())],
        RouteConfig {
            max_attempts: 3,
            ..route()
        },
    );
    let err = decide(&g, None).await.unwrap_err();
    assert!(err.to_string().contains("after 3 attempt(s)"), "{err}");
    assert_eq!(reps.iter().map(|r| r.calls()).sum::<u32>(), 3);
    // Budget of 1 retry: each request's first failover is free, so the first
    // request makes 3 attempts (free failover, then the budget's one retry)
    // and the next 2 (its free failover only).
    let reps: Vec<Arc<Scripted>> = (0..3)
        .map(|_| {
            Scripted::new(
                "r",
                vec![Step::Err(MS, refused()), Step::Err(MS, refused())],
            )
        })
        .collect();
    let g = gateway(
        vec![spec("local", Kind::Local, reps.clone())],
        RouteConfig {
            retry_reserve: 1.0,
            retry_ratio: 0.0,
            ..route()
        },
    );
    assert!(decide(&g, None)
        .await
        .unwrap_err()
        .to_string()
        .contains("after 3 attempt(s)"));
    let err = decide(&g, None).await.unwrap_err();
    assert!(err.to_string().contains("after 2 attempt(s)"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_dead_replica_fails_no_request_when_the_budget_is_spent() {
    // Issue 38: with the shared budget empty, a request whose replica died
    // got 502 although the other replica was healthy.
    let dead = Scripted::new("dead", (0..40).map(|_| Step::Err(MS, refused())).collect());
    let alive = Scripted::new("alive", vec![]);
    let g = gateway(
        vec![spec(
            "local",
            Kind::Local,
            vec![dead.clone(), alive.clone()],
        )],
        RouteConfig {
            retry_reserve: 0.0,
            retry_ratio: 0.0,
            breaker: BreakerConfig {
                failure_threshold: u32::MAX,
                ..route().breaker
            },
            ..route()
        },
    );
    for _ in 0..32 {
        decide(&g, None).await.expect("the live replica answers");
    }
    assert_eq!(alive.calls(), 32);
}

#[tokio::test(start_paused = true)]
async fn passthrough_routes_fail_over_and_keep_the_upstream_body() {
    let a = Scripted::new(
        "a",
        vec![Step::Err(MS, upstream(503)), Step::Err(MS, upstream(502))],
    );
    let b = Scripted::new("b", vec![]);
    let g = gateway(
        vec![spec("local", Kind::Local, vec![a.clone(), b.clone()])],
        route(),
    );
    let app = dgem_gateway::router(GatewayState {
        gateway: Arc::new(g),
        templates: TemplateDir::new("templates"),
        after: Arc::default(),
    });
    for path in ["/v1/systemone", "/v1/chat/completions"] {
        let (s, used, r) = send(&app, "POST", path, &[], Some(json!({"state": "x"}))).await;
        assert_eq!((s.as_u16(), used.as_deref()), (200, Some("local")));
        assert_eq!(r["from"], "b");
        assert_eq!(r["path"], path);
    }
    let (s, _, r) = send(
        &app,
        "POST",
        "/v1/systemone",
        &[],
        Some(json!({"backend": "gpu"})),
    )
    .await;
    assert_eq!(s.as_u16(), 400);
    assert_eq!(r["error"]["type"], "backend_unavailable");
    let (s, _, r) = send(&app, "GET", "/health", &[], None).await;
    assert_eq!(
        (s.as_u16(), r["service"].as_str()),
        (200, Some("dgem-gateway"))
    );
}

#[tokio::test]
async fn cors_preflight_allows_any_origin() {
    use tower::ServiceExt as _;
    let g = gateway(
        vec![spec("local", Kind::Local, vec![Scripted::new("a", vec![])])],
        route(),
    );
    let app = dgem_gateway::router(GatewayState {
        gateway: Arc::new(g),
        templates: TemplateDir::new("templates"),
        after: Arc::default(),
    });
    let req = axum::http::Request::builder()
        .method("OPTIONS")
        .uri("/api/decide")
        .header("origin", "https://studio.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,mcp-session-id",
        )
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = app.oneshot(req).await.unwrap();
    assert!(resp.status().is_success());
    let h = resp.headers();
    assert_eq!(h["access-control-allow-origin"], "*");
    let methods = h["access-control-allow-methods"].to_str().unwrap();
    for m in ["GET", "POST", "PUT", "DELETE", "OPTIONS"] {
        assert!(methods.contains(m), "{methods}");
    }
    assert!(h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("mcp-session-id"));
}

#[tokio::test(start_paused = true)]
async fn warmup_failed_backend_is_not_held_and_fails_over() {
    let l = Scripted::new("local", vec![Step::Err(MS, upstream(503))]).with_health(vec![
        Health::Failed {
            phase: "warmup_failed".into(),
            reason: "vLLM did not answer".into(),
        },
    ]);
    let c = Scripted::new("cloudrun", vec![]);
    let g = gateway(
        vec![
            spec("local", Kind::Local, vec![l.clone()]),
            spec("cloudrun", Kind::Cloudrun, vec![c.clone()]),
        ],
        route(),
    );
    let t0 = tokio::time::Instant::now();
    let err = decide(&g, Some("local")).await.unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "not held: {:?}",
        t0.elapsed()
    );
    assert_eq!(err.status(), 503);
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "backend `local` is `warmup_failed` (failed, not warming up; nothing to wait for): "
        ),
        "{msg}"
    );
    assert!(msg.contains("503"), "{msg}");
    assert_eq!(l.calls(), 1, "tried once, never re-polled for a wake-up");
    assert_eq!(c.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn warmup_failed_backend_fails_over_to_the_next_backend() {
    let v = Scripted::new("vertex", vec![Step::Err(MS, upstream(503))]).with_health(vec![
        Health::Failed {
            phase: "warmup_failed".into(),
            reason: "vLLM did not answer".into(),
        },
    ]);
    let c = Scripted::new("cloudrun", vec![]);
    let g = gateway(
        vec![
            spec("vertex", Kind::Vertex, vec![v.clone()]),
            spec("cloudrun", Kind::Cloudrun, vec![c.clone()]),
        ],
        route(),
    );
    let t0 = tokio::time::Instant::now();
    assert_eq!(decide(&g, None).await.unwrap(), ("cloudrun".into(), 2));
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "not held: {:?}",
        t0.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn backend_names_compare_case_insensitively() {
    let c = Scripted::new("cloudrun", vec![]);
    let l = Scripted::new("local", vec![]);
    let g = gateway(
        vec![
            spec("cloudrun", Kind::Cloudrun, vec![c.clone()]),
            spec("local", Kind::Local, vec![l.clone()]),
        ],
        route(),
    );
    assert_eq!(
        decide(&g, Some("LOCAL")).await.unwrap(),
        ("local".into(), 1)
    );
    assert_eq!(
        decide(&g, Some("CloudRun")).await.unwrap(),
        ("cloudrun".into(), 1)
    );
    assert_eq!((c.calls(), l.calls()), (1, 1));
}
