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
use http::StatusCode;
use ring::digest::{SHA256, digest};
use serde::{Deserialize, Serialize};

use mcp_auth::Principal;
use mcp_gate::Gateway;
use mcp_http_kit::error::{HttpError as _, McpError};
use mcp_upstream::accounts::RegisteredClient;

use crate::html;

/// The cookie that binds a connection under way to the browser that started it.
pub(crate) const CONNECT_COOKIE: &str = "mcp_gateway_connect";

/// The path of the Accounts view and of the connect cookie.
pub(crate) const ACCOUNTS_PATH: &str = "/approvals/accounts";

/// How long a person may take at the authorization server.
pub(crate) const CONNECT_TTL: i64 = 600;

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

/// The redirect URI of `module`'s connections from the page at `base`: one per module, so a
/// code for one module's server never lands where another's is expected (mix-up).
fn callback_url(base: &str, module: &str) -> String {
    format!(
        "{}{}/callback",
        base.trim_end_matches('/'),
        module_path(module)
    )
}

/// The path under which `module`'s connection lives (its cookie's `Path`). Module names are
/// letters, digits, `_` and `-` (the configuration checks).
pub(crate) fn module_path(module: &str) -> String {
    format!("{ACCOUNTS_PATH}/{module}")
}

fn random() -> Option<String> {
    Some(B64.encode(mcp_random::bytes::<32>().ok()?))
}

/// What a `done` query parameter tells the person.
pub(crate) fn notice(done: Option<&str>) -> Option<&'static str> {
    match done {
        Some("connected") => Some("Connected. Calls to that module now run as your account there."),
        Some("disconnected") => {
            Some("Disconnected. Calls to that module are not sent until you connect again.")
        }
        _ => None,
    }
}

/// The Accounts view for `principal`: each module run as its callers, with their account
/// there (`marked`: the one a link asked to connect).
pub(crate) async fn view(
    gateway: &Gateway,
    principal: &Principal,
    csrf: &str,
    marked: Option<&str>,
    notice: Option<&str>,
    problem: Option<&str>,
) -> (StatusCode, String) {
    let accounts = match gateway.accounts().accounts(&principal.caller).await {
        Ok(accounts) => accounts,
        Err(e) => {
            let e = McpError::from(e);
            return (e.status(None), html::sign_in(Some(&e.to_string())));
        }
    };
    let rows: Vec<html::AccountRow<'_>> = gateway
        .connectable()
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
    let page = html::accounts_page(&html::AccountsView {
        signed_in_as: Some(principal.caller.subject_id()),
        csrf,
        rows: &rows,
        notice,
        problem,
    });
    (status, page)
}

/// Forgets `principal`'s account at `module`.
pub(crate) async fn disconnect(
    gateway: &Gateway,
    principal: &Principal,
    module: &str,
) -> Result<(), String> {
    if !gateway.connectable().contains_key(module) {
        return Err(NO_SUCH_MODULE.into());
    }
    gateway
        .accounts()
        .remove_account(&principal.caller, module)
        .await
        .map_err(|e| McpError::from(e).to_string())?;
    tracing::info!(target: "audit", event = "account_disconnected", subject = principal.caller.subject_id(), tenant = principal.caller.tenant_id(), module);
    Ok(())
}

const NO_SUCH_MODULE: &str = "No module by that name runs as its callers' own accounts.";

/// Starts connecting `principal`'s account at `module` from the page at `base`, at `now`
/// (Unix seconds): the authorization server's URL to send the browser to, and the cookie
/// that binds the connection to the browser (sealed by `connects`).
pub(crate) async fn start(
    gateway: &Gateway,
    principal: &Principal,
    module: &str,
    base: Option<&str>,
    connects: &mcp_auth::sealed::Sealer,
    now: i64,
) -> Result<(String, String), String> {
    let Some(oauth) = gateway.connectable().get(module).cloned() else {
        return Err(NO_SUCH_MODULE.into());
    };
    let Some(base) = base else {
        return Err(
            "The gateway does not know the address people reach it at: set [http] public_url."
                .into(),
        );
    };
    let (Some(state), Some(verifier)) = (random(), random()) else {
        return Err("The system random source failed.".into());
    };
    let challenge = B64.encode(digest(&SHA256, verifier.as_bytes()));
    let redirect_url = callback_url(base, module);
    let (url, client) = oauth
        .authorization_url(&redirect_url, &state, &challenge)
        .await
        .inspect_err(
            |e| tracing::warn!(module, error = %e, "cannot start connecting an account"),
        )?;
    let connecting = Connecting {
        st: state,
        v: verifier,
        m: module.to_owned(),
        cid: client.id,
        cs: client.secret,
        sub: principal.caller.subject_id().to_owned(),
        ten: principal.caller.tenant_id().map(str::to_owned),
        r: redirect_url,
        exp: now + CONNECT_TTL,
    };
    let cookie = connects
        .seal(&connecting)
        .ok_or_else(|| "The system random source failed.".to_owned())?;
    Ok((url, cookie))
}

/// The connection the browser's `cookie` holds, if it is one for `module` with this
/// `state`, unexpired at `now`.
pub(crate) fn opened(
    connects: &mcp_auth::sealed::Sealer,
    cookie: Option<&str>,
    module: &str,
    state: &str,
    now: i64,
) -> Option<Connecting> {
    cookie
        .and_then(|c| connects.open::<Connecting>(c))
        .filter(|c| c.m == module && c.st == state && c.exp > now)
}

