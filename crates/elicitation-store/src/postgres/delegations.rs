//! Delegations in PostgreSQL: `mcp_delegations` (V27), read and written in a transaction
//! scoped to one of the two people (row-level security: the delegator makes and sees it,
//! the delegate sees it, either ends it).

use async_trait::async_trait;
use ring::rand::SecureRandom;
use tokio_postgres::Row;

use super::{PostgresStore, sql, tenant_param};
use crate::audit::AuditEvent;
use crate::delegation::{check, emit};
use crate::{
    Approver, Caller, Delegation, DelegationId, DelegationRequest, DelegationStore,
    MAX_DELEGATIONS_PER_CALLER, MAX_LIST_LIMIT, StoreError,
};

fn decode(row: &Row) -> Result<Delegation, StoreError> {
    let get_err = |e: tokio_postgres::Error| StoreError::Backend(Box::new(e));
    let caller = |subject: &str, tenant: &str| -> Result<Caller, StoreError> {
        Caller::new(
            row.try_get::<_, String>(subject).map_err(get_err)?,
            row.try_get::<_, Option<String>>(tenant).map_err(get_err)?,
        )
        .map_err(|_| StoreError::InvalidCaller)
    };
    Ok(Delegation {
        id: DelegationId::from_uuid(row.try_get("id").map_err(get_err)?),
        from: caller("from_subject", "from_tenant")?,
        to: caller("to_subject", "to_tenant")?,
        groups: row.try_get("groups").map_err(get_err)?,
        starts_at: row.try_get("starts_at").map_err(get_err)?,
        ends_at: row.try_get("ends_at").map_err(get_err)?,
        created_at: row.try_get("created_at").map_err(get_err)?,
        revoked_at: row.try_get("revoked_at").map_err(get_err)?,
        revoked_by: row.try_get("revoked_by").map_err(get_err)?,
    })
}

#[async_trait]
impl DelegationStore for PostgresStore {
    async fn delegate(
        &self,
        from: &Approver,
        request: DelegationRequest,
    ) -> Result<Delegation, StoreError> {
        let now = elicitation_core::truncate_to_micros(self.now());
        let (to, starts_at, ends_at) = check(from, request, now)?;
        let mut random = [0u8; 10];
        self.rng
            .fill(&mut random)
            .map_err(|_| StoreError::Seal(crate::SealError::Random))?;
        let id = DelegationId::v7(now, random);
        let limit = i64::try_from(MAX_DELEGATIONS_PER_CALLER).unwrap_or(i64::MAX);
        let rows = self
            .scoped(
                &from.caller,
                sql::DELEGATE,
                &[
                    id.as_uuid(),
                    &from.caller.subject_id(),
                    &tenant_param(&from.caller),
                    &to.subject_id(),
                    &tenant_param(&to),
                    &from.groups,
                    &starts_at,
                    &ends_at,
                    &now,
                    &limit,
                ],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Err(StoreError::AnswerRefused(format!(
                "you have {MAX_DELEGATIONS_PER_CALLER} delegations that have not ended, the most kept; revoke some first"
            )));
        };
        let made = decode(row)?;
        emit(AuditEvent::DelegationCreated, &made, &from.caller);
        Ok(made)
    }

    async fn delegations(
        &self,
        caller: &Caller,
        limit: usize,
    ) -> Result<Vec<Delegation>, StoreError> {
        let limit = i64::try_from(limit.min(MAX_LIST_LIMIT)).unwrap_or(0);
        let rows = self
            .scoped(
                caller,
                sql::DELEGATIONS,
                &[&caller.subject_id(), &tenant_param(caller), &limit],
            )
            .await?;
        rows.iter().map(decode).collect()
    }

    async fn revoke_delegation(
        &self,
        caller: &Caller,
        id: DelegationId,
    ) -> Result<Delegation, StoreError> {
        let now = elicitation_core::truncate_to_micros(self.now());
        let rows = self
            .scoped(
                caller,
                sql::REVOKE_DELEGATION,
                &[
                    id.as_uuid(),
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &now,
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or(StoreError::DelegationNotFound { id: *id.as_uuid() })?;
        let revoked = decode(row)?;
        emit(AuditEvent::DelegationRevoked, &revoked, caller);
        Ok(revoked)
    }

    async fn acting_for(&self, delegate: &Caller) -> Result<Vec<Delegation>, StoreError> {
        let now = self.now();
        let rows = self
            .scoped(
                delegate,
                sql::ACTING_FOR,
                &[&delegate.subject_id(), &tenant_param(delegate), &now],
            )
            .await?;
        rows.iter().map(decode).collect()
    }
}
