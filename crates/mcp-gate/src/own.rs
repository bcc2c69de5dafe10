//! Tools an embedder serves itself, gated by the gateway's own steps: step one
//! ([`Gateway::classify_own`]), the settle step and the run with its audit record
//! ([`Gateway::run_own`], [`Gateway::resolve_own`]) are the ones a module's call goes through;
//! only what runs the call differs ([`OwnTool`] instead of the module). A person's answer
//! given in the caller's own client is recorded by [`Gateway::record_client_answer`], as the
//! server records one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use elicitation_core::{Answer, ElicitAction, ElicitationId, ElicitationType};
use mcp_upstream::ModuleError;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::CallToolParams;
use mcp_wire::tools::ElicitResult;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::GateError;
use crate::outcome::{CallOutcome, Classified, GatedCall};
use crate::{Gateway, timed};
use mcp_auth::Principal;

/// What runs a call of an embedder's own tool once the gate lets it through: the call as
/// the tool should see it (its own name, a person's edited arguments in place of the
/// agent's, without the gate's `confirmation_id`), answered with the tool's result as JSON.
pub trait OwnTool: Send + Sync {
    /// Runs the call. A JSON-RPC error the tool answers is [`ModuleError::Rpc`].
    fn run(
        &self,
        params: CallToolParams,
    ) -> Pin<Box<dyn Future<Output = Result<Box<RawValue>, ModuleError>> + Send + '_>>;
}

/// Where a call the gate lets through runs.
#[derive(Clone)]
pub(crate) enum Via<'a> {
    /// On its module, whose messages about the call go to the relay.
    Modules(Option<Arc<dyn mcp_upstream::Relay>>),
    /// In the embedder's own code.
    Own(&'a dyn OwnTool),
}

/// What a person's answer in their own client came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAnswer {
    /// Recorded (or refused by the store, which the settle step reads next).
    Answered,
    /// `cancel`: the person dismissed the question without choosing (a headless client
    /// answers so at once). Not recorded: the confirmation stays pending for the approvals
    /// surfaces, and the agent gets the held result.
    Dismissed,
}

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
