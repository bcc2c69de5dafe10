//! OpenTelemetry traces of the gateway's requests, off unless `[tracing] otlp_endpoint` is
//! set.
//!
//! A span per MCP request ([`request_span`], target [`TARGET`]) continues the client's W3C
//! `traceparent`/`tracestate`; what happens inside it — the gate's store operations, the
//! module call — are its children, and the module is sent the context on
//! ([`inject`]). Spans carry names and outcomes only: never an argument, a token or a
//! payload. They leave through a bounded queue ([`install`]): an exporter that is down or
//! slow costs callers nothing; what did not fit is counted ([`dropped`]), and so is what
//! the collector refused ([`failed`]).
//!
//! Which requests are traced is decided here, `sample_ratio` of them spread evenly, whatever
//! the client's `traceparent` says; an untraced request (and every request with tracing
//! off) makes no span at all, nor do its store operations and module calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;

/// The target of the gateway's trace spans and span events (kept out of the log).
pub const TARGET: &str = "mcp_trace";

/// `[tracing]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceConfig {
    /// The collector's OTLP/HTTP traces URL (`http://…/v1/traces`).
    pub endpoint: String,
    /// The share of traces started here that are kept (a client's sampled decision is
    /// followed).
    pub sample_ratio: f64,
    /// `service.name`.
    pub service_name: String,
    /// More resource attributes.
    pub resource: Vec<(String, String)>,
    /// At most this many finished spans wait for the exporter; more are dropped (counted).
    pub max_queue: usize,
}

static DROPPED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
/// Whether an exporter is installed (no span is made without one).
static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The sample ratio's bits (an `f64`).
static RATIO: AtomicU64 = AtomicU64::new(0);
/// Requests seen, for the sampling decision.
static SEEN: AtomicU64 = AtomicU64::new(0);

/// Whether the next request is traced: `sample_ratio` of them, spread evenly, decided here
/// whatever the client's `traceparent` says (a client cannot have every call of its traced,
/// filling the queue other callers' spans wait in).
fn sampled() -> bool {
    let ratio = f64::from_bits(RATIO.load(Ordering::Relaxed));
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    let n = SEEN.fetch_add(1, Ordering::Relaxed) as f64;
    ((n + 1.0) * ratio).floor() > (n * ratio).floor()
}

/// The MCP methods a span may be named by; anything else is `other` (a client's text never
/// becomes a span's name).
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
];

/// A `tracestate` longer than this (or of more members) is not continued.
const MAX_TRACESTATE: usize = 512;

/// The client's `traceparent`, and its `tracestate` when that is of a sensible size.
struct Incoming<'a>(&'a http::HeaderMap);

impl opentelemetry::propagation::Extractor for Incoming<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self.0.get(key)?.to_str().ok()?;
        match key {
            "traceparent" => Some(value),
            "tracestate" if value.len() <= MAX_TRACESTATE && value.split(',').count() <= 32 => {
                Some(value)
            }
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Spans dropped because the export queue was full (the exporter down or slow).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Spans the collector did not take (the export failed or timed out).
pub fn failed() -> u64 {
    FAILED.load(Ordering::Relaxed)
}

/// The exporter's HTTP client: the gateway's own hyper, run on the gateway's runtime (the
/// batch processor exports from a thread of its own).
#[derive(Debug, Clone)]
struct HyperClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for HyperClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let exchange = async move {
            let (parts, body) = request.into_parts();
            let request = http::Request::from_parts(parts, Full::new(body));
            let response = client.request(request).await?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(parts, body))
        };
        let bounded = async move {
            tokio::time::timeout(EXPORT_TIMEOUT, exchange)
                .await
                .map_err(|_| -> opentelemetry_http::HttpError {
                    "the collector did not answer in time".into()
                })?
        };
        self.runtime.spawn(bounded).await?
    }
}

/// The batch processor behind a count of what waits: a span that finds the queue full is
/// dropped and counted instead of waiting.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    queued: Arc<AtomicUsize>,
    max: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter, counting what left the queue and what the collector did not take.
