//! The `ElicitationStore` trait and the values it takes and returns.

use async_trait::async_trait;
use elicitation_core::{
    Answer, AnswerOutcome, CancelReason, Elicitation, ElicitationId, ElicitationSpec,
    ElicitationStatus, RespondOutcome, TransitionError,
};
use gating_core::CallDigest;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value;
use time::{Duration, OffsetDateTime};

use crate::audit::{AuditPage, AuditQuery, GateRecord, PolicyRef};
use crate::quorum::{Count, Quorum, Vote};
use crate::{Approver, Caller, StoreError};

/// Most rows one `list` returns, whatever the caller asks for.
pub const MAX_LIST_LIMIT: usize = 500;

/// The call a confirmation is bound to: the qualified tool name, the digest of its
/// arguments and the digest of the tool's definition as the person was shown it. The
/// caller is the last part of the binding. A confirmation given while the tool read one way
/// never approves a call after its definition changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallBinding {
    /// The qualified tool name (`{prefix}__{tool}`).
    pub tool: String,
    /// The digest of the call's arguments.
    pub digest: CallDigest,
    /// The digest of the tool's pinned definition when the call was held.
    pub definition: CallDigest,
    /// The virtual server (`[[servers]]`) the call was made on, `None` for the gateway's own
    /// endpoint: a confirmation approves the call only where it was asked.
    pub server: Option<String>,
}

/// A request to hold a tool call for a person's confirmation.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfirmationRequest {
    /// The call the confirmation is bound to: the qualified tool name and the digest of
    /// `arguments` (computed once, by whoever classified the call, or by [`Self::new`]).
    pub binding: CallBinding,
    /// The call's arguments. Stored sealed.
    pub arguments: Value,
    /// The prompt shown to the person.
    pub message: String,
    /// How long the person has to answer (and the confirmation stays usable).
    pub ttl: Duration,
    /// Who answers besides, or instead of, the caller (`None`: the caller).
    pub approval: Option<Approval>,
    /// Which rule of which policy held the call (recorded with the hold).
    pub policy: PolicyRef,
    /// The OAuth client the caller asked through, when its token says (recorded with the
    /// hold).
    pub client: Option<String>,
}

/// Who may answer a confirmation: the members of an approver group, besides or instead of
/// the caller whose call it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The group (a value of the caller's identity provider's groups claim).
    pub group: String,
    /// Whether the caller may answer too.
    pub mode: ApprovalMode,
    /// How many people must approve, and from which groups ([`Quorum::default`]: one
    /// answer decides).
    pub quorum: Quorum,
}

/// How an [`Approval`] binds the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalMode {
    /// The group may answer, and so may the caller.
    May,
    /// Only the group answers (the caller too, when it is a member).
    Must,
    /// Only the group answers, and never the caller itself (four eyes).
    FourEyes,
}

impl ApprovalMode {
    /// The stored label.
    pub const fn label(self) -> &'static str {
        match self {
            ApprovalMode::May => "may",
            ApprovalMode::Must => "must",
            ApprovalMode::FourEyes => "four_eyes",
        }
    }

    /// The mode of a stored label.
    pub fn from_label(label: &str) -> Option<Self> {
        match label {
            "may" => Some(ApprovalMode::May),
            "must" => Some(ApprovalMode::Must),
            "four_eyes" => Some(ApprovalMode::FourEyes),
            _ => None,
        }
    }
}

impl Approval {
    /// One group answers (`mode` says whether the caller may too), one answer deciding.
    pub fn of_group(group: impl Into<String>, mode: ApprovalMode) -> Self {
        Approval {
            group: group.into(),
            mode,
            quorum: Quorum::default(),
        }
    }

    /// Whether the caller's own answer (without group membership) is accepted: never where
    /// several people must approve.
    pub fn caller_may_answer(&self) -> bool {
        matches!(self.mode, ApprovalMode::May) && !self.quorum.is_plural()
    }

