//! Standing grants in PostgreSQL: made in the statement that records the approval, used and
//! revoked in one statement each, sealed where they say something about the arguments (the
//! digest of scope `call`, the `when` of scope `tool`).

use async_trait::async_trait;
use elicitation_core::{ElicitationId, RespondOutcome, truncate_to_micros};
use gating_core::{CallDigest, GrantScope};
use ring::rand::SecureRandom;
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::{PostgresStore, sql, tenant_param};
use crate::audit::AuditEvent;
use crate::grant::{AnswerWith, Grant, GrantId, GrantRequest, GrantStore};
use crate::seal::{KeyRing, SealContext, Sealed};
use crate::{
    Approval, ApprovalMode, Approver, Caller, MAX_LIST_LIMIT, StoreError, StoredElicitation,
};

const GRANT_DIGEST: &str = "grant_digest";
const GRANT_WHEN: &str = "grant_when";

fn seal_context<'a>(
    column: &'static str,
    id: ElicitationId,
    caller: &'a Caller,
) -> SealContext<'a> {
    SealContext {
        column,
        id,
        caller,
        call: None,
    }
}

fn corrupt(id: ElicitationId, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        id,
        reason: reason.into(),
    }
}

/// Reads a row selected with `grant_columns!()`, opening its sealed columns.
fn decode(row: &Row, keys: &KeyRing) -> Result<Grant, StoreError> {
    let get_err = |e: tokio_postgres::Error| StoreError::Backend(Box::new(e));
    let elicitation =
        ElicitationId::from_uuid(row.try_get::<_, Uuid>("elicitation_id").map_err(get_err)?);
    let caller_of = |subject: &str, tenant: &str| -> Result<Caller, StoreError> {
        let subject: String = row.try_get(subject).map_err(get_err)?;
        let tenant: Option<String> = row.try_get(tenant).map_err(get_err)?;
        Caller::new(subject, tenant)
            .map_err(|_| corrupt(elicitation, "grant caller ids out of bounds"))
    };
    let caller = caller_of("caller_subject", "caller_tenant")?;
    let granter = caller_of("granter_subject", "granter_tenant")?;
    let scope = GrantScope::from_label(row.try_get("scope").map_err(get_err)?)
        .ok_or_else(|| corrupt(elicitation, "grant scope unknown"))?;
    let sealed_column = |blob: &str, key: &str| -> Result<Option<Sealed>, StoreError> {
        let blob: Option<Vec<u8>> = row.try_get(blob).map_err(get_err)?;
        let key_id: Option<String> = row.try_get(key).map_err(get_err)?;
        Ok(blob
            .zip(key_id)
            .map(|(blob, key_id)| Sealed { key_id, blob }))
    };
    let digest = match sealed_column("digest_sealed", "digest_key_id")? {
        None => None,
        Some(sealed) => {
            let bytes = keys.open(&sealed, seal_context(GRANT_DIGEST, elicitation, &caller))?;
            let bytes: [u8; 32] = bytes
                .try_into()
                .map_err(|_| corrupt(elicitation, "grant digest is not 32 bytes"))?;
            Some(CallDigest::from_bytes(bytes))
        }
    };
    let when = match sealed_column("when_sealed", "when_key_id")? {
        None => None,
        Some(sealed) => {
            let bytes = keys.open(&sealed, seal_context(GRANT_WHEN, elicitation, &caller))?;
            Some(
                String::from_utf8(bytes)
                    .map_err(|_| corrupt(elicitation, "grant when is not text"))?,
            )
        }
    };
    let group: Option<String> = row.try_get("approver_group").map_err(get_err)?;
    let mode: Option<&str> = row.try_get("approval_mode").map_err(get_err)?;
    let approval = match (group, mode) {
        // A grant is never made under a quorum of several people (Approval::refuse_with).
        (Some(group), Some(mode)) => Some(Approval::of_group(
            group,
            ApprovalMode::from_label(mode)
                .ok_or_else(|| corrupt(elicitation, "grant approval mode unknown"))?,
        )),
        _ => None,
    };
    let count = |column: &str| -> Result<Option<u32>, StoreError> {
        let n: Option<i32> = row.try_get(column).map_err(get_err)?;
        n.map(|n| u32::try_from(n).map_err(|_| corrupt(elicitation, "grant count out of range")))
            .transpose()
    };
    Ok(Grant {
        id: GrantId::from_uuid(row.try_get("id").map_err(get_err)?),
        elicitation,
        tool: row.try_get("tool_name").map_err(get_err)?,
        scope,
        digest,
        when,
        definition: row.try_get("definition_digest").map_err(get_err)?,
        approval,
        granted_by: row.try_get("granted_by").map_err(get_err)?,
        granter,
        created_at: row.try_get("created_at").map_err(get_err)?,
        expires_at: row.try_get("expires_at").map_err(get_err)?,
        max_uses: count("max_uses")?,
        uses: count("uses")?.unwrap_or(0),
        revoked_at: row.try_get("revoked_at").map_err(get_err)?,
        revoked_by: row.try_get("revoked_by").map_err(get_err)?,
        caller,
    })
}

