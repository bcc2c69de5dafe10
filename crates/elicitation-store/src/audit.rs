//! The audit trail's vocabulary — [`AuditEvent`] and [`RejectReason`], whose labels are the
//! values the database stores (the migration's `CHECK` list; a test holds them together) —
//! and lifecycle events as structured tracing events (target `audit`). Never payloads.

use elicitation_core::{CancelReason, ElicitationId, ElicitationType};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

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
    /// One approval of a call that needs several was counted; the call still waits for
    /// the others (`detail.approvals`, `detail.needed`, `detail.answered_by`).
    ElicitationApprovalCounted,
    /// A person handed their approvals to another for a window (`detail`: both names, the
    /// window).
    DelegationCreated,
    /// A delegation was ended early, by either of its two people (`detail.revoked_by`).
    DelegationRevoked,
    /// An elicitation still waiting was told again to the people told at once (an approver
    /// rule's `remind_after`; `detail.sinks`, `detail.waited_minutes`).
    ElicitationReminded,
    /// An elicitation still waiting was told to a further group (an approver rule's
    /// `escalate_after`; `detail.to`, `detail.sinks`, `detail.waited_minutes`).
    ElicitationEscalated,
}

impl AuditEvent {
    /// Every event, in the migration's order.
    pub const ALL: [AuditEvent; 20] = [
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
        AuditEvent::ElicitationApprovalCounted,
        AuditEvent::DelegationCreated,
        AuditEvent::DelegationRevoked,
        AuditEvent::ElicitationReminded,
        AuditEvent::ElicitationEscalated,
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
            AuditEvent::ElicitationApprovalCounted => "elicitation_approval_counted",
            AuditEvent::DelegationCreated => "delegation_created",
            AuditEvent::DelegationRevoked => "delegation_revoked",
            AuditEvent::ElicitationReminded => "elicitation_reminded",
            AuditEvent::ElicitationEscalated => "elicitation_escalated",
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
    /// The tool's module runs as each caller's own account, and the caller's is not
    /// connected.
    AccountNotConnected,
    /// The call would pass a quota or budget (`[[quotas]]`).
    QuotaExceeded,
}

impl RejectReason {
    /// Every reason.
    pub const ALL: [RejectReason; 12] = [
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
        RejectReason::AccountNotConnected,
        RejectReason::QuotaExceeded,
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
            RejectReason::AccountNotConnected => "account_not_connected",
            RejectReason::QuotaExceeded => "quota_exceeded",
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
    /// A gated call forwarded earlier came back, as this says, sent with credentials of
    /// this kind (`detail.credential`; never the credential itself).
    Completed(CallCompletion, Option<&'static str>),
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
    /// The virtual server (`[[servers]]`) the call was made on (`detail.server`); `None` for
    /// the gateway's own endpoint.
    pub server: Option<String>,
}

impl GateRecord {
    /// The audit event.
    pub const fn event(self) -> AuditEvent {
        match self {
            GateRecord::Held => AuditEvent::ToolCallHeld,
            GateRecord::Rejected(_) => AuditEvent::ToolCallRejected,
            GateRecord::Shadowed => AuditEvent::ToolCallShadowed,
            GateRecord::Completed(..) => AuditEvent::ToolCallCompleted,
        }
    }

    /// The refusal's reason, if it is one.
    pub const fn reason(self) -> Option<RejectReason> {
        match self {
            GateRecord::Held | GateRecord::Shadowed | GateRecord::Completed(..) => None,
            GateRecord::Rejected(reason) => Some(reason),
        }
    }
}

/// The `detail` of a gate decision's row: the refusal's reason, the deciding rule, the
/// policy's digest and the virtual server, each left out when there is none.
pub(crate) fn gate_detail(record: GateRecord, policy: &PolicyRef) -> serde_json::Value {
    let mut detail = serde_json::Map::new();
    if let Some(reason) = record.reason() {
        detail.insert("reason".into(), reason.label().into());
    }
    if let GateRecord::Completed(outcome, credential) = record {
        detail.insert("outcome".into(), outcome.label().into());
        if let Some(kind) = credential {
            detail.insert("credential".into(), kind.into());
        }
    }
    if let Some(rule) = policy.rule {
        detail.insert("rule".into(), rule.into());
    }
    if let Some(digest) = &policy.policy {
        detail.insert("policy".into(), digest.clone().into());
    }
    if let Some(server) = &policy.server {
        detail.insert("server".into(), server.clone().into());
    }
    serde_json::Value::Object(detail)
}

/// The `detail` of a new hold (`tool_call_held` with its confirmation): the deciding rule and
/// policy, the digest of the call's arguments (`call_digest`, the one the confirmation is
/// bound to) and of the message the person is shown (`message_digest`, SHA-256 of its text):
/// what a reviewer matches a record against without the arguments themselves; and the
/// OAuth client the caller asked through (`client`), when its token said.
pub(crate) fn held_detail(
    policy: &PolicyRef,
    message: &str,
    call_digest: Option<&gating_core::CallDigest>,
    client: Option<&str>,
) -> serde_json::Value {
    let mut detail = gate_detail(GateRecord::Held, policy);
    if let serde_json::Value::Object(map) = &mut detail {
        if let Some(client) = client {
            map.insert("client".into(), client.into());
        }
        if let Some(digest) = call_digest {
            map.insert("call_digest".into(), digest.to_string().into());
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, message.as_bytes());
        let hex: String = mcp_random::hex(digest.as_ref());
        map.insert("message_digest".into(), hex.into());
    }
    detail
}

/// A lifecycle event of an elicitation.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Requested(ElicitationType),
    Responded,
    Cancelled(CancelReason),
    ValidationFailed,
    Timeout,
    /// An approval counted toward a quorum, not the last.
    Counted,
}

impl Event {
    pub(crate) const fn event(self) -> AuditEvent {
        match self {
            Event::Requested(_) => AuditEvent::ElicitationRequested,
            Event::Responded => AuditEvent::ElicitationResponded,
            Event::Cancelled(_) => AuditEvent::ElicitationCancelled,
            Event::ValidationFailed => AuditEvent::ElicitationValidationFailed,
            Event::Timeout => AuditEvent::ElicitationTimeout,
            Event::Counted => AuditEvent::ElicitationApprovalCounted,
        }
    }

