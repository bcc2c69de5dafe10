//! `GET /approvals/audit` and its download: the audit trail of the person's tenant.

use crate::{AUDIT_DOWNLOAD, AUDIT_PAGE, AUDIT_ROWS, COOKIE_PROBE, Page, form, html};
use http::{HeaderMap, Response, StatusCode};
use mcp_auth::{Auth, SCOPE_AUDIT};
use mcp_http_kit::body::Body;
use mcp_http_kit::error::HttpError;
use mcp_http_kit::error::McpError;
use mcp_http_kit::live::Snapshot;

impl Page {
    /// `GET /approvals/audit` (the view, newest first, a page at a time) and
    /// `/approvals/audit/download` (the same filters as JSON lines, oldest first): the audit
    /// trail of the person's tenant, with `audit:read`.
    // Long: the view and its download share the query's parsing and the paging loop.
    pub(crate) async fn audit(
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
                self.first_visit(snap, headers, AUDIT_PAGE, query)
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
                    mcp_http_kit::response::as_download(
                        &mut reply,
                        "attachment; filename=\"mcp-gateway-audit.jsonl\"",
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
}
