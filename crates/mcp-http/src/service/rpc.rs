//! `POST /mcp`: the body read within its limits, one message or a batch, each dispatched
//! by era.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use mcp_wire::jsonrpc::{self, ErrorId, Incoming, Message};
use mcp_wire::mcp::{self, BATCH_VERSION, LEGACY_VERSIONS, MODERN_VERSION};
use mcp_wire::tools::Routing;
use mcp_wire::{Era, EraSignals};

use super::{
    Body, Cancelled, MAX_BATCH, McpService, Reply, Streaming, header_text, too_many_bodies,
};
use crate::ask;
use mcp_auth::Principal;
use mcp_http_kit::error::McpError;
use mcp_http_kit::inflight::Sender;
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::response::{self, Surface};

impl McpService {
    /// The whole body, within the size limit and the read timeout, and within what its
    /// sender and the gateway may have in flight.
    pub(super) async fn read_body<B>(
        &self,
        body: B,
        sender: impl FnOnce() -> Sender,
    ) -> Result<Bytes, McpError>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.read_body_limited(body, self.config.body_limit, sender)
            .await
    }

    /// [`McpService::read_body`] within `limit` bytes. `sender` is asked for only when the
    /// body has to be waited for.
    pub(super) async fn read_body_limited<B>(
        &self,
        body: B,
        limit: usize,
        sender: impl FnOnce() -> Sender,
    ) -> Result<Bytes, McpError>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if body.size_hint().lower() > limit as u64 {
            return Err(McpError::PayloadTooLarge { limit });
        }
        let mut body = std::pin::pin!(body);
        // A body that is whole when first read (most are: a small body comes with its head)
        // is taken as it is: it holds nothing while it arrives, so it takes no share of
        // the senders' budget, and its bytes are not copied. (hyper tells the end of a body
        // of announced length exactly; a chunked body's end is told only later, so it is
        // always counted.)
        let first =
            match std::future::poll_fn(|cx| std::task::Poll::Ready(body.as_mut().poll_frame(cx)))
                .await
            {
                std::task::Poll::Ready(None) => return Ok(Bytes::new()),
                std::task::Poll::Ready(Some(frame)) => {
                    let frame = frame.map_err(|e| {
                        McpError::BadBody(format!("reading the body failed: {}", e.into()))
                    })?;
                    let data = frame.into_data().unwrap_or_default();
                    if data.len() > limit {
                        return Err(McpError::PayloadTooLarge { limit });
                    }
                    if body.is_end_stream() {
                        return Ok(data);
                    }
                    data
                }
                std::task::Poll::Pending => Bytes::new(),
            };
        // The bytes count against the sender's share while they arrive, and are given back
        // once the body is whole (or refused).
        let mut held = self.bodies.reserve(sender()).map_err(too_many_bodies)?;
        let read = async {
            held.grow(first.len()).map_err(too_many_bodies)?;
            let mut whole = bytes::BytesMut::from(first);
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| {
                    McpError::BadBody(format!("reading the body failed: {}", e.into()))
                })?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if whole.len() + data.len() > limit {
                    return Err(McpError::PayloadTooLarge { limit });
                }
                held.grow(data.len()).map_err(too_many_bodies)?;
                whole.extend_from_slice(&data);
            }
            Ok(whole.freeze())
        };
        match tokio::time::timeout(self.config.body_read_timeout, read).await {
            Ok(read) => read,
            Err(_) => Err(McpError::BodyTimeout),
        }
    }

    /// Whether an error whose request id could not be read is written with `"id": null`:
    /// for clients known to speak a version before 2025-11-25 (their session's, or their
    /// `MCP-Protocol-Version`).
    pub(super) fn null_id(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Principal,
    ) -> bool {
        let version = match header_text(headers, "mcp-session-id") {
            Some(id) => self
                .sessions
                .touch(&id, &principal.caller, snap.gateway.server_name())
                .ok()
                .map(|s| s.version().to_owned()),
            None => None,
        }
        .or_else(|| header_text(headers, "mcp-protocol-version"));
        version.is_some_and(|v| LEGACY_VERSIONS.contains(&v.as_str()) && mcp::null_id_on_errors(&v))
    }

    pub(super) async fn post(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        bytes: Bytes,
    ) -> Response<Body> {
        let unreadable = |id: Option<jsonrpc::RequestId>, e: jsonrpc::EnvelopeError| {
            let null_id = self.null_id(snap, headers, principal);
            response::error(
                &McpError::from(e),
                Surface::JsonRpc {
                    id: ErrorId::new(id.as_ref(), null_id),
                    era: None,
                },
            )
        };
        // What was read is owned by the messages: the body (which may be a slice of the
        // connection's read buffer, holding all of it) is let go before the call, which
        // may wait for a person for minutes.
        let incoming = jsonrpc::parse_incoming(&bytes);
        drop(bytes);
        match incoming {
            Err((id, e)) => unreadable(id, e),
            Ok(Incoming::Single(message)) => self.message(snap, headers, principal, message).await,
            // Boxed: a batch's future holds a request's, and every request would carry it.
            Ok(Incoming::Batch(items)) => {
                Box::pin(self.batch(snap, headers, principal, items)).await
            }
        }
    }

    /// A batch, which only 2025-03-26 sessions may send: each request answered in order
    /// (a gated call with the held result: no stream), notifications and responses taken.
    pub(super) async fn batch(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        items: Vec<Result<Message, jsonrpc::Unreadable>>,
    ) -> Response<Body> {
        let null_id = self.null_id(snap, headers, principal);
        let session = header_text(headers, "mcp-session-id").and_then(|id| {
            self.sessions
                .touch(&id, &principal.caller, snap.gateway.server_name())
                .ok()
        });
        if items.len() > MAX_BATCH {
            let error = McpError::InvalidRequest(format!(
                "a batch of {} messages; at most {MAX_BATCH} are accepted",
                items.len()
            ));
            return response::error(
                &error,
                Surface::JsonRpc {
                    id: ErrorId::new(None, null_id),
                    era: None,
                },
            );
        }
        if session.is_none_or(|s| s.version() != BATCH_VERSION) {
            let error = McpError::InvalidRequest(format!(
                "JSON-RPC batches are accepted only in {BATCH_VERSION} sessions"
            ));
            return response::error(
                &error,
                Surface::JsonRpc {
                    id: ErrorId::new(None, null_id),
                    era: None,
                },
            );
        }
        let mut answers: Vec<Vec<u8>> = Vec::new();
        for item in items {
            match item {
                Err((id, e)) => answers.push(jsonrpc::error_bytes(
                    ErrorId::new(id.as_ref(), true),
                    &McpError::from(e).to_error_object(),
                )),
                Ok(Message::Request(request)) if request.method == "initialize" => {
                    let error =
                        McpError::InvalidRequest("initialize must not be part of a batch".into());
                    answers.push(jsonrpc::error_bytes(
                        ErrorId::Known(&request.id),
                        &error.to_error_object(),
                    ));
                }
                Ok(Message::Request(mut request)) => {
                    let answer = match self
                        .legacy(
                            snap,
                            headers,
                            principal,
                            &mut request,
                            Streaming::NotInBatch,
                        )
                        .await
                    {
                        Ok(Reply::Result(result, _)) => {
                            jsonrpc::result_body_bytes(&request.id, &result)
                        }
                        Ok(Reply::Stream(_)) => jsonrpc::error_bytes(
                            ErrorId::Known(&request.id),
                            &McpError::Internal("a stream inside a batch".into()).to_error_object(),
                        ),
                        Err(e) => {
                            jsonrpc::error_bytes(ErrorId::Known(&request.id), &e.to_error_object())
                        }
                    };
                    answers.push(answer);
                }
                Ok(other) => {
                    // Notifications and responses answer nothing; a failure to take one
                    // is not the batch's answer either.
                    let _ = self.message(snap, headers, principal, other).await;
                }
            }
        }
        if answers.is_empty() {
            return response::empty(StatusCode::ACCEPTED);
        }
        let mut body =
            Vec::with_capacity(answers.iter().map(Vec::len).sum::<usize>() + answers.len() + 1);
        body.push(b'[');
        for (i, answer) in answers.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(answer);
        }
        body.push(b']');
        response::rpc_message(headers, body)
    }

    /// One message.
    // Long: one match over the MCP methods, each arm short.
    pub(super) async fn message(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        message: Message,
    ) -> Response<Body> {
        let mut request = match message {
            Message::Request(request) => request,
            Message::Notification { method, params } => {
                // Notifications are accepted (202); in a legacy session the session must exist.
                let head = jsonrpc::ParamsHead::of(params.as_deref());
                let modern = head.meta_version().is_some()
                    || header_text(headers, "mcp-protocol-version").as_deref()
                        == Some(MODERN_VERSION);
                if let Some(id) = header_text(headers, "mcp-session-id").filter(|_| !modern) {
                    match self
                        .sessions
                        .touch(&id, &principal.caller, snap.gateway.server_name())
                    {
                        Err(e) => return response::rpc_error(&e, None, Some(Era::Legacy)),
                        Ok(session) if method == "notifications/cancelled" => {
                            let cancelled = params
                                .as_ref()
                                .and_then(|p| serde_json::from_str::<Cancelled>(p.0.get()).ok());
                            if let Some(cancelled) = cancelled {
                                session.channel().cancel(&cancelled.request_id);
                            }
                        }
                        Ok(_) => {}
                    }
                } else if !modern {
                    return response::rpc_error(&McpError::MissingSession, None, Some(Era::Legacy));
                }
                return response::empty(StatusCode::ACCEPTED);
            }
            // An answer to a request the gateway sent (elicitation/create on a legacy stream).
            Message::Response { id, outcome } => {
                let Some(session) = header_text(headers, "mcp-session-id") else {
                    return response::rpc_error(&McpError::MissingSession, None, Some(Era::Legacy));
                };
                if let Err(e) =
                    self.sessions
                        .touch(&session, &principal.caller, snap.gateway.server_name())
                {
                    return response::rpc_error(&e, None, Some(Era::Legacy));
                }
                let may_confirm = ask::may_answer(principal);
                let elsewhere = crate::answers::form_answer_to(&id).zip(outcome.clone().ok());
                match self.answers.deliver(&session, &id, outcome, may_confirm) {
                    crate::answers::Delivery::Delivered => {}
                    // Another instance asked (its stream waits on the store): recorded here.
                    crate::answers::Delivery::Unexpected
                        if let Some((confirmation, result)) = elsewhere =>
                    {
                        ask::record_from_elsewhere(&snap.gateway, principal, confirmation, result)
                            .await;
                    }
                    crate::answers::Delivery::Unexpected => tracing::debug!(
                        ?id,
                        "an answer nobody waits for (late, or unknown); ignored"
                    ),
                    crate::answers::Delivery::Forbidden => {
                        let e = McpError::Forbidden {
                            scope: mcp_auth::SCOPE_RESPOND,
                        };
                        return response::rpc_error(&e, None, Some(Era::Legacy));
                    }
                }
                return response::empty(StatusCode::ACCEPTED);
            }
        };
        let version_header = headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok());
        // The routing head is a pass over the params. A request whose header names a modern
        // version needs it; any other is looked at first, and one whose body cannot name a
        // version (a 2025-11-25 request's) is not read for it.
        let modern_header = version_header.is_some_and(|v| !LEGACY_VERSIONS.contains(&v));
        // A modern client's `tools/call` (its header names its version, as 2026-07-28
        // requires) is read with its head, in the same pass; a request whose params are only
        // looked at for a version (a 2025-11-25 client escapes non-ASCII text, and `\u` may
        // spell one) is not read further for it.
        let routing = if modern_header {
            Some(Routing::of(&request))
        } else {
            request
                .may_name_version()
                .then(|| Routing::head_of(&request))
        };
        let era = EraSignals {
            initialize: request.method == "initialize",
            modern_meta: routing
                .as_ref()
                .is_some_and(|r| r.head.meta_version().is_some()),
            session_header: headers.contains_key("mcp-session-id"),
            version_header,
        }
        .era();
        // One span per request, continuing the client's trace (nothing when tracing is off).
        let span = mcp_trace::request_span(headers, &request.method);
        if !span.is_disabled() {
            span.record(
                "mcp.era",
                match era {
                    Era::Legacy => "2025",
                    Era::Modern => "2026-07-28",
                },
            );
        }
        let outcome = match era {
            Era::Legacy => {
                tracing::Instrument::instrument(
                    self.legacy(snap, headers, principal, &mut request, Streaming::Allowed),
                    span.clone(),
                )
                .await
            }
            Era::Modern => {
                let routing = routing.unwrap_or_else(|| Routing::of(&request));
                tracing::Instrument::instrument(
                    self.modern(snap, headers, principal, &request, routing),
                    span.clone(),
                )
                .await
            }
        };
        if outcome.is_err() && !span.is_disabled() {
            span.record("otel.status_code", "ERROR");
        }
        match outcome {
            Ok(Reply::Stream(response)) => response,
            Ok(Reply::Result(result, session)) => {
                let message = jsonrpc::result_body_bytes(&request.id, &result);
                let mut response = response::rpc_message(headers, message);
                if let Some(session) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
                    response.headers_mut().insert("mcp-session-id", session);
                }
                // A call refused for a rate or a quota, answered in band, also says when to
                // try again the HTTP way.
                if let mcp_wire::ResultBody::Value(value) = &result
                    && let Some(secs) = mcp_wire::tools::retry_after(value)
                {
                    response
                        .headers_mut()
                        .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
                }
                response
            }
            Err(e) => response::rpc_error(&e, Some(&request.id), Some(era)),
        }
    }
}