    /// The groups whose members answer: the rule's own, then a quorum's further groups.
    pub fn groups(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.group.as_str()).chain(self.quorum.also.iter().map(String::as_str))
    }

    /// Whether a member of `groups` is among those who answer (four eyes aside).
    pub fn answered_by_groups(&self, groups: &[String]) -> bool {
        self.groups().any(|g| groups.iter().any(|mine| mine == g))
    }

    /// Counts `vote` among the `votes` so far toward the quorum.
    pub fn count(&self, votes: &[Vote], vote: Vote) -> Count {
        let groups: Vec<&str> = self.groups().collect();
        crate::quorum::count(self.quorum.needed(), &groups, votes, vote)
    }

    /// Whether `votes` (of distinct people) meet the quorum.
    pub fn satisfied(&self, votes: &[Vote]) -> bool {
        let groups: Vec<&str> = self.groups().collect();
        crate::quorum::satisfied(self.quorum.needed(), &groups, votes)
    }

    /// The groups no vote covers yet.
    pub fn missing_groups(&self, votes: &[Vote]) -> Vec<&str> {
        let groups: Vec<&str> = self.groups().collect();
        crate::quorum::missing_groups(&groups, votes)
    }

    /// `approver`'s vote, now, as `by` labels them.
    pub fn vote(&self, approver: &Approver, at: OffsetDateTime, by: Option<&str>) -> Vote {
        Vote::of(
            self.groups(),
            &approver.caller,
            approver.on_behalf_of.as_ref(),
            &approver.groups,
            at,
            by,
        )
    }

    /// Whether `approver` may answer a confirmation of `caller` as an approver: a member of
    /// one of its groups, never the caller itself where the rule excludes it, never for the
    /// caller through a delegation where the rule excludes it (the caller's own eyes by
    /// proxy), and never its own call with groups handed to it.
    pub fn admits(&self, caller: &Caller, approver: &Approver) -> bool {
        let delegated = approver.on_behalf_of.is_some();
        self.approver_may_answer(caller, &approver.caller, &approver.groups)
            && !(self.excludes_caller() && approver.on_behalf_of.as_ref() == Some(caller))
            // Groups handed over never answer the delegate's own calls, whatever the mode:
            // under `must` the caller outside the group would approve itself.
            && !(delegated && approver.caller == *caller)
    }

    /// What a counted approval, not the last, tells whoever gave it.
    pub fn counted(&self, votes: &[Vote]) -> elicitation_core::RespondOutcome {
        elicitation_core::RespondOutcome::Counted {
            approvals: votes.len(),
            needed: self.quorum.needed(),
            missing: self
                .missing_groups(votes)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        }
    }

    /// Why an approval that brings the quorum no nearer is not counted.
    pub(crate) fn not_needed(&self, votes: &[Vote]) -> StoreError {
        let missing = self.missing_groups(votes);
        StoreError::AnswerRefused(if missing.is_empty() {
            "enough people of your groups approved this call already; it waits for an approver of another group".to_owned()
        } else {
            format!(
                "enough people approved this call already; it waits for one from {}",
                missing.join(", ")
            )
        })
    }

    /// Why an approval under a quorum of several people cannot make a grant or change the
    /// arguments: each approver approved the call as it is, and a grant would let later
    /// calls through on one person's word.
    pub(crate) fn refuse_with(&self) -> StoreError {
        StoreError::AnswerRefused(format!(
            "this call needs {} approvers: it can be approved only as it is, without a standing grant or changed arguments",
            self.quorum.needed()
        ))
    }

    /// Whether the caller never counts as an approver of its own call: four eyes, or a
    /// quorum of several people.
    pub fn excludes_caller(&self) -> bool {
        self.mode == ApprovalMode::FourEyes || self.quorum.is_plural()
    }

    /// Whether `answerer`, a member of `groups`, may answer a confirmation of `caller` by
    /// either path: as the caller itself, or as a member of the group.
    pub fn may_answer(&self, caller: &Caller, answerer: &Caller, groups: &[String]) -> bool {
        (caller == answerer && self.caller_may_answer())
            || self.approver_may_answer(caller, answerer, groups)
    }

    /// Whether `approver`, a member of `groups`, may answer a confirmation of `caller`.
    pub fn approver_may_answer(
        &self,
        caller: &Caller,
        approver: &Caller,
        groups: &[String],
    ) -> bool {
        self.answered_by_groups(groups) && !(self.excludes_caller() && caller == approver)
    }
}

