//! The REST API's views of an elicitation, a grant and a definition change, shared by the API
//! and the approvals page: one shape for both ([`ElicitationView`] is typed, so the page
//! reads its fields rather than the JSON's keys).

use elicitation_core::{
    CancelReason, ElicitationId, ElicitationStatus, ElicitationType, ResponseSpec, response_schema,
};
use elicitation_store::StoredElicitation;
use serde::Serialize;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

/// The API's view of an elicitation: what was asked, for which call, and where it stands.
/// The REST API serialises it; the approvals page renders its fields.
#[derive(Debug, Clone, Serialize)]
pub struct ElicitationView {
    /// The elicitation.
    pub id: ElicitationId,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: ElicitationType,
    /// Where it stands.
    pub status: ElicitationStatus,
    /// What is asked.
    pub message: String,
    /// The answer's type and bounds.
    pub response_spec: ResponseSpec,
    /// The answer's JSON Schema.
    pub response_schema: Value,
    /// The answer, once recorded.
    pub response: Option<Value>,
    /// Invalid answers so far.
    pub retries: u8,
    /// When it was asked (RFC 3339).
    pub created_at: Option<String>,
    /// When it expires.
    pub expires_at: Option<String>,
    /// When it was answered.
    pub responded_at: Option<String>,
    /// Who answered.
    pub answered_by: Option<String>,
    /// The note of a decline.
    pub note: Option<String>,
    /// When it was cancelled.
    pub cancelled_at: Option<String>,
    /// Why.
    pub cancel_reason: Option<CancelReason>,
    /// When its confirmation was used.
    pub consumed_at: Option<String>,
    /// For a confirmation of a tool call: the qualified tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The virtual server (`[[servers]]`) the call was held on (absent: the gateway's own
    /// endpoint).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The call's arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Who answers it besides, or instead of, the caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalView>,
}

/// The approver rule of a confirmation: the group and whether the caller may answer too.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalView {
    /// The group.
    pub group: String,
    /// `also`, `only` or `four_eyes` (the rule's label).
    pub mode: &'static str,
    /// Distinct people who must approve (absent: one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvers_needed: Option<usize>,
    /// Further groups of each of which one approver must count (absent: none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_from: Vec<String>,
    /// The approvals counted so far toward the quorum, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<VoteView>,
    /// Groups of which nobody approved yet, where one of each is needed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
}

/// One approval counted toward a quorum: who (as they were labelled when answering) and when.
#[derive(Debug, Clone, Serialize)]
pub struct VoteView {
    /// Who approved.
    pub by: String,
    /// When (RFC 3339).
    pub at: Option<String>,
}

impl ApprovalView {
    /// The view of `approval` with the `votes` counted so far.
    pub fn of(approval: &elicitation_store::Approval, votes: &[elicitation_store::Vote]) -> Self {
        let plural = approval.quorum.is_plural();
        ApprovalView {
            group: approval.group.clone(),
            mode: approval.mode.label(),
            approvers_needed: plural.then(|| approval.quorum.needed()),
            also_from: approval.quorum.also.clone(),
            approvals: votes
                .iter()
                .map(|v| VoteView {
                    by: v.by.clone().unwrap_or_else(|| v.subject.clone()),
                    at: rfc3339(Some(v.at)),
                })
                .collect(),
            waiting_for: if plural {
                approval
                    .missing_groups(votes)
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            } else {
                Vec::new()
            },
        }
    }
}

impl ElicitationView {
    /// The view of `stored`.
    pub fn of(stored: &StoredElicitation) -> Self {
        let e = &stored.elicitation;
        let call = stored.call.as_ref();
        ElicitationView {
            id: e.id,
            kind: e.kind(),
            status: e.status,
            message: e.spec.message().to_owned(),
            response_spec: e.spec.response().clone(),
            response_schema: response_schema(e.spec.response()),
            response: e.response.clone(),
            retries: e.retries,
            created_at: rfc3339(Some(e.created_at)),
            expires_at: rfc3339(Some(e.expires_at)),
            responded_at: rfc3339(e.responded_at),
            answered_by: e.answered_by.clone(),
            note: e.note.clone(),
            cancelled_at: rfc3339(e.cancelled_at),
            cancel_reason: e.cancel_reason,
            consumed_at: rfc3339(e.consumed_at),
            tool: call.map(|c| c.tool.clone()),
            server: call.and_then(|c| c.server.clone()),
            arguments: call.map(|c| c.arguments.clone()),
            approval: call.and_then(|c| c.approval.as_ref().map(|a| ApprovalView::of(a, &c.votes))),
        }
    }

