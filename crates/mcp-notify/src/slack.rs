//! `kind = "slack"`: a Block Kit message to an incoming webhook, and, when a signing secret
//! and a mapping of Slack users to gateway identities are configured, Approve and Decline
//! buttons whose clicks Slack posts to `POST /v1/notify/slack/actions`.
//!
//! A click is Slack's form-encoded `payload`, signed: `X-Slack-Signature: v0=<hex
//! HMAC-SHA256(signing secret, "v0:<X-Slack-Request-Timestamp>:<body>")>`. [`SlackActions`]
//! verifies it over the exact body, refuses a timestamp more than five minutes from now and a
//! request seen before, and maps the clicking user to the identity configured for them; an
//! unsigned, stale, replayed or unmapped request answers nothing. The answer itself then goes
//! through the same path as the page's, with every approver and four-eyes rule.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use ring::hmac;
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::delivery::Delivery;

/// How far a request's timestamp may be from now.
pub const MAX_SKEW_SECONDS: i64 = 300;

/// The most seen requests remembered (each for [`MAX_SKEW_SECONDS`]).
pub(crate) const SEEN_CAP: usize = 10_000;

/// A Slack sink: where its messages go, and whether they carry buttons.
#[derive(Clone)]
pub struct Slack {
    /// The incoming-webhook URL (a secret: it lets anyone post to the channel).
    pub webhook_url: String,
    /// Approve and Decline buttons (interactive answers are configured).
    pub buttons: bool,
    /// The call's arguments go to Slack (`include_arguments`): only then can a person
    /// approve there, seeing what they approve; else Approve is on the page.
    pub include_arguments: bool,
}

impl std::fmt::Debug for Slack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slack")
            .field("webhook_url", &"<redacted>")
            .field("buttons", &self.buttons)
            .field("include_arguments", &self.include_arguments)
            .finish()
    }
}

/// Text for a Block Kit `plain_text` object, cut to `max` characters.
fn plain(text: &str, max: usize) -> Value {
    let text: String = if text.chars().count() > max {
        text.chars()
            .take(max.saturating_sub(1))
            .chain(['…'])
            .collect()
    } else {
        text.to_owned()
    };
    json!({"type": "plain_text", "text": text, "emoji": false})
}

/// Longest text of a Block Kit section.
const SECTION_TEXT: usize = 3000;

/// The Block Kit message for `event` (the webhook's event body). Everything from the agent,
/// a module or the caller is `plain_text`: Slack renders no markup or mentions from it.
///
/// An Approve button only where the message shows the person everything they approve: a
/// call's arguments were sent (`include_arguments`, the event carries `arguments`) or there
/// is no call, and the message fits a section whole. Else the person approves on the page
/// (the Open button); declining needs no arguments, so Decline stays.
pub fn slack_message(event: &Value, buttons: bool, now: OffsetDateTime) -> Value {
    let text = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or_default();
    let tool = event
        .get("tool")
        .and_then(Value::as_str)
        .unwrap_or("a question");
    let title = match text("event") {
        "elicitation.answered" => format!("Answered: {tool}"),
        "elicitation.expired" => format!("Expired unanswered: {tool}"),
        _ => match (
            event.get("waited_minutes").and_then(Value::as_i64),
            text("step"),
        ) {
            (Some(minutes), "escalation") => {
                format!("Escalated to you, unanswered after {minutes} min: {tool}")
            }
            (Some(minutes), _) => format!("Still waiting after {minutes} min: {tool}"),
            (None, _) => format!("Waiting for you: {tool}"),
        },
    };
    let left = OffsetDateTime::parse(
        text("expires_at"),
        &time::format_description::well_known::Rfc3339,
    )
    .map(|at| (at - now).whole_minutes().max(0))
    .map_or_else(|_| String::new(), |m| format!(" · {m} min left"));
    let mut actions = vec![json!({
        "type": "button", "action_id": "open", "text": plain("Open", 75), "url": text("url")
    })];
    let waiting = text("event") == "elicitation.waiting";
    let shows_everything = match event.get("arguments") {
        _ if event.get("tool").is_none_or(Value::is_null) => true,
        Some(arguments) => gating_core::message_shows_arguments(text("message"), arguments),
        None => false,
    } && text("message").chars().count() <= SECTION_TEXT;
    let mut context = format!("Caller: {}{left}", text("caller"));
    if buttons && waiting && text("type") == "confirmation" {
        let id = text("id");
        if shows_everything {
            actions.push(
                json!({"type": "button", "action_id": "approve", "style": "primary",
                                "text": plain("Approve", 75), "value": format!("approve:{id}")}),
            );
        } else {
            context.push_str(" · approve on the page (Open): this message does not show everything the call would do");
        }
        actions.push(
            json!({"type": "button", "action_id": "decline", "style": "danger",
                            "text": plain("Decline", 75), "value": format!("decline:{id}")}),
        );
    }
    let mut blocks = vec![
        json!({"type": "header", "text": plain(&title, 150)}),
        json!({"type": "section", "text": plain(text("message"), SECTION_TEXT)}),
    ];
    if let Some(line) = crate::since::since_line(event) {
        // With the arguments sent, what each changed argument was before.
        let before = event
            .pointer("/since_last_approved/before")
            .and_then(Value::as_object)
            .map(|before| {
                before
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "\n{} was: {}",
                            crate::since::short(k, 64),
                            crate::since::short(&v.to_string(), 300)
                        )
                    })
                    .collect::<String>()
            })
            .unwrap_or_default();
        blocks.push(
            json!({"type": "section", "text": plain(&format!("{line}{before}"), SECTION_TEXT)}),
        );
    }
    blocks.push(json!({"type": "context", "elements": [plain(&context, 3000)]}));
    blocks.push(json!({"type": "actions", "elements": actions}));
    json!({
        "text": format!("{title} (caller {})", text("caller")),
        "blocks": blocks
    })
}

