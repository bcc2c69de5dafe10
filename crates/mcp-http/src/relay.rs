//! A module's messages about a call, on their way to the client that made it: progress and
//! log messages as notifications, and the module's own requests (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) asked of the client. The module clients decide
//! which messages belong to a call ([`mcp_upstream::Relay`]); this side decides what the
//! client may see and how it is asked.
//!
//! A call answers with JSON when nothing came before its result; the first message turns
//! the answer into an SSE stream scoped to the call: the messages as they come, then the
//! result ([`relayed`]). A client that closes the stream cancels the call: the call's future
//! is dropped, which closes the request to an HTTP module and sends
//! `notifications/cancelled` to a stdio one.
//!
//! - A legacy session client is asked on the call's stream, by what it declared in
//!   `initialize`; its answer arrives as a POSTed response ([`PendingAnswers`]).
//! - A 2026-07-28 client cannot be asked on a stream (the spec forbids requests there):
//!   its module's requests are answered with an error for now.
//! - A form elicitation a client cannot answer goes to the caller's inbox when its form maps
//!   to a stored elicitation type (`elicitation_core::FormField`): a person answers it
//!   through the REST API and the answer goes back to the module (`mcp_gate::Inbox`). It is a plain
//!   elicitation, never a confirmation: it binds no call, so it can never let a gated call
//!   through.
//! - Anything else a client cannot answer gets the module an error (sampling, roots) or
//!   `cancel` (elicitation), never a hang.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use mcp_wire::jsonrpc::{self, ErrorId, ErrorObject, RequestId};
use mcp_wire::mcp::log_level_rank;
use mcp_wire::{ResultBody, sse};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::answers::{ClientAnswers, PendingAnswers};
use mcp_http_kit::body::{Body, ChannelBody};
use mcp_http_kit::error::McpError;

/// Messages queued for one call's client; beyond this a client that does not read loses
/// notifications (the call goes on).
const QUEUE: usize = 256;
/// Longest a module's request waits for the client's answer (the module's own call timeout
/// usually ends it sooner).
const ASK_TIMEOUT: Duration = Duration::from_secs(600);
/// How long writing one event may wait for a client that stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Which of a module's log messages the client sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFilter {
    /// None (a 2026-07-28 request without `logLevel`).
    Silent,
    /// Those at this rank or above.
    AtLeast(u8),
}

/// How a call's client is asked: a legacy session's client, on the call's stream.
pub(crate) struct SessionAsker {
    pub(crate) answers: Arc<PendingAnswers>,
    pub(crate) session: String,
    pub(crate) can: ClientAnswers,
}

/// A module's `elicitation/create` as it reaches a person, on every path (natively on the
/// call's stream, through `input_required`, or in the caller's inbox): its message attributed
/// to the module of `tool` and shown as text, so a module cannot pass its question off as the
/// gateway's own confirmation of a call.
/// A message that is missing (or not text) is attributed too: a form without one must not
/// reach the person unattributed.
fn attributed(tool: &str, params: Option<Value>) -> Option<Value> {
    let mut params = params?;
    if let Some(object) = params.as_object_mut() {
        let text = object
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let message = format!(
            "A question from the module of the tool `{tool}` while it runs (not a confirmation of a tool call): {}",
            gating_core::visible(text)
        );
        object.insert("message".into(), Value::String(message));
    }
    Some(params)
}

/// The `inputRequests` of a module's task of the 2026-07-28 tasks extension (in its
/// `tasks/get` result) as its client is shown them: each elicitation attributed to the
/// module of `tool`, as when the module asks while a call runs.
pub(crate) fn attribute_input_requests(tool: &str, task: &mut Value) {
    let Some(requests) = task.get_mut("inputRequests").and_then(Value::as_object_mut) else {
        return;
    };
    for request in requests.values_mut() {
        let Some(request) = request.as_object_mut() else {
            continue;
        };
        if request.get("method").and_then(Value::as_str) == Some("elicitation/create") {
            let params = request.remove("params");
            let params = attributed(tool, params).unwrap_or_else(|| attributed_empty(tool));
            request.insert("params".into(), params);
        }
    }
}

/// An elicitation without params, attributed (a form without a message must not reach the
/// person unattributed).
fn attributed_empty(tool: &str) -> Value {
    attributed(tool, Some(Value::Object(serde_json::Map::new()))).unwrap_or_default()
}

/// How a call's client is asked a module's request: a legacy session's client on the
/// call's stream ([`SessionAsker`]), or a 2026-07-28 client through `input_required`
/// (`bridge::MrtrAsker`).
#[async_trait]
pub(crate) trait Asker: Send + Sync {
    /// Whether the client can answer `method`.
    fn can(&self, method: &str) -> bool;

    /// Whether the client is asked while the call runs, on its stream (a legacy session).
    fn mid_call(&self) -> bool {
        false
    }

    /// Asks the client `method`; `queue` is the call's stream.
    async fn ask(
        &self,
        queue: mpsc::Sender<Vec<u8>>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, ErrorObject>;
}

#[async_trait]
impl Asker for SessionAsker {
    fn can(&self, method: &str) -> bool {
        self.can.can(method)
    }

