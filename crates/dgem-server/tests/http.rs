//! Server behaviour around the decision routes: 404/410, auth, the concurrency
//! gate, isolation of concurrent requests, health/readiness, metrics, limits.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use common::{call, chat, config, envelope, get, post, post_raw, state, triage};
use dgem_server::ServeConfig;
use dgem_testkit::{scripts, ScriptedBackend};
use serde_json::json;

fn ok_body() -> serde_json::Value {
    chat(&triage(), &json!({"ticket": "want_support"}))
}

#[tokio::test]
async fn raw_route_is_gone_and_unknown_routes_are_404() {
    let (app, _) = common::app();
    let r = call(
        &app,
        post("/v1/raw/chat/completions", &json!({"messages": []})),
    )
    .await;
    assert_eq!(r.status, 410);
    assert_eq!(
        r.body,
        json!({"error": {"message": "free-form generation is not served: use /v1/systemone or /v1/chat/completions (decisions)", "type": "route_removed"}})
    );
    let r = call(&app, post("/invoke/v1/raw/chat/completions", &json!({}))).await;
    assert_eq!(r.status, 410);
    // One error shape on every route (issue 12): the 404 has a `type` too and
    // names the method and path asked.
    for (req, method) in [
        (get("/nope"), "GET"),
        (post("/v2/decide", &json!({})), "POST"),
    ] {
        let path = req.uri().to_string();
        let r = call(&app, req).await;
        assert_eq!(r.status, 404, "{path}");
        let want = json!({"error": {"message": format!("unknown route: {method} {path}"), "type": "invalid_request_error"}});
        assert_eq!(r.body, want, "{path}");
    }
    // Regression: a known route asked with the wrong method was a 404; it is a
    // 405 naming the methods it takes, in `Allow` too.
    for (req, allow) in [
        (get("/v1/chat/completions"), "POST"),
        (get("/v1/systemone"), "POST"),
        (get("/invoke/v1/systemone"), "POST"),
        (post("/health", &json!({})), "GET, HEAD"),
    ] {
        let path = req.uri().to_string();
        let r = call(&app, req).await;
        assert_eq!(r.status, 405, "{path}");
        assert_eq!(r.headers["allow"], allow, "{path}");
        assert_eq!(r.body["error"]["type"], "invalid_request_error", "{path}");
        let msg = r.body["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(&format!("use {allow}")), "{path}: {msg}");
    }
    // A bad body on an unknown path is 400 first.
    let r = call(&app, post_raw("/v2/decide", "application/json", "{oops")).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["type"], "invalid_request_error");
}

fn keyed(keys: &[&str]) -> (axum::Router, Arc<ScriptedBackend>) {
    let b = common::backend();
    let cfg = ServeConfig {
        api_keys: keys.iter().map(|k| (*k).to_string()).collect(),
        ..config()
    };
    (dgem_server::router(state(b.clone(), cfg)), b)
}

fn with_header(path: &str, name: &str, value: &str) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .header(name, value)
        .body(Body::from(ok_body().to_string()))
        .unwrap()
}

