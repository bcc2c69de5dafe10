//! The REST API's view of an elicitation, shared by the API and the approvals page: one
//! JSON shape for both.

use elicitation_core::response_schema;
use elicitation_store::StoredElicitation;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

/// The API's view of an elicitation: what was asked, for which call, and where it stands.
pub fn view(stored: &StoredElicitation) -> Value {
    let e = &stored.elicitation;
    let mut out = json!({
        "id": e.id,
        "type": e.kind(),
        "status": e.status,
        "message": e.spec.message(),
        "response_spec": e.spec.response(),
        "response_schema": response_schema(e.spec.response()),
        "response": e.response,
        "retries": e.retries,
        "created_at": time(Some(e.created_at)),
        "expires_at": time(Some(e.expires_at)),
        "responded_at": time(e.responded_at),
        "answered_by": e.answered_by,
        "note": e.note,
        "cancelled_at": time(e.cancelled_at),
        "cancel_reason": e.cancel_reason,
        "consumed_at": time(e.consumed_at),
    });
    if let (Some(call), Some(map)) = (&stored.call, out.as_object_mut()) {
        map.insert("tool".into(), json!(call.tool));
        map.insert("arguments".into(), call.arguments.clone());
        if let Some(approval) = &call.approval {
            map.insert(
                "approval".into(),
                json!({"group": approval.group, "mode": approval.mode.label()}),
            );
        }
    }
    out
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
