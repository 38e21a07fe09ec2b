//! Issue 27: every gateway route checks an upstream's 2xx reply against the
//! request. Two fake upstreams over real TCP on port 0, both healthy on
//! `/health`: `vertex` answers whatever reply a case sets, `cloudrun` a valid
//! decision. A reply that does not answer the request fails over to
//! `cloudrun` (mode `vertex_first`), and is a 502 naming the JSON path when
//! `vertex` is the only backend of the mode; a valid one comes back as sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/routes.rs"]
mod routes;

use std::sync::{Arc, Mutex};

use axum::routing::{get, post};
use axum::Router;
use dgem_gateway::RemoteConfig;
use proptest::prelude::*;
use routes::{answers, envelope_of, send, two_backends, u_yes, wire, Route, ROUTES};
use serde_json::{json, Map, Value};

/// What a case does to a valid reply.
#[derive(Debug, Clone)]
enum Fault {
    /// The body is this text, not JSON.
    NotJson(String),
    /// Question `q`'s answer is under another id.
    WrongId(usize, String),
    /// Option `o` of question `q` has no probability.
    MissingOption(usize, usize),
    /// Option `o` of question `q` is negative.
    Negative(usize, usize, f64),
    /// Option `o` of question `q` is a string.
    NonNumeric(usize, usize, String),
    /// Question `q`'s probabilities scaled by a factor away from 1.
    SumOff(usize, f64),
}

const IDS: [&str; 2] = ["u", "c"];

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        "[a-z ]{0,12}".prop_map(|s| Fault::NotJson(format!("not json at all {s}"))),
        (0usize..2, "[a-z]{1,6}").prop_map(|(q, id)| Fault::WrongId(q, format!("x_{id}"))),
        (0usize..2, 0usize..3).prop_map(|(q, o)| Fault::MissingOption(q, o)),
        (0usize..2, 0usize..3, 0.01f64..1.0).prop_map(|(q, o, p)| Fault::Negative(q, o, -p)),
        (0usize..2, 0usize..3, "[a-z0-9.]{0,5}").prop_map(|(q, o, s)| Fault::NonNumeric(q, o, s)),
        (0usize..2, prop_oneof![0.05f64..0.9, 1.1f64..3.0]).prop_map(|(q, f)| Fault::SumOff(q, f)),
    ]
}

/// A random valid reply: `u`'s yes and a distribution over the colours.
fn valid() -> impl Strategy<Value = (f64, [f64; 3])> {
    (0.0f64..=1.0, 0.01f64..1.0, 0.01f64..1.0, 0.01f64..1.0).prop_map(|(u, a, b, c)| {
        let s = a + b + c;
        (u, [a / s, b / s, c / s])
    })
}

/// The faulty reply of `route` and the JSON path its error must name.
fn faulty(
    route: Route,
    fault: &Fault,
    base: &Map<String, Value>,
) -> (&'static str, String, String) {
    let mut a = base.clone();
    let key = |q: usize, o: usize| -> String {
        let names: [&str; 3] = if q == 0 {
            ["yes", "no", "no"]
        } else {
            ["red", "green", "blue"]
        };
        names[o].to_string()
    };
    let probs = |a: &Map<String, Value>, q: usize| -> Map<String, Value> {
        a[IDS[q]]["probabilities"].as_object().unwrap().clone()
    };
    let path = match fault {
        Fault::NotJson(text) => return ("application/json", text.clone(), "$".into()),
        Fault::WrongId(q, other) => {
            let v = a.remove(IDS[*q]).unwrap();
            a.insert(other.clone(), v);
            format!("answers.{}", IDS[*q])
        }
        Fault::MissingOption(q, o) => {
            let mut p = probs(&a, *q);
            p.remove(&key(*q, *o));
            a[IDS[*q]]["probabilities"] = Value::Object(p);
            format!("answers.{}.probabilities", IDS[*q])
        }
        Fault::Negative(q, o, v) => {
            a[IDS[*q]]["probabilities"][key(*q, *o)] = json!(v);
            format!("answers.{}.probabilities", IDS[*q])
        }
        Fault::NonNumeric(q, o, s) => {
            a[IDS[*q]]["probabilities"][key(*q, *o)] = json!(s);
            format!("answers.{}.probabilities", IDS[*q])
        }
        Fault::SumOff(q, f) => {
            let p: Map<String, Value> = probs(&a, *q)
                .into_iter()
                .map(|(k, v)| (k, json!(v.as_f64().unwrap() * f)))
                .collect();
            a[IDS[*q]]["probabilities"] = Value::Object(p);
            format!("answers.{}.probabilities", IDS[*q])
        }
    };
    let (ctype, body) = wire(route, &a);
    (ctype, body, path)
}

