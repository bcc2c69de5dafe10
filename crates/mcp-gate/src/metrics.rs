//! What an operator watches: `/metrics` in the Prometheus text format.
//!
//! Every label value comes from a bounded set — the catalog's module and tool names, the
//! gate's outcomes and reasons, the store's operation names — never from an id, an argument
//! or a caller. [`MeteredStore`] wraps the store so every operation is timed and every
//! elicitation's life (created, answered, expired) is counted where it happens, whichever
//! surface caused it. The docs list every metric (`docs/operations.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use elicitation_core::{CancelReason, Elicitation, ElicitationId, ElicitationSpec, RespondOutcome};
use elicitation_store::{
    Approver, CallBinding, Caller, ConfirmationRequest, ElicitationStore, ErasedElicitation,
    ExpiredElicitation, GateRecord, ListQuery, Listed, Redeemed, StoreError, StoredElicitation,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::Value;
use time::OffsetDateTime;

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
    limited: Family<LimitLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    sessions: Gauge,
    streams: Gauge,
    connections: Gauge,
    open_connections: Arc<AtomicI64>,
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
            limited: Family::default(),
            reloads: Family::default(),
            sessions: Gauge::default(),
            streams: Gauge::default(),
            connections: Gauge::default(),
            open_connections: Arc::default(),
            registry: Registry::default(),
        };
        registry.register(
            "tool_calls",
            "Tool calls by module, tool and what the gateway did (forwarded, held, rejected, module_error)",
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
            "module_restarts",
            "Restarts of a module's process",
            metrics.module_restarts.clone(),
        );
        registry.register(
            "limited",
            "Requests refused by a limit (calls, confirmations, module_concurrency)",
            metrics.limited.clone(),
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
            "sessions",
            "Legacy (2025-era) sessions held by this instance",
            metrics.sessions.clone(),
        );
        registry.register(
            "open_streams",
            "Long-lived SSE streams open on this instance",
            metrics.streams.clone(),
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

    /// A client connection opened; it counts until the guard drops.
    pub fn connection(&self) -> ConnectionGuard {
        self.open_connections.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self.open_connections.clone())
    }

    /// The text exposition, after the gauges read from live state are brought up to date.
    pub fn render(&self, live: Live<'_>) -> String {
        self.sessions.set(live.sessions as i64);
        self.streams.set(live.streams as i64);
        self.connections
            .set(self.open_connections.load(Ordering::Relaxed));
        for (module, health) in live.modules {
            let labels = ModuleLabels {
                module: (*module).to_owned(),
            };
            self.module_up
                .get_or_create(&labels)
                .set(i64::from(health.up));
            let restarts = self.module_restarts.get_or_create(&labels);
            restarts.inc_by(health.restarts.saturating_sub(restarts.get()));
        }
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(error = %e, "the metrics could not be written");
        }
        text
    }

    fn store_op<T>(&self, op: &'static str, started: Instant, result: &Result<T, StoreError>) {
        self.store_seconds
            .get_or_create(&OpLabels { op })
            .observe(started.elapsed().as_secs_f64());
        if let Err(e) = result
            && !e.is_caller_error()
        {
            self.store_errors.get_or_create(&OpLabels { op }).inc();
        }
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
            let waited = (OffsetDateTime::now_utc() - created).as_seconds_f64();
            self.answer_seconds.observe(waited.max(0.0));
        }
    }

    /// An answer recorded with `outcome`; `confirmed` is a confirmation's answer.
    fn responded(&self, id: ElicitationId, confirmed: Option<bool>, outcome: &RespondOutcome) {
        let label = match outcome {
            RespondOutcome::Recorded => match confirmed {
                Some(true) => "approved",
                Some(false) => "declined",
                None => "responded",
            },
            RespondOutcome::Invalid { .. } => "invalid",
            RespondOutcome::ValidationFailed { .. } => "validation_failed",
            RespondOutcome::AlreadyRecorded => return,
        };
        self.answered(label, id);
    }
}

/// What `/metrics` reads from live state at each scrape.
pub struct Live<'a> {
    /// Open legacy sessions.
    pub sessions: usize,
    /// Open SSE streams.
    pub streams: usize,
    /// Each module and its health.
    pub modules: &'a [(&'a str, mcp_upstream::ModuleHealth)],
}

/// Counts one open connection while it lives.
#[derive(Debug)]
pub struct ConnectionGuard(Arc<AtomicI64>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A confirmation's answer in `payload` (only a confirmation's response has `confirmed`).
fn confirmed(payload: &Value) -> Option<bool> {
    payload.get("confirmed").and_then(Value::as_bool)
}

/// The store, with every operation timed and every elicitation's life counted.
pub struct MeteredStore {
    inner: Arc<dyn ElicitationStore>,
    metrics: Arc<Metrics>,
}

impl MeteredStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ElicitationStore>, metrics: Arc<Metrics>) -> Self {
        MeteredStore { inner, metrics }
    }

    async fn timed<T>(
        &self,
        op: &'static str,
        run: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = run.await;
        self.metrics.store_op(op, started, &result);
        result
    }
}

