//! The HTTP service: routing. `POST/DELETE /mcp` (both protocol eras on one endpoint; the
//! eras themselves are `legacy` and `modern`), the REST API under `/v1/mcp/elicitations`, and
//! `/healthz`. Origin and host checks, the body limit and authentication happen here, before
//! anything else reads the request; then the body is parsed once and dispatched by era.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elicitation_core::ElicitationId;
use elicitation_store::{Clock, SystemClock};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use mcp_wire::jsonrpc::{self, ErrorId, Incoming, Message};
use mcp_wire::mcp::{self, BATCH_VERSION, LEGACY_VERSIONS, MODERN_VERSION};
use mcp_wire::{Era, EraSignals, ResultBody};
use serde_json::{Value, json};

use crate::ask;
use crate::rest;
use crate::sessions::Sessions;
use crate::state::RequestStates;
use mcp_auth::{Auth, Principal, SCOPE_TOOLS_CALL};
use mcp_gate::Gateway;
use mcp_http_kit::audit::AuditFormat;
use mcp_http_kit::error::McpError;
use mcp_http_kit::inflight::{Over, Sender};
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::response::{self, Surface};
use mcp_http_kit::streams::StreamSlots;
use mcp_wire::CallToolParams;
use mcp_wire::tools::{ForwardParams, ListParams, list_page};

pub use mcp_http_kit::body::Body;

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
    /// A legacy session unused this long leaves this instance's memory (it opens again
    /// from its id if it comes back).
    pub session_idle_timeout: Duration,
    /// A legacy session ends this long after its `initialize`, however it is used.
    pub session_max_age: Duration,
    /// The key legacy session ids are sealed under: instances that share it serve each
    /// other's sessions (`None`: a random key, this process only).
    pub session_key: Option<crate::sessions::SessionKey>,
    /// Most legacy sessions at once.
    pub max_sessions: usize,
    /// Most long-lived SSE streams (a legacy session's confirmation stream) one caller may
    /// hold open; beyond it, a gated call gets the held result instead of a stream.
    pub max_streams_per_caller: usize,
    /// Most bytes of request bodies one caller (or everyone unauthenticated, together) may
    /// be sending at once; past it a body is refused with a retry (429).
    pub body_bytes_per_caller: usize,
    /// Most bytes of request bodies being received at once, all senders together.
    pub body_bytes_in_flight: usize,
    /// Whether the approvals page's cookie is `Secure` (the gateway is reached over TLS,
    /// directly or through a proxy).
    pub secure_cookies: bool,
    /// How the gate asks the person natively (`[gate] native`).
    pub native: ask::NativeMode,
    /// The gateway's address as people reach it (`https://gw.example.com`), for the
    /// approvals page's URLs; without it, the request's `Host` over `http`.
    pub public_url: Option<String>,
    /// Whether `/metrics` is served on this listener (to callers with the `metrics:read`
    /// scope); off when a separate operations listener serves it.
    pub metrics_on_main: bool,
    /// Where the HTTP side reads the time: sessions' and sign-ins' lifetimes, suspended
    /// bridge calls, reloads, the readiness cache (tests move it instead of sleeping).
    pub clock: Arc<dyn Clock>,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            body_limit: 4 * 1024 * 1024,
            body_read_timeout: Duration::from_secs(30),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            session_idle_timeout: Duration::from_secs(30 * 60),
            session_max_age: Duration::from_secs(24 * 3600),
            session_key: None,
            max_sessions: 10_000,
            max_streams_per_caller: 16,
            body_bytes_per_caller: 16 * 1024 * 1024,
            body_bytes_in_flight: 64 * 1024 * 1024,
            secure_cookies: false,
            native: ask::NativeMode::Auto,
            public_url: None,
            metrics_on_main: true,
            clock: Arc::new(SystemClock),
        }
    }
}

/// The gateway's HTTP service.
pub struct McpService {
    /// Swapped whole on a configuration reload; a request in flight keeps the one it began
    /// with.
    pub(crate) live: Arc<mcp_http_kit::live::Live>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) config: ServiceConfig,
    pub(crate) states: Arc<RequestStates>,
    pub(crate) answers: Arc<crate::answers::PendingAnswers>,
    pub(crate) streams: StreamSlots,
    /// The request bodies being received.
    bodies: mcp_http_kit::inflight::BodyBudget,
    pub(crate) bridges: Arc<crate::bridge::Bridges>,
    pub(crate) listeners: Arc<crate::listen::Listeners>,
    /// The approvals page.
    pub(crate) page: mcp_approvals::Page,
    /// Where uploaded files are kept (`None`: `file_upload` answers are refused on the page).
    pub(crate) uploads: Option<Arc<mcp_http_kit::uploads::Uploads>>,
    /// Answers clicked in Slack (`[[notify]] kind = "slack"` with a signing secret).
    slack: Option<Arc<mcp_notify::SlackActions>>,
    /// Set at shutdown: long-lived streams end.
    pub(crate) closing: tokio::sync::watch::Sender<bool>,
    /// The last readiness check (probes are answered from it for a second, so a flood of
    /// them costs the store one query a second).
    ready: tokio::sync::Mutex<Option<(std::time::Instant, Readiness)>>,
}

/// The address a request's connection comes from, put in its extensions by the server:
/// what an unauthenticated body counts against ([`Sender::anonymous`]).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddress(pub std::net::IpAddr);

/// Who sends an unauthenticated request's body: its connection's address.
fn anonymous(parts: &http::request::Parts) -> Sender {
    Sender::anonymous(parts.extensions.get::<PeerAddress>().map(|p| p.0))
}

/// A body refused for its sender's share or the gateway's.
fn too_many_bodies(over: Over) -> McpError {
    McpError::RateLimited {
        what: match over {
            Over::Sender => {
                "this sender is sending more request bodies at once than the gateway allows"
            }
            Over::Total => "the gateway is receiving as many request bodies as it holds at once",
        },
        retry_after: 1,
    }
}

/// `notifications/cancelled`'s params.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Cancelled {
    request_id: jsonrpc::RequestId,
}

