//! The metering decorator: a store whose every operation is timed and whose elicitations'
//! lives are counted wherever they happened, told to a [`StoreMeter`] (the gateway's
//! Prometheus metrics implement it). It lives with the stores so the one conformance suite
//! runs through it too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use elicitation_core::{
    CancelReason, Elicitation, ElicitationId, ElicitationSpec, ElicitationType, RespondOutcome,
};
use serde_json::Value;
use time::OffsetDateTime;

use crate::grant::{AnswerWith, Grant, GrantId, GrantStore};
use crate::pins::{CatalogStore, DefinitionChange, DefinitionKey, FirstSight, Observed, Pin};
use crate::{
    Approver, AuditSink, CallBinding, Caller, ConfirmationRequest, ElicitationStore,
    ErasedElicitation, ExpiredElicitation, Fleet, GateRecord, ListQuery, Listed, PolicyRef,
    Redeemed, Store, StoreError, StoredElicitation,
};

/// What [`Metered`] tells.
pub trait StoreMeter: Send + Sync + 'static {
    /// One operation `op`, how long it took, and its failure if it failed.
    fn operation(&self, op: &'static str, took: Duration, failed: Option<&StoreError>);
    /// An elicitation of `kind` was created.
    fn created(&self, kind: ElicitationType);
    /// Elicitation `id` was answered: `approved`, `declined`, `responded`, `invalid`,
    /// `validation_failed` or `cancelled`.
    fn answered(&self, outcome: &'static str, id: ElicitationId);
    /// `count` pending elicitations expired.
    fn expired(&self, count: usize);
    /// `count` finished elicitations were erased.
    fn erased(&self, count: usize);
    /// Elicitations pending now, across callers.
    fn pending(&self, count: u64);
}

/// A confirmation's answer in `payload` (only a confirmation's response has `confirmed`).
fn confirmed(payload: &Value) -> Option<bool> {
    payload.get("confirmed").and_then(Value::as_bool)
}

/// A store with every operation timed and every elicitation's life counted, told to a
/// [`StoreMeter`]. It is a whole [`Store`] over one, forwarding every method (none of the
/// store traits has a default for it to forget; the conformance suite runs through it).
pub struct Metered {
    inner: Arc<dyn Store>,
    meter: Arc<dyn StoreMeter>,
}

impl Metered {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>, meter: Arc<dyn StoreMeter>) -> Self {
        Metered { inner, meter }
    }

    async fn timed<T>(
        &self,
        op: &'static str,
        run: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        // A child of the request's trace span, when the request is traced (the target the
        // trace exporter takes); the sweeper's, the notifier's and an untraced request's
        // operations are not.
        let result = if tracing::Span::current().is_none() {
            run.await
        } else {
            let span = tracing::info_span!(target: "mcp_trace", "mcp.store", otel.name = op, store.operation = op);
            tracing::Instrument::instrument(run, span).await
        };
        self.meter
            .operation(op, started.elapsed(), result.as_ref().err());
        result
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
            RespondOutcome::Counted { .. } => "counted",
            RespondOutcome::AlreadyRecorded => return,
        };
        self.meter.answered(label, id);
    }
}

#[async_trait]
impl ElicitationStore for Metered {
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
            self.meter.created(e.kind());
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
            self.meter.created(ElicitationType::Confirmation);
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
            self.responded(id, confirmed, outcome);
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
            self.responded(id, confirmed, outcome);
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
            self.meter.answered(outcome, id);
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