#[tokio::test]
async fn auth_needs_the_key_on_every_post() {
    let (app, backend) = keyed(&["s3cret", "rotated"]);
    let unauthorized = json!({"error": {"message": "missing or wrong bearer token", "type": "authentication_error"}});
    let cases = [
        post("/v1/chat/completions", &ok_body()),
        with_header("/v1/chat/completions", "authorization", "Bearer wrong"),
        with_header("/v1/chat/completions", "authorization", "s3cret"),
        with_header("/v1/chat/completions", "x-dgem-key", "s3cre"),
        with_header("/v1/chat/completions", "x-dgem-key", ""),
        with_header("/v1/systemone", "x-dgem-key", "nope"),
        with_header("/v1/raw/chat/completions", "authorization", "Bearer nope"),
        with_header("/nope", "authorization", "Bearer nope"),
    ];
    for req in cases {
        let path = req.uri().to_string();
        let r = call(&app, req).await;
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(r.body, unauthorized, "{path}");
        assert_eq!(r.headers["connection"], "close");
    }
    assert_eq!(backend.calls(), 0);
    for (h, v) in [
        ("authorization", "Bearer s3cret"),
        ("x-dgem-key", "s3cret"),
        ("x-dgem-key", "rotated"),
        ("authorization", "Bearer rotated"),
    ] {
        let r = call(&app, with_header("/v1/chat/completions", h, v)).await;
        assert_eq!(r.status, 200, "{h}: {}", r.text);
    }
    let r = call(
        &app,
        with_header("/v1/raw/chat/completions", "x-dgem-key", "s3cret"),
    )
    .await;
    assert_eq!(r.status, 410);
    // GETs stay open for probes.
    assert_eq!(call(&app, get("/health")).await.status, 200);
    assert_eq!(call(&app, get("/metrics")).await.status, 200);
}

