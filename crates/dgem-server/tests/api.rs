//! The `/api/*` contract over one in-process decider (`dgem_server::api::local_routes`): catalog,
//! decisions from templates and ad-hoc questions, health, backends, errors and
//! path traversal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::StatusCode;
use dgem_engine::templates::TemplateDir;
use dgem_testkit::{scripts, ScriptedBackend};
use serde_json::json;

/// Send a request to `app`; returns status, `X-DGem-Backend-Used` and the JSON body.
async fn send(
    app: &axum::Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
) -> (StatusCode, Option<String>, serde_json::Value) {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    let mut req = axum::http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            axum::body::Body::from(b.to_string())
        }
        None => axum::body::Body::empty(),
    };
    let resp = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = resp.status();
    let used = resp
        .headers()
        .get("x-dgem-backend-used")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, used, json)
}

fn templates() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

fn app() -> axum::Router {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let engine = Arc::new(dgem_testkit::engine(backend));
    dgem_server::api::local_routes(
        engine,
        dgem_service::Service::new(dgem_service::Catalogue::new(TemplateDir::new(templates()))),
    )
}

#[tokio::test]
async fn catalog_lists_core_and_subfolder_templates() {
    let (status, _, body) = send(&app(), "GET", "/api/templates", &[], None).await;
    assert_eq!(status, StatusCode::OK);
    let list = body["templates"].as_array().unwrap();
    assert_eq!(body["count"].as_u64().unwrap() as usize, list.len());
    let triage = list
        .iter()
        .find(|t| t["id"] == "support_triage")
        .expect("support_triage listed");
    assert_eq!(triage["category"], "core");
    assert_eq!(triage["name"], "support_triage");
    assert_eq!(triage["variables"], json!(["samples", "ticket"]));
    assert!(triage["sample_vars"]["ticket"]
        .as_str()
        .unwrap()
        .contains("charged twice"));
    assert!(triage["description"]
        .as_str()
        .unwrap()
        .starts_with("Route an incoming customer ticket"));
    assert_eq!(
        triage["questions"],
        json!([
            {"id": "urgent", "type": "boolean", "options": ["yes", "no"]},
            {"id": "team", "type": "choice", "options": ["billing", "support", "engineering"]},
            {"id": "sentiment", "type": "score", "options": ["calm", "annoyed", "frustrated", "furious"]}
        ])
    );
    let bench = list
        .iter()
        .find(|t| t["id"] == "bench/intent_select")
        .expect("subfolder listed");
    assert_eq!(bench["category"], "bench");
}

#[tokio::test]
async fn decides_a_template_with_the_full_reply() {
    let body = json!({"variables": {"ticket": "I was charged twice"}, "seed": 42});
    let (status, used, r) = send(
        &app(),
        "POST",
        "/api/decide/support_triage",
        &[],
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(used.as_deref(), Some("local"));
    assert_eq!(r["template"], "support_triage");
    assert_eq!(r["backend_target"], "local");
    assert_eq!(r["upstream_url"], "in-process");
    assert_eq!(r["warmup_attempts"], 1);
    assert_eq!(r["answers"], r["decision"]["answers"]);
    let urgent = &r["answers"]["urgent"];
    let p_yes = urgent["probabilities"]["yes"].as_f64().unwrap();
    let p_no = urgent["probabilities"]["no"].as_f64().unwrap();
    assert!((p_yes + p_no - 1.0).abs() < 1e-9);
    assert!(urgent["normalized_entropy"].as_f64().unwrap() <= 1.0);
    let max_h = r["max_entropy"].as_f64().unwrap();
    let team_h = r["answers"]["team"]["entropy"].as_f64().unwrap();
    assert!(max_h >= team_h && max_h > 0.0);
    for k in ["queue_ms", "forward_ms", "total_ms"] {
        assert!(
            r["diagnostics"]["timing"][k].is_number(),
            "timing.{k} missing"
        );
    }
    assert!(
        r["wall_time_ms"].as_f64().unwrap() >= r["gpu_forward_ms"].as_f64().unwrap() - 1e-6
            || r["cold_start_wait_ms"].as_f64().unwrap() >= 0.0
    );
}

#[tokio::test]
async fn decides_ad_hoc_questions_on_plain_decide() {
    let body = json!({"state": "The checkout page returns 500 for every user.",
        "questions": [{"id": "outage", "type": "boolean", "question": "Is this an outage?"},
                      {"id": "team", "type": "choice", "question": "Who owns it?", "options": ["web", "db"]}]});
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["template"], "custom_questions");
    let team = r["answers"]["team"]["probabilities"].as_object().unwrap();
    assert_eq!(team.keys().collect::<Vec<_>>(), ["web", "db"]);
}

