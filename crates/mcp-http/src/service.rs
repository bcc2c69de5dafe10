//! The HTTP service: `POST/GET/DELETE /mcp` (both protocol eras on one endpoint), the REST API
//! under `/v1/mcp/elicitations`, and `/healthz`. Origin check, body limit and authentication
//! happen here, before anything else reads the request.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{Map, Value, json};

use crate::ask;
use crate::auth::{Auth, Principal, SCOPE_TOOLS_CALL};
use crate::error::{Era, McpError};
use crate::gateway::{CallOutcome, Gateway};
use crate::jsonrpc::{self, Message, Request as RpcRequest};
use crate::sessions::Sessions;
use crate::state::RequestStates;
use crate::streams::StreamSlots;
use crate::wire::{
    self, LEGACY_VERSIONS, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSION,
};
use crate::{rest, sse};

/// The response body type of the service.
pub type Body = BoxBody<Bytes, Infallible>;

/// Limits and checks of the HTTP layer.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Largest request body, in bytes (larger: 413).
    pub body_limit: usize,
    /// The whole request body must arrive within this (else 408), so a client that
    /// announces a body and sends nothing cannot hold its connection.
    pub body_read_timeout: Duration,
    /// Origins allowed besides loopback ones (`http://localhost:*`, `http://127.0.0.1:*`,
    /// `http://[::1]:*`), e.g. `https://console.example.com`. Requests without `Origin`
    /// (non-browser clients) are allowed.
    pub allowed_origins: Vec<String>,
    /// Host names (without port) accepted besides loopback ones when auth is `none`, e.g.
    /// `gateway.internal`. With auth `none`, a request whose `Host` is anything else gets
    /// 421 (DNS-rebinding protection: a browser sends no `Origin` on same-origin GETs).
    pub allowed_hosts: Vec<String>,
    /// Legacy sessions end after this long without a request.
    pub session_idle_timeout: Duration,
    /// Most legacy sessions at once.
    pub max_sessions: usize,
    /// Most long-lived SSE streams (a legacy session's confirmation stream) one caller may
    /// hold open; beyond it, a gated call gets the held result instead of a stream.
    pub max_streams_per_caller: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            body_limit: 4 * 1024 * 1024,
            body_read_timeout: Duration::from_secs(30),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            session_idle_timeout: Duration::from_secs(30 * 60),
            max_sessions: 10_000,
            max_streams_per_caller: 16,
        }
    }
}

/// The gateway's HTTP service.
pub struct McpService {
    gateway: Arc<Gateway>,
    auth: Auth,
    sessions: Sessions,
    config: ServiceConfig,
    states: RequestStates,
    answers: Arc<ask::PendingAnswers>,
    streams: StreamSlots,
}

/// What a request handler answers with.
enum Reply {
    /// A JSON-RPC result (and, for `initialize`, the new session's id).
    Result(Value, Option<String>),
    /// A response already built (an SSE stream that asks the person).
    Stream(Response<Body>),
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)).boxed())
        .expect("a static response is valid")
}

fn empty(status: StatusCode) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::new()).boxed())
        .expect("a static response is valid")
}

fn is_loopback_origin(origin: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|authority| is_loopback_host(host_name(authority)))
}

/// The host name of a `Host` header value, without its port (`[::1]` keeps its brackets).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.split(':').next().unwrap_or(host)
}

