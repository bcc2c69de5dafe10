//! What the module writes: its messages on stdout, each line bounded, routed to the call
//! they answer or the client they are for; its stderr, logged in bounded excerpts.
use crate::rpc::{self};
use crate::{ModuleError, refuse_ask};
use mcp_wire::codes;
use mcp_wire::jsonrpc::{self, ErrorId, ErrorObject, Message};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

use super::*;

/// One line read with [`read_bounded_line`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum LineRead {
    /// A whole line (without its newline) is in the buffer.
    Line,
    /// The line was longer than the limit: the buffer holds its first `limit` bytes, the
    /// rest was read and dropped; `len` is its whole length.
    Truncated { len: usize },
    /// The stream ended (or failed) before any byte of a new line.
    End,
}

/// Reads one line into `line`, holding at most `limit` bytes of it whatever its length.
pub(super) async fn read_bounded_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    limit: usize,
) -> LineRead {
    line.clear();
    let mut len = 0usize;
    loop {
        let available = match reader.fill_buf().await {
            Ok(available) => available,
            Err(_) => &[],
        };
        if available.is_empty() {
            return match len {
                0 => LineRead::End,
                n if n > limit => LineRead::Truncated { len: n },
                _ => LineRead::Line,
            };
        }
        let (chunk, newline) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (&available[..at], true),
            None => (available, false),
        };
        let room = limit.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        len += chunk.len();
        let used = chunk.len() + usize::from(newline);
        reader.consume(used);
        if newline {
            return if len > limit {
                LineRead::Truncated { len }
            } else {
                LineRead::Line
            };
        }
    }
}

/// A short, printable excerpt of bytes from a module, for a log line.
pub(super) fn excerpt(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(LOGGED_PREFIX)];
    gating_core::visible(&String::from_utf8_lossy(head))
}

pub(super) async fn log_stderr(module: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        match read_bounded_line(&mut reader, &mut line, MAX_STDERR_LINE).await {
            LineRead::End => return,
            LineRead::Line => {
                let text = gating_core::visible(&String::from_utf8_lossy(&line));
                tracing::info!(target: "module", %module, "{text}");
            }
            LineRead::Truncated { len } => {
                let text = gating_core::visible(&String::from_utf8_lossy(&line));
                tracing::info!(target: "module", %module, bytes = len, "{text}… (line cut at {MAX_STDERR_LINE} bytes)");
            }
        }
    }
}

/// A module's notification: `list_changed` fires the change feed; progress goes to the call
/// its token names, a log message to the only call in flight (else to the gateway's log).
pub(super) fn notification(shared: &Shared, method: &str, params: Option<Value>) {
    match method {
        "notifications/tools/list_changed"
        | "notifications/prompts/list_changed"
        | "notifications/resources/list_changed" => {
            let _ = shared.changed.send(());
        }
        "notifications/resources/updated" => {
            if let Some(uri) = params
                .as_ref()
                .and_then(|p| p.get("uri"))
                .and_then(Value::as_str)
            {
                let _ = shared.updated.send(uri.to_owned());
            }
        }
        "notifications/progress" => {
            let token = params.as_ref().and_then(|p| p.get("progressToken"));
            let link = token
                .and_then(Value::as_str)
                .and_then(|t| t.strip_prefix("mcp-gateway-progress-"))
                .and_then(|id| shared.calls().get(id).and_then(|e| e.link.clone()));
            if let Some(link) = link {
                link.notification(method, params);
            }
        }
        "notifications/message" => match shared.only_call() {
            Ok(Some(link)) => link.notification(method, params),
            // No call in flight: for whoever this process serves (a per-caller instance's
            // caller; nobody for a shared one).
            Err(0) if shared.logs.receiver_count() > 0 => {
                if let Some(params @ Value::Object(_)) = params {
                    let _ = shared.logs.send(params);
                }
            }
            _ => {
                let level = params
                    .as_ref()
                    .and_then(|p| p.get("level"))
                    .and_then(Value::as_str);
                tracing::info!(module = %shared.name, level, "a log message from the module outside a single call (not relayed)");
            }
        },
        _ => {}
    }
}

