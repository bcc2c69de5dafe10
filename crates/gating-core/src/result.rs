//! The `CallToolResult` shapes the gate answers with instead of forwarding a call.
//!
//! These are the only places the gateway builds such results itself: held (waiting for a
//! person), rejected (the person declined), cancelled, expired, and denied by policy.

use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use elicitation_core::{Elicitation, ElicitationId, response_schema};

use mcp_wire::denial::{Denial, Hint, with_denial};

use crate::flow::Flow;
use crate::{HoldReason, Surfaces};

/// The prompt of the confirmation elicitation for a call of `tool_name` (a module-chosen
/// name, shown with [`visible`]).
pub fn confirmation_prompt(tool_name: &str, reason: HoldReason, surfaces: &Surfaces) -> String {
    let tool = visible(tool_name);
    let (who, whose) = (&surfaces.name, surfaces.name_capitalized());
    match reason {
        HoldReason::Destructive { declared: true } => format!(
            "The agent wants to run the destructive tool `{tool}`. It may change or delete data. Allow this call?"
        ),
        HoldReason::Destructive { declared: false } => format!(
            "The agent wants to run the tool `{tool}`. Nothing trusted says it is read-only, so it may change or delete data. Allow this call?"
        ),
        HoldReason::Policy => format!(
            "The agent wants to run the tool `{tool}`. {whose}'s policy asks a person before every call to it. Allow this call?"
        ),
        HoldReason::OpenWorld => format!(
            "The agent wants to run the tool `{tool}`. It reaches systems outside this one, and {who} asks a person before such calls. Allow this call?"
        ),
        HoldReason::Quota => format!(
            "The agent wants to run the tool `{tool}` beyond a quota {who} keeps. Allow this one call beyond it?"
        ),
        HoldReason::Flow => format!(
            "The agent wants to send data out with the tool `{tool}`, and {who} asks a person before data leaves a conversation that read untrusted content and private data. Allow this call?"
        ),
    }
}

/// What a person is told of a call held by the lethal-trifecta rule: the trail, then what
/// the call wants ("Read untrusted content with `web__fetch` at 10:02:11 UTC, then read
/// private data with `db__query` at 10:03:40 UTC; now the agent wants to send data out with
/// `mail__send`.").
pub fn flow_trail(flow: &Flow, tool: &str) -> String {
    let steps: Vec<String> = flow
        .trail()
        .into_iter()
        .map(|t| {
            format!(
                "{} with `{}` at {}",
                t.label.told(),
                visible(&t.tool),
                clock_time(t.at)
            )
        })
        .collect();
    let mut text = String::from("In this conversation the agent ");
    text.push_str(&steps.join(", then "));
    text.push_str(&format!(
        "; now it wants to send data out with `{}`. Untrusted content may carry instructions that make an agent send private data away.",
        visible(tool)
    ));
    text
}

/// What a person is told of a call whose arguments carry a secret the agent was shown by
/// an earlier result ("The arguments of this call carry a secret the agent read with
/// `db__query` at 10:03:40 UTC.").
pub fn exfiltration_text(seen: &crate::flow::Seen) -> String {
    format!(
        "The arguments of this call carry a secret the agent read with `{}` at {}.",
        visible(&seen.tool),
        clock_time(seen.at)
    )
}

/// `10:02:11 UTC`.
fn clock_time(at: time::OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!("{:02}:{:02}:{:02} UTC", at.hour(), at.minute(), at.second())
}

/// Whether a person could be misled by `c` in text: control characters, bidirectional
/// controls (which reorder what is displayed), and invisible formatting characters.
fn is_deceptive(c: char) -> bool {
    // Controls, bidi controls, line/paragraph separators, and Unicode's default-ignorable
    // code points (shown as nothing): soft hyphen, combining grapheme joiner, Hangul and
    // Mongolian fillers, zero-width and word-joiner characters, variation selectors, tags.
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
            | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
            | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}' | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E0FFF}')
}

