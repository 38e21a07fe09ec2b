//! OpenTelemetry traces of decisions, exported over OTLP/HTTP (protobuf)
//! through `tracing-opentelemetry` and `opentelemetry-otlp`.
//!
//! Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; then every `tracing` span at
//! `info` or above also becomes an OpenTelemetry span, named as the original
//! dgem named them where one exists (the `otel.name` field of the span):
//!
//! | span | where |
//! | :-- | :-- |
//! | `POST /v1/chat/completions` (route template) | each HTTP request, kind server |
//! | `dgem.gateway.decide` | the gateway's routing and failover |
//! | `dgem.gateway.cold_start_backoff` | the wait before retrying a cold backend |
//! | `dgem.template.render` | rendering a policy template |
//! | `dgem.orchestrate` | one decision: every stage and part |
//! | `dgem.forward_pass` | one model call (a read of one canvas) |
//! | `dgem.cascade` | the Stage-2 pass over hesitant answers |
//!
//! The standard variables apply: `OTEL_SERVICE_NAME` (default `dgem`),
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`. Spans are sent
//! in batches from a background thread; the [`Guard`] flushes the rest when
//! the command ends, so a one-shot `dgem decide` exports its trace too.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

/// Variables that turn tracing on.
pub const ENDPOINT_VARS: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// Flushes and shuts the exporter down when dropped.
pub struct Guard(SdkTracerProvider);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("warning: OpenTelemetry: could not flush the last spans: {e}");
        }
    }
}

/// Whether an OTLP endpoint is configured.
pub fn enabled() -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// The tracing layer and its guard, when an endpoint is configured.
///
/// # Errors
/// The exporter could not be built (a malformed endpoint URL).
pub fn layer<S>() -> anyhow::Result<
    Option<(
        tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
        Guard,
    )>,
>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    if !enabled() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| {
            anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT: cannot build the OTLP exporter: {e}")
        })?;
    let service = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "dgem".to_string());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service)
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let tracer = provider.tracer("dgem");
    Ok(Some((
        tracing_opentelemetry::layer().with_tracer(tracer),
        Guard(provider),
    )))
}
