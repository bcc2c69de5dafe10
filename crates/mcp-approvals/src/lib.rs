//! The approvals page, `/approvals`: a crate of its own, with its own state ([`Page`]) and
//! no dependency on the MCP server; the server routes `/approvals` to [`Page::approvals`]
//! with the request's snapshot. It is where a person sees what waits for them — the gate's
//! confirmations and modules' questions — and answers it in the browser.
//!
//! - **Sign-in** (auth `tokens`): once, with a token that has `elicitations:respond`; the
//!   gateway keeps a web session (in this process's memory) and sets an `HttpOnly`,
//!   `SameSite=Strict` cookie on `/approvals` (`Secure` when `ServiceConfig::secure_cookies`)
//!   that expires with it. With auth `none` (loopback only) the page opens a session itself.
//! - **Answers** are plain form posts, so Approve/Decline work without JavaScript; every
//!   state-changing post carries the session's form token (`csrf`), and the `Origin` check of
//!   the API applies. The page's small script only reloads it when the person's elicitations
//!   change (`/approvals/events`, which follows the store's change feed).
//! - **Rendering** (`html`): everything from agents, modules and people is text.
//!
//! This file holds the [`Page`], its web sessions and the routing ([`Page::approvals`]);
//! each concern is a file: `view` (what waits, one elicitation, the events stream),
//! `answering` (answers, cancels, revocations, tool-change decisions), `sign_in` (first
//! visit, token, single sign-on, sign-out), `upload`, `audit_view`, `accounts_view`.

mod accounts;
mod accounts_view;
mod answering;
mod audit_view;
mod diff;
mod html;
mod insights_view;
pub mod oidc;
mod sign_in;
mod upload;
mod view;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elicitation_core::ElicitationId;
use elicitation_store::{Clock, ListQuery};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};

use mcp_auth::{Auth, Principal, SCOPE_AUDIT, SCOPE_CATALOG, SCOPE_RESPOND};
use mcp_http_kit::body::{Body, full};
use mcp_http_kit::error::McpError;
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::views::ElicitationView;

/// Where the page lives.
pub const PREFIX: &str = "/approvals";

/// Where the person connects their account at `module` (the Accounts view, that module
/// marked), under the page's address `base`.
pub fn connect_url(base: &str, module: &str) -> String {
    let module: String = form_urlencoded::byte_serialize(module.as_bytes()).collect();
    format!(
        "{}{ACCOUNTS_PAGE}?connect={module}",
        base.trim_end_matches('/')
    )
}

/// The Accounts view: the person's connected accounts.
const ACCOUNTS_PAGE: &str = accounts::ACCOUNTS_PATH;
/// The Audit view (scope `audit:read`).
const AUDIT_PAGE: &str = "/approvals/audit";
/// The Insights view.
const INSIGHTS_PAGE: &str = "/approvals/insights";
/// Events on one page of the Audit view.
const AUDIT_ROWS: usize = 50;
/// Most events one download of the Audit view holds (more: `GET /v1/audit` pages, or
/// `mcp-gateway audit export`).
const AUDIT_DOWNLOAD: usize = 20_000;
/// The session cookie.
const COOKIE: &str = "mcp_gateway_approvals";
/// The query field a first visit's redirect adds (auth `none`), so that a client which keeps
/// no cookies is recognised when it comes back.
const COOKIE_PROBE: &str = "cookie-sent";
/// How long a sign-in lasts.
const SESSION_TTL: Duration = Duration::from_secs(8 * 60 * 60);
/// How many answered elicitations the page shows.
const HISTORY: usize = 20;
/// How often the events stream reads the list of a store without a change feed.
const POLL: Duration = Duration::from_secs(2);
/// How often it reads the list anyway (expiries, a missed notification).
const RECHECK: Duration = Duration::from_secs(30);

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("app.js");
/// Scripts and styles from the gateway only, forms to it only, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// What a page sign-in carries, sealed in its cookie: any instance sharing the keys serves
/// it, and nothing of it can be read or changed in the browser.
#[derive(serde::Serialize, serde::Deserialize)]
struct WebClaims {
    sub: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ten: Option<String>,
    scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    groups: Vec<String>,
    auth: bool,
    /// The form token.
    csrf: String,
    /// When it ends, Unix seconds.
    exp: i64,
    /// The identity provider's ID token (single sign-on), for its sign-out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idt: Option<String>,
    /// The auth mode it was made under: under another mode it opens nothing.
    mode: String,
    /// In mode `tokens`, the SHA-256 of the token signed in with: each request takes the
    /// token's principal as configured now, so a revoked token signs the page out and a
    /// changed grant applies at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cred: Option<String>,
}

