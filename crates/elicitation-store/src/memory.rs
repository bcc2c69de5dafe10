//! The embedded store: everything in process memory, bounded, lost on restart.

mod accounts;
mod recent;

pub use recent::MAX_MEMORY_AUDIT_EVENTS;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use elicitation_core::{
    CancelReason, Elicitation, ElicitationId, ElicitationSpec, ElicitationStatus, RespondOutcome,
    TransitionError,
};
use ring::rand::SystemRandom;
use serde_json::Value;
use time::{Duration, OffsetDateTime};
use tokio::sync::broadcast;

use crate::audit::{self, AuditEvent, AuditPage, AuditQuery, Event, GateRecord, PolicyRef};
use crate::grant::{AnswerWith, Grant, GrantId, GrantStore, MAX_GRANTS_PER_CALLER};
use crate::pins::{
    CatalogStore, ChangeStatus, DefinitionChange, DefinitionKey, FirstSight, Observed, Pin,
    definition_digest,
};
use crate::store::{as_seen, new_elicitation};
use crate::{
    Approver, CallBinding, Caller, Clock, ConfirmationRequest, ElicitationStore, ErasedElicitation,
    ExpiredElicitation, HeldCall, ListQuery, Listed, MAX_LIST_LIMIT, Redeemed, StoreError,
    StoredElicitation, SystemClock,
};
use crate::{AuditSink, Fleet, SingleInstance};

/// Limits of the memory store, by count and by bytes, per caller and in all.
///
/// A finished elicitation (answered, declined, cancelled, expired, failed — and an approved
/// confirmation once used or past its TTL) may be dropped to make room, oldest first. A
/// caller at its own budget makes room from its own finished elicitations, or is refused
/// ([`StoreError::CallerFull`]); when the whole store is at its budget, room is taken from
/// the callers using the most, so one caller's load never fails another caller's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Pending elicitations one caller may have at once.
    pub max_pending_per_caller: usize,
    /// Elicitations held in all.
    pub max_records: usize,
    /// Elicitations one caller may hold (pending or finished).
    pub max_records_per_caller: usize,
    /// Estimated bytes of messages, arguments and responses held in all.
    pub max_bytes: usize,
    /// Estimated bytes one caller may hold.
    pub max_bytes_per_caller: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            max_pending_per_caller: 100,
            max_records: 100_000,
            max_records_per_caller: 25_000,
            max_bytes: 256 * 1024 * 1024,
            max_bytes_per_caller: 64 * 1024 * 1024,
        }
    }
}

/// What the store holds, in all or for one caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Elicitations.
    pub records: usize,
    /// Estimated bytes of their messages, arguments and responses.
    pub bytes: usize,
}

/// Fixed cost counted for every record besides its payloads.
const RECORD_OVERHEAD: usize = 512;

/// An estimate of the heap bytes a JSON value holds: each node's `Value` (with room for a
/// container's spare capacity), string bytes, and a map entry's key and tree overhead. It errs
/// high rather than low, so the byte budgets bound real memory.
fn json_bytes(value: &Value) -> usize {
    const NODE: usize = 2 * std::mem::size_of::<Value>();
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => NODE,
        Value::String(s) => NODE + s.len(),
        Value::Array(items) => NODE + items.iter().map(json_bytes).sum::<usize>(),
        Value::Object(map) => {
            NODE + map
                .iter()
                .map(|(k, v)| 64 + k.len() + json_bytes(v))
                .sum::<usize>()
        }
    }
}

struct Entry {
    caller: Caller,
    elicitation: Elicitation,
    call: Option<HeldCall>,
    /// A declined confirmation was told to the agent by an identical call
    /// ([`ElicitationStore::report_decline`]).
    reported: bool,
    /// What this entry counts against the byte budgets.
    bytes: usize,
}

impl Entry {
    /// Refuses a transition on a pending elicitation past its expiry without recording the
    /// expiry: that is the sweeper's (`expire_due`) job, as in the Postgres store, so the
    /// timeout is reported exactly once.
    fn refuse_if_overdue(&self, now: OffsetDateTime) -> Result<(), TransitionError> {
        let e = &self.elicitation;
        if e.status == ElicitationStatus::Pending && e.status_at(now) == ElicitationStatus::Expired
        {
            return Err(TransitionError::NotPending {
                id: e.id,
                status: ElicitationStatus::Expired,
            });
        }
        Ok(())
    }

    fn audit(&self, event: Event) {
        audit::emit(
            event,
            &self.caller,
            self.elicitation.id,
            self.call.as_ref().map(|c| c.tool.as_str()),
        );
    }