/// Finishes `connecting` with the authorization server's answer: `code` (or `error`) and
/// `iss`. The account is stored for whoever started the connection; the error is said to
/// the person.
pub(crate) async fn finish(
    gateway: &Gateway,
    connecting: &Connecting,
    answer: (Option<&str>, Option<&str>, Option<&str>),
) -> Result<(), (StatusCode, String)> {
    let (code, error, iss) = answer;
    let refused = |problem: &str| (StatusCode::BAD_REQUEST, problem.to_owned());
    let Some(oauth) = gateway.connectable().get(&connecting.m).cloned() else {
        return Err(refused(
            "That module no longer runs as its callers' own accounts.",
        ));
    };
    // The answer must be the module's own server's (RFC 9207), error or not.
    if let Err(e) = oauth.check_issuer(iss).await {
        tracing::warn!(module = %connecting.m, error = %e, "an authorization answer was refused");
        return Err(refused(&format!("{e}; nothing was connected.")));
    }
    if let Some(error) = error {
        let error: String = error
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        return Err(refused(&format!(
            "The module's sign-in did not connect your account: {error}"
        )));
    }
    let Some(code) = code else {
        return Err(refused("The module's sign-in sent no code."));
    };
    let Ok(caller) = elicitation_store::Caller::new(connecting.sub.clone(), connecting.ten.clone())
    else {
        return Err(refused(
            "This connection is unknown; start again from Accounts.",
        ));
    };
    let client = RegisteredClient {
        id: connecting.cid.clone(),
        secret: connecting.cs.clone(),
    };
    let tokens = oauth
        .redeem(&client, code, &connecting.v, &connecting.r)
        .await
        .map_err(|e| {
            tracing::warn!(module = %connecting.m, error = %e, "a person's account could not be connected");
            (StatusCode::BAD_GATEWAY, e)
        })?;
    let stored = elicitation_store::AccountTokens {
        access_token: tokens.access_token,
        refresh_token: tokens.refresh_token,
        expires_at: tokens
            .expires_at
            .and_then(|at| time::OffsetDateTime::from_unix_timestamp(at).ok()),
        scope: tokens.scope,
        client_id: Some(tokens.client.id),
        client_secret: tokens.client.secret,
        issuer: tokens.issuer,
    };
    gateway
        .accounts()
        .save_account(&caller, &connecting.m, &stored, true)
        .await
        .map_err(|e| {
            let e = McpError::from(e);
            (e.status(None), e.to_string())
        })?;
    tracing::info!(target: "audit", event = "account_connected", subject = caller.subject_id(), tenant = caller.tenant_id(), module = %connecting.m);
    Ok(())
}

/// The sealer of connections under way, keyed from the seal keys.
pub(crate) fn sealer(keys: &[[u8; 32]]) -> mcp_auth::sealed::Sealer {
    mcp_auth::sealed::Sealer::new(
        &mcp_auth::sealed::derive_all(keys, "mcp-gateway/account-connect/v1"),
        "c1.",
        b"mcp-gateway/account-connect/v1",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connecting(module: &str, state: &str, exp: i64) -> Connecting {
        Connecting {
            st: state.into(),
            v: "verifier".into(),
            m: module.into(),
            cid: "client".into(),
            cs: None,
            sub: "alice".into(),
            ten: None,
            r: format!("http://127.0.0.1/approvals/accounts/{module}/callback"),
            exp,
        }
    }

    #[test]
    fn a_connection_opens_only_for_its_module_state_and_time_and_this_gateways_keys() {
        let connects = sealer(&[[7u8; 32]]);
        let cookie = connects.seal(&connecting("github", "s1", 1000)).unwrap();
        assert!(opened(&connects, Some(&cookie), "github", "s1", 999).is_some());
        // A code for another module's server lands at that module's callback: refused
        // there (the mix-up attack), as is another state, a late one, none, or a cookie
        // sealed by another gateway.
        assert!(opened(&connects, Some(&cookie), "linear", "s1", 999).is_none());
        assert!(opened(&connects, Some(&cookie), "github", "s2", 999).is_none());
        assert!(opened(&connects, Some(&cookie), "github", "s1", 1000).is_none());
        assert!(opened(&connects, None, "github", "s1", 999).is_none());
        let theirs = sealer(&[[8u8; 32]]);
        assert!(opened(&theirs, Some(&cookie), "github", "s1", 999).is_none());
        // The page's own sign-in cookies do not open as connections.
        let other_kind = mcp_auth::sealed::Sealer::new(
            &mcp_auth::sealed::derive_all(&[[7u8; 32]], "mcp-gateway/oidc-sign-in/v1"),
            "c1.",
            b"mcp-gateway/oidc-sign-in/v1",
        );
        let forged = other_kind.seal(&connecting("github", "s1", 1000)).unwrap();
        assert!(opened(&connects, Some(&forged), "github", "s1", 999).is_none());
    }

    #[test]
    fn each_module_has_its_own_callback_and_cookie_path() {
        assert_eq!(
            callback_url("https://gw.example/", "github"),
            "https://gw.example/approvals/accounts/github/callback"
        );
        assert_eq!(module_path("github"), "/approvals/accounts/github");
    }
}
