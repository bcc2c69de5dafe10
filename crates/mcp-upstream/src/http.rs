//! Modules reached over MCP Streamable HTTP. The gateway speaks the module's era: it probes
//! with `server/discover` (2026-07-28) and falls back to the `initialize` handshake
//! (2025-11-25) when the module does not answer it. Answers may be JSON or SSE. `https://`
//! through rustls ([`crate::tls`]), the same connections (`connections`) for every request
//! and the module's own stream; `http://` as the configuration allows it (loopback, or said
//! to be insecure).

mod connections;
mod module;
mod stream;

use connections::Connections;

use stream::{Feeds, Listener, listen};

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::{Mutex, broadcast};

use std::sync::atomic::{AtomicI64, Ordering};

use mcp_wire::headers::{
    MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, MCP_SESSION_ID, PARAM_HEADER_PREFIX,
};
use mcp_wire::jsonrpc::{self, ErrorObject, Message, RequestId};
use mcp_wire::mcp::{ClientCan, MODERN_VERSION, modern_meta};
use mcp_wire::tools::{ListParams, WithMeta};
use mcp_wire::{encode_header_value, sse};
use serde_json::value::RawValue;

use crate::credentials::SharedCredentials;
use crate::module::CallLink;
use crate::rpc;
use crate::{ModuleError, refuse_ask};

/// Most rounds of a module's `input_required` answered for one call.
const MAX_INPUT_ROUNDS: usize = 8;
/// Most input requests of one `input_required` round.
const MAX_INPUT_REQUESTS: usize = 4;

/// A module's `input_required` result: its input requests (key → `{method, params}`) and
/// its `requestState`; `None` for any other result.
fn input_required(result: &RawValue) -> Option<(serde_json::Map<String, Value>, Option<String>)> {
    // Most results are not: a cheap look first (an escaped spelling is read by `inspect`
    // later, and refused as a result that is not `complete`).
    if !result.get().contains("input_required")
        || mcp_wire::result::inspect(result).ok()?.as_deref() != Some("input_required")
    {
        return None;
    }
    let mut result: serde_json::Map<String, Value> = serde_json::from_str(result.get()).ok()?;
    let requests = match result.remove("inputRequests") {
        Some(Value::Object(requests)) => requests,
        _ => serde_json::Map::new(),
    };
    let state = result
        .remove("requestState")
        .and_then(|s| s.as_str().map(str::to_owned));
    Some((requests, state))
}

/// A message's params as a tree (a module's request or notification, read whole).
fn tree(params: Option<jsonrpc::RawJson>) -> Option<Value> {
    params.and_then(|p| serde_json::from_str(p.0.get()).ok())
}

/// A response's result as sent, or its error.
type RawOutcome = Result<Box<RawValue>, ErrorObject>;

/// Largest answer accepted from a module.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// How to reach an HTTP module.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The module's name.
    pub name: String,
    /// Its MCP endpoint, `http://host:port/path`.
    pub url: Uri,
    /// Extra headers on every request (for example `Authorization`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The TLS client of an `https://` module ([`crate::tls::client_config`]); `None`:
    /// the platform's roots, no client certificate.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// What every request carries as its `Authorization` ([`crate::credentials`]).
    pub credentials: Option<SharedCredentials>,
    /// How long one call may take.
    pub call_timeout: Duration,
    /// Which era the gateway speaks with it.
    pub era: ModuleEra,
}

/// Which era the gateway speaks with an HTTP module (`[[modules]] era`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ModuleEra {
    /// 2026-07-28 when `server/discover` offers it, else the 2025 handshake.
    #[default]
    Auto,
    /// 2026-07-28 only: a module whose `server/discover` does not offer it is down.
    Modern,
    /// The 2025 handshake (`initialize`), even with a module that offers 2026-07-28: its
    /// tools that ask the 2025 way (server-initiated `elicitation/create`,
    /// `sampling/createMessage`) can ask.
    Legacy,
}

#[derive(Debug, Clone)]
enum Era {
    Modern,
    Legacy {
        session: Option<HeaderValue>,
        version: HeaderValue,
    },
}

