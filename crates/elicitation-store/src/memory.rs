//! The embedded store: everything in process memory, bounded, lost on restart.

mod accounts;
mod flows;
mod recent;

pub use flows::MAX_MEMORY_FLOWS;

pub use recent::MAX_MEMORY_AUDIT_EVENTS;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use elicitation_core::{
    Elicitation, ElicitationId, ElicitationStatus, RespondOutcome, TransitionError,
};
use ring::rand::SystemRandom;
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::broadcast;

use crate::audit::{self, AuditEvent, Event};
use crate::grant::{AnswerWith, Grant, GrantId, MAX_GRANTS_PER_CALLER};
use crate::pins::{DefinitionChange, DefinitionKey, Pin};
use crate::store::as_seen;
use crate::{
    Approver, CallBinding, Caller, Clock, HeldCall, StoreError, StoredElicitation, SystemClock,
};

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
                && call.server == binding.server
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
    /// Callers' flows (never held with the other locks).
    flows: Mutex<flows::Flows>,
    /// Delegations (never held with the other locks but the trail's).
    delegations: Mutex<delegations::Delegations>,
    /// Quota counters (never held with the other locks).
    quotas: Mutex<quotas::Counters>,
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
            flows: Mutex::default(),
            delegations: Mutex::default(),
            quotas: Mutex::default(),
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
            // Never the approval of a pending call several people must approve: that is
            // counted ([`MemoryStore::vote`]), whatever path came here.
            if entry.elicitation.status == ElicitationStatus::Pending
                && crate::quorum::approves(&payload)
                && entry
                    .call
                    .as_ref()
                    .and_then(|c| c.approval.as_ref())
                    .is_some_and(|a| a.quorum.is_plural())
            {
                return Err(StoreError::Conflict(
                    "an approval of a call several people must approve is counted, not recorded alone".into(),
                ));
            }
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
                    .is_some_and(|a| a.answered_by_groups(&approver.groups))
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
        if approver.on_behalf_of.is_some() && matches!(with, Some(AnswerWith::Grant(_))) {
            return Err(crate::delegation::no_grant_by_a_delegate());
        }
        if crate::quorum::approves(&payload)
            && let Some(outcome) =
                self.vote(approver, &owner, id, &payload, answered_by, with.is_some())?
        {
            return Ok((owner, outcome, None));
        }
        let (outcome, grant) = self.respond_checked(
            &owner,
            id,
            payload,
            answered_by,
            |entry| match entry.call.as_ref().and_then(|c| c.approval.as_ref()) {
                Some(a) if a.admits(&entry.caller, approver) => Ok(()),
                Some(a) if a.answered_by_groups(&approver.groups) => {
                    Err(StoreError::FourEyes { id })
                }
                _ => Err(StoreError::NotFound { id }),
            },
            with.map(|w| (w, &approver.caller)),
        )?;
        Ok((owner, outcome, grant))
    }

    /// Counts `approver`'s approval of `owner`'s confirmation `id` toward its quorum, under
    /// the lock: `None` when it has none (or is no longer pending: the plain answer then
    /// says why), else what counting came to — the approval that completes the quorum
    /// records the answer in the same step.
    fn vote(
        &self,
        approver: &Approver,
        owner: &Caller,
        id: ElicitationId,
        payload: &Value,
        answered_by: Option<&str>,
        with: bool,
    ) -> Result<Option<RespondOutcome>, StoreError> {
        let now = self.clock.now();
        self.with_entry(owner, id, |entry| {
            let Some(approval) = entry
                .call
                .as_ref()
                .and_then(|c| c.approval.clone())
                .filter(|a| a.quorum.is_plural())
            else {
                return Ok(None);
            };
            if !approval.admits(&entry.caller, approver) {
                return Err(if approval.answered_by_groups(&approver.groups) {
                    StoreError::FourEyes { id }
                } else {
                    StoreError::NotFound { id }
                });
            }
            if with {
                return Err(approval.refuse_with());
            }
            if entry.elicitation.status_at(now) != ElicitationStatus::Pending {
                return Ok(None);
            }
            let votes = entry.call.as_ref().map_or(&[][..], |c| c.votes.as_slice());
            let vote = approval.vote(approver, now, answered_by);
            let votes = match approval.count(votes, vote) {
                crate::Count::Already => return Ok(Some(approval.counted(votes))),
                crate::Count::NotNeeded => return Err(approval.not_needed(votes)),
                crate::Count::Counted(votes) => {
                    let outcome = approval.counted(&votes);
                    let by = votes.last().and_then(|v| v.by.clone());
                    if let Some(call) = entry.call.as_mut() {
                        call.votes = votes;
                    }
                    entry.audit(Event::Counted);
                    let mut detail = serde_json::Map::new();
                    if let RespondOutcome::Counted {
                        approvals, needed, ..
                    } = &outcome
                    {
                        detail.insert("approvals".into(), (*approvals).into());
                        detail.insert("needed".into(), (*needed).into());
                    }
                    if let Some(by) = by {
                        detail.insert("answered_by".into(), by.into());
                    }
                    self.record(
                        Event::Counted.event(),
                        &entry.caller,
                        Some(id),
                        entry.call.as_ref().map(|c| c.tool.as_str()),
                        Value::Object(detail),
                    );
                    return Ok(Some(outcome));
                }
                crate::Count::Complete(votes) => votes,
            };
            let outcome = entry.elicitation.respond(payload.clone(), now)?;
            match outcome {
                RespondOutcome::Recorded => {
                    entry.elicitation.answered_by = answered_by.map(elicitation_core::answered_by);
                    if let Some(call) = entry.call.as_mut() {
                        call.votes = votes;
                    }
                    self.record_entry(entry, Event::Responded);
                    entry.bytes += json_bytes(payload);
                }
                RespondOutcome::ValidationFailed { .. } => {
                    self.record_entry(entry, Event::ValidationFailed);
                }
                _ => {}
            }
            Ok(Some(outcome))
        })?
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

mod catalog;
mod delegations;
mod elicitations;
mod fleet;
mod grants;
mod outbox;
mod quotas;
#[cfg(test)]
mod tests;
