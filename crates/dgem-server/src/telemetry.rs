//! Metrics (Prometheus, prefix `dgem_`, units in the names) and the per-request
//! tracing span. Metric names and bucket setup live here and nowhere else.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use dgem_core::schema::QuestionKind;
use dgem_engine::Decision;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::field::Empty;
use tracing::Instrument;

/// Requests by `route` and `status`.
pub const HTTP_REQUESTS: &str = "dgem_http_requests_total";
/// Request latency by `route` and `status`.
pub const HTTP_DURATION: &str = "dgem_http_request_duration_seconds";
/// Finished decisions by `route`, `policy` and `outcome` (`ok` or the error type).
pub const DECISIONS: &str = "dgem_decisions_total";
/// Hesitation (normalized entropy, H / ln K) of each answer, by `policy` and
/// `question_type`.
pub const HESITATION: &str = "dgem_hesitation";
/// Always 1, labelled with the build and the model served: `version`,
/// `revision`, `engine`, `model`.
pub const BUILD_INFO: &str = "dgem_build_info";
/// The `policy` label of a decision on ad-hoc questions (no template).
pub const AD_HOC_POLICY: &str = "ad_hoc";
/// Answered questions by `question_type` (`noul`, `choice`, `score`).
pub const QUESTIONS: &str = "dgem_questions_total";
/// Hesitation (normalized entropy, H / ln K) of each answer, by `question_type`.
pub const NORMALIZED_ENTROPY: &str = "dgem_normalized_entropy";
/// Wall time of one decision.
pub const DECISION_DURATION: &str = "dgem_decision_duration_seconds";
/// Time in the model per decision.
pub const FORWARD_DURATION: &str = "dgem_backend_forward_duration_seconds";
/// Time waiting, by `stage` (`gate`: the `MAX_INFLIGHT` slot; `backend`: its queue).
pub const QUEUE_WAIT: &str = "dgem_queue_wait_seconds";
/// Decisions running now.
pub const INFLIGHT: &str = "dgem_inflight_decisions";
/// Prompt tokens read per decision (longest read).
pub const PROMPT_TOKENS: &str = "dgem_decision_prompt_tokens";
/// Tokens served from the prefix KV cache per decision.
pub const CACHED_TOKENS: &str = "dgem_decision_cached_tokens";

const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const ENTROPY_BUCKETS: &[f64] = &[0.05, 0.1, 0.16, 0.25, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 1.0];
const TOKEN_BUCKETS: &[f64] = &[
    16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];

fn builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(NORMALIZED_ENTROPY.into()), ENTROPY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(HESITATION.into()), ENTROPY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Suffix("_tokens".into()), TOKEN_BUCKETS)
}

/// The process-wide Prometheus handle; installs the recorder on first call. If
/// another recorder is already installed, `/metrics` stays empty (logged once).
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = builder().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "metric buckets rejected; using summaries");
                PrometheusBuilder::new()
            });
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder is already installed; /metrics will be empty");
            } else {
                describe();
            }
            handle
        })
        .clone()
}

/// `# HELP` text for every series (Prometheus' `promtool check metrics` wants
/// one per metric), the gateway's included.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by route and status."
    );
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "HTTP request latency, by route and status."
    );
    describe_counter!(
        DECISIONS,
        "Finished decisions, by route and outcome (ok or the error type)."
    );
    describe_counter!(QUESTIONS, "Answered questions, by question type.");
    describe_histogram!(
        NORMALIZED_ENTROPY,
        "Hesitation of each answer: entropy of the restricted softmax over its labels divided by ln K (0 = certain, 1 = uniform), by question type."
    );
    describe_histogram!(
        DECISION_DURATION,
        Unit::Seconds,
        "Wall time of one decision."
    );
    describe_histogram!(
        FORWARD_DURATION,
        Unit::Seconds,
        "Model time of one decision."
    );
    describe_histogram!(
        QUEUE_WAIT,
        Unit::Seconds,
        "Waiting time, by stage: gate (a MAX_INFLIGHT slot) or backend (the model queue)."
    );
    describe_gauge!(INFLIGHT, "Decisions running now.");
    describe_histogram!(
        HESITATION,
        "Hesitation (normalized entropy, entropy / ln K, 0 to 1) of each answer, by policy and question type."
    );
    describe_gauge!(
        BUILD_INFO,
        "Always 1; its labels name the build (version, revision) and the model served (engine, model)."
    );
    describe_histogram!(
        PROMPT_TOKENS,
        "Prompt tokens of the longest read of a decision."
    );
    describe_histogram!(
        CACHED_TOKENS,
        "Prompt tokens served from the prefix KV cache, per decision."
    );
    describe_counter!(
        "dgem_gateway_attempts_total",
        "Gateway attempts on a replica, by backend and outcome (ok, failover, warming, rejected)."
    );
    describe_counter!(
        "dgem_gateway_errors_total",
        "Gateway requests that failed, by error type."
    );
    describe_counter!(
        dgem_cascade::after::ABSTAINED_METRIC,
        "Answers withheld by an abstention rule, by question type and reason (hesitation, confidence, cascade_failed, low_information)."
    );
    describe_counter!(
        dgem_cascade::after::ESCALATED_METRIC,
        "Answers escalated to the Stage-2 model, by outcome (resolved, failed)."
    );
}

