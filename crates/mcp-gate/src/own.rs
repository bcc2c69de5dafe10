//! Tools an embedder serves itself, gated by the gateway's own steps: step one
//! ([`Gateway::classify_own`]), the settle step and the run with its audit record
//! ([`Gateway::run_own`], [`Gateway::resolve_own`]) are the ones a module's call goes through;
//! only what runs the call differs ([`OwnTool`] instead of the module). A person's answer
//! given in the caller's own client is recorded by [`Gateway::record_client_answer`], as the
//! server records one.

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::{Answer, ElicitAction, ElicitationId, ElicitationType};
use mcp_upstream::registry::ToolEntry;
use mcp_wire::CallToolParams;
use mcp_wire::tools::ElicitResult;
use serde_json::Value;

use crate::error::GateError;
use crate::outcome::{CallOutcome, Classified, GatedCall};
use crate::own_tool::{ClientAnswer, OwnTool, Via};
use crate::{Gateway, timed};
use mcp_auth::Principal;

impl Gateway {
    /// Step one of the gate for a tool the embedder serves itself (its entry from
    /// [`ToolEntry::own`]): the same decisions as for a module's tool (rate, pin, policy,
    /// binding).
    pub async fn classify_own(
        &self,
        principal: &Principal,
        entry: Arc<ToolEntry>,
        params: CallToolParams,
    ) -> Result<Classified, GateError> {
        self.classify_entry(principal, entry, params).await
    }

    /// [`Gateway::run`] for a tool the embedder serves itself: denied, held, settled and
    /// audited as a module's call; a call that may run is run by `tool`.
    pub async fn run_own(
        &self,
        principal: &Principal,
        classified: Classified,
        tool: &dyn OwnTool,
    ) -> CallOutcome {
        self.run_via(principal, classified, Via::Own(tool)).await
    }

    /// [`Gateway::resolve`] for a tool the embedder serves itself: the settle step, then
    /// `tool` runs the call when it may.
    pub async fn resolve_own(
        &self,
        principal: &Principal,
        call: &GatedCall,
        confirmation_id: Option<ElicitationId>,
        tool: &dyn OwnTool,
    ) -> CallOutcome {
        let mut upstream = Duration::ZERO;
        self.resolve_timed(
            principal,
            call,
            confirmation_id,
            Via::Own(tool),
            &mut upstream,
        )
        .await
    }

    /// Records the answer a person gave in the caller's own client (an `ElicitResult`:
    /// `action`, `content`) to confirmation `id`, as the caller. A refusal by the store
    /// (answered elsewhere already, expired, not this caller's) is not an error here: the
    /// settle step reads the record next. Only a principal that may answer natively
    /// (`elicitations:respond`) should be asked.
    pub async fn record_client_answer(
        &self,
        principal: &Principal,
        id: ElicitationId,
        result: Value,
    ) -> ClientAnswer {
        let read = serde_json::from_value::<ElicitResult>(result)
            .ok()
            .and_then(|r| {
                let action = serde_json::from_value::<ElicitAction>(r.action).ok()?;
                Some((action, r.content))
            });
        let Some((action, content)) = read else {
            tracing::warn!(elicitation_id = %id, "an elicitation answer without a valid action; ignored");
            return ClientAnswer::Answered;
        };
        if action == ElicitAction::Cancel {
            tracing::info!(elicitation_id = %id, "the client dismissed the confirmation; it stays pending for a person");
            return ClientAnswer::Dismissed;
        }
        let answer = Answer::from_action(ElicitationType::Confirmation, action, content);
        let by = principal.answered_by(mcp_auth::AnsweredVia::Client);
        match timed(
            self.store
                .apply(&principal.caller, id, answer, Some(by.as_str())),
        )
        .await
        {
            Ok(_) => {}
            Err(e) => {
                tracing::info!(elicitation_id = %id, error = %e, "the client's answer was not recorded")
            }
        }
        ClientAnswer::Answered
    }
}
