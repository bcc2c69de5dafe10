//! The memory store's elicitations: created, answered (by their caller or an approver),
//! cancelled, redeemed, expired and erased.
use crate::audit::{self, AuditEvent, Event};
use crate::store::{as_seen, new_elicitation};
use crate::{
    Approver, CallBinding, Caller, ConfirmationRequest, ElicitationStore, ErasedElicitation,
    ExpiredElicitation, ListQuery, Listed, MAX_LIST_LIMIT, Redeemed, StoreError, StoredElicitation,
};
use async_trait::async_trait;
use elicitation_core::{
    CancelReason, Elicitation, ElicitationId, ElicitationSpec, ElicitationStatus, RespondOutcome,
};
use serde_json::Value;
use time::{Duration, OffsetDateTime};
use tokio::sync::broadcast;

use super::*;

#[async_trait]
impl ElicitationStore for MemoryStore {
    async fn create(
        &self,
        caller: &Caller,
        spec: ElicitationSpec,
        ttl: Duration,
    ) -> Result<Elicitation, StoreError> {
        let now = self.clock.now();
        let elicitation = new_elicitation(&self.rng, spec, now, ttl)?;
        let entry = Entry::new(caller, elicitation.clone(), None);
        self.insert(entry, now)?;
        audit::emit(
            Event::Requested(elicitation.kind()),
            caller,
            elicitation.id,
            None,
        );
        self.record(
            AuditEvent::ElicitationRequested,
            caller,
            Some(elicitation.id),
            None,
            Value::Object(Event::Requested(elicitation.kind()).detail()),
        );
        Ok(elicitation)
    }

    async fn create_confirmation(
        &self,
        caller: &Caller,
        request: ConfirmationRequest,
    ) -> Result<StoredElicitation, StoreError> {
        let now = self.clock.now();
        let policy = request.policy.clone();
        let client = request.client.clone();
        let stored = request.into_new(&self.rng, now)?;
        let held = audit::held_detail(
            &policy,
            stored.elicitation.spec.message(),
            stored.call.as_ref().map(|c| &c.digest),
            client.as_deref(),
        );
        let entry = Entry::new(caller, stored.elicitation.clone(), stored.call.clone());
        self.insert(entry, now)?;
        let tool = stored.call.as_ref().map(|c| c.tool.as_str());
        audit::emit(
            Event::Requested(stored.elicitation.kind()),
            caller,
            stored.elicitation.id,
            tool,
        );
        let id = Some(stored.elicitation.id);
        let requested = Event::Requested(stored.elicitation.kind()).detail();
        self.record(
            AuditEvent::ElicitationRequested,
            caller,
            id,
            tool,
            Value::Object(requested),
        );
        if tool.is_some() {
            self.record(AuditEvent::ToolCallHeld, caller, id, tool, held);
        }
        Ok(stored)
    }

    async fn get(
        &self,
        caller: &Caller,
        id: ElicitationId,
    ) -> Result<StoredElicitation, StoreError> {
        let now = self.clock.now();
        self.with_entry(caller, id, |entry| entry.stored(now))
    }