impl PostgresStore {
    /// Decodes grant rows; one that cannot be opened is logged and left out, never fatal.
    fn decode_grants(&self, rows: &[Row]) -> Vec<Grant> {
        rows.iter()
            .filter_map(|row| match decode(row, &self.keys) {
                Ok(grant) => Some(grant),
                Err(e) => {
                    tracing::warn!(error = %e, "a grant row cannot be read; it is left out");
                    None
                }
            })
            .collect()
    }

    /// Records the approval `answer` (the thirteen parameters of `RESPOND_VALID`) and makes
    /// `request` on it in one statement. `None`: nothing was recorded (the caller explains
    /// why from the row); `Some(grant)`: recorded, with the grant.
    #[allow(clippy::too_many_arguments)]
    // Long: the thirteen parameters of one statement, bound in order.
    pub(super) async fn respond_granting_row(
        &self,
        caller: &Caller,
        id: ElicitationId,
        granter: &Caller,
        answered_by: Option<&str>,
        request: GrantRequest,
        now: OffsetDateTime,
        answer: &[&(dyn ToSql + Sync); 13],
    ) -> Result<Option<Option<Grant>>, StoreError> {
        let raw = self.select_one(caller, id).await?;
        let (Some(tool), Some(digest)) = (raw.tool(), raw.digest()) else {
            return Err(crate::grant::not_a_held_call(&request.into()));
        };
        let digest: [u8; 32] = digest
            .try_into()
            .map_err(|_| corrupt(id, "call digest is not 32 bytes"))?;
        let mut random = [0u8; 10];
        self.rng
            .fill(&mut random)
            .map_err(|_| StoreError::Seal(crate::SealError::Random))?;
        let grant_id = GrantId::v7(now, random);
        let digest_sealed = match request.scope {
            GrantScope::Call => Some(
                self.keys
                    .seal(&digest, seal_context(GRANT_DIGEST, id, caller))?,
            ),
            GrantScope::Tool => None,
        };
        let when = match request.scope {
            GrantScope::Tool => request.when.clone(),
            GrantScope::Call => None,
        };
        let when_sealed = when
            .as_ref()
            .map(|w| {
                self.keys
                    .seal(w.as_bytes(), seal_context(GRANT_WHEN, id, caller))
            })
            .transpose()?;
        let expires_at = truncate_to_micros(now + request.lasts);
        let max_uses = request
            .max_uses
            .map(|n| i32::try_from(n).unwrap_or(i32::MAX));
        let scope = request.scope.label();
        let digest_blob = digest_sealed.as_ref().map(|s| s.blob.as_slice());
        let digest_key = digest_sealed.as_ref().map(|s| s.key_id.as_str());
        let when_blob = when_sealed.as_ref().map(|s| s.blob.as_slice());
        let when_key = when_sealed.as_ref().map(|s| s.key_id.as_str());
        let bound = (request.scope == GrantScope::Call).then_some(digest.as_slice());
        let granter_subject = granter.subject_id();
        let granter_tenant = tenant_param(granter);
        let mut params: Vec<&(dyn ToSql + Sync)> = answer.to_vec();
        params.extend_from_slice(&[
            grant_id.as_uuid(),
            &scope,
            &digest_blob,
            &digest_key,
            &when_blob,
            &when_key,
            &request.definition,
            &granter_subject,
            &granter_tenant,
            &expires_at,
            &max_uses,
            &bound,
        ]);
        let rows = self
            .scoped(caller, sql::RESPOND_VALID_GRANTING, &params)
            .await?;
        let (changed, granted) = rows
            .first()
            .map_or((0, 0), |r| (r.get::<_, i64>(0), r.get::<_, i64>(1)));
        if changed != 1 {
            return Ok(None);
        }
        if granted != 1 {
            tracing::error!(elicitation_id = %id, "an approval was recorded but its grant was not made");
            return Ok(Some(None));
        }
        let grant = Grant {
            id: grant_id,
            elicitation: id,
            caller: caller.clone(),
            tool: tool.to_owned(),
            scope: request.scope,
            digest: (request.scope == GrantScope::Call).then(|| CallDigest::from_bytes(digest)),
            when,
            definition: request.definition,
            approval: raw.approval().cloned(),
            granted_by: answered_by.map(str::to_owned),
            granter: granter.clone(),
            created_at: now,
            expires_at,
            max_uses: request.max_uses,
            uses: 0,
            revoked_at: None,
            revoked_by: None,
        };
        crate::grant::emit(AuditEvent::GrantCreated, &grant);
        Ok(Some(Some(grant)))
    }