/// A live page sign-in.
struct SignIn {
    principal: Arc<Principal>,
    csrf: String,
    ends: time::OffsetDateTime,
    id_token: Option<String>,
    mode: String,
    cred: Option<String>,
}

/// The longest cookie value a page sign-in may have (browsers keep 4 KiB per cookie).
const MAX_COOKIE: usize = 3800;

/// The page's sign-ins: sealed in their cookie (`w1.…`), ended early by sign-out (recorded
/// by hash, so every instance refuses the cookie).
pub struct WebSessions {
    sealer: mcp_auth::sealed::Sealer,
    /// Where a sign-in's lifetime is read.
    clock: Arc<dyn Clock>,
}

impl WebSessions {
    /// Sign-ins sealed under keys derived from `keys` (instances that share them serve each
    /// other's sign-ins; the first seals, every one opens; none: a random key).
    pub fn new(keys: &[[u8; 32]], clock: Arc<dyn Clock>) -> Self {
        WebSessions {
            clock,
            sealer: mcp_auth::sealed::Sealer::new(
                &mcp_auth::sealed::derive_all(keys, "mcp-gateway/approvals-session/v1"),
                "w1.",
                b"mcp-gateway/approvals-session/v1",
            ),
        }
    }

    fn random(&self) -> Option<String> {
        mcp_random::hex_token::<32>().ok()
    }

    /// A new sign-in for `principal` under auth `mode` (with `cred`, the token's SHA-256 in
    /// mode `tokens`): its cookie value and form token.
    fn open(
        &self,
        principal: Arc<Principal>,
        mode: &str,
        cred: Option<String>,
    ) -> Option<(String, String)> {
        self.open_with(principal, None, mode, cred)
    }

    /// A new sign-in, with the ID token of a single sign-on (left out if the cookie would
    /// be too long: the provider's sign-out then asks which account).
    fn open_with(
        &self,
        principal: Arc<Principal>,
        id_token: Option<String>,
        mode: &str,
        cred: Option<String>,
    ) -> Option<(String, String)> {
        let csrf = self.random()?;
        let ends = self.clock.now()
            + time::Duration::try_from(SESSION_TTL).unwrap_or(time::Duration::HOUR);
        let mut claims = WebClaims {
            sub: principal.caller.subject_id().to_owned(),
            ten: principal.caller.tenant_id().map(str::to_owned),
            scopes: principal.scopes.iter().cloned().collect(),
            groups: principal.groups.iter().cloned().collect(),
            auth: principal.authenticated,
            csrf: csrf.clone(),
            exp: ends.unix_timestamp(),
            idt: id_token,
            mode: mode.to_owned(),
            cred,
        };
        let mut value = self.sealer.seal(&claims)?;
        if value.len() > MAX_COOKIE && claims.idt.is_some() {
            claims.idt = None;
            value = self.sealer.seal(&claims)?;
        }
        (value.len() <= MAX_COOKIE).then_some((value, csrf))
    }

    /// The sign-in of cookie `value`, unexpired (whether it ended, and whether its
    /// credential still holds, is the caller's to check).
    fn get(&self, value: &str) -> Option<SignIn> {
        let claims: WebClaims = self.sealer.open(value)?;
        let ends = time::OffsetDateTime::from_unix_timestamp(claims.exp).ok()?;
        if ends <= self.clock.now() {
            return None;
        }
        let principal = Principal {
            caller: elicitation_store::Caller::new(&claims.sub, claims.ten).ok()?,
            scopes: claims.scopes.into_iter().collect(),
            authenticated: claims.auth,
            groups: claims.groups.into_iter().collect(),
            client: None,
            subject_token: None,
        };
        Some(SignIn {
            principal: Arc::new(principal),
            csrf: claims.csrf,
            ends,
            id_token: claims.idt,
            mode: claims.mode,
            cred: claims.cred,
        })
    }
}

/// A page that says to wait: the caller is over its rate.
/// What a caller signing in and out too fast is told it does.
const SIGNING: &str = "this caller is signing in and out faster than the gateway allows";