    async fn report_decline(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<bool, StoreError> {
        self.timed(
            "report_decline",
            self.inner.report_decline(caller, id, binding),
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
            self.meter.expired(expired.len());
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
            self.meter.erased(erased.len());
        }
        erased
    }

    async fn pending_count(&self) -> Result<u64, StoreError> {
        let count = self
            .timed("pending_count", self.inner.pending_count())
            .await;
        if let Ok(count) = count {
            self.meter.pending(count);
        }
        count
    }

    async fn pending(&self, caller: &Caller, limit: usize) -> Result<Vec<Listed>, StoreError> {
        self.timed("pending", self.inner.pending(caller, limit))
            .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.timed("ping", self.inner.ping()).await
    }
}

#[async_trait]
impl Fleet for Metered {
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

#[async_trait]
impl AuditSink for Metered {
    async fn record_gate(
        &self,
        caller: &Caller,
        elicitation: Option<ElicitationId>,
        tool: &str,
        record: GateRecord,
        policy: &PolicyRef,
    ) -> Result<(), StoreError> {
        self.timed(
            "record_gate",
            self.inner
                .record_gate(caller, elicitation, tool, record, policy),
        )
        .await
    }

    async fn audit_events(
        &self,
        reader: &Caller,
        query: &crate::AuditQuery,
    ) -> Result<crate::AuditPage, StoreError> {
        self.timed("audit_events", self.inner.audit_events(reader, query))
            .await
    }
}

#[async_trait]
impl GrantStore for Metered {
    async fn respond_with(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: AnswerWith,
    ) -> Result<(RespondOutcome, Option<Grant>), StoreError> {
        let confirmed = confirmed(&payload);
        let outcome = self
            .timed(
                "respond",
                self.inner
                    .respond_with(caller, id, payload, answered_by, with),
            )
            .await;
        if let Ok((outcome, _)) = &outcome {
            self.responded(id, confirmed, outcome);
        }
        outcome
    }

    async fn approver_respond_with(
        &self,
        approver: &Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: AnswerWith,
    ) -> Result<(Caller, RespondOutcome, Option<Grant>), StoreError> {
        let confirmed = confirmed(&payload);
        let outcome = self
            .timed(
                "approver_respond",
                self.inner
                    .approver_respond_with(approver, id, payload, answered_by, with),
            )
            .await;
        if let Ok((_, outcome, _)) = &outcome {
            self.responded(id, confirmed, outcome);
        }
        outcome
    }

    async fn approver_get(
        &self,
        approver: &Approver,
        id: ElicitationId,
    ) -> Result<(Caller, StoredElicitation), StoreError> {
        self.timed("approver_get", self.inner.approver_get(approver, id))
            .await
    }

    async fn live_grants(&self, caller: &Caller, tool: &str) -> Result<Vec<Grant>, StoreError> {
        self.timed("live_grants", self.inner.live_grants(caller, tool))
            .await
    }

    async fn use_grant(
        &self,
        caller: &Caller,
        id: GrantId,
        tool: &str,
    ) -> Result<Option<Grant>, StoreError> {
        self.timed("use_grant", self.inner.use_grant(caller, id, tool))
            .await
    }

    async fn grants(&self, caller: &Caller, limit: usize) -> Result<Vec<Grant>, StoreError> {
        self.timed("grants", self.inner.grants(caller, limit)).await
    }

    async fn revoke_grant(
        &self,
        revoker: &Caller,
        id: GrantId,
        revoked_by: Option<&str>,
    ) -> Result<Grant, StoreError> {
        self.timed(
            "revoke_grant",
            self.inner.revoke_grant(revoker, id, revoked_by),
        )
        .await
    }
}

#[async_trait]
impl crate::QuotaStore for Metered {
    async fn take_quota(
        &self,
        key: &str,
        window: crate::QuotaWindow,
        amount: i64,
        limit: i64,
    ) -> Result<crate::QuotaTake, StoreError> {
        self.timed(
            "take_quota",
            self.inner.take_quota(key, window, amount, limit),
        )
        .await
    }

    async fn give_back_quota(
        &self,
        key: &str,
        window_start: OffsetDateTime,
        amount: i64,
    ) -> Result<(), StoreError> {
        self.timed(
            "give_back_quota",
            self.inner.give_back_quota(key, window_start, amount),
        )
        .await
    }

