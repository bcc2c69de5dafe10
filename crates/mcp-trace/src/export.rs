//! The exporter: finished spans leave through a bounded queue over OTLP/HTTP, sent by the
//! gateway's own hyper client (feature `otlp`, on by default; a library that only makes
//! spans — the gate — does without it and its HTTP stack).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
use tracing_subscriber::Layer;

use crate::state::{DROPPED, FAILED, INSTALLED, RATIO, TARGET};
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
