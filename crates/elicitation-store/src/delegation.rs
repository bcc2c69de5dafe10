//! Delegations: a person away hands their approvals to another for a time window ("away
//! until Monday; Carol answers for me"). The delegate answers with the groups the delegator
//! had when handing them over, as themselves ([`Approver::on_behalf_of`]): never the
//! delegator's own calls where the rule excludes the caller, never counted twice with the
//! delegator toward a quorum, and never handed on. Either of the two may end it early.

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use elicitation_core::ElicitationId;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use crate::{Approver, Caller, StoreError};

/// The longest a delegation lasts from when it is made.
pub const MAX_DELEGATION: Duration = Duration::days(30);

/// Most approver groups one delegation hands over.
pub(crate) const MAX_DELEGATED_GROUPS: usize = 256;

/// Most live delegations a delegate answers under at once (the oldest first).
pub(crate) const MAX_ACTING_FOR: usize = 256;

/// Why a delegate's approval carries no standing grant: the grant would outlive the
/// delegation (and its ending), unseen by the delegator.
pub(crate) fn no_grant_by_a_delegate() -> StoreError {
    StoreError::AnswerRefused(
        "approving for someone away carries no standing grant (it would outlive the delegation); approve the call alone".to_owned(),
    )
}

/// Most delegations one person has given that have not ended.
pub const MAX_DELEGATIONS_PER_CALLER: usize = 32;

/// The identity of a delegation (a UUID v7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DelegationId(Uuid);

impl DelegationId {
    /// A new id for `now` with these random bits.
    pub fn v7(now: OffsetDateTime, random: [u8; 10]) -> Self {
        DelegationId(*ElicitationId::v7(now, random).as_uuid())
    }

    /// Wraps a UUID read back from the database.
    pub const fn from_uuid(uuid: Uuid) -> Self {
        DelegationId(uuid)
    }

    /// The UUID.
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl fmt::Display for DelegationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for DelegationId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(DelegationId)
    }
}

/// A delegation to make: to whom, and for which window (its times as the store reads the
/// clock: "now" is the store's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationRequest {
    /// Who answers for the delegator.
    pub to: Caller,
    /// From when (`None`, or a time already past: now).
    pub starts_at: Option<OffsetDateTime>,
    /// Until when.
    pub until: Until,
}

/// When a delegation ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// At this time.
    At(OffsetDateTime),
    /// This long after it starts.
    For(Duration),
}

/// A person's approvals handed to another for a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegation {
    /// Its id.
    pub id: DelegationId,
    /// Who handed their approvals over.
    pub from: Caller,
    /// Who answers for them.
    pub to: Caller,
    /// The delegator's approver groups when it was made: what the delegate answers with.
    pub groups: Vec<String>,
    /// From when.
    pub starts_at: OffsetDateTime,
    /// Until when.
    pub ends_at: OffsetDateTime,
    /// When it was made.
    pub created_at: OffsetDateTime,
    /// When it was ended early, if it was.
    pub revoked_at: Option<OffsetDateTime>,
    /// Who ended it (the subject of the delegator or the delegate).
    pub revoked_by: Option<String>,
}

impl Delegation {
    /// Whether the delegate answers under it at `now`.
    pub fn is_live(&self, now: OffsetDateTime) -> bool {
        self.revoked_at.is_none() && self.starts_at <= now && now < self.ends_at
    }

    /// Whether it has ended (revoked or past its window) at `now`.
    pub fn has_ended(&self, now: OffsetDateTime) -> bool {
        self.revoked_at.is_some() || now >= self.ends_at
    }

    /// `live`, `scheduled`, `ended` or `revoked` at `now`.
    pub fn status_at(&self, now: OffsetDateTime) -> &'static str {
        match () {
            () if self.revoked_at.is_some() => "revoked",
            () if now >= self.ends_at => "ended",
            () if now < self.starts_at => "scheduled",
            () => "live",
        }
    }

    /// The delegate, answering for the delegator with the groups handed over.
    pub fn approver(&self) -> Approver {
        Approver {
            caller: self.to.clone(),
            groups: self.groups.clone(),
            on_behalf_of: Some(self.from.clone()),
        }
    }

    /// Whether `caller` is one of its two people (either may see and end it).
    pub fn concerns(&self, caller: &Caller) -> bool {
        self.from == *caller || self.to == *caller
    }
}

