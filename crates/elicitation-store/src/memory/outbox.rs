//! The memory store's notification outbox.
use crate::StoreError;
use async_trait::async_trait;
use time::OffsetDateTime;

use super::*;

#[async_trait]
impl crate::Outbox for MemoryStore {
    async fn claim_notices(
        &self,
        now: OffsetDateTime,
        lease: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<crate::Notice>, StoreError> {
        Ok(self.lock_notices().claim(now, lease, limit))
    }

    async fn settle_notice(
        &self,
        id: i64,
        delivered: &[String],
        settle: crate::Settle,
        _now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.lock_notices().settle(id, delivered, settle);
        Ok(())
    }

    async fn record_step(
        &self,
        caller: &crate::Caller,
        elicitation: ElicitationId,
        tool: Option<&str>,
        step: crate::NoticeStep,
        detail: serde_json::Value,
    ) -> Result<(), StoreError> {
        crate::notices::emit_step(step, caller, elicitation);
        self.record(step.event(), caller, Some(elicitation), tool, detail);
        Ok(())
    }

    fn notices_dropped(&self) -> u64 {
        self.lock_notices().dropped()
    }
}