    fn name(self) -> &'static str {
        self.event().label()
    }

    /// Its `detail` as far as the event itself says (an answer's adds who answered).
    pub(crate) fn detail(self) -> serde_json::Map<String, serde_json::Value> {
        let mut detail = serde_json::Map::new();
        match self {
            Event::Requested(kind) => {
                detail.insert("type".into(), kind.as_str().into());
            }
            Event::Cancelled(reason) => {
                detail.insert("reason".into(), reason.as_str().into());
            }
            Event::Responded | Event::ValidationFailed | Event::Timeout | Event::Counted => {}
        }
        detail
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

/// One event of the audit trail as a reader gets it (`GET /v1/audit`, `mcp-gateway audit
/// export`): the same fields from either store.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Its position in the trail (ids grow; on PostgreSQL the row's id).
    pub id: i64,
    /// When it happened.
    pub at: OffsetDateTime,
    /// The event's label ([`AuditEvent::label`]).
    pub event: String,
    /// Whose call or elicitation it is about (the subject).
    pub caller: String,
    /// The caller's tenant.
    pub tenant: Option<String>,
    /// The elicitation it is about.
    pub elicitation_id: Option<String>,
    /// The tool it is about (qualified).
    pub tool: Option<String>,
    /// The event's detail (never arguments or payloads).
    pub detail: serde_json::Value,
    /// Whether its row is sealed into the chain (PostgreSQL; always false in memory).
    pub sealed: bool,
}

impl AuditEntry {
    /// The JSON object written for it, a line each in an export.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "at": self.at.format(&Rfc3339).unwrap_or_default(),
            "event": self.event,
            "caller": self.caller,
            "tenant": self.tenant,
            "elicitation_id": self.elicitation_id,
            "tool": self.tool,
            "detail": self.detail,
            "sealed": self.sealed,
        })
    }

    /// Whether its outcome is `outcome` ([`AuditQuery::outcome`]).
    fn has_outcome(&self, outcome: &str) -> bool {
        self.event.strip_prefix("tool_call_") == Some(outcome)
            || ["outcome", "reason"]
                .iter()
                .any(|key| self.detail.get(key).and_then(|v| v.as_str()) == Some(outcome))
    }
}

/// Every value [`AuditQuery::outcome`] takes: what the gate did (`held`, `forwarded`,
/// `rejected`, `shadowed`, `completed`), how a forwarded call came back (`ok`, `tool_error`,
/// `module_failed`), and why it was refused ([`RejectReason`]'s labels).
pub fn audit_outcomes() -> impl Iterator<Item = &'static str> {
    ["held", "forwarded", "rejected", "shadowed", "completed"]
        .into_iter()
        .chain([
            CallCompletion::Ok.label(),
            CallCompletion::ToolError.label(),
            CallCompletion::ModuleFailed.label(),
        ])
        .chain(RejectReason::ALL.iter().map(|r| r.label()))
}

