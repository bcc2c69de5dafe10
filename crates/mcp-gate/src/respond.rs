//! Answering an elicitation as a person: as its caller, as a member of its approver group,
//! or for someone who handed their approvals to them (a delegation).

use elicitation_core::ElicitationId;
use elicitation_store::{Caller, Delegation, StoreError};
use serde_json::Value;

use crate::error::GateError;
use mcp_auth::Principal;

/// Answers elicitation `id` as `principal`: as its caller, or — for another caller's
/// confirmation, or one its caller may not answer — as a member of its approver group (the
/// store holds the rule: group, four eyes). Returns whose elicitation it is, and the outcome.
/// (The gateway's surfaces answer through `Gateway::answer`, which also answers under the
/// delegations the person holds.)
pub async fn answer(
    store: &dyn elicitation_store::ElicitationStore,
    principal: &Principal,
    id: ElicitationId,
    payload: Value,
    answered_by: &str,
) -> Result<(Caller, elicitation_core::RespondOutcome), GateError> {
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

/// Whether a refusal of a person's own answer leaves a delegation to try.
pub(crate) fn may_try_delegations(refused: &StoreError) -> bool {
    matches!(
        refused,
        StoreError::NotFound { .. }
            | StoreError::ApproverRequired { .. }
            | StoreError::FourEyes { .. }
    )
}

/// Who answered, when a delegate answered: both names, the delegator's first (so a long
/// label cut to its stored length still says for whom).
pub(crate) fn answered_for(answered_by: &str, delegation: &Delegation) -> String {
    let from = &delegation.from;
    match from.tenant_id() {
        Some(tenant) => format!("for {} ({tenant}): {answered_by}", from.subject_id()),
        None => format!("for {}: {answered_by}", from.subject_id()),
    }
}
