//! Answering an elicitation as a person: as its caller, or as a member of its approver
//! group.

use elicitation_core::ElicitationId;
use elicitation_store::StoreError;
use serde_json::Value;

use crate::error::GateError;
use mcp_auth::Principal;

/// Answers elicitation `id` as `principal`: as its caller, or — for another caller's
/// confirmation, or one its caller may not answer — as a member of its approver group (the
/// store holds the rule: group, four eyes). Returns whose elicitation it is, and the outcome.
pub async fn answer(
    store: &dyn elicitation_store::ElicitationStore,
    principal: &Principal,
    id: ElicitationId,
    payload: Value,
    answered_by: &str,
) -> Result<(elicitation_store::Caller, elicitation_core::RespondOutcome), GateError> {
    let own = store
        .respond_as(&principal.caller, id, payload.clone(), Some(answered_by))
        .await;
    match (own, principal.approver()) {
        (
            Err(StoreError::NotFound { .. } | StoreError::ApproverRequired { .. }),
            Some(approver),
        ) => Ok(store
            .approver_respond(&approver, id, payload, Some(answered_by))
            .await?),
        (own, _) => Ok((principal.caller.clone(), own?)),
    }
}