impl Slack {
    /// One attempt: `event` as a Block Kit message to the incoming webhook.
    pub(crate) async fn send(
        &self,
        http: &reqwest::Client,
        event: &Value,
        now: OffsetDateTime,
    ) -> Delivery {
        let sent = http
            .post(&self.webhook_url)
            .header("content-type", "application/json")
            .body(slack_message(event, self.buttons, now).to_string())
            .send()
            .await;
        crate::webhook::delivery_of(sent)
    }
}

/// Who a Slack user answers as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackUser {
    /// The gateway subject (a caller's `sub`, or a token's subject).
    pub subject: String,
    /// The tenant, when the deployment has tenants.
    pub tenant: Option<String>,
    /// Approver groups, as `[[approvers]]` names them.
    pub groups: Vec<String>,
}

/// A verified click.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackAction {
    /// Who clicked, as the gateway knows them.
    pub user: SlackUser,
    /// The Slack user id (for the record).
    pub slack_user: String,
    /// Approve (`true`) or decline.
    pub approve: bool,
    /// The elicitation.
    pub elicitation: String,
}

/// Why a request to the actions endpoint answers nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlackRefusal {
    /// No valid signature, or a timestamp out of range: not Slack's (401).
    Unsigned(&'static str),
    /// Seen before (401).
    Replayed,
    /// Signed, but the user is not mapped to anyone (403).
    Unmapped(String),
    /// Signed, but not an Approve or Decline of an elicitation (200: nothing to do).
    NotAnAnswer,
    /// An Approve where the sink does not show the call's arguments (a message posted
    /// before that was so): approving is on the page (200: nothing recorded).
    ApproveOnThePage,
}

/// The actions endpoint's verifier.
pub struct SlackActions {
    secret: hmac::Key,
    users: BTreeMap<String, SlackUser>,
    /// Approve clicks are taken (the sink shows the call's arguments).
    approves: bool,
    /// Requests seen, by their verified tag (the HMAC of timestamp and body, whatever the
    /// case of its hex), with when they stop mattering (unix seconds).
    seen: Mutex<HashMap<Vec<u8>, i64>>,
}

impl std::fmt::Debug for SlackActions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackActions")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The `v0` signature of `body` at timestamp `ts` (for receivers and tests).
pub fn slack_signature(secret: &[u8], ts: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut signed = format!("v0:{ts}:").into_bytes();
    signed.extend_from_slice(body);
    let tag = hmac::sign(&key, &signed);
    let hex: String = mcp_random::hex(tag.as_ref());
    format!("v0={hex}")
}

