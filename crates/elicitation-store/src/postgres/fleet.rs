//! What the PostgreSQL store's instances tell each other (ended sessions, broadcasts), and
//! its audit trail.

use crate::audit::{GateRecord, PolicyRef};
use crate::error::map_db_error;
use crate::{AuditSink, Fleet};
use crate::{Caller, StoreError};
use async_trait::async_trait;
use elicitation_core::{ElicitationId, truncate_to_micros};
use std::sync::atomic::Ordering;
use time::OffsetDateTime;
use tokio::sync::broadcast;

use super::*;

#[async_trait]
impl Fleet for PostgresStore {
    async fn end_session(
        &self,
        caller: &Caller,
        session: [u8; 32],
        until: OffsetDateTime,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let until = truncate_to_micros(until);
        self.scoped(
            caller,
            sql::END_SESSION,
            &[
                &session.as_slice(),
                &caller.subject_id(),
                &tenant_param(caller),
                &now,
                &until,
            ],
        )
        .await?;
        Ok(())
    }

    async fn ended_sessions(&self) -> Result<Vec<([u8; 32], OffsetDateTime)>, StoreError> {
        let rows = self
            .with_client(async |client| {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                client
                    .query(sql::ENDED_SESSIONS, &[])
                    .await
                    .map_err(map_db_error)
            })
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let hash: &[u8] = row.get(0);
                Some((<[u8; 32]>::try_from(hash).ok()?, row.get(1)))
            })
            .collect())
    }

    fn session_ends(&self) -> Option<broadcast::Receiver<[u8; 32]>> {
        Some(self.session_ends.subscribe())
    }

    async fn broadcast(&self, message: &str) -> Result<(), StoreError> {
        if message.len() > crate::MAX_BROADCAST_BYTES {
            return Err(StoreError::Backend(
                format!("a broadcast of {} bytes is too long", message.len()).into(),
            ));
        }
        self.with_client(async |client| {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            client
                .query_one(sql::BROADCAST, &[&message])
                .await
                .map_err(map_db_error)?;
            Ok(())
        })
        .await
    }

    fn broadcasts(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.broadcasts.subscribe())
    }
}

#[async_trait]
impl AuditSink for PostgresStore {
    async fn record_gate(
        &self,
        caller: &Caller,
        elicitation: Option<ElicitationId>,
        tool: &str,
        record: GateRecord,
        policy: &PolicyRef,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let elicitation = elicitation.map(|id| *id.as_uuid());
        let event = record.event().label();
        let completed = matches!(record, GateRecord::Completed(..));
        let reason = crate::audit::gate_detail(record, policy);
        if completed {
            // Written in groups (`completions`): nothing waits on it but this record.
            return self
                .completions
                .record(caller, now, elicitation, tool, reason.to_string())
                .await;
        }
        self.scoped(
            caller,
            sql::RECORD_GATE,
            &[
                &elicitation,
                &caller.subject_id(),
                &tenant_param(caller),
                &tool,
                &event,
                &reason,
                &now,
            ],
        )
        .await?;
        Ok(())
    }

    async fn audit_events(
        &self,
        reader: &Caller,
        query: &crate::AuditQuery,
    ) -> Result<crate::AuditPage, StoreError> {
        let (tool, prefix) = query.tool_pattern();
        let newest = query.order == crate::AuditOrder::Newest;
        let limit = i32::try_from(query.limit.clamp(1, crate::MAX_LIST_LIMIT)).unwrap_or(1);
        let rows = self
            .scoped(
                reader,
                sql::AUDIT_READ,
                &[
                    &query.since,
                    &query.until,
                    &tool,
                    &prefix,
                    &query.caller,
                    &query.outcome,
                    &newest,
                    &query.cursor,
                    &limit,
                ],
            )
            .await?;
        let entries = rows.iter().map(chain::entry).collect();
        Ok(crate::AuditPage::of(
            entries,
            limit as usize,
            crate::AuditHolds::Everything,
        ))
    }
}