fn is_loopback_host(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name == "[::1]"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `tools/list` is one page (the gateway issues no `nextCursor`), so any `cursor` is one the
/// gateway never gave out: `-32602`, as the spec asks for an invalid cursor.
fn refuse_cursor(params: Option<&Map<String, Value>>) -> Result<(), McpError> {
    match params.and_then(|p| p.get("cursor")) {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(McpError::InvalidParams(
            "invalid cursor: this list has a single page".into(),
        )),
    }
}

/// Headers added to an error response: the auth challenge for 401 and 403.
fn error_headers(error: &McpError, response: &mut Response<Body>) {
    let challenge = match error {
        McpError::Unauthorized {
            invalid_token: true,
        } => Some("Bearer realm=\"mcp-gateway\", error=\"invalid_token\"".to_owned()),
        McpError::Unauthorized {
            invalid_token: false,
        } => Some("Bearer realm=\"mcp-gateway\"".to_owned()),
        McpError::Forbidden { scope } => Some(format!(
            "Bearer realm=\"mcp-gateway\", error=\"insufficient_scope\", scope=\"{scope}\""
        )),
        _ => None,
    };
    if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    if matches!(error, McpError::MethodNotAllowed) {
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    }
}

/// A JSON-RPC error response.
fn rpc_error(
    error: &McpError,
    id: Option<&jsonrpc::RequestId>,
    era: Option<Era>,
) -> Response<Body> {
    let mut response = json_response(error.status(era), &jsonrpc::error(id, error));
    error_headers(error, &mut response);
    response
}

/// A problem+json error response.
fn problem(error: &McpError) -> Response<Body> {
    let allow_rest = matches!(error, McpError::MethodNotAllowed);
    let body = serde_json::to_vec(&error.problem()).unwrap_or_default();
    let mut response = Response::builder()
        .status(error.status(None))
        .header(header::CONTENT_TYPE, "application/problem+json")
        .body(Full::new(Bytes::from(body)).boxed())
        .expect("a static response is valid");
    error_headers(error, &mut response);
    if allow_rest {
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
    }
    response
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Whether the client takes JSON (else it gets a one-event SSE stream).
fn wants_json(headers: &HeaderMap) -> bool {
    let accept = header_text(headers, "accept").unwrap_or_default();
    accept.is_empty()
        || accept.contains("application/json")
        || accept.contains("*/*")
        || !accept.contains("text/event-stream")
}

/// A JSON-RPC success, as JSON or as SSE according to `Accept`.
fn rpc_result(headers: &HeaderMap, id: &jsonrpc::RequestId, result: Value) -> Response<Body> {
    let message = jsonrpc::result(id, result);
    if wants_json(headers) {
        return json_response(StatusCode::OK, &message);
    }
    let text = serde_json::to_string(&message).unwrap_or_default();
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Full::new(sse::event(&text)).boxed())
        .expect("a static response is valid")
}

impl McpService {
    /// The service.
    pub fn new(gateway: Arc<Gateway>, auth: Auth, config: ServiceConfig) -> Self {
        let sessions = Sessions::new(config.session_idle_timeout, config.max_sessions);
        let streams = StreamSlots::new(config.max_streams_per_caller);
        McpService {
            streams,
            gateway,
            auth,
            sessions,
            config,
            states: RequestStates::ephemeral(),
            answers: Arc::default(),
        }
    }

    /// Uses `states` for multi round-trip `requestState`s (instances that share a store must
    /// share the key; the default is a random per-process key).
    pub fn with_request_states(mut self, states: RequestStates) -> Self {
        self.states = states;
        self
    }

    /// Long-lived SSE streams `caller` holds open now.
    pub fn open_streams(&self, caller: &elicitation_store::Caller) -> usize {
        self.streams.open_for(caller)
    }

    fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        match headers.get(header::ORIGIN).map(|v| v.to_str()) {
            None => true,
            Some(Ok(origin)) => {
                is_loopback_origin(origin)
                    || self.config.allowed_origins.iter().any(|o| o == origin)
            }
            Some(Err(_)) => false,
        }
    }

    /// With auth `none`, only loopback host names and the configured ones are served.
    fn host_allowed(&self, headers: &HeaderMap, uri: &http::Uri) -> bool {
        if !matches!(self.auth, Auth::None(_)) {
            return true;
        }
        let host = match headers.get(header::HOST) {
            Some(value) => match value.to_str() {
                Ok(host) => host,
                Err(_) => return false,
            },
            None => match uri.host() {
                Some(host) => host,
                None => return false,
            },
        };
        let name = host_name(host.trim());
        is_loopback_host(name)
            || self
                .config
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(name))
    }

    /// Serves one request. Never fails: every error becomes a response.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().to_owned();
        let is_rest = path == rest::PREFIX || path.starts_with(&format!("{}/", rest::PREFIX));
        let fail = |error: McpError| {
            if is_rest {
                problem(&error)
            } else {
                rpc_error(&error, None, None)
            }
        };
        if !self.host_allowed(&parts.headers, &parts.uri) {
            return fail(McpError::BadHost);
        }
        if path == "/healthz" {
            return json_response(StatusCode::OK, &json!({"status": "ok"}));
        }
        if path != "/mcp" && !is_rest {
            return fail(McpError::NotFound);
        }
        if !self.origin_allowed(&parts.headers) {
            return fail(McpError::BadOrigin);
        }
        let principal = match self.auth.authenticate(&parts.headers) {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let collect = Limited::new(body, self.config.body_limit).collect();
        let Ok(collected) = tokio::time::timeout(self.config.body_read_timeout, collect).await
        else {
            return fail(McpError::BodyTimeout);
        };
        let bytes = match collected {
            Ok(collected) => collected.to_bytes(),
            Err(e)
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return fail(McpError::PayloadTooLarge {
                    limit: self.config.body_limit,
                });
            }
            Err(e) => return fail(McpError::BadBody(format!("reading the body failed: {e}"))),
        };
        if is_rest {
            let request = rest::RestRequest {
                method: &parts.method,
                rest: &path[rest::PREFIX.len()..],
                query: parts.uri.query(),
                body: &bytes,
            };
            return match rest::handle(&self.gateway, &principal, request).await {
                Ok((status, body)) => json_response(status, &body),
                Err(e) => problem(&e),
            };
        }
        match parts.method {
            Method::POST => self.post(&parts.headers, &principal, &bytes).await,
            Method::DELETE => match header_text(&parts.headers, "mcp-session-id") {
                Some(id) => match self.sessions.remove(&id, &principal.caller) {
                    Ok(()) => empty(StatusCode::OK),
                    Err(e) => rpc_error(&e, None, Some(Era::Legacy)),
                },
                None => rpc_error(&McpError::MissingSession, None, Some(Era::Legacy)),
            },
            // No server-initiated stream (yet): the spec's answer is 405.
            _ => rpc_error(&McpError::MethodNotAllowed, None, None),
        }
    }

    async fn post(
        &self,
        headers: &HeaderMap,
        principal: &Principal,
        bytes: &[u8],
    ) -> Response<Body> {
        let message = match jsonrpc::parse(bytes) {
            Ok(m) => m,
            Err((id, e)) => return rpc_error(&e, id.as_ref(), None),
        };
        let mut request = match message {
            Message::Request(request) => request,
            Message::Notification { params, .. } => {
                // Notifications are accepted (202); in a legacy session the session must exist.
                if let Some(id) = header_text(headers, "mcp-session-id") {
                    if let Err(e) = self.sessions.touch(&id, &principal.caller) {
                        return rpc_error(&e, None, Some(Era::Legacy));
                    }
                } else if params
                    .as_ref()
                    .and_then(|p| p.get("_meta"))
                    .and_then(|m| m.get(META_PROTOCOL_VERSION))
                    .is_none()
                    && header_text(headers, "mcp-protocol-version").as_deref()
                        != Some(MODERN_VERSION)
                {
                    return rpc_error(&McpError::MissingSession, None, Some(Era::Legacy));
                }
                return empty(StatusCode::ACCEPTED);
            }
            // An answer to a request the gateway sent (elicitation/create on a legacy stream).
            Message::Response { id, outcome } => {
                let Some(session) = header_text(headers, "mcp-session-id") else {
                    return rpc_error(&McpError::MissingSession, None, Some(Era::Legacy));
                };
                if let Err(e) = self.sessions.touch(&session, &principal.caller) {
                    return rpc_error(&e, None, Some(Era::Legacy));
                }
                if let Err(e) = principal.require(crate::auth::SCOPE_RESPOND) {
                    return rpc_error(&e, None, Some(Era::Legacy));
                }
                if !self.answers.deliver(&session, &id, outcome) {
                    tracing::debug!(
                        ?id,
                        "an answer nobody waits for (late, or unknown); ignored"
                    );
                }
                return empty(StatusCode::ACCEPTED);
            }
        };
        let modern_meta = request
            .params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_PROTOCOL_VERSION))
            .is_some();
        let header_version = header_text(headers, "mcp-protocol-version");
        let era = if request.method == "initialize" || headers.contains_key("mcp-session-id") {
            Era::Legacy
        } else if modern_meta
            || header_version
                .as_deref()
                .is_some_and(|v| !LEGACY_VERSIONS.contains(&v))
        {
            Era::Modern
        } else {
            Era::Legacy
        };
        let outcome = match era {
            Era::Legacy => self.legacy(headers, principal, &mut request).await,
            Era::Modern => self.modern(headers, principal, &mut request).await,
        };
        match outcome {
            Ok(Reply::Stream(response)) => response,
            Ok(Reply::Result(result, session)) => {
                let mut response = rpc_result(headers, &request.id, result);
                if let Some(session) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
                    response.headers_mut().insert("mcp-session-id", session);
                }
                response
            }
            Err(e) => rpc_error(&e, Some(&request.id), Some(era)),
        }
    }

    /// A legacy request: `initialize` opens a session; everything else needs one.
    async fn legacy(
        &self,
        headers: &HeaderMap,
        principal: &Principal,
        request: &mut RpcRequest,
    ) -> Result<Reply, McpError> {
        if request.method == "initialize" {
            let params = request.params_object()?;
            let requested = params
                .get("protocolVersion")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    McpError::InvalidParams("initialize needs protocolVersion".into())
                })?;
            let version = LEGACY_VERSIONS
                .iter()
                .copied()
                .find(|v| *v == requested)
                .unwrap_or(LEGACY_VERSIONS[0]);
            let can_elicit = ask::can_elicit_form(params.get("capabilities"));
            let session = self
                .sessions
                .create(&principal.caller, version, can_elicit)?;
            return Ok(Reply::Result(
                wire::initialize_result(version),
                Some(session),
            ));
        }
        let session_id = header_text(headers, "mcp-session-id").ok_or(McpError::MissingSession)?;
        let session = self.sessions.touch(&session_id, &principal.caller)?;
        if let Some(version) = header_text(headers, "mcp-protocol-version")
            && !LEGACY_VERSIONS.contains(&version.as_str())
        {
            return Err(McpError::InvalidRequest(format!(
                "unsupported MCP-Protocol-Version {version:?} in a legacy session"
            )));
        }
        let result = match request.method.as_str() {
            "ping" => json!({}),
            "tools/list" => {
                principal.require(SCOPE_TOOLS_CALL)?;
                refuse_cursor(request.params.as_ref().and_then(Value::as_object))?;
                json!({"tools": self.gateway.list_tools().await})
            }
            "tools/call" => {
                principal.require(SCOPE_TOOLS_CALL)?;
                let params = request.take_params()?;
                // Only a client that can be asked over the stream needs the params again.
                let kept =
                    (session.can_elicit && ask::may_answer(principal)).then(|| params.clone());
                match self.gateway.call_tool(principal, params).await? {
                    // Beyond the caller's stream cap, the held result (answered out of band).
                    CallOutcome::NeedsConfirmation(pending)
                        if pending.askable_natively
                            && let Some(params) = kept
                            && let Some(slot) = self.streams.try_open(&principal.caller) =>
                    {
                        let context = ask::StreamContext {
                            gateway: self.gateway.clone(),
                            answers: self.answers.clone(),
                            session: session_id,
                            version: session.version,
                            principal: principal.clone(),
                            request_id: request.id.clone(),
                            params,
                        };
                        return Ok(Reply::Stream(ask::stream_confirmation(
                            context,
                            pending.confirmation,
                            slot,
                        )));
                    }
                    outcome => outcome.into_result(),
                }
            }
            other => return Err(McpError::MethodNotFound(other.to_owned())),
        };
        Ok(Reply::Result(result, None))
    }

    /// A modern request: self-describing `_meta`, headers that must agree with the body.
    async fn modern(
        &self,
        headers: &HeaderMap,
        principal: &Principal,
        request: &mut RpcRequest,
    ) -> Result<Reply, McpError> {
        let params = request.take_params()?;
        let meta = params.get("_meta").and_then(Value::as_object);
        let can_elicit = ask::can_elicit_form(meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)))
            && ask::may_answer(principal);
        let version = meta
            .and_then(|m| m.get(META_PROTOCOL_VERSION))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                McpError::InvalidParams(format!("_meta[\"{META_PROTOCOL_VERSION}\"] is required"))
            })?;
        if !meta
            .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
            .is_some_and(Value::is_object)
        {
            return Err(McpError::InvalidParams(format!(
                "_meta[\"{META_CLIENT_CAPABILITIES}\"] is required"
            )));
        }
        if version != MODERN_VERSION {
            return Err(McpError::UnsupportedVersion {
                requested: version,
                supported: wire::supported_versions(),
            });
        }
        check_modern_headers(headers, request, &params, &version)?;
        let (result, cacheable) = match request.method.as_str() {
            "server/discover" => (wire::discover_result(), true),
            "tools/list" => {
                principal.require(SCOPE_TOOLS_CALL)?;
                refuse_cursor(Some(&params))?;
                (json!({"tools": self.gateway.list_tools().await}), true)
            }
            "tools/call" => {
                principal.require(SCOPE_TOOLS_CALL)?;
                let mrtr = ask::Mrtr {
                    gateway: &self.gateway,
                    states: &self.states,
                };
                (mrtr.call(principal, params, can_elicit).await?, false)
            }
            other => return Err(McpError::MethodNotFound(other.to_owned())),
        };
        Ok(Reply::Result(wire::modern_result(result, cacheable), None))
    }
}

