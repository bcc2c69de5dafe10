//! The REST API for answering elicitations out of band, for clients that cannot elicit:
//!
//! - `GET  /v1/mcp/elicitations[?status=pending|responded|…|all][&limit=N]`
//! - `GET  /v1/mcp/elicitations/{id}`
//! - `POST /v1/mcp/elicitations/{id}/respond` (body: the response payload; an approval may
//!   carry a standing `grant`, or the `arguments` to run instead of the agent's)
//! - `POST /v1/mcp/elicitations/{id}/cancel`
//! - `GET  /v1/mcp/grants[?limit=N]`: the caller's standing grants and those it made
//! - `DELETE /v1/mcp/grants/{id}`: revokes one, on every instance at once
//! - `GET  /v1/quotas`: every quota, what the caller used of it and what remains
//! - `GET  /v1/mcp/delegations[?limit=N]`: the delegations the caller gave or received
//! - `POST /v1/mcp/delegations` (`{"to": "carol", "for": "3d"}`): hands the caller's
//!   approvals to another person for a while; `DELETE /v1/mcp/delegations/{id}` ends one
//! - `GET  /v1/catalog/changes[?limit=N]`: tool definitions withheld because they are not
//!   their pin (scope `catalog:approve`)
//! - `POST /v1/catalog/changes/{id}/approve` | `/reject`
//! - `GET  /v1/audit[?since=&until=&tool=&caller=&outcome=&order=&cursor=&limit=&format=]`:
//!   the audit trail of the caller's tenant, every caller's (scope `audit:read`)
//!
//! Everything is the caller's own: another caller's elicitation is 404, never 403. Errors are
//! RFC 9457 problem details, built by [`HttpError::problem`](mcp_http_kit::error::HttpError::problem).

use elicitation_core::{
    CancelReason, ElicitationId, ElicitationSpec, ElicitationStatus, RespondOutcome,
};
use elicitation_store::{ListQuery, StoreError, StoredElicitation};
use serde_json::{Value, json};

use mcp_auth::{
    Principal, SCOPE_AUDIT, SCOPE_CATALOG, SCOPE_CREATE, SCOPE_RESPOND, SCOPE_TOOLS_CALL,
};
use mcp_gate::Gateway;
use mcp_http_kit::error::McpError;
use mcp_http_kit::views::{change_view, grant_view, view};

/// The path prefix of the API.
pub const PREFIX: &str = "/v1/mcp/elicitations";
/// The path prefix of the standing grants.
pub const GRANTS_PREFIX: &str = "/v1/mcp/grants";
/// The path prefix of delegations (a person's approvals handed to another for a while).
pub const DELEGATIONS_PREFIX: &str = "/v1/mcp/delegations";
/// The path prefix of the tool-definition review.
pub const CATALOG_PREFIX: &str = "/v1/catalog/changes";
/// The audit trail's path.
pub const AUDIT_PATH: &str = "/v1/audit";
/// Where the caller stands against the quotas.
pub const QUOTAS_PATH: &str = "/v1/quotas";
/// Decision insights, read from the audit trail.
pub const INSIGHTS_PATH: &str = "/v1/insights";
/// Default and largest page of a listing.
const DEFAULT_LIMIT: usize = 100;

/// A REST request, already authenticated, with its body read.
pub struct RestRequest<'a> {
    /// The HTTP method.
    pub method: &'a http::Method,
    /// The path after [`PREFIX`] (`""`, `/{id}`, `/{id}/respond`, `/{id}/cancel`).
    pub rest: &'a str,
    /// The query string.
    pub query: Option<&'a str>,
    /// The body.
    pub body: &'a [u8],
    /// The caller's share of long-lived requests: a long poll holds one while it waits.
    pub waits: &'a mcp_gate::streams::StreamSlots,
}