/// Where delegations live: in the same store as the elicitations they answer.
#[async_trait]
pub trait DelegationStore: Send + Sync {
    /// `from` hands its approver groups to `request.to` for the window: refused (a
    /// [`StoreError::AnswerRefused`] saying why) for someone without groups, groups handed to
    /// `from` itself, oneself, another tenant's person, a window that has ended, is empty or
    /// lasts past [`MAX_DELEGATION`] from now, and past [`MAX_DELEGATIONS_PER_CALLER`].
    async fn delegate(
        &self,
        from: &Approver,
        request: DelegationRequest,
    ) -> Result<Delegation, StoreError>;

    /// The delegations `caller` gave or received, newest first, at most `limit` (ended ones
    /// too, until the sweeper erases them).
    async fn delegations(
        &self,
        caller: &Caller,
        limit: usize,
    ) -> Result<Vec<Delegation>, StoreError>;

    /// Ends delegation `id` now, as one of its two people (`NotFound` for anyone else, or
    /// when it ended already).
    async fn revoke_delegation(
        &self,
        caller: &Caller,
        id: DelegationId,
    ) -> Result<Delegation, StoreError>;

    /// The delegations to `delegate` live now, oldest first: what it answers under besides
    /// its own groups.
    async fn acting_for(&self, delegate: &Caller) -> Result<Vec<Delegation>, StoreError>;
}

/// Checks a delegation `from` asks for at `now`, returning it with its start no earlier than
/// now.
pub(crate) fn check(
    from: &Approver,
    request: DelegationRequest,
    now: OffsetDateTime,
) -> Result<(Caller, OffsetDateTime, OffsetDateTime), StoreError> {
    let refused = |why: &str| Err(StoreError::AnswerRefused(why.to_owned()));
    if from.on_behalf_of.is_some() {
        return refused("approvals handed to you cannot be handed on");
    }
    if from.groups.is_empty() {
        return refused("you are in no approver group: there are no approvals to hand over");
    }
    if from.groups.len() > MAX_DELEGATED_GROUPS {
        return refused("you are in more approver groups than a delegation hands over (256)");
    }
    if request.to == from.caller {
        return refused("a delegation is to someone else");
    }
    if request.to.tenant_id() != from.caller.tenant_id() {
        return refused("a delegation is to someone of your own tenant");
    }
    let starts_at = request.starts_at.unwrap_or(now).max(now);
    let ends_at = match request.until {
        Until::At(at) => at,
        Until::For(span) => starts_at.checked_add(span).unwrap_or(starts_at),
    };
    if ends_at <= starts_at {
        return refused("a delegation must end after it starts, and after now");
    }
    if ends_at > now + MAX_DELEGATION {
        return refused("a delegation lasts at most 30 days from now");
    }
    Ok((
        request.to,
        elicitation_core::truncate_to_micros(starts_at),
        elicitation_core::truncate_to_micros(ends_at),
    ))
}

/// Logs a delegation's creation or revocation (the audit trail's record of it).
pub(crate) fn emit(event: crate::AuditEvent, delegation: &Delegation, actor: &Caller) {
    tracing::info!(
        target: "audit",
        event = event.label(),
        subject = actor.subject_id(),
        tenant = actor.tenant_id(),
        delegation = %delegation.id,
        from = delegation.from.subject_id(),
        to = delegation.to.subject_id(),
    );
}

/// The audit `detail` of a delegation's creation or revocation: both names, the window.
pub(crate) fn detail(delegation: &Delegation) -> serde_json::Value {
    use time::format_description::well_known::Rfc3339;
    let at = |t: OffsetDateTime| t.format(&Rfc3339).unwrap_or_default();
    let mut detail = serde_json::json!({
        "delegation": delegation.id.to_string(),
        "from": delegation.from.subject_id(),
        "to": delegation.to.subject_id(),
        "starts_at": at(delegation.starts_at),
        "ends_at": at(delegation.ends_at),
    });
    if let Some(by) = &delegation.revoked_by {
        detail["revoked_by"] = by.clone().into();
    }
    detail
}
