//! `/approvals/accounts`: a person's connected accounts, connected and disconnected.

use crate::{
    ACCOUNTS_PAGE, PREFIX, Page, accounts, cookie_named, field, form, html, next_page, redirect,
};
use http::{HeaderMap, Response, StatusCode};
use mcp_auth::Principal;
use mcp_http_kit::body::Body;
use mcp_http_kit::live::Snapshot;

impl Page {
    /// `GET /approvals/accounts`: the person's accounts at each module run as its callers.
    pub(crate) async fn accounts(
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
            return self.first_visit(snap, headers, &to, query);
        };
        let notice = accounts::notice(field(&fields, "done"));
        let (status, page) =
            accounts::view(&snap.gateway, &principal, &csrf, marked, notice, None).await;
        html(status, page)
    }

    /// `POST /approvals/accounts/{module}/connect` and `…/disconnect` (the form's token
    /// checked): Connect goes on to the module's authorization server, with the connection
    /// bound to this browser by a cookie of its own.
    pub(crate) async fn account_action(
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
    pub(crate) async fn account_callback(
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
}