/// The 2026-07-28 header rules: `MCP-Protocol-Version`, `Mcp-Method` and (for the methods
/// that name something) `Mcp-Name` must be present and equal to the body's values.
fn check_modern_headers(
    headers: &HeaderMap,
    request: &RpcRequest,
    params: &Map<String, Value>,
    version: &str,
) -> Result<(), McpError> {
    let mismatch = |what: String| Err(McpError::HeaderMismatch(what));
    match header_text(headers, "mcp-protocol-version") {
        Some(v) if v == version => {}
        Some(v) => {
            return mismatch(format!(
                "MCP-Protocol-Version {v:?} differs from _meta's {version:?}"
            ));
        }
        None => return mismatch("MCP-Protocol-Version is required".into()),
    }
    match headers
        .get("mcp-method")
        .and_then(wire::decode_header_value)
    {
        Some(m) if m == request.method => {}
        Some(m) => {
            return mismatch(format!(
                "Mcp-Method {m:?} differs from the body's {:?}",
                request.method
            ));
        }
        None => return mismatch("Mcp-Method is required".into()),
    }
    let named = match request.method.as_str() {
        "tools/call" | "prompts/get" => params.get("name"),
        "resources/read" => params.get("uri"),
        _ => return Ok(()),
    };
    let body_name = named.and_then(Value::as_str).unwrap_or_default();
    match headers.get("mcp-name").map(wire::decode_header_value) {
        Some(Some(n)) if n == body_name => Ok(()),
        Some(Some(n)) => mismatch(format!(
            "Mcp-Name {n:?} differs from the body's {body_name:?}"
        )),
        Some(None) => mismatch("Mcp-Name is not a valid header value".into()),
        None => mismatch("Mcp-Name is required".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_are_recognised_and_lookalikes_are_not() {
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
            "http://localhost",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "http://evil.example.com",
            "http://localhost.evil.com",
            "http://127.0.0.1.nip.io",
            "null",
            "file://",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }

    #[test]
    fn host_names_are_taken_without_their_port_and_only_loopback_ones_pass() {
        for (host, name) in [
            ("127.0.0.1:8080", "127.0.0.1"),
            ("[::1]:8080", "[::1]"),
            ("localhost", "localhost"),
            ("127.0.0.1@evil.example", "127.0.0.1@evil.example"),
        ] {
            assert_eq!(host_name(host), name, "{host}");
        }
        for ok in ["localhost", "LocalHost", "127.0.0.1", "127.9.9.9", "[::1]"] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "localhost.",
            "127.0.0.1@evil.example",
            "0.0.0.0",
            "[::ffff:127.0.0.1]",
            "",
            "10.0.0.1",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
