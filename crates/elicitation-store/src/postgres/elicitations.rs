//! The PostgreSQL store's elicitations: created, answered (by their caller or an approver),
//! cancelled, redeemed, expired and erased.

use crate::audit::{self, Event, PolicyRef};
use crate::error::map_db_error;
use crate::store::{as_seen, new_elicitation};
use crate::{
    Approver, CallBinding, Caller, ConfirmationRequest, ElicitationStore, ErasedElicitation,
    ExpiredElicitation, ListQuery, Listed, MAX_LIST_LIMIT, Redeemed, StoreError, StoredElicitation,
    Unreadable,
};
use async_trait::async_trait;
use elicitation_core::{
    CancelReason, Elicitation, ElicitationId, ElicitationSpec, ElicitationStatus, ElicitationType,
    RespondOutcome, TransitionError, truncate_to_micros,
};
use row::decode;
use serde_json::Value;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use time::{Duration, OffsetDateTime};
use tokio::sync::broadcast;

use super::*;

#[async_trait]
impl ElicitationStore for PostgresStore {
    async fn create(
        &self,
        caller: &Caller,
        spec: ElicitationSpec,
        ttl: Duration,
    ) -> Result<Elicitation, StoreError> {
        let elicitation = new_elicitation(&self.rng, spec, self.now(), ttl)?;
        self.insert(caller, &elicitation, None, &PolicyRef::default(), None)
            .await?;
        Ok(elicitation)
    }

    async fn create_confirmation(
        &self,
        caller: &Caller,
        request: ConfirmationRequest,
    ) -> Result<StoredElicitation, StoreError> {
        let policy = request.policy.clone();
        let client = request.client.clone();
        let stored = request.into_new(&self.rng, self.now())?;
        self.insert(
            caller,
            &stored.elicitation,
            stored.call.as_ref(),
            &policy,
            client.as_deref(),
        )
        .await?;
        Ok(stored)
    }

    async fn get(
        &self,
        caller: &Caller,
        id: ElicitationId,
    ) -> Result<StoredElicitation, StoreError> {
        let now = self.now();
        let mut stored = self.select_one(caller, id).await?.into_stored(&self.keys)?;
        stored.elicitation = as_seen(stored.elicitation, now);
        Ok(stored)
    }