#[async_trait]
impl ElicitationStore for MeteredStore {
    async fn create(
        &self,
        caller: &Caller,
        spec: ElicitationSpec,
        ttl: time::Duration,
    ) -> Result<Elicitation, StoreError> {
        let created = self
            .timed("create", self.inner.create(caller, spec, ttl))
            .await;
        if let Ok(e) = &created {
            let r#type = e.kind().as_str();
            self.metrics
                .created
                .get_or_create(&TypeLabels { r#type })
                .inc();
        }
        created
    }

    async fn create_confirmation(
        &self,
        caller: &Caller,
        request: ConfirmationRequest,
    ) -> Result<StoredElicitation, StoreError> {
        let created = self
            .timed(
                "create_confirmation",
                self.inner.create_confirmation(caller, request),
            )
            .await;
        if created.is_ok() {
            let r#type = elicitation_core::ElicitationType::Confirmation.as_str();
            self.metrics
                .created
                .get_or_create(&TypeLabels { r#type })
                .inc();
        }
        created
    }

    async fn get(
        &self,
        caller: &Caller,
        id: ElicitationId,
    ) -> Result<StoredElicitation, StoreError> {
        self.timed("get", self.inner.get(caller, id)).await
    }

    async fn list(&self, caller: &Caller, query: ListQuery) -> Result<Vec<Listed>, StoreError> {
        self.timed("list", self.inner.list(caller, query)).await
    }

    async fn respond_as(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<RespondOutcome, StoreError> {
        let confirmed = confirmed(&payload);
        let outcome = self
            .timed(
                "respond",
                self.inner.respond_as(caller, id, payload, answered_by),
            )
            .await;
        if let Ok(outcome) = &outcome {
            self.metrics.responded(id, confirmed, outcome);
        }
        outcome
    }

    async fn approver_pending(
        &self,
        approver: &Approver,
        limit: usize,
    ) -> Result<Vec<(Caller, StoredElicitation)>, StoreError> {
        self.timed(
            "approver_pending",
            self.inner.approver_pending(approver, limit),
        )
        .await
    }

    async fn approver_respond(
        &self,
        approver: &Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<(Caller, RespondOutcome), StoreError> {
        let confirmed = confirmed(&payload);
        let outcome = self
            .timed(
                "approver_respond",
                self.inner
                    .approver_respond(approver, id, payload, answered_by),
            )
            .await;
        if let Ok((_, outcome)) = &outcome {
            self.metrics.responded(id, confirmed, outcome);
        }
        outcome
    }

    async fn cancel(
        &self,
        caller: &Caller,
        id: ElicitationId,
        reason: CancelReason,
    ) -> Result<Elicitation, StoreError> {
        let cancelled = self
            .timed("cancel", self.inner.cancel(caller, id, reason))
            .await;
        if cancelled.is_ok() {
            let outcome = match reason {
                CancelReason::Declined => "declined",
                _ => "cancelled",
            };
            self.metrics.answered(outcome, id);
        }
        cancelled
    }

    async fn confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Option<Elicitation>, StoreError> {
        self.timed("confirmation", self.inner.confirmation(caller, id, binding))
            .await
    }

    async fn confirmation_for(
        &self,
        caller: &Caller,
        binding: &CallBinding,
    ) -> Result<Option<ElicitationId>, StoreError> {
        self.timed(
            "confirmation_for",
            self.inner.confirmation_for(caller, binding),
        )
        .await
    }

    async fn redeem_confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Redeemed, StoreError> {
        self.timed(
            "redeem_confirmation",
            self.inner.redeem_confirmation(caller, id, binding),
        )
        .await
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<ElicitationId>> {
        self.inner.changes()
    }

    async fn wait_for_change(
        &self,
        caller: &Caller,
        id: ElicitationId,
        deadline: tokio::time::Instant,
    ) -> Result<Elicitation, StoreError> {
        // Not timed: it waits for a person.
        self.inner.wait_for_change(caller, id, deadline).await
    }

    async fn expire_due(&self, now: OffsetDateTime) -> Result<Vec<ExpiredElicitation>, StoreError> {
        let expired = self.timed("expire_due", self.inner.expire_due(now)).await;
        if let Ok(expired) = &expired {
            self.metrics.expired.inc_by(expired.len() as u64);
        }
        expired
    }

    async fn erase_finished(
        &self,
        before: OffsetDateTime,
    ) -> Result<Vec<ErasedElicitation>, StoreError> {
        let erased = self
            .timed("erase_finished", self.inner.erase_finished(before))
            .await;
        if let Ok(erased) = &erased {
            self.metrics.erased(erased.len());
        }
        erased
    }

    async fn pending_count(&self) -> Result<u64, StoreError> {
        let count = self
            .timed("pending_count", self.inner.pending_count())
            .await;
        if let Ok(count) = count {
            self.metrics.set_pending(count);
        }
        count
    }

    async fn record_gate(
        &self,
        caller: &Caller,
        elicitation: Option<ElicitationId>,
        tool: &str,
        record: GateRecord,
    ) -> Result<(), StoreError> {
        self.timed(
            "record_gate",
            self.inner.record_gate(caller, elicitation, tool, record),
        )
        .await
    }

    async fn pending(&self, caller: &Caller, limit: usize) -> Result<Vec<Listed>, StoreError> {
        self.timed("pending", self.inner.pending(caller, limit))
            .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.timed("ping", self.inner.ping()).await
    }

    async fn end_session(
        &self,
        caller: &Caller,
        session: [u8; 32],
        until: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.timed(
            "end_session",
            self.inner.end_session(caller, session, until),
        )
        .await
    }

    async fn ended_sessions(&self) -> Result<Vec<([u8; 32], OffsetDateTime)>, StoreError> {
        self.timed("ended_sessions", self.inner.ended_sessions())
            .await
    }

    fn session_ends(&self) -> Option<tokio::sync::broadcast::Receiver<[u8; 32]>> {
        self.inner.session_ends()
    }

    async fn broadcast(&self, message: &str) -> Result<(), StoreError> {
        self.timed("broadcast", self.inner.broadcast(message)).await
    }

    fn broadcasts(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.inner.broadcasts()
    }
}
