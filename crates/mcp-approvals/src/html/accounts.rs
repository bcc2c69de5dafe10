//! The Accounts view, `/approvals/accounts`: the person's accounts at each module run as
//! its callers.

use std::fmt::Write as _;

use super::*;

/// One module of the Accounts view.
pub(crate) struct AccountRow<'a> {
    /// The module (the operator's name for it).
    pub(crate) module: &'a str,
    /// When the person connected their account there (`None`: not connected).
    pub(crate) connected_at: Option<time::OffsetDateTime>,
    /// The scopes granted, as the server wrote them.
    pub(crate) scope: Option<&'a str>,
    /// The one a link asked to connect.
    pub(crate) marked: bool,
}

/// What the Accounts view shows.
pub(crate) struct AccountsView<'a> {
    pub(crate) signed_in_as: Option<&'a str>,
    pub(crate) csrf: &'a str,
    pub(crate) rows: &'a [AccountRow<'a>],
    pub(crate) notice: Option<&'a str>,
    pub(crate) problem: Option<&'a str>,
}

/// The Accounts view (`GET /approvals/accounts`): each module run as its callers' own
/// accounts, with the person's account there and Connect or Disconnect.
pub(crate) fn accounts_page(view: &AccountsView<'_>) -> String {
    let mut body = String::from("<header><h1>Connected accounts</h1>");
    if let Some(who) = view.signed_in_as {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"/approvals/sign-out\" class=\"who\">Signed in as <strong>{}</strong> <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form>",
            shown(who),
            escape(view.csrf)
        );
    }
    body.push_str("</header><main><p><a href=\"/approvals\">Back to approvals</a></p><p>Calls to these modules run as your own account there. A call from you to a module you have not connected is not sent.</p>");
    if let Some(notice) = view.notice {
        let _ = write!(
            body,
            "<p class=\"notice\" role=\"status\">{}</p>",
            escape(notice)
        );
    }
    if let Some(problem) = view.problem {
        let _ = write!(
            body,
            "<p class=\"error\" role=\"alert\">{}</p>",
            escape(problem)
        );
    }
    if view.rows.is_empty() {
        body.push_str("<p class=\"empty\">No module runs as its callers' own accounts.</p>");
    } else {
        body.push_str("<table class=\"accounts\"><thead><tr><th>Module</th><th>Your account</th><th></th></tr></thead><tbody>");
        for row in view.rows {
            let module = escape(row.module);
            let path: String = form_urlencoded::byte_serialize(row.module.as_bytes()).collect();
            let (status, action, label) = match row.connected_at {
                Some(at) => (
                    format!(
                        "Connected since {}{}",
                        escape(
                            &at.format(&time::format_description::well_known::Rfc3339)
                                .unwrap_or_default()
                        ),
                        row.scope
                            .map(|s| format!(" <span class=\"when\">(scopes: {})</span>", shown(s)))
                            .unwrap_or_default()
                    ),
                    "disconnect",
                    "Disconnect",
                ),
                None => ("Not connected".to_owned(), "connect", "Connect"),
            };
            let marked = if row.marked { " class=\"marked\"" } else { "" };
            let _ = write!(
                body,
                "<tr{marked} data-module=\"{module}\"><td>{module}</td><td>{status}</td><td><form method=\"post\" action=\"/approvals/accounts/{}/{action}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">{label}</button></form></td></tr>",
                escape(&path),
                escape(view.csrf)
            );
        }
        body.push_str("</tbody></table>");
    }
    body.push_str("</main>");
    document("Connected accounts — mcp-gateway", &body)
}
