//! The outbox of notices: that an elicitation waits for a person, was answered, or expired.
//! A store records a notice in the same step as the change it tells of (on PostgreSQL, a
//! trigger on the elicitation's row), so a change is never made without its notice, however
//! an instance ends; a notifier claims notices for a while, delivers them and settles them.
//! A notice claimed by an instance that died is claimed again by another when its claim
//! lapses, with the same delivery id (a receiver de-duplicates on it).
//!
//! Notices hold no payload: the elicitation's id, its caller and what happened. The
//! notifier reads the elicitation itself, as its caller.

use std::time::Duration;

use async_trait::async_trait;
use elicitation_core::ElicitationId;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Caller, StoreError};

/// What a notice tells of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NoticeEvent {
    /// The elicitation was created and waits for a person.
    Waiting,
    /// A person answered, declined or cancelled it (or its asker withdrew it).
    Answered,
    /// It expired unanswered.
    Expired,
}

impl NoticeEvent {
    /// Every event, in order.
    pub const ALL: [NoticeEvent; 3] = [
        NoticeEvent::Waiting,
        NoticeEvent::Answered,
        NoticeEvent::Expired,
    ];

    /// The label (configuration, the database, the wire: `elicitation.<label>`).
    pub fn label(self) -> &'static str {
        match self {
            NoticeEvent::Waiting => "waiting",
            NoticeEvent::Answered => "answered",
            NoticeEvent::Expired => "expired",
        }
    }

    /// The event of `label`.
    pub fn from_label(label: &str) -> Option<NoticeEvent> {
        NoticeEvent::ALL.into_iter().find(|e| e.label() == label)
    }
}

/// A step of chasing an elicitation that still waits (an approver rule's `remind_after`,
/// `escalate_after`): audited once, when first taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoticeStep {
    /// The people told at once are told again.
    Reminder,
    /// A further group is told.
    Escalation,
}

impl NoticeStep {
    /// The label (the notice's `step`, a delivery's key suffix).
    pub fn label(self) -> &'static str {
        match self {
            NoticeStep::Reminder => "reminder",
            NoticeStep::Escalation => "escalation",
        }
    }

    /// Its audit event.
    pub fn event(self) -> crate::AuditEvent {
        match self {
            NoticeStep::Reminder => crate::AuditEvent::ElicitationReminded,
            NoticeStep::Escalation => crate::AuditEvent::ElicitationEscalated,
        }
    }
}

/// One notice, as a notifier claimed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The outbox's own id (its order).
    pub id: i64,
    /// The same on every delivery attempt, by any instance: what receivers de-duplicate on.
    pub delivery: Uuid,
    /// The elicitation it tells of.
    pub elicitation: ElicitationId,
    /// The elicitation's caller (the notifier reads it as them).
    pub caller: Caller,
    /// What happened.
    pub event: NoticeEvent,
    /// When it happened.
    pub at: OffsetDateTime,
    /// Delivery attempts settled so far.
    pub attempts: u32,
    /// The sinks (by name) that have it already.
    pub delivered: Vec<String>,
}

/// How a claimed notice is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Nothing more to deliver (every sink has it, gave up on it, or it no longer matters).
    Done,
    /// Some sink should be tried again from then on.
    RetryAt(OffsetDateTime),
}

/// Where notices wait to be delivered.
#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// Up to `limit` notices due at `now` that no live claim holds, oldest first, each
    /// claimed by the caller for `lease` (another instance does not get them meanwhile).
    async fn claim_notices(
        &self,
        now: OffsetDateTime,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Notice>, StoreError>;

    /// Settles claimed notice `id`: the sinks that have it now (`delivered`), one attempt
    /// more, and whether it is done or due again. Settling a notice already done changes
    /// nothing.
    async fn settle_notice(
        &self,
        id: i64,
        delivered: &[String],
        settle: Settle,
        now: OffsetDateTime,
    ) -> Result<(), StoreError>;

    /// Audits `step` taken for `caller`'s elicitation (of `tool`, if a held call's): who was
    /// told (`detail`).
    async fn record_step(
        &self,
        caller: &Caller,
        elicitation: ElicitationId,
        tool: Option<&str>,
        step: NoticeStep,
        detail: serde_json::Value,
    ) -> Result<(), StoreError>;

    /// Notices this store dropped because its outbox was full (a bounded store's; a store
    /// that never drops says 0).
    fn notices_dropped(&self) -> u64;
}

