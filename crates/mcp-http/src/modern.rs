//! Modern requests (2026-07-28): self-describing `_meta`, and headers that must agree with
//! the body — `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and, for a tool whose schema
//! mirrors parameters, `Mcp-Param-*` (400 / `-32020` when they do not).

use http::{HeaderMap, HeaderName, HeaderValue};
use mcp_wire::headers::{
    MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, check_param_headers, decode_header_value,
};
use mcp_wire::jsonrpc::{MetaHead, ParamsHead, Request};
use mcp_wire::mcp::{self, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSION};
use mcp_wire::tools::Routing;
use mcp_wire::{FromClient, ResultBody};
use serde_json::Value;

use std::sync::Arc;

use crate::answers::{self, ClientAnswers};
use crate::ask;
use crate::bridge::{self, Running};
use crate::listen::{self, ListenParams};
use crate::relay::{self, ClientRelay, LogFilter, Relayed};
use crate::service::{McpService, Reply};
use mcp_auth::{Principal, SCOPE_TOOLS_CALL};
use mcp_http_kit::error::McpError;
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::response;

impl McpService {
    /// A modern request.
    // Long: the 2026-07-28 header checks in the order the specification gives, then the
    // dispatch.
    pub(crate) async fn modern(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        request: &Request,
        routing: Routing<'_>,
    ) -> Result<Reply, McpError> {
        let Routing { head, call } = routing;
        let meta = head.meta.as_ref();
        let version = modern_version(meta)?;
        check_modern_headers(headers, request, &head, version)?;
        let (result, cacheable) = if let Some(answer) =
            self.catalog_method(snap, principal, request, false).await
        {
            answer?
        } else {
            match request.method.as_str() {
                "server/discover" => (mcp::discover_result().into(), true),
                "subscriptions/listen" => {
                    // Boxed, as the rarer methods below: a request's future is as big as the
                    // biggest it may await, and every request moves it.
                    return Box::pin(self.subscriptions_listen(snap, headers, principal, request))
                        .await;
                }
                "tools/call" => {
                    principal.require(SCOPE_TOOLS_CALL)?;
                    // 2026-07-28 has no `task` param (its tasks are an extension, in which
                    // the server decides: `ask::ClientAsks::tasks`).
                    // Read with the head where it could be; else on its own, which says
                    // what is wrong with it.
                    let (params, capabilities) = match call {
                        Some(call) => (call.params, call.capabilities),
                        None => (
                            request.params_as::<FromClient>()?.0,
                            meta.and_then(|m| m.client_capabilities)
                                .and_then(|c| serde_json::from_str::<Value>(c.get()).ok()),
                        ),
                    };
                    let params = params.without_task();
                    // One gateway for the whole call (see `legacy`).
                    let gateway = snap.gateway.clone();
                    let entry = gateway.tool(&params.name).await?;
                    if !entry.mirrored.is_empty() {
                        let arguments = params
                            .arguments
                            .as_ref()
                            .map(|a| a.to_map())
                            .transpose()
                            .map_err(|e| {
                            McpError::InvalidParams(format!("`arguments` cannot be read: {e}"))
                        })?;
                        check_param_headers(&entry.mirrored, arguments.as_ref(), headers)
                            .map_err(McpError::HeaderMismatch)?;
                    }
                    let logs = meta
                        .and_then(|m| m.log_level.as_deref())
                        .and_then(mcp::log_level_rank)
                        .map_or(LogFilter::Silent, LogFilter::AtLeast);
                    let bridges = self.bridges.clone();
                    let bridged = params
                        .request_state
                        .as_deref()
                        .is_some_and(|s| s.starts_with(bridge::STATE_PREFIX));
                    // The call runs on its own task, its module's progress and (if asked
                    // for) log messages streamed to the client, its module's questions
                    // asked through input_required (`bridge`); a retry that answers one
                    // resumes the call it names.
                    let (running, queue) = if bridged {
                        let mut params = params;
                        let state = params.request_state.take().unwrap_or_default();
                        let responses = params.input_responses.take();
                        let running =
                            bridges.resume(&principal.caller, &params.name, &state, responses)?;
                        let queue = running.relay().reattach();
                        (running, queue)
                    } else {
                        let client_asks = ask::ClientAsks {
                            form: answers::can_elicit_form(capabilities.as_ref()),
                            url: answers::can_elicit_url(capabilities.as_ref()),
                            native: self.config.native,
                            page: self.page_base(headers),
                            tasks: capabilities
                                .as_ref()
                                .and_then(|c| c.get("extensions"))
                                .and_then(|e| e.get(mcp_wire::tasks::TASKS_EXTENSION))
                                .is_some(),
                        };
                        // A client that takes a task may be answered with its module's.
                        let params = params.with_modern_task(client_asks.tasks);
                        let (asker, asks) =
                            Running::asker(ClientAnswers::declared(capabilities.as_ref()));
                        let asker = asker.map(|a| Box::new(a) as Box<dyn relay::Asker>);
                        let (relay, queue) =
                            ClientRelay::new(&entry, logs, asker, gateway.inbox(principal));
                        let mrtr = ask::Mrtr {
                            gateway: gateway.clone(),
                            states: self.states.clone(),
                            clock: self.config.clock.clone(),
                            waits: self.streams.clone(),
                        };
                        let caller = principal.clone();
                        let module_relay: Arc<dyn mcp_upstream::Relay> = relay.clone();
                        let call = async move {
                            mrtr.call(&caller, params, client_asks, Some(module_relay))
                                .await
                        };
                        (Running::start(call, asks, relay), queue)
                    };
                    let (caller, tool) = (principal.clone(), entry.clone());
                    let call = async move { bridges.drive(caller, tool, running).await };
                    if !response::accepts_sse(headers) {
                        drop(queue);
                        (call.await?, false)
                    } else {
                        let id = request.id.clone();
                        let last = move |outcome| relay::final_message(&id, outcome, true);
                        match relay::relayed(call, queue, last).await {
                            Relayed::Done(result) => (result?, false),
                            Relayed::Stream(response) => return Ok(Reply::Stream(response)),
                        }
                    }
                }
                "tasks/get" | "tasks/update" | "tasks/cancel" => {
                    principal.require(SCOPE_TOOLS_CALL)?;
                    snap.gateway
                        .take_call(&principal.caller, crate::tasks::POLLING_TOO_FAST)?;
                    let params: mcp_wire::tools::ForwardParams = request.params_as()?;
                    let handle = params.str("taskId").unwrap_or_default();
                    // A module's task: routed to the module that runs it (its questions
                    // attributed to it, as when it asks during a call).
                    if !crate::held_task::is_hosted(handle) {
                        let gateway = &snap.gateway;
                        let tool = gateway.task_tool(principal, handle);
                        let params = Value::Object(params.0);
                        let answered = Box::pin(gateway.task_request(
                            principal,
                            (&request.method, true),
                            &params,
                            None,
                        ))
                        .await?;
                        let answered = match tool {
                            Some(tool) if request.method == "tasks/get" => {
                                let mut task = answered.into_value();
                                relay::attribute_input_requests(&tool.qualified, &mut task);
                                task.into()
                            }
                            _ => answered,
                        };
                        return Ok(Reply::Result(answered.for_client(true), None));
                    }
                    let page = self.page_base(headers);
                    let answered = Box::pin(self.modern_hosted_task(
                        &snap.gateway,
                        principal,
                        &request.method,
                        handle,
                        &page,
                    ))
                    .await?;
                    (answered, false)
                }
                other => return Err(McpError::MethodNotFound(other.to_owned())),
            }
        };
        let result = match result {
            ResultBody::Value(value) => ResultBody::Value(mcp::modern_result(value, cacheable)),
            forwarded if cacheable => forwarded.for_modern_client_cacheable(),
            forwarded => forwarded.for_client(true),
        };
        Ok(Reply::Result(result, None))
    }
}