fn too_many(refused: &McpError) -> Response<Body> {
    let seconds = match refused {
        McpError::RateLimited { retry_after, .. } => *retry_after,
        _ => 1,
    };
    let mut response = html(
        StatusCode::TOO_MANY_REQUESTS,
        html::sign_in(Some(&format!(
            "Too many sign-ins and sign-outs; try again in {seconds} s."
        ))),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// What waits for `principal`: its own pending elicitations, and the pending confirmations
/// of other callers that its approver groups answer — its own, and those handed to it by
/// people away (delegations) — (`for`: whose), newest first. A confirmation it may not
/// answer itself is marked `answerable: false`.
async fn waiting_for(
    gateway: &mcp_gate::Gateway,
    principal: &Principal,
) -> Result<Vec<html::Item>, mcp_gate::error::GateError> {
    let store = gateway.store().as_ref();
    let groups: Vec<String> = principal.groups.iter().cloned().collect();
    let may_answer = |owner: &elicitation_store::Caller,
                      stored: &elicitation_store::StoredElicitation| {
        stored
            .call
            .as_ref()
            .and_then(|c| c.approval.as_ref())
            .is_none_or(|a| a.may_answer(owner, &principal.caller, &groups))
    };
    let voted = |stored: &elicitation_store::StoredElicitation| {
        stored
            .call
            .as_ref()
            .is_some_and(|c| c.votes.iter().any(|v| v.is_of(&principal.caller)))
    };
    let own = store
        .list(
            &principal.caller,
            ListQuery::pending(elicitation_store::MAX_LIST_LIMIT),
        )
        .await?;
    let mut items: Vec<html::Item> = own
        .into_iter()
        .filter_map(Result::ok)
        .map(|stored| html::Item {
            view: ElicitationView::of(&stored),
            owner: None,
            answerable: may_answer(&principal.caller, &stored),
            voted: voted(&stored),
            for_someone_away: false,
            suggested_when: None,
            last_approved: None,
        })
        .collect();
    let mut owners: Vec<elicitation_store::Caller> = vec![principal.caller.clone(); items.len()];
    let mut seen: std::collections::HashSet<ElicitationId> =
        items.iter().map(|i| i.view.id).collect();
    for (approver, delegation) in gateway.approvers_of(principal).await? {
        for (owner, stored) in store
            .approver_pending(&approver, elicitation_store::MAX_LIST_LIMIT)
            .await?
        {
            let admits = stored
                .call
                .as_ref()
                .and_then(|c| c.approval.as_ref())
                .is_some_and(|a| a.admits(&owner, &approver));
            if owner == principal.caller
                || (delegation.is_some() && !admits)
                || !seen.insert(stored.elicitation.id)
            {
                continue;
            }
            let mut whose = match owner.tenant_id() {
                Some(tenant) => format!("{} ({tenant})", owner.subject_id()),
                None => owner.subject_id().to_owned(),
            };
            if let Some(d) = &delegation {
                whose.push_str(&format!(", as {}'s delegate", d.from.subject_id()));
            }
            items.push(html::Item {
                view: ElicitationView::of(&stored),
                owner: Some(whose),
                answerable: if delegation.is_some() {
                    admits
                } else {
                    may_answer(&owner, &stored)
                },
                voted: voted(&stored),
                for_someone_away: delegation.is_some(),
                suggested_when: None,
                last_approved: None,
            });
            owners.push(owner);
        }
    }
    since_last_approved(store, &mut items, &owners, principal).await;
    items.sort_by(|a, b| b.view.created_at.cmp(&a.view.created_at));
    Ok(items)
}

/// Most callers whose recent confirmations one page reads to show what changed.
const MAX_CALLERS_COMPARED: usize = 16;

/// For each held call `viewer` may answer, the arguments of the last call of the same tool
/// by the same caller that a person approved (among its recent ones): what changed since is
/// shown beside it. Another caller's call is compared only with calls the viewer's groups
/// could have answered (never one its caller answered alone, or another group). A store
/// that cannot be read leaves the comparison out.
async fn since_last_approved(
    store: &dyn elicitation_store::ElicitationStore,
    items: &mut [html::Item],
    owners: &[elicitation_store::Caller],
    viewer: &Principal,
) {
    let mut approved: Vec<(
        elicitation_store::Caller,
        Vec<elicitation_store::StoredElicitation>,
    )> = Vec::new();
    for (item, owner) in items.iter_mut().zip(owners) {
        let (Some(tool), true) = (&item.view.tool, item.answerable) else {
            continue;
        };
        if !approved.iter().any(|(c, _)| c == owner) {
            if approved.len() >= MAX_CALLERS_COMPARED {
                continue;
            }
            let own = *owner == viewer.caller;
            let views = match elicitation_store::recently_approved(store, owner).await {
                Ok(approved) => approved
                    .into_iter()
                    .filter(|s| {
                        own || s
                            .call
                            .as_ref()
                            .and_then(|c| c.approval.as_ref())
                            .is_some_and(|a| a.groups().any(|g| viewer.groups.contains(g)))
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "could not read a caller's approved calls for the approvals page");
                    Vec::new()
                }
            };
            approved.push((owner.clone(), views));
        }
        let Some((_, views)) = approved.iter().find(|(c, _)| c == owner) else {
            continue;
        };
        item.last_approved = elicitation_store::last_approved(views, tool, item.view.id)
            .map(ElicitationView::of)
            .and_then(|v| Some((v.responded_at?, v.arguments?)));
        // The shape of this caller's approved calls of the tool, if this one has it too.
        let approved: Vec<&serde_json::Value> = views
            .iter()
            .filter_map(|s| s.call.as_ref())
            .filter(|c| c.tool == *tool)
            .map(|c| &c.arguments)
            .collect();
        item.suggested_when = item
            .view
            .arguments
            .as_ref()
            .and_then(|held| mcp_http_kit::suggest::covering_when(&approved, held));
    }
}

/// A short fingerprint of a list of ids (which pending elicitations a page shows).
fn fingerprint<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for id in ids {
        context.update(id.as_bytes());
        context.update(b"\n");
    }
    mcp_random::hex(&context.finish().as_ref()[..8])
}

/// The session cookie's value in a request.
fn cookie(headers: &HeaderMap) -> Option<String> {
    cookie_named(headers, COOKIE)
}

/// The value of cookie `wanted` in a request.
fn cookie_named(headers: &HeaderMap, wanted: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value.to_owned())
}

