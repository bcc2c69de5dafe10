//! What the memory store's one instance tells itself, and its audit trail.

use crate::audit::{self, AuditPage, AuditQuery, GateRecord, PolicyRef};
use crate::{AuditSink, Fleet, SingleInstance};
use crate::{Caller, StoreError};
use async_trait::async_trait;
use elicitation_core::ElicitationId;
use std::sync::PoisonError;
use time::OffsetDateTime;

use super::*;

/// The memory store serves one instance: it keeps no fleet record (each instance remembers
/// what ended) and tells nobody.
#[async_trait]
impl Fleet for MemoryStore {
    async fn end_session(
        &self,
        caller: &Caller,
        session: [u8; 32],
        until: OffsetDateTime,
    ) -> Result<(), StoreError> {
        SingleInstance.end_session(caller, session, until).await
    }

    async fn ended_sessions(&self) -> Result<Vec<([u8; 32], OffsetDateTime)>, StoreError> {
        SingleInstance.ended_sessions().await
    }

    fn session_ends(&self) -> Option<tokio::sync::broadcast::Receiver<[u8; 32]>> {
        SingleInstance.session_ends()
    }

    async fn broadcast(&self, message: &str) -> Result<(), StoreError> {
        SingleInstance.broadcast(message).await
    }

    fn broadcasts(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        SingleInstance.broadcasts()
    }
}

/// The memory store keeps the most recent audit events ([`MAX_MEMORY_AUDIT_EVENTS`]); the
/// log (target `audit`) has every one.
#[async_trait]
impl AuditSink for MemoryStore {
    async fn record_gate(
        &self,
        caller: &Caller,
        elicitation: Option<ElicitationId>,
        tool: &str,
        record: GateRecord,
        policy: &PolicyRef,
    ) -> Result<(), StoreError> {
        self.record(
            record.event(),
            caller,
            elicitation,
            Some(tool),
            audit::gate_detail(record, policy),
        );
        Ok(())
    }

    async fn audit_events(
        &self,
        reader: &Caller,
        query: &AuditQuery,
    ) -> Result<AuditPage, StoreError> {
        Ok(self
            .trail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .page(reader, query))
    }
}