impl McpService {
    /// `subscriptions/listen`: a stream of the catalog's changes and the subscribed
    /// resources' updates (see `listen::modern_stream`). A resource is subscribed at its
    /// module when its first listener (session or stream) comes, and unsubscribed when the
    /// last one goes; one the module refuses (or no module claims) is not honoured.
    async fn subscriptions_listen(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Principal,
        request: &Request,
    ) -> Result<Reply, McpError> {
        principal.require(SCOPE_TOOLS_CALL)?;
        if !response::accepts_sse(headers) {
            return Err(McpError::NotAcceptable(
                "subscriptions/listen answers with an event stream: Accept must include text/event-stream".into(),
            ));
        }
        let params: ListenParams = request.params_as()?;
        let slot = self
            .streams
            .try_open(&principal.caller)
            .ok_or(McpError::TooManyStreams(self.config.max_streams_per_caller))?;
        let mut honoured = params.notifications;
        let asked = std::mem::take(&mut honoured.resource_subscriptions);
        if asked.len() > crate::channel::MAX_SUBSCRIPTIONS {
            return Err(McpError::InvalidParams(format!(
                "at most {} resource subscriptions per stream",
                crate::channel::MAX_SUBSCRIPTIONS
            )));
        }
        let mut uris = std::collections::BTreeSet::new();
        for uri in asked {
            if uris.contains(&uri) {
                continue;
            }
            let watched = self.sessions.module_knows(
                &snap.gateway,
                self.listeners.subscribed(&uri),
                &uri,
                "",
            );
            if watched
                || snap
                    .gateway
                    .subscribe_resource(&principal.caller, &uri, true)
                    .await
                    .is_ok()
            {
                uris.insert(uri);
            }
        }
        honoured.resource_subscriptions = uris.iter().cloned().collect();
        let listener = self.listeners.register(uris);
        let (gateway, sessions, listeners) = (
            snap.gateway.clone(),
            self.sessions.clone(),
            self.listeners.clone(),
        );
        let caller = principal.caller.clone();
        let on_end = move || {
            let left = listeners.remove(listener);
            tokio::spawn(async move {
                for uri in left {
                    // A caller's own instance keeps its subscriptions until it stops (the
                    // caller may listen on another stream too).
                    if !gateway.registry().isolates(&uri)
                        && !sessions.module_knows(&gateway, listeners.subscribed(&uri), &uri, "")
                    {
                        let _ = gateway.subscribe_resource(&caller, &uri, false).await;
                    }
                }
            });
        };
        Ok(Reply::Stream(listen::modern_stream(
            request.id.clone(),
            honoured,
            snap.gateway.catalog_changes(),
            listen::CallerUpdates {
                feed: snap.gateway.resource_updates(),
                who: mcp_gate::instance_key(&principal.caller),
            },
            self.closing.subscribe(),
            slot,
            on_end,
        )))
    }
}