/// Serves one REST request: the status and JSON body of success, or the error.
// Long: one match over the REST routes, each arm short.
pub async fn handle(
    gateway: &Gateway,
    principal: &Principal,
    request: RestRequest<'_>,
) -> Result<(http::StatusCode, Value), McpError> {
    let segments: Vec<&str> = request.rest.split('/').filter(|s| !s.is_empty()).collect();
    let store = gateway.store();
    let caller = &principal.caller;
    match (request.method, segments.as_slice()) {
        (&http::Method::GET, []) => {
            principal.require_any(&[SCOPE_TOOLS_CALL, SCOPE_RESPOND])?;
            let (query, for_approval) = list_query(request.query)?;
            if for_approval {
                // The pending confirmations of other callers this principal's approver
                // groups answer (none without groups).
                principal.require(SCOPE_RESPOND)?;
                let mut items = Vec::new();
                let mut seen = std::collections::HashSet::new();
                // Its own groups', then those handed to it by people away (delegations).
                for (approver, delegation) in gateway.approvers_of(principal).await? {
                    for (owner, stored) in store.approver_pending(&approver, query.limit).await? {
                        let answerable = stored
                            .call
                            .as_ref()
                            .and_then(|c| c.approval.as_ref())
                            .is_some_and(|a| a.admits(&owner, &approver));
                        if owner == *caller
                            || (delegation.is_some() && !answerable)
                            || !seen.insert(stored.elicitation.id)
                        {
                            continue;
                        }
                        let mut item = view(&stored);
                        item["for"] =
                            json!({"subject": owner.subject_id(), "tenant": owner.tenant_id()});
                        if let Some(d) = &delegation {
                            item["delegated_by"] = json!({"subject": d.from.subject_id(), "tenant": d.from.tenant_id(), "delegation": d.id.to_string()});
                        }
                        items.push(item);
                    }
                }
                items.truncate(query.limit);
                return Ok((http::StatusCode::OK, json!({"elicitations": items})));
            }
            let found = store.list(caller, query).await?;
            let items: Vec<Value> = found
                .into_iter()
                .map(|listed| match listed {
                    Ok(stored) => view(&stored),
                    Err(unreadable) => unreadable_view(unreadable.id, &unreadable.error),
                })
                .collect();
            Ok((http::StatusCode::OK, json!({"elicitations": items})))
        }
        (&http::Method::POST, []) => {
            principal.require(SCOPE_CREATE)?;
            let (spec, ttl) = create_body(request.body)?;
            if let Err(wait) = gateway.limits().elicitation(caller) {
                gateway.metrics().limited("confirmations");
                return Err(McpError::RateLimited {
                    what: "this caller is creating elicitations faster than the gateway allows",
                    retry_after: mcp_gate::limits::retry_after_secs(wait),
                });
            }
            let created = store.create(caller, spec, ttl).await?;
            let shown = read_view(store.get(caller, created.id).await, created.id)?;
            Ok((http::StatusCode::CREATED, shown))
        }
        (&http::Method::GET, [id]) => {
            principal.require_any(&[SCOPE_TOOLS_CALL, SCOPE_RESPOND, SCOPE_CREATE])?;
            let id = parse_id(id)?;
            if let Some(wait) = wait_query(request.query)? {
                // Long poll: until the elicitation is no longer pending, or the wait is over,
                // holding one of the caller's long-lived slots (so one token cannot hold
                // every connection with polls).
                let _slot = request
                    .waits
                    .try_open(caller)
                    .ok_or_else(|| McpError::TooManyStreams(request.waits.max_per_caller()))?;
                let deadline = tokio::time::Instant::now() + wait;
                store.wait_for_change(caller, id, deadline).await?;
            }
            Ok((
                http::StatusCode::OK,
                read_view(store.get(caller, id).await, id)?,
            ))
        }
        (&http::Method::POST, [id, "respond"]) => {
            principal.require(SCOPE_RESPOND)?;
            let id = parse_id(id)?;
            let mut payload: Value = serde_json::from_slice(request.body).map_err(|e| {
                McpError::BadBody(format!("the body must be the response as JSON: {e}"))
            })?;
            // A standing grant, or the arguments to run instead of the agent's, rides with
            // the approval; the recorded answer is without them.
            let grant = payload.as_object_mut().and_then(|o| o.remove("grant"));
            let arguments = payload.as_object_mut().and_then(|o| o.remove("arguments"));
            let by = principal.answered_by(mcp_auth::AnsweredVia::Rest);
            let with = match (&grant, &arguments) {
                (Some(_), Some(_)) => {
                    return Err(McpError::Store(StoreError::AnswerRefused(
                        "a grant cannot be combined with changed arguments: approve the edit, then grant on a later call".into(),
                    )));
                }
                (Some(grant), None) => Some(mcp_gate::Approving::Grant(grant)),
                (None, Some(arguments)) => Some(mcp_gate::Approving::Arguments(arguments)),
                (None, None) => None,
            };
            let (owner, outcome, made) = match with {
                None => {
                    let (owner, outcome) = gateway.answer(principal, id, payload, &by).await?;
                    (owner, outcome, None)
                }
                Some(with) => {
                    gateway
                        .answer_with(principal, id, payload, &by, with)
                        .await?
                }
            };
            let label = match outcome {
                RespondOutcome::Recorded => "recorded",
                RespondOutcome::AlreadyRecorded => "already_recorded",
                // One approval of several: the elicitation says how many and who so far.
                RespondOutcome::Counted { .. } => "counted",
                RespondOutcome::Invalid {
                    errors,
                    retries_left,
                } => {
                    return Err(McpError::InvalidResponse {
                        errors,
                        retries_left,
                    });
                }
                RespondOutcome::ValidationFailed { errors } => {
                    return Err(McpError::InvalidResponse {
                        errors,
                        retries_left: 0,
                    });
                }
            };
            // The answer is committed: a row that cannot be shown does not undo that.
            let shown = read_view(store.get(&owner, id).await, id)?;
            let mut body = json!({"outcome": label, "elicitation": shown});
            if grant.is_some() {
                // `null`: the answer was recorded before, and nothing was granted now.
                let now = gateway.clock().now();
                body["grant"] = made.map_or(Value::Null, |g| grant_view(&g, now));
            }
            Ok((http::StatusCode::OK, body))
        }
        (&http::Method::POST, [id, "cancel"]) => {
            principal.require(SCOPE_RESPOND)?;
            let id = parse_id(id)?;
            let reason = cancel_reason(request.body)?;
            store.cancel(caller, id, reason).await?;
            Ok((
                http::StatusCode::OK,
                read_view(store.get(caller, id).await, id)?,
            ))
        }
        (_, [] | [_] | [_, "respond" | "cancel"]) => Err(McpError::MethodNotAllowed),
        _ => Err(McpError::NotFound),
    }
}

