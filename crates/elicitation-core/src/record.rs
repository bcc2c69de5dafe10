//! One elicitation and its pure state machine. Time is always passed in.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::{Duration, OffsetDateTime};

use crate::schema::CONFIRMED;
use crate::validate::Violation;
use crate::{
    CancelReason, ElicitationId, ElicitationSpec, ElicitationStatus, ElicitationType,
    validate_response,
};

/// Invalid answers allowed before an elicitation fails: the third invalid answer is terminal.
pub const MAX_RETRIES: u8 = 3;

/// What answering a pending elicitation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespondOutcome {
    /// The answer was valid and is now the elicitation's response.
    Recorded,
    /// The answer was invalid; the person may try again `retries_left` more times.
    Invalid {
        /// Every violation of the answer.
        errors: Vec<Violation>,
        /// Answers still accepted before the elicitation fails.
        retries_left: u8,
    },
    /// The answer was invalid and the last allowed; the elicitation is now `validation_failed`.
    ValidationFailed {
        /// Every violation of the final answer.
        errors: Vec<Violation>,
    },
    /// The same answer was already recorded; nothing changed.
    AlreadyRecorded,
    /// An approval counted toward a quorum (or this person's approval, counted before):
    /// the elicitation still waits for `needed - approvals` more people.
    Counted {
        /// Distinct people who approved so far.
        approvals: usize,
        /// Distinct people needed.
        needed: usize,
        /// Groups of which nobody approved yet, where one of each is needed.
        missing: Vec<String>,
    },
}

/// A transition that the elicitation's state does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// The elicitation is terminal (or past its expiry) and cannot take this transition.
    #[error("elicitation {id} is {status}, not pending")]
    NotPending {
        /// The elicitation.
        id: ElicitationId,
        /// Its status now.
        status: ElicitationStatus,
    },
    /// A different answer than the one already recorded.
    #[error("elicitation {id} already has a different response")]
    ConflictingResponse {
        /// The elicitation.
        id: ElicitationId,
    },
    /// Only confirmations can be consumed.
    #[error("elicitation {id} is a {kind} elicitation, not a confirmation")]
    NotAConfirmation {
        /// The elicitation.
        id: ElicitationId,
        /// Its type.
        kind: ElicitationType,
    },
    /// The confirmation was not answered with `confirmed: true`.
    #[error("confirmation {id} is not approved")]
    NotApproved {
        /// The elicitation.
        id: ElicitationId,
    },
    /// The confirmation already authorised a call.
    #[error("confirmation {id} was already used")]
    AlreadyConsumed {
        /// The elicitation.
        id: ElicitationId,
    },
    /// The confirmation's time to live has passed.
    #[error("confirmation {id} has expired")]
    Expired {
        /// The elicitation.
        id: ElicitationId,
    },
}

/// An elicitation record: what was asked, where it stands, and the answer if any.
///
/// Timestamps are truncated to whole microseconds (the precision of Postgres `timestamptz`),
/// so a record reads back from any store exactly as it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elicitation {
    /// Its identity.
    pub id: ElicitationId,
    /// What it asks.
    pub spec: ElicitationSpec,
    /// Where it is in its life. A `Pending` record past `expires_at` reads as expired
    /// through [`Elicitation::status_at`].
    pub status: ElicitationStatus,
    /// Invalid answers so far.
    pub retries: u8,
    /// The recorded answer, once `Responded`.
    pub response: Option<Value>,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it stops accepting answers (and a confirmation stops authorising calls).
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// When the answer was recorded.
    #[serde(with = "time::serde::rfc3339::option")]
    pub responded_at: Option<OffsetDateTime>,
    /// Who recorded the answer, as the gateway described them (for example `alice on the
    /// approvals page`); `None` when not said. At most [`MAX_ANSWERED_BY_CHARS`] characters.
    #[serde(default)]
    pub answered_by: Option<String>,
    /// The person's note with a declined confirmation ("use the staging bucket"): told to
    /// the agent, kept apart from the answer (which stays `{"confirmed": false}`). At most
    /// [`crate::MAX_NOTE_CHARS`] characters.
    #[serde(default)]
    pub note: Option<String>,
    /// The arguments a person approved a held call with instead of the agent's (checked by
    /// the gate against the tool's input schema): what the call is forwarded with. Kept
    /// apart from the answer (which stays `{"confirmed": true}`).
    #[serde(default)]
    pub edited_arguments: Option<Value>,
    /// When it was cancelled.
    #[serde(with = "time::serde::rfc3339::option")]
    pub cancelled_at: Option<OffsetDateTime>,
    /// Why it was cancelled.
    pub cancel_reason: Option<CancelReason>,
    /// When an approved confirmation authorised its one call.
    #[serde(with = "time::serde::rfc3339::option")]
    pub consumed_at: Option<OffsetDateTime>,
}