    /// Whether dropping this entry loses nothing anyone can still use: it is finished, and
    /// not an approved confirmation still waiting to authorise its call.
    fn evictable(&self, now: OffsetDateTime) -> bool {
        let e = &self.elicitation;
        let usable_confirmation =
            e.confirmation_state() == Some(true) && e.consumed_at.is_none() && now < e.expires_at;
        e.status_at(now).is_terminal() && !usable_confirmation
    }

    fn new(caller: &Caller, elicitation: Elicitation, call: Option<HeldCall>) -> Entry {
        let bytes = RECORD_OVERHEAD
            + elicitation.spec.message().len()
            + call
                .as_ref()
                .map_or(0, |c| c.tool.len() + json_bytes(&c.arguments));
        Entry {
            caller: caller.clone(),
            elicitation,
            call,
            reported: false,
            bytes,
        }
    }

    fn stored(&self, now: OffsetDateTime) -> StoredElicitation {
        StoredElicitation {
            elicitation: as_seen(self.elicitation.clone(), now),
            call: self.call.clone(),
        }
    }

    fn bound_to(&self, binding: &CallBinding) -> bool {
        self.call.as_ref().is_some_and(|call| {
            call.tool == binding.tool
                && call.digest == binding.digest
                && call.definition.as_ref() == Some(&binding.definition)
        })
    }
}

/// The pins of every definition (each key's versions, oldest first) and the changes.
#[derive(Default)]
struct Catalog {
    pins: HashMap<DefinitionKey, Vec<Pin>>,
    changes: Vec<DefinitionChange>,
}

/// Most definition changes the memory store keeps: past it, the oldest decided go.
pub(crate) const MAX_DEFINITION_CHANGES: usize = 10_000;

#[derive(Default)]
struct State {
    entries: HashMap<ElicitationId, Entry>,
    /// Each caller's ids, oldest first.
    by_caller: HashMap<Caller, Vec<ElicitationId>>,
    /// Each caller's ids that were pending when last looked at (pruned lazily), so the
    /// per-caller limit costs O(limit), not O(history).
    pending_by_caller: HashMap<Caller, Vec<ElicitationId>>,
    /// What each caller holds.
    usage: HashMap<Caller, MemoryUsage>,
    /// Estimated bytes held in all.
    bytes: usize,
}

impl State {
    fn of_caller<'a>(&'a self, caller: &Caller) -> impl Iterator<Item = &'a Entry> + 'a {
        self.by_caller
            .get(caller)
            .into_iter()
            .flatten()
            .filter_map(|id| self.entries.get(id))
    }

    fn remove(&mut self, id: ElicitationId) {
        if let Some(entry) = self.entries.remove(&id) {
            self.bytes = self.bytes.saturating_sub(entry.bytes);
            if let Some(usage) = self.usage.get_mut(&entry.caller) {
                usage.records = usage.records.saturating_sub(1);
                usage.bytes = usage.bytes.saturating_sub(entry.bytes);
                if usage.records == 0 {
                    self.usage.remove(&entry.caller);
                }
            }
            if let Some(ids) = self.by_caller.get_mut(&entry.caller) {
                ids.retain(|other| *other != id);
                if ids.is_empty() {
                    self.by_caller.remove(&entry.caller);
                }
            }
            if let Some(ids) = self.pending_by_caller.get_mut(&entry.caller) {
                ids.retain(|other| *other != id);
                if ids.is_empty() {
                    self.pending_by_caller.remove(&entry.caller);
                }
            }
        }
    }

    fn usage_of(&self, caller: &Caller) -> MemoryUsage {
        self.usage.get(caller).copied().unwrap_or_default()
    }

    /// The caller's oldest entry that can be dropped.
    fn oldest_evictable_of(&self, caller: &Caller, now: OffsetDateTime) -> Option<ElicitationId> {
        self.by_caller
            .get(caller)?
            .iter()
            .copied()
            .find(|id| self.entries.get(id).is_some_and(|e| e.evictable(now)))
    }

    /// An entry to drop when the whole store is full: the oldest droppable one of the
    /// caller holding the most bytes that has one.
    fn victim(&self, now: OffsetDateTime) -> Option<ElicitationId> {
        let mut callers: Vec<(&Caller, &MemoryUsage)> = self.usage.iter().collect();
        callers.sort_by_key(|(_, usage)| std::cmp::Reverse((usage.bytes, usage.records)));
        callers
            .into_iter()
            .find_map(|(caller, _)| self.oldest_evictable_of(caller, now))
    }

    /// Makes room for `entry` within the limits, dropping finished entries: the caller's own
    /// for its budget, the heaviest callers' for the store's.
    fn make_room(
        &mut self,
        entry: &Entry,
        limits: &MemoryLimits,
        now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        let caller_full = |usage: MemoryUsage| {
            usage.records + 1 > limits.max_records_per_caller
                || usage.bytes + entry.bytes > limits.max_bytes_per_caller
        };
        while caller_full(self.usage_of(&entry.caller)) {
            match self.oldest_evictable_of(&entry.caller, now) {
                Some(id) => self.remove(id),
                None => {
                    return Err(StoreError::CallerFull {
                        records: limits.max_records_per_caller,
                        bytes: limits.max_bytes_per_caller,
                    });
                }
            }
        }
        while self.entries.len() + 1 > limits.max_records
            || self.bytes + entry.bytes > limits.max_bytes
        {
            match self.victim(now) {
                Some(id) => self.remove(id),
                None => {
                    return Err(StoreError::Full {
                        limit: limits.max_records,
                    });
                }
            }
        }
        Ok(())
    }

    /// The caller's pending elicitations at `now`, forgetting those no longer pending.
    fn pending_count(&mut self, caller: &Caller, now: OffsetDateTime) -> usize {
        let Some(ids) = self.pending_by_caller.get_mut(caller) else {
            return 0;
        };
        let entries = &self.entries;
        ids.retain(|id| {
            entries
                .get(id)
                .is_some_and(|e| e.elicitation.status_at(now) == ElicitationStatus::Pending)
        });
        ids.len()
    }
}