/// The notice a change of an elicitation to `status` makes, if any (the same mapping as the
/// PostgreSQL trigger's): answered, declined, cancelled or closed after invalid answers is
/// `Answered`, expired is `Expired`.
pub(crate) fn event_of(status: elicitation_core::ElicitationStatus) -> Option<NoticeEvent> {
    use elicitation_core::ElicitationStatus as S;
    match status {
        S::Pending => None,
        S::Responded | S::Cancelled | S::ValidationFailed => Some(NoticeEvent::Answered),
        S::Expired => Some(NoticeEvent::Expired),
    }
}

/// The most notices the memory store keeps waiting; past it the oldest is dropped (and
/// counted).
pub const MAX_MEMORY_NOTICES: usize = 10_000;

/// The memory store's outbox: bounded, in order, lost on restart.
#[derive(Debug, Default)]
pub(crate) struct NoticeQueue {
    /// The events recorded (none: the outbox is off).
    pub(crate) events: Vec<NoticeEvent>,
    queue: std::collections::VecDeque<Queued>,
    next_id: i64,
    dropped: u64,
}

#[derive(Debug)]
struct Queued {
    notice: Notice,
    due: OffsetDateTime,
    claimed_until: Option<OffsetDateTime>,
}

impl NoticeQueue {
    /// Records `event` of `caller`'s elicitation at `at`, when it is one the outbox keeps.
    pub(crate) fn record(
        &mut self,
        caller: &Caller,
        elicitation: ElicitationId,
        event: NoticeEvent,
        at: OffsetDateTime,
        random: [u8; 16],
    ) {
        if !self.events.contains(&event) {
            return;
        }
        if self.queue.len() >= MAX_MEMORY_NOTICES {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.next_id += 1;
        self.queue.push_back(Queued {
            notice: Notice {
                id: self.next_id,
                delivery: uuid::Builder::from_random_bytes(random).into_uuid(),
                elicitation,
                caller: caller.clone(),
                event,
                at,
                attempts: 0,
                delivered: Vec::new(),
            },
            due: at,
            claimed_until: None,
        });
    }

    pub(crate) fn claim(
        &mut self,
        now: OffsetDateTime,
        lease: Duration,
        limit: usize,
    ) -> Vec<Notice> {
        let until = now + lease;
        let mut due: Vec<&mut Queued> = self
            .queue
            .iter_mut()
            .filter(|q| q.due <= now && q.claimed_until.is_none_or(|c| c <= now))
            .collect();
        due.sort_by_key(|q| (q.due, q.notice.id));
        due.into_iter()
            .take(limit)
            .map(|q| {
                q.claimed_until = Some(until);
                q.notice.clone()
            })
            .collect()
    }

    pub(crate) fn settle(&mut self, id: i64, delivered: &[String], settle: Settle) {
        let Some(at) = self.queue.iter().position(|q| q.notice.id == id) else {
            return;
        };
        match settle {
            Settle::Done => {
                self.queue.remove(at);
            }
            Settle::RetryAt(when) => {
                let q = &mut self.queue[at];
                q.notice.attempts += 1;
                q.notice.delivered = delivered.to_vec();
                q.due = when;
                q.claimed_until = None;
            }
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The id the next notice gets.
    pub(crate) fn next_seq(&self) -> u64 {
        u64::try_from(self.next_id + 1).unwrap_or_default()
    }
}

/// Logs a chasing step (the audit trail's record of it).
pub(crate) fn emit_step(step: NoticeStep, caller: &Caller, elicitation: ElicitationId) {
    tracing::info!(
        target: "audit",
        event = step.event().label(),
        subject = caller.subject_id(),
        tenant = caller.tenant_id(),
        elicitation_id = %elicitation,
    );
}