impl ConfirmationRequest {
    /// A request for a call to `tool` (whose definition digests to `definition`) with
    /// `arguments`, digesting them.
    pub fn new(
        tool: impl Into<String>,
        definition: CallDigest,
        arguments: Value,
        message: impl Into<String>,
        ttl: Duration,
    ) -> Self {
        ConfirmationRequest {
            binding: CallBinding {
                server: None,
                tool: tool.into(),
                digest: CallDigest::of(&arguments),
                definition,
            },
            arguments,
            message: message.into(),
            ttl,
            approval: None,
            policy: PolicyRef::default(),
            client: None,
        }
    }

    /// The same request, answered by `approval`'s group.
    #[must_use]
    pub fn with_approval(mut self, approval: Option<Approval>) -> Self {
        self.approval = approval;
        self
    }
}

/// What became of redeeming a confirmation.
#[derive(Debug, Clone, PartialEq)]
pub enum Redeemed {
    /// Consumed now: the call it approves may be forwarded, once.
    Consumed(Elicitation),
    /// Not consumed: the confirmation as it is now, and why it could not be used (not
    /// answered, declined, used already, expired).
    Refused {
        /// The confirmation as read (a pending one past its expiry reads as expired).
        current: Elicitation,
        /// Why it could not be consumed.
        why: TransitionError,
    },
}

impl Redeemed {
    /// Consumes `current` (a copy of the stored record, as seen at `now`) or says why not;
    /// `Ok` means the caller is to store the consumed record.
    pub(crate) fn decide(current: Elicitation, now: OffsetDateTime) -> Redeemed {
        let mut consumed = current.clone();
        match consumed.consume(now) {
            Ok(()) => Redeemed::Consumed(consumed),
            Err(why) => Redeemed::Refused { current, why },
        }
    }
}

/// A stored elicitation with what it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredElicitation {
    /// The record. Reads show a pending record past its expiry as `expired`.
    pub elicitation: Elicitation,
    /// For a confirmation of a tool call: the tool and the call's arguments (opened).
    pub call: Option<HeldCall>,
}

/// A row of a listing that cannot be opened — sealed under a key no longer in the ring, or
/// damaged — reported with its id, so one bad row never hides the others.
#[derive(Debug)]
pub struct Unreadable {
    /// The row.
    pub id: ElicitationId,
    /// Why it cannot be read (for logs; never shown to clients).
    pub error: StoreError,
}

/// One entry of a listing: the elicitation, or why its row cannot be read.
pub type Listed = Result<StoredElicitation, Unreadable>;

/// The tool call a confirmation holds.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldCall {
    /// The qualified tool name.
    pub tool: String,
    /// The digest of the arguments.
    pub digest: CallDigest,
    /// The digest of the tool's definition it was held under (`None` only for a row held
    /// before the store kept it: such a confirmation approves nothing).
    pub definition: Option<CallDigest>,
    /// The arguments, opened.
    pub arguments: Value,
    /// Who answers it besides, or instead of, the caller.
    pub approval: Option<Approval>,
    /// The approvals counted so far toward the approval's quorum (empty without one).
    pub votes: Vec<Vote>,
    /// The virtual server it was held on (`None`: the gateway's own endpoint).
    pub server: Option<String>,
}

/// Which of a caller's elicitations to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListQuery {
    /// Only this (effective) status, or all.
    pub status: Option<ElicitationStatus>,
    /// At most this many (capped at [`MAX_LIST_LIMIT`]), newest first.
    pub limit: usize,
}

