//! Tool-definition pins on PostgreSQL (`mcp_pins`, append-only for the writer role, and
//! `mcp_definition_changes`; migration V14). Catalog rows, not a caller's: the statements run
//! as the gateway's own caller, which the audit rows they write name.

use async_trait::async_trait;
use gating_core::CallDigest;
use ring::rand::SecureRandom;
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::Row;
use uuid::Uuid;

use super::PostgresStore;
use crate::audit::AuditEvent;
use crate::grant::GrantId;
use crate::pins::{
    CatalogStore, ChangeStatus, DefinitionChange, DefinitionKey, DefinitionKind, FirstSight,
    Observed, Pin, definition_digest,
};
use crate::{Caller, MAX_LIST_LIMIT, StoreError};

use crate::pins::CATALOG_SUBJECT;

const CURRENT_PIN: &str = "SELECT module, kind, name, version, digest, definition, pinned_at, pinned_by \
     FROM mcp_pins WHERE module = $1 AND kind = $2 AND name = $3 ORDER BY version DESC LIMIT 1";

const FIRST_PIN: &str = "INSERT INTO mcp_pins (module, kind, name, version, digest, definition, pinned_at) \
     VALUES ($1, $2, $3, 1, $4, $5, $6) ON CONFLICT DO NOTHING";

/// `$1` id, `$2`–`$4` the key, `$5` the pin version it is against, `$6` digest, `$7` the
/// definition, `$8` reasons, `$9` now, `$10` the catalog subject, `$11` the pin's digest (hex).
const NEW_CHANGE: &str = concat!(
    "WITH changed AS (INSERT INTO mcp_definition_changes (id, module, kind, name, pinned_version, proposed_digest, proposed, reasons, seen_at) ",
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ",
    "ON CONFLICT (module, kind, name, proposed_digest, (coalesce(pinned_version, 0))) WHERE status <> 'approved' DO NOTHING ",
    "RETURNING id, module, kind, name), ",
    "audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, tool_name, detail) ",
    "SELECT $9, 'tool_definition_changed', $10, NULL, name, jsonb_strip_nulls(jsonb_build_object('change', id::text, 'module', module, 'kind', kind, 'proposed_digest', encode($6, 'hex'), 'pinned_digest', $11::text)) FROM changed) ",
    "SELECT count(*) FROM changed"
);

/// A change with the pin it is against.
macro_rules! change_columns {
    () => {
        "c.id, c.module, c.kind, c.name, c.status, c.reasons, c.proposed_digest, c.proposed, c.seen_at, c.decided_at, c.decided_by, \
         p.version, p.digest, p.definition, p.pinned_at, p.pinned_by \
         FROM mcp_definition_changes c LEFT JOIN mcp_pins p \
         ON p.module = c.module AND p.kind = c.kind AND p.name = c.name AND p.version = c.pinned_version"
    };
}

const CHANGE_FOR: &str = concat!(
    "SELECT ",
    change_columns!(),
    " WHERE c.module = $1 AND c.kind = $2 AND c.name = $3 AND c.proposed_digest = $4 ",
    "AND coalesce(c.pinned_version, 0) = coalesce($5::integer, 0) AND c.status <> 'approved'"
);

const CHANGE_BY_ID: &str = concat!("SELECT ", change_columns!(), " WHERE c.id = $1");

const CHANGES: &str = concat!(
    "SELECT ",
    change_columns!(),
    " ORDER BY c.status <> 'pending', c.seen_at DESC, c.id DESC LIMIT $1"
);

/// Approves pending change `$1` at `$2` by `$3` if the pin it is against is still the key's
/// newest: it becomes the next version. `$4` the catalog subject.
const APPROVE: &str = concat!(
    "WITH changed AS (UPDATE mcp_definition_changes c SET status = 'approved', decided_at = $2, decided_by = $3 ",
    "WHERE c.id = $1 AND c.status = 'pending' AND c.pinned_version IS NOT DISTINCT FROM ",
    "(SELECT max(version) FROM mcp_pins p WHERE p.module = c.module AND p.kind = c.kind AND p.name = c.name) ",
    "RETURNING id, module, kind, name, pinned_version, proposed_digest, proposed), ",
    "pinned AS (INSERT INTO mcp_pins (module, kind, name, version, digest, definition, pinned_at, pinned_by) ",
    "SELECT module, kind, name, coalesce(pinned_version, 0) + 1, proposed_digest, proposed, $2, $3 FROM changed RETURNING version), ",
    "audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, tool_name, detail) ",
    "SELECT $2, 'tool_definition_approved', $4, NULL, name, jsonb_strip_nulls(jsonb_build_object('change', id::text, 'module', module, 'kind', kind, 'proposed_digest', encode(proposed_digest, 'hex'), 'decided_by', $3::text)) FROM changed) ",
    "SELECT count(*) FROM changed"
);