    /// Its JSON, as the REST API answers it.
    pub fn json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The REST API's JSON of `stored` ([`ElicitationView`]).
pub fn view(stored: &StoredElicitation) -> Value {
    ElicitationView::of(stored).json()
}

fn rfc3339(t: Option<time::OffsetDateTime>) -> Option<String> {
    t.and_then(|t| t.format(&Rfc3339).ok())
}

fn time(t: Option<time::OffsetDateTime>) -> Value {
    t.and_then(|t| t.format(&Rfc3339).ok())
        .map_or(Value::Null, Value::String)
}

/// The API's view of a standing grant (shared by the API and the approvals page): whose
/// calls it covers, which, for how long and how many, and who made it. Never the argument
/// digest (it is sealed with the arguments).
pub fn grant_view(grant: &elicitation_store::Grant, now: time::OffsetDateTime) -> Value {
    let mut out = json!({
        "id": grant.id.to_string(),
        "elicitation_id": grant.elicitation,
        "for": {"subject": grant.caller.subject_id(), "tenant": grant.caller.tenant_id()},
        "tool": grant.tool,
        "scope": grant.scope.label(),
        "when": grant.when,
        "status": grant.status_at(now),
        "uses": grant.uses,
        "max_uses": grant.max_uses,
        "uses_left": grant.uses_left(),
        "created_at": time(Some(grant.created_at)),
        "expires_at": time(Some(grant.expires_at)),
        "granted_by": grant.granted_by,
        "revoked_at": time(grant.revoked_at),
        "revoked_by": grant.revoked_by,
    });
    if let (Some(approval), Some(map)) = (&grant.approval, out.as_object_mut()) {
        map.insert(
            "approval".into(),
            json!({"group": approval.group, "mode": approval.mode.label()}),
        );
    }
    out
}

/// The API's view of a delegation (shared by the API and the approvals page): who handed
/// their approvals to whom, which groups, for which window, and where it stands.
pub fn delegation_view(
    delegation: &elicitation_store::Delegation,
    now: time::OffsetDateTime,
) -> Value {
    let person =
        |c: &elicitation_store::Caller| json!({"subject": c.subject_id(), "tenant": c.tenant_id()});
    json!({
        "id": delegation.id.to_string(),
        "from": person(&delegation.from),
        "to": person(&delegation.to),
        "groups": delegation.groups,
        "status": delegation.status_at(now),
        "starts_at": time(Some(delegation.starts_at)),
        "ends_at": time(Some(delegation.ends_at)),
        "created_at": time(Some(delegation.created_at)),
        "revoked_at": time(delegation.revoked_at),
        "revoked_by": delegation.revoked_by,
    })
}

/// The API's view of a tool-definition change: which definition, where it stands and why,
/// the pinned definition (`null` for a first sight) and the proposed one, both as data.
pub fn change_view(change: &elicitation_store::DefinitionChange) -> Value {
    json!({
        "id": change.id.to_string(),
        "module": change.key.module,
        "kind": change.key.kind.label(),
        "name": change.key.name,
        "status": change.status.label(),
        "reasons": change.reasons,
        "pinned": change.pinned.as_ref().map(|p| p.definition.clone()),
        "pinned_digest": change.pinned.as_ref().map(|p| p.digest.to_string()),
        "pinned_version": change.pinned.as_ref().map(|p| p.version),
        "proposed": change.proposed,
        "proposed_digest": change.proposed_digest.to_string(),
        "seen_at": time(Some(change.seen_at)),
        "decided_at": time(change.decided_at),
        "decided_by": change.decided_by,
    })
}