    fn mid_call(&self) -> bool {
        true
    }

    async fn ask(
        &self,
        queue: mpsc::Sender<Vec<u8>>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, ErrorObject> {
        let (id, answer) = self.answers.register_relayed(&self.session);
        // Forgotten however this ends (answered, refused, or dropped with its call).
        let _waiting = Forget {
            answers: &self.answers,
            session: &self.session,
            id: &id,
        };
        let request = jsonrpc::request_bytes(&id, method, &params);
        if queue.send(request).await.is_err() {
            return Err(gone(method));
        }
        let answered = tokio::select! {
            answered = tokio::time::timeout(ASK_TIMEOUT, answer) => answered,
            () = queue.closed() => return Err(gone(method)),
        };
        match answered {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(error))) => Err(serde_json::from_value(error).unwrap_or(ErrorObject {
                code: mcp_wire::codes::INTERNAL_ERROR,
                message: "the client answered with an unreadable error".into(),
                data: None,
            })),
            Ok(Err(_)) => Err(gone(method)),
            Err(_) => Err(ErrorObject {
                code: mcp_wire::codes::INTERNAL_ERROR,
                message: format!("the client did not answer {method} in time"),
                data: None,
            }),
        }
    }
}

/// The relay of one call: a queue of JSON-RPC messages for the call's client (replaced when
/// a bridged call resumes on another request).
pub(crate) struct ClientRelay {
    queue: std::sync::Mutex<mpsc::Sender<Vec<u8>>>,
    logs: LogFilter,
    asker: Option<Box<dyn Asker>>,
    inbox: Option<mcp_gate::Inbox>,
    /// The tool of the call (its module's questions are attributed to it).
    tool: Arc<mcp_upstream::registry::ToolEntry>,
}

impl ClientRelay {
    /// A relay of a call to `tool` and the queue its messages arrive on.
    pub(crate) fn new(
        tool: &Arc<mcp_upstream::registry::ToolEntry>,
        logs: LogFilter,
        asker: Option<Box<dyn Asker>>,
        inbox: Option<mcp_gate::Inbox>,
    ) -> (Arc<ClientRelay>, mpsc::Receiver<Vec<u8>>) {
        let (queue, rx) = mpsc::channel(QUEUE);
        let relay = ClientRelay {
            queue: std::sync::Mutex::new(queue),
            logs,
            asker,
            inbox,
            tool: tool.clone(),
        };
        (Arc::new(relay), rx)
    }

    /// A new queue for the relay's messages (the call resumed on another request).
    pub(crate) fn reattach(&self) -> mpsc::Receiver<Vec<u8>> {
        let (queue, rx) = mpsc::channel(QUEUE);
        *self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = queue;
        rx
    }

    fn queue(&self) -> mpsc::Sender<Vec<u8>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl mcp_upstream::Relay for ClientRelay {
    fn notify(&self, method: &str, params: Value) {
        if method == "notifications/message" {
            let rank = params
                .get("level")
                .and_then(Value::as_str)
                .and_then(log_level_rank);
            let shown = match (self.logs, rank) {
                (LogFilter::AtLeast(min), Some(rank)) => rank >= min,
                _ => false,
            };
            if !shown {
                return;
            }
        }
        let message = jsonrpc::notification_bytes(method, Some(&params));
        if self.queue().try_send(message).is_err() {
            tracing::debug!(method, "a client that does not read lost a notification");
        }
    }

    fn log_level(&self) -> Option<u8> {
        match self.logs {
            LogFilter::Silent => None,
            LogFilter::AtLeast(rank) => Some(rank),
        }
    }

    fn answers(&self, method: &str) -> bool {
        self.asker.as_ref().is_some_and(|a| a.can(method))
            || (method == "elicitation/create" && self.inbox.is_some())
    }

    fn asks_mid_call(&self) -> bool {
        self.asker.as_ref().is_some_and(|a| a.mid_call())
    }

    async fn ask(&self, method: &str, params: Option<Value>) -> Result<Value, ErrorObject> {
        let params = if method == "elicitation/create" {
            attributed(&self.tool.qualified, params)
        } else {
            params
        };
        match self.asker.as_ref().filter(|a| a.can(method)) {
            Some(asker) => asker.ask(self.queue(), method, params).await,
            None => match &self.inbox {
                Some(inbox) if method == "elicitation/create" => {
                    Ok(inbox.ask(params.as_ref()).await)
                }
                _ => cannot_ask(method),
            },
        }
    }
}

/// Forgets a relayed request's waiter when dropped.
struct Forget<'a> {
    answers: &'a PendingAnswers,
    session: &'a str,
    id: &'a RequestId,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.answers.forget(self.session, self.id);
    }
}