#[derive(Debug)]
struct Counting<E> {
    inner: E,
    queued: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counting<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.queued.fetch_sub(spans, Ordering::AcqRel);
        if result.is_err() {
            FAILED.fetch_add(spans as u64, Ordering::Relaxed);
        }
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Tracing as installed: shut it down to send what waits.
pub struct Installed {
    provider: SdkTracerProvider,
}

impl Installed {
    /// Sends the spans that wait (within a few seconds) and stops.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(target: "mcp_gateway", error = %e, "the trace exporter did not shut down cleanly");
        }
    }
}

/// The layer that turns spans into OpenTelemetry spans exported as `config` says, on
/// `runtime` (filter it to [`TARGET`]: [`only_traces`]); and the handle that stops it.
pub fn install<S>(
    config: &TraceConfig,
    runtime: tokio::runtime::Handle,
) -> Result<(Box<dyn Layer<S> + Send + Sync>, Installed), String>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
{
    let endpoint: http::Uri = config
        .endpoint
        .parse()
        .map_err(|_| format!("[tracing] otlp_endpoint {:?} is not a URL", config.endpoint))?;
    if endpoint.scheme_str() != Some("http") {
        return Err(format!(
            "[tracing] otlp_endpoint {:?} must be http:// (a collector on this machine or its network)",
            config.endpoint
        ));
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = HyperClient {
        client: Client::builder(TokioExecutor::new()).build(connector),
        runtime,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(config.endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("[tracing]: {e}"))?;
    let queued = Arc::new(AtomicUsize::new(0));
    let max = config.max_queue.max(1);
    let batch = BatchSpanProcessor::builder(Counting {
        inner: exporter,
        queued: queued.clone(),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            // Ours is the binding limit (and counts); the processor's own never fills.
            .with_max_queue_size(max + 512)
            .with_scheduled_delay(Duration::from_millis(500))
            .build(),
    )
    .build();
    let mut resource = Resource::builder().with_service_name(config.service_name.clone());
    for (key, value) in &config.resource {
        resource = resource.with_attribute(KeyValue::new(key.clone(), value.clone()));
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Bounded {
            inner: batch,
            queued,
            max,
        })
        // The requests traced are chosen when their span is made (`sampled`): every span
        // that exists is kept.
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource.build())
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let tracer = provider.tracer("mcp-gateway");
    RATIO.store(
        config.sample_ratio.clamp(0.0, 1.0).to_bits(),
        Ordering::Relaxed,
    );
    INSTALLED.store(true, Ordering::Release);
    // Names and outcomes only: no source locations, threads or busy/idle timings.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        // Parents are `tracing` spans: no OpenTelemetry context to attach at every poll.
        .with_context_activation(false);
    Ok((Box::new(layer), Installed { provider }))
}

/// The filter that gives the exporter the gateway's trace spans only.
pub fn only_traces() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE)
}

/// The span of one MCP request (`method`), continuing the client's trace from `headers`.
/// Its fields are filled as the request goes: `mcp.era`, `mcp.tool` (or the prompt or
/// resource), `mcp.module`, `mcp.outcome`.
pub fn request_span(headers: &http::HeaderMap, method: &str) -> tracing::Span {
    if !INSTALLED.load(Ordering::Acquire) || !sampled() {
        return tracing::Span::none();
    }
    let method = METHODS
        .iter()
        .copied()
        .find(|known| *known == method)
        .unwrap_or("other");
    let span = tracing::info_span!(
        target: "mcp_trace",
        "mcp.request",
        otel.name = %method,
        otel.kind = "server",
        mcp.method = %method,
        mcp.era = tracing::field::Empty,
        mcp.tool = tracing::field::Empty,
        mcp.module = tracing::field::Empty,
        mcp.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&Incoming(headers))
        });
        let _ = span.set_parent(parent);
    }
    span
}

/// A child span of the current one, for the call to `module`.
pub fn module_span(module: &str) -> tracing::Span {
    if tracing::Span::current().is_none() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: "mcp_trace",
        "mcp.module_call",
        otel.kind = "client",
        mcp.module = %module,
    )
}

/// Records `value` as the current request span's `field` (one of those [`request_span`]
/// declares); nothing when tracing is off.
pub fn record(field: &'static str, value: &str) {
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record(field, value);
    }
}

/// The current span's context as W3C `traceparent` (and `tracestate`) headers in
/// `headers`, for a module; nothing when tracing is off or no span is current.
pub fn inject(headers: &mut http::HeaderMap) {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut opentelemetry_http::HeaderInjector(headers));
    });
}