type Slot = Arc<Mutex<(&'static str, String)>>;

/// A healthy upstream answering every POST with the reply in `slot`.
async fn upstream(slot: Slot) -> String {
    let reply = move || {
        let slot = slot.clone();
        async move {
            let (ctype, body) = slot.lock().unwrap().clone();
            ([("content-type", ctype)], body)
        }
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(reply.clone()))
        .route("/v1/systemone", post(reply))
        .route(
            "/health",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A fresh gateway (fresh breakers and retry budget) over `bad` (`vertex`)
/// then `good` (`cloudrun`), every setting at its default.
fn app(bad: &str, good: &str) -> Router {
    two_backends(
        bad,
        good,
        RemoteConfig::new,
        dgem_gateway::RouteConfig::default(),
    )
    .1
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    bad: Slot,
    good: Slot,
    bad_base: String,
    good_base: String,
}

fn fixture() -> Fixture {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bad: Slot = Arc::new(Mutex::new(("application/json", String::new())));
    let good: Slot = Arc::new(Mutex::new(("application/json", String::new())));
    let (bad_base, good_base) =
        rt.block_on(async { (upstream(bad.clone()).await, upstream(good.clone()).await) });
    Fixture {
        rt,
        bad,
        good,
        bad_base,
        good_base,
    }
}

/// The healthy secondary's reply: `u` no (0.8), `c` green.
fn good_answers() -> Map<String, Value> {
    answers(0.2, [0.1, 0.7, 0.2])
}

/// The `u` probability of yes in a reply body of `route` (chat, stream,
/// systemone or /api).
fn reads_u_yes(route: Route, body: &[u8]) -> f64 {
    u_yes(route, body).unwrap()
}

/// The `{answers, diagnostics}` of a reply body of `route`.
fn envelope(route: Route, body: &[u8]) -> Value {
    envelope_of(route, body).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// A faulty reply on any route fails over to the healthy secondary, and is
    /// a 502 naming the JSON path when the faulty backend is the only one.
    #[test]
    fn a_reply_that_does_not_answer_the_request_fails_over_on_every_route(
        fault in fault(), route in 0usize..4, (u, c) in valid()
    ) {
        let f = fixture_once(0);
        let route = ROUTES[route];
        let (ctype, body, path) = faulty(route, &fault, &answers(u, c));
        *f.bad.lock().unwrap() = (ctype, body);
        *f.good.lock().unwrap() = wire(route, &good_answers());
        let app = app(&f.bad_base, &f.good_base);
        let (status, used, body) = f.rt.block_on(send(&app, route, "vertex_first"));
        prop_assert_eq!(status, 200, "{:?}: {}", route, String::from_utf8_lossy(&body));
        prop_assert_eq!(used.as_str(), "cloudrun");
        prop_assert!((reads_u_yes(route, &body) - 0.2).abs() < 1e-9);
        let (status, _, body) = f.rt.block_on(send(&app, route, "vertex"));
        let v: Value = serde_json::from_slice(&body).unwrap();
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        prop_assert_eq!(status, 502, "{:?} {:?}: {}", route, fault, v);
        prop_assert!(msg.contains(&format!("decision reply at `{path}")), "{:?} {:?}: {}", route, fault, msg);
        prop_assert!(!msg.contains("not json at all"), "the upstream body leaked: {}", msg);
    }

    /// A valid reply is the primary's answer, as sent.
    #[test]
    fn a_valid_reply_is_passed_on_every_route((u, c) in valid(), route in 0usize..4) {
        let f = fixture_once(1);
        let route = ROUTES[route];
        *f.bad.lock().unwrap() = wire(route, &answers(u, c));
        *f.good.lock().unwrap() = wire(route, &good_answers());
        let app = app(&f.bad_base, &f.good_base);
        let (status, used, body) = f.rt.block_on(send(&app, route, "vertex_first"));
        prop_assert_eq!(status, 200, "{:?}: {}", route, String::from_utf8_lossy(&body));
        prop_assert_eq!(used.as_str(), "vertex");
        prop_assert!((reads_u_yes(route, &body) - u).abs() < 1e-6);
    }
}

/// One runtime and pair of upstreams per property (`which`), kept across
/// its cases; the properties run in parallel, so each has its own.
fn fixture_once(which: usize) -> &'static Fixture {
    static F: [std::sync::OnceLock<Fixture>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    F[which].get_or_init(fixture)
}

/// Regression: a primary answering 200 `not json at all` on the chat route
/// was passed to the caller as 200 `not json at all`.
#[test]
fn chat_route_fails_over_on_a_non_json_reply() {
    let f = fixture();
    *f.bad.lock().unwrap() = ("application/json", "not json at all".into());
    *f.good.lock().unwrap() = wire(Route::Chat, &good_answers());
    let app = app(&f.bad_base, &f.good_base);
    let (status, used, body) = f.rt.block_on(send(&app, Route::Chat, "vertex_first"));
    assert_eq!((status, used.as_str()), (200, "cloudrun"), "{body:?}");
    let (status, _, body) = f.rt.block_on(send(&app, Route::Chat, "vertex"));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("decision reply at `$`: not JSON"),
        "{v}"
    );
}

/// Regression: `/v1/systemone` passed a reply for other question ids as 200.
#[test]
fn systemone_route_fails_over_on_a_reply_for_other_ids() {
    let f = fixture();
    let mut other = good_answers();
    let c = other.remove("c").unwrap();
    other.insert("colour".into(), c);
    *f.bad.lock().unwrap() = wire(Route::SystemOne, &other);
    *f.good.lock().unwrap() = wire(Route::SystemOne, &good_answers());
    let app = app(&f.bad_base, &f.good_base);
    let (status, used, _) = f.rt.block_on(send(&app, Route::SystemOne, "vertex_first"));
    assert_eq!((status, used.as_str()), (200, "cloudrun"));
    let (status, _, body) = f.rt.block_on(send(&app, Route::SystemOne, "vertex"));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`answers.c`"),
        "{v}"
    );
}

/// Regression: a streamed chat reply was forwarded without a check; now the
/// assembled stream is checked before anything reaches the caller.
#[test]
fn streamed_chat_route_fails_over_on_a_sum_off_reply() {
    let f = fixture();
    *f.bad.lock().unwrap() = wire(Route::ChatStream, &answers(0.2, [0.1, 0.1, 0.1]));
    *f.good.lock().unwrap() = wire(Route::ChatStream, &good_answers());
    let app = app(&f.bad_base, &f.good_base);
    let (status, used, body) = f.rt.block_on(send(&app, Route::ChatStream, "vertex_first"));
    assert_eq!((status, used.as_str()), (200, "cloudrun"), "{body:?}");
    assert!((reads_u_yes(Route::ChatStream, &body) - 0.2).abs() < 1e-9);
}

/// The primary's reply to one request on `route` in mode `vertex` alone.
fn only_primary(route: Route, reply: (&'static str, String)) -> (u16, Value) {
    let f = fixture();
    *f.bad.lock().unwrap() = reply;
    let app = app(&f.bad_base, &f.good_base);
    let (status, used, body) = f.rt.block_on(send(&app, route, "vertex"));
    let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status == 200 {
        assert_eq!(used, "vertex", "{v}");
    }
    (status, v)
}

/// Regression (issue 27 item 2): an upstream rounding probabilities to two
/// decimals (sums 0.99) was a 502 under the 0.001 tolerance; it is
/// renormalized and recorded, on `/api/decide` and on the chat route.
#[test]
fn api_decide_renormalizes_probabilities_rounded_to_two_decimals() {
    let mut a = answers(0.5, [0.2, 0.3, 0.5]);
    a["u"]["probabilities"] = json!({"yes": 0.67, "no": 0.32});
    a["c"]["probabilities"] = json!({"red": 0.2, "green": 0.3, "blue": 0.51});
    let (status, v) = only_primary(Route::ApiDecide, wire(Route::ApiDecide, &a));
    assert_eq!(status, 200, "{v}");
    let r = &v["diagnostics"]["renormalized"];
    assert!((r["u"].as_f64().unwrap() - 0.99).abs() < 1e-9, "{v}");
    assert!((r["c"].as_f64().unwrap() - 1.01).abs() < 1e-9, "{v}");
    let (status, v) = only_primary(Route::Chat, wire(Route::Chat, &a));
    assert_eq!(status, 200, "{v}");
    a["u"]["probabilities"] = json!({"yes": 0.67, "no": 0.30});
    let (status, v) = only_primary(Route::Chat, wire(Route::Chat, &a));
    assert_eq!(status, 502, "{v}");
    assert!(v.to_string().contains("answers.u.probabilities"), "{v}");
}

/// Regression (issue 27 item 2): a `refusal` answer was a 502; it is an
/// abstention carrying the upstream's reason.
#[test]
fn api_decide_reads_a_refusal_as_an_abstention() {
    let mut a = answers(0.5, [0.2, 0.3, 0.5]);
    a["u"] = json!({"refusal": "not enough context"});
    let (status, v) = only_primary(Route::ApiDecide, wire(Route::ApiDecide, &a));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["u"]["abstained"], json!(true), "{v}");
    let reason = v["answers"]["u"]["abstain_reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("not enough context"), "{v}");
    let (status, v) = only_primary(Route::SystemOne, wire(Route::SystemOne, &a));
    assert_eq!(status, 200, "{v}");
}

/// Regression (issue 27 item 2): `success: false` was reported as "no
/// `answers`"; the 502 keeps the upstream's message.
#[test]
fn success_false_keeps_the_upstream_message_on_every_route() {
    let reply = r#"{"success": false, "error": {"message": "model crashed"}}"#;
    for route in ROUTES {
        let (status, v) = only_primary(route, ("application/json", reply.into()));
        assert_eq!(status, 502, "{route:?}: {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("`success`") && msg.contains("model crashed"),
            "{route:?}: {msg}"
        );
    }
}

/// Issue 27 item 2 on the pass-through routes: the chat (streamed or not) and
/// System One routes forwarded a reply rounded to two decimals as it was
/// (the check accepted it, but the caller got sums of 0.99 and no record);
/// the reply is now rewritten as `/api/decide`'s is: probabilities divided by
/// their sum and `diagnostics.renormalized` naming the sum received.
#[test]
fn pass_through_routes_renormalize_and_record_rounded_probabilities() {
    let mut a = answers(0.5, [0.2, 0.3, 0.5]);
    a["u"]["probabilities"] = json!({"yes": 0.67, "no": 0.32});
    for route in [Route::Chat, Route::ChatStream, Route::SystemOne] {
        let f = fixture();
        *f.bad.lock().unwrap() = wire(route, &a);
        let app = app(&f.bad_base, &f.good_base);
        let (status, used, body) = f.rt.block_on(send(&app, route, "vertex"));
        assert_eq!((status, used.as_str()), (200, "vertex"), "{route:?}");
        let env = envelope(route, &body);
        let yes = reads_u_yes(route, &body);
        assert!((yes - 0.67 / 0.99).abs() < 1e-9, "{route:?}: {env}");
        let sum = env["diagnostics"]["renormalized"]["u"].as_f64();
        assert!(
            sum.is_some_and(|s| (s - 0.99).abs() < 1e-9),
            "{route:?}: {env}"
        );
        // The answer that summed to 1 is as the upstream sent it.
        let red = env["answers"]["c"]["probabilities"]["red"].as_f64();
        assert_eq!(red, Some(0.2), "{route:?}: {env}");
    }
}

/// Issue 27 item 2 on the pass-through routes: a `refusal` entry reached the
/// caller of the chat and System One routes as it was; it is now the
/// decision's abstention, with the upstream's reason.
#[test]
fn pass_through_routes_turn_a_refusal_into_an_abstention() {
    let mut a = answers(0.5, [0.2, 0.3, 0.5]);
    a["u"] = json!({"refusal": "not enough context"});
    for route in [Route::Chat, Route::ChatStream, Route::SystemOne] {
        let f = fixture();
        *f.bad.lock().unwrap() = wire(route, &a);
        let app = app(&f.bad_base, &f.good_base);
        let (status, _, body) = f.rt.block_on(send(&app, route, "vertex"));
        assert_eq!(status, 200, "{route:?}");
        let env = envelope(route, &body);
        let u = &env["answers"]["u"];
        assert_eq!(u["abstained"], json!(true), "{route:?}: {env}");
        let reason = u["abstain_reason"].as_str().unwrap_or_default();
        assert!(reason.contains("not enough context"), "{route:?}: {env}");
        assert!(
            (reads_u_yes(route, &body) - 0.5).abs() < 1e-9,
            "{route:?}: {env}"
        );
    }
}