/// The protocol version `_meta` names; both it and the client capabilities are required,
/// and only 2026-07-28 is served in this era (`-32022` lists every version served).
fn modern_version<'a>(meta: Option<&'a MetaHead<'_>>) -> Result<&'a str, McpError> {
    let version = meta
        .and_then(|m| m.protocol_version.as_deref())
        .ok_or_else(|| {
            McpError::InvalidParams(format!("_meta[\"{META_PROTOCOL_VERSION}\"] is required"))
        })?;
    if !meta
        .and_then(|m| m.client_capabilities)
        .is_some_and(|c| c.get().trim_start().starts_with('{'))
    {
        return Err(McpError::InvalidParams(format!(
            "_meta[\"{META_CLIENT_CAPABILITIES}\"] is required"
        )));
    }
    if version != MODERN_VERSION {
        return Err(McpError::UnsupportedVersion {
            requested: version.to_owned(),
            supported: mcp::supported_versions(),
        });
    }
    Ok(version)
}

/// Whether a header says `expected` (decoded from base64 when it is in that form; compared
/// without copying when plain); `None` when it is not a valid header value.
fn header_is(value: &HeaderValue, expected: &str) -> Option<bool> {
    let text = value.to_str().ok()?;
    if !text.starts_with("=?base64?") {
        return Some(text == expected);
    }
    decode_header_value(value).map(|decoded| decoded == expected)
}

/// The 2026-07-28 header rules: `MCP-Protocol-Version`, `Mcp-Method` and (for the methods
/// that name something) `Mcp-Name` must be present and equal to the body's values.
fn check_modern_headers(
    headers: &HeaderMap,
    request: &Request,
    head: &ParamsHead<'_>,
    version: &str,
) -> Result<(), McpError> {
    let mismatch = |what: String| Err(McpError::HeaderMismatch(what));
    // A proxy might read another copy than this check: each may be sent once (each found
    // once, here, and its one value kept).
    let once = |name: &HeaderName| {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        match values.next() {
            Some(_) => Err(McpError::HeaderMismatch(format!(
                "{name} is sent more than once"
            ))),
            None => Ok(first),
        }
    };
    let (version_header, method_header, name_header) = (
        once(&MCP_PROTOCOL_VERSION)?,
        once(&MCP_METHOD)?,
        once(&MCP_NAME)?,
    );
    match version_header.map(HeaderValue::to_str) {
        Some(Ok(v)) if v == version => {}
        Some(v) => {
            return mismatch(format!(
                "MCP-Protocol-Version {:?} differs from _meta's {version:?}",
                v.unwrap_or("(not text)")
            ));
        }
        None => return mismatch("MCP-Protocol-Version is required".into()),
    }
    match method_header {
        Some(value) if header_is(value, &request.method) == Some(true) => {}
        Some(value) => {
            return mismatch(format!(
                "Mcp-Method {:?} differs from the body's {:?}",
                decode_header_value(value).unwrap_or_default(),
                request.method
            ));
        }
        None => return mismatch("Mcp-Method is required".into()),
    }
    let task_id;
    let named = match request.method.as_str() {
        "tools/call" | "prompts/get" => head.name.as_deref(),
        "resources/read" => head.uri.as_deref(),
        // The tasks extension routes by the task's id.
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            task_id = request
                .params_as::<mcp_wire::tools::ForwardParams>()
                .ok()
                .and_then(|p| p.str("taskId").map(str::to_owned));
            task_id.as_deref()
        }
        _ => return Ok(()),
    };
    let body_name = named.unwrap_or_default();
    match name_header {
        Some(value) => match header_is(value, body_name) {
            Some(true) => Ok(()),
            Some(false) => mismatch(format!(
                "Mcp-Name {:?} differs from the body's {body_name:?}",
                decode_header_value(value).unwrap_or_default()
            )),
            None => mismatch("Mcp-Name is not a valid header value".into()),
        },
        None => mismatch("Mcp-Name is required".into()),
    }
}