/// The memory store. Share it as `Arc<MemoryStore>` or `Arc<dyn ElicitationStore>`.
pub struct MemoryStore {
    state: Mutex<State>,
    /// Standing grants, by id. Locked after `state` when both are held.
    grants: Mutex<HashMap<GrantId, Grant>>,
    /// Tool-definition pins and changes (never held with the other locks).
    catalog: Mutex<Catalog>,
    /// Notices of elicitations' changes, for the notifier (never held with the other locks).
    notices: Mutex<crate::notices::NoticeQueue>,
    /// The recent audit events (locked last, alone or under another lock, never the reverse).
    trail: Mutex<recent::Recent>,
    /// Connected accounts (never held with the other locks).
    accounts: Mutex<accounts::Accounts>,
    changes: broadcast::Sender<ElicitationId>,
    clock: Arc<dyn Clock>,
    rng: SystemRandom,
    limits: MemoryLimits,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(Arc::new(SystemClock), MemoryLimits::default())
    }
}

impl MemoryStore {
    /// A store reading time from `clock`, bounded by `limits`.
    pub fn new(clock: Arc<dyn Clock>, limits: MemoryLimits) -> Self {
        MemoryStore {
            state: Mutex::new(State::default()),
            grants: Mutex::default(),
            catalog: Mutex::default(),
            notices: Mutex::default(),
            trail: Mutex::default(),
            accounts: Mutex::default(),
            changes: broadcast::channel(1024).0,
            clock,
            rng: SystemRandom::new(),
            limits,
        }
    }

    /// Keeps notices of `events` in its outbox (bounded, [`crate::MAX_MEMORY_NOTICES`]) for
    /// a notifier; without, it keeps none.
    #[must_use]
    pub fn notify_on(self, events: &[crate::NoticeEvent]) -> Self {
        self.lock_notices().events = events.to_vec();
        self
    }

    fn lock_notices(&self) -> MutexGuard<'_, crate::notices::NoticeQueue> {
        self.notices.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the notice of `event` (when the outbox keeps it).
    fn notice(&self, caller: &Caller, id: ElicitationId, event: crate::NoticeEvent) {
        let mut notices = self.lock_notices();
        if !notices.events.contains(&event) {
            return;
        }
        // The delivery id: random (a UUID v4); should the generator fail, the notice's
        // sequence number keeps it unique in this process.
        let mut random = [0u8; 16];
        if ring::rand::SecureRandom::fill(&self.rng, &mut random).is_err() {
            random[..8].copy_from_slice(&notices.next_seq().to_be_bytes());
        }
        notices.record(caller, id, event, self.clock.now(), random);
    }

    /// Adds one event to the recent audit trail.
    fn record(
        &self,
        event: AuditEvent,
        caller: &Caller,
        elicitation: Option<ElicitationId>,
        tool: Option<&str>,
        detail: Value,
    ) {
        let now = self.clock.now();
        self.trail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(now, event, caller, elicitation, tool, detail);
    }

