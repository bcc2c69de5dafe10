//! What the page shows: the home page of what waits, one elicitation, the tool changes, and
//! the events stream that tells the page something changed.

use crate::{HISTORY, POLL, PREFIX, Page, RECHECK, fingerprint, html, waiting_for};
use bytes::Bytes;
use elicitation_core::{ElicitationId, ElicitationStatus};
use elicitation_store::ListQuery;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use mcp_auth::{Auth, Principal, SCOPE_AUDIT, SCOPE_CATALOG, SCOPE_RESPOND};
use mcp_http_kit::body::{Body, ChannelBody};
use mcp_http_kit::error::{HttpError as _, McpError};
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::views::ElicitationView;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

impl Page {
    /// `GET /approvals`: the page of what waits (with a notice of what was just done), or a
    /// first visit's sign-in.
    pub(crate) async fn home(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Response<Body> {
        let notice = query
            .and_then(|q| q.strip_prefix("done="))
            .map(|done| match done {
                "approved" => "Approved.",
                "counted" => "Your approval is counted: the call waits for the other approvals it needs.",
                "uploaded" => "Uploaded.",
                "declined" => "Declined.",
                "granted" => "Approved, and allowed for the time chosen.",
                "edited" => "Approved with your arguments.",
                "revoked" => "Revoked.",
                "delegated" => "Handed over: they answer for you until it ends, or you end it.",
                "delegation-ended" => "Ended: nobody answers for anyone under it any more.",
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
            None => self.first_visit(snap, headers, PREFIX, query),
        }
    }

    /// `GET /approvals/e/{id}`: one elicitation, or a sign-in that comes back to it.
    pub(crate) async fn one(
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
                Auth::None(_) | Auth::Embedder(_) => {
                    self.first_visit(snap, headers, &format!("{PREFIX}/e/{id}"), query)
                }
                Auth::Tokens(_) | Auth::Jwt(_) => html(
                    StatusCode::OK,
                    html::sign_in_with(None, Some(&format!("{PREFIX}/e/{id}")), self.sso.is_some()),
                ),
            },
        }
    }

    /// The page of one elicitation (where a URL-mode elicitation sends the person): that
    /// item to answer while it waits, else where it stands.
    pub(crate) async fn render_one(
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
        let view = ElicitationView::of(&stored);
        let subject = principal.caller.subject_id().to_owned();
        let status = view.status;
        let notice = (status != ElicitationStatus::Pending)
            .then(|| format!("This elicitation is {status}."));
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
        let (pending, history) = if status == ElicitationStatus::Pending {
            // Answerable here: the store refuses what this person may not answer.
            let mut items = vec![html::Item {
                view,
                owner: None,
                answerable: true,
                voted: false,
                for_someone_away: false,
                suggested_when: None,
                last_approved: None,
            }];
            let owner = [principal.caller.clone()];
            crate::since_last_approved(store.as_ref(), &mut items, &owner, principal).await;
            (items, Vec::new())
        } else {
            (Vec::new(), vec![view])
        };
        let page = html::page(
            &frame,
            &pending,
            &history,
            &[],
            &html::Away::NONE,
            None,
            self.clock.now(),
        );
        html(StatusCode::OK, page)
    }

    pub(crate) async fn render(
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
            let page = html::page(
                &frame,
                &[],
                &[],
                &[],
                &html::Away::NONE,
                None,
                self.clock.now(),
            );
            return html(status, page);
        }
        let store = snap.gateway.store().clone();
        let caller = &principal.caller;
        let views = |listed: Vec<elicitation_store::Listed>| -> Vec<ElicitationView> {
            listed
                .into_iter()
                .filter_map(Result::ok)
                .map(|stored| ElicitationView::of(&stored))
                .collect()
        };
        let pending = match waiting_for(&snap.gateway, principal).await {
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
        let history: Vec<ElicitationView> = match store.list(caller, all).await {
            Ok(listed) => views(listed)
                .into_iter()
                .filter(|v| v.status != ElicitationStatus::Pending)
                .take(HISTORY)
                .collect(),
            Err(_) => Vec::new(),
        };
        let subject = principal.caller.subject_id().to_owned();
        let ids: Vec<String> = pending.iter().map(|i| i.view.id.to_string()).collect();
        let seen = fingerprint(ids.iter().map(String::as_str));
        // The live grants the person holds or made (a failure to read them hides only them).
        let now = self.clock.now();
        let grants = grants_of(snap, caller, now).await;
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
        let delegations = delegations_of(snap, caller, now).await;
        let away = html::Away {
            delegations: &delegations,
            signed_in: principal.caller.subject_id(),
            may_give: !principal.groups.is_empty(),
        };
        let page = html::page(
            &frame,
            &pending,
            &history,
            &grants,
            &away,
            error.as_ref(),
            now,
        );
        html(status, page)
    }

    /// The withheld definitions a person with `catalog:approve` reviews (`None` without
    /// the scope; a failure to read them shows the section empty, with a warning logged).
    pub(crate) async fn changes_for(
        &self,
        snap: &Snapshot,
        principal: &Principal,
    ) -> Option<Vec<Value>> {
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

    /// `text/event-stream` of `changed` events when the person's pending elicitations change:
    /// the store's change feed (on PostgreSQL, its notifications from every instance) says
    /// when to look; the list is read again then, and every [`RECHECK`] in any case (a
    /// store without a feed is read every [`POLL`]).
    pub(crate) fn events(
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
        let gateway = snap.gateway.clone();
        let mut feed = gateway.store().changes();
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
                    tokio::time::timeout(POLL, waiting_for(&gateway, &principal)).await
                else {
                    continue;
                };
                // The rows the page shows (it leaves out unreadable ones).
                let ids: Vec<String> = items.iter().map(|i| i.view.id.to_string()).collect();
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

/// The delegations `caller` gave or received that have not ended, as the page's Away
/// section shows them (a failure to read them hides only them).
async fn delegations_of(
    snap: &Snapshot,
    caller: &elicitation_store::Caller,
    now: time::OffsetDateTime,
) -> Vec<Value> {
    match snap
        .gateway
        .delegations()
        .delegations(caller, HISTORY * 2)
        .await
    {
        Ok(all) => all
            .iter()
            .filter(|d| !d.has_ended(now))
            .map(|d| mcp_http_kit::views::delegation_view(d, now))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the delegations for the approvals page");
            Vec::new()
        }
    }
}

/// The live grants `caller` holds or made, as the page's Grants section shows them.
async fn grants_of(
    snap: &Snapshot,
    caller: &elicitation_store::Caller,
    now: time::OffsetDateTime,
) -> Vec<Value> {
    match snap.gateway.grants().grants(caller, HISTORY * 2).await {
        Ok(grants) => grants
            .iter()
            .filter(|g| g.is_live(now))
            .map(|g| mcp_http_kit::views::grant_view(g, now))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the standing grants for the approvals page");
            Vec::new()
        }
    }
}