/// Longest recorded [`Elicitation::answered_by`], in characters (longer is cut).
pub const MAX_ANSWERED_BY_CHARS: usize = 256;

/// `by` as recorded: control characters dropped, at most [`MAX_ANSWERED_BY_CHARS`].
pub fn answered_by(by: &str) -> String {
    by.chars()
        .filter(|c| !c.is_control())
        .take(MAX_ANSWERED_BY_CHARS)
        .collect()
}

/// `t` without its sub-microsecond part.
pub fn truncate_to_micros(t: OffsetDateTime) -> OffsetDateTime {
    let nanos = t.nanosecond();
    t.replace_nanosecond(nanos - nanos % 1_000)
        .expect("a nanosecond value rounded down stays in range")
}

impl Elicitation {
    /// A new pending elicitation, expiring `ttl` after `now`. A non-positive `ttl` yields an
    /// elicitation that is already expired, which no one can answer.
    pub fn new(
        id: ElicitationId,
        spec: ElicitationSpec,
        now: OffsetDateTime,
        ttl: Duration,
    ) -> Self {
        let created_at = truncate_to_micros(now);
        Elicitation {
            id,
            spec,
            status: ElicitationStatus::Pending,
            retries: 0,
            response: None,
            created_at,
            expires_at: truncate_to_micros(created_at.saturating_add(ttl)),
            responded_at: None,
            cancelled_at: None,
            cancel_reason: None,
            consumed_at: None,
            answered_by: None,
            note: None,
            edited_arguments: None,
        }
    }

    /// The elicitation's type.
    pub const fn kind(&self) -> ElicitationType {
        self.spec.kind()
    }

    /// The status as seen at `now`: a pending elicitation past its expiry is expired even
    /// before anything has recorded that.
    pub fn status_at(&self, now: OffsetDateTime) -> ElicitationStatus {
        if self.is_overdue(now) {
            ElicitationStatus::Expired
        } else {
            self.status
        }
    }

    fn is_overdue(&self, now: OffsetDateTime) -> bool {
        self.status == ElicitationStatus::Pending && now >= self.expires_at
    }

    /// Records that the elicitation expired, if it is pending and due. Returns whether it
    /// changed.
    pub fn expire(&mut self, now: OffsetDateTime) -> bool {
        if self.is_overdue(now) {
            self.status = ElicitationStatus::Expired;
            true
        } else {
            false
        }
    }

    /// Answers the elicitation with `payload`.
    ///
    /// An identical answer to an already recorded one is `AlreadyRecorded`; any other answer
    /// to a non-pending elicitation is an error. A pending elicitation past its expiry is
    /// first moved to `Expired` (a state change the caller must persist), then refused.
    pub fn respond(
        &mut self,
        payload: Value,
        now: OffsetDateTime,
    ) -> Result<RespondOutcome, TransitionError> {
        self.expire(now);
        let mut payload = payload;
        let note = crate::validate::take_note(self.spec.response(), &mut payload);
        match self.status {
            ElicitationStatus::Pending => {}
            // The same answer again (whatever its note: the first one's stands).
            ElicitationStatus::Responded if self.response.as_ref() == Some(&payload) => {
                return Ok(RespondOutcome::AlreadyRecorded);
            }
            ElicitationStatus::Responded => {
                return Err(TransitionError::ConflictingResponse { id: self.id });
            }
            status => {
                return Err(TransitionError::NotPending {
                    id: self.id,
                    status,
                });
            }
        }
        match crate::validate::with_note(validate_response(self.spec.response(), &payload), note) {
            Ok(note) => {
                self.status = ElicitationStatus::Responded;
                self.response = Some(payload);
                self.note = note;
                self.responded_at = Some(truncate_to_micros(now));
                Ok(RespondOutcome::Recorded)
            }
            Err(errors) => {
                self.retries = self.retries.saturating_add(1);
                if self.retries >= MAX_RETRIES {
                    self.status = ElicitationStatus::ValidationFailed;
                    Ok(RespondOutcome::ValidationFailed { errors })
                } else {
                    Ok(RespondOutcome::Invalid {
                        errors,
                        retries_left: MAX_RETRIES - self.retries,
                    })
                }
            }
        }
    }

