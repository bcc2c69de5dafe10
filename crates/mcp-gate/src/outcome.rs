//! The values the pipeline passes around: a classified call, what became of it, what a
//! person's approval carries, and what the audit trail says of it.

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::Elicitation;
use elicitation_store::{CallBinding, GrantId, PolicyRef};
use gating_core::{ConfirmationMessage, Surfaces};
use mcp_upstream::registry::ToolEntry;
use mcp_wire::jsonrpc::ErrorObject;
use mcp_wire::{CallToolParams, ResultBody};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::GateError;

/// What became of a `tools/call`.
#[derive(Debug, Clone)]
pub enum CallOutcome {
    /// The call is answered by the gate with an in-band result.
    Done(Value),
    /// The call was forwarded: the module's result, as it sent it.
    Forwarded(Box<RawValue>),
    /// The module answered the forwarded call with a JSON-RPC error; it reaches the client
    /// with its code and `data` (`-32042`, URL elicitation required, among them).
    Upstream(ErrorObject),
    /// The tool's module runs as each caller's own account and this caller's is not
    /// connected: the person connects it on the approvals page (the service says where, as
    /// a URL elicitation for a client that takes one), then the agent calls again.
    NeedsAccount {
        /// The module.
        module: String,
        /// How the gate's texts name where a person connects it.
        surfaces: Arc<Surfaces>,
    },
    /// The call waits for a person to answer a (pending) confirmation. How to ask depends
    /// on the client: natively (MRTR or `elicitation/create` over SSE) or with the held
    /// result (`gating_core::held_result`).
    NeedsConfirmation(Box<PendingConfirmation>),
}

/// A confirmation a call waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingConfirmation {
    /// The pending confirmation.
    pub confirmation: Elicitation,
    /// Whether its message shows the arguments in full, so a person may approve it from the
    /// message alone (natively, in their client). If not, only the held result is used.
    pub askable_natively: bool,
    /// How the held result names where a person answers (the gate's [`Surfaces`]).
    pub surfaces: Arc<Surfaces>,
}

impl CallOutcome {
    /// The answer for a client that cannot be asked natively, as a tree (what a legacy
    /// client would see). The service writes [`CallOutcome::into_reply`] instead.
    pub fn into_result(self) -> Result<Value, GateError> {
        Ok(self.into_reply()?.for_client(false).into_value())
    }

    /// The answer for a client that cannot be asked natively: a pending confirmation
    /// becomes the held result; a module's result passes as it came; a module's JSON-RPC
    /// error is the client's error.
    pub fn into_reply(self) -> Result<ResultBody, GateError> {
        self.into_reply_with(|_| None)
    }

    /// [`CallOutcome::into_reply`], a held result naming also where a person approves its
    /// confirmation (`approve_at`, when the server knows its page's address).
    pub fn into_reply_with(
        self,
        approve_at: impl FnOnce(&Elicitation) -> Option<String>,
    ) -> Result<ResultBody, GateError> {
        match self {
            CallOutcome::Done(value) => Ok(ResultBody::Value(value)),
            CallOutcome::Forwarded(raw) => Ok(ResultBody::Raw(raw)),
            CallOutcome::Upstream(error) => Err(GateError::Upstream {
                code: error.code,
                message: error.message,
                data: error.data,
            }),
            CallOutcome::NeedsConfirmation(pending) => {
                let url = approve_at(&pending.confirmation);
                Ok(ResultBody::Value(gating_core::held_result_at(
                    &pending.confirmation,
                    &pending.surfaces,
                    url.as_deref(),
                )))
            }
            CallOutcome::NeedsAccount { module, surfaces } => Ok(ResultBody::Value(
                gating_core::account_required_result(&module, None, false, &surfaces),
            )),
        }
    }
}

/// What the settle step ([`Gateway::settle`](crate::Gateway::settle)) makes of a gated call.
/// A `Run` has consumed its approval (or a grant's use) already: dropping it burns it.
#[derive(Debug)]
#[must_use = "a Run has consumed its approval: run it, or the person's approval is lost"]
pub enum Settled {
    /// It may run now: the caller runs it (the gateway forwards it to its module) and
    /// records it as run.
    Run(Box<Run>),
    /// It waits for a person to answer this confirmation (new, or the same one still
    /// pending): ask natively, or return the held result.
    Held(Box<PendingConfirmation>),
    /// The gate answers instead, in band: declined, cancelled, expired, denied, a limit, or
    /// the store unavailable (fail closed). Nothing runs.
    Answer(Value),
}