/// `GET /v1/quotas`: every quota, with what the caller has used of it (its own count, or
/// everyone's) and what remains in the current window. Scope `tools:call` or
/// `elicitations:respond`.
pub async fn quotas(
    gateway: &Gateway,
    principal: &Principal,
    method: &http::Method,
) -> Result<Value, McpError> {
    if method != http::Method::GET {
        return Err(McpError::MethodNotAllowed);
    }
    principal.require_any(&[SCOPE_TOOLS_CALL, SCOPE_RESPOND])?;
    let standing = gateway.quota_standing(principal).await?;
    Ok(json!({"quotas": standing}))
}

/// Serves one request under [`DELEGATIONS_PREFIX`] (`rest` is the path after it): the
/// delegations the caller gave or received, making one, ending one. Scope
/// `elicitations:respond`.
pub async fn delegations(
    gateway: &Gateway,
    principal: &Principal,
    request: RestRequest<'_>,
) -> Result<(http::StatusCode, Value), McpError> {
    use mcp_http_kit::views::delegation_view;
    let segments: Vec<&str> = request.rest.split('/').filter(|s| !s.is_empty()).collect();
    principal.require(SCOPE_RESPOND)?;
    let store = gateway.delegations();
    let now = gateway.clock().now();
    match (request.method, segments.as_slice()) {
        (&http::Method::GET, []) => {
            let limit = limit_query(request.query)?;
            let found = store.delegations(&principal.caller, limit).await?;
            let items: Vec<Value> = found.iter().map(|d| delegation_view(d, now)).collect();
            Ok((http::StatusCode::OK, json!({"delegations": items})))
        }
        (&http::Method::POST, []) => {
            let terms: Value = serde_json::from_slice(request.body)
                .map_err(|e| McpError::BadBody(format!("the body must be JSON: {e}")))?;
            let made = gateway.delegate(principal, &terms).await?;
            Ok((http::StatusCode::CREATED, delegation_view(&made, now)))
        }
        (&http::Method::DELETE, [id]) => {
            let id: elicitation_store::DelegationId = id.parse().map_err(|_| McpError::NotFound)?;
            let ended = store.revoke_delegation(&principal.caller, id).await?;
            Ok((http::StatusCode::OK, delegation_view(&ended, now)))
        }
        (_, [] | [_]) => Err(McpError::MethodNotAllowed),
        _ => Err(McpError::NotFound),
    }
}