/// A module's client with its credentials: every request carries them, and a `401` is
/// answered once with fresh ones when they may help.
#[derive(Clone)]
struct Link {
    connections: Connections,
    credentials: Option<SharedCredentials>,
}

/// Why a request did not reach the module.
#[derive(Debug)]
enum SendError {
    /// The connection, TLS, or the credentials failed (why).
    Failed(String),
    /// The caller's own account at the module is not connected.
    NotConnected,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Failed(reason) => f.write_str(reason),
            SendError::NotConnected => f.write_str("the caller's account is not connected"),
        }
    }
}

impl std::error::Error for SendError {}

impl From<crate::credentials::CredentialError> for SendError {
    fn from(error: crate::credentials::CredentialError) -> Self {
        match error {
            crate::credentials::CredentialError::Failed(reason) => SendError::Failed(reason),
            crate::credentials::CredentialError::NotConnected { .. } => SendError::NotConnected,
        }
    }
}

impl Link {
    async fn request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, SendError> {
        let Some(credentials) = &self.credentials else {
            return self
                .connections
                .send(request)
                .await
                .map_err(SendError::Failed);
        };
        let (parts, body) = request.into_parts();
        let mut asked_again = false;
        loop {
            let used = credentials.authorization().await?;
            let mut request = Request::new(body.clone());
            *request.method_mut() = parts.method.clone();
            *request.uri_mut() = parts.uri.clone();
            *request.headers_mut() = parts.headers.clone();
            if let Some(value) = &used {
                request
                    .headers_mut()
                    .insert(header::AUTHORIZATION, value.clone());
            }
            let response = self
                .connections
                .send(request)
                .await
                .map_err(SendError::Failed)?;
            if response.status() != StatusCode::UNAUTHORIZED || asked_again {
                return Ok(response);
            }
            let challenge = response
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if !credentials
                .refused(used.as_ref(), challenge.as_deref())
                .await
            {
                return Ok(response);
            }
            asked_again = true;
        }
    }
}

/// The connections for `config`: its TLS configuration (or the platform's roots), HTTP/1.1.
fn module_connections(config: &HttpConfig) -> Result<Connections, String> {
    let tls = match &config.tls {
        Some(tls) => tls.clone(),
        None => crate::tls::client_config(&crate::tls::TlsFiles::default())?,
    };
    Ok(Connections::new(&tls, config.url.clone()))
}

/// A failure with every cause it carries: a TLS refusal is in the sources of the
/// connector's error.
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// An HTTP module.
pub struct HttpModule {
    config: HttpConfig,
    link: Link,
    /// The module's era once known (read on every call, so a plain mutex around a clone;
    /// shared with the task that listens to the module's own stream).
    era: Arc<std::sync::Mutex<Option<Era>>>,
    /// What the module's own stream says: its lists changed, a resource was updated.
    feeds: Feeds,
    /// The task that listens to the module's own stream, once the module was reached.
    listener: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Held while finding out the era, so only one caller probes.
    connecting: Mutex<()>,
    next_id: AtomicI64,
    /// How many sessions were established with it (a legacy session the module forgot is
    /// established anew): [`crate::Module::generation`].
    sessions: std::sync::atomic::AtomicU64,
    base_headers: HeaderMap,
    /// What the module said it offers.
    offers: rpc::Offers,
    /// The resources subscribed at a 2026-07-28 module, asked on its `subscriptions/listen`
    /// stream (which is reopened when they change), and what the module acknowledged.
    subscriptions: Subscriptions,
    /// Whether the module's own stream was answered once (open, or refused): what it sends
    /// there is only heard once it is open.
    stream_answered: tokio::sync::watch::Sender<bool>,
}

/// Resource subscriptions at a 2026-07-28 module: `resources/subscribe` is gone there, so
/// the URIs ride the listen stream's `resourceSubscriptions`.
#[derive(Clone)]
struct Subscriptions {
    /// The URIs wanted now, with a generation bumped on every change (the listener reopens
    /// its stream when it moves).
    wanted: tokio::sync::watch::Sender<(u64, std::collections::BTreeSet<String>)>,
    /// What the module acknowledged for which generation.
    acknowledged: tokio::sync::watch::Sender<Acknowledged>,
}

