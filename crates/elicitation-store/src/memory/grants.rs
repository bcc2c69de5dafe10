//! The memory store's standing grants.
use crate::audit::AuditEvent;
use crate::grant::{AnswerWith, Grant, GrantId, GrantStore};
use crate::{Approver, Caller, ElicitationStore, MAX_LIST_LIMIT, StoreError, StoredElicitation};
use async_trait::async_trait;
use elicitation_core::{ElicitationId, RespondOutcome};
use serde_json::Value;

use super::*;

#[async_trait]
impl GrantStore for MemoryStore {
    async fn respond_with(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: AnswerWith,
    ) -> Result<(RespondOutcome, Option<Grant>), StoreError> {
        self.own_answer(caller, id, payload, answered_by, Some(with))
    }

    async fn approver_respond_with(
        &self,
        approver: &Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: AnswerWith,
    ) -> Result<(Caller, RespondOutcome, Option<Grant>), StoreError> {
        self.approver_answer(approver, id, payload, answered_by, Some(with))
    }

    async fn approver_get(
        &self,
        approver: &Approver,
        id: ElicitationId,
    ) -> Result<(Caller, StoredElicitation), StoreError> {
        let owner = self.approver_owner(approver, id)?;
        let stored = self.get(&owner, id).await?;
        Ok((owner, stored))
    }

    async fn live_grants(&self, caller: &Caller, tool: &str) -> Result<Vec<Grant>, StoreError> {
        let now = self.clock.now();
        let mut live: Vec<Grant> = self
            .lock_grants()
            .values()
            .filter(|g| g.caller == *caller && g.tool == tool && g.is_live(now))
            .cloned()
            .collect();
        live.sort_by_key(|g| (g.created_at, g.id));
        Ok(live)
    }

    async fn use_grant(
        &self,
        caller: &Caller,
        id: GrantId,
        tool: &str,
    ) -> Result<Option<Grant>, StoreError> {
        let now = self.clock.now();
        let mut grants = self.lock_grants();
        let Some(grant) = grants
            .get_mut(&id)
            .filter(|g| g.caller == *caller && g.tool == tool && g.is_live(now))
        else {
            return Ok(None);
        };
        grant.uses += 1;
        self.record_grant(AuditEvent::ToolCallForwarded, grant);
        Ok(Some(grant.clone()))
    }

    async fn grants(&self, caller: &Caller, limit: usize) -> Result<Vec<Grant>, StoreError> {
        let mut found: Vec<Grant> = self
            .lock_grants()
            .values()
            .filter(|g| g.caller == *caller || g.granter == *caller)
            .cloned()
            .collect();
        found.sort_by_key(|g| std::cmp::Reverse((g.created_at, g.id)));
        found.truncate(limit.min(MAX_LIST_LIMIT));
        Ok(found)
    }

    async fn revoke_grant(
        &self,
        revoker: &Caller,
        id: GrantId,
        revoked_by: Option<&str>,
    ) -> Result<Grant, StoreError> {
        let now = self.clock.now();
        let mut grants = self.lock_grants();
        let grant = grants
            .get_mut(&id)
            .filter(|g| g.caller == *revoker || g.granter == *revoker)
            .ok_or(StoreError::GrantNotFound { id: *id.as_uuid() })?;
        if grant.is_live(now) {
            grant.revoked_at = Some(now);
            grant.revoked_by = revoked_by.map(elicitation_core::answered_by);
            self.record_grant(AuditEvent::GrantRevoked, grant);
        }
        Ok(grant.clone())
    }
}
