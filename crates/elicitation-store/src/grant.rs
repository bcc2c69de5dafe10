//! Standing grants: a person who approves a call may also let later calls of the same caller
//! run without asking — the same call, or the tool (narrowed by a `when`) — for a bounded
//! time and number of uses. A grant is made in the same store operation as the approval it
//! comes with, belongs to the caller whose call was approved, and is used one call at a time
//! in one step (an expired, revoked or used-up grant never forwards).

use std::fmt;
use std::str::FromStr;

use elicitation_core::ElicitationId;
use gating_core::{CallDigest, GrantScope};
use serde_json::Value;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use crate::audit::AuditEvent;
use crate::{Approval, Caller};

/// Most grants one caller holds at once in the memory store (live or not yet erased).
pub const MAX_GRANTS_PER_CALLER: usize = 1000;

/// The identity of a grant (a UUID v7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrantId(Uuid);

impl GrantId {
    /// A new id for `now` with these random bits.
    pub fn v7(now: OffsetDateTime, random: [u8; 10]) -> Self {
        GrantId(*ElicitationId::v7(now, random).as_uuid())
    }

    /// Wraps a UUID read back from the database.
    pub const fn from_uuid(uuid: Uuid) -> Self {
        GrantId(uuid)
    }

    /// The UUID.
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl fmt::Display for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for GrantId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(GrantId)
    }
}

/// A grant to make with an approval. The tool, the argument digest and the approval rule
/// come from the confirmation it is made on; the rest is the person's (checked by the gate
/// against the policy and `[gate] max_grant`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRequest {
    /// Which later calls it covers.
    pub scope: GrantScope,
    /// Scope `tool`: the CEL expression later calls must satisfy (stored sealed).
    pub when: Option<String>,
    /// How long it lasts from the answer.
    pub lasts: Duration,
    /// How many calls it may forward (`None`: until it ends).
    pub max_uses: Option<u32>,
    /// The digest of the tool's definition as listed when the grant was made: a call after
    /// the definition changed is not covered.
    pub definition: String,
}

/// A standing grant as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Which.
    pub id: GrantId,
    /// The approval it was made with.
    pub elicitation: ElicitationId,
    /// Whose calls it authorises.
    pub caller: Caller,
    /// The qualified tool name.
    pub tool: String,
    /// Which calls of the tool.
    pub scope: GrantScope,
    /// Scope `call`: the arguments' digest.
    pub digest: Option<CallDigest>,
    /// Scope `tool`: what a call must satisfy.
    pub when: Option<String>,
    /// The tool definition's digest when it was made.
    pub definition: String,
    /// The approval rule of the confirmation it was made on: a call answered by another rule
    /// now is not covered.
    pub approval: Option<Approval>,
    /// Who made it (as recorded with the answer).
    pub granted_by: Option<String>,
    /// The caller identity of who made it (the caller itself, or an approver).
    pub granter: Caller,
    /// When it was made.
    pub created_at: OffsetDateTime,
    /// When it ends.
    pub expires_at: OffsetDateTime,
    /// How many calls it may forward.
    pub max_uses: Option<u32>,
    /// How many it has.
    pub uses: u32,
    /// When it was revoked.
    pub revoked_at: Option<OffsetDateTime>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
}

impl Grant {
    /// What it is at `now`: `live`, `revoked`, `used_up` or `expired`.
    pub fn status_at(&self, now: OffsetDateTime) -> &'static str {
        if self.revoked_at.is_some() {
            "revoked"
        } else if self.max_uses.is_some_and(|max| self.uses >= max) {
            "used_up"
        } else if now >= self.expires_at {
            "expired"
        } else {
            "live"
        }
    }

    /// Whether it may forward a call at `now`.
    pub fn is_live(&self, now: OffsetDateTime) -> bool {
        self.status_at(now) == "live"
    }

    /// Uses left (`None`: no limit).
    pub fn uses_left(&self) -> Option<u32> {
        self.max_uses.map(|max| max.saturating_sub(self.uses))
    }

    /// Whether it ended (was revoked, or expired) at or before `before`: what the retention
    /// job erases.
    pub fn ended_before(&self, before: OffsetDateTime) -> bool {
        self.revoked_at
            .unwrap_or(self.expires_at)
            .min(self.expires_at)
            <= before
    }
}