/// Most messages in one batch (each may be a forwarded call).
const MAX_BATCH: usize = 100;

/// What a request handler answers with.
pub(crate) enum Reply {
    /// A JSON-RPC result (and, for `initialize`, the new session's id).
    Result(ResultBody, Option<String>),
    /// A response already built (an SSE stream that asks the person).
    Stream(Response<Body>),
}

/// Whether a request may be answered with a stream that asks the person (not inside a
/// batch, whose answers travel together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Streaming {
    Allowed,
    NotInBatch,
}

fn is_loopback_origin(origin: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .and_then(host_name)
        .is_some_and(is_loopback_host)
}

/// The host name of a `Host` header value (or an origin's authority), without its port
/// (`[::1]` keeps its brackets): `name` or `name:port`, the port 1 to 5 digits. Anything
/// else is no host at all (`None`): `localhost:18080.evil.example` is not `localhost`.
fn host_name(host: &str) -> Option<&str> {
    let split = if host.starts_with('[') {
        host.find(']')? + 1
    } else {
        host.find(':').unwrap_or(host.len())
    };
    let (name, port) = host.split_at(split);
    let port_ok = match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => {
            (1..=5).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
        }
    };
    (port_ok && !name.is_empty()).then_some(name)
}

fn is_loopback_host(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name == "[::1]"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl McpService {
    /// The methods both eras serve alike — the catalogs and what is routed by name, URI or
    /// reference: the result and whether it is a cacheable one (lists, `resources/read`);
    /// `None` for any other method.
    pub(crate) async fn catalog_method(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        request: &jsonrpc::Request,
    ) -> Option<Result<(ResultBody, bool), McpError>> {
        let list = |key: &str, items: Vec<Value>| -> Result<(ResultBody, bool), McpError> {
            let params: ListParams = request.params_as()?;
            let page = list_page(key, items, params.cursor.as_ref())
                .map_err(|e| McpError::InvalidParams(e.to_string()))?;
            Ok((page.into(), true))
        };
        let method = request.method.as_str();
        if !matches!(
            method,
            "tools/list"
                | "prompts/list"
                | "prompts/get"
                | "resources/list"
                | "resources/templates/list"
                | "resources/read"
                | "completion/complete"
        ) {
            return None;
        }
        if let Err(e) = principal.require(SCOPE_TOOLS_CALL) {
            return Some(Err(e.into()));
        }
        // What is forwarded to a module counts against the caller's call rate, as
        // `tools/call` does (the lists are answered from the catalog).
        if matches!(
            method,
            "prompts/get" | "resources/read" | "completion/complete"
        ) && let Err(e) = snap.gateway.take_call(
            &principal.caller,
            "this caller is sending requests faster than the gateway allows",
        ) {
            return Some(Err(e));
        }
        Some(match method {
            "tools/list" => list("tools", snap.gateway.list_tools().await),
            "prompts/list" => list("prompts", snap.gateway.list_prompts().await),
            "resources/list" => list("resources", snap.gateway.list_resources()),
            "resources/templates/list" => {
                list("resourceTemplates", snap.gateway.list_resource_templates())
            }
            "prompts/get" => match request.params_as::<CallToolParams>() {
                Ok(params) => snap
                    .gateway
                    .get_prompt(&principal.caller, params)
                    .await
                    .map(|r| (r, false)),
                Err(e) => Err(e.into()),
            },
            "resources/read" => match request.params_as::<ForwardParams>() {
                Ok(params) => snap
                    .gateway
                    .read_resource(&principal.caller, params)
                    .await
                    .map(|r| (r, true)),
                Err(e) => Err(e.into()),
            },
            _ => match request.params_as::<ForwardParams>() {
                Ok(params) => snap
                    .gateway
                    .complete(&principal.caller, params)
                    .await
                    .map(|r| (r, false)),
                Err(e) => Err(e.into()),
            },
        })
    }
}

/// Passes the catalog's changes and modules' resource updates to the sessions' streams
/// (for as long as the sessions exist).
fn notify_sessions(gateway: &Gateway, sessions: &Arc<Sessions>) {
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = gateway.catalog_changes();
    let weak = Arc::downgrade(sessions);
    tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(()) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            for list in ["tools", "prompts", "resources"] {
                let method = format!("notifications/{list}/list_changed");
                sessions.notify_all(&jsonrpc::notification_bytes::<Value>(&method, None));
            }
        }
    });
    // A caller's own module instance logging outside any call: to that caller's sessions.
    let mut logs = gateway.registry().instance_logs();
    let weak = Arc::downgrade(sessions);
    tokio::spawn(async move {
        loop {
            let (who, params) = match logs.recv().await {
                Ok(message) => message,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            };
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            let Some(rank) = params
                .get("level")
                .and_then(Value::as_str)
                .and_then(mcp_wire::mcp::log_level_rank)
            else {
                continue;
            };
            let message = jsonrpc::notification_bytes("notifications/message", Some(&params));
            sessions.notify_caller(&who, rank, &message);
        }
    });
    let mut updates = gateway.resource_updates();
    let weak = Arc::downgrade(sessions);
    tokio::spawn(async move {
        loop {
            let update = match updates.recv().await {
                Ok(update) => update,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            };
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            let message = jsonrpc::notification_bytes(
                "notifications/resources/updated",
                Some(&json!({"uri": update.uri})),
            );
            sessions.notify_subscribers(&update, &message);
        }
    });
}

/// Ready, or the reasons not.
type Readiness = Result<(), Vec<String>>;

/// Where Slack posts the buttons' clicks.
pub const SLACK_ACTIONS: &str = "/v1/notify/slack/actions";

