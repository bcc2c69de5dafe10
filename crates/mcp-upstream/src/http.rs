//! Modules reached over MCP Streamable HTTP. The gateway speaks the module's era: it probes
//! with `server/discover` (2026-07-28) and falls back to the `initialize` handshake
//! (2025-11-25) when the module does not answer it. Answers may be JSON or SSE. Plain
//! `http://` only for now (TLS termination in front of the module is the operator's).

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::sync::Mutex;

use std::sync::atomic::{AtomicI64, Ordering};

use mcp_wire::headers::param_header_values;
use mcp_wire::jsonrpc::{self, Message, RequestId};
use mcp_wire::mcp::{MODERN_VERSION, modern_meta};
use mcp_wire::tools::{ListParams, WithMeta};
use mcp_wire::{encode_header_value, sse};

use crate::rpc;
use crate::{Module, ModuleError, ToolCall};

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
    /// How long one call may take.
    pub call_timeout: Duration,
}

#[derive(Debug, Clone)]
enum Era {
    Modern,
    Legacy {
        session: Option<HeaderValue>,
        version: String,
    },
}

/// An HTTP module.
pub struct HttpModule {
    config: HttpConfig,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The module's era once known (read on every call, so a plain mutex around a clone).
    era: std::sync::Mutex<Option<Era>>,
    /// Held while finding out the era, so only one caller probes.
    connecting: Mutex<()>,
    next_id: AtomicI64,
}

impl HttpModule {
    /// A client for the module; it connects on first use.
    pub fn new(config: HttpConfig) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        HttpModule {
            config,
            client,
            era: std::sync::Mutex::new(None),
            connecting: Mutex::new(()),
            next_id: AtomicI64::new(0),
        }
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

    /// POSTs one message; returns the status, headers and (for a request) the answer to it.
    async fn post(
        &self,
        body: Vec<u8>,
        headers: HeaderMap,
        expect: Option<&RequestId>,
    ) -> Result<(StatusCode, HeaderMap, Option<Result<Value, Value>>), ModuleError> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.config.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream");
        for (name, value) in &self.config.headers {
            request = request.header(name, value);
        }
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        let bytes = body;
        let request = request
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| self.protocol(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| self.unavailable(e.to_string()))?;
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
                let answer = match jsonrpc::parse(&bytes) {
                    Ok(Message::Response { outcome, .. }) => Some(outcome),
                    _ => None,
                };
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
                    if let Ok(Message::Response { id: got, outcome }) =
                        jsonrpc::parse(event.as_bytes())
                        && &got == id
                    {
                        return Ok((parts.status, parts.headers, Some(outcome)));
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

    /// Finds out the module's era (once).
    async fn era(&self) -> Result<Era, ModuleError> {
        if let Some(known) = self.known_era() {
            return Ok(known);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(known) = self.known_era() {
            return Ok(known);
        }
        let id = self.next_id();
        let mut params = ListParams::default();
        params.add_meta(modern_meta());
        let discover = jsonrpc::request_bytes(&id, "server/discover", &params);
        let mut headers = HeaderMap::new();
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_static(MODERN_VERSION),
        );
        headers.insert("mcp-method", HeaderValue::from_static("server/discover"));
        let (_, _, answer) = self.post(discover, headers, Some(&id)).await?;
        let modern = matches!(&answer, Some(Ok(result)) if result
            .get("supportedVersions")
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION)));
        let found = if modern {
            Era::Modern
        } else {
            self.handshake().await?
        };
        tracing::info!(module = %self.config.name, era = ?found, "http module connected");
        *self
            .era
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(found.clone());
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
        let (status, headers, answer) = self.post(init, HeaderMap::new(), Some(&id)).await?;
        let result = match answer {
            Some(outcome) => rpc::answer(&self.config.name, outcome)?,
            None => {
                return Err(self.protocol(format!("initialize answered {status} without a result")));
            }
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(rpc::UPSTREAM_LEGACY_VERSION)
            .to_owned();
        let session = headers.get("mcp-session-id").cloned();
        let mut follow = HeaderMap::new();
        if let Some(session) = &session {
            follow.insert("mcp-session-id", session.clone());
        }
        if let Ok(v) = HeaderValue::from_str(&version) {
            follow.insert("mcp-protocol-version", v);
        }
        let initialized = jsonrpc::notification_bytes::<Value>("notifications/initialized", None);
        self.post(initialized, follow, None).await?;
        Ok(Era::Legacy { session, version })
    }

    /// Sends a request in the module's era; a legacy session the module forgot (404) is
    /// re-established once. `name` and `mirrored` are a modern request's `Mcp-Name` and
    /// `Mcp-Param-*` headers.
    async fn request<P: WithMeta + Send>(
        &self,
        method: &str,
        mut params: P,
        name: Option<&str>,
        mirrored: &[(HeaderName, HeaderValue)],
    ) -> Result<Value, ModuleError> {
        for attempt in 0..2 {
            let era = self.era().await?;
            let id = self.next_id();
            let mut headers = HeaderMap::new();
            match &era {
                Era::Modern => {
                    // Idempotent, so a retry may apply it again.
                    params.add_meta(modern_meta());
                    headers.insert(
                        "mcp-protocol-version",
                        HeaderValue::from_static(MODERN_VERSION),
                    );
                    headers.insert(
                        "mcp-method",
                        HeaderValue::from_str(method).map_err(|e| self.protocol(e.to_string()))?,
                    );
                    if let Some(name) = name {
                        headers.insert("mcp-name", encode_header_value(name));
                    }
                    for (header, value) in mirrored {
                        headers.insert(header.clone(), value.clone());
                    }
                }
                Era::Legacy { session, version } => {
                    if let Some(session) = session {
                        headers.insert("mcp-session-id", session.clone());
                    }
                    if let Ok(v) = HeaderValue::from_str(version) {
                        headers.insert("mcp-protocol-version", v);
                    }
                }
            }
            let body = jsonrpc::request_bytes(&id, method, &params);
            let (status, _, answer) = self.post(body, headers, Some(&id)).await?;
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

#[async_trait]
impl Module for HttpModule {
    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError> {
        rpc::list_all_tools(&self.config.name, |params| {
            Box::pin(self.request("tools/list", params, None, &[]))
        })
        .await
    }

    async fn call_tool(&self, call: ToolCall<'_>) -> Result<Value, ModuleError> {
        let name = call.params.name.clone();
        let mirrored = param_header_values(call.mirrored, call.params.arguments.as_ref());
        let mut result = self
            .request("tools/call", call.params, Some(&name), &mirrored)
            .await?;
        // The module's era is the module's business: downstream gets a plain result.
        if let Some(map) = result.as_object_mut() {
            match map.get("resultType").and_then(Value::as_str) {
                None => {}
                Some("complete") => {
                    map.remove("resultType");
                }
                Some(other) => {
                    return Err(self.protocol(format!(
                        "the module answered with resultType {other:?}; the gateway does not bridge module input requests yet"
                    )));
                }
            }
        }
        Ok(result)
    }
}
