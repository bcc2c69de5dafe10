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

#[cfg(feature = "otlp")]
mod export;
mod state;

use std::sync::atomic::{AtomicU64, Ordering};

use tracing_opentelemetry::OpenTelemetrySpanExt as _;

#[cfg(feature = "otlp")]
pub use export::{Installed, TraceConfig, install, only_traces};
pub use state::TARGET;

use state::{DROPPED, FAILED, INSTALLED, RATIO};

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