    /// Erases, a batch at a time, what `statement` (a retention function taking the cutoff
    /// and the batch size) erases of what ended before `before`: how many rows went.
    pub(super) async fn erase_ended(
        &self,
        statement: &'static str,
        before: OffsetDateTime,
    ) -> Result<u64, StoreError> {
        let erased: i64 = self
            .with_client(async |client| {
                let statement = client
                    .prepare_cached(statement)
                    .await
                    .map_err(crate::error::map_db_error)?;
                let row = client
                    .query_one(&statement, &[&before, &super::EXPIRE_BATCH])
                    .await
                    .map_err(crate::error::map_db_error)?;
                Ok(row.get(0))
            })
            .await?;
        Ok(u64::try_from(erased).unwrap_or(0))
    }
}

#[async_trait]
impl GrantStore for PostgresStore {
    async fn respond_with(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: AnswerWith,
    ) -> Result<(RespondOutcome, Option<Grant>), StoreError> {
        self.respond_guarded(caller, id, payload, answered_by, None, Some(with))
            .await
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
            .await
    }

    async fn approver_get(
        &self,
        approver: &Approver,
        id: ElicitationId,
    ) -> Result<(Caller, StoredElicitation), StoreError> {
        let now = self.now();
        let raw = self.approver_row(approver, id).await?;
        let owner = raw.caller.clone();
        let mut stored = raw.into_stored(&self.keys)?;
        stored.elicitation = crate::store::as_seen(stored.elicitation, now);
        Ok((owner, stored))
    }

    async fn live_grants(&self, caller: &Caller, tool: &str) -> Result<Vec<Grant>, StoreError> {
        let now = self.now();
        let rows = self
            .scoped(
                caller,
                sql::LIVE_GRANTS,
                &[&now, &caller.subject_id(), &tenant_param(caller), &tool],
            )
            .await?;
        Ok(self.decode_grants(&rows))
    }

    async fn use_grant(
        &self,
        caller: &Caller,
        id: GrantId,
        tool: &str,
    ) -> Result<Option<Grant>, StoreError> {
        let now = self.now();
        let rows = self
            .scoped(
                caller,
                sql::USE_GRANT,
                &[
                    id.as_uuid(),
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &tool,
                    &now,
                ],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let grant = decode(row, &self.keys)?;
        crate::grant::emit(AuditEvent::ToolCallForwarded, &grant);
        Ok(Some(grant))
    }

    async fn grants(&self, caller: &Caller, limit: usize) -> Result<Vec<Grant>, StoreError> {
        let limit = i64::try_from(limit.min(MAX_LIST_LIMIT)).unwrap_or(0);
        let rows = self
            .scoped(
                caller,
                sql::GRANTS,
                &[&caller.subject_id(), &tenant_param(caller), &limit],
            )
            .await?;
        Ok(self.decode_grants(&rows))
    }

    async fn revoke_grant(
        &self,
        revoker: &Caller,
        id: GrantId,
        revoked_by: Option<&str>,
    ) -> Result<Grant, StoreError> {
        let rows = self
            .scoped(
                revoker,
                sql::GRANT_ONE,
                &[id.as_uuid(), &revoker.subject_id(), &tenant_param(revoker)],
            )
            .await?;
        let row = rows
            .first()
            .ok_or(StoreError::GrantNotFound { id: *id.as_uuid() })?;
        let read = decode(row, &self.keys)?;
        let owner = read.caller.clone();
        let now = self.now();
        let revoked_by = revoked_by.map(elicitation_core::answered_by);
        // Scoped as the grant's caller (whose row it is, and whose audit trail records the
        // revocation); the statement itself holds that the revoker holds or made it.
        let rows = self
            .scoped(
                &owner,
                sql::REVOKE_GRANT,
                &[
                    id.as_uuid(),
                    &owner.subject_id(),
                    &tenant_param(&owner),
                    &now,
                    &revoked_by,
                    &revoker.subject_id(),
                    &tenant_param(revoker),
                ],
            )
            .await?;
        match rows.first() {
            Some(row) => {
                let grant = decode(row, &self.keys)?;
                crate::grant::emit(AuditEvent::GrantRevoked, &grant);
                Ok(grant)
            }
            None => Ok(read),
        }
    }
}
