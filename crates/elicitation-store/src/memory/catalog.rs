//! The memory store's tool-definition pins and changes.
use crate::audit::AuditEvent;
use crate::pins::{
    CatalogStore, ChangeStatus, DefinitionChange, DefinitionKey, FirstSight, Observed, Pin,
    definition_digest,
};
use crate::{MAX_LIST_LIMIT, StoreError};
use async_trait::async_trait;
use serde_json::Value;

use super::*;

#[async_trait]
impl CatalogStore for MemoryStore {
    async fn observe(
        &self,
        key: &DefinitionKey,
        definition: &Value,
        first: FirstSight,
        reasons: &[String],
    ) -> Result<Observed, StoreError> {
        let now = self.clock.now();
        let digest = definition_digest(definition);
        let change_id = *self.new_grant_id(now)?.as_uuid();
        let mut catalog = self.lock_catalog();
        let current = catalog.pins.get(key).and_then(|pins| pins.last()).cloned();
        match &current {
            Some(pin) if pin.digest == digest => return Ok(Observed::Pinned(pin.clone())),
            None if first == FirstSight::Trust && reasons.is_empty() => {
                let pin = Pin {
                    key: key.clone(),
                    version: 1,
                    digest,
                    definition: definition.clone(),
                    pinned_at: elicitation_core::truncate_to_micros(now),
                    pinned_by: None,
                };
                catalog.pins.insert(key.clone(), vec![pin.clone()]);
                return Ok(Observed::Pinned(pin));
            }
            _ => {}
        }
        let against = current.as_ref().map(|p| p.version);
        if let Some(known) = catalog.changes.iter().find(|c| {
            c.key == *key
                && c.proposed_digest == digest
                && c.pinned.as_ref().map(|p| p.version) == against
                && c.status != ChangeStatus::Approved
        }) {
            return Ok(Observed::Held(Box::new(known.clone())));
        }
        let change = DefinitionChange {
            id: change_id,
            key: key.clone(),
            status: ChangeStatus::Pending,
            reasons: crate::pins::reasons_or_default(reasons, current.is_some(), key),
            pinned: current,
            proposed: definition.clone(),
            proposed_digest: digest,
            seen_at: elicitation_core::truncate_to_micros(now),
            decided_at: None,
            decided_by: None,
        };
        self.record_change(AuditEvent::ToolDefinitionChanged, &change);
        if catalog.changes.len() >= MAX_DEFINITION_CHANGES
            && let Some(oldest) = catalog
                .changes
                .iter()
                .position(|c| c.status != ChangeStatus::Pending)
        {
            catalog.changes.remove(oldest);
        }
        catalog.changes.push(change.clone());
        Ok(Observed::Held(Box::new(change)))
    }

    async fn definition_changes(&self, limit: usize) -> Result<Vec<DefinitionChange>, StoreError> {
        let catalog = self.lock_catalog();
        let mut found: Vec<DefinitionChange> = catalog.changes.clone();
        found.sort_by_key(|c| {
            (
                c.status != ChangeStatus::Pending,
                std::cmp::Reverse((c.seen_at, c.id)),
            )
        });
        found.truncate(limit.min(MAX_LIST_LIMIT));
        Ok(found)
    }

    async fn decide_change(
        &self,
        id: uuid::Uuid,
        approve: bool,
        by: Option<&str>,
    ) -> Result<DefinitionChange, StoreError> {
        let now = elicitation_core::truncate_to_micros(self.clock.now());
        let mut catalog = self.lock_catalog();
        let Catalog { pins, changes } = &mut *catalog;
        let change = changes
            .iter_mut()
            .find(|c| c.id == id)
            .ok_or(StoreError::ChangeNotFound { id })?;
        let wanted = if approve {
            ChangeStatus::Approved
        } else {
            ChangeStatus::Rejected
        };
        match change.status {
            ChangeStatus::Pending => {}
            status if status == wanted => return Ok(change.clone()),
            _ => return Err(crate::pins::decided_otherwise(change)),
        }
        if approve {
            let versions = pins.entry(change.key.clone()).or_default();
            let current = versions.last().map(|p| p.version);
            if current != change.pinned.as_ref().map(|p| p.version) {
                return Err(crate::pins::stale(change));
            }
            versions.push(Pin {
                key: change.key.clone(),
                version: current.unwrap_or(0) + 1,
                digest: change.proposed_digest,
                definition: change.proposed.clone(),
                pinned_at: now,
                pinned_by: by.map(elicitation_core::answered_by),
            });
        }
        change.status = wanted;
        change.decided_at = Some(now);
        change.decided_by = by.map(elicitation_core::answered_by);
        let event = if approve {
            AuditEvent::ToolDefinitionApproved
        } else {
            AuditEvent::ToolDefinitionRejected
        };
        self.record_change(event, change);
        Ok(change.clone())
    }

    async fn pin(&self, key: &DefinitionKey) -> Result<Option<Pin>, StoreError> {
        Ok(self
            .lock_catalog()
            .pins
            .get(key)
            .and_then(|pins| pins.last())
            .cloned())
    }
}
