//! A store that can be made to fail or hang: the double the fail-closed tests hold the gate
//! against (it fakes only `ElicitationStore`; the fleet and the audit trail stay a memory
//! store's).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use elicitation_core::{CancelReason, Elicitation, ElicitationId, ElicitationSpec, RespondOutcome};
use elicitation_store::{
    CallBinding, Caller, ConfirmationRequest, ElicitationStore, ExpiredElicitation, ListQuery,
    Listed, MemoryStore, Redeemed, StoreError, StoredElicitation,
};
use serde_json::Value;
use time::{Duration, OffsetDateTime};

/// How a [`FaultyStore`] misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    /// Every operation fails as an unreachable database would.
    Error,
    /// Every operation never answers.
    Silent,
}

/// The memory store's elicitations, with a switch that makes every operation fail or hang
/// (it fakes only `ElicitationStore`).
pub(crate) struct FaultyStore {
    inner: MemoryStore,
    fault: Mutex<Fault>,
}

impl FaultyStore {
    pub(crate) fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    async fn check(&self) -> Result<(), StoreError> {
        let fault = *self.fault.lock().unwrap();
        match fault {
            Fault::None => Ok(()),
            Fault::Error => Err(StoreError::Unavailable(
                "connection refused (test fault)".into(),
            )),
            Fault::Silent => std::future::pending().await,
        }
    }
}

#[async_trait]
impl ElicitationStore for FaultyStore {
    async fn create(
        &self,
        caller: &Caller,
        spec: ElicitationSpec,
        ttl: Duration,
    ) -> Result<Elicitation, StoreError> {
        self.check().await?;
        self.inner.create(caller, spec, ttl).await
    }
    async fn create_confirmation(
        &self,
        caller: &Caller,
        request: ConfirmationRequest,
    ) -> Result<StoredElicitation, StoreError> {
        self.check().await?;
        self.inner.create_confirmation(caller, request).await
    }
    async fn get(
        &self,
        caller: &Caller,
        id: ElicitationId,
    ) -> Result<StoredElicitation, StoreError> {
        self.check().await?;
        self.inner.get(caller, id).await
    }
    async fn list(&self, caller: &Caller, query: ListQuery) -> Result<Vec<Listed>, StoreError> {
        self.check().await?;
        self.inner.list(caller, query).await
    }
    async fn respond_as(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<RespondOutcome, StoreError> {
        self.check().await?;
        self.inner
            .respond_as(caller, id, payload, answered_by)
            .await
    }
    async fn approver_pending(
        &self,
        approver: &elicitation_store::Approver,
        limit: usize,
    ) -> Result<Vec<(Caller, StoredElicitation)>, StoreError> {
        self.check().await?;
        self.inner.approver_pending(approver, limit).await
    }
    async fn approver_respond(
        &self,
        approver: &elicitation_store::Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<(Caller, RespondOutcome), StoreError> {
        self.check().await?;
        self.inner
            .approver_respond(approver, id, payload, answered_by)
            .await
    }
    async fn cancel(
        &self,
        caller: &Caller,
        id: ElicitationId,
        reason: CancelReason,
    ) -> Result<Elicitation, StoreError> {
        self.check().await?;
        self.inner.cancel(caller, id, reason).await
    }
    async fn confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Option<Elicitation>, StoreError> {
        self.check().await?;
        self.inner.confirmation(caller, id, binding).await
    }
    async fn confirmation_for(
        &self,
        caller: &Caller,
        binding: &CallBinding,
    ) -> Result<Option<ElicitationId>, StoreError> {
        self.check().await?;
        self.inner.confirmation_for(caller, binding).await
    }
    async fn report_decline(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<bool, StoreError> {
        self.check().await?;
        self.inner.report_decline(caller, id, binding).await
    }
    async fn redeem_confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Redeemed, StoreError> {
        self.check().await?;
        self.inner.redeem_confirmation(caller, id, binding).await
    }
    async fn wait_for_change(
        &self,
        caller: &Caller,
        id: ElicitationId,
        deadline: tokio::time::Instant,
    ) -> Result<Elicitation, StoreError> {
        self.check().await?;
        self.inner.wait_for_change(caller, id, deadline).await
    }
    async fn expire_due(&self, now: OffsetDateTime) -> Result<Vec<ExpiredElicitation>, StoreError> {
        self.check().await?;
        self.inner.expire_due(now).await
    }
    async fn erase_finished(
        &self,
        before: OffsetDateTime,
    ) -> Result<Vec<elicitation_store::ErasedElicitation>, StoreError> {
        self.check().await?;
        self.inner.erase_finished(before).await
    }
    async fn pending_count(&self) -> Result<u64, StoreError> {
        self.check().await?;
        self.inner.pending_count().await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.check().await
    }
}

/// A store that works until told otherwise.
pub(crate) fn faulty() -> Arc<FaultyStore> {
    Arc::new(FaultyStore {
        inner: MemoryStore::default(),
        fault: Mutex::new(Fault::None),
    })
}