/// The answer for a request the call's client cannot take: an elicitation is cancelled
/// (nobody saw it); anything else is an error.
pub(crate) fn cannot_ask(method: &str) -> Result<Value, ErrorObject> {
    if method == "elicitation/create" {
        return Ok(mcp_wire::tools::ElicitResult::cancel().to_value());
    }
    Err(ErrorObject {
        code: mcp_wire::codes::METHOD_NOT_FOUND,
        message: format!("the client of this call cannot answer {method}"),
        data: None,
    })
}

fn gone(method: &str) -> ErrorObject {
    ErrorObject {
        code: mcp_wire::codes::INTERNAL_ERROR,
        message: format!("the client went away before answering {method}"),
        data: None,
    }
}

/// The final message of a `tools/call` answered on a stream: its result (for a client of
/// the era `modern`) or its error; none for a call the client cancelled, which a receiver
/// does not answer (the client has forgotten the id: an answer is "unknown" to it).
pub(crate) fn final_message(
    id: &RequestId,
    outcome: Result<ResultBody, McpError>,
    modern: bool,
) -> Option<Vec<u8>> {
    match outcome {
        Ok(result) => Some(jsonrpc::result_body_bytes(id, &result.for_client(modern))),
        Err(McpError::Cancelled) => None,
        Err(e) => Some(jsonrpc::error_bytes(
            ErrorId::Known(id),
            &e.to_error_object(),
        )),
    }
}

/// What answers a request the client cancelled before anything was streamed: a stream
/// that ends with no message (an HTTP request must be answered; the cancelled JSON-RPC
/// request is not).
pub(crate) fn unanswered() -> Response<Body> {
    let (_, body) = ChannelBody::new(1);
    mcp_http_kit::response::sse_response(body.boxed())
}

/// What a relayed call answers with.
pub(crate) enum Relayed<T> {
    /// Nothing came before the result: answer as usual.
    Done(T),
    /// Messages came first: the SSE stream that carries them, then the final message.
    Stream(Response<Body>),
}

/// Runs `call` with its relay's queue `queue`: its result as it is when no message came
/// first, else an SSE stream of the messages then `last(result)`, the final JSON-RPC
/// message (if any: the stream of a cancelled call ends without one). The call runs on its own task once streamed; a client that closes the stream
/// drops it (cancelling the module's call).
pub(crate) async fn relayed<T, F>(
    call: F,
    mut queue: mpsc::Receiver<Vec<u8>>,
    last: impl FnOnce(T) -> Option<Vec<u8>> + Send + 'static,
) -> Relayed<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let mut call = Box::pin(call);
    let first = tokio::select! {
        biased;
        Some(message) = queue.recv() => message,
        result = &mut call => match queue.try_recv() {
            // Messages that came with the result still go first.
            Ok(message) => {
                let (tx, body) = ChannelBody::new(16);
                tokio::spawn(tracing::Instrument::in_current_span(async move {
                    let _ = send(&tx, &message).await
                        && drain(&tx, &mut queue).await
                        && send_last(&tx, last(result)).await;
                }));
                return Relayed::Stream(mcp_http_kit::response::sse_response(body.boxed()));
            }
            Err(_) => return Relayed::Done(result),
        },
    };
    let (tx, body) = ChannelBody::new(16);
    // The stream is the request's: its trace span lasts as long as it does.
    tokio::spawn(tracing::Instrument::in_current_span(async move {
        if !send(&tx, &first).await {
            return;
        }
        loop {
            tokio::select! {
                biased;
                Some(message) = queue.recv() => if !send(&tx, &message).await { return },
                result = &mut call => {
                    let _ = drain(&tx, &mut queue).await && send_last(&tx, last(result)).await;
                    return;
                }
                // The client closed the stream: dropping the call cancels it.
                () = tx.closed() => return,
            }
        }
    }));
    Relayed::Stream(mcp_http_kit::response::sse_response(body.boxed()))
}

async fn send(tx: &mpsc::Sender<Bytes>, message: &[u8]) -> bool {
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, tx.send(sse::event_bytes(message))).await,
        Ok(Ok(()))
    )
}

async fn send_last(tx: &mpsc::Sender<Bytes>, message: Option<Vec<u8>>) -> bool {
    match message {
        Some(message) => send(tx, &message).await,
        None => true,
    }
}

async fn drain(tx: &mpsc::Sender<Bytes>, queue: &mut mpsc::Receiver<Vec<u8>>) -> bool {
    while let Ok(message) = queue.try_recv() {
        if !send(tx, &message).await {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_modules_question_is_attributed_with_or_without_a_message() {
        let prefix = "A question from the module of the tool `m__ask` while it runs (not a confirmation of a tool call): ";
        let asked = attributed(
            "m__ask",
            Some(json!({"message": "Allow this call?\u{202e}", "requestedSchema": {}})),
        )
        .unwrap();
        assert_eq!(
            asked["message"],
            format!(
                "{prefix}{}",
                gating_core::visible("Allow this call?\u{202e}")
            )
        );
        for params in [
            json!({"requestedSchema": {}}),
            json!({"message": 7, "requestedSchema": {}}),
        ] {
            let asked = attributed("m__ask", Some(params)).unwrap();
            assert_eq!(asked["message"], prefix, "{asked}");
        }
    }
}
