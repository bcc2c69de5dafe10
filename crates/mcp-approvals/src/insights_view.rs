//! `GET /approvals/insights`: what people of the person's tenant were asked, per tool and
//! caller, and the rules that would have asked them less (scope `audit:read`).

use crate::{INSIGHTS_PAGE, Page, html};
use http::{HeaderMap, Response, StatusCode};
use mcp_auth::{Auth, SCOPE_AUDIT};
use mcp_http_kit::body::Body;
use mcp_http_kit::error::{HttpError, McpError};
use mcp_http_kit::live::Snapshot;

impl Page {
    /// The Insights view over the last `days` of the query (7 by default).
    pub(crate) async fn insights(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Response<Body> {
        let Some((_, principal, csrf)) = self.web_session(snap, headers) else {
            return self.first_visit(snap, headers, INSIGHTS_PAGE, query);
        };
        if !principal.scopes.contains(SCOPE_AUDIT) {
            return crate::html(
                StatusCode::FORBIDDEN,
                html::sign_in(Some("Reading the insights needs the scope audit:read.")),
            );
        }
        let subject = principal.caller.subject_id().to_owned();
        let signed_in_as = (!matches!(*snap.auth, Auth::None(_))).then_some(subject.as_str());
        // The form sends the cookie probe too: only `days` is the view's.
        let days_query: Option<String> = query.map(|q| {
            let mut only = form_urlencoded::Serializer::new(String::new());
            for (k, v) in crate::form(q.as_bytes()) {
                if k == "days" {
                    only.append_pair(&k, &v);
                }
            }
            only.finish()
        });
        let days = match mcp_http_kit::insights::parse_days(days_query.as_deref()) {
            Ok(days) => days,
            Err(e) => {
                let page = html::insights_page(signed_in_as, &csrf, 7, None, Some(&e.to_string()));
                return crate::html(e.status(None), page);
            }
        };
        let gathered = mcp_http_kit::insights::gather(
            snap.gateway.trail().as_ref(),
            snap.gateway.store().as_ref(),
            &principal.caller,
            days,
            principal.scopes.contains(mcp_auth::SCOPE_CATALOG),
        )
        .await;
        match gathered {
            Ok(insights) => crate::html(
                StatusCode::OK,
                html::insights_page(signed_in_as, &csrf, days, Some(&insights), None),
            ),
            Err(e) => {
                let e = McpError::from(e);
                let problem = format!("The audit trail could not be read: {e}");
                crate::html(
                    e.status(None),
                    html::insights_page(signed_in_as, &csrf, days, None, Some(&problem)),
                )
            }
        }
    }
}