/// A settled call that may run.
#[derive(Debug)]
pub struct Run {
    /// The call to run: the client's, with a person's edited arguments in place of the
    /// agent's when they approved others.
    pub params: CallToolParams,
    /// What lets it run (consumed or used already: it runs once).
    pub by: RunBy,
    /// The arguments a person approved instead of the agent's, if they edited them: the
    /// agent is told (`told_of_edit`).
    pub edited: Option<Value>,
}

/// What lets a settled call run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunBy {
    /// A person's approval of exactly this call, consumed by the settle step.
    Confirmation(elicitation_core::ElicitationId),
    /// One use of a standing grant, taken by the settle step.
    Grant(GrantId),
}

/// A call the gate holds for a person's confirmation, classified once: whoever asks the
/// person (the held result, MRTR, an SSE stream) keeps it across the exchange and resolves
/// it with the confirmation's id.
#[derive(Debug, Clone)]
pub struct GatedCall {
    /// The tool.
    pub entry: Arc<ToolEntry>,
    /// The call as the client made it.
    pub params: CallToolParams,
    /// Its arguments, read (`{}` when absent).
    pub arguments: Value,
    /// What a confirmation of it must be bound to (tool and argument digest).
    pub binding: CallBinding,
    /// What the person is asked.
    pub message: ConfirmationMessage,
    /// Which rule of which policy gated it.
    pub policy: PolicyRef,
    /// How long its confirmation waits.
    pub ttl: time::Duration,
    /// Whether the rule that gated it lets a standing grant cover it (`grants = false` does
    /// not).
    pub grants: bool,
    /// Settled by the confirmation it names alone (a held call's task, run when its result
    /// is asked for): when that confirmation cannot be redeemed (used, expired, of another
    /// call) the call is refused, never covered by a grant nor asked about anew.
    pub only_named: bool,
}

/// What the gate makes of a call before anything is stored or forwarded.
#[derive(Debug)]
pub enum Classified {
    /// Not gated: forwarded as it is.
    Forward(Arc<ToolEntry>, Box<CallToolParams>),
    /// Denied by policy (the rule's reason, told to the agent, and which rule).
    Deny(Arc<ToolEntry>, Option<String>, PolicyRef),
    /// Forwarded by a `shadow` rule that would have held it.
    Shadow(Arc<ToolEntry>, Box<CallToolParams>, PolicyRef),
    /// Gated: forwarded only with a person's confirmation.
    Gated(Box<GatedCall>),
    /// The caller is over its call rate: refused, to try again after the wait.
    Limited(Arc<ToolEntry>, Duration),
    /// A permission-prompt module's `approve`: the agent host asks whether it may use one
    /// of its own tools (answered by [`Gateway::run`](crate::Gateway::run), which waits for the answer).
    PermissionPrompt(Arc<ToolEntry>, Box<CallToolParams>),
    /// The tool's module runs as each caller's own account, and this caller has not
    /// connected one: not sent.
    NeedsAccount(Arc<ToolEntry>),
    /// The tool's definition is not its pin: withheld (the change that waits; `None` when
    /// the store could not say, which withholds it too).
    Quarantined(
        Arc<ToolEntry>,
        Option<Box<elicitation_store::DefinitionChange>>,
    ),
}

impl Classified {
    /// The tool called.
    pub fn entry(&self) -> &Arc<ToolEntry> {
        match self {
            Classified::Forward(entry, _)
            | Classified::Deny(entry, ..)
            | Classified::Shadow(entry, ..)
            | Classified::Limited(entry, _)
            | Classified::PermissionPrompt(entry, _)
            | Classified::NeedsAccount(entry)
            | Classified::Quarantined(entry, _) => entry,
            Classified::Gated(call) => &call.entry,
        }
    }
}

/// What the gate did with a call (for the audit trail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Audit {
    Held,
    Forwarded {
        gated: bool,
        shadowed: bool,
    },
    Rejected(&'static str),
    Shadowed,
    /// Forwarded under a standing grant (the store records the use, with the grant's id).
    Granted(GrantId),
}

/// What a person's approval carries beyond yes, as they asked for it (checked by
/// [`Gateway::answer_with`](crate::Gateway::answer_with)).
#[derive(Debug, Clone, Copy)]
pub enum Approving<'a> {
    /// A standing grant's terms: `{"scope", "for", "max_uses"?, "when"?}`.
    Grant(&'a Value),
    /// The arguments to run the call with instead of the agent's.
    Arguments(&'a Value),
}

/// The `_meta` key of a result whose arguments a person changed: the arguments it ran with.
pub const EDITED_META: &str = "mcp-gateway/edited_arguments";
