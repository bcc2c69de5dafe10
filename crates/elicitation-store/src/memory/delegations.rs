//! The memory store's delegations: kept in this process only, bounded per delegator and in
//! all.

use std::collections::BTreeMap;
use std::sync::PoisonError;

use async_trait::async_trait;

use super::MemoryStore;
use crate::audit::AuditEvent;
use crate::delegation::{check, detail, emit};
use crate::{
    Approver, Caller, Delegation, DelegationId, DelegationRequest, DelegationStore,
    MAX_DELEGATIONS_PER_CALLER, MAX_LIST_LIMIT, StoreError,
};

/// Most delegations the memory store holds in all (ended ones are dropped first).
const MAX_DELEGATIONS: usize = 100_000;

/// Every delegation, by id (ids are v7: in creation order).
pub(super) type Delegations = BTreeMap<DelegationId, Delegation>;

impl MemoryStore {
    fn lock_delegations(&self) -> std::sync::MutexGuard<'_, Delegations> {
        self.delegations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn record_delegation(&self, event: AuditEvent, delegation: &Delegation, actor: &Caller) {
        emit(event, delegation, actor);
        self.record(event, actor, None, None, detail(delegation));
    }
}

#[async_trait]
impl DelegationStore for MemoryStore {
    async fn delegate(
        &self,
        from: &Approver,
        request: DelegationRequest,
    ) -> Result<Delegation, StoreError> {
        let now = elicitation_core::truncate_to_micros(self.clock.now());
        let (to, starts_at, ends_at) = check(from, request, now)?;
        let id = DelegationId::from_uuid(*self.new_grant_id(now)?.as_uuid());
        let delegation = Delegation {
            id,
            from: from.caller.clone(),
            to,
            groups: from.groups.clone(),
            starts_at,
            ends_at,
            created_at: now,
            revoked_at: None,
            revoked_by: None,
        };
        {
            let mut all = self.lock_delegations();
            let open = all
                .values()
                .filter(|d| d.from == from.caller && !d.has_ended(now))
                .count();
            if open >= MAX_DELEGATIONS_PER_CALLER {
                return Err(StoreError::AnswerRefused(format!(
                    "you have {MAX_DELEGATIONS_PER_CALLER} delegations that have not ended, the most kept; revoke some first"
                )));
            }
            if all.len() >= MAX_DELEGATIONS {
                all.retain(|_, d| !d.has_ended(now));
                if all.len() >= MAX_DELEGATIONS {
                    return Err(StoreError::Full {
                        limit: MAX_DELEGATIONS,
                    });
                }
            }
            all.insert(id, delegation.clone());
        }
        self.record_delegation(AuditEvent::DelegationCreated, &delegation, &from.caller);
        Ok(delegation)
    }

    async fn delegations(
        &self,
        caller: &Caller,
        limit: usize,
    ) -> Result<Vec<Delegation>, StoreError> {
        Ok(self
            .lock_delegations()
            .values()
            .rev()
            .filter(|d| d.concerns(caller))
            .take(limit.min(MAX_LIST_LIMIT))
            .cloned()
            .collect())
    }

    async fn revoke_delegation(
        &self,
        caller: &Caller,
        id: DelegationId,
    ) -> Result<Delegation, StoreError> {
        let now = elicitation_core::truncate_to_micros(self.clock.now());
        let revoked = {
            let mut all = self.lock_delegations();
            let Some(delegation) = all
                .get_mut(&id)
                .filter(|d| d.concerns(caller) && !d.has_ended(now))
            else {
                return Err(StoreError::DelegationNotFound { id: *id.as_uuid() });
            };
            delegation.revoked_at = Some(now);
            delegation.revoked_by = Some(caller.subject_id().to_owned());
            delegation.clone()
        };
        self.record_delegation(AuditEvent::DelegationRevoked, &revoked, caller);
        Ok(revoked)
    }

    async fn acting_for(&self, delegate: &Caller) -> Result<Vec<Delegation>, StoreError> {
        let now = self.clock.now();
        Ok(self
            .lock_delegations()
            .values()
            .filter(|d| d.to == *delegate && d.is_live(now))
            .take(crate::delegation::MAX_ACTING_FOR)
            .cloned()
            .collect())
    }
}