    /// Logs `event` of `entry` and adds it to the recent trail, with what the PostgreSQL
    /// store's row says: the type asked, the cancel reason, who answered and how.
    fn record_entry(&self, entry: &Entry, event: Event) {
        entry.audit(event);
        let mut detail = event.detail();
        if let Event::Responded = event {
            let e = &entry.elicitation;
            if let Some(confirmed) = e.confirmation_state() {
                detail.insert("confirmed".into(), confirmed.into());
            }
            if let Some(by) = &e.answered_by {
                detail.insert("answered_by".into(), by.clone().into());
            }
            if let (Some(call), Some(edited)) = (&entry.call, &e.edited_arguments) {
                detail.insert("call_digest".into(), call.digest.to_string().into());
                detail.insert(
                    "edited_digest".into(),
                    gating_core::CallDigest::of(edited).to_string().into(),
                );
            }
        }
        self.record(
            event.event(),
            &entry.caller,
            Some(entry.elicitation.id),
            entry.call.as_ref().map(|c| c.tool.as_str()),
            Value::Object(detail),
        );
    }

    fn record_grant(&self, event: AuditEvent, grant: &Grant) {
        crate::grant::emit(event, grant);
        self.record(
            event,
            &grant.caller,
            Some(grant.elicitation),
            Some(&grant.tool),
            crate::grant::audit_detail(event, grant),
        );
    }