/// How long `/readyz` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Applies what other instances tell about the sessions held here: a subscription made or
/// a log level set through them (for as long as the sessions exist); and the gate's own
/// notices (a tool definition decided elsewhere).
fn follow_other_instances(
    store: Arc<dyn elicitation_store::Fleet>,
    live: Arc<mcp_http_kit::live::Live>,
    sessions: Arc<Sessions>,
    listeners: Arc<crate::listen::Listeners>,
) {
    use crate::sessions::SessionEvent;
    use tokio::sync::broadcast::error::RecvError;
    let Some(mut told) = store.broadcasts() else {
        return;
    };
    let weak = Arc::downgrade(&sessions);
    drop(sessions);
    tokio::spawn(async move {
        loop {
            let message = match told.recv().await {
                Ok(message) => message,
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "notices from other instances were dropped");
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            if live.gateway().follow_fleet_notice(&message) {
                continue;
            }
            let Ok(event) = serde_json::from_str::<SessionEvent>(&message) else {
                continue;
            };
            match event {
                SessionEvent::Subscription { i, s, u, on } if i != sessions.instance() => {
                    let Some((id, session)) = sessions.by_hash(&s) else {
                        continue;
                    };
                    let gateway = live.gateway();
                    if session.channel.set_subscription(&u, on) != Ok(true)
                        || sessions.module_knows(&gateway, listeners.subscribed(&u), &u, &id)
                    {
                        continue;
                    }
                    if let Err(e) = gateway.subscribe_resource(session.caller(), &u, on).await {
                        tracing::info!(uri = %u, error = %e, "a subscription made on another instance could not be made here");
                    }
                }
                SessionEvent::LogLevel { i, s, r } if i != sessions.instance() => {
                    if let Some((id, _)) = sessions.by_hash(&s) {
                        sessions.set_log_level_here(&id, r);
                    }
                }
                _ => {}
            }
        }
    });
}

/// Tells the other instances sharing the store about a session (in the background; a
/// failure is logged: the other instances' streams then miss it).
pub(crate) fn tell_other_instances(
    store: &Arc<dyn elicitation_store::Fleet>,
    event: &crate::sessions::SessionEvent,
) {
    if store.broadcasts().is_none() {
        return;
    }
    let Ok(message) = serde_json::to_string(event) else {
        return;
    };
    let store = store.clone();
    tokio::spawn(async move {
        if let Err(e) = store.broadcast(&message).await {
            tracing::warn!(error = %e, "other instances could not be told about a session");
        }
    });
}

pub(crate) fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

impl McpService {
    /// The service.
    pub fn new(gateway: Arc<Gateway>, auth: Auth, config: ServiceConfig) -> Self {
        // Page sign-ins are sealed under keys of the same material as session ids.
        let web_keys = config.session_key.as_ref().map_or_else(
            || vec![mcp_auth::sealed::Sealer::random_key()],
            |k| k.0.clone(),
        );
        let sessions = match &config.session_key {
            Some(key) => Sessions::new(
                config.session_idle_timeout,
                config.session_max_age,
                config.max_sessions,
                &key.0,
            ),
            None => Sessions::ephemeral(
                config.session_idle_timeout,
                config.session_max_age,
                config.max_sessions,
            ),
        };
        let sessions = Arc::new(sessions.with_clock(config.clock.clone()));
        notify_sessions(&gateway, &sessions);
        sessions.follow_ends(gateway.fleet().clone());
        let live = Arc::new(mcp_http_kit::live::Live::new(
            gateway.clone(),
            auth,
            config.clock.clone(),
        ));
        let listeners: Arc<crate::listen::Listeners> = Arc::default();
        follow_other_instances(
            gateway.fleet().clone(),
            live.clone(),
            sessions.clone(),
            listeners.clone(),
        );
        let streams = StreamSlots::new(config.max_streams_per_caller);
        let closing = tokio::sync::watch::channel(false).0;
        let page = mcp_approvals::Page::new(mcp_approvals::PageParts {
            keys: web_keys,
            ended: sessions.ended(),
            streams: streams.clone(),
            closing: closing.subscribe(),
            secure_cookies: config.secure_cookies,
            max_streams_per_caller: config.max_streams_per_caller,
            clock: config.clock.clone(),
        });
        let bridges = Arc::new(crate::bridge::Bridges::new(config.clock.clone()));
        McpService {
            streams,
            bodies: mcp_http_kit::inflight::BodyBudget::new(
                config.body_bytes_per_caller,
                config.body_bytes_in_flight,
            ),
            live,
            sessions,
            config,
            states: Arc::new(RequestStates::ephemeral()),
            answers: Arc::default(),
            bridges,
            listeners,
            page,
            uploads: None,
            slack: None,
            closing,
            ready: tokio::sync::Mutex::new(None),
        }
    }

    /// The gateway requests are served with now.
    pub fn gateway(&self) -> Arc<Gateway> {
        self.live.gateway()
    }

    /// How requests are authenticated now.
    pub fn auth(&self) -> Arc<Auth> {
        self.live.auth()
    }

    /// A reloaded configuration: new requests are served by `gateway` and authenticated by
    /// `auth`; requests in flight finish with the ones they began with. Sessions' streams
    /// follow the new catalog, and are told that every list may have changed.
    pub fn reload(&self, gateway: Arc<Gateway>, auth: Auth) {
        notify_sessions(&gateway, &self.sessions);
        self.live.swap(gateway, auth);
        for list in ["tools", "prompts", "resources"] {
            let method = format!("notifications/{list}/list_changed");
            self.sessions
                .notify_all(&jsonrpc::notification_bytes::<Value>(&method, None));
        }
    }

    /// Uses `states` for multi round-trip `requestState`s (instances that share a store must
    /// share the key; the default is a random per-process key).
    pub fn with_request_states(mut self, states: RequestStates) -> Self {
        self.states = Arc::new(states);
        self
    }

    /// Keeps files answering `file_upload` elicitations in `uploads` (without it, the page
    /// refuses them).
    pub fn with_uploads(mut self, uploads: mcp_http_kit::uploads::Uploads) -> Self {
        let uploads = Arc::new(uploads);
        self.page.set_uploads(uploads.clone());
        self.uploads = Some(uploads);
        self
    }

    /// Takes answers clicked in Slack at [`SLACK_ACTIONS`], as `slack` verifies them.
    #[must_use]
    pub fn with_slack_actions(mut self, slack: mcp_notify::SlackActions) -> Self {
        self.slack = Some(Arc::new(slack));
        self
    }