    /// Cancels a pending elicitation.
    pub fn cancel(
        &mut self,
        reason: CancelReason,
        now: OffsetDateTime,
    ) -> Result<(), TransitionError> {
        self.expire(now);
        if self.status != ElicitationStatus::Pending {
            return Err(TransitionError::NotPending {
                id: self.id,
                status: self.status,
            });
        }
        self.status = ElicitationStatus::Cancelled;
        self.cancelled_at = Some(truncate_to_micros(now));
        self.cancel_reason = Some(reason);
        Ok(())
    }

    /// Applies an MCP answer (see [`Answer::from_action`]).
    pub fn apply(
        &mut self,
        answer: Answer,
        now: OffsetDateTime,
    ) -> Result<AnswerOutcome, TransitionError> {
        match answer {
            Answer::Respond(payload) => self.respond(payload, now).map(AnswerOutcome::Responded),
            Answer::Cancel(reason) => self
                .cancel(reason, now)
                .map(|()| AnswerOutcome::Cancelled(reason)),
        }
    }

    /// For a confirmation: `Some(true)` approved, `Some(false)` declined, `None` not answered
    /// (pending, cancelled, expired or failed). Always `None` for other types.
    pub fn confirmation_state(&self) -> Option<bool> {
        if self.kind() != ElicitationType::Confirmation
            || self.status != ElicitationStatus::Responded
        {
            return None;
        }
        self.response.as_ref()?.get(CONFIRMED)?.as_bool()
    }

    /// Uses an approved confirmation to authorise one call. Succeeds once, only before
    /// `expires_at`.
    pub fn consume(&mut self, now: OffsetDateTime) -> Result<(), TransitionError> {
        let id = self.id;
        if self.kind() != ElicitationType::Confirmation {
            return Err(TransitionError::NotAConfirmation {
                id,
                kind: self.kind(),
            });
        }
        if self.confirmation_state() != Some(true) {
            return Err(TransitionError::NotApproved { id });
        }
        if self.consumed_at.is_some() {
            return Err(TransitionError::AlreadyConsumed { id });
        }
        if now >= self.expires_at {
            return Err(TransitionError::Expired { id });
        }
        self.consumed_at = Some(truncate_to_micros(now));
        Ok(())
    }
}

/// The `action` of an MCP `ElicitResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElicitAction {
    /// The person submitted the form.
    Accept,
    /// The person explicitly refused.
    Decline,
    /// The person dismissed the prompt without choosing.
    Cancel,
}

/// A transition requested by an MCP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Record this payload as the response.
    Respond(Value),
    /// Cancel with this reason.
    Cancel(CancelReason),
}

impl Answer {
    /// Maps an MCP action onto the state machine: `accept` answers with the content (an
    /// absent content is an empty object, which fails validation); `decline` answers a
    /// confirmation with `{"confirmed": false}` and cancels any other type as `Declined`;
    /// `cancel` cancels as `CancelledByPerson`.
    pub fn from_action(
        kind: ElicitationType,
        action: ElicitAction,
        content: Option<Value>,
    ) -> Answer {
        match action {
            ElicitAction::Accept => {
                Answer::Respond(content.unwrap_or_else(|| Value::Object(Default::default())))
            }
            ElicitAction::Decline if kind == ElicitationType::Confirmation => {
                Answer::Respond(serde_json::json!({ CONFIRMED: false }))
            }
            ElicitAction::Decline => Answer::Cancel(CancelReason::Declined),
            ElicitAction::Cancel => Answer::Cancel(CancelReason::CancelledByPerson),
        }
    }
}

/// What applying an [`Answer`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerOutcome {
    /// The answer was a response; this is how it went.
    Responded(RespondOutcome),
    /// The elicitation is now cancelled for this reason.
    Cancelled(CancelReason),
}

#[cfg(test)]
mod tests;