    async fn list(&self, caller: &Caller, query: ListQuery) -> Result<Vec<Listed>, StoreError> {
        let now = self.now();
        let status = query.status.map(ElicitationStatus::as_str);
        let limit = i64::try_from(query.capped_limit()).unwrap_or(0);
        let rows = self
            .scoped(
                caller,
                sql::LIST,
                &[
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &status,
                    &now,
                    &limit,
                ],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let id = ElicitationId::from_uuid(
                    row.try_get::<_, uuid::Uuid>("id")
                        .map_err(|e| StoreError::Backend(Box::new(e)))?,
                );
                let opened = decode(row, &self.keys).and_then(|raw| raw.into_stored(&self.keys));
                Ok(match opened {
                    Ok(mut stored) => {
                        stored.elicitation = as_seen(stored.elicitation, now);
                        Ok(stored)
                    }
                    Err(error) => Err(Unreadable { id, error }),
                })
            })
            .collect()
    }

    async fn respond_as(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<RespondOutcome, StoreError> {
        self.respond_guarded(caller, id, payload, answered_by, None, None)
            .await
            .map(|(outcome, _)| outcome)
    }

    async fn approver_pending(
        &self,
        approver: &Approver,
        limit: usize,
    ) -> Result<Vec<(Caller, StoredElicitation)>, StoreError> {
        let now = self.now();
        let limit = i64::try_from(limit.min(MAX_LIST_LIMIT)).unwrap_or(0);
        let rows = self
            .scoped_approver(approver, sql::APPROVER_PENDING, &[&now, &limit])
            .await?;
        let mut found = Vec::new();
        for row in &rows {
            // A row that cannot be opened is skipped (and logged), never fatal to the list.
            match decode(row, &self.keys).and_then(|raw| {
                let caller = raw.caller.clone();
                raw.into_stored(&self.keys).map(|stored| (caller, stored))
            }) {
                Ok((caller, mut stored)) => {
                    stored.elicitation = as_seen(stored.elicitation, now);
                    found.push((caller, stored));
                }
                Err(e) => tracing::warn!(error = %e, "an approver's row cannot be read"),
            }
        }
        Ok(found)
    }

    async fn approver_respond(
        &self,
        approver: &Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<(Caller, RespondOutcome), StoreError> {
        self.approver_answer(approver, id, payload, answered_by, None)
            .await
            .map(|(owner, outcome, _)| (owner, outcome))
    }

    async fn cancel(
        &self,
        caller: &Caller,
        id: ElicitationId,
        reason: CancelReason,
    ) -> Result<Elicitation, StoreError> {
        let now = self.now();
        let rows = self
            .scoped(
                caller,
                sql::CANCEL,
                &[
                    id.as_uuid(),
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &reason.as_str(),
                    &now,
                ],
            )
            .await?;
        if let Some(row) = rows.first() {
            let raw = decode(row, &self.keys)?;
            audit::emit(Event::Cancelled(reason), caller, id, raw.tool());
            return Ok(raw.elicitation);
        }
        let mut current = as_seen(self.select_one(caller, id).await?.elicitation, now);
        current.cancel(reason, now)?;
        Err(StoreError::Conflict(
            "elicitation changed during cancel".into(),
        ))
    }

    async fn confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Option<Elicitation>, StoreError> {
        let now = self.now();
        let rows = self
            .scoped(
                caller,
                sql::SELECT_CONFIRMATION,
                &[
                    id.as_uuid(),
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &binding.tool,
                    &binding.digest.as_bytes().as_slice(),
                    &binding.definition.as_bytes().as_slice(),
                    &binding.server,
                ],
            )
            .await?;
        rows.first()
            .map(|row| decode(row, &self.keys).map(|raw| as_seen(raw.elicitation, now)))
            .transpose()
    }

    async fn confirmation_for(
        &self,
        caller: &Caller,
        binding: &CallBinding,
    ) -> Result<Option<ElicitationId>, StoreError> {
        let now = self.now();
        let rows = self
            .scoped(
                caller,
                sql::CONFIRMATION_FOR,
                &[
                    &now,
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &binding.tool,
                    &binding.digest.as_bytes().as_slice(),
                    &binding.definition.as_bytes().as_slice(),
                    &binding.server,
                ],
            )
            .await?;
        rows.first()
            .map(|row| {
                row.try_get::<_, uuid::Uuid>("id")
                    .map(ElicitationId::from_uuid)
                    .map_err(|e| StoreError::Corrupt {
                        id: ElicitationId::from_uuid(uuid::Uuid::nil()),
                        reason: e.to_string(),
                    })
            })
            .transpose()
    }

    async fn report_decline(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<bool, StoreError> {
        let rows = self
            .on_bound_confirmation(sql::REPORT_DECLINE, caller, id, binding)
            .await?;
        Ok(!rows.is_empty())
    }

    async fn redeem_confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Redeemed, StoreError> {
        let now = self.now();
        let rows = self
            .on_bound_confirmation(sql::REDEEM, caller, id, binding)
            .await?;
        let row = rows.first().ok_or(StoreError::NotFound { id })?;
        let consumed: bool = row.try_get("consumed").map_err(|e| StoreError::Corrupt {
            id,
            reason: e.to_string(),
        })?;
        let current = decode(row, &self.keys)?.elicitation;
        if consumed {
            // The plain `confirmed` column chose the row; the sealed response must agree, so
            // a tampered column never authorises a call.
            if current.confirmation_state() != Some(true) {
                return Err(StoreError::Corrupt {
                    id,
                    reason: "the sealed response does not approve this call".into(),
                });
            }
            return Ok(Redeemed::Consumed(current));
        }
        Ok(match Redeemed::decide(as_seen(current, now), now) {
            refused @ Redeemed::Refused { .. } => refused,
            // Usable as read, but another redemption consumed it first.
            Redeemed::Consumed(_) => {
                let current = decode(row, &self.keys)?.elicitation;
                Redeemed::Refused {
                    current: as_seen(current, now),
                    why: TransitionError::AlreadyConsumed { id },
                }
            }
        })
    }

    fn changes(&self) -> Option<broadcast::Receiver<ElicitationId>> {
        Some(self.changes.subscribe())
    }

    async fn wait_for_change(
        &self,
        caller: &Caller,
        id: ElicitationId,
        deadline: tokio::time::Instant,
    ) -> Result<Elicitation, StoreError> {
        crate::wait::wait_for_change(
            &self.changes,
            id,
            deadline,
            Some(self.recheck_interval),
            || self.clock.now(),
            || async {
                let now = self.now();
                Ok(as_seen(self.select_one(caller, id).await?.elicitation, now))
            },
        )
        .await
    }

    async fn erase_finished(
        &self,
        before: OffsetDateTime,
    ) -> Result<Vec<ErasedElicitation>, StoreError> {
        let before = truncate_to_micros(before);
        let rows = self
            .with_client(async |client| {
                let statement = client
                    .prepare_cached(sql::ERASE_FINISHED)
                    .await
                    .map_err(map_db_error)?;
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                client
                    .query(&statement, &[&before, &EXPIRE_BATCH])
                    .await
                    .map_err(map_db_error)
            })
            .await?;
        self.erase_ended(sql::ERASE_ENDED_GRANTS, before).await?;
        self.erase_ended(sql::ERASE_ENDED_DELEGATIONS, before)
            .await?;
        let mut specs = self.specs.lock().unwrap_or_else(PoisonError::into_inner);
        rows.iter()
            .map(|row| {
                let id = ElicitationId::from_uuid(row.get(0));
                specs.remove(&id);
                let kind: &str = row.get(1);
                let kind: ElicitationType =
                    kind.parse().map_err(|e| StoreError::Backend(Box::new(e)))?;
                Ok(ErasedElicitation { id, kind })
            })
            .collect()
    }

    async fn pending_count(&self) -> Result<u64, StoreError> {
        let count: i64 = self
            .with_client(async |client| {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let row = client
                    .query_one(sql::PENDING_COUNT, &[])
                    .await
                    .map_err(map_db_error)?;
                Ok(row.get(0))
            })
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let version: Option<i32> = self
            .with_client(async |client| {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let row = client
                    .query_one(sql::SCHEMA_VERSION, &[])
                    .await
                    .map_err(map_db_error)?;
                Ok(row.get(0))
            })
            .await?;
        if version.unwrap_or(0) < crate::latest_version() {
            return Err(StoreError::NotMigrated);
        }
        Ok(())
    }

    async fn expire_due(&self, now: OffsetDateTime) -> Result<Vec<ExpiredElicitation>, StoreError> {
        let now = truncate_to_micros(now);
        let rows = self
            .with_client(async |client| {
                let statement = client
                    .prepare_cached(sql::EXPIRE_DUE)
                    .await
                    .map_err(map_db_error)?;
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let rows = client
                    .query(&statement, &[&now, &EXPIRE_BATCH])
                    .await
                    .map_err(map_db_error)?;
                // Ended sessions past their expiry are forgotten on the same tick, and so
                // are flows older than the longest window.
                if let Err(e) = client.query_one(sql::FORGET_ENDED_SESSIONS, &[]).await {
                    tracing::debug!(error = %e, "ended sessions could not be forgotten; retrying on the next sweep");
                }
                let old = now - crate::flows::MAX_FLOW_WINDOW;
                if let Err(e) = client
                    .query_one(sql::FORGET_OLD_FLOWS, &[&old, &EXPIRE_BATCH])
                    .await
                {
                    tracing::debug!(error = %e, "old flows could not be forgotten; retrying on the next sweep");
                }
                // And quota counters whose window ended (by the database's clock).
                if let Err(e) = client
                    .query_one(sql::FORGET_OLD_QUOTA_COUNTERS, &[&now, &EXPIRE_BATCH])
                    .await
                {
                    tracing::debug!(error = %e, "old quota counters could not be forgotten; retrying on the next sweep");
                }
                Ok(rows)
            })
            .await?;
        // The audit chain is sealed on the same tick (its own statements: a failure is
        // logged and the rows wait for the next one).
        match self.seal_audit().await {
            Ok(chain) => {
                if chain.sealed > 0 {
                    let (head, mac) = chain.head.unwrap_or_default();
                    tracing::info!(sealed = chain.sealed, head, head_mac = %mac, "audit chain sealed; its head");
                }
                if let Some((row, at)) = chain.stalled {
                    tracing::warn!(
                        row,
                        recorded_at = %at,
                        "the audit chain cannot be sealed past row {row}: it is dated in the future, so every row after it stays unsealed and unverified (docs/audit.md: a row dated in the future)"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the audit chain could not be sealed now; its rows wait for the next sweep");
            }
        }
        rows.iter()
            .map(|row| {
                let raw = decode(row, &self.keys)?;
                audit::emit(Event::Timeout, &raw.caller, raw.elicitation.id, raw.tool());
                Ok(ExpiredElicitation {
                    tool: raw.tool().map(str::to_owned),
                    caller: raw.caller,
                    elicitation: raw.elicitation,
                })
            })
            .collect()
    }
}
