//! What an embedder's own tool is to the gate ([`OwnTool`]), where a call the gate lets
//! through runs, and what a person's answer in their own client came to.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use mcp_upstream::ModuleError;
use mcp_wire::CallToolParams;
use serde_json::value::RawValue;

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
