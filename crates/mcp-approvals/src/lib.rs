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

mod accounts;
mod diff;
mod html;
pub mod oidc;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elicitation_core::{CancelReason, ElicitationId, RespondOutcome, ResponseSpec};
use elicitation_store::{Clock, ListQuery};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::BodyExt;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};

use mcp_auth::{Auth, Principal, SCOPE_AUDIT, SCOPE_CATALOG, SCOPE_RESPOND};
use mcp_http_kit::body::{Body, ChannelBody, full};
use mcp_http_kit::error::{HttpError as _, McpError};
use mcp_http_kit::live::Snapshot;

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
    rng: SystemRandom,
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
            rng: SystemRandom::new(),
        }
    }

    fn random(&self) -> Option<String> {
        let mut bytes = [0u8; 32];
        self.rng.fill(&mut bytes).ok()?;
        Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
/// of other callers that its approver groups answer (`for`: whose), newest first. A
/// confirmation it may not answer itself is marked `answerable: false`.
async fn waiting_for(
    store: &dyn elicitation_store::ElicitationStore,
    principal: &Principal,
) -> Result<Vec<Value>, elicitation_store::StoreError> {
    let groups: Vec<String> = principal.groups.iter().cloned().collect();
    let may_answer = |owner: &elicitation_store::Caller,
                      stored: &elicitation_store::StoredElicitation| {
        stored
            .call
            .as_ref()
            .and_then(|c| c.approval.as_ref())
            .is_none_or(|a| a.may_answer(owner, &principal.caller, &groups))
    };
    let own = store
        .list(
            &principal.caller,
            ListQuery::pending(elicitation_store::MAX_LIST_LIMIT),
        )
        .await?;
    let mut items: Vec<Value> = own
        .into_iter()
        .filter_map(Result::ok)
        .map(|stored| {
            let mut item = mcp_http_kit::views::view(&stored);
            item["answerable"] = json!(may_answer(&principal.caller, &stored));
            item
        })
        .collect();
    if let Some(approver) = principal.approver() {
        for (owner, stored) in store
            .approver_pending(&approver, elicitation_store::MAX_LIST_LIMIT)
            .await?
        {
            if owner == principal.caller {
                continue;
            }
            let mut item = mcp_http_kit::views::view(&stored);
            item["for"] = json!(match owner.tenant_id() {
                Some(tenant) => format!("{} ({tenant})", owner.subject_id()),
                None => owner.subject_id().to_owned(),
            });
            item["answerable"] = json!(may_answer(&owner, &stored));
            items.push(item);
        }
        items.sort_by(|a, b| {
            let key = |v: &Value| {
                v.get("created_at")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            key(b).cmp(&key(a))
        });
    }
    Ok(items)
}

/// A short fingerprint of a list of ids (which pending elicitations a page shows).
fn fingerprint<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for id in ids {
        context.update(id.as_bytes());
        context.update(b"\n");
    }
    context
        .finish()
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
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
    if next == Some(AUDIT_PAGE) || next == Some(ACCOUNTS_PAGE) {
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
    uploads: Option<Arc<mcp_http_kit::uploads::Uploads>>,
    streams: mcp_http_kit::streams::StreamSlots,
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
    pub streams: mcp_http_kit::streams::StreamSlots,
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
    pub fn set_uploads(&mut self, uploads: Arc<mcp_http_kit::uploads::Uploads>) {
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

    /// `GET /approvals`: the page of what waits (with a notice of what was just done), or a
    /// first visit's sign-in.
    async fn home(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Response<Body> {
        let notice = query
            .and_then(|q| q.strip_prefix("done="))
            .map(|done| match done {
                "approved" => "Approved.",
                "uploaded" => "Uploaded.",
                "declined" => "Declined.",
                "granted" => "Approved, and allowed for the time chosen.",
                "edited" => "Approved with your arguments.",
                "revoked" => "Revoked.",
                "cancelled" => "Cancelled.",
                "tool-approved" => "Change approved: the tool is listed again as it reads now.",
                "tool-rejected" => "Change rejected: the tool stays withheld until its module lists the approved definition again.",
                _ => "Answered.",
            });
        match self.web_session(snap, headers) {
            Some((_, principal, csrf)) => {
                self.render(snap, &principal, &csrf, notice, None, StatusCode::OK)
                    .await
            }
            None => self.first_visit(snap, PREFIX, query),
        }
    }

    /// `GET /approvals/audit` (the view, newest first, a page at a time) and
    /// `/approvals/audit/download` (the same filters as JSON lines, oldest first): the audit
    /// trail of the person's tenant, with `audit:read`.
    async fn audit(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        query: Option<&str>,
        download: bool,
    ) -> Response<Body> {
        let Some((_, principal, csrf)) = self.web_session(snap, headers) else {
            return if download {
                html(
                    StatusCode::UNAUTHORIZED,
                    html::sign_in_to(None, Some(AUDIT_PAGE)),
                )
            } else {
                self.first_visit(snap, AUDIT_PAGE, query)
            };
        };
        if !principal.scopes.contains(SCOPE_AUDIT) {
            return html(
                StatusCode::FORBIDDEN,
                html::sign_in(Some("Reading the audit trail needs the scope audit:read.")),
            );
        }
        // The form sends every field, the empty ones too: those filter nothing.
        let given: Vec<(String, String)> = form(query.unwrap_or_default().as_bytes())
            .into_iter()
            .filter(|(k, v)| !v.is_empty() && k != "order" && k != "format" && k != COOKIE_PROBE)
            .collect();
        let filters: Vec<(String, String)> = given
            .iter()
            .filter(|(k, _)| k != "cursor")
            .cloned()
            .collect();
        let encode = |pairs: &[(String, String)]| {
            let mut out = form_urlencoded::Serializer::new(String::new());
            for (k, v) in pairs {
                out.append_pair(k, v);
            }
            out.finish()
        };
        let parsed = mcp_http_kit::audit::parse_query(Some(&encode(&given)));
        let trail = snap.gateway.trail();
        if download {
            let mut asked = match parsed {
                Ok((asked, _)) => asked,
                Err(e) => return html(e.status(None), html::sign_in(Some(&e.to_string()))),
            };
            asked.order = elicitation_store::AuditOrder::Oldest;
            asked.limit = elicitation_store::MAX_LIST_LIMIT;
            let mut entries = Vec::new();
            loop {
                let page = match trail.audit_events(&principal.caller, &asked).await {
                    Ok(page) => page,
                    Err(e) => {
                        let e = McpError::from(e);
                        return html(e.status(None), html::sign_in(Some(&e.to_string())));
                    }
                };
                entries.extend(page.entries);
                let more = page.next.filter(|_| entries.len() < AUDIT_DOWNLOAD);
                if more.is_none() {
                    entries.truncate(AUDIT_DOWNLOAD);
                    let next = page.next.and(entries.last().map(|e| e.id));
                    let mut reply = mcp_http_kit::audit::lines(&entries, next, page.holds);
                    let headers = reply.headers_mut();
                    headers.insert(
                        header::CONTENT_DISPOSITION,
                        HeaderValue::from_static(
                            "attachment; filename=\"mcp-gateway-audit.jsonl\"",
                        ),
                    );
                    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                    headers.insert(
                        header::X_CONTENT_TYPE_OPTIONS,
                        HeaderValue::from_static("nosniff"),
                    );
                    return reply;
                }
                asked.cursor = more;
            }
        }
        let mut problem = None;
        let mut status = StatusCode::OK;
        let mut events = Vec::new();
        let mut older = None;
        let mut holds = None;
        match parsed {
            Ok((mut asked, _)) => {
                asked.order = elicitation_store::AuditOrder::Newest;
                asked.limit = AUDIT_ROWS;
                match trail.audit_events(&principal.caller, &asked).await {
                    Ok(page) => {
                        events = page.entries.iter().map(|e| e.to_json()).collect();
                        holds = Some(page.holds.to_json());
                        older = page.next.map(|next| {
                            let mut pairs = filters.clone();
                            pairs.push(("cursor".into(), next.to_string()));
                            format!("?{}", encode(&pairs))
                        });
                    }
                    Err(e) => {
                        let e = McpError::from(e);
                        status = e.status(None);
                        problem = Some(format!("The audit trail could not be read: {e}"));
                    }
                }
            }
            Err(e) => {
                status = e.status(None);
                problem = Some(e.to_string());
            }
        }
        let download = if filters.is_empty() {
            String::new()
        } else {
            format!("?{}", encode(&filters))
        };
        let outcomes: Vec<&str> = elicitation_store::audit_outcomes().collect();
        let subject = principal.caller.subject_id().to_owned();
        let view = html::AuditView {
            signed_in_as: (!matches!(*snap.auth, Auth::None(_))).then_some(subject.as_str()),
            csrf: &csrf,
            filters: &filters,
            events: &events,
            older,
            download,
            holds,
            problem: problem.as_deref(),
            outcomes: &outcomes,
            download_limit: AUDIT_DOWNLOAD,
        };
        html(status, html::audit_page(&view))
    }

    /// `GET /approvals/e/{id}`: one elicitation, or a sign-in that comes back to it.
    async fn one(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        id: &str,
        query: Option<&str>,
    ) -> Response<Body> {
        let Ok(id) = id.parse::<ElicitationId>() else {
            return html(
                StatusCode::NOT_FOUND,
                html::sign_in(Some("No such elicitation.")),
            );
        };
        match self.web_session(snap, headers) {
            Some((_, principal, csrf)) => self.render_one(snap, &principal, &csrf, id).await,
            None => match &*snap.auth {
                Auth::None(_) => self.first_visit(snap, &format!("{PREFIX}/e/{id}"), query),
                Auth::Tokens(_) | Auth::Jwt(_) => html(
                    StatusCode::OK,
                    html::sign_in_with(None, Some(&format!("{PREFIX}/e/{id}")), self.sso.is_some()),
                ),
            },
        }
    }

    /// A form posted by a signed-in page (its form token checked): sign out, answer, cancel.
    async fn form_post(
        &self,
        snap: &Snapshot,
        action: &[&str],
        headers: &HeaderMap,
        body: &Bytes,
        base: Option<&str>,
    ) -> Response<Body> {
        let Some((session, principal, csrf)) = self.web_session(snap, headers) else {
            return html(
                StatusCode::UNAUTHORIZED,
                html::sign_in(Some("Please sign in again.")),
            );
        };
        let fields = form(body);
        if !csrf_ok(&fields, &csrf) {
            return html(
                StatusCode::FORBIDDEN,
                html::sign_in(Some(
                    "That form is stale or did not come from this page; nothing was changed.",
                )),
            );
        }
        // Answering needs its own scope: a person who may only review tool definitions
        // signs in, but answers nothing.
        let answers = !matches!(action, ["sign-out"] | ["catalog", ..] | ["accounts", ..]);
        if answers && !principal.scopes.contains(SCOPE_RESPOND) {
            return self
                .refusal(
                    snap,
                    &principal,
                    &csrf,
                    McpError::Forbidden {
                        scope: SCOPE_RESPOND,
                    },
                )
                .await;
        }
        match action {
            ["sign-out"] => self.sign_out(snap, &session, &principal).await,
            ["catalog", id, decision @ ("approve" | "reject")] => {
                self.decide_change(snap, &principal, &csrf, id, *decision == "approve")
                    .await
            }
            [id, "respond"] => self.respond(snap, &principal, &csrf, id, &fields).await,
            [id, "cancel"] => self.cancel(snap, &principal, &csrf, id).await,
            ["grants", id, "revoke"] => self.revoke(snap, &principal, &csrf, id).await,
            ["accounts", module, action @ ("connect" | "disconnect")] => {
                self.account_action(snap, &principal, &csrf, module, *action == "connect", base)
                    .await
            }
            _ => html(StatusCode::NOT_FOUND, html::sign_in(Some("No such page."))),
        }
    }

    /// `GET /approvals/accounts`: the person's accounts at each module run as its callers.
    async fn accounts(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Response<Body> {
        let fields = form(query.unwrap_or_default().as_bytes());
        let marked = field(&fields, "connect");
        let Some((_, principal, csrf)) = self.web_session(snap, headers) else {
            // Back to the same view, the module still marked, once signed in.
            let to = next_page(
                marked
                    .map(|m| format!("{ACCOUNTS_PAGE}?connect={m}"))
                    .as_deref(),
            );
            let to = if to == PREFIX {
                ACCOUNTS_PAGE.to_owned()
            } else {
                to
            };
            return self.first_visit(snap, &to, query);
        };
        let notice = accounts::notice(field(&fields, "done"));
        let (status, page) =
            accounts::view(&snap.gateway, &principal, &csrf, marked, notice, None).await;
        html(status, page)
    }

    /// `POST /approvals/accounts/{module}/connect` and `…/disconnect` (the form's token
    /// checked): Connect goes on to the module's authorization server, with the connection
    /// bound to this browser by a cookie of its own.
    async fn account_action(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        module: &str,
        connect: bool,
        base: Option<&str>,
    ) -> Response<Body> {
        let problem = if connect {
            let now = self.clock.now().unix_timestamp();
            match accounts::start(&snap.gateway, principal, module, base, &self.connects, now).await
            {
                Ok((url, cookie)) => {
                    // A page of this site that goes on to the server (a redirect after a
                    // form post is held to the page's `form-action 'self'`).
                    let mut response = html(
                        StatusCode::OK,
                        html::continue_to("Going to the module's sign-in", &url),
                    );
                    self.set_named_cookie(
                        &mut response,
                        accounts::CONNECT_COOKIE,
                        &cookie,
                        &accounts::module_path(module),
                        "Lax",
                        accounts::CONNECT_TTL.unsigned_abs(),
                    );
                    return response;
                }
                Err(problem) => problem,
            }
        } else {
            match accounts::disconnect(&snap.gateway, principal, module).await {
                Ok(()) => return redirect(&format!("{ACCOUNTS_PAGE}?done=disconnected")),
                Err(problem) => problem,
            }
        };
        let (status, page) = accounts::view(
            &snap.gateway,
            principal,
            csrf,
            Some(module),
            None,
            Some(&problem),
        )
        .await;
        html(status, page)
    }

    /// `GET /approvals/accounts/{module}/callback`: the authorization server's answer. The
    /// page's session cookie does not come along (SameSite=Strict, and the navigation began
    /// at the server): who connects is the connect cookie's, which is used once.
    async fn account_callback(
        &self,
        headers: &HeaderMap,
        snap: &Snapshot,
        module: &str,
        query: Option<&str>,
    ) -> Response<Body> {
        let fields = form(query.unwrap_or_default().as_bytes());
        let path = accounts::module_path(module);
        let now = self.clock.now().unix_timestamp();
        let state = field(&fields, "state").unwrap_or_default();
        // Only a cookie that opens as this module's connection with this state is recorded
        // as used (anything else is refused without growing the record).
        let cookie = cookie_named(headers, accounts::CONNECT_COOKIE)
            .filter(|c| !self.ended.contains(&mcp_auth::sealed::token_hash(c)));
        let connecting = cookie.as_deref().and_then(|c| {
            let opened = accounts::opened(&self.connects, Some(c), module, state, now)?;
            self.ended.end(
                mcp_auth::sealed::token_hash(c),
                self.clock.now() + time::Duration::minutes(15),
            );
            Some(opened)
        });
        let finished = match &connecting {
            None => Err((
                StatusCode::BAD_REQUEST,
                "This connection is unknown or has expired, or was started in another browser; start again from Accounts.".to_owned(),
            )),
            Some(connecting) => {
                let answer = (
                    field(&fields, "code"),
                    field(&fields, "error"),
                    field(&fields, "iss"),
                );
                accounts::finish(&snap.gateway, connecting, answer).await
            }
        };
        let mut response = match finished {
            Ok(()) => html(
                StatusCode::OK,
                html::continue_to("Connected", &format!("{ACCOUNTS_PAGE}?done=connected")),
            ),
            Err((status, problem)) => html(status, html::sign_in_with(Some(&problem), None, false)),
        };
        self.set_named_cookie(&mut response, accounts::CONNECT_COOKIE, "", &path, "Lax", 0);
        response
    }

    /// Ends the sign-in `session` (and, signed in through the identity provider, sends the
    /// person to sign out there too).
    async fn sign_out(
        &self,
        snap: &Snapshot,
        session: &str,
        principal: &Principal,
    ) -> Response<Body> {
        if let Err(e) = snap.gateway.take_call(&principal.caller, SIGNING) {
            return too_many(&e);
        }
        let id_token = self.end_web_session(snap, session, principal).await;
        let to = match &self.sso {
            Some(sso) => sso.sign_out_url(id_token.as_deref()).await,
            None => None,
        };
        let mut response = match to {
            Some(to) => html(StatusCode::OK, html::continue_to("Signed out here", &to)),
            None => redirect(PREFIX),
        };
        self.set_cookie(&mut response, "", 0);
        response
    }

    /// The person cancels elicitation `id`.
    async fn cancel(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        id: &str,
    ) -> Response<Body> {
        let Ok(id) = id.parse::<ElicitationId>() else {
            return html(
                StatusCode::NOT_FOUND,
                html::sign_in(Some("No such elicitation.")),
            );
        };
        let store = snap.gateway.store().clone();
        match store
            .cancel(&principal.caller, id, CancelReason::CancelledByPerson)
            .await
        {
            Ok(_) => {
                self.discard_uploads([id]);
                redirect("/approvals?done=cancelled")
            }
            Err(e) => self.refusal(snap, principal, csrf, e.into()).await,
        }
    }

    /// A file the page uploads to answer a `file_upload` elicitation: the raw bytes as the
    /// body (the page's script sends them; the form token in `X-CSRF-Token`, the name in
    /// `X-File-Name`, URI-encoded). The gateway keeps the file, computes its size and
    /// SHA-256, and records the type's response; an answer that is not recorded leaves no
    /// file behind. Answers JSON.
    async fn upload(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        id: &str,
        body: Bytes,
    ) -> Response<Body> {
        let answer = |status: StatusCode, body: Value| {
            let mut response = Response::new(full(body.to_string()));
            *response.status_mut() = status;
            with_headers(response, "application/json")
        };
        let Some((_, principal, csrf)) = self.web_session(snap, headers) else {
            return answer(
                StatusCode::UNAUTHORIZED,
                json!({"error": "please sign in again"}),
            );
        };
        let given = headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !csrf_ok(&[("csrf".to_owned(), given.to_owned())], &csrf) {
            return answer(
                StatusCode::FORBIDDEN,
                json!({"error": "the request did not come from this page"}),
            );
        }
        if !principal.scopes.contains(SCOPE_RESPOND) {
            return answer(
                StatusCode::FORBIDDEN,
                json!({"error": format!("this needs the scope {SCOPE_RESPOND}")}),
            );
        }
        let Some(uploads) = &self.uploads else {
            return answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "this gateway keeps no uploads (configure [uploads])"}),
            );
        };
        let Ok(eid) = id.parse::<ElicitationId>() else {
            return answer(
                StatusCode::NOT_FOUND,
                json!({"error": "no such elicitation"}),
            );
        };
        let store = snap.gateway.store().clone();
        let caller = &principal.caller;
        let max_bytes = match store.get(caller, eid).await {
            Ok(stored) => match stored.elicitation.spec.response() {
                ResponseSpec::FileUpload { max_bytes, .. } => *max_bytes,
                _ => {
                    return answer(
                        StatusCode::BAD_REQUEST,
                        json!({"error": "this elicitation does not ask for a file"}),
                    );
                }
            },
            Err(e) => {
                let e = McpError::from(e);
                return answer(e.status(None), json!({"error": e.to_string()}));
            }
        };
        // A file over the question's own limit is refused before it is kept; it costs no
        // retry (the page checks the same limit before sending).
        let size = u64::try_from(body.len()).unwrap_or(u64::MAX);
        if let Some(max) = max_bytes.filter(|max| size > *max) {
            return answer(
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({"error": format!("the file is {size} bytes; this question takes at most {max}")}),
            );
        }
        let name = headers
            .get("x-file-name")
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                form_urlencoded::parse(format!("n={v}").as_bytes())
                    .next()
                    .map(|(_, n)| n.into_owned())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let saved = match uploads.save(eid, &name, content_type, body).await {
            Ok(saved) => saved,
            Err(e) => {
                let e = McpError::BlobStore(e.to_string());
                let problem = e.problem();
                return answer(
                    e.status(None),
                    json!({"error": problem.get("detail").cloned().unwrap_or_default()}),
                );
            }
        };
        let payload = saved.payload();
        let by = principal.answered_by(mcp_auth::AnsweredVia::Page);
        let recorded = store
            .respond_as(caller, eid, payload.clone(), Some(&by))
            .await;
        if !matches!(recorded, Ok(RespondOutcome::Recorded)) {
            uploads.remove(&saved.upload_id).await;
        }
        match recorded {
            Ok(RespondOutcome::Recorded) => {
                // Files of earlier attempts that were never recorded (a crash between
                // keeping and recording) go now.
                if let Err(e) = uploads.remove_for(eid, Some(&saved.upload_id)).await {
                    tracing::warn!(elicitation = %eid, error = %e, "earlier unrecorded uploads could not be removed");
                }
                answer(StatusCode::OK, json!({"recorded": payload}))
            }
            Ok(RespondOutcome::Invalid {
                errors,
                retries_left,
            }) => {
                let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                answer(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"errors": errors, "retries_left": retries_left}),
                )
            }
            Ok(other) => answer(
                StatusCode::CONFLICT,
                json!({"error": format!("not recorded: {other:?}")}),
            ),
            Err(e) => {
                let e = McpError::from(e);
                answer(e.status(None), json!({"error": e.to_string()}))
            }
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
        };
        Some((id, principal, signed_in.csrf))
    }

    /// Signs out: the cookie `value` is refused from now on, here and (recorded in the
    /// store) on every instance sharing it. Returns its ID token, if it had one.
    async fn end_web_session(
        &self,
        snap: &Snapshot,
        value: &str,
        principal: &Principal,
    ) -> Option<String> {
        let SignIn { ends, id_token, .. } = self.web.get(value)?;
        let hash = mcp_auth::sealed::token_hash(value);
        self.ended.end(hash, ends);
        let recorded = tokio::time::timeout(
            Duration::from_secs(5),
            snap.gateway
                .fleet()
                .end_session(&principal.caller, hash, ends),
        )
        .await;
        if !matches!(recorded, Ok(Ok(()))) {
            tracing::warn!(
                "a sign-out could not be recorded in the store; other instances may accept the cookie until it expires"
            );
        }
        id_token
    }

    /// Single sign-on, step one: off to the identity provider, coming back to `next` (a
    /// page of one elicitation, else the list).
    async fn sso_start(&self, query: Option<&str>) -> Response<Body> {
        let Some(sso) = &self.sso else {
            return html(StatusCode::NOT_FOUND, html::sign_in(Some("No such page.")));
        };
        let fields = form(query.unwrap_or_default().as_bytes());
        let next = next_page(field(&fields, "next"));
        match sso.start(next).await {
            Ok(start) => {
                let mut response = redirect(&start.url);
                self.set_named_cookie(
                    &mut response,
                    SSO_COOKIE,
                    &start.cookie,
                    "/approvals/oidc",
                    "Lax",
                    600,
                );
                response
            }
            Err(e) => html(
                StatusCode::BAD_GATEWAY,
                html::sign_in_with(Some(&e.to_string()), None, true),
            ),
        }
    }

    /// Single sign-on, step two: the identity provider's answer.
    async fn sso_callback(&self, headers: &HeaderMap, query: Option<&str>) -> Response<Body> {
        let Some(sso) = &self.sso else {
            return html(StatusCode::NOT_FOUND, html::sign_in(Some("No such page.")));
        };
        let fields = form(query.unwrap_or_default().as_bytes());
        let state = field(&fields, "state").unwrap_or_default();
        // Each sign-in's cookie is used once: a replayed callback is refused here (and, on
        // another instance, by the provider, which redeems a code once).
        let bound = cookie_named(headers, SSO_COOKIE)
            .filter(|c| !self.ended.contains(&mcp_auth::sealed::token_hash(c)));
        // Only a real sign-in under way is recorded (a forged cookie never grows the
        // record); anything else fails below.
        if let Some(used) = bound.as_ref().filter(|c| sso.binds(state, c)) {
            self.ended.end(
                mcp_auth::sealed::token_hash(used),
                self.clock.now() + time::Duration::minutes(15),
            );
        }
        let signed_in = sso
            .finish(
                state,
                bound.as_deref(),
                field(&fields, "code"),
                field(&fields, "error"),
            )
            .await;
        let fail = |status: StatusCode, problem: &str| {
            let mut response = html(status, html::sign_in_with(Some(problem), None, true));
            self.set_named_cookie(&mut response, SSO_COOKIE, "", "/approvals/oidc", "Lax", 0);
            response
        };
        let signed_in = match signed_in {
            Ok(signed_in) => signed_in,
            Err(e) => return fail(StatusCode::BAD_REQUEST, &e.to_string()),
        };
        if !may_use_the_page(&signed_in.principal) {
            return fail(
                StatusCode::FORBIDDEN,
                "Your account may neither answer elicitations nor review tool changes here (the identity provider granted neither scope).",
            );
        }
        let Some((id, _)) = self.web.open_with(
            Arc::new(signed_in.principal),
            Some(signed_in.id_token),
            "jwt",
            None,
        ) else {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The system random source failed.",
            );
        };
        // A page of this site goes on (not a redirect): the session cookie is SameSite=Strict,
        // and a browser does not send it on a redirect chain that began at the provider.
        let mut response = html(
            StatusCode::OK,
            html::continue_to("Signed in", &signed_in.next),
        );
        self.set_cookie(&mut response, &id, SESSION_TTL.as_secs());
        self.set_named_cookie(&mut response, SSO_COOKIE, "", "/approvals/oidc", "Lax", 0);
        response
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

    /// No session yet: sign in, or (auth `none`) a session opened here and the page asked
    /// for again with its cookie. The redirect carries [`COOKIE_PROBE`]: a request that comes
    /// back with it and still without the cookie is from a client that keeps no cookies
    /// (`curl`), which is told so instead of being sent round the same redirect for ever.
    fn first_visit(&self, snap: &Snapshot, to: &str, query: Option<&str>) -> Response<Body> {
        let Auth::None(principal) = &*snap.auth else {
            let next = (to != PREFIX).then_some(to);
            return html(
                StatusCode::OK,
                html::sign_in_with(None, next, self.sso.is_some()),
            );
        };
        if form(query.unwrap_or_default().as_bytes())
            .iter()
            .any(|(k, _)| k == COOKIE_PROBE)
        {
            return html(StatusCode::BAD_REQUEST, html::needs_cookies(to));
        }
        let Some((id, _)) = self.web.open(principal.clone(), "none", None) else {
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                html::sign_in(Some("A sign-in could not be made here.")),
            );
        };
        let sep = if to.contains('?') { '&' } else { '?' };
        let mut response = redirect(&format!("{to}{sep}{COOKIE_PROBE}=1"));
        self.set_cookie(&mut response, &id, SESSION_TTL.as_secs());
        response
    }

    async fn sign_in(&self, snap: &Snapshot, body: &[u8]) -> Response<Body> {
        let fields = form(body);
        let token = field(&fields, "token").unwrap_or_default().trim();
        let principal = match &*snap.auth {
            Auth::None(principal) => Some(principal.clone()),
            Auth::Tokens(_) | Auth::Jwt(_) if token.is_empty() => None,
            Auth::Tokens(_) | Auth::Jwt(_) => snap.auth.token(token).await,
        };
        let Some(principal) = principal else {
            return html(
                StatusCode::UNAUTHORIZED,
                html::sign_in(Some("That token is not known here.")),
            );
        };
        if !may_use_the_page(&principal) {
            return html(
                StatusCode::FORBIDDEN,
                html::sign_in(Some(
                    "That token may neither answer elicitations, review tool changes nor read the audit trail (it has none of elicitations:respond, catalog:approve, audit:read).",
                )),
            );
        }
        // Each sign-in is a cookie every instance honours until it ends or is signed out
        // (which the store records): they count against the caller's call rate.
        if let Err(e) = snap.gateway.take_call(&principal.caller, SIGNING) {
            return too_many(&e);
        }
        let auth = snap.auth.clone();
        let cred = matches!(&*auth, Auth::Tokens(_)).then(|| mcp_auth::token_sha256(token));
        let Some((id, _)) = self.web.open(principal, auth.mode(), cred) else {
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                html::sign_in(Some(
                    "A sign-in could not be made for this token (too many groups for a cookie?).",
                )),
            );
        };
        let next = next_page(field(&fields, "next"));
        let mut response = redirect(&next);
        self.set_cookie(&mut response, &id, SESSION_TTL.as_secs());
        response
    }

    /// The page of one elicitation (where a URL-mode elicitation sends the person): that
    /// item to answer while it waits, else where it stands.
    async fn render_one(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        id: ElicitationId,
    ) -> Response<Body> {
        if !principal.scopes.contains(SCOPE_RESPOND) {
            let refused = McpError::Forbidden {
                scope: SCOPE_RESPOND,
            };
            return self.refusal(snap, principal, csrf, refused).await;
        }
        let store = snap.gateway.store().clone();
        let stored = match store.get(&principal.caller, id).await {
            Ok(stored) => stored,
            Err(e) => {
                let e = McpError::from(e);
                return html(e.status(None), html::sign_in(Some(&e.to_string())));
            }
        };
        let view = mcp_http_kit::views::view(&stored);
        let subject = principal.caller.subject_id().to_owned();
        let status = view
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let notice = (status != "pending").then(|| format!("This elicitation is {status}."));
        let grant_for = html::grant_durations(snap.gateway.max_grant());
        let frame = html::Frame {
            signed_in_as: (!matches!(*snap.auth, Auth::None(_))).then_some(subject.as_str()),
            csrf,
            notice: notice.as_deref(),
            seen: None,
            grant_for: &grant_for,
            respond: true,
            changes: None,
            audit: false,
            accounts: false,
        };
        let (pending, history) = if status == "pending" {
            (vec![view], Vec::new())
        } else {
            (Vec::new(), vec![view])
        };
        let page = html::page(&frame, &pending, &history, &[], None, self.clock.now());
        html(StatusCode::OK, page)
    }

    async fn render(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        notice: Option<&str>,
        error: Option<html::ItemError<'_>>,
        status: StatusCode,
    ) -> Response<Body> {
        let changes = self.changes_for(snap, principal).await;
        if !principal.scopes.contains(SCOPE_RESPOND) {
            let subject = principal.caller.subject_id().to_owned();
            let frame = html::Frame {
                signed_in_as: (!matches!(*snap.auth, Auth::None(_))).then_some(subject.as_str()),
                csrf,
                notice,
                seen: None,
                grant_for: &[],
                respond: false,
                changes: changes.as_deref(),
                audit: principal.scopes.contains(SCOPE_AUDIT),
                accounts: !snap.gateway.connectable().is_empty(),
            };
            let page = html::page(&frame, &[], &[], &[], None, self.clock.now());
            return html(status, page);
        }
        let store = snap.gateway.store().clone();
        let caller = &principal.caller;
        let views = |listed: Vec<elicitation_store::Listed>| -> Vec<Value> {
            listed
                .into_iter()
                .filter_map(Result::ok)
                .map(|stored| mcp_http_kit::views::view(&stored))
                .collect()
        };
        let pending = match waiting_for(store.as_ref(), principal).await {
            Ok(items) => items,
            Err(e) => {
                return html(
                    McpError::from(e).status(None),
                    html::sign_in(Some(
                        "The elicitation store is unavailable; try again shortly.",
                    )),
                );
            }
        };
        let mut all = ListQuery::pending(HISTORY * 2);
        all.status = None;
        let history: Vec<Value> = match store.list(caller, all).await {
            Ok(listed) => views(listed)
                .into_iter()
                .filter(|v| v.get("status").and_then(Value::as_str) != Some("pending"))
                .take(HISTORY)
                .collect(),
            Err(_) => Vec::new(),
        };
        let subject = principal.caller.subject_id().to_owned();
        let seen = fingerprint(
            pending
                .iter()
                .filter_map(|v| v.get("id").and_then(Value::as_str)),
        );
        // The live grants the person holds or made (a failure to read them hides only them).
        let now = self.clock.now();
        let grants: Vec<Value> = match snap.gateway.grants().grants(caller, HISTORY * 2).await {
            Ok(grants) => grants
                .iter()
                .filter(|g| g.is_live(now))
                .map(|g| mcp_http_kit::views::grant_view(g, now))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the standing grants for the approvals page");
                Vec::new()
            }
        };
        let grant_for = html::grant_durations(snap.gateway.max_grant());
        let frame = html::Frame {
            signed_in_as: (!matches!(*snap.auth, Auth::None(_))).then_some(subject.as_str()),
            csrf,
            notice,
            seen: Some(&seen),
            grant_for: &grant_for,
            respond: true,
            changes: changes.as_deref(),
            audit: principal.scopes.contains(SCOPE_AUDIT),
            accounts: !snap.gateway.connectable().is_empty(),
        };
        let page = html::page(&frame, &pending, &history, &grants, error.as_ref(), now);
        html(status, page)
    }

    /// The withheld definitions a person with `catalog:approve` reviews (`None` without
    /// the scope; a failure to read them shows the section empty, with a warning logged).
    async fn changes_for(&self, snap: &Snapshot, principal: &Principal) -> Option<Vec<Value>> {
        if !principal.scopes.contains(SCOPE_CATALOG) {
            return None;
        }
        match snap
            .gateway
            .catalog()
            .definition_changes(elicitation_store::MAX_LIST_LIMIT)
            .await
        {
            Ok(changes) => Some(
                changes
                    .iter()
                    .filter(|c| c.status == elicitation_store::ChangeStatus::Pending)
                    .map(mcp_http_kit::views::change_view)
                    .collect(),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the withheld tool definitions for the approvals page");
                Some(Vec::new())
            }
        }
    }

    /// The page again, with why a request of the person's was refused at the top.
    async fn refusal(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        e: McpError,
    ) -> Response<Body> {
        self.render(
            snap,
            principal,
            csrf,
            Some(&e.to_string()),
            None,
            e.status(None),
        )
        .await
    }

    /// A person's decision on a withheld tool definition, from the page's Tool changes
    /// section (scope `catalog:approve`).
    async fn decide_change(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        id: &str,
        approve: bool,
    ) -> Response<Body> {
        if !principal.scopes.contains(SCOPE_CATALOG) {
            let refused = McpError::Forbidden {
                scope: SCOPE_CATALOG,
            };
            return self.refusal(snap, principal, csrf, refused).await;
        }
        let Ok(id) = id.parse::<uuid::Uuid>() else {
            return self
                .refusal(snap, principal, csrf, McpError::NotFound)
                .await;
        };
        let by = principal.answered_by(mcp_auth::AnsweredVia::Page);
        match snap
            .gateway
            .decide_definition_change(id, approve, &by)
            .await
        {
            Ok(_) if approve => redirect("/approvals?done=tool-approved"),
            Ok(_) => redirect("/approvals?done=tool-rejected"),
            Err(e) => self.refusal(snap, principal, csrf, e.into()).await,
        }
    }

    /// Revokes a standing grant the person holds or made, from the page's Grants section.
    async fn revoke(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        id: &str,
    ) -> Response<Body> {
        let Ok(id) = id.parse::<elicitation_store::GrantId>() else {
            return html(StatusCode::NOT_FOUND, html::sign_in(Some("No such grant.")));
        };
        let by = principal.answered_by(mcp_auth::AnsweredVia::Page);
        match snap
            .gateway
            .grants()
            .revoke_grant(&principal.caller, id, Some(&by))
            .await
        {
            Ok(_) => redirect("/approvals?done=revoked"),
            Err(e) => self.refusal(snap, principal, csrf, e.into()).await,
        }
    }

    /// An answer from the page: the form's fields as the type's response.
    async fn respond(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        id: &str,
        fields: &[(String, String)],
    ) -> Response<Body> {
        let store = snap.gateway.store().clone();
        let caller = &principal.caller;
        let Ok(eid) = id.parse::<ElicitationId>() else {
            return html(
                StatusCode::NOT_FOUND,
                html::sign_in(Some("No such elicitation.")),
            );
        };
        let kind = match store.get(caller, eid).await {
            Ok(stored) => stored.elicitation.kind().to_string(),
            // Another caller's: only a confirmation its approver group answers can be
            // answered here (the store decides).
            Err(elicitation_store::StoreError::NotFound { .. })
                if principal.approver().is_some() =>
            {
                "confirmation".to_owned()
            }
            Err(e) => return self.refusal(snap, principal, csrf, e.into()).await,
        };
        // Approve and allow this call, or the tool, for the chosen time (and number of calls).
        let grant = match (kind.as_str(), field(fields, "decision")) {
            ("confirmation", Some(decision @ ("grant_call" | "grant_tool"))) => {
                let mut grant = json!({
                    "scope": if decision == "grant_call" { "call" } else { "tool" },
                    "for": field(fields, "grant_for").unwrap_or_default(),
                });
                match field(fields, "grant_uses").map(str::trim) {
                    None | Some("") => {}
                    Some(uses) => match uses.parse::<u32>() {
                        Ok(n) => grant["max_uses"] = json!(n),
                        Err(_) => {
                            return self
                                .render(
                                    snap,
                                    principal,
                                    csrf,
                                    Some("The number of calls must be a whole number from 1; nothing was answered."),
                                    None,
                                    StatusCode::UNPROCESSABLE_ENTITY,
                                )
                                .await;
                        }
                    },
                }
                Some(grant)
            }
            _ => None,
        };
        // Approve with the arguments as the person edited them (JSON, checked by the gate).
        let edited = match (kind.as_str(), field(fields, "decision")) {
            ("confirmation", Some("approve_edited")) => {
                let typed = field(fields, "arguments").unwrap_or_default().to_owned();
                match serde_json::from_str::<Value>(&typed) {
                    Ok(arguments @ Value::Object(_)) => Some((arguments, typed)),
                    Ok(_) | Err(_) => {
                        let why = match serde_json::from_str::<Value>(&typed) {
                            Ok(_) => "The arguments must be a JSON object ({…}).".to_owned(),
                            Err(e) => format!("The arguments are not JSON: {e}."),
                        };
                        let error = html::ItemError {
                            id,
                            messages: vec![why],
                            retries_left: None,
                            edited: Some(typed),
                        };
                        return self
                            .render(
                                snap,
                                principal,
                                csrf,
                                None,
                                Some(error),
                                StatusCode::UNPROCESSABLE_ENTITY,
                            )
                            .await;
                    }
                }
            }
            _ => None,
        };
        let (payload, done) = match kind.as_str() {
            "confirmation" if grant.is_some() => (json!({"confirmed": true}), "granted"),
            "confirmation" if edited.is_some() => (json!({"confirmed": true}), "edited"),
            "confirmation" => match field(fields, "decision") {
                Some("approve") => (json!({"confirmed": true}), "approved"),
                // A note typed next to Decline goes with it (and only with it).
                Some("decline") => match field(fields, "note").map(str::trim) {
                    Some(note) if !note.is_empty() => {
                        (json!({"confirmed": false, "note": note}), "declined")
                    }
                    _ => (json!({"confirmed": false}), "declined"),
                },
                _ => (json!({}), "answered"),
            },
            "string_input" => (
                json!({"value": field(fields, "value").unwrap_or_default()}),
                "answered",
            ),
            "single_choice" => (
                field(fields, "choice").map_or(json!({}), |c| json!({"choice": c})),
                "answered",
            ),
            "multi_choice" => {
                let choices: Vec<&str> = fields
                    .iter()
                    .filter(|(k, _)| k == "choices")
                    .map(|(_, v)| v.as_str())
                    .collect();
                (json!({"choices": choices}), "answered")
            }
            _ => (json!({}), "answered"),
        };
        let by = principal.answered_by(mcp_auth::AnsweredVia::Page);
        let with = match (&grant, &edited) {
            (Some(grant), _) => Some(mcp_gate::Approving::Grant(grant)),
            (None, Some((arguments, _))) => Some(mcp_gate::Approving::Arguments(arguments)),
            (None, None) => None,
        };
        let answered = match with {
            None => mcp_gate::answer(store.as_ref(), principal, eid, payload, &by)
                .await
                .map(|(_, outcome)| outcome),
            Some(with) => snap
                .gateway
                .answer_with(principal, eid, payload, &by, with)
                .await
                .map(|(_, outcome, _)| outcome),
        };
        // An edit the gate refused is shown next to the item, with what was typed.
        if let (
            Some((_, typed)),
            Err(McpError::Store(elicitation_store::StoreError::AnswerRefused(why))),
        ) = (&edited, &answered)
        {
            let error = html::ItemError {
                id,
                messages: vec![why.clone()],
                retries_left: None,
                edited: Some(typed.clone()),
            };
            return self
                .render(
                    snap,
                    principal,
                    csrf,
                    None,
                    Some(error),
                    StatusCode::UNPROCESSABLE_ENTITY,
                )
                .await;
        }
        match answered {
            Ok(RespondOutcome::Recorded | RespondOutcome::AlreadyRecorded) => {
                redirect(&format!("/approvals?done={done}"))
            }
            Ok(RespondOutcome::Invalid {
                errors,
                retries_left,
            }) => {
                let messages = errors.iter().map(ToString::to_string).collect();
                let error = html::ItemError {
                    id,
                    messages,
                    retries_left: Some(retries_left),
                    edited: None,
                };
                self.render(
                    snap,
                    principal,
                    csrf,
                    None,
                    Some(error),
                    StatusCode::UNPROCESSABLE_ENTITY,
                )
                .await
            }
            Ok(RespondOutcome::ValidationFailed { .. }) => {
                self.render(
                    snap,
                    principal,
                    csrf,
                    Some("That answer was invalid too often: the question is closed."),
                    None,
                    StatusCode::UNPROCESSABLE_ENTITY,
                )
                .await
            }
            Err(e) => self.refusal(snap, principal, csrf, e).await,
        }
    }

    /// `text/event-stream` of `changed` events when the person's pending elicitations change:
    /// the store's change feed (on PostgreSQL, its notifications from every instance) says
    /// when to look; the list is read again then, and every [`RECHECK`] in any case (a
    /// store without a feed is read every [`POLL`]).
    fn events(
        &self,
        snap: &Snapshot,
        principal: Arc<Principal>,
        shown: Option<String>,
    ) -> Response<Body> {
        let Some(slot) = self.streams.try_open(&principal.caller) else {
            return mcp_http_kit::response::error(
                &McpError::TooManyStreams(self.max_streams_per_caller),
                mcp_http_kit::response::Surface::Problem,
            );
        };
        let store = snap.gateway.store().clone();
        let mut feed = store.changes();
        let every = if feed.is_some() { RECHECK } else { POLL };
        let mut closing = self.closing.clone();
        let (tx, body) = ChannelBody::new(4);
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            let _slot = slot;
            let mut seen: Option<String> = shown;
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    changed = async {
                        match feed.as_mut() {
                            Some(feed) => feed.recv().await.map(drop),
                            None => std::future::pending().await,
                        }
                    } => {
                        if matches!(changed, Err(RecvError::Closed)) {
                            feed = None;
                        }
                    }
                    () = tx.closed() => return,
                    _ = closing.wait_for(|c| *c) => return,
                }
                let Ok(Ok(items)) =
                    tokio::time::timeout(POLL, waiting_for(store.as_ref(), &principal)).await
                else {
                    continue;
                };
                // The rows the page shows (it leaves out unreadable ones).
                let ids: Vec<String> = items
                    .iter()
                    .filter_map(|v| v.get("id").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect();
                let now = fingerprint(ids.iter().map(String::as_str));
                let event = match &seen {
                    None => Bytes::from_static(b": watching\n\n"),
                    Some(before) if *before != now => {
                        Bytes::from_static(b"event: changed\ndata: {}\n\n")
                    }
                    Some(_) => continue,
                };
                seen = Some(now);
                if tokio::time::timeout(Duration::from_secs(30), tx.send(event))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        mcp_http_kit::response::sse_response(body.boxed())
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