/// The cookie that binds a single sign-on under way to the browser that started it.
const SSO_COOKIE: &str = "mcp_gateway_oidc";

/// A form body's fields (repeated names kept in order).
fn form(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A person signs in to the page to answer elicitations, to review tool changes, or to
/// read the audit trail.
fn may_use_the_page(principal: &Principal) -> bool {
    [SCOPE_RESPOND, SCOPE_CATALOG, SCOPE_AUDIT]
        .iter()
        .any(|scope| principal.scopes.contains(*scope))
}

/// Where a sign-in may go on to: a page of one elicitation, the Audit view, else the list
/// (never anywhere else: no open redirect).
fn next_page(next: Option<&str>) -> String {
    if next == Some(AUDIT_PAGE) || next == Some(ACCOUNTS_PAGE) || next == Some(INSIGHTS_PAGE) {
        return next.unwrap_or(PREFIX).to_owned();
    }
    // The Connect link an agent was given: the Accounts view with a module (a name of
    // letters, digits, `_` and `-`) marked.
    if let Some(module) = next.and_then(|n| n.strip_prefix("/approvals/accounts?connect="))
        && !module.is_empty()
        && module.len() <= 200
        && module
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return format!("{ACCOUNTS_PAGE}?connect={module}");
    }
    next.and_then(|n| n.strip_prefix("/approvals/e/"))
        .and_then(|id| id.parse::<ElicitationId>().ok())
        .map_or_else(|| PREFIX.to_owned(), |id| format!("{PREFIX}/e/{id}"))
}

/// Whether the form's token is the session's (compared in constant time).
fn csrf_ok(fields: &[(String, String)], expected: &str) -> bool {
    field(fields, "csrf").is_some_and(|given| {
        given.len() == expected.len()
            && given
                .bytes()
                .zip(expected.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

fn with_headers(mut response: Response<Body>, content_type: &'static str) -> Response<Body> {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: with it a browser sends `Origin: null` on the page's own form
        // posts, which the origin check must refuse.
        HeaderValue::from_static("same-origin"),
    );
    response
}

fn html(status: StatusCode, page: String) -> Response<Body> {
    let mut response = Response::new(full(page));
    *response.status_mut() = status;
    with_headers(response, "text/html; charset=utf-8")
}

fn redirect(to: &str) -> Response<Body> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(to) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, to);
    }
    with_headers(response, "text/plain; charset=utf-8")
}