/// Rejects pending change `$1` at `$2` by `$3`; `$4` the catalog subject.
const REJECT: &str = concat!(
    "WITH changed AS (UPDATE mcp_definition_changes SET status = 'rejected', decided_at = $2, decided_by = $3 ",
    "WHERE id = $1 AND status = 'pending' RETURNING id, module, kind, name, proposed_digest), ",
    "audit AS (INSERT INTO mcp_audit_events (at, event, caller_subject, caller_tenant, tool_name, detail) ",
    "SELECT $2, 'tool_definition_rejected', $4, NULL, name, jsonb_strip_nulls(jsonb_build_object('change', id::text, 'module', module, 'kind', kind, 'proposed_digest', encode(proposed_digest, 'hex'), 'decided_by', $3::text)) FROM changed) ",
    "SELECT count(*) FROM changed"
);

fn catalog_caller() -> Result<Caller, StoreError> {
    Caller::new(CATALOG_SUBJECT, None).map_err(|_| corrupt("the catalog's subject is not a caller"))
}

fn corrupt(reason: impl Into<String>) -> StoreError {
    StoreError::Backend(reason.into().into())
}

fn get_err(e: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(Box::new(e))
}

fn digest_of(bytes: &[u8]) -> Result<CallDigest, StoreError> {
    let bytes: [u8; 32] = bytes
        .try_into()
        .map_err(|_| corrupt("a definition digest is not 32 bytes"))?;
    Ok(CallDigest::from_bytes(bytes))
}

fn key_of(row: &Row) -> Result<DefinitionKey, StoreError> {
    let kind: String = row.try_get("kind").map_err(get_err)?;
    Ok(DefinitionKey {
        module: row.try_get("module").map_err(get_err)?,
        kind: DefinitionKind::from_label(&kind).ok_or_else(|| corrupt("an unknown kind"))?,
        name: row.try_get("name").map_err(get_err)?,
    })
}

fn pin_of(row: &Row) -> Result<Pin, StoreError> {
    let version: i32 = row.try_get("version").map_err(get_err)?;
    let digest: Vec<u8> = row.try_get("digest").map_err(get_err)?;
    Ok(Pin {
        key: key_of(row)?,
        version: u32::try_from(version).map_err(|_| corrupt("a pin version below 1"))?,
        digest: digest_of(&digest)?,
        definition: row.try_get("definition").map_err(get_err)?,
        pinned_at: row.try_get("pinned_at").map_err(get_err)?,
        pinned_by: row.try_get("pinned_by").map_err(get_err)?,
    })
}

/// A row of [`change_columns!`] (the pin's columns by position, after the change's 11).
fn change_of(row: &Row) -> Result<DefinitionChange, StoreError> {
    let key = key_of(row)?;
    let status: String = row.try_get("status").map_err(get_err)?;
    let reasons: Value = row.try_get("reasons").map_err(get_err)?;
    let proposed_digest: Vec<u8> = row.try_get("proposed_digest").map_err(get_err)?;
    let version: Option<i32> = row.try_get(11).map_err(get_err)?;
    let pinned = match version {
        None => None,
        Some(version) => {
            let digest: Vec<u8> = row.try_get(12).map_err(get_err)?;
            Some(Pin {
                key: key.clone(),
                version: u32::try_from(version).map_err(|_| corrupt("a pin version below 1"))?,
                digest: digest_of(&digest)?,
                definition: row.try_get(13).map_err(get_err)?,
                pinned_at: row.try_get(14).map_err(get_err)?,
                pinned_by: row.try_get(15).map_err(get_err)?,
            })
        }
    };
    Ok(DefinitionChange {
        id: row.try_get("id").map_err(get_err)?,
        key,
        status: ChangeStatus::from_label(&status).ok_or_else(|| corrupt("an unknown status"))?,
        reasons: reasons
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        pinned,
        proposed: row.try_get("proposed").map_err(get_err)?,
        proposed_digest: digest_of(&proposed_digest)?,
        seen_at: row.try_get("seen_at").map_err(get_err)?,
        decided_at: row.try_get("decided_at").map_err(get_err)?,
        decided_by: row.try_get("decided_by").map_err(get_err)?,
    })
}

impl PostgresStore {
    async fn current_pin(&self, key: &DefinitionKey) -> Result<Option<Pin>, StoreError> {
        let kind = key.kind.label();
        let rows = self
            .scoped(
                &catalog_caller()?,
                CURRENT_PIN,
                &[&key.module, &kind, &key.name],
            )
            .await?;
        rows.first().map(pin_of).transpose()
    }

