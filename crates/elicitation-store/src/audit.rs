//! The audit trail's vocabulary — [`AuditEvent`] and [`RejectReason`], whose labels are the
//! values the database stores (the migration's `CHECK` list; a test holds them together) —
//! and lifecycle events as structured tracing events (target `audit`). Never payloads.

use elicitation_core::{CancelReason, ElicitationId, ElicitationType};

use crate::Caller;

/// An event of the audit trail. Its label is the `event` column's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditEvent {
    /// An elicitation was created.
    ElicitationRequested,
    /// It was answered validly.
    ElicitationResponded,
    /// It was cancelled.
    ElicitationCancelled,
    /// It failed validation for good.
    ElicitationValidationFailed,
    /// Nobody answered it in time.
    ElicitationTimeout,
    /// A gated call was held for a confirmation (a new one, or one still pending).
    ToolCallHeld,
    /// A call was forwarded to its module.
    ToolCallForwarded,
    /// The gate refused a call.
    ToolCallRejected,
    /// A `shadow` rule forwarded a call it would have held.
    ToolCallShadowed,
    /// A person made a standing grant with an approval.
    GrantCreated,
    /// A standing grant was revoked.
    GrantRevoked,
    /// A module listed a definition that is not its pin: withheld for a person.
    ToolDefinitionChanged,
    /// A person approved a changed definition: it is the pin now.
    ToolDefinitionApproved,
    /// A person rejected a changed definition: it stays withheld.
    ToolDefinitionRejected,
    /// A gated call forwarded earlier came back (`detail.outcome`: `ok`, `tool_error`,
    /// `module_failed`); a forward without one is visibly unfinished.
    ToolCallCompleted,
}

impl AuditEvent {
    /// Every event, in the migration's order.
    pub const ALL: [AuditEvent; 15] = [
        AuditEvent::ElicitationRequested,
        AuditEvent::ElicitationResponded,
        AuditEvent::ElicitationCancelled,
        AuditEvent::ElicitationValidationFailed,
        AuditEvent::ElicitationTimeout,
        AuditEvent::ToolCallHeld,
        AuditEvent::ToolCallForwarded,
        AuditEvent::ToolCallRejected,
        AuditEvent::ToolCallShadowed,
        AuditEvent::GrantCreated,
        AuditEvent::GrantRevoked,
        AuditEvent::ToolDefinitionChanged,
        AuditEvent::ToolDefinitionApproved,
        AuditEvent::ToolDefinitionRejected,
        AuditEvent::ToolCallCompleted,
    ];

    /// The stored value (also the tracing `event` field).
    pub const fn label(self) -> &'static str {
        match self {
            AuditEvent::ElicitationRequested => "elicitation_requested",
            AuditEvent::ElicitationResponded => "elicitation_responded",
            AuditEvent::ElicitationCancelled => "elicitation_cancelled",
            AuditEvent::ElicitationValidationFailed => "elicitation_validation_failed",
            AuditEvent::ElicitationTimeout => "elicitation_timeout",
            AuditEvent::ToolCallHeld => "tool_call_held",
            AuditEvent::ToolCallForwarded => "tool_call_forwarded",
            AuditEvent::ToolCallRejected => "tool_call_rejected",
            AuditEvent::ToolCallShadowed => "tool_call_shadowed",
            AuditEvent::GrantCreated => "grant_created",
            AuditEvent::GrantRevoked => "grant_revoked",
            AuditEvent::ToolDefinitionChanged => "tool_definition_changed",
            AuditEvent::ToolDefinitionApproved => "tool_definition_approved",
            AuditEvent::ToolDefinitionRejected => "tool_definition_rejected",
            AuditEvent::ToolCallCompleted => "tool_call_completed",
        }
    }
}

/// Why the gate refused a call (`detail.reason` of a `tool_call_rejected` row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The operator's policy denies the tool.
    PolicyDenied,
    /// The person declined.
    UserRejected,
    /// The confirmation was cancelled.
    ConfirmationCancelled,
    /// The confirmation expired unanswered.
    ConfirmationExpired,
    /// The caller has as many confirmations pending as allowed.
    PendingLimit,
    /// The caller holds as many confirmations as the store keeps for one caller.
    CallerFull,
    /// The store failed or did not answer: the gate failed closed.
    StoreError,
    /// The store keeps confirmations only for authenticated callers.
    NoAuthenticatedCaller,
    /// The caller made more calls, or asked for more confirmations, than its rate allows.
    RateLimited,
    /// The tool's definition is not its pin: it waits for a person's review.
    ToolQuarantined,
}

impl RejectReason {
    /// Every reason.
    pub const ALL: [RejectReason; 10] = [
        RejectReason::PolicyDenied,
        RejectReason::UserRejected,
        RejectReason::ConfirmationCancelled,
        RejectReason::ConfirmationExpired,
        RejectReason::PendingLimit,
        RejectReason::CallerFull,
        RejectReason::StoreError,
        RejectReason::NoAuthenticatedCaller,
        RejectReason::RateLimited,
        RejectReason::ToolQuarantined,
    ];

