//! The outbox (V16): notices recorded by a trigger with the change they tell of, claimed
//! by one instance at a time.

use std::time::Duration as StdDuration;

use async_trait::async_trait;
use elicitation_core::ElicitationId;
use time::OffsetDateTime;

use super::{PostgresStore, sql};
use crate::error::map_db_error;
use crate::{Caller, Notice, NoticeEvent, Outbox, Settle, StoreError};

#[async_trait]
impl Outbox for PostgresStore {
    async fn claim_notices(
        &self,
        now: OffsetDateTime,
        lease: StdDuration,
        limit: usize,
    ) -> Result<Vec<Notice>, StoreError> {
        let until = now + lease;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .with_client(async |client| {
                self.round_trips
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                client
                    .query(sql::CLAIM_NOTICES, &[&now, &until, &limit])
                    .await
                    .map_err(map_db_error)
            })
            .await?;
        let mut notices = Vec::with_capacity(rows.len());
        for row in rows {
            let event: String = row.get(5);
            let Some(event) = NoticeEvent::from_label(&event) else {
                return Err(StoreError::Backend(
                    format!(
                        "notice {} has an unknown event {event:?}",
                        row.get::<_, i64>(0)
                    )
                    .into(),
                ));
            };
            notices.push(Notice {
                id: row.get(0),
                delivery: row.get(1),
                elicitation: ElicitationId::from_uuid(row.get(2)),
                caller: Caller::new(row.get::<_, String>(3), row.get::<_, Option<String>>(4))?,
                event,
                at: row.get(6),
                attempts: u32::try_from(row.get::<_, i32>(7)).unwrap_or_default(),
                delivered: row.get(8),
            });
        }
        Ok(notices)
    }

    async fn settle_notice(
        &self,
        id: i64,
        delivered: &[String],
        settle: Settle,
        now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        let again = match settle {
            Settle::Done => None,
            Settle::RetryAt(at) => Some(at),
        };
        let delivered = delivered.to_vec();
        self.with_client(async |client| {
            self.round_trips
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            client
                .execute(sql::SETTLE_NOTICE, &[&id, &delivered, &again, &now])
                .await
                .map_err(map_db_error)
        })
        .await?;
        Ok(())
    }

    async fn record_step(
        &self,
        caller: &Caller,
        elicitation: ElicitationId,
        tool: Option<&str>,
        step: crate::NoticeStep,
        detail: serde_json::Value,
    ) -> Result<(), StoreError> {
        let now = self.now();
        self.scoped(
            caller,
            sql::RECORD_STEP,
            &[
                &now,
                &step.event().label(),
                &caller.subject_id(),
                &caller.tenant_id(),
                elicitation.as_uuid(),
                &tool,
                &detail,
            ],
        )
        .await?;
        crate::notices::emit_step(step, caller, elicitation);
        Ok(())
    }

    /// The table is the outbox: it never drops a notice.
    fn notices_dropped(&self) -> u64 {
        0
    }
}
