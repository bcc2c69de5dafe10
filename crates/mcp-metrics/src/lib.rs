//! What an operator watches: `/metrics` in the Prometheus text format.
//!
//! Every label value comes from a bounded set — the catalog's module and tool names, the
//! gate's outcomes and reasons, the store's operation names — never from an id, an argument
//! or a caller. `elicitation_store::Metered` wraps the store (telling these metrics, a `StoreMeter`) so every operation is timed and every
//! elicitation's life (created, answered, expired) is counted where it happens, whichever
//! surface caused it. The docs list every metric (`docs/operations.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use elicitation_core::ElicitationId;
use elicitation_store::{StoreError, StoreMeter};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use time::OffsetDateTime;

mod histogram;
use histogram::Histogram;

/// A tool call's labels: which tool, and what the gateway did with it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    module: String,
    tool: String,
    /// `forwarded`, `held`, `rejected` or `module_error`.
    outcome: &'static str,
    /// For `rejected`, the gate's reason (`user_rejected`, `policy_denied`, …); for
    /// `forwarded`, `confirmed` when a confirmation was consumed; else empty.
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModuleLabels {
    module: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuotaLabels {
    tools: String,
    window: &'static str,
    unit: &'static str,
    /// The virtual server the quota is of; empty for a quota of every endpoint.
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FindingLabels {
    kind: &'static str,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HeldLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotifyLabels {
    sink: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    outcome: &'static str,
}

/// Histograms with fixed buckets, for [`Family`].
#[derive(Clone)]
struct Buckets(fn() -> Histogram);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        (self.0)()
    }
}

/// 0.1 ms … 3.3 s: the gateway's own time on a call.
fn gateway_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
}

/// 1 ms … 16 min: a module's answer, a store's operation, a person's answer.
fn slow_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 11))
}

/// The gateway's metrics.
pub struct Metrics {
    registry: Registry,
    tool_calls: Family<CallLabels, Counter>,
    gateway_seconds: Histogram,
    module_seconds: Family<ModuleLabels, Histogram, Buckets>,
    created: Family<TypeLabels, Counter>,
    answered: Family<OutcomeLabels, Counter>,
    expired: Counter,
    erased: Counter,
    answer_seconds: Histogram,
    pending: Gauge,
    store_seconds: Family<OpLabels, Histogram, Buckets>,
    store_errors: Family<OpLabels, Counter>,
    module_up: Family<ModuleLabels, Gauge>,
    module_restarts: Family<ModuleLabels, Counter>,
    quarantined: Family<ModuleLabels, Gauge>,
    limited: Family<LimitLabels, Counter>,
    quota_remaining: Family<QuotaLabels, Gauge>,
    findings: Family<FindingLabels, Counter>,
    held_results: Family<HeldLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    notifications: Family<NotifyLabels, Counter>,
    notices_dropped: Counter,
    trace_spans_dropped: Counter,
    audit_seal_stalled: Counter,
    trace_spans_failed: Counter,
    sessions: Gauge,
    streams: Gauge,
    body_bytes: Gauge,
    connections: Gauge,
    open_connections: Arc<AtomicI64>,
    /// Where an answer's wait is read against its elicitation's creation time.
    clock: Arc<dyn elicitation_store::Clock>,
    /// Which metrics these are ([`ToolSeries`] made of them say so).
    id: u64,
}