    fn record_change(&self, event: AuditEvent, change: &DefinitionChange) {
        crate::pins::emit(event, change);
        if let Ok(gateway) = Caller::new(crate::pins::CATALOG_SUBJECT, None) {
            self.record(
                event,
                &gateway,
                None,
                Some(&change.key.name),
                crate::pins::audit_detail(change),
            );
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_catalog(&self) -> MutexGuard<'_, Catalog> {
        self.catalog.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_grants(&self) -> MutexGuard<'_, HashMap<GrantId, Grant>> {
        self.grants.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_grant_id(&self, now: OffsetDateTime) -> Result<GrantId, StoreError> {
        let mut random = [0u8; 10];
        ring::rand::SecureRandom::fill(&self.rng, &mut random)
            .map_err(|_| StoreError::Seal(crate::SealError::Random))?;
        Ok(GrantId::v7(now, random))
    }

    /// What the store holds now, in all.
    pub fn usage(&self) -> MemoryUsage {
        let state = self.lock();
        MemoryUsage {
            records: state.entries.len(),
            bytes: state.bytes,
        }
    }

    /// What `caller` holds now.
    pub fn usage_of(&self, caller: &Caller) -> MemoryUsage {
        self.lock().usage_of(caller)
    }

    /// Panics unless the running totals equal what the entries hold (a test invariant).
    #[cfg(test)]
    fn assert_accounting(&self) {
        let state = self.lock();
        let mut per_caller: HashMap<&Caller, MemoryUsage> = HashMap::new();
        for entry in state.entries.values() {
            let usage = per_caller.entry(&entry.caller).or_default();
            usage.records += 1;
            usage.bytes += entry.bytes;
        }
        let total: usize = per_caller.values().map(|u| u.bytes).sum();
        assert_eq!(state.bytes, total, "total bytes");
        assert_eq!(state.usage.len(), per_caller.len(), "callers");
        for (caller, usage) in per_caller {
            assert_eq!(state.usage.get(caller), Some(&usage), "usage of {caller:?}");
        }
    }

    fn notify(&self, id: ElicitationId) {
        // No receivers is fine: nobody is waiting.
        let _ = self.changes.send(id);
    }

    /// Inserts a new entry, enforcing the limits.
    fn insert(&self, entry: Entry, now: OffsetDateTime) -> Result<(), StoreError> {
        let mut state = self.lock();
        let pending_of_caller = state.pending_count(&entry.caller, now);
        if pending_of_caller >= self.limits.max_pending_per_caller {
            return Err(StoreError::PendingLimit {
                limit: self.limits.max_pending_per_caller,
            });
        }
        state.make_room(&entry, &self.limits, now)?;
        let id = entry.elicitation.id;
        state.bytes += entry.bytes;
        let usage = state.usage.entry(entry.caller.clone()).or_default();
        usage.records += 1;
        usage.bytes += entry.bytes;
        state
            .by_caller
            .entry(entry.caller.clone())
            .or_default()
            .push(id);
        state
            .pending_by_caller
            .entry(entry.caller.clone())
            .or_default()
            .push(id);
        let caller = entry.caller.clone();
        state.entries.insert(id, entry);
        drop(state);
        self.notice(&caller, id, crate::NoticeEvent::Waiting);
        self.notify(id);
        Ok(())
    }

    /// Runs `change` on the caller's entry `id` (missing and foreign are both `NotFound`),
    /// and wakes waiters if the status changed.
    fn with_entry<T>(
        &self,
        caller: &Caller,
        id: ElicitationId,
        change: impl FnOnce(&mut Entry) -> T,
    ) -> Result<T, StoreError> {
        let (result, changed) = {
            let mut state = self.lock();
            let entry = state
                .entries
                .get_mut(&id)
                .filter(|e| e.caller == *caller)
                .ok_or(StoreError::NotFound { id })?;
            let before = entry.elicitation.status;
            let bytes_before = entry.bytes;
            let result = change(entry);
            let changed = (entry.elicitation.status != before)
                .then(|| crate::notices::event_of(entry.elicitation.status))
                .map(|event| (event, entry.caller.clone()));
            // A change that grew the entry (a recorded response) is counted under the same
            // lock, so the totals never drift from the entries.
            let grown = entry.bytes.saturating_sub(bytes_before);
            if grown > 0 {
                state.bytes += grown;
                if let Some(usage) = state.usage.get_mut(caller) {
                    usage.bytes += grown;
                }
            }
            (result, changed)
        };
        if let Some((event, caller)) = changed {
            if let Some(event) = event {
                self.notice(&caller, id, event);
            }
            self.notify(id);
        }
        Ok(result)
    }
}

impl MemoryStore {
    /// Records an answer to `caller`'s elicitation `id`, once `allowed` agrees; with a grant
    /// request (and who makes it), makes the grant under the same lock, or neither.
    fn respond_checked(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        allowed: impl FnOnce(&Entry) -> Result<(), StoreError>,
        with: Option<(AnswerWith, &Caller)>,
    ) -> Result<(RespondOutcome, Option<Grant>), StoreError> {
        let now = self.clock.now();
        let mut response_bytes = json_bytes(&payload);
        if let Some((with, _)) = &with {
            crate::grant::check_with_answer(&payload, with)?;
            if let AnswerWith::Arguments(arguments) = with {
                response_bytes += json_bytes(arguments);
            }
        }
        let granting = matches!(with, Some((AnswerWith::Grant(_), _)));
        let grant_id = granting.then(|| self.new_grant_id(now)).transpose()?;
        let outcome = self.with_entry(caller, id, |entry| {
            allowed(entry)?;
            entry.refuse_if_overdue(now)?;
            if let Some((with, _)) = &with
                && entry.call.is_none()
            {
                return Err(crate::grant::not_a_held_call(with));
            }
            let mut grants = granting.then(|| self.lock_grants());
            if let Some(grants) = &grants {
                let held = grants.values().filter(|g| g.caller == *caller).count();
                if held >= MAX_GRANTS_PER_CALLER {
                    return Err(StoreError::AnswerRefused(format!(
                        "this caller already holds {MAX_GRANTS_PER_CALLER} grants, the most the gateway keeps; revoke some first"
                    )));
                }
            }
            let outcome = entry
                .elicitation
                .respond(payload, now)
                .map_err(StoreError::from);
            let mut made = None;
            if matches!(outcome, Ok(RespondOutcome::Recorded)) {
                entry.elicitation.answered_by = answered_by.map(elicitation_core::answered_by);
                match (with, grants.as_mut(), entry.call.as_ref(), grant_id) {
                    (Some((AnswerWith::Grant(request), granter)), Some(grants), Some(call), Some(grant_id)) => {
                        let made_now = request.into_grant(
                            grant_id,
                            id,
                            caller,
                            call,
                            granter,
                            answered_by,
                            now,
                        );
                        grants.insert(grant_id, made_now.clone());
                        self.record_grant(AuditEvent::GrantCreated, &made_now);
                        made = Some(made_now);
                    }
                    (Some((AnswerWith::Arguments(arguments), _)), ..) => {
                        entry.elicitation.edited_arguments = Some(arguments);
                    }
                    _ => {}
                }
            }
            let event = match &outcome {
                Ok(RespondOutcome::Recorded) => Some(Event::Responded),
                Ok(RespondOutcome::ValidationFailed { .. }) => Some(Event::ValidationFailed),
                _ => None,
            };
            if let Some(event) = event {
                self.record_entry(entry, event);
            }
            if matches!(outcome, Ok(RespondOutcome::Recorded)) {
                entry.bytes += response_bytes;
            }
            outcome.map(|o| (o, made))
        })??;
        Ok(outcome)
    }

    /// The owner of confirmation `id` if `approver`'s groups answer it.
    fn approver_owner(&self, approver: &Approver, id: ElicitationId) -> Result<Caller, StoreError> {
        let state = self.lock();
        state
            .entries
            .get(&id)
            .filter(|e| {
                e.call
                    .as_ref()
                    .and_then(|c| c.approval.as_ref())
                    .is_some_and(|a| approver.groups.contains(&a.group))
            })
            .map(|e| e.caller.clone())
            .ok_or(StoreError::NotFound { id })
    }

    /// Answers as `approver` (the rule checked under the lock), with a grant or not.
    fn approver_answer(
        &self,
        approver: &Approver,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: Option<AnswerWith>,
    ) -> Result<(Caller, RespondOutcome, Option<Grant>), StoreError> {
        let owner = self.approver_owner(approver, id)?;
        let (outcome, grant) = self.respond_checked(
            &owner,
            id,
            payload,
            answered_by,
            |entry| match entry.call.as_ref().and_then(|c| c.approval.as_ref()) {
                Some(a)
                    if a.approver_may_answer(&entry.caller, &approver.caller, &approver.groups) =>
                {
                    Ok(())
                }
                Some(a) if approver.groups.contains(&a.group) => Err(StoreError::FourEyes { id }),
                _ => Err(StoreError::NotFound { id }),
            },
            with.map(|w| (w, &approver.caller)),
        )?;
        Ok((owner, outcome, grant))
    }

    /// Answers as the caller itself (refused where an approver group must answer).
    fn own_answer(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: Option<AnswerWith>,
    ) -> Result<(RespondOutcome, Option<Grant>), StoreError> {
        self.respond_checked(
            caller,
            id,
            payload,
            answered_by,
            |entry| match entry.call.as_ref().and_then(|c| c.approval.as_ref()) {
                Some(a) if !a.caller_may_answer() => Err(StoreError::ApproverRequired {
                    id,
                    group: a.group.clone(),
                }),
                _ => Ok(()),
            },
            with.map(|w| (w, caller)),
        )
    }
}

#[async_trait]
impl ElicitationStore for MemoryStore {
    async fn create(
        &self,
        caller: &Caller,
        spec: ElicitationSpec,
        ttl: Duration,
    ) -> Result<Elicitation, StoreError> {
        let now = self.clock.now();
        let elicitation = new_elicitation(&self.rng, spec, now, ttl)?;
        let entry = Entry::new(caller, elicitation.clone(), None);
        self.insert(entry, now)?;
        audit::emit(
            Event::Requested(elicitation.kind()),
            caller,
            elicitation.id,
            None,
        );
        self.record(
            AuditEvent::ElicitationRequested,
            caller,
            Some(elicitation.id),
            None,
            Value::Object(Event::Requested(elicitation.kind()).detail()),
        );
        Ok(elicitation)
    }

    async fn create_confirmation(
        &self,
        caller: &Caller,
        request: ConfirmationRequest,
    ) -> Result<StoredElicitation, StoreError> {
        let now = self.clock.now();
        let policy = request.policy.clone();
        let client = request.client.clone();
        let stored = request.into_new(&self.rng, now)?;
        let held = audit::held_detail(
            &policy,
            stored.elicitation.spec.message(),
            stored.call.as_ref().map(|c| &c.digest),
            client.as_deref(),
        );
        let entry = Entry::new(caller, stored.elicitation.clone(), stored.call.clone());
        self.insert(entry, now)?;
        let tool = stored.call.as_ref().map(|c| c.tool.as_str());
        audit::emit(
            Event::Requested(stored.elicitation.kind()),
            caller,
            stored.elicitation.id,
            tool,
        );
        let id = Some(stored.elicitation.id);
        let requested = Event::Requested(stored.elicitation.kind()).detail();
        self.record(
            AuditEvent::ElicitationRequested,
            caller,
            id,
            tool,
            Value::Object(requested),
        );
        if tool.is_some() {
            self.record(AuditEvent::ToolCallHeld, caller, id, tool, held);
        }
        Ok(stored)
    }

    async fn get(
        &self,
        caller: &Caller,
        id: ElicitationId,
    ) -> Result<StoredElicitation, StoreError> {
        let now = self.clock.now();
        self.with_entry(caller, id, |entry| entry.stored(now))
    }

    async fn list(&self, caller: &Caller, query: ListQuery) -> Result<Vec<Listed>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        let mut found: Vec<StoredElicitation> = state
            .of_caller(caller)
            .filter(|e| {
                query
                    .status
                    .is_none_or(|s| e.elicitation.status_at(now) == s)
            })
            .map(|e| e.stored(now))
            .collect();
        found.sort_by(|a, b| {
            (b.elicitation.created_at, b.elicitation.id)
                .cmp(&(a.elicitation.created_at, a.elicitation.id))
        });
        found.truncate(query.capped_limit());
        Ok(found.into_iter().map(Ok).collect())
    }

    async fn approver_pending(
        &self,
        approver: &Approver,
        limit: usize,
    ) -> Result<Vec<(Caller, StoredElicitation)>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        let mut found: Vec<(Caller, StoredElicitation)> = state
            .entries
            .values()
            .filter(|e| e.elicitation.status_at(now) == ElicitationStatus::Pending)
            .filter(|e| {
                e.call
                    .as_ref()
                    .and_then(|c| c.approval.as_ref())
                    .is_some_and(|a| approver.groups.contains(&a.group))
            })
            .map(|e| (e.caller.clone(), e.stored(now)))
            .collect();
        found.sort_by(|(_, a), (_, b)| {
            (b.elicitation.created_at, b.elicitation.id)
                .cmp(&(a.elicitation.created_at, a.elicitation.id))
        });
        found.truncate(limit.min(MAX_LIST_LIMIT));
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
            .map(|(owner, outcome, _)| (owner, outcome))
    }

