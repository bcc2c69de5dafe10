//! Answering as a person who holds delegations, and handing one's approvals over: the
//! gateway's side of [`crate::respond`] and [`crate::delegate`].

use elicitation_core::ElicitationId;
use elicitation_store::{Approver, Caller, Delegation, StoreError};
use serde_json::Value;

use crate::Gateway;
use crate::delegate::delegation_terms;
use crate::error::GateError;
use crate::respond::{answer, answered_for, may_try_delegations};
use mcp_auth::Principal;

impl Gateway {
    /// Answers elicitation `id` as `principal` ([`answer`](fn@answer)), and where that is
    /// refused, under each delegation `principal` holds now, in turn: as the delegate, with
    /// the groups handed over, recorded as answered for the delegator. The store still holds
    /// every rule (never the delegator's own call where its caller may not answer, one person
    /// toward a quorum).
    pub async fn answer(
        &self,
        principal: &Principal,
        id: ElicitationId,
        payload: Value,
        answered_by: &str,
    ) -> Result<(Caller, elicitation_core::RespondOutcome), GateError> {
        let first = answer(
            self.store.as_ref(),
            principal,
            id,
            payload.clone(),
            answered_by,
        )
        .await;
        let refused = match first {
            Err(GateError::Store(e)) if may_try_delegations(&e) => e,
            other => return other,
        };
        for delegation in self.delegations.acting_for(&principal.caller).await? {
            let by = answered_for(answered_by, &delegation);
            match self
                .store
                .approver_respond(&delegation.approver(), id, payload.clone(), Some(&by))
                .await
            {
                Err(e) if may_try_delegations(&e) => continue,
                other => return Ok(other?),
            }
        }
        Err(refused.into())
    }

    /// The approvers `principal` answers as: itself with its own groups (if any), then each
    /// delegation it holds now.
    pub async fn approvers_of(
        &self,
        principal: &Principal,
    ) -> Result<Vec<(Approver, Option<Delegation>)>, GateError> {
        let mut all: Vec<(Approver, Option<Delegation>)> = principal
            .approver()
            .into_iter()
            .map(|a| (a, None))
            .collect();
        for delegation in self.delegations.acting_for(&principal.caller).await? {
            all.push((delegation.approver(), Some(delegation)));
        }
        Ok(all)
    }

    /// `principal` hands its own approver groups to another person for a window
    /// ([`delegation_terms`]); refused (422, saying why) without groups or with terms the
    /// store does not take.
    pub async fn delegate(
        &self,
        principal: &Principal,
        terms: &Value,
    ) -> Result<Delegation, GateError> {
        let refused = |why: String| GateError::Store(StoreError::AnswerRefused(why));
        let request = delegation_terms(terms, &principal.caller).map_err(refused)?;
        let from = principal
            .approver()
            .unwrap_or_else(|| Approver::new(principal.caller.clone(), Vec::new()));
        Ok(self.delegations.delegate(&from, request).await?)
    }
}