    async fn quota_used(&self, key: &str, window: crate::QuotaWindow) -> Result<i64, StoreError> {
        self.timed("quota_used", self.inner.quota_used(key, window))
            .await
    }
}

#[async_trait]
impl crate::DelegationStore for Metered {
    async fn delegate(
        &self,
        from: &Approver,
        request: crate::DelegationRequest,
    ) -> Result<crate::Delegation, StoreError> {
        self.timed("delegate", self.inner.delegate(from, request))
            .await
    }

    async fn delegations(
        &self,
        caller: &Caller,
        limit: usize,
    ) -> Result<Vec<crate::Delegation>, StoreError> {
        self.timed("delegations", self.inner.delegations(caller, limit))
            .await
    }

    async fn revoke_delegation(
        &self,
        caller: &Caller,
        id: crate::DelegationId,
    ) -> Result<crate::Delegation, StoreError> {
        self.timed(
            "revoke_delegation",
            self.inner.revoke_delegation(caller, id),
        )
        .await
    }

    async fn acting_for(&self, delegate: &Caller) -> Result<Vec<crate::Delegation>, StoreError> {
        self.timed("acting_for", self.inner.acting_for(delegate))
            .await
    }
}

#[async_trait]
impl crate::FlowStore for Metered {
    async fn record_flow(
        &self,
        caller: &Caller,
        touch: crate::FlowTouch<'_>,
    ) -> Result<(), StoreError> {
        self.timed("record_flow", self.inner.record_flow(caller, touch))
            .await
    }

    async fn flow(
        &self,
        caller: &Caller,
        since: OffsetDateTime,
    ) -> Result<gating_core::Flow, StoreError> {
        self.timed("flow", self.inner.flow(caller, since)).await
    }

    fn flow_fingerprints(&self, secret: &str) -> Vec<[u8; 16]> {
        self.inner.flow_fingerprints(secret)
    }
}

#[async_trait]
impl CatalogStore for Metered {
    async fn observe(
        &self,
        key: &DefinitionKey,
        definition: &Value,
        first: FirstSight,
        reasons: &[String],
    ) -> Result<Observed, StoreError> {
        self.timed(
            "observe_definition",
            self.inner.observe(key, definition, first, reasons),
        )
        .await
    }

    async fn definition_changes(&self, limit: usize) -> Result<Vec<DefinitionChange>, StoreError> {
        self.timed("definition_changes", self.inner.definition_changes(limit))
            .await
    }

    async fn decide_change(
        &self,
        id: uuid::Uuid,
        approve: bool,
        by: Option<&str>,
    ) -> Result<DefinitionChange, StoreError> {
        self.timed("decide_change", self.inner.decide_change(id, approve, by))
            .await
    }

    async fn pin(&self, key: &DefinitionKey) -> Result<Option<Pin>, StoreError> {
        self.timed("pin", self.inner.pin(key)).await
    }
}

#[async_trait]
impl crate::Outbox for Metered {
    async fn claim_notices(
        &self,
        now: OffsetDateTime,
        lease: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<crate::Notice>, StoreError> {
        self.timed("claim_notices", self.inner.claim_notices(now, lease, limit))
            .await
    }

    async fn settle_notice(
        &self,
        id: i64,
        delivered: &[String],
        settle: crate::Settle,
        now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.timed(
            "settle_notice",
            self.inner.settle_notice(id, delivered, settle, now),
        )
        .await
    }

    async fn record_step(
        &self,
        caller: &Caller,
        elicitation: ElicitationId,
        tool: Option<&str>,
        step: crate::NoticeStep,
        detail: Value,
    ) -> Result<(), StoreError> {
        self.timed(
            "record_step",
            self.inner
                .record_step(caller, elicitation, tool, step, detail),
        )
        .await
    }

    fn notices_dropped(&self) -> u64 {
        self.inner.notices_dropped()
    }
}

#[async_trait]
impl crate::AccountStore for Metered {
    async fn save_account(
        &self,
        caller: &Caller,
        module: &str,
        tokens: &crate::AccountTokens,
        reconnect: bool,
    ) -> Result<crate::Account, StoreError> {
        self.timed(
            "save_account",
            self.inner.save_account(caller, module, tokens, reconnect),
        )
        .await
    }