impl ListQuery {
    /// The caller's pending elicitations, newest first.
    pub const fn pending(limit: usize) -> Self {
        ListQuery {
            status: Some(ElicitationStatus::Pending),
            limit,
        }
    }

    pub(crate) fn capped_limit(&self) -> usize {
        self.limit.min(MAX_LIST_LIMIT)
    }
}

/// An elicitation the sweeper moved to `expired`, with its owner.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpiredElicitation {
    /// Whose it was.
    pub caller: Caller,
    /// The record, now `expired`.
    pub elicitation: Elicitation,
    /// The tool of a confirmation.
    pub tool: Option<String>,
}

/// The longest message [`Fleet::broadcast`] carries (PostgreSQL's `NOTIFY`
/// payload limit, with room to spare).
pub const MAX_BROADCAST_BYTES: usize = 4000;

/// A finished elicitation the retention job erased (its record is gone; its audit trail
/// stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErasedElicitation {
    /// Which.
    pub id: ElicitationId,
    /// Its type (a `file_upload`'s files are removed with it).
    pub kind: elicitation_core::ElicitationType,
}

/// Where elicitations live. Every operation is scoped to a [`Caller`]: another caller's
/// elicitation behaves exactly like a missing one ([`StoreError::NotFound`]).
///
/// Implementations: [`crate::MemoryStore`] (embedded default) and
/// [`crate::PostgresStore`] (the store of record). Both pass one conformance suite.
#[async_trait]
pub trait ElicitationStore: Send + Sync + 'static {
    /// Creates a pending elicitation for `caller`, expiring after `ttl`.
    async fn create(
        &self,
        caller: &Caller,
        spec: ElicitationSpec,
        ttl: Duration,
    ) -> Result<Elicitation, StoreError>;

    /// Creates a pending confirmation bound to (`caller`, tool, digest of the arguments).
    async fn create_confirmation(
        &self,
        caller: &Caller,
        request: ConfirmationRequest,
    ) -> Result<StoredElicitation, StoreError>;

    /// One of the caller's elicitations.
    async fn get(
        &self,
        caller: &Caller,
        id: ElicitationId,
    ) -> Result<StoredElicitation, StoreError>;

    /// The caller's elicitations, newest first. A row that cannot be read is listed as
    /// [`Unreadable`] in its place; it never fails the listing.
    async fn list(&self, caller: &Caller, query: ListQuery) -> Result<Vec<Listed>, StoreError>;

    /// Answers an elicitation as its caller (see [`Elicitation::respond`]; a confirmation
    /// whose [`Approval`] does not let the caller answer is refused with
    /// [`StoreError::ApproverRequired`]), recording who answered
    /// ([`Elicitation::answered_by`], cleaned by [`elicitation_core::answered_by`]; `None`:
    /// not said). Concurrent answers are recorded exactly once.
    async fn respond_as(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<RespondOutcome, StoreError>;

    /// The pending confirmations, of any caller, that `approver`'s groups answer (each with
    /// its caller), newest first; at most `limit`.
    async fn approver_pending(
        &self,
        approver: &Approver,
        limit: usize,
    ) -> Result<Vec<(Caller, StoredElicitation)>, StoreError>;

    /// Answers another caller's confirmation as `approver` (see [`Approval`]): refused as
    /// [`StoreError::NotFound`] unless its group is one of the approver's, and as
    /// [`StoreError::FourEyes`] when the approver is the caller of a four-eyes confirmation.
    /// Returns the confirmation's caller with the outcome.
    async fn approver_respond(
        &self,
        approver: &Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<(Caller, RespondOutcome), StoreError>;

    /// Answers an elicitation without saying who answered (see [`Self::respond_as`]).
    async fn respond(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
    ) -> Result<RespondOutcome, StoreError> {
        self.respond_as(caller, id, payload, None).await
    }

    /// Cancels a pending elicitation and returns it.
    async fn cancel(
        &self,
        caller: &Caller,
        id: ElicitationId,
        reason: CancelReason,
    ) -> Result<Elicitation, StoreError>;

    /// The caller's confirmation `id` if it is bound to exactly `binding`; `None` when it is
    /// missing, another caller's, not a confirmation, or bound to another call.
    async fn confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Option<Elicitation>, StoreError>;

    /// The caller's unexpired confirmation bound to exactly `binding` that a call repeated
    /// without naming one takes up: an approved, unused one first, else a declined one not
    /// yet reported to the agent ([`ElicitationStore::report_decline`]), else a pending one
    /// (the oldest of each); `None` when there is none. Reading it grants nothing: the call
    /// is forwarded only after [`ElicitationStore::redeem_confirmation`] consumed it.
    async fn confirmation_for(
        &self,
        caller: &Caller,
        binding: &CallBinding,
    ) -> Result<Option<ElicitationId>, StoreError>;

    /// Redeems the caller's confirmation `id` for the call `binding` names, in one step (one
    /// statement, one round trip in Postgres): if it is answered, approved, unexpired and
    /// unused it is consumed — of any number of concurrent attempts, one succeeds — and
    /// otherwise it comes back as it is, with why it could not be used, so the gate decides
    /// the answer from it. `NotFound` when it is missing, another caller's, not a
    /// confirmation, or bound to another call.
    async fn redeem_confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Redeemed, StoreError>;

    /// Records that the caller's declined confirmation `id` of the call `binding` names was
    /// reported to the agent, once: from then on [`ElicitationStore::confirmation_for`] no
    /// longer takes it up, so an identical call is asked about anew. `true` if this call
    /// recorded it (of concurrent reports, one); `false` if it was reported already or is
    /// not a declined confirmation of that call of this caller.
    async fn report_decline(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<bool, StoreError>;

    /// Uses an approved, unexpired, unused confirmation bound to exactly `binding` to
    /// authorise one call ([`ElicitationStore::redeem_confirmation`], with a refusal as the
    /// error).
    async fn consume_confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Elicitation, StoreError> {
        match self.redeem_confirmation(caller, id, binding).await? {
            Redeemed::Consumed(consumed) => Ok(consumed),
            Redeemed::Refused { why, .. } => Err(StoreError::Transition(why)),
        }
    }

    /// The ids of elicitations created or changed from now on (on every instance sharing the
    /// store), for whoever follows a caller's list; `None` for a store without a feed (the
    /// follower then reads the list now and then).
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<ElicitationId>> {
        None
    }

    /// Waits until the elicitation is no longer pending, or until `deadline`, and returns
    /// it as it then is.
    async fn wait_for_change(
        &self,
        caller: &Caller,
        id: ElicitationId,
        deadline: tokio::time::Instant,
    ) -> Result<Elicitation, StoreError>;

    /// Moves every pending elicitation due at `now` to `expired` and returns them (the
    /// sweeper's primitive; across all callers).
    async fn expire_due(&self, now: OffsetDateTime) -> Result<Vec<ExpiredElicitation>, StoreError>;

    /// Erases every finished elicitation (not pending; expired, answered, cancelled and
    /// consumed — whichever it was — at or before `before`) with its payloads, and returns
    /// them; the audit trail stays (the retention job's primitive; across all callers, at
    /// most a batch per call). An approved confirmation that could still authorise its call
    /// is never finished in this sense.
    async fn erase_finished(
        &self,
        before: OffsetDateTime,
    ) -> Result<Vec<ErasedElicitation>, StoreError>;

    /// How many elicitations, of all callers, wait for an answer now (a count, for the
    /// operator).
    async fn pending_count(&self) -> Result<u64, StoreError>;

    /// Whether the store can serve now: reachable, with the migrations this build needs
    /// applied ([`StoreError::NotMigrated`] otherwise).
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The caller's pending elicitations, newest first.
    async fn pending(&self, caller: &Caller, limit: usize) -> Result<Vec<Listed>, StoreError> {
        self.list(caller, ListQuery::pending(limit)).await
    }

    /// Applies an MCP answer (see [`Answer::from_action`]); `answered_by` as for
    /// [`Self::respond_as`].
    async fn apply(
        &self,
        caller: &Caller,
        id: ElicitationId,
        answer: Answer,
        answered_by: Option<&str>,
    ) -> Result<AnswerOutcome, StoreError> {
        match answer {
            Answer::Respond(payload) => self
                .respond_as(caller, id, payload, answered_by)
                .await
                .map(AnswerOutcome::Responded),
            Answer::Cancel(reason) => self
                .cancel(caller, id, reason)
                .await
                .map(|_| AnswerOutcome::Cancelled(reason)),
        }
    }

    /// `Some(true)` approved, `Some(false)` declined, `None` unanswered or not usable for
    /// this binding.
    async fn confirmation_state(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Option<bool>, StoreError> {
        Ok(self
            .confirmation(caller, id, binding)
            .await?
            .and_then(|e| e.confirmation_state()))
    }

    /// Whether the confirmation is approved for this binding (consumed or not).
    async fn is_confirmed(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<bool, StoreError> {
        Ok(self.confirmation_state(caller, id, binding).await? == Some(true))
    }
}

/// What the instances sharing a store tell each other: ended sessions and small notices. A
/// store that serves one instance keeps and tells nothing ([`SingleInstance`]).
#[async_trait]
pub trait Fleet: Send + Sync + 'static {
    /// Records that `caller`'s session (by the SHA-256 of its id) ended, so that every
    /// instance sharing the store refuses it until `until`, when it would have expired
    /// anyway. A store that serves one instance keeps nothing (the instance itself
    /// remembers).
    async fn end_session(
        &self,
        caller: &Caller,
        session: [u8; 32],
        until: OffsetDateTime,
    ) -> Result<(), StoreError>;

    /// The sessions ended and not yet expired, across callers (hashes only): what an
    /// instance learns when it starts.
    async fn ended_sessions(&self) -> Result<Vec<([u8; 32], OffsetDateTime)>, StoreError>;

    /// Sessions ended from now on, on any instance sharing the store (hashes); `None` for a
    /// store that serves one instance.
    fn session_ends(&self) -> Option<tokio::sync::broadcast::Receiver<[u8; 32]>>;

    /// Tells every instance sharing the store — this one included — `message`, a small
    /// text of the HTTP layer's or the gate's (at most [`MAX_BROADCAST_BYTES`]); a store that serves one
    /// instance tells nobody.
    async fn broadcast(&self, message: &str) -> Result<(), StoreError>;

    /// What [`Self::broadcast`] tells, from every instance; `None` for a store that serves
    /// one instance.
    fn broadcasts(&self) -> Option<tokio::sync::broadcast::Receiver<String>>;
}

/// The fleet of one: nothing is kept, nobody is told (the instance itself remembers).
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleInstance;

#[async_trait]
impl Fleet for SingleInstance {
    async fn end_session(
        &self,
        _: &Caller,
        _: [u8; 32],
        _: OffsetDateTime,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    async fn ended_sessions(&self) -> Result<Vec<([u8; 32], OffsetDateTime)>, StoreError> {
        Ok(Vec::new())
    }

    fn session_ends(&self) -> Option<tokio::sync::broadcast::Receiver<[u8; 32]>> {
        None
    }

    async fn broadcast(&self, _: &str) -> Result<(), StoreError> {
        Ok(())
    }

    fn broadcasts(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }
}

/// Where the gate's decisions are recorded beyond the log: the store's own audit trail.
#[async_trait]
pub trait AuditSink: Send + Sync + 'static {
    /// Records in the store's own audit trail (the Postgres table; the memory store keeps
    /// none beyond the log) what the gate did with a call to `tool`: a refusal (with the
    /// confirmation it was about, if any), or a hold on a confirmation still pending. New
    /// holds and forwards are recorded by `create_confirmation` and `redeem_confirmation`
    /// themselves, in the same statement.
    async fn record_gate(
        &self,
        caller: &Caller,
        elicitation: Option<ElicitationId>,
        tool: &str,
        record: GateRecord,
        policy: &PolicyRef,
    ) -> Result<(), StoreError>;

    /// A page of the audit trail for a reader with `audit:read`: every caller's events in
    /// the reader's tenant (none: the events without a tenant), as `query` filters them.
    /// The memory store holds only the most recent ([`crate::AuditHolds`] says so).
    async fn audit_events(
        &self,
        reader: &Caller,
        query: &AuditQuery,
    ) -> Result<AuditPage, StoreError>;
}

/// A new pending elicitation: the TTL checked, a UUID v7 id with random bits from `rng`.
pub(crate) fn new_elicitation(
    rng: &SystemRandom,
    spec: ElicitationSpec,
    now: OffsetDateTime,
    ttl: Duration,
) -> Result<Elicitation, StoreError> {
    check_ttl(ttl)?;
    let mut random = [0u8; 10];
    rng.fill(&mut random)
        .map_err(|_| StoreError::Seal(crate::SealError::Random))?;
    Ok(Elicitation::new(
        ElicitationId::v7(now, random),
        spec,
        now,
        ttl,
    ))
}

impl ConfirmationRequest {
    /// The new pending confirmation this request asks for, with the call it holds.
    pub(crate) fn into_new(
        self,
        rng: &SystemRandom,
        now: OffsetDateTime,
    ) -> Result<StoredElicitation, StoreError> {
        let spec = ElicitationSpec::confirmation(self.message)?;
        let elicitation = new_elicitation(rng, spec, now, self.ttl)?;
        let call = HeldCall {
            tool: self.binding.tool,
            digest: self.binding.digest,
            definition: Some(self.binding.definition),
            arguments: self.arguments,
            approval: self.approval,
            votes: Vec::new(),
            server: self.binding.server,
        };
        Ok(StoredElicitation {
            elicitation,
            call: Some(call),
        })
    }
}

/// Shortest time to live accepted: a person needs at least this long to answer.
pub const MIN_TTL: Duration = Duration::SECOND;

/// Checks a TTL is at least [`MIN_TTL`].
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), StoreError> {
    if ttl >= MIN_TTL {
        Ok(())
    } else {
        Err(StoreError::InvalidTtl)
    }
}

/// The record as a reader sees it at `now`: pending past expiry reads as expired.
pub(crate) fn as_seen(mut elicitation: Elicitation, now: OffsetDateTime) -> Elicitation {
    elicitation.status = elicitation.status_at(now);
    elicitation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_rule_decides_who_may_answer_by_either_path() {
        let (alice, bob) = (
            Caller::new("alice", None).unwrap(),
            Caller::new("bob", None).unwrap(),
        );
        let sre = vec!["sre".to_owned()];
        let none: Vec<String> = Vec::new();
        let rule = |mode| Approval {
            group: "sre".into(),
            mode,
            quorum: crate::Quorum::default(),
        };
        // (mode, answerer, answerer's groups) → may answer alice's confirmation?
        let cases = [
            (ApprovalMode::May, &alice, &none, true),
            (ApprovalMode::May, &bob, &none, false),
            (ApprovalMode::May, &bob, &sre, true),
            (ApprovalMode::Must, &alice, &none, false),
            (ApprovalMode::Must, &alice, &sre, true),
            (ApprovalMode::Must, &bob, &sre, true),
            (ApprovalMode::FourEyes, &alice, &sre, false),
            (ApprovalMode::FourEyes, &alice, &none, false),
            (ApprovalMode::FourEyes, &bob, &sre, true),
            (ApprovalMode::FourEyes, &bob, &none, false),
        ];
        for (mode, answerer, groups, want) in cases {
            assert_eq!(
                rule(mode).may_answer(&alice, answerer, groups),
                want,
                "{mode:?} {answerer:?} {groups:?}"
            );
        }
    }
}