/// The approvals page: its own state, apart from the MCP surface's. The gateway and how
/// people are authenticated come with each request, in the snapshot the router took.
pub struct Page {
    web: WebSessions,
    /// Seals connections of accounts under way into the browser's cookie.
    connects: mcp_auth::sealed::Sealer,
    sso: Option<Arc<oidc::Sso>>,
    /// Where ended sign-ins are known (with ended session ids: one record, one feed).
    ended: Arc<mcp_http_kit::ended::EndedTokens>,
    uploads: Option<Arc<mcp_uploads::Uploads>>,
    streams: mcp_gate::streams::StreamSlots,
    /// Turns true at shutdown: the page's event streams end.
    closing: tokio::sync::watch::Receiver<bool>,
    secure_cookies: bool,
    max_streams_per_caller: usize,
    /// Where the page reads the time.
    clock: Arc<dyn Clock>,
}

/// One request to the page.
pub struct PageRequest<'a> {
    /// Its method.
    pub method: &'a Method,
    /// Its path (under [`PREFIX`]).
    pub path: &'a str,
    /// Its query string.
    pub query: Option<&'a str>,
    /// Its headers.
    pub headers: &'a HeaderMap,
    /// Its body, read.
    pub body: &'a Bytes,
    /// The address people reach the page at (the configured public URL, or a loopback
    /// `Host`): where the page sends a person back to from elsewhere. `None`: not known.
    pub base: Option<&'a str>,
}

/// What the page is built from.
pub struct PageParts {
    /// The seal-key ring's material (sign-ins are sealed under keys derived from it).
    pub keys: Vec<[u8; 32]>,
    /// The record of ended tokens, shared with the sessions.
    pub ended: Arc<mcp_http_kit::ended::EndedTokens>,
    /// The callers' open streams, shared with the MCP surface.
    pub streams: mcp_gate::streams::StreamSlots,
    /// Turns true at shutdown.
    pub closing: tokio::sync::watch::Receiver<bool>,
    /// Whether cookies are `Secure`.
    pub secure_cookies: bool,
    /// The cap on a caller's open streams (for the refusal's message).
    pub max_streams_per_caller: usize,
    /// Where the page reads the time (sign-ins' lifetimes, what it shows as time left).
    pub clock: Arc<dyn Clock>,
}

impl Page {
    /// The page; sign-ins sealed under `keys` (the seal-key ring's material).
    pub fn new(parts: PageParts) -> Self {
        Page {
            web: WebSessions::new(&parts.keys, parts.clock.clone()),
            connects: accounts::sealer(&parts.keys),
            sso: None,
            ended: parts.ended,
            uploads: None,
            streams: parts.streams,
            closing: parts.closing,
            secure_cookies: parts.secure_cookies,
            max_streams_per_caller: parts.max_streams_per_caller,
            clock: parts.clock,
        }
    }

    /// Keeps `file_upload` answers in `uploads`.
    pub fn set_uploads(&mut self, uploads: Arc<mcp_uploads::Uploads>) {
        self.uploads = Some(uploads);
    }

    /// Signs people in through `sso` too.
    pub fn set_sso(&mut self, sso: Arc<oidc::Sso>) {
        self.sso = Some(sso);
    }

    fn discard_uploads(&self, finished: impl IntoIterator<Item = ElicitationId>) {
        if let Some(uploads) = &self.uploads {
            uploads.discard(finished);
        }
    }