/// The metrics made so far in this process (each its own id).
static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One tool's series of its forwarded calls and of its module's time, resolved once
/// ([`Metrics::tool_series`]) and kept by the caller beside the tool (the gate keeps one in
/// each catalog entry): counted through it, a call takes no lookup in a family (no label
/// strings built, no hash, no shared lock).
#[derive(Clone, Debug)]
pub struct ToolSeries {
    /// The [`Metrics`] it was resolved in.
    of: u64,
    forwarded: Counter,
    module_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Every family registered under the `mcp_gateway` prefix, all at zero.
    // Long: every metric family registered, one statement each.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mcp_gateway");
        let metrics = Metrics {
            tool_calls: Family::default(),
            gateway_seconds: gateway_seconds(),
            module_seconds: Family::new_with_constructor(Buckets(slow_seconds)),
            created: Family::default(),
            answered: Family::default(),
            expired: Counter::default(),
            erased: Counter::default(),
            answer_seconds: slow_seconds(),
            pending: Gauge::default(),
            store_seconds: Family::new_with_constructor(Buckets(slow_seconds)),
            store_errors: Family::default(),
            module_up: Family::default(),
            module_restarts: Family::default(),
            quarantined: Family::default(),
            notifications: Family::default(),
            notices_dropped: Counter::default(),
            trace_spans_dropped: Counter::default(),
            audit_seal_stalled: Counter::default(),
            trace_spans_failed: Counter::default(),
            limited: Family::default(),
            quota_remaining: Family::default(),
            findings: Family::default(),
            held_results: Family::default(),
            reloads: Family::default(),
            sessions: Gauge::default(),
            streams: Gauge::default(),
            body_bytes: Gauge::default(),
            connections: Gauge::default(),
            open_connections: Arc::default(),
            clock: Arc::new(elicitation_store::SystemClock),
            registry: Registry::default(),
            id: MADE.fetch_add(1, Ordering::Relaxed),
        };
        registry.register(
            "tool_calls",
            "Tool calls by module, tool and what the gateway did (forwarded, held, rejected, shadowed, module_error)",
            metrics.tool_calls.clone(),
        );
        registry.register(
            "gateway_seconds",
            "The gateway's own time on a tool call, from the classified call to its answer, less the module's",
            metrics.gateway_seconds.clone(),
        );
        registry.register(
            "module_seconds",
            "How long modules took to answer forwarded tool calls",
            metrics.module_seconds.clone(),
        );
        registry.register(
            "elicitations_created",
            "Elicitations created (confirmations held for a person among them), by type",
            metrics.created.clone(),
        );
        registry.register(
            "elicitations_answered",
            "Elicitations answered, by outcome (approved, declined, responded, cancelled, invalid, validation_failed)",
            metrics.answered.clone(),
        );
        registry.register(
            "elicitations_expired",
            "Elicitations that expired unanswered",
            metrics.expired.clone(),
        );
        registry.register(
            "elicitations_erased",
            "Finished elicitations erased by the retention job",
            metrics.erased.clone(),
        );
        registry.register(
            "answer_seconds",
            "Time from an elicitation's creation (a call's hold) to its answer",
            metrics.answer_seconds.clone(),
        );
        registry.register(
            "elicitations_pending",
            "Elicitations waiting for an answer in the store (all instances), as of the last sweep",
            metrics.pending.clone(),
        );
        registry.register(
            "store_seconds",
            "Store operation latency, by operation",
            metrics.store_seconds.clone(),
        );
        registry.register(
            "store_errors",
            "Store operations that failed on the store's side (not the caller's mistakes), by operation",
            metrics.store_errors.clone(),
        );
        registry.register(
            "module_up",
            "1 when the module is up (its process runs and it answered its last listing)",
            metrics.module_up.clone(),
        );
        registry.register(
            "quarantined_definitions",
            "The module's tool definitions withheld because they are not their pin (as this instance last read them)",
            metrics.quarantined.clone(),
        );
        registry.register(
            "module_restarts",
            "Restarts of a module's process",
            metrics.module_restarts.clone(),
        );
        registry.register(
            "quota_remaining",
            "What remains of an everyone-together quota in its current window, as this instance last counted it",
            metrics.quota_remaining.clone(),
        );
        registry.register(
            "limited",
            "Requests refused by a limit (calls, confirmations, module_concurrency)",
            metrics.limited.clone(),
        );
        registry.register(
            "content_findings",
            "What content scanning found in results, by kind and the action taken (counts, never values)",
            metrics.findings.clone(),
        );
        registry.register(
            "held_results",
            "Results held for a person (content action hold), by outcome: released or withheld",
            metrics.held_results.clone(),
        );
        registry.register(
            "config_reloads",
            "Configuration reloads (SIGHUP) by outcome: applied, or refused (the running configuration stays)",
            metrics.reloads.clone(),
        );
        for outcome in ["applied", "refused"] {
            drop(metrics.reloads.get_or_create(&ReloadLabels { outcome }));
        }
        registry.register(
            "notifications",
            "Notification attempts per [[notify]] sink, by outcome: delivered, retried (to be tried again), failed (given up or refused by the receiver)",
            metrics.notifications.clone(),
        );
        registry.register(
            "notices_dropped",
            "Notices the memory store's outbox dropped because it was full",
            metrics.notices_dropped.clone(),
        );
        registry.register(
            "audit_seal_stalled",
            "Sweeps that could not seal settled audit rows because a row after the chain's head is dated in the future (every row after it stays unverified; docs/audit.md)",
            metrics.audit_seal_stalled.clone(),
        );
        registry.register(
            "trace_spans_dropped",
            "Trace spans dropped because the export queue was full (the collector down or slow; [tracing] max_queue)",
            metrics.trace_spans_dropped.clone(),
        );
        registry.register(
            "trace_spans_failed",
            "Trace spans the collector did not take (the export failed or timed out)",
            metrics.trace_spans_failed.clone(),
        );
        registry.register(
            "sessions",
            "Legacy (2025-era) sessions held by this instance",
            metrics.sessions.clone(),
        );
        registry.register(
            "open_streams",
            "Long-lived requests (SSE streams, REST long polls, waiting permission prompts) open on this instance",
            metrics.streams.clone(),
        );
        registry.register(
            "request_body_bytes",
            "Bytes of request bodies being received now ([http] body_bytes_in_flight bounds them)",
            metrics.body_bytes.clone(),
        );
        registry.register(
            "connections",
            "Client connections open on this instance",
            metrics.connections.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// A tool call's outcome.
    pub fn tool_call(&self, module: &str, tool: &str, outcome: &'static str, reason: &'static str) {
        self.tool_calls
            .get_or_create(&CallLabels {
                module: module.to_owned(),
                tool: tool.to_owned(),
                outcome,
                reason,
            })
            .inc();
    }

    /// `module`'s tool `tool`'s series of forwarded calls and of module time (see
    /// [`ToolSeries`]).
    pub fn tool_series(&self, module: &str, tool: &str) -> ToolSeries {
        ToolSeries {
            of: self.id,
            forwarded: self
                .tool_calls
                .get_or_create(&CallLabels {
                    module: module.to_owned(),
                    tool: tool.to_owned(),
                    outcome: "forwarded",
                    reason: "",
                })
                .clone(),
            module_seconds: self
                .module_seconds
                .get_or_create(&ModuleLabels {
                    module: module.to_owned(),
                })
                .clone(),
        }
    }

    /// [`Metrics::tool_call`], through the tool's `series` where it holds that outcome's
    /// series (a plain `forwarded`) and was resolved in these metrics; by lookup otherwise.
    pub fn tool_call_with(
        &self,
        series: Option<&ToolSeries>,
        (module, tool): (&str, &str),
        outcome: &'static str,
        reason: &'static str,
    ) {
        match series {
            Some(series) if series.of == self.id && (outcome, reason) == ("forwarded", "") => {
                series.forwarded.inc();
            }
            _ => self.tool_call(module, tool, outcome, reason),
        }
    }

    /// [`Metrics::module_time`], through the tool's `series` where it was resolved in these
    /// metrics; by lookup otherwise.
    pub fn module_time_with(&self, series: Option<&ToolSeries>, module: &str, took: Duration) {
        match series {
            Some(series) if series.of == self.id => {
                series.module_seconds.observe(took.as_secs_f64());
            }
            _ => self.module_time(module, took),
        }
    }

    /// The gateway's own time on a call (`total` less the module's `upstream`).
    pub fn gateway_time(&self, total: Duration, upstream: Duration) {
        self.gateway_seconds
            .observe(total.saturating_sub(upstream).as_secs_f64());
    }

    /// A module's time on a forwarded call.
    pub fn module_time(&self, module: &str, took: Duration) {
        self.module_seconds
            .get_or_create(&ModuleLabels {
                module: module.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// A configuration reload was applied, or refused.
    pub fn reloaded(&self, applied: bool) {
        let outcome = if applied { "applied" } else { "refused" };
        self.reloads.get_or_create(&ReloadLabels { outcome }).inc();
    }

    /// `count` findings of `kind` in a result, and the `action` taken.
    pub fn findings(&self, kind: &'static str, action: &'static str, count: u32) {
        self.findings
            .get_or_create(&FindingLabels { kind, action })
            .inc_by(u64::from(count));
    }

    /// A result held for a person was `outcome` (`released`, `withheld`).
    pub fn held_result(&self, outcome: &'static str) {
        self.held_results
            .get_or_create(&HeldLabels { outcome })
            .inc();
    }

    /// What remains of an everyone-together quota of `tools` (its window and unit) on
    /// `server` (its virtual server; empty for a quota of every endpoint), as a take just
    /// counted it. Quotas of the same terms on two servers are two series.
    pub fn quota_remaining(
        &self,
        tools: &str,
        server: &str,
        window: &'static str,
        unit: &'static str,
        remaining: i64,
    ) {
        self.quota_remaining
            .get_or_create(&QuotaLabels {
                tools: tools.to_owned(),
                window,
                unit,
                server: server.to_owned(),
            })
            .set(remaining);
    }

    /// A request refused by `limit`.
    pub fn limited(&self, limit: &'static str) {
        self.limited.get_or_create(&LimitLabels { limit }).inc();
    }

    /// Elicitations waiting in the store now.
    pub fn set_pending(&self, pending: u64) {
        self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// Finished elicitations erased by retention.
    pub fn erased(&self, count: usize) {
        self.erased.inc_by(count as u64);
    }

    /// One notification attempt to `sink` ended as `outcome` (`delivered`, `retried`,
    /// `failed`).
    pub fn notification(&self, sink: &str, outcome: &'static str) {
        self.notifications
            .get_or_create(&NotifyLabels {
                sink: sink.to_owned(),
                outcome,
            })
            .inc();
    }

    /// The memory store's outbox dropped `count` more notices.
    pub fn notices_dropped(&self, count: u64) {
        self.notices_dropped.inc_by(count);
    }

    /// A client connection opened; it counts until the guard drops.
    pub fn connection(&self) -> ConnectionGuard {
        self.open_connections.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self.open_connections.clone())
    }

    /// The metrics reading the time from `clock` (the stores', in tests a `ManualClock`).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn elicitation_store::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The text exposition, after the gauges read from live state are brought up to date.
    pub fn render(&self, live: Live<'_>) -> String {
        self.sessions.set(live.sessions as i64);
        self.streams.set(live.streams as i64);
        self.body_bytes
            .set(i64::try_from(live.body_bytes).unwrap_or(i64::MAX));
        self.connections
            .set(self.open_connections.load(Ordering::Relaxed));
        for health in live.modules {
            let labels = ModuleLabels {
                module: health.module.to_owned(),
            };
            self.module_up
                .get_or_create(&labels)
                .set(i64::from(health.up));
            let restarts = self.module_restarts.get_or_create(&labels);
            restarts.inc_by(health.restarts.saturating_sub(restarts.get()));
            let withheld = live.quarantined.get(health.module).copied().unwrap_or(0);
            self.quarantined
                .get_or_create(&labels)
                .set(i64::try_from(withheld).unwrap_or(i64::MAX));
        }
        for (counter, now) in [
            (&self.trace_spans_dropped, live.trace_spans_dropped),
            (&self.trace_spans_failed, live.trace_spans_failed),
            (
                &self.audit_seal_stalled,
                elicitation_store::audit_seal_stalls(),
            ),
        ] {
            counter.inc_by(now.saturating_sub(counter.get()));
        }
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(error = %e, "the metrics could not be written");
        }
        text
    }
}

/// The store's operations and elicitations' lives, as `elicitation_store::Metered` tells
/// them.
impl StoreMeter for Metrics {
    fn operation(&self, op: &'static str, took: Duration, failed: Option<&StoreError>) {
        self.store_seconds
            .get_or_create(&OpLabels { op })
            .observe(took.as_secs_f64());
        if let Some(e) = failed
            && !e.is_caller_error()
        {
            self.store_errors.get_or_create(&OpLabels { op }).inc();
        }
    }

    fn created(&self, kind: elicitation_core::ElicitationType) {
        let r#type = kind.as_str();
        self.created.get_or_create(&TypeLabels { r#type }).inc();
    }

    fn expired(&self, count: usize) {
        self.expired.inc_by(count as u64);
    }

    fn erased(&self, count: usize) {
        Metrics::erased(self, count);
    }

    fn pending(&self, count: u64) {
        self.set_pending(count);
    }

    fn answered(&self, outcome: &'static str, id: ElicitationId) {
        self.answered
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        let created =
            id.as_uuid()
                .get_timestamp()
                .map(|t| t.to_unix())
                .and_then(|(secs, nanos)| {
                    OffsetDateTime::from_unix_timestamp(i64::try_from(secs).ok()?)
                        .ok()
                        .map(|t| t + time::Duration::nanoseconds(i64::from(nanos)))
                });
        if let Some(created) = created {
            let waited = (self.clock.now() - created).as_seconds_f64();
            self.answer_seconds.observe(waited.max(0.0));
        }
    }
}

/// What `/metrics` reads from live state at each scrape.
pub struct Live<'a> {
    /// Open legacy sessions.
    pub sessions: usize,
    /// Open long-lived requests (SSE streams, long polls, waiting permission prompts).
    pub streams: usize,
    /// Bytes of request bodies being received.
    pub body_bytes: usize,
    /// Each module and its health.
    pub modules: &'a [ModuleState<'a>],
    /// How many of each module's tool definitions are withheld (modules not named: none).
    pub quarantined: &'a std::collections::HashMap<String, usize>,
    /// Trace spans dropped (the export queue was full) and failed to export, so far.
    pub trace_spans_dropped: u64,
    /// See `trace_spans_dropped`.
    pub trace_spans_failed: u64,
}

/// A module as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleState<'a> {
    /// The module's name.
    pub module: &'a str,
    /// Up and answering.
    pub up: bool,
    /// Restarts since the gateway started it.
    pub restarts: u64,
}

/// Counts one open connection while it lives.
#[derive(Debug)]
pub struct ConnectionGuard(Arc<AtomicI64>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live<'a>(
        modules: &'a [ModuleState<'a>],
        quarantined: &'a std::collections::HashMap<String, usize>,
        dropped: u64,
    ) -> Live<'a> {
        Live {
            sessions: 2,
            streams: 1,
            body_bytes: 0,
            modules,
            quarantined,
            trace_spans_dropped: dropped,
            trace_spans_failed: 0,
        }
    }

    /// Counted through a tool's series, a call shows in the same series a lookup counts
    /// into; a series of other metrics counts nothing there.
    #[test]
    fn a_tools_series_counts_where_the_lookup_does_and_only_in_its_own_metrics() {
        let metrics = Metrics::new();
        let series = metrics.tool_series("fs", "fs__read");
        let names = ("fs", "fs__read");
        metrics.tool_call_with(Some(&series), names, "forwarded", "");
        metrics.tool_call_with(Some(&series), names, "forwarded", "");
        metrics.tool_call("fs", "fs__read", "forwarded", "");
        // Another outcome is not the series': counted by its own labels.
        metrics.tool_call_with(Some(&series), names, "forwarded", "confirmed");
        metrics.module_time_with(Some(&series), "fs", Duration::from_millis(30));
        metrics.module_time("fs", Duration::from_millis(10));
        // A series of other metrics counts nothing in them: these are counted here by lookup.
        let other = Metrics::new();
        let theirs = other.tool_series("fs", "fs__read");
        metrics.tool_call_with(Some(&theirs), names, "forwarded", "");
        metrics.module_time_with(Some(&theirs), "fs", Duration::from_secs(1));
        let text = metrics.render(live(&[], &std::collections::HashMap::new(), 0));
        assert!(
            text.contains(
                r#"mcp_gateway_tool_calls_total{module="fs",tool="fs__read",outcome="forwarded",reason=""} 4"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"mcp_gateway_tool_calls_total{module="fs",tool="fs__read",outcome="forwarded",reason="confirmed"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"mcp_gateway_module_seconds_count{module="fs"} 3"#),
            "{text}"
        );
        let theirs = other.render(live(&[], &std::collections::HashMap::new(), 0));
        assert!(
            theirs.contains(
                r#"mcp_gateway_tool_calls_total{module="fs",tool="fs__read",outcome="forwarded",reason=""} 0"#
            ),
            "{theirs}"
        );
    }

    /// A person who answers after a minute and a half is counted as having taken that long,
    /// on the clock the store reads (moved here, not slept).
    #[test]
    fn an_answers_wait_is_read_on_the_injected_clock() {
        use elicitation_store::StoreMeter as _;
        let clock = Arc::new(elicitation_store::ManualClock::stopped_now());
        let metrics = Metrics::new().with_clock(clock.clone());
        let id = ElicitationId::v7(elicitation_store::Clock::now(&*clock), [7; 10]);
        clock.advance(time::Duration::seconds(90));
        metrics.answered("approved", id);
        let text = metrics.render(live(&[], &std::collections::HashMap::new(), 0));
        let sum = text
            .lines()
            .find_map(|l| l.strip_prefix("mcp_gateway_answer_seconds_sum "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no answer_seconds sum in\n{text}"));
        assert!((89.0..=91.0).contains(&sum), "{sum}");
    }

    #[test]
    fn a_scrape_shows_each_module_and_counts_what_grew_since_the_last_one() {
        let metrics = Metrics::new();
        let quarantined = std::collections::HashMap::from([("fs".to_owned(), 2)]);
        let fs = |up, restarts| ModuleState {
            module: "fs",
            up,
            restarts,
        };
        metrics.tool_call("fs", "fs__write_file", "held", "");
        metrics.quota_remaining("llm__*", "", "hour", "cost", 4960);
        // The same terms on two virtual servers: two series, neither overwrites the other.
        metrics.quota_remaining("fs__*", "finance", "day", "calls", 7);
        metrics.quota_remaining("fs__*", "eng", "day", "calls", 2);
        let text = metrics.render(live(&[fs(true, 1)], &quarantined, 3));
        for line in [
            r#"mcp_gateway_quota_remaining{tools="llm__*",window="hour",unit="cost",server=""} 4960"#,
            r#"mcp_gateway_quota_remaining{tools="fs__*",window="day",unit="calls",server="finance"} 7"#,
            r#"mcp_gateway_quota_remaining{tools="fs__*",window="day",unit="calls",server="eng"} 2"#,
            r#"mcp_gateway_module_up{module="fs"} 1"#,
            r#"mcp_gateway_module_restarts_total{module="fs"} 1"#,
            r#"mcp_gateway_quarantined_definitions{module="fs"} 2"#,
            r#"mcp_gateway_tool_calls_total{module="fs",tool="fs__write_file",outcome="held",reason=""} 1"#,
            "mcp_gateway_sessions 2",
            "mcp_gateway_trace_spans_dropped_total 3",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        // The restart counter follows the module's own count; it never goes back.
        let text = metrics.render(live(&[fs(false, 4)], &quarantined, 3));
        assert!(
            text.contains(r#"mcp_gateway_module_up{module="fs"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"mcp_gateway_module_restarts_total{module="fs"} 4"#),
            "{text}"
        );
        let text = metrics.render(live(&[fs(true, 0)], &quarantined, 1));
        assert!(
            text.contains(r#"mcp_gateway_module_restarts_total{module="fs"} 4"#),
            "{text}"
        );
        assert!(
            text.contains("mcp_gateway_trace_spans_dropped_total 3"),
            "{text}"
        );
    }
}