/// Set the in-flight gauge.
pub(crate) fn set_inflight(n: usize) {
    gauge!(INFLIGHT).set(n as f64);
}

/// Record the gate wait of one request.
pub(crate) fn record_gate_wait(seconds: f64) {
    histogram!(QUEUE_WAIT, "stage" => "gate").record(seconds);
}

/// The `policy` label of a schema: its template's name, else [`AD_HOC_POLICY`].
pub fn policy_label(schema: &dgem_core::schema::ValidSchema) -> String {
    schema
        .policy
        .clone()
        .unwrap_or_else(|| AD_HOC_POLICY.to_owned())
}

/// Set [`BUILD_INFO`] for this build and `info`'s model.
pub fn set_build_info(version: &str, revision: &str, info: &dgem_backend::BackendInfo) {
    gauge!(BUILD_INFO, "version" => version.to_owned(), "revision" => revision.to_owned(),
        "engine" => info.runtime.clone(), "model" => info.model_id.clone())
    .set(1.0);
}

/// Record a finished decision (answers, entropy, timings, tokens).
pub(crate) fn record_decision(route: &'static str, policy: &str, d: &Decision) {
    counter!(DECISIONS, "route" => route, "policy" => policy.to_owned(), "outcome" => "ok")
        .increment(1);
    for a in d.answers.values().flatten() {
        let t = kind_label(a.question.kind);
        let h = a.aggregate.normalized_entropy;
        counter!(QUESTIONS, "question_type" => t).increment(1);
        histogram!(NORMALIZED_ENTROPY, "question_type" => t).record(h);
        histogram!(HESITATION, "policy" => policy.to_owned(), "question_type" => t).record(h);
    }
    let timing = &d.diagnostics.timing;
    histogram!(DECISION_DURATION).record(timing.total_ms / 1e3);
    histogram!(FORWARD_DURATION).record(timing.forward_ms / 1e3);
    histogram!(QUEUE_WAIT, "stage" => "backend").record(timing.queue_ms / 1e3);
    histogram!(PROMPT_TOKENS).record(d.diagnostics.prompt_tokens.unwrap_or(0) as f64);
    histogram!(CACHED_TOKENS).record(d.diagnostics.cached_tokens as f64);
}

/// Record a decision that failed after validation.
pub(crate) fn record_failed_decision(route: &'static str, policy: &str, error_type: &'static str) {
    counter!(DECISIONS, "route" => route, "policy" => policy.to_owned(), "outcome" => error_type)
        .increment(1);
}

fn kind_label(k: QuestionKind) -> &'static str {
    k.wire_name()
}

/// Middleware: one `request` span per request (route, status, question count,
/// timings recorded by the handlers), plus request count and latency metrics
/// by route template (`unmatched` for a request no route took).
pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().clone();
    let span = tracing::info_span!(
        "request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        %method,
        route = %route,
        status = Empty,
        questions = Empty,
        queue_ms = Empty,
        forward_ms = Empty,
        decide_ms = Empty,
        reads = Empty,
    );
    let started = Instant::now();
    let resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status().as_u16();
    let elapsed = started.elapsed().as_secs_f64();
    span.record("status", status);
    let status = status.to_string();
    counter!(HTTP_REQUESTS, "route" => route.clone(), "status" => status.clone()).increment(1);
    histogram!(HTTP_DURATION, "route" => route.clone(), "status" => status.clone()).record(elapsed);
    span.in_scope(|| {
        tracing::debug!(route = %route, status = %status, ms = elapsed * 1e3, "request done");
    });
    resp
}

/// `GET /metrics` (Prometheus text) over the process-wide recorder, for a
/// listener that is not `dgem serve` (`dgem gateway` merges it). Installs the
/// recorder now, so counters from the first request on are kept (a counter
/// incremented before the recorder exists goes nowhere).
pub fn metrics_router() -> axum::Router {
    let h = handle();
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = h.render();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    text,
                )
            }
        }),
    )
}