/// Reads stdout: answers go to their waiters, notifications to [`notification`], and
/// requests to the call they are about (see the module docs), `ping` answered here.
// Long: one match over what a line can be, each arm short.
pub(super) async fn read_messages(
    shared: Arc<Shared>,
    stdin: mpsc::Sender<Vec<u8>>,
    stdout: impl AsyncRead + Unpin,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        match read_bounded_line(&mut reader, &mut line, MAX_LINE).await {
            LineRead::End => return,
            LineRead::Truncated { len } => {
                tracing::error!(module = %shared.name, bytes = len, "a line over {MAX_LINE} bytes; dropping the connection");
                return;
            }
            LineRead::Line => {}
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        // Answers first, their results left unparsed; anything else is read whole.
        if let Some(response) = jsonrpc::parse_response(text) {
            // A request given up on is over once the module answers it after all.
            let mut calls = shared.calls();
            let key = response.id.to_string();
            if calls.get(&key).is_some_and(|entry| entry.until.is_some()) {
                calls.remove(&key);
            }
            drop(calls);
            let answer = rpc::answer(&shared.name, response.outcome);
            shared.pending.resolve(&response.id, answer);
            continue;
        }
        match jsonrpc::parse(text) {
            // A response without a usable result or error (`"result": null`, say).
            Ok(Message::Response { id, .. }) => shared.pending.resolve(
                &id,
                Err(ModuleError::Protocol {
                    module: shared.name.clone(),
                    reason: "a response with neither a result nor an error object".into(),
                }),
            ),
            Ok(Message::Notification { method, params }) => {
                let params = params.and_then(|p| serde_json::from_str::<Value>(p.0.get()).ok());
                notification(&shared, &method, params);
            }
            Ok(Message::Request(request)) => {
                let link = match request.method.as_str() {
                    "ping" => Ok(None),
                    _ => shared.only_call(),
                };
                let params = request
                    .params
                    .and_then(|p| serde_json::from_str::<Value>(p.0.get()).ok());
                let stdin = stdin.clone();
                let (id, method) = (request.id, request.method);
                // A module that asks more at once than anyone answers is refused at once.
                let Ok(permit) = shared.asking.clone().try_acquire_owned() else {
                    let error = ErrorObject {
                        code: codes::INTERNAL_ERROR,
                        message: format!(
                            "{method} refused: the module has {MAX_MODULE_REQUESTS} requests waiting for answers already"
                        ),
                        data: None,
                    };
                    let _ = stdin.try_send(jsonrpc::into_line(jsonrpc::error_bytes(
                        ErrorId::Known(&id),
                        &error,
                    )));
                    continue;
                };
                let answer_timeout = Duration::from_secs(30);
                // Answered on its own task: the client may take a while, and other calls'
                // answers keep arriving meanwhile.
                tokio::spawn(async move {
                    let _permit = permit;
                    let answer = match link {
                        Ok(Some(link)) => link.ask(&method, params).await,
                        Ok(None) => refuse_ask(&method),
                        Err(in_flight) => Err(ErrorObject {
                            code: codes::INTERNAL_ERROR,
                            message: format!(
                                "{method} cannot be relayed: {in_flight} requests are in flight on this stdio connection and nothing tells which one it is about"
                            ),
                            data: None,
                        }),
                    };
                    let out = match answer {
                        Ok(result) => jsonrpc::result_bytes(&id, &result),
                        Err(error) => jsonrpc::error_bytes(ErrorId::Known(&id), &error),
                    };
                    let _ =
                        tokio::time::timeout(answer_timeout, stdin.send(jsonrpc::into_line(out)))
                            .await;
                });
            }
            // Never logged whole: it may carry a payload.
            Err(_) => {
                tracing::warn!(module = %shared.name, bytes = text.len(), starts = %excerpt(text), "ignoring a line that is not JSON-RPC");
            }
        }
    }
}