/// The 32 bytes of a signature's 64 hex digits (nothing else: no sign, no space).
fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The value of `key` in a form-encoded body.
fn form_field(body: &[u8], key: &str) -> Option<String> {
    let body = std::str::from_utf8(body).ok()?;
    body.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| decode_form(v)).flatten()
    })
}

fn decode_form(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

impl SlackActions {
    /// A verifier for requests signed with `signing_secret`, answering as `users` say;
    /// Approve clicks only when `approves` (its messages show the call's arguments).
    pub fn new(signing_secret: &[u8], users: BTreeMap<String, SlackUser>, approves: bool) -> Self {
        SlackActions {
            secret: hmac::Key::new(hmac::HMAC_SHA256, signing_secret),
            users,
            approves,
            seen: Mutex::default(),
        }
    }

    /// Verifies one request (its timestamp and signature headers, its exact body) at `now`.
    pub fn verify(
        &self,
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Result<SlackAction, SlackRefusal> {
        let (Some(ts), Some(signature)) = (timestamp, signature) else {
            return Err(SlackRefusal::Unsigned(
                "no X-Slack-Request-Timestamp or X-Slack-Signature",
            ));
        };
        let Ok(at) = ts.parse::<i64>() else {
            return Err(SlackRefusal::Unsigned("the timestamp is not a number"));
        };
        let now = now.unix_timestamp();
        if (now - at).abs() > MAX_SKEW_SECONDS {
            return Err(SlackRefusal::Unsigned(
                "the timestamp is more than five minutes away",
            ));
        }
        let Some(tag) = signature.strip_prefix("v0=").and_then(unhex) else {
            return Err(SlackRefusal::Unsigned("the signature is not v0=<hex>"));
        };
        let mut signed = format!("v0:{ts}:").into_bytes();
        signed.extend_from_slice(body);
        if hmac::verify(&self.secret, &signed, &tag).is_err() {
            return Err(SlackRefusal::Unsigned("the signature does not match"));
        }
        // Used once: the same signed request again (within the window) answers nothing,
        // however its signature is spelled (the key is the tag, not its text).
        {
            let mut seen = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            seen.retain(|_, until| *until >= now);
            if seen.contains_key(&tag) {
                return Err(SlackRefusal::Replayed);
            }
            if seen.len() >= SEEN_CAP {
                // Only requests Slack signed get here, so the set fills only with genuine
                // clicks: a fresh one is never refused for it; the one that stops mattering
                // soonest is forgotten (an answer it carried is recorded once anyway).
                if let Some(oldest) = seen
                    .iter()
                    .min_by_key(|(_, until)| **until)
                    .map(|(key, _)| key.clone())
                {
                    seen.remove(&oldest);
                }
            }
            seen.insert(tag, at + MAX_SKEW_SECONDS);
        }
        let payload: Value = form_field(body, "payload")
            .and_then(|p| serde_json::from_str(&p).ok())
            .ok_or(SlackRefusal::NotAnAnswer)?;
        let slack_user = payload
            .pointer("/user/id")
            .and_then(Value::as_str)
            .ok_or(SlackRefusal::NotAnAnswer)?
            .to_owned();
        let Some(user) = self.users.get(&slack_user) else {
            return Err(SlackRefusal::Unmapped(slack_user));
        };
        let value = payload
            .pointer("/actions/0/value")
            .and_then(Value::as_str)
            .ok_or(SlackRefusal::NotAnAnswer)?;
        let (approve, elicitation) = match value.split_once(':') {
            Some(("approve", _)) if !self.approves => {
                return Err(SlackRefusal::ApproveOnThePage);
            }
            Some(("approve", id)) => (true, id),
            Some(("decline", id)) => (false, id),
            _ => return Err(SlackRefusal::NotAnAnswer),
        };
        Ok(SlackAction {
            user: user.clone(),
            slack_user,
            approve,
            elicitation: elicitation.to_owned(),
        })
    }
}