    async fn refresh_account(
        &self,
        caller: &Caller,
        module: &str,
        version: i64,
        tokens: &crate::AccountTokens,
    ) -> Result<Option<crate::Account>, StoreError> {
        self.timed(
            "refresh_account",
            self.inner.refresh_account(caller, module, version, tokens),
        )
        .await
    }

    async fn remove_account_at(
        &self,
        caller: &Caller,
        module: &str,
        version: i64,
    ) -> Result<bool, StoreError> {
        self.timed(
            "remove_account",
            self.inner.remove_account_at(caller, module, version),
        )
        .await
    }

    async fn account(
        &self,
        caller: &Caller,
        module: &str,
    ) -> Result<Option<crate::Account>, StoreError> {
        self.timed("account", self.inner.account(caller, module))
            .await
    }

    async fn accounts(&self, caller: &Caller) -> Result<Vec<crate::Account>, StoreError> {
        self.timed("accounts", self.inner.accounts(caller)).await
    }

    async fn remove_account(&self, caller: &Caller, module: &str) -> Result<bool, StoreError> {
        self.timed("remove_account", self.inner.remove_account(caller, module))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::conformance::{Harness, Setup, conformance_tests, start_time};
    use crate::{ManualClock, MemoryLimits, MemoryStore};

    /// A meter that keeps what it was told.
    #[derive(Default)]
    struct Told {
        operations: Mutex<Vec<&'static str>>,
        created: Mutex<Vec<ElicitationType>>,
        answered: Mutex<Vec<&'static str>>,
    }

    impl StoreMeter for Told {
        fn operation(&self, op: &'static str, _: Duration, _: Option<&StoreError>) {
            self.operations.lock().unwrap().push(op);
        }
        fn created(&self, kind: ElicitationType) {
            self.created.lock().unwrap().push(kind);
        }
        fn answered(&self, outcome: &'static str, _: ElicitationId) {
            self.answered.lock().unwrap().push(outcome);
        }
        fn expired(&self, _: usize) {}
        fn erased(&self, _: usize) {}
        fn pending(&self, _: u64) {}
    }

    fn metered(setup: Setup, told: Arc<Told>) -> Harness {
        let clock = Arc::new(ManualClock::new(start_time()));
        let limits = MemoryLimits {
            max_pending_per_caller: setup.max_pending_per_caller,
            ..MemoryLimits::default()
        };
        let inner: Arc<dyn Store> =
            Arc::new(MemoryStore::new(clock.clone(), limits).notify_on(setup.notify_events));
        let store: Arc<dyn Store> = Arc::new(Metered::new(inner, told));
        Harness {
            twin: store.clone(),
            store,
            clock,
        }
    }

    async fn make(setup: Setup) -> Harness {
        metered(setup, Arc::default())
    }

    // The decorator is a store like the others: the whole suite runs through it.
    conformance_tests!(make);

    #[tokio::test]
    async fn operations_are_timed_and_an_elicitations_life_is_counted_once() {
        let told = Arc::new(Told::default());
        let h = metered(Setup::default(), told.clone());
        let alice = Caller::new("alice", None).unwrap();
        let spec = ElicitationSpec::confirmation("Delete?").unwrap();
        let e = h
            .store
            .create(&alice, spec, time::Duration::minutes(5))
            .await
            .unwrap();
        h.store
            .respond_as(&alice, e.id, serde_json::json!({"confirmed": true}), None)
            .await
            .unwrap();
        // Answered again: the store records nothing new, and nothing is counted twice.
        h.store
            .respond_as(&alice, e.id, serde_json::json!({"confirmed": true}), None)
            .await
            .unwrap();
        assert_eq!(
            *told.created.lock().unwrap(),
            [ElicitationType::Confirmation]
        );
        assert_eq!(*told.answered.lock().unwrap(), ["approved"]);
        assert_eq!(
            *told.operations.lock().unwrap(),
            ["create", "respond", "respond"]
        );
    }
}