    /// Signs people in to the approvals page through `sso` (besides tokens).
    pub fn with_sso(mut self, sso: mcp_approvals::oidc::Sso) -> Self {
        // Sign-ins on their way are sealed under the same material as page sign-ins.
        let keys = self.config.session_key.as_ref().map_or_else(
            || vec![mcp_auth::sealed::Sealer::random_key()],
            |k| k.0.clone(),
        );
        self.page.set_sso(Arc::new(
            sso.keyed(&keys).with_clock(self.config.clock.clone()),
        ));
        self
    }

    /// Removes the files kept for elicitations that expired or were cancelled (in the
    /// background; a failure is logged and the files stay until the next attempt or the
    /// store's retention).
    pub fn discard_uploads(&self, finished: impl IntoIterator<Item = ElicitationId>) {
        if let Some(uploads) = &self.uploads {
            uploads.discard(finished);
        }
    }

    /// What the store's sweeper expired or erased: the files kept for those `file_upload`
    /// elicitations are removed.
    pub fn swept(&self, swept: elicitation_store::Swept) {
        use elicitation_core::ElicitationType::FileUpload;
        let expired = swept
            .expired
            .into_iter()
            .filter(|e| e.elicitation.kind() == FileUpload)
            .map(|e| e.elicitation.id);
        let erased = swept
            .erased
            .into_iter()
            .filter(|e| e.kind == FileUpload)
            .map(|e| e.id);
        self.discard_uploads(expired.chain(erased));
    }

    /// `/metrics`: the Prometheus text exposition.
    pub fn metrics_text(&self) -> String {
        self.metrics_of(&self.gateway())
    }

    /// `/metrics` as `gateway` (a request's snapshot) renders it.
    fn metrics_of(&self, gateway: &Gateway) -> String {
        let modules = gateway.registry().health();
        let quarantined = gateway.pinning().quarantined_by_module();
        gateway.metrics().render(mcp_gate::metrics::Live {
            sessions: self.sessions.len(),
            streams: self.streams.open_total(),
            body_bytes: self.bodies.held(),
            modules: &modules,
            quarantined: &quarantined,
        })
    }

    /// `/readyz`: whether this instance can serve — the store reachable with its migrations
    /// current, and every required module up. The reasons it cannot, if any.
    pub async fn readiness(&self) -> Result<(), Vec<String>> {
        // One check at a time; its answer serves the probes of the next second.
        let mut last = self.ready.lock().await;
        let now = self.config.clock.instant();
        if let Some((at, answer)) = &*last
            && now.saturating_duration_since(*at) < Duration::from_secs(1)
        {
            return answer.clone();
        }
        let answer = self.check_readiness().await;
        *last = Some((now, answer.clone()));
        answer
    }