/// The state of a 2026-07-28 module's listen stream, as its subscribers wait on it.
#[derive(Debug, Clone, PartialEq)]
enum Acknowledged {
    /// Not (yet) acknowledged for the current generation.
    Pending,
    /// The module acknowledged generation `.0`, honouring these resource subscriptions.
    Honoured(u64, std::collections::BTreeSet<String>),
    /// The module offers no listen stream (`None`), or refused the one of generation `.0`.
    Refused(Option<u64>),
}

impl Default for Subscriptions {
    fn default() -> Self {
        Subscriptions {
            wanted: tokio::sync::watch::channel((0, std::collections::BTreeSet::new())).0,
            acknowledged: tokio::sync::watch::channel(Acknowledged::Pending).0,
        }
    }
}

/// Most resource subscriptions asked of one 2026-07-28 module session.
const MAX_MODULE_SUBSCRIPTIONS: usize = 1024;

/// How long a subscriber waits for a module to acknowledge its listen stream.
const ACKNOWLEDGE_TIMEOUT: Duration = Duration::from_secs(10);

impl HttpModule {
    /// A client for the module; it connects on first use. Fails only when the platform's
    /// certificate roots cannot be read and `config.tls` names none.
    pub fn new(config: HttpConfig) -> Result<Self, String> {
        let link = Link {
            connections: module_connections(&config)?,
            credentials: config.credentials.clone(),
        };
        let mut base_headers = HeaderMap::new();
        base_headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        base_headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        // Host as hyper would set it: the authority without any user information.
        let host = config.url.host().map(|host| match config.url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        });
        if let Some(host) = host.and_then(|h| HeaderValue::from_str(&h).ok()) {
            base_headers.insert(header::HOST, host);
        }
        for (name, value) in &config.headers {
            base_headers.append(name.clone(), value.clone());
        }
        Ok(HttpModule {
            offers: rpc::Offers::default(),
            subscriptions: Subscriptions::default(),
            stream_answered: tokio::sync::watch::channel(false).0,
            base_headers,
            config,
            link,
            era: Arc::default(),
            feeds: Feeds {
                changed: broadcast::channel(16).0,
                updated: broadcast::channel(64).0,
                logs: broadcast::channel(64).0,
            },
            listener: std::sync::Mutex::default(),
            connecting: Mutex::new(()),
            next_id: AtomicI64::new(0),
            sessions: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn next_id(&self) -> RequestId {
        RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn unavailable(&self, reason: impl Into<String>) -> ModuleError {
        ModuleError::Unavailable {
            module: self.config.name.clone(),
            reason: reason.into(),
        }
    }

    fn protocol(&self, reason: impl Into<String>) -> ModuleError {
        ModuleError::Protocol {
            module: self.config.name.clone(),
            reason: reason.into(),
        }
    }

    /// The headers of every request: content type, accept, `Host` (set here, once, so the
    /// client does not format it per request), the configured ones, and the trace context
    /// of the request being served (W3C `traceparent`, when tracing is on). Callers add
    /// theirs.
    fn headers(&self) -> HeaderMap {
        // Room for what a request adds (the protocol version, method and name, a session,
        // a trace context, the token) without growing the map.
        let mut headers = HeaderMap::with_capacity(self.base_headers.len() + 8);
        for (name, value) in &self.base_headers {
            headers.append(name.clone(), value.clone());
        }
        mcp_trace::inject(&mut headers);
        headers
    }

    /// POSTs one message with `headers` (from [`HttpModule::headers`]); returns the status,
    /// headers and (for a request) the answer to it.
    // Long: one HTTP exchange with its retries (a refused token, a lost session), which share
    // the request being built.
    async fn post(
        &self,
        body: Vec<u8>,
        headers: HeaderMap,
        expect: Option<&RequestId>,
        link: Option<&CallLink>,
    ) -> Result<(StatusCode, HeaderMap, Option<RawOutcome>), ModuleError> {
        // The module's own requests during this exchange are answered with these headers
        // (its session's), less those that describe the request being answered to, which
        // `answer_module` leaves out when it answers (rarely: not on every call).
        let call_headers = headers.clone();
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.config.url.clone();
        *request.headers_mut() = headers;
        let exchange = async {
            let response = self.link.request(request).await.map_err(|e| match e {
                SendError::NotConnected => ModuleError::NotConnected {
                    module: self.config.name.clone(),
                },
                SendError::Failed(reason) => self.unavailable(reason),
            })?;
            let (parts, mut body) = response.into_parts();
            let Some(id) = expect else {
                return Ok((parts.status, parts.headers, None));
            };
            let is_sse = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            if !is_sse {
                let bytes = http_body_util::Limited::new(body, MAX_ANSWER_BYTES)
                    .collect()
                    .await
                    .map_err(|e| self.protocol(format!("reading the answer: {e}")))?
                    .to_bytes();
                if bytes.is_empty() {
                    return Ok((parts.status, parts.headers, None));
                }
                let answer = jsonrpc::parse_response(&bytes).map(|r| r.outcome);
                return Ok((parts.status, parts.headers, answer));
            }
            // SSE: read events until the one that answers our id.
            let mut parser = sse::Parser::default();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| ModuleError::Failed {
                    module: self.config.name.clone(),
                    reason: e.to_string(),
                })?;
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                for event in parser
                    .feed(data)
                    .map_err(|e| self.protocol(e.to_string()))?
                {
                    if let Some(response) = jsonrpc::parse_response(event.as_bytes()) {
                        if &response.id == id {
                            return Ok((parts.status, parts.headers, Some(response.outcome)));
                        }
                        continue;
                    }
                    match jsonrpc::parse(event.as_bytes()) {
                        // The module asks something while it handles the call: its client
                        // answers, or the gateway does; never left waiting.
                        Ok(Message::Request(asked)) => {
                            let answer = match link {
                                Some(link) => link.ask(&asked.method, tree(asked.params)).await,
                                None => refuse_ask(&asked.method),
                            };
                            // Boxed: rare, and the exchange's future would carry its room.
                            Box::pin(self.answer_module(
                                &call_headers,
                                &asked.id,
                                &asked.method,
                                answer,
                            ))
                            .await;
                        }
                        // On the call's own stream, a notification is about the call.
                        Ok(Message::Notification { method, params }) => {
                            if let Some(link) = link {
                                link.notification(&method, tree(params));
                            }
                        }
                        _ => {}
                    }
                }
            }
            Err(ModuleError::Failed {
                module: self.config.name.clone(),
                reason: "the stream ended without an answer".into(),
            })
        };
        tokio::time::timeout(self.config.call_timeout, exchange)
            .await
            .map_err(|_| ModuleError::Timeout {
                module: self.config.name.clone(),
                seconds: self.config.call_timeout.as_secs(),
            })?
    }

    /// POSTs the answer to a request the module sent on a call's stream, with the headers of
    /// the call (`call_headers`: its session's) less those that describe the call itself
    /// (its method, name and mirrored parameters).
    async fn answer_module(
        &self,
        call_headers: &HeaderMap,
        id: &RequestId,
        method: &str,
        answer: Result<Value, ErrorObject>,
    ) {
        let answer = match answer {
            Ok(result) => jsonrpc::result_bytes(id, &result),
            Err(error) => jsonrpc::error_bytes(jsonrpc::ErrorId::Known(id), &error),
        };
        let mut request = Request::new(Full::new(Bytes::from(answer)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.config.url.clone();
        let mut headers = call_headers.clone();
        headers.remove(MCP_METHOD);
        headers.remove(MCP_NAME);
        let mirrored: Vec<HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with(PARAM_HEADER_PREFIX))
            .cloned()
            .collect();
        for name in mirrored {
            headers.remove(name);
        }
        *request.headers_mut() = headers;
        match tokio::time::timeout(self.config.call_timeout, self.link.request(request)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(module = %self.config.name, error = %e, method, "could not answer the module's request");
            }
            Err(_) => {
                tracing::warn!(module = %self.config.name, method, "the module did not take the answer to its request in time");
            }
        }
    }

    /// Finds out the module's era (once).
    async fn era(&self) -> Result<Era, ModuleError> {
        if let Some(known) = self.known_era() {
            return Ok(known);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(known) = self.known_era() {
            return Ok(known);
        }
        let found = if self.config.era == ModuleEra::Legacy {
            self.handshake().await?
        } else {
            let id = self.next_id();
            let mut params = ListParams::default();
            params.add_meta(modern_meta());
            let discover = jsonrpc::request_bytes(&id, "server/discover", &params);
            let mut headers = self.headers();
            headers.insert(
                MCP_PROTOCOL_VERSION,
                HeaderValue::from_static(MODERN_VERSION),
            );
            headers.insert(MCP_METHOD, HeaderValue::from_static("server/discover"));
            let (_, _, answer) = self.post(discover, headers, Some(&id), None).await?;
            let discovered = match &answer {
                Some(Ok(raw)) => serde_json::from_str::<Value>(raw.get()).ok(),
                _ => None,
            };
            let modern = matches!(&discovered, Some(result) if result
                .get("supportedVersions")
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION)));
            if modern {
                if let Some(discovered) = &discovered {
                    self.offers.record(discovered);
                }
                Era::Modern
            } else if self.config.era == ModuleEra::Modern {
                return Err(ModuleError::Unavailable {
                    module: self.config.name.clone(),
                    reason: "it does not offer 2026-07-28 (server/discover), and era = \"modern\""
                        .into(),
                });
            } else {
                self.handshake().await?
            }
        };
        tracing::info!(module = %self.config.name, era = ?found, "http module connected");
        *self
            .era
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(found.clone());
        {
            let mut listener = self
                .listener
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if listener.is_none() {
                *listener = Some(tokio::spawn(listen(Listener {
                    name: self.config.name.clone(),
                    url: self.config.url.clone(),
                    link: self.link.clone(),
                    // The module's own stream serves every caller: no caller's trace
                    // context on it.
                    headers: self.base_headers.clone(),
                    era: self.era.clone(),
                    feeds: self.feeds.clone(),
                    subscriptions: self.subscriptions.clone(),
                    answered: self.stream_answered.clone(),
                })));
            }
        }
        // A module tells a session's list changes and log messages on the session's own
        // stream, and a server drops what it cannot deliver: the first request waits (a
        // little) until that stream is open, so what it causes there is heard.
        let mut answered = self.stream_answered.subscribe();
        let _ = tokio::time::timeout(STREAM_OPEN_WAIT, answered.wait_for(|a| *a)).await;
        Ok(found)
    }

