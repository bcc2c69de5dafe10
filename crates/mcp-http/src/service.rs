//! The HTTP service: routing. `POST/DELETE /mcp` (both protocol eras on one endpoint; the
//! eras themselves are `legacy` and `modern`), the REST API under `/v1/mcp/elicitations`, and
//! `/healthz`. Origin and host checks, the body limit and authentication happen here, before
//! anything else reads the request; then the body is parsed once and dispatched by era.
//!
//! Here: the service, its configuration, `handle` and the routing. Beside it, one concern a
//! file: `rpc` (`POST /mcp`: bodies, batches, messages), `catalog` (the methods both eras
//! serve alike), `surfaces` (the page, REST, the session stream, metadata, downloads),
//! `probes` (`/healthz`, `/readyz`, `/metrics`), `slack` (Slack's button clicks), `fleet`
//! (what crosses sessions and instances).

mod catalog;
pub mod embed;
mod fleet;
mod probes;
mod rpc;
mod slack;
mod surfaces;

use fleet::{follow_other_instances, notify_sessions};
use probes::Readiness;
use surfaces::{PRM_PATH, oauth_challenge};

pub(crate) use fleet::tell_other_instances;
pub use slack::SLACK_ACTIONS;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elicitation_core::ElicitationId;
use elicitation_store::{Clock, SystemClock};
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use mcp_wire::jsonrpc::{self};
use mcp_wire::{Era, ResultBody};
use serde_json::{Value, json};

use crate::ask;
use crate::page_base::{host_name, is_loopback_host};
use crate::rest;
use crate::sessions::Sessions;
use crate::state::RequestStates;
use mcp_auth::Auth;
use mcp_gate::Gateway;
use mcp_gate::streams::StreamSlots;
use mcp_http_kit::error::McpError;
use mcp_http_kit::inflight::{Over, Sender};
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::response::{self, Surface};

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
    /// approvals page's URLs; without it, the request's `Host` over `http`. A mounted
    /// service's path ([`McpService::mounted_at`], [`McpService::nested_at`]) follows it.
    pub public_url: Option<String>,
    /// Whether `/metrics` is served on this listener (to callers with the `metrics:read`
    /// scope); off when a separate operations listener serves it.
    pub metrics_on_main: bool,
    /// How often a stream waiting for a person tells the client it still waits: a progress
    /// notification where the call sent a `progressToken`, else an SSE comment.
    pub stream_keep_alive: Duration,
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
            stream_keep_alive: Duration::from_secs(15),
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
    pub(crate) uploads: Option<Arc<mcp_uploads::Uploads>>,
    /// Answers clicked in Slack (`[[notify]] kind = "slack"` with a signing secret).
    slack: Option<Arc<mcp_notify::SlackActions>>,
    /// Set at shutdown: long-lived streams end.
    pub(crate) closing: tokio::sync::watch::Sender<bool>,
    /// The last readiness check (probes are answered from it for a second, so a flood of
    /// them costs the store one query a second).
    ready: tokio::sync::Mutex<Option<(std::time::Instant, Readiness)>>,
    /// The path the service is mounted at in an embedder's router (`/ops`), or empty: put
    /// before the page's own links (`crate::mount`).
    pub(crate) mount: String,
    /// What the approvals page's base URL is made from (`crate::page_base`).
    pub(crate) page_site: Arc<crate::page_base::PageSite>,
    /// Whether the router takes the mount off request paths itself (axum's `nest_service`).
    pub(crate) nested: bool,
}

/// What the approvals page's base URL is made from, for a service of `config` mounted at
/// `mount` (empty: not mounted).
fn page_site(config: &ServiceConfig, mount: &str) -> Arc<crate::page_base::PageSite> {
    Arc::new(crate::page_base::PageSite {
        public_url: config.public_url.clone(),
        allowed_hosts: config.allowed_hosts.clone(),
        mount: mount.to_owned(),
    })
}

/// Whether the request declares a JSON body (`application/json`, parameters allowed).
fn declared_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|kind| kind.trim().eq_ignore_ascii_case("application/json"))
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

pub(crate) fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    header_str(headers, name).map(str::to_owned)
}

/// A header's value as text, borrowed (`None`: absent, or not visible ASCII).
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
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
        let page_site = page_site(&config, "");
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
            mount: String::new(),
            page_site,
            nested: false,
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
    pub fn with_uploads(mut self, uploads: mcp_uploads::Uploads) -> Self {
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
}

impl McpService {
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
        let request = match crate::mount::unmounted(&self.mount, self.nested, request) {
            Ok(request) => request,
            Err(_) => return response::rpc_error(&McpError::NotFound, None, None),
        };
        let mut response = self.route(&snap, request).await;
        if let Auth::Jwt(jwt) = &*snap.auth {
            oauth_challenge(jwt, &mut response);
        }
        response
    }

    // Long: one match over the routes, each arm short.
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
            || under(rest::DELEGATIONS_PREFIX)
            || under(rest::CATALOG_PREFIX)
            || path == rest::AUDIT_PATH
            || path == rest::INSIGHTS_PATH
            || path == rest::QUOTAS_PATH;
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
        if path
            .strip_prefix(PRM_PATH)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        {
            return self.protected_resource_metadata(snap, &parts.method);
        }
        let is_upload = path.starts_with("/v1/mcp/uploads/");
        let is_page = path
            .strip_prefix(mcp_approvals::PREFIX)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
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
        // A virtual server (`[[servers]]`) is served at `/mcp/{name}` by the gateway it is;
        // any other path under `/mcp/` is nothing.
        let scoped;
        let snap = match path.strip_prefix("/mcp/") {
            Some(name) => match snap.gateway.server(name) {
                Some(server) => {
                    scoped = Snapshot {
                        gateway: server.clone(),
                        auth: snap.auth.clone(),
                    };
                    &scoped
                }
                None => return fail(McpError::NotFound),
            },
            None if path != "/mcp" && !is_rest && !is_page && !is_upload => {
                return fail(McpError::NotFound);
            }
            None => snap,
        };
        if !self.origin_allowed(&parts.headers) {
            return fail(McpError::BadOrigin);
        }
        // Where credentials ride along by themselves (auth `none`: being on this machine;
        // an embedder's own cookie), a POST must say it is JSON: a page of another site can
        // send text/plain or a form cross-site without asking, but not that. The page has
        // its own form token.
        if !is_page
            && parts.method == Method::POST
            && matches!(*snap.auth, Auth::None(_) | Auth::Embedder(_))
            && !declared_json(&parts.headers)
        {
            return fail(McpError::UnsupportedMediaType);
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
        if let Some(server) = snap.gateway.scope()
            && let Err(why) = server.admits(&principal)
        {
            return fail(McpError::NotAdmitted {
                server: server.name.clone(),
                why,
            });
        }
        // The caller's own token, for the modules that exchange it for their calls.
        snap.gateway.present(&principal);
        let bytes = match self
            .read_body(body, || Sender::Caller(principal.caller.clone()))
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
            Method::POST => self.post(snap, &parts.headers, &principal, bytes).await,
            Method::DELETE => match header_text(&parts.headers, "mcp-session-id") {
                Some(id) => self.end_session(snap, &id, &principal).await,
                None => response::rpc_error(&McpError::MissingSession, None, Some(Era::Legacy)),
            },
            Method::GET => self.listen(snap, &parts.headers, &principal),
            _ => response::rpc_error(&McpError::MethodNotAllowed, None, None),
        }
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
