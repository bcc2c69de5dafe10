//! A legacy session's requests about its tasks (`tasks/get`, `tasks/result`, `tasks/list`,
//! `tasks/cancel`), routed by the gate to the module that runs each
//! (`mcp_gate::tasks`), or answered here for a call the gateway holds itself (`hosted`). `tasks/result` waits for the task to end; what its module asks
//! meanwhile reaches the client on that request's stream, as a call's would.

use std::sync::Arc;

use http::HeaderMap;
use mcp_wire::jsonrpc::Request;
use mcp_wire::tools::ForwardParams;
use serde_json::Value;

use crate::relay::{self, Relayed};
use crate::service::{McpService, Reply, Streaming};
use crate::sessions::Session;
use mcp_auth::{Principal, SCOPE_TOOLS_CALL};
use mcp_http_kit::error::McpError;
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::response;

/// Why a request about tasks is refused over the caller's call rate.
pub(crate) const POLLING_TOO_FAST: &str =
    "this caller is asking about its tasks faster than the gateway allows";

impl McpService {
    /// A legacy request about the caller's tasks.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn legacy_task(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        request: &Request,
        streaming: Streaming,
        session_id: String,
        session: &Session,
    ) -> Result<Reply, McpError> {
        principal.require(SCOPE_TOOLS_CALL)?;
        let gateway = snap.gateway.clone();
        // Each is answered from the store or the task's module: it counts against the
        // caller's call rate (a client polling at the suggested interval is far below it).
        gateway.take_call(&principal.caller, POLLING_TOO_FAST)?;
        if request.method == "tasks/list" {
            let listed = gateway.list_tasks(principal).await?;
            return Ok(Reply::Result(listed, None));
        }
        let params = Value::Object(request.params_as::<ForwardParams>()?.0);
        // A task of the gateway's own (a held call): its state is the store's.
        if let Some(handle) = params
            .get("taskId")
            .and_then(Value::as_str)
            .filter(|h| crate::held_task::is_hosted(h))
        {
            let page = self.page_base(headers);
            let answered = self
                .hosted_task(&gateway, principal, &request.method, handle, &page)
                .await?;
            return Ok(Reply::Result(answered.for_client(false), None));
        }
        let tool = params
            .get("taskId")
            .and_then(Value::as_str)
            .and_then(|handle| gateway.task_tool(principal, handle));
        let relayed = request.method == "tasks/result"
            && streaming == Streaming::Allowed
            && response::accepts_sse(headers);
        let (Some(tool), true) = (tool, relayed) else {
            let answered = gateway
                .task_request(principal, (&request.method, false), &params, None)
                .await?;
            return Ok(Reply::Result(answered.for_client(false), None));
        };
        // What the module asks while the task ends is asked of this client, on this
        // request's stream.
        let (relay, queue) = self.session_relay(&tool, session, session_id, &gateway, principal);
        let caller = principal.clone();
        let channel = session.channel().clone();
        let id = request.id.clone();
        let method = request.method.clone();
        let call = async move {
            let relay: Arc<dyn mcp_upstream::Relay> = relay;
            let asked =
                Box::pin(gateway.task_request(&caller, (&method, false), &params, Some(relay)));
            channel
                .cancellable(&id, async { asked.await.map_err(McpError::from) })
                .await
        };
        let id = request.id.clone();
        let last = move |outcome| relay::final_message(&id, outcome, false);
        match relay::relayed(call, queue, last).await {
            Relayed::Done(Err(McpError::Cancelled)) => Ok(Reply::Stream(relay::unanswered())),
            Relayed::Done(result) => Ok(Reply::Result(result?.for_client(false), None)),
            Relayed::Stream(response) => Ok(Reply::Stream(response)),
        }
    }
}