    async fn list(&self, caller: &Caller, query: ListQuery) -> Result<Vec<Listed>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        let mut found: Vec<StoredElicitation> = state
            .of_caller(caller)
            .filter(|e| {
                query
                    .status
                    .is_none_or(|s| e.elicitation.status_at(now) == s)
            })
            .map(|e| e.stored(now))
            .collect();
        found.sort_by(|a, b| {
            (b.elicitation.created_at, b.elicitation.id)
                .cmp(&(a.elicitation.created_at, a.elicitation.id))
        });
        found.truncate(query.capped_limit());
        Ok(found.into_iter().map(Ok).collect())
    }

    async fn approver_pending(
        &self,
        approver: &Approver,
        limit: usize,
    ) -> Result<Vec<(Caller, StoredElicitation)>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        let mut found: Vec<(Caller, StoredElicitation)> = state
            .entries
            .values()
            .filter(|e| e.elicitation.status_at(now) == ElicitationStatus::Pending)
            .filter(|e| {
                e.call
                    .as_ref()
                    .and_then(|c| c.approval.as_ref())
                    .is_some_and(|a| a.answered_by_groups(&approver.groups))
            })
            .map(|e| (e.caller.clone(), e.stored(now)))
            .collect();
        found.sort_by(|(_, a), (_, b)| {
            (b.elicitation.created_at, b.elicitation.id)
                .cmp(&(a.elicitation.created_at, a.elicitation.id))
        });
        found.truncate(limit.min(MAX_LIST_LIMIT));
        Ok(found)
    }

    async fn approver_respond(
        &self,
        approver: &Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<(Caller, RespondOutcome), StoreError> {
        self.approver_answer(approver, id, payload, answered_by, None)
            .map(|(owner, outcome, _)| (owner, outcome))
    }

    async fn respond_as(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<RespondOutcome, StoreError> {
        self.own_answer(caller, id, payload, answered_by, None)
            .map(|(outcome, _)| outcome)
    }

    async fn cancel(
        &self,
        caller: &Caller,
        id: ElicitationId,
        reason: CancelReason,
    ) -> Result<Elicitation, StoreError> {
        let now = self.clock.now();
        self.with_entry(caller, id, |entry| {
            entry.refuse_if_overdue(now)?;
            entry.elicitation.cancel(reason, now)?;
            self.record_entry(entry, Event::Cancelled(reason));
            Ok(entry.elicitation.clone())
        })?
    }

    async fn confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Option<Elicitation>, StoreError> {
        let now = self.clock.now();
        match self.with_entry(caller, id, |entry| {
            entry
                .bound_to(binding)
                .then(|| as_seen(entry.elicitation.clone(), now))
        }) {
            Err(StoreError::NotFound { .. }) => Ok(None),
            other => other,
        }
    }

    async fn confirmation_for(
        &self,
        caller: &Caller,
        binding: &CallBinding,
    ) -> Result<Option<ElicitationId>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        let bound = || {
            state
                .of_caller(caller)
                .filter(|e| e.bound_to(binding) && e.elicitation.expires_at > now)
        };
        let approved = bound().find(|e| {
            e.elicitation.status == ElicitationStatus::Responded
                && e.elicitation.confirmation_state() == Some(true)
                && e.elicitation.consumed_at.is_none()
        });
        let declined = || {
            bound().find(|e| {
                e.elicitation.status == ElicitationStatus::Responded
                    && e.elicitation.confirmation_state() == Some(false)
                    && !e.reported
            })
        };
        let pending =
            || bound().find(|e| e.elicitation.status_at(now) == ElicitationStatus::Pending);
        Ok(approved
            .or_else(declined)
            .or_else(pending)
            .map(|e| e.elicitation.id))
    }

    async fn report_decline(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<bool, StoreError> {
        let mut state = self.lock();
        let Some(entry) = state.entries.get_mut(&id).filter(|e| e.caller == *caller) else {
            return Ok(false);
        };
        let declined = entry.bound_to(binding)
            && entry.elicitation.status == ElicitationStatus::Responded
            && entry.elicitation.confirmation_state() == Some(false)
            && !entry.reported;
        if declined {
            entry.reported = true;
        }
        Ok(declined)
    }

    async fn redeem_confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Redeemed, StoreError> {
        let now = self.clock.now();
        self.with_entry(caller, id, |entry| {
            if !entry.bound_to(binding) {
                return Err(StoreError::NotFound { id });
            }
            let redeemed = Redeemed::decide(as_seen(entry.elicitation.clone(), now), now);
            if let Redeemed::Consumed(consumed) = &redeemed {
                entry.elicitation = consumed.clone();
                self.record(
                    AuditEvent::ToolCallForwarded,
                    caller,
                    Some(id),
                    Some(&binding.tool),
                    serde_json::json!({"gated": true}),
                );
            }
            Ok(redeemed)
        })?
    }

    fn changes(&self) -> Option<broadcast::Receiver<ElicitationId>> {
        Some(self.changes.subscribe())
    }

    async fn wait_for_change(
        &self,
        caller: &Caller,
        id: ElicitationId,
        deadline: tokio::time::Instant,
    ) -> Result<Elicitation, StoreError> {
        crate::wait::wait_for_change(
            &self.changes,
            id,
            deadline,
            None,
            || self.clock.now(),
            || async { self.get(caller, id).await.map(|s| s.elicitation) },
        )
        .await
    }

    async fn erase_finished(
        &self,
        before: OffsetDateTime,
    ) -> Result<Vec<ErasedElicitation>, StoreError> {
        let mut state = self.lock();
        let erased: Vec<ErasedElicitation> = state
            .entries
            .values()
            .filter(|entry| {
                let e = &entry.elicitation;
                e.status != ElicitationStatus::Pending
                    && [
                        Some(e.expires_at),
                        e.responded_at,
                        e.cancelled_at,
                        e.consumed_at,
                    ]
                    .into_iter()
                    .flatten()
                    .all(|at| at <= before)
            })
            .map(|entry| ErasedElicitation {
                id: entry.elicitation.id,
                kind: entry.elicitation.kind(),
            })
            .collect();
        for e in &erased {
            state.remove(e.id);
        }
        drop(state);
        self.lock_grants().retain(|_, g| !g.ended_before(before));
        Ok(erased)
    }

    async fn pending_count(&self) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        Ok(state
            .entries
            .values()
            .filter(|e| e.elicitation.status_at(now) == ElicitationStatus::Pending)
            .count() as u64)
    }

    async fn expire_due(&self, now: OffsetDateTime) -> Result<Vec<ExpiredElicitation>, StoreError> {
        // Quota counters whose window ended go on the same tick.
        self.forget_old_quota_counters(now);
        let expired: Vec<ExpiredElicitation> = {
            let mut state = self.lock();
            state
                .entries
                .values_mut()
                .filter_map(|entry| {
                    if !entry.elicitation.expire(now) {
                        return None;
                    }
                    self.record_entry(entry, Event::Timeout);
                    Some(ExpiredElicitation {
                        caller: entry.caller.clone(),
                        elicitation: entry.elicitation.clone(),
                        tool: entry.call.as_ref().map(|c| c.tool.clone()),
                    })
                })
                .collect()
        };
        for e in &expired {
            self.notice(&e.caller, e.elicitation.id, crate::NoticeEvent::Expired);
            self.notify(e.elicitation.id);
        }
        Ok(expired)
    }
}