    fn new_change_id(&self, now: OffsetDateTime) -> Result<Uuid, StoreError> {
        let mut random = [0u8; 10];
        self.rng
            .fill(&mut random)
            .map_err(|_| StoreError::Seal(crate::SealError::Random))?;
        Ok(*GrantId::v7(now, random).as_uuid())
    }

    async fn change_by_id(&self, id: Uuid) -> Result<DefinitionChange, StoreError> {
        let rows = self
            .scoped(&catalog_caller()?, CHANGE_BY_ID, &[&id])
            .await?;
        rows.first()
            .map(change_of)
            .transpose()?
            .ok_or(StoreError::ChangeNotFound { id })
    }
}

#[async_trait]
impl CatalogStore for PostgresStore {
    async fn observe(
        &self,
        key: &DefinitionKey,
        definition: &Value,
        first: FirstSight,
        reasons: &[String],
    ) -> Result<Observed, StoreError> {
        let now = self.now();
        let digest = definition_digest(definition);
        let kind = key.kind.label();
        let catalog = catalog_caller()?;
        let mut current = self.current_pin(key).await?;
        if current.is_none() && first == FirstSight::Trust && reasons.is_empty() {
            // However many instances see it at once, one first pin: whichever wrote it.
            self.scoped(
                &catalog,
                FIRST_PIN,
                &[
                    &key.module,
                    &kind,
                    &key.name,
                    &digest.as_bytes().as_slice(),
                    definition,
                    &now,
                ],
            )
            .await?;
            current = self.current_pin(key).await?;
        }
        if let Some(pin) = &current
            && pin.digest == digest
        {
            return Ok(Observed::Pinned(pin.clone()));
        }
        let against: Option<i32> = current
            .as_ref()
            .map(|p| i32::try_from(p.version).unwrap_or(i32::MAX));
        let pinned_hex = current.as_ref().map(|p| p.digest.to_string());
        let reasons = Value::from(crate::pins::reasons_or_default(
            reasons,
            current.is_some(),
            key,
        ));
        let id = self.new_change_id(now)?;
        let subject = CATALOG_SUBJECT;
        let rows = self
            .scoped(
                &catalog,
                NEW_CHANGE,
                &[
                    &id,
                    &key.module,
                    &kind,
                    &key.name,
                    &against,
                    &digest.as_bytes().as_slice(),
                    definition,
                    &reasons,
                    &now,
                    &subject,
                    &pinned_hex,
                ],
            )
            .await?;
        let inserted = rows.first().map(|r| r.get::<_, i64>(0)) == Some(1);
        let found = self
            .scoped(
                &catalog,
                CHANGE_FOR,
                &[
                    &key.module,
                    &kind,
                    &key.name,
                    &digest.as_bytes().as_slice(),
                    &against,
                ],
            )
            .await?;
        let change = found
            .first()
            .map(change_of)
            .transpose()?
            .ok_or_else(|| corrupt("a definition change vanished as it was recorded"))?;
        if inserted {
            crate::pins::emit(AuditEvent::ToolDefinitionChanged, &change);
        }
        Ok(Observed::Held(Box::new(change)))
    }

    async fn definition_changes(&self, limit: usize) -> Result<Vec<DefinitionChange>, StoreError> {
        let limit = i64::try_from(limit.min(MAX_LIST_LIMIT)).unwrap_or(100);
        let rows = self.scoped(&catalog_caller()?, CHANGES, &[&limit]).await?;
        rows.iter().map(change_of).collect()
    }

    async fn decide_change(
        &self,
        id: Uuid,
        approve: bool,
        by: Option<&str>,
    ) -> Result<DefinitionChange, StoreError> {
        let now = self.now();
        let by = by.map(elicitation_core::answered_by);
        let subject = CATALOG_SUBJECT;
        let statement = if approve { APPROVE } else { REJECT };
        let rows = self
            .scoped(&catalog_caller()?, statement, &[&id, &now, &by, &subject])
            .await?;
        let decided = rows.first().map(|r| r.get::<_, i64>(0)) == Some(1);
        let change = self.change_by_id(id).await?;
        let wanted = if approve {
            ChangeStatus::Approved
        } else {
            ChangeStatus::Rejected
        };
        if decided {
            let event = if approve {
                AuditEvent::ToolDefinitionApproved
            } else {
                AuditEvent::ToolDefinitionRejected
            };
            crate::pins::emit(event, &change);
            return Ok(change);
        }
        match change.status {
            status if status == wanted => Ok(change),
            ChangeStatus::Pending => Err(crate::pins::stale(&change)),
            _ => Err(crate::pins::decided_otherwise(&change)),
        }
    }

    async fn pin(&self, key: &DefinitionKey) -> Result<Option<Pin>, StoreError> {
        self.current_pin(key).await
    }
}