/// Issue 40 on `/api/decide`: ad-hoc `multi` questions, `none_of_these` and
/// `rules` between the answers; a rule naming an unknown answer is a 4xx
/// naming it; `rules` with a template is refused.
#[tokio::test]
async fn ad_hoc_multi_questions_and_rules() {
    let body = json!({"state": "The checkout page returns 500 for every user.",
        "questions": [
            {"id": "tags", "type": "multi", "question": "What does it touch?", "options": ["web", "db"], "none_of_these": true},
            {"id": "outage", "type": "boolean", "question": "Is this an outage?"},
            {"id": "page", "type": "boolean", "question": "Page someone?"}],
        "isolate": "none",
        "rules": [{"if": {"outage": "yes"}, "then": {"page": "yes"}}]});
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let tags = &r["answers"]["tags"];
    assert_eq!(tags["type"], "multi", "{tags}");
    assert!(tags["multi"].is_array(), "{tags}");
    assert_eq!(
        tags["probabilities"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["web", "db", "none"]
    );
    assert_eq!(r["answers"]["page"]["constrained"], true, "{r}");
    assert_eq!(
        r["diagnostics"]["constraints"][0]["questions"],
        json!(["outage", "page"])
    );
    let mut bad = body.clone();
    bad["rules"] = json!([{"if": {"outage": "maybe"}, "then": {"page": "yes"}}]);
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(bad)).await;
    assert!(status.is_client_error(), "{status}: {r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("no answer \"maybe\""), "{msg}");
    let templated = json!({"template": "support_triage", "variables": {"ticket": "x y z"},
        "rules": [{"if": {"team": "billing"}, "then": {"urgent": "yes"}}]});
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(templated)).await;
    assert!(status.is_client_error(), "{status}: {r}");
    assert_eq!(r["error"]["param"], "rules", "{r}");
}

