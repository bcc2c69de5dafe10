//! The Accounts view (`/approvals/accounts`): the person's connected accounts at the
//! modules run as their callers (`auth.kind = "user"`), with Connect and Disconnect.
//!
//! Connect is OAuth authorization code with PKCE at the module's authorization server: the
//! person's browser goes there with a fresh `state` and a PKCE challenge; the verifier, the
//! state, the module, the client and who is connecting are sealed in a cookie of their own
//! (ten minutes, this path only), so the browser that comes back must be the one that left
//! and the account is stored for the person who started it, whichever instance the
//! callback reaches. The code is redeemed once; the tokens go to the store, sealed, as that
//! caller's.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use http::{HeaderMap, Response, StatusCode};
use ring::digest::{SHA256, digest};
use ring::rand::SecureRandom;
use serde::{Deserialize, Serialize};

use mcp_auth::Principal;
use mcp_http_kit::body::Body;
use mcp_http_kit::error::{HttpError as _, McpError};
use mcp_http_kit::live::Snapshot;
use mcp_upstream::accounts::RegisteredClient;

use crate::{Page, cookie_named, field, form, html, redirect};

/// The cookie that binds a connection under way to the browser that started it.
pub(crate) const CONNECT_COOKIE: &str = "mcp_gateway_connect";

/// The path of the Accounts view and of the connect cookie.
pub(crate) const ACCOUNTS_PATH: &str = "/approvals/accounts";

/// How long a person may take at the authorization server.
const CONNECT_TTL: i64 = 600;

/// A connection under way, sealed in the browser's cookie.
#[derive(Serialize, Deserialize)]
pub(crate) struct Connecting {
    /// The `state` sent, which the callback must repeat.
    st: String,
    /// The PKCE verifier.
    v: String,
    /// The module.
    m: String,
    /// The client the code is redeemed by.
    cid: String,
    cs: Option<String>,
    /// Who connects: subject and tenant.
    sub: String,
    ten: Option<String>,
    /// The redirect URI sent (the redemption repeats it).
    r: String,
    /// When it expires, Unix seconds.
    exp: i64,
}

/// The redirect URI of the page at `base`.
fn callback_url(base: &str) -> String {
    format!("{}{ACCOUNTS_PATH}/callback", base.trim_end_matches('/'))
}

impl Page {
    fn random(&self) -> Option<String> {
        let mut bytes = [0u8; 32];
        ring::rand::SystemRandom::new().fill(&mut bytes).ok()?;
        Some(B64.encode(bytes))
    }

    /// `GET /approvals/accounts`: the person's accounts at each module run as its callers.
    pub(crate) async fn accounts(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Response<Body> {
        let Some((_, principal, csrf)) = self.web_session(snap, headers) else {
            return self.first_visit(snap, ACCOUNTS_PATH);
        };
        let fields = form(query.unwrap_or_default().as_bytes());
        let notice = match field(&fields, "done") {
            Some("connected") => {
                Some("Connected. Calls to that module now run as your account there.")
            }
            Some("disconnected") => {
                Some("Disconnected. Calls to that module are not sent until you connect again.")
            }
            _ => None,
        };
        self.render_accounts(
            snap,
            &principal,
            &csrf,
            field(&fields, "connect"),
            notice,
            None,
        )
        .await
    }

    async fn render_accounts(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        marked: Option<&str>,
        notice: Option<&str>,
        problem: Option<&str>,
    ) -> Response<Body> {
        let connectable = snap.gateway.connectable();
        let accounts = match snap.gateway.accounts().accounts(&principal.caller).await {
            Ok(accounts) => accounts,
            Err(e) => {
                let e = McpError::from(e);
                return crate::html(e.status(None), html::sign_in(Some(&e.to_string())));
            }
        };
        let rows: Vec<html::AccountRow<'_>> = connectable
            .keys()
            .map(|module| {
                let account = accounts.iter().find(|a| &a.module == module);
                html::AccountRow {
                    module,
                    connected_at: account.map(|a| a.connected_at),
                    scope: account.and_then(|a| a.tokens.scope.as_deref()),
                    marked: marked == Some(module.as_str()),
                }
            })
            .collect();
        let status = if problem.is_some() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        };
        crate::html(
            status,
            html::accounts_page(&html::AccountsView {
                signed_in_as: Some(principal.caller.subject_id()),
                csrf,
                rows: &rows,
                notice,
                problem,
            }),
        )
    }