    async fn check_readiness(&self) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        let gateway = self.gateway();
        match tokio::time::timeout(READY_TIMEOUT, gateway.store().ping()).await {
            Ok(Ok(())) => {}
            Ok(Err(elicitation_store::StoreError::NotMigrated)) => {
                problems.push(
                    "the store's migrations are behind this gateway's (run `mcp-gateway migrate`)"
                        .to_owned(),
                );
            }
            Ok(Err(e)) => problems.push(format!("the store is unavailable: {e}")),
            Err(_) => problems.push(format!(
                "the store did not answer within {} s",
                READY_TIMEOUT.as_secs()
            )),
        }
        let health = gateway.registry().health();
        let left_out = gateway.registry().left_out();
        for required in gateway.required_modules() {
            match health.iter().find(|(name, _)| name == required) {
                Some((_, h)) if h.up => {}
                Some(_) => problems.push(match gateway.registry().failure(required) {
                    Some(why) => format!("module {required:?} is down: {why}"),
                    None => format!("module {required:?} is down"),
                }),
                None => match gateway.unbuilt(required) {
                    Some(reason) => {
                        problems.push(format!("module {required:?} cannot be started: {reason}"));
                    }
                    None => problems.push(format!("module {required:?} is not configured")),
                },
            }
            if let Some((_, what)) = left_out.iter().find(|(name, _)| name == required) {
                problems.push(format!(
                    "module {required:?} lists what the gateway leaves out: {}",
                    what.join("; ")
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The operations endpoints (`/healthz`, `/readyz`, `/metrics`), without authentication:
    /// for a listener only the operator's network reaches. `None` for any other path.
    pub async fn operations(&self, method: &Method, path: &str) -> Option<Response<Body>> {
        self.probe(method, path, true).await
    }

    /// A request on a connection accepted while every connection is busy: `/healthz` and
    /// `/readyz` as always (after the host check), anything else 503 with a retry.
    pub async fn probe_only<B>(&self, request: Request<B>) -> Response<Body> {
        let snap = self.live.snapshot();
        let (parts, _body) = request.into_parts();
        if !self.host_allowed(&snap, &parts.headers, &parts.uri) {
            return response::error(&McpError::BadHost, Surface::Problem);
        }
        let path = parts.uri.path();
        if (path == "/healthz" || path == "/readyz")
            && let Some(response) = self.probe(&parts.method, path, false).await
        {
            return response;
        }
        let mut response = response::json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({
                "type": "about:blank",
                "title": "Service Unavailable",
                "status": 503,
                "detail": "every connection of the gateway is busy; try again shortly",
            }),
        );
        let headers = response.headers_mut();
        headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/problem+json"),
        );
        response
    }

    /// `/healthz` and `/readyz` (and, `private`, `/metrics` and why the instance is not
    /// ready: module names and store trouble are the operator's business, not the
    /// internet's).
    async fn probe(&self, method: &Method, path: &str, private: bool) -> Option<Response<Body>> {
        let response = match path {
            "/healthz" => response::json(StatusCode::OK, &json!({"status": "ok"})),
            "/readyz" => match self.readiness().await {
                Ok(()) => response::json(StatusCode::OK, &json!({"status": "ready"})),
                Err(problems) if private => response::json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"status": "not ready", "problems": problems}),
                ),
                Err(problems) => {
                    tracing::debug!(?problems, "not ready");
                    response::json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!({"status": "not ready"}),
                    )
                }
            },
            "/metrics" if private => response::metrics(self.metrics_text()),
            "/metrics" => response::metrics(self.metrics_text()),
            _ => return None,
        };
        if method != Method::GET && method != Method::HEAD {
            return Some(response::error(
                &McpError::MethodNotAllowed,
                Surface::Problem,
            ));
        }
        Some(response)
    }

    /// Ends the long-lived streams — sessions' GET streams, `subscriptions/listen` — at
    /// shutdown, so connections can drain.
    pub fn end_session_streams(&self) {
        self.sessions.end_streams();
        self.closing.send_replace(true);
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
    fn host_allowed(&self, snap: &Snapshot, headers: &HeaderMap, uri: &http::Uri) -> bool {
        if !matches!(*snap.auth, Auth::None(_)) {
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
        let Some(name) = host_name(host.trim()) else {
            return false;
        };
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
        // What a reload can change is read here, once: the request finishes on it.
        let snap = self.live.snapshot();
        let mut response = self.route(&snap, request).await;
        if let Auth::Jwt(jwt) = &*snap.auth {
            oauth_challenge(jwt, &mut response);
        }
        response
    }

    async fn route<B>(&self, snap: &Snapshot, request: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().to_owned();
        let under = |prefix: &str| {
            path == prefix
                || path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        let is_rest = under(rest::PREFIX)
            || under(rest::GRANTS_PREFIX)
            || under(rest::CATALOG_PREFIX)
            || path == rest::AUDIT_PATH;
        // Everything under `/v1/` is the REST API's: its errors, an unknown path's included,
        // are `application/problem+json`.
        let is_api = path.starts_with("/v1/");
        let fail = |error: McpError| {
            if is_api {
                response::error(&error, Surface::Problem)
            } else {
                response::rpc_error(&error, None, None)
            }
        };
        if !self.host_allowed(snap, &parts.headers, &parts.uri) {
            return fail(McpError::BadHost);
        }
        if (path == "/healthz" || path == "/readyz")
            && let Some(response) = self.probe(&parts.method, &path, false).await
        {
            return response;
        }
        if path == "/metrics" && self.config.metrics_on_main {
            return match snap.auth.authenticate(&parts.headers).await {
                Ok(principal) => match principal.require(mcp_auth::SCOPE_METRICS) {
                    Ok(()) => response::metrics(self.metrics_of(&snap.gateway)),
                    Err(e) => response::error(&e.into(), Surface::Problem),
                },
                Err(e) => response::error(&e.into(), Surface::Problem),
            };
        }
        if path == PRM_PATH || path.starts_with(&format!("{PRM_PATH}/")) {
            return self.protected_resource_metadata(snap, &parts.method);
        }
        let is_upload = path.starts_with("/v1/mcp/uploads/");
        let is_page = path == mcp_approvals::PREFIX
            || path.starts_with(&format!("{}/", mcp_approvals::PREFIX));
        // Slack signs its requests; no bearer token, no browser origin.
        if path == SLACK_ACTIONS {
            return self.slack_action(snap, &parts, body).await;
        }
        // A newcomer opening the gateway's address is told where things are.
        if path == "/" && (parts.method == Method::GET || parts.method == Method::HEAD) {
            return response::json(
                StatusCode::OK,
                &json!({
                    "name": "mcp-gateway",
                    "message": "An MCP gateway: MCP clients connect to /mcp (Streamable HTTP); people answer the calls it holds at /approvals.",
                    "mcp": "/mcp",
                    "approvals": mcp_approvals::PREFIX,
                }),
            );
        }
        if path != "/mcp" && !is_rest && !is_page && !is_upload {
            return fail(McpError::NotFound);
        }
        if !self.origin_allowed(&parts.headers) {
            return fail(McpError::BadOrigin);
        }
        if is_page {
            return self.page_request(snap, &parts, &path, body).await;
        }
        let principal = match snap.auth.authenticate(&parts.headers).await {
            Ok(p) => p,
            Err(e) => return fail(e.into()),
        };
        if is_upload {
            return self.download(snap, &parts.method, &path, &principal).await;
        }
        // The caller's own token, for the modules that exchange it for their calls.
        snap.gateway.present(&principal);
        let bytes = match self
            .read_body(body, Sender::Caller(principal.caller.clone()))
            .await
        {
            Ok(bytes) => bytes,
            Err(e) => return fail(e),
        };
        if is_rest {
            return self
                .rest_request(snap, &parts, &path, &principal, &bytes)
                .await;
        }
        match parts.method {
            Method::POST => self.post(snap, &parts.headers, &principal, &bytes).await,
            Method::DELETE => match header_text(&parts.headers, "mcp-session-id") {
                Some(id) => self.end_session(snap, &id, &principal).await,
                None => response::rpc_error(&McpError::MissingSession, None, Some(Era::Legacy)),
            },
            Method::GET => self.listen(&parts.headers, &principal),
            _ => response::rpc_error(&McpError::MethodNotAllowed, None, None),
        }
    }

    /// `POST /v1/notify/slack/actions`: an Approve or Decline clicked in Slack, recorded as
    /// the Slack user's mapped identity with every approver and four-eyes rule the page
    /// applies; anything not verified answers nothing.
    async fn slack_action<B>(
        &self,
        snap: &Snapshot,
        parts: &http::request::Parts,
        body: B,
    ) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        use mcp_notify::SlackRefusal;
        let Some(slack) = &self.slack else {
            return response::error(&McpError::NotFound, Surface::Problem);
        };
        if parts.method != Method::POST {
            return response::error(&McpError::MethodNotAllowed, Surface::Problem);
        }
        let bytes = match self.read_body(body, anonymous(parts)).await {
            Ok(bytes) => bytes,
            Err(e) => return response::error(&e, Surface::Problem),
        };
        let said =
            |status: StatusCode, text: String| response::json(status, &json!({"text": text}));
        let action = match slack.verify(
            header_text(&parts.headers, "x-slack-request-timestamp").as_deref(),
            header_text(&parts.headers, "x-slack-signature").as_deref(),
            &bytes,
            self.config.clock.now(),
        ) {
            Ok(action) => action,
            Err(SlackRefusal::Unsigned(why)) => {
                tracing::warn!(
                    reason = why,
                    "a request to the Slack actions endpoint was not Slack's; it answers nothing"
                );
                return said(
                    StatusCode::UNAUTHORIZED,
                    format!("Not a signed Slack request: {why}."),
                );
            }
            Err(SlackRefusal::Replayed) => {
                tracing::warn!("a Slack request was sent again; it answers nothing");
                return said(
                    StatusCode::UNAUTHORIZED,
                    "This request was seen before.".into(),
                );
            }
            Err(SlackRefusal::Unmapped(user)) => {
                tracing::warn!(slack_user = %user, "a Slack user the gateway does not know clicked an answer; nothing was recorded");
                return said(
                    StatusCode::FORBIDDEN,
                    "You are not someone this gateway takes answers from.".into(),
                );
            }
            Err(SlackRefusal::NotAnAnswer) => {
                return said(StatusCode::OK, "Nothing to answer.".into());
            }
            Err(SlackRefusal::ApproveOnThePage) => {
                return said(
                    StatusCode::OK,
                    "Nothing was recorded: this Slack app is not shown the call's arguments, so approve it on the approvals page (Open).".into(),
                );
            }
        };
        let Ok(id) = action
            .elicitation
            .parse::<elicitation_core::ElicitationId>()
        else {
            return said(StatusCode::OK, "Nothing to answer.".into());
        };
        let Ok(caller) =
            elicitation_store::Caller::new(action.user.subject.clone(), action.user.tenant.clone())
        else {
            return said(
                StatusCode::FORBIDDEN,
                "Your mapped identity is not a valid caller.".into(),
            );
        };
        let principal = Principal {
            caller,
            scopes: [mcp_auth::SCOPE_RESPOND.to_owned()].into_iter().collect(),
            authenticated: true,
            // The mapped user's groups as a token's would be: its tenant's (mode `jwt`
            // names them qualified already).
            groups: action
                .user
                .groups
                .iter()
                .map(|g| match &*snap.auth {
                    Auth::Jwt(_) => g.clone(),
                    _ => mcp_auth::tenant_group(g, action.user.tenant.as_deref()),
                })
                .collect(),
            client: None,
            subject_token: None,
        };
        let by = principal.answered_by(mcp_auth::AnsweredVia::Slack);
        match mcp_gate::answer(
            &**snap.gateway.store(),
            &principal,
            id,
            json!({"confirmed": action.approve}),
            &by,
        )
        .await
        {
            Ok(_) => {
                tracing::info!(elicitation = %id, slack_user = %action.slack_user, by = %by, approve = action.approve, "answered from Slack");
                let done = if action.approve {
                    "Approved"
                } else {
                    "Declined"
                };
                said(
                    StatusCode::OK,
                    format!("{done} by {}.", action.user.subject),
                )
            }
            Err(e) => {
                let status = mcp_http_kit::error::HttpError::status(&e, None);
                said(status, format!("Not recorded: {e}"))
            }
        }
    }

    /// `/approvals…`: the page, after its body is read (a file upload may be larger than
    /// other bodies, so it is read only for a signed-in person).
    async fn page_request<B>(
        &self,
        snap: &Snapshot,
        parts: &http::request::Parts,
        path: &str,
        body: B,
    ) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        // The page authenticates with its own session cookie (or a sign-in form).
        let limit = match &self.uploads {
            Some(uploads) if parts.method == Method::POST && path.ends_with("/upload") => {
                if self.page.web_session(snap, &parts.headers).is_some() {
                    usize::try_from(uploads.max_bytes()).unwrap_or(usize::MAX)
                } else {
                    self.config.body_limit.min(1024)
                }
            }
            _ => self.config.body_limit,
        };
        let bytes = match self.read_body_limited(body, limit, anonymous(parts)).await {
            Ok(bytes) => bytes,
            Err(e) => return response::rpc_error(&e, None, None),
        };
        let base = self.page_base(&parts.headers);
        self.page
            .approvals(
                snap,
                mcp_approvals::PageRequest {
                    method: &parts.method,
                    path,
                    query: parts.uri.query(),
                    headers: &parts.headers,
                    body: &bytes,
                    base: base.as_deref(),
                },
            )
            .await
    }

    /// `/v1/mcp/elicitations…`: the REST API, as `principal`.
    async fn rest_request(
        &self,
        snap: &Snapshot,
        parts: &http::request::Parts,
        path: &str,
        principal: &Principal,
        bytes: &[u8],
    ) -> Response<Body> {
        if let Err(e) = snap.gateway.take_api(&principal.caller) {
            return response::error(&e, Surface::Problem);
        }
        if path == rest::AUDIT_PATH {
            return match rest::audit(&snap.gateway, principal, &parts.method, parts.uri.query())
                .await
            {
                Ok((page, AuditFormat::Json)) => {
                    response::json(http::StatusCode::OK, &mcp_http_kit::audit::body(&page))
                }
                Ok((page, AuditFormat::JsonLines)) => {
                    mcp_http_kit::audit::lines(&page.entries, page.next, page.holds)
                }
                Err(e) => response::error(&e, Surface::Problem),
            };
        }
        if let Some(rest) = path.strip_prefix(rest::CATALOG_PREFIX) {
            let request = rest::RestRequest {
                method: &parts.method,
                rest,
                query: parts.uri.query(),
                body: bytes,
                waits: &self.streams,
            };
            return match rest::catalog(&snap.gateway, principal, request).await {
                Ok((status, body)) => response::json(status, &body),
                Err(e) => response::error(&e, Surface::Problem),
            };
        }
        if let Some(rest) = path.strip_prefix(rest::GRANTS_PREFIX) {
            let request = rest::RestRequest {
                method: &parts.method,
                rest,
                query: parts.uri.query(),
                body: bytes,
                waits: &self.streams,
            };
            return match rest::grants(&snap.gateway, principal, request).await {
                Ok((status, body)) => response::json(status, &body),
                Err(e) => response::error(&e, Surface::Problem),
            };
        }
        let request = rest::RestRequest {
            method: &parts.method,
            rest: &path[rest::PREFIX.len()..],
            query: parts.uri.query(),
            body: bytes,
            waits: &self.streams,
        };
        match rest::handle(&snap.gateway, principal, request).await {
            Ok((status, body)) => {
                if let Some(id) = rest::cancelled(&parts.method, &path[rest::PREFIX.len()..]) {
                    self.discard_uploads([id]);
                }
                response::json(status, &body)
            }
            Err(e) => response::error(&e, Surface::Problem),
        }
    }

    /// `DELETE /mcp`: ends a legacy session — recorded in the store first, so every
    /// instance sharing it refuses the session; if the store cannot record it, nothing ends
    /// (503) and the client may try again.
    async fn end_session(
        &self,
        snap: &Snapshot,
        id: &str,
        principal: &Principal,
    ) -> Response<Body> {
        let legacy = |e: &McpError| response::rpc_error(e, None, Some(Era::Legacy));
        if let Err(e) = snap.gateway.take_call(
            &principal.caller,
            "this caller is changing sessions faster than the gateway allows",
        ) {
            return legacy(&e);
        }
        let ending = match self.sessions.ending(id, &principal.caller) {
            Ok(ending) => ending,
            Err(e) => return legacy(&e),
        };
        let recorded = tokio::time::timeout(
            Duration::from_secs(5),
            snap.gateway
                .fleet()
                .end_session(&principal.caller, ending.hash, ending.until),
        )
        .await
        .unwrap_or_else(|_| {
            Err(elicitation_store::StoreError::Unavailable(
                "the store did not answer in time".into(),
            ))
        });
        if let Err(e) = recorded {
            return legacy(&McpError::Store(e));
        }
        self.sessions.end(id, ending);
        response::empty(StatusCode::OK)
    }

    /// `GET /.well-known/oauth-protected-resource[/mcp]` (RFC 9728), in mode `jwt`: where
    /// clients find the authorization servers and scopes. Public, so any origin may read it.
    fn protected_resource_metadata(&self, snap: &Snapshot, method: &Method) -> Response<Body> {
        let Auth::Jwt(jwt) = &*snap.auth else {
            return response::error(&McpError::NotFound, Surface::Problem);
        };
        if method != Method::GET {
            return response::error(&McpError::MethodNotAllowed, Surface::Problem);
        }
        let mut response = response::json(StatusCode::OK, &jwt.metadata());
        response.headers_mut().insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        response
    }

    /// `GET /mcp`: a legacy session's stream (see `listen`). Without a session there is no
    /// stream to offer (2026-07-28 has none): 405.
    fn listen(&self, headers: &HeaderMap, principal: &Principal) -> Response<Body> {
        let Some(session_id) = header_text(headers, "mcp-session-id") else {
            return response::rpc_error(&McpError::MethodNotAllowed, None, None);
        };
        let fail = |e: McpError| response::rpc_error(&e, None, Some(Era::Legacy));
        if let Err(e) = principal.require(SCOPE_TOOLS_CALL) {
            return fail(e.into());
        }
        if !response::accepts_sse(headers) {
            return fail(McpError::NotAcceptable(
                "GET /mcp is an event stream: Accept must include text/event-stream".into(),
            ));
        }
        let session = match self.sessions.touch(&session_id, &principal.caller) {
            Ok(session) => session,
            Err(e) => return fail(e),
        };
        let last_event_id =
            header_text(headers, "last-event-id").and_then(|v| v.trim().parse().ok());
        let Some(slot) = self.streams.try_open(&principal.caller) else {
            return fail(McpError::TooManyStreams(self.config.max_streams_per_caller));
        };
        crate::listen::stream(
            session.channel,
            self.sessions.clone(),
            session_id,
            principal.caller.clone(),
            last_event_id,
            slot,
            // SSE priming came with 2025-11-25 (SEP-1699): earlier clients read every event
            // as a message.
            session.version >= "2025-11-25",
        )
    }

    /// `GET /v1/mcp/uploads/{upload_id}`: an uploaded file, for its caller's services
    /// (scope `elicitations:create`), as an attachment of opaque bytes.
    async fn download(
        &self,
        snap: &Snapshot,
        method: &Method,
        path: &str,
        principal: &Principal,
    ) -> Response<Body> {
        let problem = |e: McpError| response::error(&e, Surface::Problem);
        if method != Method::GET {
            return problem(McpError::MethodNotAllowed);
        }
        if let Err(e) = principal.require(mcp_auth::SCOPE_CREATE) {
            return problem(e.into());
        }
        let id = &path["/v1/mcp/uploads/".len()..];
        let Some(uploads) = &self.uploads else {
            return problem(McpError::NotFound);
        };
        // The upload must be the recorded answer of one of the caller's elicitations.
        let Some((elicitation, _)) = mcp_http_kit::uploads::parse_upload_id(id) else {
            return problem(McpError::NotFound);
        };
        let recorded = match snap
            .gateway
            .store()
            .get(&principal.caller, elicitation)
            .await
        {
            Ok(stored) => {
                stored
                    .elicitation
                    .response
                    .as_ref()
                    .and_then(|r| r.get("upload_id"))
                    .and_then(Value::as_str)
                    == Some(id)
            }
            Err(e) => return problem(McpError::from(e)),
        };
        if !recorded {
            return problem(McpError::NotFound);
        }
        match uploads.read(id).await {
            Ok(Some(bytes)) => {
                let mut response = Response::new(mcp_http_kit::body::full(bytes));
                let headers = response.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                headers.insert(
                    header::CONTENT_DISPOSITION,
                    HeaderValue::from_static("attachment"),
                );
                headers.insert(
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                );
                response
            }
            Ok(None) => problem(McpError::NotFound),
            Err(e) => problem(McpError::BlobStore(e.to_string())),
        }
    }

    /// The base URL of the approvals page for a request: the configured public URL, else
    /// `http://` and the request's `Host` when it is a loopback or configured host name.
    pub(crate) fn page_base(&self, headers: &HeaderMap) -> Option<String> {
        if let Some(url) = &self.config.public_url {
            return Some(url.clone());
        }
        let host = headers.get(header::HOST)?.to_str().ok()?;
        let safe = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
        // A client chooses its Host: only a loopback one or a configured one may become a
        // link a person follows (else a client could send the person to its own sign-in
        // page); without `public_url` elsewhere, URL mode is not offered.
        let name = host_name(host)?;
        let known = is_loopback_host(name)
            || self
                .config
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(name));
        (safe && known).then(|| format!("http://{host}"))
    }

    /// The whole body, within the size limit and the read timeout, and within what its
    /// sender and the gateway may have in flight.
    async fn read_body<B>(&self, body: B, sender: Sender) -> Result<Bytes, McpError>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.read_body_limited(body, self.config.body_limit, sender)
            .await
    }

    async fn read_body_limited<B>(
        &self,
        body: B,
        limit: usize,
        sender: Sender,
    ) -> Result<Bytes, McpError>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        // The bytes count against the sender's share while they arrive, and are given back
        // once the body is whole (or refused).
        if body.size_hint().lower() > limit as u64 {
            return Err(McpError::PayloadTooLarge { limit });
        }
        let mut held = self.bodies.reserve(sender).map_err(too_many_bodies)?;
        let read = async {
            let mut body = std::pin::pin!(body);
            let mut whole = bytes::BytesMut::new();
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
    fn null_id(&self, headers: &HeaderMap, principal: &Principal) -> bool {
        let version = match header_text(headers, "mcp-session-id") {
            Some(id) => self
                .sessions
                .touch(&id, &principal.caller)
                .ok()
                .map(|s| s.version.to_owned()),
            None => None,
        }
        .or_else(|| header_text(headers, "mcp-protocol-version"));
        version.is_some_and(|v| LEGACY_VERSIONS.contains(&v.as_str()) && mcp::null_id_on_errors(&v))
    }

    async fn post(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        bytes: &[u8],
    ) -> Response<Body> {
        let unreadable = |id: Option<jsonrpc::RequestId>, e: jsonrpc::EnvelopeError| {
            let null_id = self.null_id(headers, principal);
            response::error(
                &McpError::from(e),
                Surface::JsonRpc {
                    id: ErrorId::new(id.as_ref(), null_id),
                    era: None,
                },
            )
        };
        match jsonrpc::parse_incoming(bytes) {
            Err((id, e)) => unreadable(id, e),
            Ok(Incoming::Single(message)) => self.message(snap, headers, principal, message).await,
            Ok(Incoming::Batch(items)) => self.batch(snap, headers, principal, items).await,
        }
    }

    /// A batch, which only 2025-03-26 sessions may send: each request answered in order
    /// (a gated call with the held result: no stream), notifications and responses taken.
    async fn batch(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        items: Vec<Result<Message, jsonrpc::Unreadable>>,
    ) -> Response<Body> {
        let null_id = self.null_id(headers, principal);
        let session = header_text(headers, "mcp-session-id")
            .and_then(|id| self.sessions.touch(&id, &principal.caller).ok());
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
        if session.is_none_or(|s| s.version != BATCH_VERSION) {
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
    async fn message(
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
                    match self.sessions.touch(&id, &principal.caller) {
                        Err(e) => return response::rpc_error(&e, None, Some(Era::Legacy)),
                        Ok(session) if method == "notifications/cancelled" => {
                            let cancelled = params
                                .as_ref()
                                .and_then(|p| serde_json::from_str::<Cancelled>(p.0.get()).ok());
                            if let Some(cancelled) = cancelled {
                                session.channel.cancel(&cancelled.request_id);
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
                if let Err(e) = self.sessions.touch(&session, &principal.caller) {
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
        let head = request.head();
        let era = EraSignals {
            initialize: request.method == "initialize",
            modern_meta: head.meta_version().is_some(),
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
                tracing::Instrument::instrument(
                    self.modern(snap, headers, principal, &request, &head),
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
                response
            }
            Err(e) => response::rpc_error(&e, Some(&request.id), Some(era)),
        }
    }
}

/// Where the protected resource metadata is served (and under it, the path-suffixed form).
const PRM_PATH: &str = "/.well-known/oauth-protected-resource";

/// Mode `jwt`: a 401 or 403 challenge says where the resource's metadata is and which scope
/// (in the identity provider's names) is needed, so a client can discover the authorization
/// server and step up (MCP authorization; RFC 9728 §5.1, RFC 6750 §3).
fn oauth_challenge(jwt: &mcp_auth::jwt::JwtAuth, response: &mut Response<Body>) {
    let Some(current) = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return;
    };
    let config = jwt.config();
    let metadata = mcp_auth::jwt::metadata_url(&config.resource);
    let challenge = if current.contains("insufficient_scope") {
        let scope = current
            .split("scope=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default();
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{metadata}\"",
            config.scopes.external(scope)
        )
    } else {
        let error = if current.contains("invalid_token") {
            ", error=\"invalid_token\""
        } else {
            ""
        };
        format!(
            "Bearer resource_metadata=\"{metadata}\", scope=\"{}\"{error}",
            config.scopes.all().join(" ")
        )
    };
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
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
            assert_eq!(host_name(host), Some(name), "{host}");
        }
        // A port is digits and nothing after them: the attacker's host is not localhost.
        for bad in [
            "localhost:18080.evil.example",
            "localhost:80:81",
            "127.0.0.1:",
            "localhost:123456",
            "[::1]x",
            "[::1]:80.evil.example",
            ":8080",
            "[::1",
        ] {
            assert_eq!(host_name(bad), None, "{bad}");
        }
        assert!(!is_loopback_origin("http://localhost:18080.evil.example"));
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
