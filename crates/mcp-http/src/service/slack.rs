//! `POST /v1/notify/slack/actions`: a button clicked in Slack.

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::json;

use super::{Body, McpService, anonymous, header_text};
use mcp_auth::{Auth, Principal};
use mcp_http_kit::error::McpError;
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::response::{self, Surface};

/// Where Slack posts the buttons' clicks.
pub const SLACK_ACTIONS: &str = "/v1/notify/slack/actions";

impl McpService {
    /// `POST /v1/notify/slack/actions`: an Approve or Decline clicked in Slack, recorded as
    /// the Slack user's mapped identity with every approver and four-eyes rule the page
    /// applies; anything not verified answers nothing.
    // Long: the verification steps in order, each refusing without an answer.
    pub(super) async fn slack_action<B>(
        &self,
        snap: &Snapshot,
        parts: &http::request::Parts,
        body: B,
    ) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        use mcp_notify::SlackRefusal;
        let Some(slack) = &self.slack else {
            return response::error(&McpError::NotFound, Surface::Problem);
        };
        if parts.method != Method::POST {
            return response::error(&McpError::MethodNotAllowed, Surface::Problem);
        }
        let bytes = match self.read_body(body, || anonymous(parts)).await {
            Ok(bytes) => bytes,
            Err(e) => return response::error(&e, Surface::Problem),
        };
        let said =
            |status: StatusCode, text: String| response::json(status, &json!({"text": text}));
        let action = match slack.verify(
            header_text(&parts.headers, "x-slack-request-timestamp").as_deref(),
            header_text(&parts.headers, "x-slack-signature").as_deref(),
            &bytes,
            self.config.clock.now(),
        ) {
            Ok(action) => action,
            Err(SlackRefusal::Unsigned(why)) => {
                tracing::warn!(
                    reason = why,
                    "a request to the Slack actions endpoint was not Slack's; it answers nothing"
                );
                return said(
                    StatusCode::UNAUTHORIZED,
                    format!("Not a signed Slack request: {why}."),
                );
            }
            Err(SlackRefusal::Replayed) => {
                tracing::warn!("a Slack request was sent again; it answers nothing");
                return said(
                    StatusCode::UNAUTHORIZED,
                    "This request was seen before.".into(),
                );
            }
            Err(SlackRefusal::Unmapped(user)) => {
                tracing::warn!(slack_user = %user, "a Slack user the gateway does not know clicked an answer; nothing was recorded");
                return said(
                    StatusCode::FORBIDDEN,
                    "You are not someone this gateway takes answers from.".into(),
                );
            }
            Err(SlackRefusal::NotAnAnswer) => {
                return said(StatusCode::OK, "Nothing to answer.".into());
            }
            Err(SlackRefusal::ApproveOnThePage) => {
                return said(
                    StatusCode::OK,
                    "Nothing was recorded: this Slack app is not shown the call's arguments, so approve it on the approvals page (Open).".into(),
                );
            }
        };
        let Ok(id) = action
            .elicitation
            .parse::<elicitation_core::ElicitationId>()
        else {
            return said(StatusCode::OK, "Nothing to answer.".into());
        };
        let Ok(caller) =
            elicitation_store::Caller::new(action.user.subject.clone(), action.user.tenant.clone())
        else {
            return said(
                StatusCode::FORBIDDEN,
                "Your mapped identity is not a valid caller.".into(),
            );
        };
        let principal = Principal {
            caller,
            scopes: [mcp_auth::SCOPE_RESPOND.to_owned()].into_iter().collect(),
            authenticated: true,
            // The mapped user's groups as a token's would be: its tenant's (mode `jwt`
            // names them qualified already).
            groups: action
                .user
                .groups
                .iter()
                .map(|g| match &*snap.auth {
                    Auth::Jwt(_) => g.clone(),
                    _ => mcp_auth::tenant_group(g, action.user.tenant.as_deref()),
                })
                .collect(),
            client: None,
            subject_token: None,
        };
        let by = principal.answered_by(mcp_auth::AnsweredVia::Slack);
        match snap
            .gateway
            .answer(&principal, id, json!({"confirmed": action.approve}), &by)
            .await
        {
            Ok((_, outcome)) => {
                tracing::info!(elicitation = %id, slack_user = %action.slack_user, by = %by, approve = action.approve, "answered from Slack");
                let subject = &action.user.subject;
                let text = match outcome {
                    // One approval of several: say how far it got.
                    elicitation_core::RespondOutcome::Counted {
                        approvals,
                        needed,
                        missing,
                    } => {
                        let mut text = format!(
                            "Approval by {subject} counted: {approvals} of {needed}; it waits for the others."
                        );
                        if !missing.is_empty() {
                            text.push_str(&format!(
                                " Still needs one from {}.",
                                missing.join(", ")
                            ));
                        }
                        text
                    }
                    _ if action.approve => format!("Approved by {subject}."),
                    _ => format!("Declined by {subject}."),
                };
                said(StatusCode::OK, text)
            }
            Err(e) => {
                let e = McpError::from(e);
                let status = mcp_http_kit::error::HttpError::status(&e, None);
                said(status, format!("Not recorded: {e}"))
            }
        }
    }
}