    async fn respond_as(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
    ) -> Result<RespondOutcome, StoreError> {
        self.own_answer(caller, id, payload, answered_by, None)
            .map(|(outcome, _)| outcome)
    }

    async fn cancel(
        &self,
        caller: &Caller,
        id: ElicitationId,
        reason: CancelReason,
    ) -> Result<Elicitation, StoreError> {
        let now = self.clock.now();
        self.with_entry(caller, id, |entry| {
            entry.refuse_if_overdue(now)?;
            entry.elicitation.cancel(reason, now)?;
            self.record_entry(entry, Event::Cancelled(reason));
            Ok(entry.elicitation.clone())
        })?
    }

    async fn confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Option<Elicitation>, StoreError> {
        let now = self.clock.now();
        match self.with_entry(caller, id, |entry| {
            entry
                .bound_to(binding)
                .then(|| as_seen(entry.elicitation.clone(), now))
        }) {
            Err(StoreError::NotFound { .. }) => Ok(None),
            other => other,
        }
    }

    async fn confirmation_for(
        &self,
        caller: &Caller,
        binding: &CallBinding,
    ) -> Result<Option<ElicitationId>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        let bound = || {
            state
                .of_caller(caller)
                .filter(|e| e.bound_to(binding) && e.elicitation.expires_at > now)
        };
        let approved = bound().find(|e| {
            e.elicitation.status == ElicitationStatus::Responded
                && e.elicitation.confirmation_state() == Some(true)
                && e.elicitation.consumed_at.is_none()
        });
        let declined = || {
            bound().find(|e| {
                e.elicitation.status == ElicitationStatus::Responded
                    && e.elicitation.confirmation_state() == Some(false)
                    && !e.reported
            })
        };
        let pending =
            || bound().find(|e| e.elicitation.status_at(now) == ElicitationStatus::Pending);
        Ok(approved
            .or_else(declined)
            .or_else(pending)
            .map(|e| e.elicitation.id))
    }

    async fn report_decline(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<bool, StoreError> {
        let mut state = self.lock();
        let Some(entry) = state.entries.get_mut(&id).filter(|e| e.caller == *caller) else {
            return Ok(false);
        };
        let declined = entry.bound_to(binding)
            && entry.elicitation.status == ElicitationStatus::Responded
            && entry.elicitation.confirmation_state() == Some(false)
            && !entry.reported;
        if declined {
            entry.reported = true;
        }
        Ok(declined)
    }

    async fn redeem_confirmation(
        &self,
        caller: &Caller,
        id: ElicitationId,
        binding: &CallBinding,
    ) -> Result<Redeemed, StoreError> {
        let now = self.clock.now();
        self.with_entry(caller, id, |entry| {
            if !entry.bound_to(binding) {
                return Err(StoreError::NotFound { id });
            }
            let redeemed = Redeemed::decide(as_seen(entry.elicitation.clone(), now), now);
            if let Redeemed::Consumed(consumed) = &redeemed {
                entry.elicitation = consumed.clone();
                self.record(
                    AuditEvent::ToolCallForwarded,
                    caller,
                    Some(id),
                    Some(&binding.tool),
                    serde_json::json!({"gated": true}),
                );
            }
            Ok(redeemed)
        })?
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
            None,
            || self.clock.now(),
            || async { self.get(caller, id).await.map(|s| s.elicitation) },
        )
        .await
    }

    async fn erase_finished(
        &self,
        before: OffsetDateTime,
    ) -> Result<Vec<ErasedElicitation>, StoreError> {
        let mut state = self.lock();
        let erased: Vec<ErasedElicitation> = state
            .entries
            .values()
            .filter(|entry| {
                let e = &entry.elicitation;
                e.status != ElicitationStatus::Pending
                    && [
                        Some(e.expires_at),
                        e.responded_at,
                        e.cancelled_at,
                        e.consumed_at,
                    ]
                    .into_iter()
                    .flatten()
                    .all(|at| at <= before)
            })
            .map(|entry| ErasedElicitation {
                id: entry.elicitation.id,
                kind: entry.elicitation.kind(),
            })
            .collect();
        for e in &erased {
            state.remove(e.id);
        }
        drop(state);
        self.lock_grants().retain(|_, g| !g.ended_before(before));
        Ok(erased)
    }

    async fn pending_count(&self) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        Ok(state
            .entries
            .values()
            .filter(|e| e.elicitation.status_at(now) == ElicitationStatus::Pending)
            .count() as u64)
    }

    async fn expire_due(&self, now: OffsetDateTime) -> Result<Vec<ExpiredElicitation>, StoreError> {
        let expired: Vec<ExpiredElicitation> = {
            let mut state = self.lock();
            state
                .entries
                .values_mut()
                .filter_map(|entry| {
                    if !entry.elicitation.expire(now) {
                        return None;
                    }
                    self.record_entry(entry, Event::Timeout);
                    Some(ExpiredElicitation {
                        caller: entry.caller.clone(),
                        elicitation: entry.elicitation.clone(),
                        tool: entry.call.as_ref().map(|c| c.tool.clone()),
                    })
                })
                .collect()
        };
        for e in &expired {
            self.notice(&e.caller, e.elicitation.id, crate::NoticeEvent::Expired);
            self.notify(e.elicitation.id);
        }
        Ok(expired)
    }
}