    /// The stored value.
    pub const fn label(self) -> &'static str {
        match self {
            RejectReason::PolicyDenied => "policy_denied",
            RejectReason::UserRejected => "user_rejected",
            RejectReason::ConfirmationCancelled => "confirmation_cancelled",
            RejectReason::ConfirmationExpired => "confirmation_expired",
            RejectReason::PendingLimit => "pending_limit",
            RejectReason::CallerFull => "caller_full",
            RejectReason::StoreError => "store_error",
            RejectReason::NoAuthenticatedCaller => "no_authenticated_caller",
            RejectReason::RateLimited => "rate_limited",
            RejectReason::ToolQuarantined => "tool_quarantined",
        }
    }
}

/// What the gate did with a call, for the store's audit trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateRecord {
    /// Held for a confirmation.
    Held,
    /// Refused.
    Rejected(RejectReason),
    /// Forwarded by a `shadow` rule that would have held it.
    Shadowed,
    /// A gated call forwarded earlier came back, as this says.
    Completed(CallCompletion),
}

/// How a forwarded call came back (`tool_call_completed`'s `detail.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallCompletion {
    /// A result.
    Ok,
    /// A result with `isError`: the tool reported a failure.
    ToolError,
    /// No result: the module failed, timed out or answered with an error.
    ModuleFailed,
}

impl CallCompletion {
    /// The stored label.
    pub const fn label(self) -> &'static str {
        match self {
            CallCompletion::Ok => "ok",
            CallCompletion::ToolError => "tool_error",
            CallCompletion::ModuleFailed => "module_failed",
        }
    }
}

/// Which rule of which policy made a gate decision (`detail.rule`, `detail.policy`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRef {
    /// The deciding rule's index in the policy (from 0); `None`: no rule matched and the
    /// tool's hints decided.
    pub rule: Option<usize>,
    /// The digest of the policy in force (`None`: not recorded, e.g. a store failure).
    pub policy: Option<String>,
}

impl GateRecord {
    /// The audit event.
    pub const fn event(self) -> AuditEvent {
        match self {
            GateRecord::Held => AuditEvent::ToolCallHeld,
            GateRecord::Rejected(_) => AuditEvent::ToolCallRejected,
            GateRecord::Shadowed => AuditEvent::ToolCallShadowed,
            GateRecord::Completed(_) => AuditEvent::ToolCallCompleted,
        }
    }

    /// The refusal's reason, if it is one.
    pub const fn reason(self) -> Option<RejectReason> {
        match self {
            GateRecord::Held | GateRecord::Shadowed | GateRecord::Completed(_) => None,
            GateRecord::Rejected(reason) => Some(reason),
        }
    }
}

/// The `detail` of a gate decision's row: the refusal's reason, the deciding rule and the
/// policy's digest, each left out when there is none.
pub(crate) fn gate_detail(record: GateRecord, policy: &PolicyRef) -> serde_json::Value {
    let mut detail = serde_json::Map::new();
    if let Some(reason) = record.reason() {
        detail.insert("reason".into(), reason.label().into());
    }
    if let GateRecord::Completed(outcome) = record {
        detail.insert("outcome".into(), outcome.label().into());
    }
    if let Some(rule) = policy.rule {
        detail.insert("rule".into(), rule.into());
    }
    if let Some(digest) = &policy.policy {
        detail.insert("policy".into(), digest.clone().into());
    }
    serde_json::Value::Object(detail)
}

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
            Event::Requested(_) => AuditEvent::ElicitationRequested,
            Event::Responded => AuditEvent::ElicitationResponded,
            Event::Cancelled(_) => AuditEvent::ElicitationCancelled,
            Event::ValidationFailed => AuditEvent::ElicitationValidationFailed,
            Event::Timeout => AuditEvent::ElicitationTimeout,
        }
        .label()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of `event IN (...)` in the latest migration that sets the audit table's
    /// event `CHECK`.
    fn check_list() -> Vec<String> {
        let migration = include_str!("../../../migrations/V17__audit_chain.sql");
        let start = migration
            .find("CHECK (event IN (")
            .expect("the audit table's event CHECK");
        let list = &migration[start..];
        let list = &list[list.find("IN (").unwrap_or(0) + 4..list.find("))").unwrap_or(0)];
        list.split(',')
            .map(|v| v.trim().trim_matches('\'').to_owned())
            .collect()
    }

    #[test]
    fn audit_event_labels_are_exactly_the_migrations_check_list() {
        let labels: Vec<String> = AuditEvent::ALL
            .iter()
            .map(|e| e.label().to_owned())
            .collect();
        assert_eq!(labels, check_list());
    }

    #[test]
    fn every_event_the_sql_writes_is_an_audit_event() {
        let labels: Vec<&str> = AuditEvent::ALL.iter().map(|e| e.label()).collect();
        for statement in crate::postgres::sql::ALL {
            let mut rest = *statement;
            while let Some(at) = rest
                .find("'elicitation_")
                .or_else(|| rest.find("'tool_call_"))
            {
                let value = &rest[at + 1..];
                let end = value.find('\'').unwrap_or(value.len());
                assert!(
                    labels.contains(&&value[..end]),
                    "{} in {statement}",
                    &value[..end]
                );
                rest = &value[end..];
            }
        }
    }

    #[test]
    fn reject_reasons_have_distinct_snake_case_labels() {
        let mut labels: Vec<&str> = RejectReason::ALL.iter().map(|r| r.label()).collect();
        assert!(
            labels
                .iter()
                .all(|l| l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        );
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), RejectReason::ALL.len());
    }
}