    fn set_cookie(&self, response: &mut Response<Body>, value: &str, max_age: u64) {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        let text = format!(
            "{COOKIE}={value}; Path={PREFIX}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }

    /// Serves everything under `/approvals` (the host and origin checks are done).
    pub async fn approvals(&self, snap: &Snapshot, request: PageRequest<'_>) -> Response<Body> {
        let PageRequest {
            method,
            path,
            query,
            headers,
            body,
            base,
        } = request;
        // A first visit's marker, back with the session's cookie: the page again without it,
        // so it stays in no address bar, bookmark or history.
        if method == Method::GET
            && let Some(query) = query
            && form(query.as_bytes())
                .iter()
                .any(|(k, _)| k == COOKIE_PROBE)
            && self.web_session(snap, headers).is_some()
        {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|pair| pair.split('=').next() != Some(COOKIE_PROBE))
                .collect();
            return if kept.is_empty() {
                redirect(path)
            } else {
                redirect(&format!("{path}?{}", kept.join("&")))
            };
        }
        let rest = path[PREFIX.len()..].trim_start_matches('/');
        let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        match (method, segments.as_slice()) {
            (&Method::GET, ["style.css"]) => {
                with_headers(Response::new(full(STYLE)), "text/css; charset=utf-8")
            }
            (&Method::GET, ["app.js"]) => with_headers(
                Response::new(full(SCRIPT)),
                "text/javascript; charset=utf-8",
            ),
            (&Method::POST, ["sign-in"]) => self.sign_in(snap, body).await,
            (&Method::GET, ["oidc", "start"]) => self.sso_start(query).await,
            (&Method::GET, ["oidc", "callback"]) => self.sso_callback(headers, query).await,
            (&Method::GET, []) => self.home(snap, headers, query).await,
            (&Method::GET, ["e", id]) => self.one(snap, headers, id, query).await,
            (&Method::GET, ["audit"]) => self.audit(snap, headers, query, false).await,
            (&Method::GET, ["insights"]) => self.insights(snap, headers, query).await,
            (&Method::GET, ["accounts"]) => self.accounts(snap, headers, query).await,
            (&Method::GET, ["accounts", module, "callback"]) => {
                self.account_callback(headers, snap, module, query).await
            }
            (&Method::GET, ["audit", "download"]) => self.audit(snap, headers, query, true).await,
            (&Method::GET, ["events"]) => match self.web_session(snap, headers) {
                Some((_, principal, _)) => {
                    // What the page showed: a change since is announced at once.
                    let seen = query
                        .and_then(|q| q.strip_prefix("seen="))
                        .map(str::to_owned);
                    self.events(snap, principal, seen)
                }
                None => html(StatusCode::UNAUTHORIZED, html::sign_in(None)),
            },
            (&Method::POST, [id, "upload"]) => self.upload(snap, headers, id, body.clone()).await,
            (&Method::POST, action) => self.form_post(snap, action, headers, body, base).await,
            _ => html(StatusCode::NOT_FOUND, html::sign_in(Some("No such page."))),
        }
    }

    /// The request's web session: its id, principal and form token.
    pub fn web_session(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
    ) -> Option<(String, Arc<Principal>, String)> {
        let id = cookie(headers)?;
        let signed_in = self.web.get(&id)?;
        if self.ended.contains(&mcp_auth::sealed::token_hash(&id)) {
            return None;
        }
        // Made under this auth mode, with a credential that still holds.
        let auth = snap.auth.clone();
        if signed_in.mode != auth.mode() {
            return None;
        }
        let principal = match (&*auth, &signed_in.cred) {
            (Auth::None(principal), _) => principal.clone(),
            (Auth::Tokens(_), Some(cred)) => {
                let made_at = signed_in.ends.unix_timestamp()
                    - i64::try_from(SESSION_TTL.as_secs()).unwrap_or(i64::MAX);
                auth.by_digest(cred, made_at)?
            }
            (Auth::Tokens(_), None) => return None,
            (Auth::Jwt(_), _) => signed_in.principal,
            // Still the person the embedding service says makes this request.
            (Auth::Embedder(caller), _) => {
                let now = (caller.0)(headers)?;
                if now.caller != signed_in.principal.caller {
                    return None;
                }
                Arc::new(now)
            }
        };
        Some((id, principal, signed_in.csrf))
    }

    fn set_named_cookie(
        &self,
        response: &mut Response<Body>,
        name: &str,
        value: &str,
        path: &str,
        same_site: &str,
        max_age: u64,
    ) {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        let text = format!(
            "{name}={value}; Path={path}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{secure}"
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others_and_a_lookalike_is_not_it() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; mcp_gateway_approvals_x=2; mcp_gateway_approvals=abc"),
        );
        assert_eq!(cookie(&headers).as_deref(), Some("abc"));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("mcp_gateway_approvals_x=2"),
        );
        assert_eq!(cookie(&headers), None);
    }

    #[test]
    fn a_form_token_must_match_exactly() {
        let fields = form(b"csrf=abc&decision=approve");
        assert!(csrf_ok(&fields, "abc"));
        assert!(!csrf_ok(&fields, "abd"));
        assert!(!csrf_ok(&form(b"decision=approve"), "abc"));
        assert!(!csrf_ok(&form(b"csrf="), "abc"));
    }
}
