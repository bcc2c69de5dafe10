//! Lifecycle audit events as structured tracing events (target `audit`). Never payloads.

use elicitation_core::{CancelReason, ElicitationId, ElicitationType};

use crate::Caller;

/// A lifecycle event of an elicitation.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Requested(ElicitationType),
    Responded,
    Cancelled(CancelReason),
    ValidationFailed,
    Timeout,
}

impl Event {
    fn name(self) -> &'static str {
        match self {
            Event::Requested(_) => "elicitation_requested",
            Event::Responded => "elicitation_responded",
            Event::Cancelled(_) => "elicitation_cancelled",
            Event::ValidationFailed => "elicitation_validation_failed",
            Event::Timeout => "elicitation_timeout",
        }
    }
}

pub(crate) fn emit(event: Event, caller: &Caller, id: ElicitationId, tool: Option<&str>) {
    let reason = match event {
        Event::Cancelled(reason) => Some(reason.as_str()),
        _ => None,
    };
    let kind = match event {
        Event::Requested(kind) => Some(kind.as_str()),
        _ => None,
    };
    tracing::info!(
        target: "audit",
        event = event.name(),
        subject = caller.subject_id(),
        tenant = caller.tenant_id(),
        elicitation_id = %id,
        tool,
        kind,
        reason,
    );
}