/// Most holds remembered for the links of their re-calls (the oldest forgotten first).
const MAX_HOLDS: usize = 10_000;

/// The spans of traced holds, by confirmation id, for the re-call's link.
static HOLDS: std::sync::LazyLock<std::sync::Mutex<Holds>> =
    std::sync::LazyLock::new(std::sync::Mutex::default);

/// The latest span that held each confirmation, and the order they came in (the oldest
/// forgotten first).
#[derive(Default)]
struct Holds {
    spans: std::collections::HashMap<String, opentelemetry::trace::SpanContext>,
    order: std::collections::VecDeque<String>,
}

fn holds() -> std::sync::MutexGuard<'static, Holds> {
    HOLDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Remembers the current (traced) span as the one that held `confirmation`, so that the
/// call that redeems it links to it ([`link_hold`]); nothing when the request is not traced.
/// Kept in this process only: a re-call served by another instance has no link. A
/// confirmation held again (the call repeated while it waits) is linked to its latest hold.
pub fn hold(confirmation: &str) {
    use opentelemetry::trace::TraceContextExt as _;
    if !INSTALLED.load(Ordering::Acquire) {
        return;
    }
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    let context = span.context().span().span_context().clone();
    if !context.is_valid() {
        return;
    }
    let mut holds = holds();
    if holds
        .spans
        .insert(confirmation.to_owned(), context)
        .is_none()
    {
        holds.order.push_back(confirmation.to_owned());
    }
    while holds.order.len() > MAX_HOLDS {
        if let Some(oldest) = holds.order.pop_front() {
            holds.spans.remove(&oldest);
        }
    }
}

/// Forgets the hold of `confirmation` (a confirmation is redeemed once) and links the
/// current span to it, if this process traced the hold and this request is traced: the
/// re-call's trace leads to the hold's.
pub fn link_hold(confirmation: &str) {
    if !INSTALLED.load(Ordering::Acquire) {
        return;
    }
    let held = {
        let mut holds = holds();
        let held = holds.spans.remove(confirmation);
        if held.is_some() {
            holds.order.retain(|id| id != confirmation);
        }
        held
    };
    let span = tracing::Span::current();
    if let Some(context) = held.filter(|_| !span.is_disabled()) {
        span.add_link(context);
    }
}

/// The current span's W3C `traceparent`, for a stdio module's `_meta`.
pub fn traceparent() -> Option<String> {
    let mut headers = http::HeaderMap::new();
    inject(&mut headers);
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::propagation::Extractor as _;

    #[test]
    fn a_tenth_of_the_requests_are_traced_evenly_and_none_or_all_at_the_ends() {
        RATIO.store(0.1f64.to_bits(), Ordering::Relaxed);
        let picked: Vec<bool> = (0..1000).map(|_| sampled()).collect();
        assert_eq!(picked.iter().filter(|p| **p).count(), 100);
        // Evenly: one in every ten, never a run of them.
        assert!(picked.windows(2).all(|w| !(w[0] && w[1])));
        RATIO.store(0.0f64.to_bits(), Ordering::Relaxed);
        assert!((0..100).all(|_| !sampled()));
        RATIO.store(1.0f64.to_bits(), Ordering::Relaxed);
        assert!((0..100).all(|_| sampled()));
    }

    #[test]
    fn an_oversized_tracestate_is_not_continued() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        headers.insert("tracestate", "a=1,b=2".parse().unwrap());
        headers.insert("authorization", "Bearer secret".parse().unwrap());
        let incoming = Incoming(&headers);
        assert_eq!(incoming.get("tracestate"), Some("a=1,b=2"));
        assert!(incoming.get("traceparent").is_some());
        assert_eq!(
            incoming.get("authorization"),
            None,
            "only the trace headers are read"
        );
        let long = (0..40)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        headers.insert("tracestate", long.parse().unwrap());
        assert_eq!(
            Incoming(&headers).get("tracestate"),
            None,
            "over 32 members"
        );
        headers.insert(
            "tracestate",
            format!("k={}", "v".repeat(600)).parse().unwrap(),
        );
        assert_eq!(Incoming(&headers).get("tracestate"), None, "over 512 bytes");
    }
}