    /// `POST /approvals/accounts/{module}/connect` and `…/disconnect` (the form's token
    /// checked by the caller).
    pub(crate) async fn account_action(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        module: &str,
        connect: bool,
        base: Option<&str>,
    ) -> Response<Body> {
        let Some(oauth) = snap.gateway.connectable().get(module).cloned() else {
            return self
                .render_accounts(
                    snap,
                    principal,
                    csrf,
                    None,
                    None,
                    Some("No module by that name runs as its callers' own accounts."),
                )
                .await;
        };
        if !connect {
            return match snap
                .gateway
                .accounts()
                .remove_account(&principal.caller, module)
                .await
            {
                Ok(_) => {
                    tracing::info!(target: "audit", event = "account_disconnected", subject = principal.caller.subject_id(), tenant = principal.caller.tenant_id(), module);
                    redirect(&format!("{ACCOUNTS_PATH}?done=disconnected"))
                }
                Err(e) => {
                    let e = McpError::from(e);
                    self.render_accounts(snap, principal, csrf, None, None, Some(&e.to_string()))
                        .await
                }
            };
        }
        let Some(base) = base else {
            return self
                .render_accounts(snap, principal, csrf, Some(module), None, Some("The gateway does not know the address people reach it at: set [http] public_url."))
                .await;
        };
        let (Some(state), Some(verifier)) = (self.random(), self.random()) else {
            return self
                .render_accounts(
                    snap,
                    principal,
                    csrf,
                    None,
                    None,
                    Some("The system random source failed."),
                )
                .await;
        };
        let challenge = B64.encode(digest(&SHA256, verifier.as_bytes()));
        let redirect_url = callback_url(base);
        let (url, client) = match oauth
            .authorization_url(&redirect_url, &state, &challenge)
            .await
        {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(module, error = %e, "cannot start connecting an account");
                return self
                    .render_accounts(snap, principal, csrf, Some(module), None, Some(&e))
                    .await;
            }
        };
        let connecting = Connecting {
            st: state,
            v: verifier,
            m: module.to_owned(),
            cid: client.id,
            cs: client.secret,
            sub: principal.caller.subject_id().to_owned(),
            ten: principal.caller.tenant_id().map(str::to_owned),
            r: redirect_url,
            exp: self.clock.now().unix_timestamp() + CONNECT_TTL,
        };
        let Some(cookie) = self.connects.seal(&connecting) else {
            return self
                .render_accounts(
                    snap,
                    principal,
                    csrf,
                    None,
                    None,
                    Some("The system random source failed."),
                )
                .await;
        };
        // A page of this site that goes on to the server (a redirect after a form post is
        // held to the page's `form-action 'self'`).
        let mut response = crate::html(
            StatusCode::OK,
            html::continue_to("Going to the module's sign-in", &url),
        );
        self.set_named_cookie(
            &mut response,
            CONNECT_COOKIE,
            &cookie,
            ACCOUNTS_PATH,
            "Lax",
            CONNECT_TTL.unsigned_abs(),
        );
        response
    }

    /// `GET /approvals/accounts/callback`: the authorization server's answer. The page's
    /// session cookie does not come along (SameSite=Strict, and the navigation began at the
    /// server): who connects is the cookie's.
    pub(crate) async fn account_callback(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Response<Body> {
        let fields = form(query.unwrap_or_default().as_bytes());
        let fail = |status: StatusCode, problem: &str| {
            let mut response = crate::html(status, html::sign_in_with(Some(problem), None, false));
            self.set_named_cookie(&mut response, CONNECT_COOKIE, "", ACCOUNTS_PATH, "Lax", 0);
            response
        };
        // Each connection's cookie is used once.
        let bound = cookie_named(headers, CONNECT_COOKIE)
            .filter(|c| !self.ended.contains(&mcp_auth::sealed::token_hash(c)));
        if let Some(used) = &bound {
            self.ended.end(
                mcp_auth::sealed::token_hash(used),
                self.clock.now() + time::Duration::minutes(15),
            );
        }
        let state = field(&fields, "state").unwrap_or_default();
        let Some(connecting) = bound
            .as_deref()
            .and_then(|c| self.connects.open::<Connecting>(c))
            .filter(|c| c.st == state && c.exp > self.clock.now().unix_timestamp())
        else {
            return fail(
                StatusCode::BAD_REQUEST,
                "This connection is unknown or has expired, or was started in another browser; start again from Accounts.",
            );
        };
        if let Some(error) = field(&fields, "error") {
            let error: String = error
                .chars()
                .filter(|c| !c.is_control())
                .take(200)
                .collect();
            return fail(
                StatusCode::BAD_REQUEST,
                &format!("The module's sign-in did not connect your account: {error}"),
            );
        }
        let Some(code) = field(&fields, "code") else {
            return fail(
                StatusCode::BAD_REQUEST,
                "The module's sign-in sent no code.",
            );
        };
        let Some(oauth) = snap.gateway.connectable().get(&connecting.m).cloned() else {
            return fail(
                StatusCode::BAD_REQUEST,
                "That module no longer runs as its callers' own accounts.",
            );
        };
        let Ok(caller) =
            elicitation_store::Caller::new(connecting.sub.clone(), connecting.ten.clone())
        else {
            return fail(
                StatusCode::BAD_REQUEST,
                "This connection is unknown; start again from Accounts.",
            );
        };
        let client = RegisteredClient {
            id: connecting.cid.clone(),
            secret: connecting.cs.clone(),
        };
        let tokens = match oauth
            .redeem(&client, code, &connecting.v, &connecting.r)
            .await
        {
            Ok(tokens) => tokens,
            Err(e) => {
                tracing::warn!(module = %connecting.m, error = %e, "a person's account could not be connected");
                return fail(StatusCode::BAD_GATEWAY, &e);
            }
        };
        let stored = elicitation_store::AccountTokens {
            access_token: tokens.access_token,
            refresh_token: tokens.refresh_token,
            expires_at: tokens
                .expires_at
                .and_then(|at| time::OffsetDateTime::from_unix_timestamp(at).ok()),
            scope: tokens.scope,
            client_id: Some(tokens.client.id),
            client_secret: tokens.client.secret,
        };
        if let Err(e) = snap
            .gateway
            .accounts()
            .save_account(&caller, &connecting.m, &stored, true)
            .await
        {
            let e = McpError::from(e);
            return fail(e.status(None), &e.to_string());
        }
        tracing::info!(target: "audit", event = "account_connected", subject = caller.subject_id(), tenant = caller.tenant_id(), module = %connecting.m);
        let mut response = crate::html(
            StatusCode::OK,
            html::continue_to("Connected", &format!("{ACCOUNTS_PATH}?done=connected")),
        );
        self.set_named_cookie(&mut response, CONNECT_COOKIE, "", ACCOUNTS_PATH, "Lax", 0);
        response
    }
}

/// The sealer of connections under way, keyed from the seal keys.
pub(crate) fn sealer(keys: &[[u8; 32]]) -> mcp_auth::sealed::Sealer {
    mcp_auth::sealed::Sealer::new(
        &mcp_auth::sealed::derive_all(keys, "mcp-gateway/account-connect/v1"),
        "c1.",
        b"mcp-gateway/account-connect/v1",
    )
}
