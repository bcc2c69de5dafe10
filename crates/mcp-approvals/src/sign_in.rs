//! Signing in and out: a first visit (auth `none`), a token, single sign-on through the
//! identity provider, sign-out.

use crate::{
    COOKIE_PROBE, PREFIX, Page, SESSION_TTL, SIGNING, SSO_COOKIE, SignIn, cookie_named, field,
    form, html, may_use_the_page, next_page, redirect, too_many,
};
use http::{HeaderMap, Response, StatusCode};
use mcp_auth::{Auth, Principal};
use mcp_http_kit::body::Body;
use mcp_http_kit::live::Snapshot;
use std::sync::Arc;
use std::time::Duration;

impl Page {
    /// No session yet: sign in, or (auth `none`) a session opened here and the page asked
    /// for again with its cookie. The redirect carries [`COOKIE_PROBE`]: a request that comes
    /// back with it and still without the cookie is from a client that keeps no cookies
    /// (`curl`), which is told so instead of being sent round the same redirect for ever.
    pub(crate) fn first_visit(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        to: &str,
        query: Option<&str>,
    ) -> Response<Body> {
        let principal = match &*snap.auth {
            Auth::None(principal) => principal.clone(),
            // The embedding service says who this is; not signed in there, not here.
            Auth::Embedder(caller) => match (caller.0)(headers) {
                Some(principal) if may_use_the_page(&principal) => Arc::new(principal),
                Some(_) => {
                    return html(
                        StatusCode::FORBIDDEN,
                        html::sign_in(Some(
                            "You may neither answer elicitations, review tool changes nor read the audit trail here.",
                        )),
                    );
                }
                None => {
                    return html(
                        StatusCode::UNAUTHORIZED,
                        html::sign_in(Some(
                            "Sign in to the service first, then open this page again.",
                        )),
                    );
                }
            },
            _ => {
                let next = (to != PREFIX).then_some(to);
                return html(
                    StatusCode::OK,
                    html::sign_in_with(None, next, self.sso.is_some()),
                );
            }
        };
        if form(query.unwrap_or_default().as_bytes())
            .iter()
            .any(|(k, _)| k == COOKIE_PROBE)
        {
            return html(StatusCode::BAD_REQUEST, html::needs_cookies(to));
        }
        let Some((id, _)) = self.web.open(principal, snap.auth.mode(), None) else {
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

    pub(crate) async fn sign_in(&self, snap: &Snapshot, body: &[u8]) -> Response<Body> {
        let fields = form(body);
        let token = field(&fields, "token").unwrap_or_default().trim();
        let principal = match &*snap.auth {
            Auth::None(principal) => Some(principal.clone()),
            // Signed in by the embedding service, never with a token here.
            Auth::Embedder(_) => None,
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
            return too_many(&e.into());
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

    /// Ends the sign-in `session` (and, signed in through the identity provider, sends the
    /// person to sign out there too).
    pub(crate) async fn sign_out(
        &self,
        snap: &Snapshot,
        session: &str,
        principal: &Principal,
    ) -> Response<Body> {
        if let Err(e) = snap.gateway.take_call(&principal.caller, SIGNING) {
            return too_many(&e.into());
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

    /// Signs out: the cookie `value` is refused from now on, here and (recorded in the
    /// store) on every instance sharing it. Returns its ID token, if it had one.
    pub(crate) async fn end_web_session(
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
    pub(crate) async fn sso_start(&self, query: Option<&str>) -> Response<Body> {
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
    pub(crate) async fn sso_callback(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Response<Body> {
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
}