#[async_trait]
impl crate::Outbox for MemoryStore {
    async fn claim_notices(
        &self,
        now: OffsetDateTime,
        lease: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<crate::Notice>, StoreError> {
        Ok(self.lock_notices().claim(now, lease, limit))
    }

    async fn settle_notice(
        &self,
        id: i64,
        delivered: &[String],
        settle: crate::Settle,
        _now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.lock_notices().settle(id, delivered, settle);
        Ok(())
    }

    fn notices_dropped(&self) -> u64 {
        self.lock_notices().dropped()
    }
}

#[cfg(test)]
mod tests;

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

#[async_trait]
impl GrantStore for MemoryStore {
    async fn respond_with(
        &self,
        caller: &Caller,
        id: ElicitationId,
        payload: Value,
        answered_by: Option<&str>,
        with: AnswerWith,
    ) -> Result<(RespondOutcome, Option<Grant>), StoreError> {
        self.own_answer(caller, id, payload, answered_by, Some(with))
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
    }

    async fn approver_get(
        &self,
        approver: &Approver,
        id: ElicitationId,
    ) -> Result<(Caller, StoredElicitation), StoreError> {
        let owner = self.approver_owner(approver, id)?;
        let stored = self.get(&owner, id).await?;
        Ok((owner, stored))
    }