impl GrantRequest {
    /// The grant this request makes on confirmation `elicitation` of `caller` (bound to
    /// `call`), answered at `now` by `granter`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn into_grant(
        self,
        id: GrantId,
        elicitation: ElicitationId,
        caller: &Caller,
        call: &crate::HeldCall,
        granter: &Caller,
        granted_by: Option<&str>,
        now: OffsetDateTime,
    ) -> Grant {
        Grant {
            id,
            elicitation,
            caller: caller.clone(),
            tool: call.tool.clone(),
            scope: self.scope,
            digest: (self.scope == GrantScope::Call).then_some(call.digest),
            when: match self.scope {
                GrantScope::Tool => self.when,
                GrantScope::Call => None,
            },
            definition: self.definition,
            approval: call.approval.clone(),
            granted_by: granted_by.map(elicitation_core::answered_by),
            granter: granter.clone(),
            created_at: now,
            expires_at: now + self.lasts,
            max_uses: self.max_uses,
            uses: 0,
            revoked_at: None,
            revoked_by: None,
        }
    }
}

/// A grant's event (made, revoked, or `tool_call_forwarded` for a call it forwarded) as a
/// structured tracing event: ids, the tool, the scope and uses; never the `when` or a digest.
/// The `detail` of a grant's audit event, as the PostgreSQL store writes it.
pub(crate) fn audit_detail(event: AuditEvent, grant: &Grant) -> Value {
    let mut detail = serde_json::Map::new();
    detail.insert("grant".into(), grant.id.to_string().into());
    match event {
        AuditEvent::GrantCreated => {
            detail.insert("scope".into(), grant.scope.label().into());
            if let Ok(at) = grant
                .expires_at
                .format(&time::format_description::well_known::Rfc3339)
            {
                detail.insert("expires_at".into(), at.into());
            }
            if let Some(max) = grant.max_uses {
                detail.insert("max_uses".into(), max.into());
            }
            if let Some(by) = &grant.granted_by {
                detail.insert("granted_by".into(), by.clone().into());
            }
        }
        AuditEvent::GrantRevoked => {
            if let Some(by) = &grant.revoked_by {
                detail.insert("revoked_by".into(), by.clone().into());
            }
        }
        _ => {
            detail.insert("gated".into(), true.into());
            detail.insert("uses".into(), grant.uses.into());
        }
    }
    Value::Object(detail)
}

pub(crate) fn emit(event: AuditEvent, grant: &Grant) {
    tracing::info!(
        target: "audit",
        event = event.label(),
        subject = grant.caller.subject_id(),
        tenant = grant.caller.tenant_id(),
        elicitation_id = %grant.elicitation,
        grant_id = %grant.id,
        tool = grant.tool.as_str(),
        scope = grant.scope.label(),
        uses = grant.uses,
        granted_by = grant.granted_by.as_deref(),
        revoked_by = grant.revoked_by.as_deref(),
    );
}

/// What an approval of a held call carries besides `{"confirmed": true}`: a standing grant
/// for later calls, or the arguments the person approved instead of the agent's (checked by
/// the gate against the tool's input schema). Never both.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerWith {
    /// A standing grant, made with the answer.
    Grant(GrantRequest),
    /// The arguments the call is forwarded with (a JSON object).
    Arguments(Value),
}

impl From<GrantRequest> for AnswerWith {
    fn from(grant: GrantRequest) -> Self {
        AnswerWith::Grant(grant)
    }
}