/// Which direction a page of the trail is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuditOrder {
    /// Oldest first, after [`AuditQuery::cursor`] (an export's order).
    #[default]
    Oldest,
    /// Newest first, before [`AuditQuery::cursor`] (a view's).
    Newest,
}

/// What a reader asks of the audit trail. Filters combine with AND; each left out matches
/// everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Events at or after.
    pub since: Option<OffsetDateTime>,
    /// Events before.
    pub until: Option<OffsetDateTime>,
    /// The tool: exact, or a prefix ending in `*` (`fs__*`).
    pub tool: Option<String>,
    /// The caller's subject, exact.
    pub caller: Option<String>,
    /// The outcome (one of [`audit_outcomes`]): the event `tool_call_<outcome>`, or a
    /// `detail.outcome` or `detail.reason` of that value.
    pub outcome: Option<String>,
    /// The order, and which side of [`Self::cursor`] the page starts.
    pub order: AuditOrder,
    /// The id the page continues from (exclusive): the previous page's `next`.
    pub cursor: Option<i64>,
    /// Most events in the page (1 to [`crate::MAX_LIST_LIMIT`]).
    pub limit: usize,
}

impl AuditQuery {
    /// The tool filter as SQL's arguments: the name or prefix, and whether it is a prefix.
    pub(crate) fn tool_pattern(&self) -> (Option<&str>, bool) {
        match self.tool.as_deref() {
            Some(tool) => match tool.strip_suffix('*') {
                Some(prefix) => (Some(prefix), true),
                None => (Some(tool), false),
            },
            None => (None, false),
        }
    }

    /// Whether `entry` passes every filter (the cursor and the reader's tenant aside).
    pub(crate) fn matches(&self, entry: &AuditEntry) -> bool {
        let (tool, prefix) = self.tool_pattern();
        self.since.is_none_or(|since| entry.at >= since)
            && self.until.is_none_or(|until| entry.at < until)
            && tool.is_none_or(|t| match entry.tool.as_deref() {
                Some(name) if prefix => name.starts_with(t),
                Some(name) => name == t,
                None => false,
            })
            && self.caller.as_deref().is_none_or(|c| entry.caller == c)
            && self.outcome.as_deref().is_none_or(|o| entry.has_outcome(o))
    }
}

/// What a store's trail holds, said with every page so a reader knows what it is not seeing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditHolds {
    /// The whole trail (PostgreSQL's table).
    Everything,
    /// The most recent events in memory: at most `capacity`; `dropped` older ones are gone.
    Recent {
        /// Most events held.
        capacity: usize,
        /// Events dropped to make room since the start.
        dropped: u64,
    },
}

impl AuditHolds {
    /// As JSON: `{"store": "postgres"}` or `{"store": "memory", "capacity", "dropped"}`.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            AuditHolds::Everything => serde_json::json!({"store": "postgres"}),
            AuditHolds::Recent { capacity, dropped } => {
                serde_json::json!({"store": "memory", "capacity": capacity, "dropped": dropped})
            }
        }
    }
}

/// One page of the trail.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditPage {
    /// The events, in the order asked for.
    pub entries: Vec<AuditEntry>,
    /// The cursor of the next page, if the page was full.
    pub next: Option<i64>,
    /// What the trail holds.
    pub holds: AuditHolds,
}

impl AuditPage {
    /// A page of `entries` (at most `limit` were asked for) from a trail holding `holds`.
    pub(crate) fn of(entries: Vec<AuditEntry>, limit: usize, holds: AuditHolds) -> AuditPage {
        let next = (entries.len() >= limit)
            .then(|| entries.last().map(|e| e.id))
            .flatten();
        AuditPage {
            entries,
            next,
            holds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of `event IN (...)` in the latest migration that sets the audit table's
    /// event `CHECK`.
    fn check_list() -> Vec<String> {
        let migration = include_str!("../migrations/V27__delegations.sql");
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

    #[cfg(feature = "postgres")]
    #[test]
    fn every_event_the_sql_writes_is_an_audit_event() {
        let labels: Vec<&str> = AuditEvent::ALL.iter().map(|e| e.label()).collect();
        for statement in crate::postgres::sql::ALL {
            let mut rest = *statement;
            while let Some(at) = rest
                .find("'elicitation_")
                .or_else(|| rest.find("'tool_call_"))
                .or_else(|| rest.find("'delegation_"))
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