/// `text` with every character that could mislead a person — control characters,
/// bidirectional controls, invisible formatting and tag characters — written as a visible
/// escape (`\u202e`, `\u{e0041}`), so what the person reads is what runs.
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_deceptive(c) {
            let code = u32::from(c);
            if code <= 0xFFFF {
                out.push_str(&format!("\\u{code:04x}"));
            } else {
                out.push_str(&format!("\\u{{{code:x}}}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The in-band answer to a call of a tool whose definition waits for review (it is not its
/// pin): nothing was run. Names the change and where it waits; the reasons are shown as
/// visible text.
pub fn quarantined_result(
    tool: &str,
    change: &str,
    reasons: &[String],
    surfaces: &Surfaces,
) -> Value {
    let why = reasons
        .iter()
        .map(|r| visible(r))
        .collect::<Vec<_>>()
        .join("; ");
    let at = surfaces
        .review_at
        .as_ref()
        .map(|at| format!(" ({at})"))
        .unwrap_or_default();
    let text = format!(
        "The tool `{}` is withheld: its definition changed since it was trusted ({why}). It waits for an operator's review as change {change}{at}; nothing was run.",
        visible(tool)
    );
    let structured =
        serde_json::json!({"tool_quarantined": true, "change": change, "reasons": reasons});
    let hint = Hint::DefinitionReview {
        change: change.to_owned(),
    };
    with_denial(
        mcp_wire::tools::text_result(&text, Some(&structured), true),
        &Denial::new(None, vec![hint]),
    )
}

/// JSON text with every deceptive character (as [`visible`] finds them, but the layout's
/// line breaks and tabs) written as a JSON
/// escape (`\u202e`; a character past U+FFFF as its UTF-16 pair, `\udb40\udc41`): the same
/// JSON to a parser, but what a person reads and edits is what runs. For JSON written by
/// `serde_json`, where such characters can appear only inside strings.
pub fn visible_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        // Line breaks and tabs are the JSON's layout (inside a string they are escaped).
        if is_deceptive(c) && !matches!(c, '\n' | '\r' | '\t') {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A confirmation message for a call, and whether it shows the call's arguments in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmationMessage {
    /// The text shown to the person.
    pub text: String,
    /// Whether the text contains the arguments in full. When it does not (they are too long
    /// for one message), a person must not be asked to approve from this text alone: the
    /// gateway then asks through the held result, whose REST view shows every argument.
    pub shows_all_arguments: bool,
}

/// The confirmation message for a call: [`confirmation_prompt`] followed by the arguments'
/// canonical JSON in full, when it fits in one elicitation message
/// ([`elicitation_core::MAX_MESSAGE_CHARS`]); otherwise a note that they are too long to
/// show and where to review them.
pub fn confirmation_message(
    tool_name: &str,
    reason: HoldReason,
    arguments: &Value,
    surfaces: &Surfaces,
) -> ConfirmationMessage {
    message_of(
        confirmation_prompt(tool_name, reason, surfaces),
        arguments,
        surfaces,
    )
}

/// [`confirmation_message`] after `why` (the trail of a call the lethal-trifecta rule
/// holds: [`flow_trail`]), which every surface then shows before the prompt.
pub fn confirmation_message_after(
    why: &str,
    tool_name: &str,
    reason: HoldReason,
    arguments: &Value,
    surfaces: &Surfaces,
) -> ConfirmationMessage {
    let prompt = format!("{why} {}", confirmation_prompt(tool_name, reason, surfaces));
    message_of(prompt, arguments, surfaces)
}

fn message_of(prompt: String, arguments: &Value, surfaces: &Surfaces) -> ConfirmationMessage {
    // The canonical JSON escapes ASCII controls; bidi and invisible characters it keeps.
    let canonical = visible(&crate::canonical_json(arguments));
    let full = format!("{prompt} Arguments: {canonical}");
    if full.chars().count() <= elicitation_core::MAX_MESSAGE_CHARS {
        return ConfirmationMessage {
            text: full,
            shows_all_arguments: true,
        };
    }
    let review = match &surfaces.pending_at {
        Some(at) => format!("review them in {at} before answering"),
        None => "review them in full before answering".to_owned(),
    };
    let text = format!(
        "{prompt} Its arguments are too long to show here ({} characters): {review}.",
        canonical.chars().count()
    );
    ConfirmationMessage {
        text,
        shows_all_arguments: false,
    }
}

/// Whether `message` (a confirmation's, as [`confirmation_message`] wrote it, and perhaps
/// who must confirm after it) shows every one of `arguments`: what a person approving from
/// it sees.
pub fn message_shows_arguments(message: &str, arguments: &Value) -> bool {
    let canonical = visible(&crate::canonical_json(arguments));
    message.contains(&format!(" Arguments: {canonical}"))
}

/// A call's confirmation message as [`confirmation_message`] wrote it, without the
/// arguments: for a notification that leaves the gateway without them. Anything that is
/// not exactly that message and those arguments gives only a line naming the tool, never
/// more of the text (fail closed: it may hold them).
pub fn message_without_arguments(tool_name: &str, message: &str, arguments: &Value) -> String {
    let canonical = visible(&crate::canonical_json(arguments));
    if let Some(prompt) = message.strip_suffix(&format!(" Arguments: {canonical}")) {
        return prompt.to_owned();
    }
    if let Some((prompt, _)) = message.split_once(" Its arguments are too long to show here (")
        && !prompt.contains(" Arguments: ")
    {
        return prompt.to_owned();
    }
    format!("The agent wants to run `{}`.", visible(tool_name))
}

/// The two parts of a tool result: the text a model reads and the structured content a
/// program reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultParts {
    /// Human-readable text for a `text` content block.
    pub text: String,
    /// The `structuredContent` object.
    pub structured: Value,
}

fn tool_result(parts: &ResultParts, is_error: bool) -> Value {
    mcp_wire::tools::text_result(&parts.text, Some(&parts.structured), is_error)
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339)
        .expect("timestamps of elicitations are within RFC 3339's range")
}

/// The parts of the held result for a call waiting on `confirmation`.
///
/// `structuredContent` is `{"elicitation_required": true, "elicitation": {id, type, message,
/// response_schema, expires_at}}`.
pub fn held_result_parts(confirmation: &Elicitation, surfaces: &Surfaces) -> ResultParts {
    let id = confirmation.id;
    let expires_at = rfc3339(confirmation.expires_at);
    let at = surfaces
        .answer_at
        .as_ref()
        .map(|at| format!(" ({at})"))
        .unwrap_or_default();
    let next = format!(
        "Ask a person to approve confirmation {id}{at} before {expires_at}. Once they have, \
         call the tool again with exactly the same arguments: that call runs, once. \
         (Setting _meta.confirmation_id = \"{id}\" on it names this confirmation, but is not \
         needed.)"
    );
    let text = format!(
        "This call was not run: it needs a person's confirmation first. {message} {next}",
        message = confirmation.spec.message(),
    );
    let structured = json!({
        "elicitation_required": true,
        // Some clients show the model only `structuredContent`: what to do is here too.
        "next_step": next,
        "elicitation": {
            "id": id,
            "type": confirmation.kind(),
            "message": confirmation.spec.message(),
            "response_schema": response_schema(confirmation.spec.response()),
            "expires_at": expires_at,
        },
    });
    ResultParts { text, structured }
}

/// The held result: a non-error `CallToolResult` carrying the confirmation elicitation.
pub fn held_result(confirmation: &Elicitation, surfaces: &Surfaces) -> Value {
    held_result_at(confirmation, surfaces, None)
}

/// The held result, its SEP-2643 denial naming also the page where a person approves this
/// confirmation (`approve_at`), when the gateway knows its address.
pub fn held_result_at(
    confirmation: &Elicitation,
    surfaces: &Surfaces,
    approve_at: Option<&str>,
) -> Value {
    let id = confirmation.id.to_string();
    let mut hints = vec![Hint::PersonApproval {
        confirmation_id: id.clone(),
        expires_at: rfc3339(confirmation.expires_at),
    }];
    if let Some(url) = approve_at {
        hints.push(Hint::Url {
            url: url.to_owned(),
        });
    }
    with_denial(
        tool_result(&held_result_parts(confirmation, surfaces), false),
        &Denial::new(Some(id), hints),
    )
}

/// What a declined call's structured content says in words: several hosts (Codex) show the
/// model only the structured content, where `user_rejected: true` alone is easily misread.
const DECLINED: &str = "The user declined this call; it was not run.";

/// The result when the person declined: an in-band tool error, `user_rejected: true`.
pub fn user_rejected_result(note: Option<&str>) -> Value {
    let parts = match note {
        // The person's words are data for the agent, shown as such (control, bidi and
        // invisible characters escaped), never instructions of the gateway's.
        Some(note) => ResultParts {
            text: format!("{DECLINED} Their note: {}", visible(note)),
            structured: json!({"user_rejected": true, "message": DECLINED, "note": note}),
        },
        None => ResultParts {
            text: DECLINED.to_owned(),
            structured: json!({"user_rejected": true, "message": DECLINED}),
        },
    };
    tool_result(&parts, true)
}

/// The result when the confirmation was cancelled (dismissed by the person, or withdrawn):
/// an in-band tool error, `confirmation_cancelled: true`.
pub fn cancelled_result(id: ElicitationId) -> Value {
    let text = format!("The confirmation {id} was cancelled; the call was not run.");
    let parts = ResultParts {
        structured: json!({"confirmation_cancelled": true, "elicitation_id": id, "message": text}),
        text,
    };
    tool_result(&parts, true)
}

/// The result when nobody answered the confirmation in time: an in-band tool error,
/// `confirmation_expired: true`.
pub fn expired_result(id: ElicitationId) -> Value {
    let text = format!(
        "The confirmation {id} expired before anyone answered; the call was not run. Call the tool again to ask anew."
    );
    let parts = ResultParts {
        structured: json!({"confirmation_expired": true, "elicitation_id": id, "message": text}),
        text,
    };
    tool_result(&parts, true)
}

/// The result for a tool the operator's policy denies: an in-band tool error,
/// `policy_denied: true`.
pub fn denied_result(tool_name: &str, reason: Option<&str>, surfaces: &Surfaces) -> Value {
    let whose = surfaces.name_capitalized();
    let text = match reason {
        Some(reason) => format!(
            "{whose}'s policy does not allow this call to `{tool_name}`: {reason}. The call was not run."
        ),
        None => {
            format!("{whose}'s policy does not allow calls to `{tool_name}`; the call was not run.")
        }
    };
    let structured = match reason {
        Some(reason) => json!({"policy_denied": true, "reason": reason, "message": text}),
        None => json!({"policy_denied": true, "message": text}),
    };
    let hint = Hint::PolicyDenied {
        reason: reason.map(str::to_owned),
    };
    with_denial(
        tool_result(&ResultParts { text, structured }, true),
        &Denial::new(None, vec![hint]),
    )
}

/// The result when the gate cannot decide safely (no usable store, no authenticated caller,
/// too many pending confirmations): an in-band tool error, `gate_unavailable: true`. The call
/// was not run: the gate fails closed.
pub fn gate_unavailable_result(reason: &str, surfaces: &Surfaces) -> Value {
    let text = format!(
        "This call needs a person's confirmation, but {} cannot ask for one now: {reason}. The call was not run.",
        surfaces.name
    );
    let parts = ResultParts {
        structured: json!({"gate_unavailable": true, "message": text}),
        text,
    };
    tool_result(&parts, true)
}

/// The result when the module could not run a forwarded call: an in-band tool error with
/// the reason, and `structuredContent` `upstream_error: true` unless the tool declares an
/// `outputSchema` (`has_output_schema`), which that object would break: clients validate
/// any `structuredContent` against it, error or not (the TypeScript SDK refuses it).
pub fn upstream_error_result(reason: &str, has_output_schema: bool) -> Value {
    let parts = ResultParts {
        text: format!("The tool could not be run: {reason}"),
        structured: json!({"upstream_error": true}),
    };
    let mut result = tool_result(&parts, true);
    if has_output_schema && let Some(map) = result.as_object_mut() {
        map.remove("structuredContent");
    }
    result
}

/// A call not sent because its module runs as each caller's own account and this caller's
/// is not connected: an error result saying where the person connects it (`connect_url`,
/// when the gateway knows its own address), after which the agent calls again. Like
/// [`upstream_error_result`], without `structuredContent` for a tool that declares an
/// `outputSchema`.
pub fn account_required_result(
    module: &str,
    connect_url: Option<&str>,
    has_output_schema: bool,
    surfaces: &Surfaces,
) -> Value {
    let module = crate::visible(module);
    let place = match (connect_url, &surfaces.accounts_at) {
        (Some(url), _) => format!("connect it at {url}"),
        (None, Some(at)) => format!("connect it on {at}"),
        (None, None) => "connect it".to_owned(),
    };
    let parts = ResultParts {
        text: format!(
            "Not run: module {module} runs as your own account there, and yours is not connected. Ask the person to {place}, then call again."
        ),
        structured: json!({"account_required": true, "module": module, "connect_url": connect_url}),
    };
    let mut result = tool_result(&parts, true);
    if has_output_schema && let Some(map) = result.as_object_mut() {
        map.remove("structuredContent");
    }
    let hint = match connect_url {
        Some(url) => Hint::Url {
            url: url.to_owned(),
        },
        None => Hint::ConnectAccount {
            module: module.clone(),
        },
    };
    with_denial(result, &Denial::new(None, vec![hint]))
}

/// A call refused because its caller is over a limit (`what` says which, `retry_after_secs`
/// when to try again): an error result the agent can act on. Like
/// [`upstream_error_result`], without `structuredContent` for a tool that declares an
/// `outputSchema`.
pub fn rate_limited_result(what: &str, retry_after_secs: u64, has_output_schema: bool) -> Value {
    let parts = ResultParts {
        text: format!("Not run: {what}. Try again in {retry_after_secs} s."),
        structured: json!({"rate_limited": true, "retry_after_secs": retry_after_secs}),
    };
    let mut result = tool_result(&parts, true);
    if has_output_schema && let Some(map) = result.as_object_mut() {
        map.remove("structuredContent");
    }
    mcp_wire::tools::with_retry_after(result, retry_after_secs)
}

/// The result of a call refused because it would pass a quota or budget: what was passed
/// (`quota`: the rule's tools, window, limit and unit) and when its window starts afresh
/// (also in `_meta`, [`mcp_wire::tools::with_retry_after`], which a server puts in
/// `Retry-After`).
pub fn quota_result(
    what: &str,
    quota: Value,
    retry_after_secs: u64,
    has_output_schema: bool,
) -> Value {
    let parts = ResultParts {
        text: format!(
            "Not run: {what}. The quota starts afresh in {retry_after_secs} s; try again then."
        ),
        structured: json!({"quota_exceeded": true, "quota": quota, "retry_after_secs": retry_after_secs}),
    };
    let mut result = tool_result(&parts, true);
    if has_output_schema && let Some(map) = result.as_object_mut() {
        map.remove("structuredContent");
    }
    mcp_wire::tools::with_retry_after(result, retry_after_secs)
}

#[cfg(test)]
mod tests;