    async fn live_grants(&self, caller: &Caller, tool: &str) -> Result<Vec<Grant>, StoreError> {
        let now = self.clock.now();
        let mut live: Vec<Grant> = self
            .lock_grants()
            .values()
            .filter(|g| g.caller == *caller && g.tool == tool && g.is_live(now))
            .cloned()
            .collect();
        live.sort_by_key(|g| (g.created_at, g.id));
        Ok(live)
    }

    async fn use_grant(
        &self,
        caller: &Caller,
        id: GrantId,
        tool: &str,
    ) -> Result<Option<Grant>, StoreError> {
        let now = self.clock.now();
        let mut grants = self.lock_grants();
        let Some(grant) = grants
            .get_mut(&id)
            .filter(|g| g.caller == *caller && g.tool == tool && g.is_live(now))
        else {
            return Ok(None);
        };
        grant.uses += 1;
        self.record_grant(AuditEvent::ToolCallForwarded, grant);
        Ok(Some(grant.clone()))
    }

    async fn grants(&self, caller: &Caller, limit: usize) -> Result<Vec<Grant>, StoreError> {
        let mut found: Vec<Grant> = self
            .lock_grants()
            .values()
            .filter(|g| g.caller == *caller || g.granter == *caller)
            .cloned()
            .collect();
        found.sort_by_key(|g| std::cmp::Reverse((g.created_at, g.id)));
        found.truncate(limit.min(MAX_LIST_LIMIT));
        Ok(found)
    }

    async fn revoke_grant(
        &self,
        revoker: &Caller,
        id: GrantId,
        revoked_by: Option<&str>,
    ) -> Result<Grant, StoreError> {
        let now = self.clock.now();
        let mut grants = self.lock_grants();
        let grant = grants
            .get_mut(&id)
            .filter(|g| g.caller == *revoker || g.granter == *revoker)
            .ok_or(StoreError::GrantNotFound { id: *id.as_uuid() })?;
        if grant.is_live(now) {
            grant.revoked_at = Some(now);
            grant.revoked_by = revoked_by.map(elicitation_core::answered_by);
            self.record_grant(AuditEvent::GrantRevoked, grant);
        }
        Ok(grant.clone())
    }
}

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