#[tokio::test]
async fn overload_is_503_with_retry_after() {
    let b = common::backend();
    b.set_delay(Duration::from_millis(400));
    let cfg = ServeConfig {
        max_inflight: 1,
        inflight_wait: Duration::from_millis(30),
        ..config()
    };
    let app = dgem_server::router(state(b.clone(), cfg));
    let first = {
        let app = app.clone();
        tokio::spawn(async move { call(&app, post("/v1/chat/completions", &ok_body())).await })
    };
    while b.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = call(&app, post("/v1/chat/completions", &ok_body())).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"error": {"message": "server busy: 1 decisions in flight", "type": "overloaded"}})
    );
    assert_eq!(r.headers["retry-after"], "1");
    let r = call(
        &app,
        post(
            "/v1/systemone",
            &json!({"state": "x", "questions": {"a": {"type": "noul"}}}),
        ),
    )
    .await;
    assert_eq!(r.status, 503);
    // Validation happens before the gate: a bad request is still 400, not 503.
    let r = call(&app, post("/v1/chat/completions", &json!({"messages": []}))).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        first.await.unwrap().status,
        200,
        "the running decision finishes"
    );
    assert_eq!(
        call(&app, post("/v1/chat/completions", &ok_body()))
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_each_get_their_own_answer() {
    let b = ScriptedBackend::new(scripts::want_marker(0.9));
    b.set_delay(Duration::from_millis(20));
    let cfg = ServeConfig {
        max_inflight: 8,
        ..config()
    };
    let app = dgem_server::router(state(b.clone(), cfg));
    let teams = ["billing", "support", "engineering"];
    let tones = ["calm", "annoyed", "furious"];
    let mut tasks = Vec::new();
    for i in 0..24 {
        let app = app.clone();
        let team = teams[i % 3];
        let tone = tones[(i / 3) % 3];
        let urgent = if i % 2 == 0 { "yes" } else { "no" };
        tasks.push(tokio::spawn(async move {
            let state = json!({"ticket": format!("#{i} want_{team} want_{tone} want_{urgent}")});
            let r = call(&app, post("/v1/chat/completions", &chat(&triage(), &state))).await;
            assert_eq!(r.status, 200, "{}", r.text);
            let a = envelope(&r.body)["answers"].clone();
            assert_eq!(a["team"]["choice"], team, "request {i}");
            assert_eq!(a["tone"]["level"], tone, "request {i}");
            assert_eq!(a["urgent"]["label"], urgent, "request {i}");
            assert!((a["team"]["confidence"].as_f64().unwrap() - 0.9).abs() < 1e-9);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn health_is_always_200_and_ready_waits_for_warm_up() {
    let b = common::backend();
    let st = state(
        b.clone(),
        ServeConfig {
            version: "1.2.3".into(),
            revision: "abc".into(),
            ..config()
        },
    );
    let app = dgem_server::router(st.clone());
    for path in ["/health", "/invoke/health", "/"] {
        let r = call(&app, get(path)).await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body["status"], "ok");
        assert_eq!(r.body["server"], "dgem-structured-server");
        assert_eq!(r.body["version"], "1.2.3");
        assert_eq!(r.body["revision"], "abc");
        assert_eq!(r.body["phase"], "warming_up");
        assert_eq!(r.body["ready"], false);
        assert_eq!(r.body["vllm_ready"], false);
        assert_eq!(r.body["bytes_staged_gb"], 0.0);
        assert!(r.body["boot_ts"].as_f64().unwrap() > 1.0e9);
    }
    let r = call(&app, get("/ready")).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.body, json!({"ready": false, "phase": "warming_up"}));
    dgem_server::warmup::run(&st)
        .await
        .expect("warm-up decision");
    assert!(b.calls() >= 1, "the warm-up ran a real read");
    let r = call(&app, get("/ready")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, json!({"ready": true, "phase": "ready"}));
    let h = call(&app, get("/health")).await.body;
    assert_eq!(h["vllm_ready"], true);
    assert_eq!(h["warmed"], true);
    assert!(h["warmup_s"].as_f64().is_some() && h["ready_ts"].as_f64().is_some());
}

#[tokio::test(start_paused = true)]
async fn failed_warm_up_keeps_ready_false() {
    let b = common::backend();
    b.fail_next(100);
    let st = state(b.clone(), config());
    let err = dgem_server::warmup::run(&st)
        .await
        .expect_err("always failing");
    assert!(err.contains("scripted failure"));
    let r = st.readiness();
    assert_eq!(r.phase, "warmup_failed");
    assert!(!r.ready);
    let app = dgem_server::router(st);
    assert_eq!(call(&app, get("/ready")).await.status, 503);
    let h = call(&app, get("/health")).await;
    assert_eq!(h.status, 200);
    assert_eq!(h.body["warmed"], false);
}

#[tokio::test]
async fn metrics_expose_the_series() {
    let (app, _) = common::app();
    let r = call(&app, post("/v1/chat/completions", &ok_body())).await;
    assert_eq!(r.status, 200);
    let r = call(
        &app,
        post(
            "/v1/systemone",
            &json!({"state": "x", "questions": {"a": {"type": "noul"}}}),
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    let r = call(&app, get("/metrics")).await;
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = r.text;
    for series in [
        "dgem_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"}",
        "dgem_http_request_duration_seconds_bucket{route=\"/v1/chat/completions\",status=\"200\"",
        "dgem_decisions_total{route=\"chat\",policy=\"ad_hoc\",outcome=\"ok\"}",
        "dgem_hesitation_bucket{policy=\"ad_hoc\",question_type=\"noul\"",
        "dgem_questions_total{question_type=\"choice\"}",
        "dgem_questions_total{question_type=\"score\"}",
        "dgem_normalized_entropy_bucket{question_type=\"noul\"",
        "dgem_decision_duration_seconds_bucket",
        "dgem_backend_forward_duration_seconds_bucket",
        "dgem_queue_wait_seconds_bucket{stage=\"gate\"",
        "dgem_queue_wait_seconds_bucket{stage=\"backend\"",
        "dgem_inflight_decisions",
        "dgem_decision_prompt_tokens_bucket",
        "dgem_decision_cached_tokens_bucket",
    ] {
        assert!(text.contains(series), "missing {series} in\n{text}");
    }
    // Issue 16: no metric had a `# HELP` line (promtool refuses that). Every
    // family shown has one now.
    let families: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(families.len() >= 11, "{families:?}");
    for f in families {
        assert!(
            text.contains(&format!("# HELP {f} ")),
            "no HELP for {f} in\n{text}"
        );
    }
}

/// Issue 16: decisions made through the gate (MCP, the Studio's /api) were
/// not counted, and no series named the policy or the model.
#[tokio::test]
async fn gated_decisions_are_counted_by_route_and_policy_and_build_info_names_the_model() {
    let st = state(common::backend(), config());
    let d = st.gated_decider_for("mcp");
    let schema = dgem_core::schema::ValidSchema::from_value(
        &json!({"questions": [{"id": "u", "type": "noul"}]}),
        &dgem_core::schema::SchemaDefaults::default(),
    )
    .unwrap()
    .with_policy("support_triage");
    d.decide(dgem_engine::DecideRequest {
        schema,
        state: json!("want_yes"),
        seed: 42,
    })
    .await
    .unwrap();
    dgem_server::telemetry::set_build_info("9.9.9", "abc123", &d.info());
    let app = dgem_server::router(st);
    let text = call(&app, get("/metrics")).await.text;
    for series in [
        "dgem_decisions_total{route=\"mcp\",policy=\"support_triage\",outcome=\"ok\"} ",
        "dgem_hesitation_count{policy=\"support_triage\",question_type=\"noul\"} ",
        "dgem_build_info{version=\"9.9.9\",revision=\"abc123\",engine=\"scripted\",model=\"toy\"} 1",
    ] {
        assert!(text.contains(series), "missing {series} in\n{text}");
    }
    // promtool's own check, where it is installed (it is not on every machine).
    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok()
    {
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(
            !ci,
            "CI is set but promtool is missing (scripts/deps installs it)"
        );
        #[allow(clippy::print_stderr)]
        {
            eprintln!("promtool not installed: `promtool check metrics` skipped");
        }
    }
}

#[tokio::test]
async fn body_limit_is_413_json() {
    let b = common::backend();
    let app = dgem_server::router(state(
        b,
        ServeConfig {
            max_body_bytes: 512,
            ..config()
        },
    ));
    let big = chat(&triage(), &json!({"ticket": "x".repeat(2048)}));
    let r = call(&app, post("/v1/chat/completions", &big)).await;
    assert_eq!(r.status, 413, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "invalid_request_error");
    assert_eq!(
        r.body["error"]["message"],
        "request body is over the size limit"
    );
    // Without a content-length (a streamed body) the limit holds as well.
    let stream =
        futures_util::stream::iter([Ok::<_, std::io::Error>(big.to_string().into_bytes())]);
    let req = Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap();
    let r = call(&app, req).await;
    assert_eq!(r.status, 413, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn slow_decision_times_out_with_504_json() {
    let b = common::backend();
    b.set_delay(Duration::from_millis(500));
    let app = dgem_server::router(state(
        b,
        ServeConfig {
            request_timeout: Duration::from_millis(50),
            ..config()
        },
    ));
    let r = call(&app, post("/v1/chat/completions", &ok_body())).await;
    assert_eq!(r.status, 504, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "timeout_error");
}

#[tokio::test]
async fn a_panicking_backend_is_500_json() {
    let b = ScriptedBackend::new(|_ctx: &dgem_testkit::SlotContext| -> Vec<f64> {
        panic!("script bug")
    });
    let app = dgem_server::router(state(b, config()));
    let r = call(&app, post("/v1/chat/completions", &ok_body())).await;
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"error": {"message": "internal error: the request handler failed", "type": "server_error"}})
    );
    // The server keeps serving.
    assert_eq!(call(&app, get("/health")).await.status, 200);
}

/// Regression: routes mounted in front of the server (`/mcp`, the Studio's
/// `/api/*`) used to bypass `API_KEY`, so `dgem serve --studio` with keys
/// configured accepted unauthenticated decisions on `/api/decide`.
#[tokio::test]
async fn extra_routes_are_not_an_auth_bypass() {
    use axum::routing::post as post_route;
    let b = common::backend();
    let cfg = ServeConfig {
        api_keys: vec!["s3cret".into()],
        ..config()
    };
    let extra = axum::Router::new().route(
        "/api/decide",
        post_route(|body: axum::body::Bytes| async move { format!("decided {}", body.len()) }),
    );
    let app = dgem_server::router_with(state(b, cfg.clone()), extra);
    let r = call(&app, post("/api/decide", &json!({}))).await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "authentication_error");
    let r = call(&app, with_header("/api/decide", "x-dgem-key", "s3cret")).await;
    assert_eq!(r.status, 200);
    assert!(r.text.starts_with("decided "), "{}", r.text);
    // An oversized body is a JSON 413, as on the server's own routes (it was
    // plain text).
    let big = Request::post("/api/decide")
        .header("x-dgem-key", "s3cret")
        .body(Body::from(vec![b'x'; cfg.max_body_bytes + 1]))
        .unwrap();
    let r = call(&app, big).await;
    assert_eq!(r.status, 413);
    assert_eq!(
        r.body["error"]["message"],
        "request body is over the size limit"
    );
    // The server's own routes still answer behind the extra ones.
    let r = call(
        &app,
        with_header("/v1/chat/completions", "x-dgem-key", "s3cret"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(call(&app, get("/health")).await.status, 200);
}

/// A decider whose backend can be switched off, as vLLM dies under a server.
#[derive(Debug)]
struct Switchable {
    inner: Arc<dyn dgem_engine::Decider>,
    down: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl dgem_engine::Decider for Switchable {
    fn info(&self) -> dgem_backend::BackendInfo {
        self.inner.info()
    }
    async fn health(&self) -> dgem_backend::Health {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            dgem_backend::Health::starting("waiting_for_vllm")
        } else {
            dgem_backend::Health::Ready
        }
    }
    async fn decide(
        &self,
        req: dgem_engine::DecideRequest,
    ) -> Result<dgem_engine::Decision, dgem_engine::DecideError> {
        self.inner.decide(req).await
    }
}

/// Issue 12, defect 8: `/health` and `/ready` stayed ready after the backend
/// died (vLLM killed: every decision 502 while `vllm_ready: true`). They now
/// probe the backend live (cached for 1 s).
#[tokio::test]
async fn health_and_ready_follow_the_backend_live() {
    let sw = Arc::new(Switchable {
        inner: Arc::new(dgem_testkit::engine(common::backend())),
        down: std::sync::atomic::AtomicBool::new(false),
    });
    let st = dgem_server::AppState::new(sw.clone(), config());
    dgem_server::warmup::run(&st).await.expect("warm-up");
    let app = dgem_server::router(st);
    assert_eq!(call(&app, get("/ready")).await.status, 200);
    sw.down.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(dgem_server::state::HEALTH_CACHE + Duration::from_millis(100)).await;
    let r = call(&app, get("/ready")).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.body, json!({"ready": false, "phase": "waiting_for_vllm"}));
    let h = call(&app, get("/health")).await;
    assert_eq!(h.status, 200, "liveness stays 200");
    assert_eq!(
        (
            h.body["ready"].clone(),
            h.body["vllm_ready"].clone(),
            h.body["phase"].clone()
        ),
        (json!(false), json!(false), json!("waiting_for_vllm"))
    );
    sw.down.store(false, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(dgem_server::state::HEALTH_CACHE + Duration::from_millis(100)).await;
    assert_eq!(call(&app, get("/ready")).await.status, 200);
}

/// Issue 12 ("one surface"): `/mcp` and `/api` skipped the `MAX_INFLIGHT`
/// gate. They decide through `AppState::gated_decider`, which shares it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_decider_shares_the_inflight_gate() {
    let b = common::backend();
    b.set_delay(Duration::from_millis(400));
    let cfg = ServeConfig {
        max_inflight: 1,
        inflight_wait: Duration::from_millis(100),
        ..config()
    };
    let st = state(b, cfg);
    let d = st.gated_decider();
    let schema = dgem_core::schema::ValidSchema::from_value(
        &json!({"questions": [{"id": "urgent", "type": "boolean"}]}),
        &dgem_core::schema::SchemaDefaults::default(),
    )
    .unwrap();
    let req = dgem_engine::DecideRequest {
        schema,
        state: json!("want_yes"),
        seed: 42,
    };
    let (a, c) = tokio::join!(d.decide(req.clone()), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        d.decide(req.clone()).await
    });
    assert!(a.is_ok(), "{a:?}");
    let err = c.expect_err("the gate is full");
    assert!(
        err.to_string()
            .contains("server busy: 1 decisions in flight"),
        "{err}"
    );
    assert!(matches!(
        err,
        dgem_engine::DecideError::Backend(dgem_backend::BackendError::Overloaded(_))
    ));
    assert_eq!(st.inflight(), 0);
}

/// Issue 14: `/health` answered only after the model loaded (0.99 s after
/// start). With `LoadingDecider` the port is bound first: `/health` says
/// `loading_model`, decisions are 503 until the model is set, then the
/// warm-up runs and the server is ready.
#[tokio::test]
async fn health_answers_while_the_model_loads() {
    let loading = dgem_server::loading::LoadingDecider::new("gemma-3-270m");
    let st = dgem_server::AppState::new(loading.clone(), config());
    let app = dgem_server::router(st.clone());
    let h = call(&app, get("/health")).await;
    assert_eq!(h.status, 200);
    assert_eq!(
        (
            h.body["phase"].clone(),
            h.body["ready"].clone(),
            h.body["engine"].clone()
        ),
        (json!("loading_model"), json!(false), json!("loading"))
    );
    let r = call(
        &app,
        post(
            "/v1/chat/completions",
            &chat(&triage(), &json!({"ticket": "x"})),
        ),
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.text);
    let warm = tokio::spawn({
        let st = st.clone();
        async move { dgem_server::warmup::run(&st).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!warm.is_finished(), "the warm-up waits for the load");
    loading.set(Arc::new(dgem_testkit::engine(common::backend())));
    warm.await.unwrap().expect("warm-up after the load");
    tokio::time::sleep(dgem_server::state::HEALTH_CACHE + Duration::from_millis(100)).await;
    let h = call(&app, get("/health")).await;
    assert_eq!(
        (h.body["ready"].clone(), h.body["engine"].clone()),
        (json!(true), json!("scripted"))
    );
}

/// Found by a hostile-input run: on the OpenAI and systemone routes an empty
/// state (`{}`, `[]`, `{"ticket": ""}`, `null`) was answered with 200, because
/// it travels as JSON text; a repeated key inside the state text was read
/// silently; image parts inside a systemone `state` were read as text by a
/// backend without vision.
#[tokio::test]
async fn empty_states_duplicate_state_keys_and_state_images_are_refused() {
    let (app, backend) = common::app();
    for state in [
        json!({}),
        json!([]),
        json!({"ticket": ""}),
        json!(null),
        json!("   "),
    ] {
        let r = call(&app, post("/v1/chat/completions", &chat(&triage(), &state))).await;
        assert!(
            r.status.is_client_error(),
            "{state}: {} {}",
            r.status,
            r.text
        );
        assert!(
            r.text.contains("nothing to decide on"),
            "{state}: {}",
            r.text
        );
        let body = json!({"state": state, "questions": {"u": {"type": "noul", "instructions": "Urgent?"}}});
        let r = call(&app, post("/v1/systemone", &body)).await;
        assert!(
            r.status.is_client_error(),
            "{state}: {} {}",
            r.status,
            r.text
        );
    }
    let mut body = chat(&triage(), &json!({}));
    body["messages"][1]["content"] = json!(r#"{"ticket": "a", "ticket": "b"}"#);
    let r = call(&app, post("/v1/chat/completions", &body)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(
        r.text.contains("state") && r.text.contains("ticket"),
        "{}",
        r.text
    );
    let body = json!({
        "state": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
        "questions": {"u": {"type": "noul", "instructions": "Urgent?"}}
    });
    let r = call(&app, post("/v1/systemone", &body)).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(r.text.contains("cannot read images"), "{}", r.text);
    assert_eq!(backend.calls(), 0, "nothing reached the model");
}