impl AnswerWith {
    /// What it is, for a refusal.
    const fn what(&self) -> &'static str {
        match self {
            AnswerWith::Grant(_) => "a grant",
            AnswerWith::Arguments(_) => "edited arguments",
        }
    }
}

/// The refusal of a grant or edited arguments on an elicitation that does not hold a tool
/// call.
pub(crate) fn not_a_held_call(with: &AnswerWith) -> crate::StoreError {
    crate::StoreError::AnswerRefused(format!(
        "only a confirmation of a tool call can carry {}",
        with.what()
    ))
}

/// Whether `with` may go with this answer: only an approval carries a grant or edited
/// arguments, and edited arguments are an object.
pub(crate) fn check_with_answer(
    payload: &Value,
    with: &AnswerWith,
) -> Result<(), crate::StoreError> {
    if payload.get("confirmed").and_then(Value::as_bool) != Some(true) {
        return Err(crate::StoreError::AnswerRefused(format!(
            "{} comes only with an approval ({{\"confirmed\": true}})",
            with.what()
        )));
    }
    if let AnswerWith::Arguments(arguments) = with
        && !arguments.is_object()
    {
        return Err(crate::StoreError::AnswerRefused(
            "edited arguments must be a JSON object".into(),
        ));
    }
    Ok(())
}

/// Where standing grants live (both stores). Every operation is scoped: a grant is seen by
/// its caller and by whoever made it; to anyone else it does not exist.
#[async_trait::async_trait]
pub trait GrantStore: Send + Sync + 'static {
    /// Answers `caller`'s own confirmation `id` (as [`crate::ElicitationStore::respond_as`])
    /// and, when the answer is recorded, keeps `with` with it in the same operation — makes
    /// the grant, or records the edited arguments (sealed, like the answer) — or neither.
    /// Only an approval of a held call carries either ([`crate::StoreError::AnswerRefused`]).
    async fn respond_with(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: AnswerWith,
    ) -> Result<(elicitation_core::RespondOutcome, Option<Grant>), crate::StoreError>;

    /// Answers another caller's confirmation as `approver` (as
    /// [`crate::ElicitationStore::approver_respond`]) with `with`, or nothing.
    async fn approver_respond_with(
        &self,
        approver: &crate::Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: AnswerWith,
    ) -> Result<(Caller, elicitation_core::RespondOutcome, Option<Grant>), crate::StoreError>;

    /// A confirmation `approver`'s groups answer, with its caller (`NotFound` otherwise).
    async fn approver_get(
        &self,
        approver: &crate::Approver,
        id: ElicitationId,
    ) -> Result<(Caller, crate::StoredElicitation), crate::StoreError>;

    /// The caller's live grants of `tool` (unexpired, unrevoked, not used up), oldest
    /// first. Reading one authorises nothing: see [`Self::use_grant`].
    async fn live_grants(
        &self,
        caller: &Caller,
        tool: &str,
    ) -> Result<Vec<Grant>, crate::StoreError>;

    /// Uses the caller's grant `id` for one call of `tool`, in one step: counted if it is
    /// live — of any number of concurrent uses, at most its remaining uses succeed — and the
    /// forwarded call recorded with the grant's id. `None` when it is not (any more) live.
    async fn use_grant(
        &self,
        caller: &Caller,
        id: GrantId,
        tool: &str,
    ) -> Result<Option<Grant>, crate::StoreError>;

    /// The grants `caller` holds and those it made for others (live and ended, not yet
    /// erased), newest first; at most `limit`.
    async fn grants(&self, caller: &Caller, limit: usize) -> Result<Vec<Grant>, crate::StoreError>;

    /// Revokes grant `id`, held or made by `revoker` (`GrantNotFound` otherwise), on every
    /// instance at once: the next use fails. A grant already ended is returned as it is.
    async fn revoke_grant(
        &self,
        revoker: &Caller,
        id: GrantId,
        revoked_by: Option<&str>,
    ) -> Result<Grant, crate::StoreError>;
}