/// Serves one request under [`GRANTS_PREFIX`] (`rest` is the path after it): the
/// caller's standing grants, and revoking one. Scope `elicitations:respond`.
pub async fn grants(
    gateway: &Gateway,
    principal: &Principal,
    request: RestRequest<'_>,
) -> Result<(http::StatusCode, Value), McpError> {
    let segments: Vec<&str> = request.rest.split('/').filter(|s| !s.is_empty()).collect();
    principal.require(SCOPE_RESPOND)?;
    let store = gateway.grants();
    let now = gateway.clock().now();
    match (request.method, segments.as_slice()) {
        (&http::Method::GET, []) => {
            let limit = limit_query(request.query)?;
            let found = store.grants(&principal.caller, limit).await?;
            let items: Vec<Value> = found.iter().map(|g| grant_view(g, now)).collect();
            Ok((http::StatusCode::OK, json!({"grants": items})))
        }
        (&http::Method::DELETE, [id]) => {
            let id: elicitation_store::GrantId = id.parse().map_err(|_| McpError::NotFound)?;
            let by = principal.answered_by(mcp_auth::AnsweredVia::Rest);
            let revoked = store.revoke_grant(&principal.caller, id, Some(&by)).await?;
            Ok((http::StatusCode::OK, grant_view(&revoked, now)))
        }
        (_, [] | [_]) => Err(McpError::MethodNotAllowed),
        _ => Err(McpError::NotFound),
    }
}

/// Serves one request under [`CATALOG_PREFIX`] (`rest` is the path after it): the
/// withheld tool definitions, and a person's decision on one. Scope `catalog:approve`.
pub async fn catalog(
    gateway: &Gateway,
    principal: &Principal,
    request: RestRequest<'_>,
) -> Result<(http::StatusCode, Value), McpError> {
    let segments: Vec<&str> = request.rest.split('/').filter(|s| !s.is_empty()).collect();
    principal.require(SCOPE_CATALOG)?;
    match (request.method, segments.as_slice()) {
        (&http::Method::GET, []) => {
            let limit = limit_query(request.query)?;
            let changes = gateway.catalog().definition_changes(limit).await?;
            let items: Vec<Value> = changes.iter().map(change_view).collect();
            Ok((http::StatusCode::OK, json!({"changes": items})))
        }
        (&http::Method::POST, [id, decision @ ("approve" | "reject")]) => {
            let id: uuid::Uuid = id.parse().map_err(|_| McpError::NotFound)?;
            let by = principal.answered_by(mcp_auth::AnsweredVia::Rest);
            let decided = gateway
                .decide_definition_change(id, *decision == "approve", &by)
                .await?;
            Ok((http::StatusCode::OK, change_view(&decided)))
        }
        (_, [] | [_, "approve" | "reject"]) => Err(McpError::MethodNotAllowed),
        _ => Err(McpError::NotFound),
    }
}

