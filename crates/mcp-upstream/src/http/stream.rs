//! The module's own stream of messages outside any call (its GET stream, or the 2026-07-28
//! `subscriptions/listen`), followed for as long as the module is used.

use crate::refuse_ask;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use mcp_wire::headers::{MCP_METHOD, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use mcp_wire::jsonrpc::{self, Message, RequestId};
use mcp_wire::mcp::{MODERN_VERSION, modern_meta};
use mcp_wire::sse;
use mcp_wire::tools::{ListParams, WithMeta};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

use super::*;

/// Where the module's own stream reports.
#[derive(Clone)]
pub(super) struct Feeds {
    pub(super) changed: broadcast::Sender<()>,
    pub(super) updated: broadcast::Sender<String>,
    /// Its log messages outside any call.
    pub(super) logs: broadcast::Sender<Value>,
}

/// What the task that listens to a module's own stream needs.
pub(super) struct Listener {
    pub(super) name: String,
    pub(super) url: Uri,
    pub(super) link: Link,
    pub(super) headers: HeaderMap,
    pub(super) era: Arc<std::sync::Mutex<Option<Era>>>,
    pub(super) feeds: Feeds,
    pub(super) subscriptions: Subscriptions,
    /// Set once the stream was answered (open, or refused).
    pub(super) answered: tokio::sync::watch::Sender<bool>,
}

/// Listens to the module's own stream — a legacy module's `GET` stream, a 2026-07-28
/// module's `subscriptions/listen` — for its list changes and resource updates, and
/// reconnects (with back-off, re-listing what may have changed meanwhile) when it ends. A
/// module that offers no such stream (405, 501, 400, a JSON-RPC `-32601` in any status —
/// fastmcp answers 404 with one — or a success that is no stream) is not asked again.
// Long: the reconnect loop; its back-off and what it re-lists carry across attempts.
pub(super) async fn listen(l: Listener) {
    let mut backoff = Duration::from_secs(1);
    let mut connected_before = false;
    // Reopened for new resource subscriptions (not after the stream was lost).
    let mut on_purpose = false;
    let mut wanted = l.subscriptions.wanted.subscribe();
    loop {
        // The generation of resource subscriptions this stream asks for (2026-07-28).
        let mut current = 0;
        wanted.mark_unchanged();
        let era = l
            .era
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut headers = l.headers.clone();
        let request = match &era {
            None => None,
            Some(Era::Legacy { session, version }) => {
                // A GET stream; a 2026-07-28 listen is a POST, which accepts both (as every
                // POST must: the official SDK answers 406 otherwise).
                headers.insert(
                    header::ACCEPT,
                    HeaderValue::from_static("text/event-stream"),
                );
                if let Some(session) = session {
                    headers.insert(MCP_SESSION_ID, session.clone());
                }
                headers.insert(MCP_PROTOCOL_VERSION, version.clone());
                headers.remove(header::CONTENT_TYPE);
                let mut request = Request::new(Full::new(Bytes::new()));
                *request.method_mut() = Method::GET;
                Some(request)
            }
            Some(Era::Modern) => {
                headers.insert(
                    MCP_PROTOCOL_VERSION,
                    HeaderValue::from_static(MODERN_VERSION),
                );
                headers.insert(MCP_METHOD, HeaderValue::from_static("subscriptions/listen"));
                let mut params = ListParams::default();
                params.add_meta(modern_meta());
                let mut body = serde_json::to_value(&params).unwrap_or_default();
                let (generation, uris) = l.subscriptions.wanted.borrow().clone();
                current = generation;
                body["notifications"] = serde_json::json!({
                    "toolsListChanged": true,
                    "promptsListChanged": true,
                    "resourcesListChanged": true,
                });
                if !uris.is_empty() {
                    body["notifications"]["resourceSubscriptions"] =
                        Value::Array(uris.into_iter().map(Value::String).collect());
                }
                let id = RequestId::String("mcp-gateway-listen".into());
                let bytes = jsonrpc::request_bytes(&id, "subscriptions/listen", &body);
                let mut request = Request::new(Full::new(Bytes::from(bytes)));
                *request.method_mut() = Method::POST;
                Some(request)
            }
        };
        if let Some(mut request) = request {
            *request.uri_mut() = l.url.clone();
            *request.headers_mut() = headers;
            match l.link.request(request).await {
                Ok(response) => {
                    let status = response.status();
                    let is_sse = response
                        .headers()
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.starts_with("text/event-stream"));
                    let (response, no_method) = if status.is_success() {
                        (Some(response), false)
                    } else {
                        (None, method_not_found(response).await)
                    };
                    let refused = no_method
                        || matches!(
                            status,
                            StatusCode::METHOD_NOT_ALLOWED
                                | StatusCode::NOT_IMPLEMENTED
                                | StatusCode::BAD_REQUEST
                        )
                        || (status.is_success() && !is_sse);
                    l.answered.send_replace(true);
                    if refused && !connected_before {
                        tracing::info!(module = %l.name, %status, "the module offers no stream of its own: its list changes are seen only when it restarts");
                        l.subscriptions
                            .acknowledged
                            .send_replace(Acknowledged::Refused(None));
                        return;
                    }
                    if refused {
                        // A stream it took before, refused with these subscriptions: the
                        // subscriber that asked is refused (and takes its change back, which
                        // reopens the stream as it was); the stream is kept.
                        tracing::info!(module = %l.name, %status, "the module refused its stream with the resource subscriptions asked for");
                        l.subscriptions
                            .acknowledged
                            .send_replace(Acknowledged::Refused(Some(current)));
                    } else if let Some(response) = response {
                        if connected_before && !on_purpose {
                            // It may have changed while the stream was down.
                            let _ = l.feeds.changed.send(());
                        }
                        on_purpose = false;
                        connected_before = true;
                        backoff = Duration::from_secs(1);
                        let resubscribed = tokio::select! {
                            () = read_stream(&l, response.into_body(), current) => false,
                            _ = wanted.changed() => true,
                        };
                        l.subscriptions
                            .acknowledged
                            .send_replace(Acknowledged::Pending);
                        if resubscribed {
                            // Reopened at once with the new subscriptions.
                            on_purpose = true;
                            continue;
                        }
                    } else {
                        tracing::warn!(module = %l.name, %status, "the module refused its stream; trying again");
                    }
                }
                Err(e) => {
                    // Nothing to wait for: the first request goes on.
                    l.answered.send_replace(true);
                    tracing::debug!(module = %l.name, error = %e, "the module's stream could not be opened");
                }
            }
        }
        // A subscription change (a refused one taken back) reopens at once.
        tokio::select! {
            () = tokio::time::sleep(backoff) => {
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            _ = wanted.changed() => on_purpose = connected_before,
        }
    }
}

/// Whether a refused stream's answer is a JSON-RPC "method not found" (`-32601`): the
/// module has no such stream, whatever the status says. Reads at most 16 KiB, for 5 s.
pub(super) async fn method_not_found(response: hyper::Response<hyper::body::Incoming>) -> bool {
    let body = http_body_util::Limited::new(response.into_body(), 16 * 1024);
    let Ok(Ok(collected)) = tokio::time::timeout(Duration::from_secs(5), body.collect()).await
    else {
        return false;
    };
    serde_json::from_slice::<Value>(&collected.to_bytes())
        .ok()
        .and_then(|v| v.pointer("/error/code").and_then(Value::as_i64))
        == Some(-32601)
}

/// Reads the module's own stream until it ends; `generation` is the resource subscriptions'
/// generation it asked for (a 2026-07-28 stream's acknowledgement is recorded under it).
pub(super) async fn read_stream(l: &Listener, mut body: hyper::body::Incoming, generation: u64) {
    let mut parser = sse::Parser::default();
    while let Some(Ok(frame)) = body.frame().await {
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let Ok(events) = parser.feed(data) else {
            return;
        };
        for event in events {
            match jsonrpc::parse(event.as_bytes()) {
                Ok(Message::Notification { method, params }) => match method.as_str() {
                    "notifications/tools/list_changed"
                    | "notifications/prompts/list_changed"
                    | "notifications/resources/list_changed" => {
                        let _ = l.feeds.changed.send(());
                    }
                    // Outside any call: for whoever this module session serves.
                    "notifications/message" => {
                        if let Some(params @ Value::Object(_)) = tree(params) {
                            let _ = l.feeds.logs.send(params);
                        }
                    }
                    "notifications/subscriptions/acknowledged" => {
                        let honoured = tree(params)
                            .and_then(|p| {
                                p.get("notifications")?
                                    .get("resourceSubscriptions")
                                    .cloned()
                            })
                            .and_then(|uris| serde_json::from_value::<Vec<String>>(uris).ok())
                            .unwrap_or_default();
                        l.subscriptions
                            .acknowledged
                            .send_replace(Acknowledged::Honoured(
                                generation,
                                honoured.into_iter().collect(),
                            ));
                    }
                    "notifications/resources/updated" => {
                        let uri = tree(params)
                            .and_then(|p| p.get("uri").and_then(Value::as_str).map(str::to_owned));
                        if let Some(uri) = uri {
                            let _ = l.feeds.updated.send(uri);
                        }
                    }
                    _ => {}
                },
                // A request outside any call has no client to ask: answered here.
                Ok(Message::Request(asked)) => {
                    let answer = match refuse_ask(&asked.method) {
                        Ok(result) => jsonrpc::result_bytes(&asked.id, &result),
                        Err(error) => {
                            jsonrpc::error_bytes(jsonrpc::ErrorId::Known(&asked.id), &error)
                        }
                    };
                    let era = l
                        .era
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    let mut headers = l.headers.clone();
                    if let Some(Era::Legacy { session, version }) = era {
                        if let Some(session) = session {
                            headers.insert(MCP_SESSION_ID, session);
                        }
                        headers.insert(MCP_PROTOCOL_VERSION, version);
                    }
                    let mut request = Request::new(Full::new(Bytes::from(answer)));
                    *request.method_mut() = Method::POST;
                    *request.uri_mut() = l.url.clone();
                    *request.headers_mut() = headers;
                    let _ = tokio::time::timeout(Duration::from_secs(10), l.link.request(request))
                        .await;
                }
                _ => {}
            }
        }
    }
}

/// Resource subscriptions at a 2026-07-28 module: carried by its listen stream.
impl HttpModule {
    /// Subscribes to `uri` (or stops) at a 2026-07-28 module: its listen stream is reopened
    /// with the new `resourceSubscriptions`, and the answer waits for the module's
    /// acknowledgement of that stream, which must honour the subscription.
    pub(super) async fn listen_for(&self, uri: &str, subscribe: bool) -> Result<(), ModuleError> {
        let mut generation = 0;
        let mut full = false;
        let mut added = false;
        self.subscriptions.wanted.send_modify(|(g, uris)| {
            if subscribe && !uris.contains(uri) && uris.len() >= MAX_MODULE_SUBSCRIPTIONS {
                full = true;
                return;
            }
            let changed = if subscribe {
                uris.insert(uri.to_owned())
            } else {
                uris.remove(uri)
            };
            if changed {
                *g += 1;
            }
            added = changed && subscribe;
            generation = *g;
        });
        if full {
            return Err(ModuleError::Rpc {
                module: self.config.name.clone(),
                code: mcp_wire::codes::INVALID_PARAMS,
                message: format!(
                    "the module already has {MAX_MODULE_SUBSCRIPTIONS} resource subscriptions"
                ),
                data: None,
            });
        }
        let outcome = self.acknowledged(uri, subscribe, generation).await;
        if outcome.is_err() && added {
            // Not taken: the stream goes back to what it was.
            self.subscriptions.wanted.send_modify(|(g, uris)| {
                if uris.remove(uri) {
                    *g += 1;
                }
            });
        }
        outcome
    }

    /// Waits for the module's acknowledgement of subscription generation `generation`.
    async fn acknowledged(
        &self,
        uri: &str,
        subscribe: bool,
        generation: u64,
    ) -> Result<(), ModuleError> {
        let mut acknowledged = self.subscriptions.acknowledged.subscribe();
        let settled = tokio::time::timeout(
            ACKNOWLEDGE_TIMEOUT,
            acknowledged.wait_for(|a| match a {
                Acknowledged::Pending => false,
                Acknowledged::Honoured(g, _) => *g >= generation,
                Acknowledged::Refused(None) => true,
                Acknowledged::Refused(Some(g)) => *g >= generation,
            }),
        )
        .await;
        let outcome = match settled {
            Ok(Ok(state)) => state.clone(),
            _ => Acknowledged::Pending,
        };
        match outcome {
            Acknowledged::Honoured(_, honoured) if honoured.contains(uri) == subscribe => Ok(()),
            Acknowledged::Honoured(..) => Err(ModuleError::Rpc {
                module: self.config.name.clone(),
                code: mcp_wire::codes::INVALID_PARAMS,
                message: format!("the module did not honour the subscription to {uri}"),
                data: None,
            }),
            Acknowledged::Refused(_) => Err(ModuleError::Rpc {
                module: self.config.name.clone(),
                code: mcp_wire::codes::METHOD_NOT_FOUND,
                message: "the module offers no subscriptions (subscriptions/listen)".into(),
                data: None,
            }),
            Acknowledged::Pending => Err(self.unavailable(format!(
                "its subscriptions/listen stream was not acknowledged within {} s",
                ACKNOWLEDGE_TIMEOUT.as_secs()
            ))),
        }
    }
}
