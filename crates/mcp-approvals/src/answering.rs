//! What a signed-in person posts: answers (approve, with a grant or edited arguments;
//! decline with a note), cancels, grant revocations, tool-change decisions.

use crate::{Page, csrf_ok, field, form, html, redirect};
use bytes::Bytes;
use elicitation_core::{CancelReason, ElicitationId, RespondOutcome};
use http::{HeaderMap, Response, StatusCode};
use mcp_auth::{Principal, SCOPE_CATALOG, SCOPE_RESPOND};
use mcp_http_kit::body::Body;
use mcp_http_kit::error::{HttpError as _, McpError};
use mcp_http_kit::live::Snapshot;
use serde_json::{Value, json};

impl Page {
    /// A form posted by a signed-in page (its form token checked): sign out, answer, cancel.
    pub(crate) async fn form_post(
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
            ["delegations"] => self.delegate(snap, &principal, &csrf, &fields).await,
            ["delegations", id, "revoke"] => self.end_delegation(snap, &principal, &csrf, id).await,
            ["accounts", module, action @ ("connect" | "disconnect")] => {
                self.account_action(snap, &principal, &csrf, module, *action == "connect", base)
                    .await
            }
            _ => html(StatusCode::NOT_FOUND, html::sign_in(Some("No such page."))),
        }
    }

    /// The page again with `error` next to its item (unprocessable).
    async fn refused_item(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        error: html::ItemError<'_>,
    ) -> Response<Body> {
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

    /// An answer from the page: the form's fields as the type's response.
    // Long: the form read, the answer recorded and each outcome rendered, in the order a person
    // meets them; the pure parts are grant_asked, edited_asked and payload_of.
    pub(crate) async fn respond(
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
            // Another caller's: only a confirmation its approver group answers (its own, or
            // one handed to it) can be answered here (the store decides).
            Err(elicitation_store::StoreError::NotFound { .. }) => "confirmation".to_owned(),
            Err(e) => return self.refusal(snap, principal, csrf, e.into()).await,
        };
        let confirmation = kind == "confirmation";
        let grant = match grant_asked(fields) {
            Ok(grant) => grant.filter(|_| confirmation),
            Err(why) if confirmation => {
                return self
                    .render(
                        snap,
                        principal,
                        csrf,
                        Some(why),
                        None,
                        StatusCode::UNPROCESSABLE_ENTITY,
                    )
                    .await;
            }
            Err(_) => None,
        };
        let edited = match edited_asked(fields) {
            Ok(edited) => edited.filter(|_| confirmation),
            Err((why, typed)) if confirmation => {
                return self
                    .refused_item(
                        snap,
                        principal,
                        csrf,
                        html::ItemError {
                            id,
                            messages: vec![why],
                            retries_left: None,
                            edited: Some(typed),
                        },
                    )
                    .await;
            }
            Err(_) => None,
        };
        let (payload, done) = payload_of(&kind, fields, grant.is_some(), edited.is_some());
        let by = principal.answered_by(mcp_auth::AnsweredVia::Page);
        let with = match (&grant, &edited) {
            (Some(grant), _) => Some(mcp_gate::Approving::Grant(grant)),
            (None, Some((arguments, _))) => Some(mcp_gate::Approving::Arguments(arguments)),
            (None, None) => None,
        };
        let answered = match with {
            None => snap
                .gateway
                .answer(principal, eid, payload, &by)
                .await
                .map(|(_, outcome)| outcome),
            Some(with) => snap
                .gateway
                .answer_with(principal, eid, payload, &by, with)
                .await
                .map(|(_, outcome, _)| outcome),
        }
        .map_err(McpError::from);
        // An edit the gate refused is shown next to the item, with what was typed.
        if let (
            Some((_, typed)),
            Err(McpError::Store(elicitation_store::StoreError::AnswerRefused(why))),
        ) = (&edited, &answered)
        {
            return self
                .refused_item(
                    snap,
                    principal,
                    csrf,
                    html::ItemError {
                        id,
                        messages: vec![why.clone()],
                        retries_left: None,
                        edited: Some(typed.clone()),
                    },
                )
                .await;
        }
        match answered {
            Ok(RespondOutcome::Recorded | RespondOutcome::AlreadyRecorded) => {
                redirect(&format!("/approvals?done={done}"))
            }
            // One approval of several: the call still waits for the others.
            Ok(RespondOutcome::Counted { .. }) => redirect("/approvals?done=counted"),
            Ok(RespondOutcome::Invalid {
                errors,
                retries_left,
            }) => {
                let messages = errors.iter().map(ToString::to_string).collect();
                self.refused_item(
                    snap,
                    principal,
                    csrf,
                    html::ItemError {
                        id,
                        messages,
                        retries_left: Some(retries_left),
                        edited: None,
                    },
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

    /// The person cancels elicitation `id`.
    pub(crate) async fn cancel(
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

    /// Revokes a standing grant the person holds or made, from the page's Grants section.
    pub(crate) async fn revoke(
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

    /// Hands the person's approvals to another for a while, from the page's Away section
    /// (`to`, and `for`: one of the section's spans).
    pub(crate) async fn delegate(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        fields: &[(String, String)],
    ) -> Response<Body> {
        let terms = json!({
            "to": field(fields, "to").unwrap_or_default(),
            "for": field(fields, "for").unwrap_or("1d"),
        });
        match snap.gateway.delegate(principal, &terms).await {
            Ok(_) => redirect("/approvals?done=delegated"),
            Err(e) => self.refusal(snap, principal, csrf, e.into()).await,
        }
    }

    /// Ends a delegation the person gave or received, from the page's Away section.
    pub(crate) async fn end_delegation(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        csrf: &str,
        id: &str,
    ) -> Response<Body> {
        let Ok(id) = id.parse::<elicitation_store::DelegationId>() else {
            return html(
                StatusCode::NOT_FOUND,
                html::sign_in(Some("No such delegation.")),
            );
        };
        match snap
            .gateway
            .delegations()
            .revoke_delegation(&principal.caller, id)
            .await
        {
            Ok(_) => redirect("/approvals?done=delegation-ended"),
            Err(e) => self.refusal(snap, principal, csrf, e.into()).await,
        }
    }

    /// A person's decision on a withheld tool definition, from the page's Tool changes
    /// section (scope `catalog:approve`).
    pub(crate) async fn decide_change(
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

    /// The page again, with why a request of the person's was refused at the top.
    pub(crate) async fn refusal(
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
}

/// The grant a confirmation's "approve and allow" asks for: this call or the tool, for the
/// chosen time (and number of calls). `Err`: the number of calls is not a whole number.
fn grant_asked(fields: &[(String, String)]) -> Result<Option<Value>, &'static str> {
    let Some(decision @ ("grant_call" | "grant_tool" | "grant_when")) = field(fields, "decision")
    else {
        return Ok(None);
    };
    let mut grant = json!({
        "scope": if decision == "grant_call" { "call" } else { "tool" },
        "for": field(fields, "grant_for").unwrap_or_default(),
    });
    // The shape people approved lately, offered beside the held call (the gate checks the
    // `when` as it would any grant's, and the policy must hold the call with it).
    if decision == "grant_when" {
        grant["when"] = json!(field(fields, "grant_when").unwrap_or_default());
    }
    match field(fields, "grant_uses").map(str::trim) {
        None | Some("") => {}
        Some(uses) => match uses.parse::<u32>() {
            Ok(n) => grant["max_uses"] = json!(n),
            Err(_) => {
                return Err(
                    "The number of calls must be a whole number from 1; nothing was answered.",
                );
            }
        },
    }
    Ok(Some(grant))
}

/// The arguments of a confirmation's "approve with these arguments", as typed (JSON, checked
/// by the gate) and read. `Err`: why they cannot be read, and what was typed.
fn edited_asked(fields: &[(String, String)]) -> Result<Option<(Value, String)>, (String, String)> {
    if field(fields, "decision") != Some("approve_edited") {
        return Ok(None);
    }
    let typed = field(fields, "arguments").unwrap_or_default().to_owned();
    match serde_json::from_str::<Value>(&typed) {
        Ok(arguments @ Value::Object(_)) => Ok(Some((arguments, typed))),
        Ok(_) => Err((
            "The arguments must be a JSON object ({…}).".to_owned(),
            typed,
        )),
        Err(e) => Err((format!("The arguments are not JSON: {e}."), typed)),
    }
}

/// The form's fields as the response of an elicitation of `kind`, and the word the page
/// says it with (`granted` and `edited` when the approval carries a grant or arguments).
fn payload_of(
    kind: &str,
    fields: &[(String, String)],
    granted: bool,
    edited: bool,
) -> (Value, &'static str) {
    match kind {
        "confirmation" if granted => (json!({"confirmed": true}), "granted"),
        "confirmation" if edited => (json!({"confirmed": true}), "edited"),
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
    }
}