/// `GET /v1/audit`: a page of the trail of the caller's tenant as the query filters it.
/// Scope `audit:read`.
pub async fn audit(
    gateway: &Gateway,
    principal: &Principal,
    method: &http::Method,
    query: Option<&str>,
) -> Result<
    (
        elicitation_store::AuditPage,
        mcp_http_kit::audit::AuditFormat,
    ),
    McpError,
> {
    if method != http::Method::GET {
        return Err(McpError::MethodNotAllowed);
    }
    principal.require(SCOPE_AUDIT)?;
    let (query, format) = mcp_http_kit::audit::parse_query(query)?;
    let page = gateway
        .trail()
        .audit_events(&principal.caller, &query)
        .await?;
    Ok((page, format))
}

/// `GET /v1/insights[?days=N]`: per tool and caller of the reader's tenant, over the last
/// `days` (7), the questions asked, approved, declined and expired, the time people took to
/// answer, and the identical calls asked about again (`mcp_http_kit::insights`). Scope
/// `audit:read`.
pub async fn insights(
    gateway: &Gateway,
    principal: &Principal,
    method: &http::Method,
    query: Option<&str>,
) -> Result<Value, McpError> {
    if method != http::Method::GET {
        return Err(McpError::MethodNotAllowed);
    }
    principal.require(SCOPE_AUDIT)?;
    let days = mcp_http_kit::insights::parse_days(query)?;
    let insights = mcp_http_kit::insights::gather(
        gateway.trail().as_ref(),
        gateway.store().as_ref(),
        &principal.caller,
        days,
        principal.scopes.contains(mcp_auth::SCOPE_CATALOG),
    )
    .await?;
    Ok(insights)
}

/// `?limit=N` of a listing (grants, definition changes).
fn limit_query(query: Option<&str>) -> Result<usize, McpError> {
    let mut limit = DEFAULT_LIMIT;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "limit" {
            return Err(McpError::BadBody(format!(
                "unknown query parameter {key:?}"
            )));
        }
        limit = value
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=elicitation_store::MAX_LIST_LIMIT).contains(n))
            .ok_or_else(|| {
                McpError::BadBody(format!(
                    "limit must be 1 to {}",
                    elicitation_store::MAX_LIST_LIMIT
                ))
            })?;
    }
    Ok(limit)
}

/// Longest long poll.
const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// Longest life of an elicitation created through the API (and its default).
const MAX_CREATE_TTL_SECONDS: u64 = 24 * 60 * 60;
const DEFAULT_CREATE_TTL_SECONDS: u64 = 10 * 60;

/// `POST /v1/mcp/elicitations`'s body: `{"message", "response": {"type", …}, "ttl_seconds"?}`.
pub(crate) fn create_body(body: &[u8]) -> Result<(ElicitationSpec, time::Duration), McpError> {
    let bad = |why: String| McpError::BadBody(why);
    let mut value: Value = serde_json::from_slice(body)
        .map_err(|e| bad(format!("the body must be a JSON object: {e}")))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| bad("the body must be a JSON object".into()))?;
    let ttl = match object.remove("ttl_seconds") {
        None => DEFAULT_CREATE_TTL_SECONDS,
        Some(ttl) => ttl
            .as_u64()
            .filter(|t| (1..=MAX_CREATE_TTL_SECONDS).contains(t))
            .ok_or_else(|| bad(format!("ttl_seconds must be 1 to {MAX_CREATE_TTL_SECONDS}")))?,
    };
    if let Some(unknown) = object
        .keys()
        .find(|k| !["message", "response"].contains(&k.as_str()))
    {
        return Err(bad(format!("unknown field {unknown:?}")));
    }
    let spec: ElicitationSpec =
        serde_json::from_value(value).map_err(|e| bad(format!("not an elicitation: {e}")))?;
    let ttl = i64::try_from(ttl).map_err(|_| bad("ttl_seconds is too large".into()))?;
    Ok((spec, time::Duration::seconds(ttl)))
}