    fn known_era(&self) -> Option<Era> {
        self.era
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    async fn handshake(&self) -> Result<Era, ModuleError> {
        let id = self.next_id();
        let init = jsonrpc::request_bytes(&id, "initialize", &rpc::initialize_params());
        let (status, headers, answer) = self.post(init, self.headers(), Some(&id), None).await?;
        let result = match answer {
            Some(outcome) => {
                rpc::parse_result(&self.config.name, &rpc::answer(&self.config.name, outcome)?)?
            }
            None => {
                return Err(self.protocol(format!("initialize answered {status} without a result")));
            }
        };
        self.offers.record(&result);
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(rpc::UPSTREAM_LEGACY_VERSION)
            .to_owned();
        let session = headers.get("mcp-session-id").cloned();
        self.sessions.fetch_add(1, Ordering::Relaxed);
        let mut follow = self.headers();
        if let Some(session) = &session {
            follow.insert(MCP_SESSION_ID, session.clone());
        }
        let version = HeaderValue::from_str(&version)
            .unwrap_or(HeaderValue::from_static(rpc::UPSTREAM_LEGACY_VERSION));
        follow.insert(MCP_PROTOCOL_VERSION, version.clone());
        let initialized = jsonrpc::notification_bytes::<Value>("notifications/initialized", None);
        self.post(initialized, follow, None, None).await?;
        Ok(Era::Legacy { session, version })
    }

    /// Sends a request in the module's era; a legacy session the module forgot (404) is
    /// re-established once. `name` and `mirrored` are a modern request's `Mcp-Name` and
    /// `Mcp-Param-*` headers.
    async fn request<P: WithMeta + Send + Sync>(
        &self,
        method: &'static str,
        mut params: P,
        name: Option<&str>,
        mirrored: &[(HeaderName, HeaderValue)],
        link: Option<&CallLink>,
    ) -> rpc::Answer {
        self.request_with(method, &mut params, name, mirrored, link)
            .await
    }

    /// [`HttpModule::request`] with params the caller keeps (to send them again).
    async fn request_with<P: WithMeta + Send + Sync>(
        &self,
        method: &'static str,
        params: &mut P,
        name: Option<&str>,
        mirrored: &[(HeaderName, HeaderValue)],
        link: Option<&CallLink>,
    ) -> rpc::Answer {
        for attempt in 0..2 {
            // Found out once (boxed: the finding out is most of this future's size, and
            // every call's future would carry it).
            let era = match self.known_era() {
                Some(known) => known,
                None => Box::pin(self.era()).await?,
            };
            let id = self.next_id();
            let mut headers = self.headers();
            match &era {
                Era::Modern => {
                    // What the call's client can answer, declared before the envelope's
                    // own capabilities (the first map added wins a key): the module then
                    // asks nothing the client would refuse. Idempotent, so a retry may
                    // apply it again.
                    // A call whose client takes a task, and every request about a task,
                    // declares the tasks extension (a module answers neither otherwise).
                    let tasks = params.declares_tasks() || method.starts_with("tasks/");
                    let can = link.map_or_else(ClientCan::default, |link| {
                        let relay = &link.relay;
                        ClientCan {
                            elicitation: relay.answers("elicitation/create"),
                            sampling: relay.answers("sampling/createMessage"),
                            roots: relay.answers("roots/list"),
                            tasks: false,
                        }
                    });
                    if link.is_some() || tasks {
                        params
                            .add_meta(mcp_wire::mcp::capabilities_meta(ClientCan { tasks, ..can }));
                    }
                    params.add_meta(modern_meta());
                    if let Some(level) = link
                        .and_then(|l| l.relay.log_level())
                        .and_then(mcp_wire::mcp::log_level_meta)
                    {
                        params.add_meta(level);
                    }
                    headers.insert(
                        MCP_PROTOCOL_VERSION,
                        HeaderValue::from_static(MODERN_VERSION),
                    );
                    headers.insert(MCP_METHOD, HeaderValue::from_static(method));
                    if let Some(name) = name {
                        headers.insert(MCP_NAME, encode_header_value(name));
                    }
                    for (header, value) in mirrored {
                        headers.insert(header.clone(), value.clone());
                    }
                }
                Era::Legacy { session, version } => {
                    if let Some(session) = session {
                        headers.insert(MCP_SESSION_ID, session.clone());
                    }
                    headers.insert(MCP_PROTOCOL_VERSION, version.clone());
                }
            }
            let body = jsonrpc::request_bytes(&id, method, &params);
            let (status, _, answer) = self.post(body, headers, Some(&id), link).await?;
            if status == StatusCode::NOT_FOUND
                && matches!(
                    era,
                    Era::Legacy {
                        session: Some(_),
                        ..
                    }
                )
                && attempt == 0
            {
                *self
                    .era
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                continue;
            }
            return match answer {
                Some(outcome) => rpc::answer(&self.config.name, outcome),
                None => Err(self.protocol(format!(
                    "{method} answered HTTP {status} without a JSON-RPC answer"
                ))),
            };
        }
        Err(self.unavailable("the module keeps forgetting its session"))
    }
}

impl Drop for HttpModule {
    fn drop(&mut self) {
        if let Some(listener) = self
            .listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            listener.abort();
        }
    }
}

/// How long a module's first request waits for its own stream to open.
const STREAM_OPEN_WAIT: Duration = Duration::from_secs(2);