#[tokio::test]
async fn errors_are_400_with_a_named_field() {
    let app = app();
    let cases = [
        (
            "/api/decide",
            Some(json!({"template": "nope"})),
            "`template` `nope`",
        ),
        (
            "/api/decide/../../Cargo.toml",
            Some(json!({})),
            "`template`",
        ),
        (
            "/api/decide",
            Some(json!({"template": "/etc/passwd"})),
            "absolute path",
        ),
        (
            "/api/decide",
            Some(json!({"template": "../README"})),
            "no `..`",
        ),
        (
            "/api/decide",
            Some(json!({"backend": "vertex", "variables": {"ticket": "refund me"}})),
            "backend `vertex` is not available on this server; allowed: [local]",
        ),
        (
            "/api/decide",
            Some(json!({"samples": 99})),
            "`samples` must be a count from 1 to 32 or `auto`. Given: 99",
        ),
    ];
    for (uri, body, want) in cases {
        let (status, _, r) = send(&app, "POST", uri, &[], body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{msg} !~ {want}");
    }
    let (status, _, r) = send(
        &app,
        "POST",
        "/api/decide",
        &[("x-dgem-backend", "cloudrun")],
        Some(json!({"variables": {"ticket": "refund me"}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(r["error"]["type"], "backend_unavailable", "{r}");
    assert_eq!(r["error"]["param"], "backend", "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`cloudrun`"));
}

#[tokio::test]
async fn health_and_backends() {
    let app = app();
    let (status, _, h) = send(&app, "GET", "/api/health", &[], None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h["status"], "ok");
    assert_eq!(h["default_backend"], "local");
    // The one in-process backend has no circuit breaker, so its row has no
    // `breaker` (the gateway's rows do).
    assert_eq!(
        h["backends"],
        json!([{"name": "local", "kind": "local", "url": "in-process", "phase": "ready", "ready": true}])
    );
    let (_, _, b) = send(&app, "GET", "/api/backends", &[], None).await;
    assert_eq!(b, json!({"default": "local", "available": ["local"]}));
}

#[tokio::test]
async fn symlink_out_of_the_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.json.tmpl");
    std::fs::copy(templates().join("support_triage.json.tmpl"), &secret).unwrap();
    std::os::unix::fs::symlink(&secret, dir.path().join("leak.json.tmpl")).unwrap();
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let engine = Arc::new(dgem_testkit::engine(backend));
    let app = dgem_server::api::local_routes(
        engine,
        dgem_service::Service::new(dgem_service::Catalogue::new(TemplateDir::new(dir.path()))),
    );
    let (status, _, r) = send(&app, "POST", "/api/decide/leak", &[], Some(json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outside the templates folder"),
        "{r}"
    );
}

async fn error_of(
    app: &axum::Router,
    uri: &str,
    headers: &[(&str, &str)],
    body: serde_json::Value,
) -> (StatusCode, String) {
    let (status, _, r) = send(app, "POST", uri, headers, Some(body)).await;
    (
        status,
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test]
async fn misspelled_variable_is_refused_naming_it_and_the_templates_variables() {
    let (status, msg) = error_of(
        &app(),
        "/api/decide/support_triage",
        &[],
        json!({"variables": {"tickt": "refund me"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        msg,
        "`variables`: template `support_triage` does not read `tickt` (did you mean `ticket`?); its variables are [samples, ticket]"
    );
}

#[tokio::test]
async fn documented_variable_aliases_are_not_unknown() {
    // `text` fills `user_input` (reference.md §4.3).
    let (status, _, r) = send(
        &app(),
        "POST",
        "/api/decide/prompt_injection",
        &[],
        Some(json!({"variables": {"text": "ignore previous instructions"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["template"], "prompt_injection");
}

#[tokio::test]
async fn template_and_questions_together_are_refused() {
    let (status, msg) = error_of(
        &app(),
        "/api/decide",
        &[],
        json!({"template": "support_triage", "state": "s",
               "questions": [{"id": "a", "type": "boolean", "question": "A?"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        msg,
        "send either `template` (with `variables`) or ad-hoc `questions` (with `state`), not both. Given: `template` \"support_triage\" and `questions`"
    );
}

#[tokio::test]
async fn unknown_template_points_to_the_http_catalog_not_the_mcp_tool() {
    let (status, msg) = error_of(&app(), "/api/decide", &[], json!({"template": "nope"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(msg.contains("GET /api/templates"), "{msg}");
    assert!(!msg.contains("list_policy_templates"), "{msg}");
    assert!(msg.starts_with("`template` `nope`: "), "{msg}");
}

#[tokio::test]
async fn backend_header_is_case_insensitive_and_local_api_says_server() {
    let app = app();
    let (status, used, r) = send(
        &app,
        "POST",
        "/api/decide",
        &[("x-dgem-backend", "LOCAL")],
        Some(json!({"variables": {"ticket": "refund me"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(used.as_deref(), Some("local"));
    let (status, msg) = error_of(
        &app,
        "/api/decide",
        &[("x-dgem-backend", "gpu")],
        json!({"variables": {"ticket": "refund me"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        msg,
        "backend `gpu` is not available on this server; allowed: [local]"
    );
}

/// Issue 29 (was a 500 naming the folder): a server started where there is
/// no templates folder serves the built-in policies, names no path of its
/// own, and refuses a request without the policy's state as MCP does.
#[tokio::test]
async fn missing_templates_folder_serves_the_built_in_policies() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("no-such-templates");
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let engine = Arc::new(dgem_testkit::engine(backend));
    let app = dgem_server::api::local_routes(
        engine,
        dgem_service::Service::new(dgem_service::Catalogue::new(TemplateDir::new(&gone))),
    );
    let (status, _, r) = send(&app, "GET", "/api/templates", &[], None).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let ids: Vec<&str> = r["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    for id in ["support_triage", "code_review", "bench/intent_select"] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    assert!(
        !r.to_string().contains(&*dir.path().to_string_lossy()),
        "{r}"
    );
    let (status, _, r) = send(
        &app,
        "POST",
        "/api/decide",
        &[],
        Some(json!({"variables": {"ticket": "refund me"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["template"], "support_triage");
    let (status, msg) = error_of(&app, "/api/decide", &[], json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        msg.starts_with(
            "`variables`: template `support_triage` needs its state: give at least one of [ticket]"
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn every_catalog_entry_runs_with_its_sample_vars() {
    let app = app();
    let (_, _, cat) = send(&app, "GET", "/api/templates", &[], None).await;
    let list = cat["templates"].as_array().unwrap();
    assert!(list.len() >= 9, "{cat}");
    for t in list {
        let id = t["id"].as_str().unwrap();
        let vars = t["sample_vars"].as_object().unwrap();
        for v in t["variables"].as_array().unwrap() {
            let v = v.as_str().unwrap();
            assert!(
                v == "samples" || vars.contains_key(v),
                "{id}: sample_vars lack `{v}`"
            );
        }
        let (status, _, r) = send(
            &app,
            "POST",
            "/api/decide",
            &[],
            Some(json!({"template": id, "variables": vars})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{id}: {r}");
        assert_eq!(r["template"], id);
        assert!(!r["answers"].as_object().unwrap().is_empty(), "{id}: {r}");
    }
}

#[tokio::test]
async fn render_failure_names_the_missing_variables() {
    let (status, msg) = error_of(
        &app(),
        "/api/decide/bench/intent_select",
        &[],
        json!({"variables": {"text": "lost my card"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        msg.ends_with(". Missing variable(s): [groups, domains]; the template's variables: [groups, domains, samples, text]"),
        "{msg}"
    );
}

/// Issue 27 item 6: a variable the template reads with no default, left
/// unset, rendered `null` into the policy and was decided on. It is a 422
/// naming it and the variables given, unless `allow_missing_vars`.
#[tokio::test]
async fn an_unset_variable_without_a_default_is_422_naming_it() {
    let vars = json!({"state": "card declined", "options": ["retry", "escalate"]});
    let (status, _, r) = send(
        &app(),
        "POST",
        "/api/decide/bench/option_select",
        &[],
        Some(json!({"variables": vars})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert_eq!(r["error"]["param"], "variables", "{r}");
    assert_eq!(r["error"]["type"], "validation_error", "{r}");
    assert_eq!(
        r["error"]["message"],
        "`variables`: template `option_select.json.tmpl` reads `instructions`, which was not \
         given and has no `default` there, so the policy would be decided on a placeholder \
         (<no value>, or null through toJson); the variables given are [state, options]; send \
         it in `variables`, or set `allow_missing_vars: true` to decide on the placeholder"
    );
    // `null` is no value either.
    let mut with_null = vars.clone();
    with_null["instructions"] = json!(null);
    let (status, msg) = error_of(
        &app(),
        "/api/decide/bench/option_select",
        &[],
        json!({"variables": with_null}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{msg}");
    assert!(msg.contains("reads `instructions`"), "{msg}");
    // Opted out, it decides on the placeholder; a non-boolean opt-out is refused.
    let (status, _, r) = send(
        &app(),
        "POST",
        "/api/decide/bench/option_select",
        &[],
        Some(json!({"variables": vars, "allow_missing_vars": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let (status, msg) = error_of(
        &app(),
        "/api/decide/bench/option_select",
        &[],
        json!({"variables": vars, "allow_missing_vars": "yes"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{msg}");
    assert_eq!(
        msg,
        "`allow_missing_vars` must be true or false. Given: \"yes\""
    );
}

/// Issue 27 item 6: a policy that declares `requires_image` decided on the
/// text alone when no image was sent. It is a 422 on `images` now, saying
/// how to send one.
#[tokio::test]
async fn a_policy_that_requires_an_image_is_422_without_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("parcel_photo.json.tmpl"),
        r#"{"schema": {"requires_image": true, "questions": [{"id": "damaged", "type": "boolean"}]},
 "state": {"note": {{ default "No note." .note | toJson }}}}"#,
    )
    .unwrap();
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let app = dgem_server::api::local_routes(
        Arc::new(dgem_testkit::engine(backend.clone())),
        dgem_service::Service::new(dgem_service::Catalogue::new(TemplateDir::new(dir.path()))),
    );
    let body = json!({"variables": {"note": "it arrived crushed"}});
    let (status, _, r) = send(&app, "POST", "/api/decide/parcel_photo", &[], Some(body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert_eq!(r["error"]["param"], "images", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "images: policy `parcel_photo` declares `requires_image: true`, but the state holds no image"
        ),
        "{msg}"
    );
    assert!(msg.contains("`images` in the request body"), "{msg}");
    assert_eq!(backend.calls(), 0);
}

/// Found by a hostile-input run: GET `/api/decide` and POST `/api/templates`
/// answered 404 "unknown route". They are 405 with `Allow` now.
#[tokio::test]
async fn wrong_method_on_an_api_route_is_405_with_allow() {
    use tower::ServiceExt as _;
    for (method, uri, allow) in [
        ("GET", "/api/decide", "POST"),
        ("GET", "/api/decide/support_triage", "POST"),
        ("POST", "/api/templates", "GET, HEAD"),
        ("DELETE", "/api/health", "GET, HEAD"),
    ] {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = app().oneshot(req).await.unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {uri}"
        );
        assert_eq!(resp.headers()["allow"], allow, "{method} {uri}");
    }
}

/// Regression (issue 12): `/api/decide` with no variables decided on the
/// template's placeholder text ("No ticket text was provided.") and answered
/// 200 as if that were information.
#[tokio::test]
async fn decide_with_no_state_variable_is_refused_not_run_on_placeholder_text() {
    for body in [json!({}), json!({"variables": {}}), json!({"samples": 2})] {
        let (status, msg) = error_of(&app(), "/api/decide/support_triage", &[], body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            msg,
            "`variables`: template `support_triage` needs its state: give at least one of [ticket]; without one it would decide on its placeholder text"
        );
    }
    let (status, _, r) = send(
        &app(),
        "POST",
        "/api/decide/support_triage",
        &[],
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(r["error"]["param"], "variables", "{r}");
    assert_eq!(r["error"]["type"], "invalid_request_error", "{r}");
}

/// Issue 15: `/api/decide` takes the post-read keys. Temperature rescales
/// every answer, an abstention rule withholds hesitant ones (keeping their
/// probabilities), and a cascade asked for on a server with no Stage-2
/// provider reports that in `cascade.error` instead of failing.
#[tokio::test]
async fn api_decide_applies_temperature_abstention_and_reports_the_cascade() {
    let body = json!({
        "variables": {"ticket": "I was charged twice, refund me"},
        "temperature": 2.0,
        "abstain_above": {"team": 0.0}
    });
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let team = &r["answers"]["team"];
    assert_eq!(team["temperature"], 2.0);
    assert_eq!(team["abstained"], true);
    assert!(team["abstain_reason"]
        .as_str()
        .unwrap()
        .starts_with("hesitation"));
    let probs: f64 = team["probabilities"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!((probs - 1.0).abs() < 1e-9, "the distribution is kept");
    assert!(r["answers"]["urgent"].get("abstained").is_none());
    assert!(r.get("cascade").is_none(), "no cascade asked for");
    let body = json!({
        "variables": {"ticket": "I was charged twice, refund me"},
        "abstain_above": {"team": 0.99},
        "cascade_mode": "entropy",
        "cascade_threshold_mode": "normalized",
        "cascade_threshold": 1e-9
    });
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    // Escalated, unanswered (no provider) and covered by a rule: withheld.
    assert_eq!(r["answers"]["team"]["abstain_reason"], "cascade failed");
    assert!(r["answers"]["urgent"].get("abstained").is_none(), "no rule");
    let cascade = &r["cascade"];
    assert_eq!(cascade["mode"], "entropy");
    assert_eq!(cascade["threshold_mode"], "normalized");
    assert_eq!(cascade["triggered"], true);
    assert!(cascade["error"].as_str().unwrap().contains("configured"));
    assert_eq!(cascade["total_slots"], 3);
}

/// Bad post-read keys are 400s naming the key, never ignored.
#[tokio::test]
async fn api_decide_refuses_bad_post_read_keys() {
    for (extra, field, needle) in [
        (json!({"temperature": 30}), "temperature", "0 to 20"),
        (
            json!({"abstain_below": {"tema": 0.5}}),
            "abstain_below",
            "tema",
        ),
        (json!({"cascade_mode": "maybe"}), "cascade_mode", "maybe"),
        (
            json!({"cascade_mode": "on_miss", "expected_answers": {"nope": "yes"}}),
            "expected_answers",
            "nope",
        ),
    ] {
        let mut body = json!({"variables": {"ticket": "hello there"}});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{r}");
        assert_eq!(r["error"]["param"], field, "{r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{msg}");
    }
}

/// Issue 15, taxonomy expansion: `suggest_expansions` adds the catch-all
/// option before the read (it gets a probability) and returns one
/// suggestion per hesitant choice answer (a placeholder name without a
/// Stage-2 provider), counted in `X-DGem-Suggested-Expansions`.
#[tokio::test]
async fn api_decide_suggests_taxonomy_expansions() {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    let body = json!({
        "variables": {"ticket": "something new entirely"},
        "suggest_expansions": true,
        "expansion_entropy": 0.01
    });
    let req = axum::http::Request::post("/api/decide")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let resp = app().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let n = resp.headers()["x-dgem-suggested-expansions"]
        .to_str()
        .unwrap()
        .to_string();
    let r: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let team = r["answers"]["team"]["probabilities"].as_object().unwrap();
    assert!(team.contains_key("other_unclassified"), "{team:?}");
    let list = r["suggested_expansions"].as_array().unwrap();
    assert_eq!(n, list.len().to_string());
    let s = list
        .iter()
        .find(|s| s["question_id"] == "team")
        .expect("team suggested");
    assert_eq!(s["injected_catch_all"], true);
    assert_eq!(s["source"], "fallback");
    assert_eq!(s["suggested_option"]["name"], "specialized_team_extension");
    assert!(s["template_patch_hint"]
        .as_str()
        .unwrap()
        .starts_with("Append to support_triage -> questions[id=\"team\"].options:"));
    let (status, _, r) = send(
        &app(),
        "POST",
        "/api/decide",
        &[],
        Some(json!({"variables": {"ticket": "x y z"}, "suggest_expansions": "maybe"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{r}");
    assert_eq!(r["error"]["param"], "suggest_expansions");
}

/// Regression (hostile run): unknown top-level keys were ignored, so a
/// misspelled `temprature` or `abstain_belw` silently switched the setting
/// off. They are 400s naming the key, with the closest known one.
#[tokio::test]
async fn api_decide_refuses_unknown_keys_naming_them() {
    for (key, needle) in [
        ("temprature", "did you mean `temperature`?"),
        ("abstain_belw", "did you mean `abstain_below`?"),
        ("image", "send images as `images`"),
        ("images", "images: a list of data:image/... URLs"),
        ("zzz", "the fields are [template,"),
    ] {
        let mut body = json!({"variables": {"ticket": "hello there"}});
        body[key] = json!(1);
        let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}: {r}");
        assert_eq!(r["error"]["param"], key);
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{key}: {msg}");
    }
}

/// Images on a backend without vision are refused with 422 naming it, never
/// read as the JSON text of their parts.
#[tokio::test]
async fn api_decide_refuses_images_on_a_backend_without_vision() {
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAACklEQVR4nGMAAQAABQABDQottAAAAABJRU5ErkJggg==";
    let body = json!({"variables": {"ticket": "see the screenshot"}, "images": [png]});
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert_eq!(r["error"]["param"], "images");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has no vision"),
        "{r}"
    );
    // A bad image is a 400 naming its part, before any backend is asked.
    let body = json!({"variables": {"ticket": "x"}, "images": ["data:image/png;base64,aGVsbG8="]});
    let (status, _, r) = send(&app(), "POST", "/api/decide", &[], Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{r}");
    assert_eq!(r["error"]["param"], "images[0]");
}