/// `?wait=30s` (or `wait=30`): how long a read may wait for an answer, at most [`MAX_WAIT`].
pub(crate) fn wait_query(query: Option<&str>) -> Result<Option<std::time::Duration>, McpError> {
    let mut wait = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "wait" {
            return Err(McpError::BadBody(format!(
                "unknown query parameter {key:?}"
            )));
        }
        let seconds = value
            .strip_suffix('s')
            .unwrap_or(value)
            .parse::<u64>()
            .ok()
            .filter(|s| *s <= MAX_WAIT.as_secs())
            .ok_or_else(|| {
                McpError::BadBody(format!(
                    "wait must be 0 to {} seconds, as 30s",
                    MAX_WAIT.as_secs()
                ))
            })?;
        wait = Some(std::time::Duration::from_secs(seconds));
    }
    Ok(wait)
}

/// An id that cannot exist is simply not found.
fn parse_id(text: &str) -> Result<ElicitationId, McpError> {
    text.parse().map_err(|_| McpError::NotFound)
}

/// The listing a query asks for, and whether it is an approver's (`for=approval`).
fn list_query(query: Option<&str>) -> Result<(ListQuery, bool), McpError> {
    let mut list = ListQuery::pending(DEFAULT_LIMIT);
    let mut for_approval = false;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "for" if value == "approval" => for_approval = true,
            "for" => {
                return Err(McpError::BadBody(format!(
                    "for must be \"approval\", not {value:?}"
                )));
            }
            "status" if value == "all" => list.status = None,
            "status" => {
                list.status = Some(value.parse::<ElicitationStatus>().map_err(|_| {
                    McpError::BadBody(format!(
                        "status must be one of pending, responded, cancelled, expired, validation_failed or all, not {value:?}"
                    ))
                })?);
            }
            "limit" => {
                list.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=elicitation_store::MAX_LIST_LIMIT).contains(n))
                    .ok_or_else(|| {
                        McpError::BadBody(format!(
                            "limit must be 1 to {}",
                            elicitation_store::MAX_LIST_LIMIT
                        ))
                    })?;
            }
            other => {
                return Err(McpError::BadBody(format!(
                    "unknown query parameter {other:?}"
                )));
            }
        }
    }
    Ok((list, for_approval))
}

/// The elicitation a successful request to `rest` (the path after [`PREFIX`]) cancelled:
/// `POST /{id}/cancel`.
pub(crate) fn cancelled(method: &http::Method, rest: &str) -> Option<ElicitationId> {
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match (method, segments.as_slice()) {
        (&http::Method::POST, [id, "cancel"]) => id.parse().ok(),
        _ => None,
    }
}

/// The optional cancel body: `{"reason": "declined" | "cancelled_by_person" | "cancelled_by_caller"}`.
pub(crate) fn cancel_reason(body: &[u8]) -> Result<CancelReason, McpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(CancelReason::CancelledByPerson);
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| McpError::BadBody(format!("the body must be JSON: {e}")))?;
    match value.get("reason") {
        None => Ok(CancelReason::CancelledByPerson),
        Some(reason) => serde_json::from_value(reason.clone()).map_err(|_| {
            McpError::BadBody(
                "reason must be declined, cancelled_by_person or cancelled_by_caller".into(),
            )
        }),
    }
}

/// The view of a read row, or of a row that cannot be opened; other failures are errors.
fn read_view(
    read: Result<StoredElicitation, StoreError>,
    id: ElicitationId,
) -> Result<Value, McpError> {
    match read {
        Ok(stored) => Ok(view(&stored)),
        Err(error) if error.is_unreadable() => Ok(unreadable_view(id, &error)),
        Err(error) => Err(error.into()),
    }
}

/// What the API shows of a row it cannot open: its id and an error id; the details go to
/// the log under the same error id.
fn unreadable_view(id: ElicitationId, error: &StoreError) -> Value {
    let error_id = mcp_http_kit::error::new_error_id();
    tracing::error!(%id, %error_id, %error, "a stored elicitation cannot be read");
    json!({
        "id": id,
        "unreadable": true,
        "error": "this elicitation's stored data cannot be opened; the gateway's log has the details",
        "error_id": error_id,
    })
}
