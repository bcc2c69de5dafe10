//! The approvals page's HTML, written by hand from the REST API's views of elicitations
//! (`mcp_http_kit::views::view`). Everything that came from an agent, a module or a person is text: shown
//! through `gating_core::visible` (control and bidi characters escaped) and HTML-escaped, so
//! an argument or message can never become markup.

mod accounts;
mod audit;
mod delegations;
mod insights;

pub(crate) use accounts::{AccountRow, AccountsView, accounts_page};
pub(crate) use audit::{AuditView, audit_page};
pub(crate) use insights::insights_page;

use std::fmt::Write as _;

use elicitation_core::{CancelReason, ElicitationStatus, ElicitationType, ResponseSpec};
use mcp_http_kit::views::ElicitationView;
use serde_json::Value;

/// `text` safe inside HTML text and attribute values (quoted).
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// Untrusted text, shown: deceptive characters made visible, then escaped.
pub(crate) fn shown(text: &str) -> String {
    escape(&gating_core::visible(text))
}

/// What one page shows besides the lists.
pub(crate) struct Frame<'a> {
    /// Who is signed in (`None` with auth `none`).
    pub(crate) signed_in_as: Option<&'a str>,
    /// The form token of the page's session.
    pub(crate) csrf: &'a str,
    /// A notice at the top (an answer refused, say).
    pub(crate) notice: Option<&'a str>,
    /// The fingerprint of the pending list shown, which the page's script gives the change
    /// feed to compare with (`None`: the page does not follow changes).
    pub(crate) seen: Option<&'a str>,
    /// The durations a person may grant later calls for (`"15m"`, …, up to `[gate]
    /// max_grant`), offered next to Approve.
    pub(crate) grant_for: &'a [String],
    /// The person may answer elicitations (`elicitations:respond`): the page shows what
    /// waits, the grants and what was answered lately.
    pub(crate) respond: bool,
    /// The withheld tool definitions to review (`Some` when the person has
    /// `catalog:approve`), as `mcp_http_kit::views::change_view`s.
    pub(crate) changes: Option<&'a [Value]>,
    /// The person reads the audit trail (`audit:read`): a link to the Audit view.
    pub(crate) audit: bool,
    /// Some module runs as its callers' own accounts: a link to the Accounts view.
    pub(crate) accounts: bool,
}

/// The durations offered for a standing grant: the usual ones up to `max`, and `max`.
pub(crate) fn grant_durations(max: time::Duration) -> Vec<String> {
    let mut offered: Vec<time::Duration> = [
        time::Duration::minutes(15),
        time::Duration::hours(1),
        time::Duration::hours(8),
        time::Duration::days(1),
    ]
    .into_iter()
    .filter(|d| *d < max)
    .collect();
    offered.push(max);
    offered
        .into_iter()
        .map(gating_core::format_duration)
        .collect()
}

/// A problem with an answer, shown next to its item.
pub(crate) struct ItemError<'a> {
    pub(crate) id: &'a str,
    pub(crate) messages: Vec<String>,
    /// The tries left, when the answer cost one (an edit the gate refused costs none).
    pub(crate) retries_left: Option<u8>,
    /// The edited arguments as the person typed them, shown again to be corrected.
    pub(crate) edited: Option<String>,
}

fn document(title: &str, body: &str) -> String {
    document_with_head(title, "", body)
}

fn document_with_head(title: &str, head: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{head}<title>{}</title><link rel=\"stylesheet\" href=\"/approvals/style.css\"><script src=\"/approvals/app.js\" defer></script></head><body>{body}</body></html>\n",
        escape(title)
    )
}

/// The sign-in page.
pub(crate) fn sign_in(problem: Option<&str>) -> String {
    sign_in_to(problem, None)
}

/// The sign-in page, going on to `next` (a page of the approvals, checked by the caller).
pub(crate) fn sign_in_to(problem: Option<&str>, next: Option<&str>) -> String {
    sign_in_with(problem, next, false)
}

/// A page of this site that says `what` and goes on to `next` (checked by the caller): after
/// a single sign-on, to the page (a redirect would not carry the SameSite=Strict cookie);
/// after signing out, to the identity provider's sign-out (a redirect after a form post
/// would be held to the page's `form-action 'self'`).
pub(crate) fn continue_to(what: &str, next: &str) -> String {
    let next = escape(next);
    let head = format!("<meta http-equiv=\"refresh\" content=\"0;url={next}\">");
    let body = format!(
        "<main><h1>mcp-gateway approvals</h1><p>{}. <a href=\"{next}\">Continue</a></p></main>",
        escape(what)
    );
    document_with_head(&format!("{what} — mcp-gateway approvals"), &head, &body)
}

/// Said to a client that came back from a first visit's redirect without its cookie: the
/// page keeps who is signed in in a cookie, and this client keeps none.
pub(crate) fn needs_cookies(to: &str) -> String {
    let body = format!(
        "<main><h1>mcp-gateway approvals</h1><p class=\"error\" role=\"alert\">This page keeps you signed in with a cookie, and it did not come back. Allow cookies for this address in your browser, then open <a href=\"{}\">the page</a> again. Programs answer through the REST API instead (<code>/v1/mcp/elicitations</code>).</p></main>",
        escape(to)
    );
    document("Cookies needed — mcp-gateway approvals", &body)
}

/// The sign-in page; with `sso`, first the way through the identity provider.
pub(crate) fn sign_in_with(problem: Option<&str>, next: Option<&str>, sso: bool) -> String {
    let mut body = String::from("<main><h1>mcp-gateway approvals</h1>");
    if let Some(problem) = problem {
        let _ = write!(
            body,
            "<p class=\"error\" role=\"alert\">{}</p>",
            escape(problem)
        );
    }
    if sso {
        let start = match next {
            Some(next) => format!(
                "/approvals/oidc/start?next={}",
                form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
            ),
            None => "/approvals/oidc/start".to_owned(),
        };
        let _ = write!(
            body,
            "<p><a class=\"sso\" href=\"{}\">Sign in with your organisation's account</a></p><p>Or with a token:</p>",
            escape(&start)
        );
    }
    body.push_str("<form method=\"post\" action=\"/approvals/sign-in\">");
    if let Some(next) = next {
        let _ = write!(
            body,
            "<input type=\"hidden\" name=\"next\" value=\"{}\">",
            escape(next)
        );
    }
    body.push_str(
        "<label for=\"token\">Your token (one with <code>elicitations:respond</code>)</label> <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required autofocus> <button type=\"submit\">Sign in</button></form></main>",
    );
    document("Sign in — mcp-gateway approvals", &body)
}

/// The page: what waits for the person, and what they answered lately.
pub(crate) fn page(
    frame: &Frame<'_>,
    pending: &[Item],
    history: &[ElicitationView],
    grants: &[Value],
    away: &Away<'_>,
    error: Option<&ItemError<'_>>,
    now: time::OffsetDateTime,
) -> String {
    let mut body = String::from("<header><h1>Approvals</h1>");
    if let Some(who) = frame.signed_in_as {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"/approvals/sign-out\" class=\"who\">Signed in as <strong>{}</strong> <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form>",
            shown(who),
            escape(frame.csrf)
        );
    }
    body.push_str("</header><main>");
    if frame.audit || frame.accounts {
        body.push_str("<nav>");
        if frame.audit {
            body.push_str("<a href=\"/approvals/audit\">Audit</a> ");
        }
        if frame.accounts {
            body.push_str("<a href=\"/approvals/accounts\">Accounts</a>");
        }
        body.push_str("</nav>");
    }
    if let Some(notice) = frame.notice {
        let _ = write!(
            body,
            "<p class=\"notice\" role=\"status\">{}</p>",
            escape(notice)
        );
    }
    if let Some(changes) = frame.changes {
        changes_section(&mut body, changes, frame.csrf);
    }
    if !frame.respond {
        body.push_str("</main>");
        return document("Approvals — mcp-gateway", &body);
    }
    let seen = frame
        .seen
        .map(|seen| format!(" data-seen=\"{}\"", escape(seen)))
        .unwrap_or_default();
    let _ = write!(
        body,
        "<section aria-labelledby=\"waiting\"><h2 id=\"waiting\"{seen}>Waiting for you ({})</h2>",
        pending.len()
    );
    if pending.is_empty() {
        body.push_str("<p class=\"empty\">Nothing waits for you.</p>");
    }
    for item in pending {
        let id = item.view.id.to_string();
        let item_error = error.filter(|e| e.id == id);
        body.push_str(&pending_item(item, frame, item_error, now));
    }
    body.push_str("</section>");
    grants_section(&mut body, grants, frame.csrf);
    delegations::delegations_section(
        &mut body,
        away.delegations,
        away.signed_in,
        away.may_give,
        frame.csrf,
    );
    body.push_str("<section aria-labelledby=\"history\"><h2 id=\"history\">Lately</h2>");
    if history.is_empty() {
        body.push_str("<p class=\"empty\">Nothing answered yet.</p>");
    } else {
        body.push_str(
            "<table><thead><tr><th>When</th><th>What</th><th>Outcome</th><th>By</th></tr></thead><tbody>",
        );
        for item in history {
            body.push_str(&history_row(item));
        }
        body.push_str("</tbody></table>");
    }
    body.push_str("</section></main>");
    document("Approvals — mcp-gateway", &body)
}

/// The person's delegations as the page shows them (the Away section).
pub(crate) struct Away<'a> {
    /// The delegations given or received that have not ended (`delegation_view`s).
    pub(crate) delegations: &'a [Value],
    /// The signed-in person's subject (whether a delegation is theirs to give or to act on).
    pub(crate) signed_in: &'a str,
    /// Whether they are in approver groups they may hand over.
    pub(crate) may_give: bool,
}

impl Away<'_> {
    /// No delegations and none to give.
    pub(crate) const NONE: Away<'static> = Away {
        delegations: &[],
        signed_in: "",
        may_give: false,
    };
}

/// An elicitation as the page shows it among what waits.
pub(crate) struct Item {
    /// Its view.
    pub(crate) view: ElicitationView,
    /// Whose it is, when another caller's (an approver group's confirmation).
    pub(crate) owner: Option<String>,
    /// Whether this person may answer it (`false`: it waits for another group's member).
    pub(crate) answerable: bool,
    /// Whether this person's approval is among those counted toward its quorum already.
    pub(crate) voted: bool,
    /// Whether this person answers it for someone away (a delegation): no grant then.
    pub(crate) for_someone_away: bool,
    /// The `when` of the shape this caller's calls of the tool that people approved lately
    /// share, when this call has it too: offered as a one-click standing grant.
    pub(crate) suggested_when: Option<String>,
    /// When the last call of the same tool by the same caller that a person approved was
    /// answered, and its arguments (a held call's; `None`: none among its recent ones).
    pub(crate) last_approved: Option<(String, Value)>,
}

/// A string field of a grant's, a change's or an audit event's JSON view.
fn text<'a>(item: &'a Value, key: &str) -> &'a str {
    item.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn time_left(view: &ElicitationView, now: time::OffsetDateTime) -> String {
    let expires = time::OffsetDateTime::parse(
        view.expires_at.as_deref().unwrap_or_default(),
        &time::format_description::well_known::Rfc3339,
    );
    match expires {
        Ok(expires) if expires > now => {
            let left = (expires - now).whole_seconds();
            if left >= 60 {
                format!("{} min {} s left", left / 60, left % 60)
            } else {
                format!("{left} s left")
            }
        }
        _ => "expiring".into(),
    }
}

fn pending_item(
    item: &Item,
    frame: &Frame<'_>,
    error: Option<&ItemError<'_>>,
    now: time::OffsetDateTime,
) -> String {
    let csrf = frame.csrf;
    let view = &item.view;
    let id = escape(&view.id.to_string());
    let mut out = format!("<article class=\"item\" id=\"e-{id}\">");
    item_heading(&mut out, item, now);
    if let Some(arguments) = &view.arguments {
        // The JSON's own line breaks are layout (those inside strings are escaped by
        // serde_json): each line is shown, the breaks kept.
        let pretty = serde_json::to_string_pretty(arguments).unwrap_or_default();
        let lines: Vec<String> = pretty.lines().map(shown).collect();
        let _ = write!(
            out,
            "<details open><summary>Arguments</summary><pre>{}</pre></details>",
            lines.join("\n")
        );
        if let Some((at, before)) = &item.last_approved {
            since_last(&mut out, at, before, arguments);
        }
    }
    if let Some(error) = error {
        out.push_str("<div class=\"error\" role=\"alert\"><ul>");
        for message in &error.messages {
            let _ = write!(out, "<li>{}</li>", escape(message));
        }
        out.push_str("</ul>");
        if let Some(left) = error.retries_left {
            let _ = write!(out, "<p>{left} tries left.</p>");
        }
        out.push_str("</div>");
    }
    let hidden = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(csrf)
    );
    let _ = write!(
        out,
        "<form method=\"post\" action=\"/approvals/{id}/respond\" class=\"answer\">{hidden}"
    );
    // The answer's JSON Schema: a field's bounds and choices are read from it.
    let schema = view.response_schema.get("properties");
    match &view.response_spec {
        ResponseSpec::Confirmation => {
            confirmation_controls(
                &mut out,
                item,
                frame.grant_for,
                error.and_then(|e| e.edited.as_deref()),
            );
        }
        ResponseSpec::StringInput { .. } => string_controls(&mut out, &id, schema),
        ResponseSpec::SingleChoice { .. } => choice_controls(&mut out, &id, schema, false),
        ResponseSpec::MultiChoice { .. } => choice_controls(&mut out, &id, schema, true),
        ResponseSpec::FileUpload {
            max_bytes,
            content_types,
        } => file_controls(&mut out, &id, *max_bytes, content_types),
    }
    let _ = write!(
        out,
        "</form><form method=\"post\" action=\"/approvals/{id}/cancel\" class=\"cancel\">{hidden}<button type=\"submit\">Cancel</button></form></article>"
    );
    out
}

/// How a held call's `arguments` differ from `before`, those of the last call of the same
/// tool by the same caller a person approved (at `at`): a line diff of their JSON, every line
/// inert text.
fn since_last(out: &mut String, at: &str, before: &Value, arguments: &Value) {
    let old = serde_json::to_string_pretty(before).unwrap_or_default();
    let new = serde_json::to_string_pretty(arguments).unwrap_or_default();
    let at = escape(at);
    if old == new {
        let _ = write!(
            out,
            "<p class=\"since unchanged\">The same arguments as the last call of this tool a person approved ({at}).</p>"
        );
        return;
    }
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    let _ = write!(
        out,
        "<details open class=\"since\"><summary>Changed since the last call of this tool a person approved ({at})</summary><pre class=\"diff\">"
    );
    for line in crate::diff::lines(&old, &new) {
        let (class, mark, text) = match line {
            crate::diff::Line::Kept(l) => ("kept", ' ', l),
            crate::diff::Line::Removed(l) => ("removed", '-', l),
            crate::diff::Line::Added(l) => ("added", '+', l),
        };
        let _ = writeln!(out, "<span class=\"{class}\">{mark} {}</span>", shown(text));
    }
    out.push_str("</pre></details>");
}

/// What is asked, for whom, of which type, the time left, and the message.
fn item_heading(out: &mut String, item: &Item, now: time::OffsetDateTime) {
    let view = &item.view;
    out.push_str("<h3>");
    match &view.tool {
        Some(tool) => {
            let _ = write!(out, "The agent wants to run <code>{}</code>", shown(tool));
            if let Some(server) = &view.server {
                let _ = write!(
                    out,
                    " <span class=\"server\">on server {}</span>",
                    shown(server)
                );
            }
        }
        None => out.push_str("A question"),
    }
    if let Some(owner) = &item.owner {
        let _ = write!(out, " <span class=\"for\">for {}</span>", shown(owner));
    }
    let _ = write!(
        out,
        "</h3><p class=\"meta\">{} · <span class=\"left\">{}</span></p><p class=\"message\">{}</p>",
        escape(view.kind.as_str()),
        escape(&time_left(view, now)),
        shown(&view.message)
    );
}

/// Where several people must approve: how many, of which groups, who approved so far and
/// when, and which groups it still waits for.
fn quorum_tally(out: &mut String, approval: &mcp_http_kit::views::ApprovalView) {
    let Some(needed) = approval.approvers_needed else {
        return;
    };
    let groups: Vec<String> = std::iter::once(&approval.group)
        .chain(&approval.also_from)
        .map(|g| format!("<strong>{}</strong>", shown(g)))
        .collect();
    let from = if groups.len() > 1 {
        format!("one from each of {}", groups.join(", "))
    } else {
        format!("from {}", groups.join(""))
    };
    let _ = write!(
        out,
        "<p class=\"quorum\">Needs {needed} approvals ({from}): {} so far",
        approval.approvals.len()
    );
    if !approval.approvals.is_empty() {
        let who: Vec<String> = approval
            .approvals
            .iter()
            .map(|v| {
                format!(
                    "{} <time>{}</time>",
                    shown(&v.by),
                    escape(v.at.as_deref().unwrap_or_default())
                )
            })
            .collect();
        let _ = write!(out, " — {}", who.join("; "));
    }
    out.push('.');
    if !approval.waiting_for.is_empty() {
        let missing: Vec<String> = approval
            .waiting_for
            .iter()
            .map(|g| format!("<strong>{}</strong>", shown(g)))
            .collect();
        let _ = write!(out, " Still needs one from {}.", missing.join(", "));
    }
    out.push_str("</p>");
}

/// Approve and Decline (with a note), Approve and allow this call or the tool for a while;
/// or, where another group must approve, who it waits for.
fn confirmation_controls(
    out: &mut String,
    item: &Item,
    grant_for: &[String],
    edited: Option<&str>,
) {
    let view = &item.view;
    if let Some(approval) = view.approval.as_ref() {
        quorum_tally(out, approval);
    }
    if item.voted {
        out.push_str(
            "<p class=\"waits\">You approved it; it waits for the other approvals it needs.</p>",
        );
    } else if !item.answerable {
        let group = view.approval.as_ref().map_or("", |a| a.group.as_str());
        let _ = write!(
            out,
            "<p class=\"waits\">Waits for a member of <strong>{}</strong> to approve.</p>",
            shown(group)
        );
    } else {
        let id = escape(&view.id.to_string());
        let _ = write!(
            out,
            "<button type=\"submit\" name=\"decision\" value=\"approve\" class=\"approve\">Approve</button> <button type=\"submit\" name=\"decision\" value=\"decline\" class=\"decline\">Decline</button> <label for=\"n-{id}\" class=\"note\">Note with a decline (optional)</label> <textarea id=\"n-{id}\" name=\"note\" maxlength=\"1000\" rows=\"2\"></textarea>"
        );
        // Several people approve a call as it is: no grant, no edit rides on one approval;
        // nor on one given for someone away (a grant would outlive the delegation).
        let alone = view
            .approval
            .as_ref()
            .is_none_or(|a| a.approvers_needed.is_none());
        let grant_for: &[String] = if alone && !item.for_someone_away {
            grant_for
        } else {
            &[]
        };
        if let Some(tool) = view.tool.as_deref().filter(|_| !grant_for.is_empty()) {
            let tool = shown(tool);
            // One click: the shape people approved lately, as a grant's `when`.
            let suggested = item.suggested_when.as_deref().map_or_else(String::new, |when| {
                format!(
                    " <button type=\"submit\" name=\"decision\" value=\"grant_when\" class=\"approve suggested\">Approve and allow calls where <code>{}</code></button><input type=\"hidden\" name=\"grant_when\" value=\"{}\">",
                    shown(when),
                    escape(when)
                )
            });
            let options: String = grant_for
                .iter()
                .map(|d| format!("<option value=\"{0}\">{0}</option>", escape(d)))
                .collect();
            let _ = write!(
                out,
                "<p class=\"grant\"><button type=\"submit\" name=\"decision\" value=\"grant_call\" class=\"approve\">Approve and allow this call</button> <button type=\"submit\" name=\"decision\" value=\"grant_tool\" class=\"approve\">Approve and allow <code>{tool}</code></button>{suggested} <label for=\"g-{id}\">for</label> <select id=\"g-{id}\" name=\"grant_for\">{options}</select> <label for=\"u-{id}\">at most</label> <input id=\"u-{id}\" name=\"grant_uses\" type=\"number\" min=\"1\" max=\"1000000\" inputmode=\"numeric\" size=\"6\" placeholder=\"any\"> <span>calls</span></p>"
            );
        }
        if let Some(arguments) = view.arguments.as_ref().filter(|_| alone) {
            // What is typed is the person's; what is shown first is the agent's, as JSON
            // text (escaped: it is data, never markup).
            // Deceptive characters as JSON escapes: the same arguments to the parser, but
            // a right-to-left override or a tag character is visible where it is edited.
            let text = gating_core::visible_json(&edited.map_or_else(
                || serde_json::to_string_pretty(arguments).unwrap_or_default(),
                str::to_owned,
            ));
            let open = if edited.is_some() { " open" } else { "" };
            let _ = write!(
                out,
                "<details class=\"edit\"{open}><summary>Edit arguments</summary><label for=\"a-{id}\">Arguments to run instead (JSON)</label><textarea id=\"a-{id}\" name=\"arguments\" rows=\"6\" spellcheck=\"false\">{}</textarea><button type=\"submit\" name=\"decision\" value=\"approve_edited\" class=\"approve\">Approve with these arguments</button></details>",
                escape(&text)
            );
        }
    }
}

/// The person's live standing grants (held and made), each with Revoke.
fn grants_section(out: &mut String, grants: &[Value], csrf: &str) {
    out.push_str("<section aria-labelledby=\"grants\"><h2 id=\"grants\">Grants</h2>");
    if grants.is_empty() {
        out.push_str("<p class=\"empty\">No standing grants.</p></section>");
        return;
    }
    out.push_str("<table class=\"grants\"><thead><tr><th>Tool</th><th>Covers</th><th>Uses left</th><th>Until</th><th>Granted by</th><th></th></tr></thead><tbody>");
    for grant in grants {
        let id = escape(text(grant, "id"));
        let covers = match (
            text(grant, "scope"),
            grant.get("when").and_then(Value::as_str),
        ) {
            ("call", _) => "the same call".to_owned(),
            (_, Some(when)) => format!("calls where <code>{}</code>", shown(when)),
            _ => "every call".to_owned(),
        };
        let owner = grant
            .get("for")
            .and_then(|f| f.get("subject"))
            .and_then(Value::as_str)
            .map(|s| format!(" <span class=\"for\">for {}</span>", shown(s)))
            .unwrap_or_default();
        let left = grant
            .get("uses_left")
            .and_then(Value::as_u64)
            .map_or_else(|| "any".to_owned(), |n| n.to_string());
        let _ = write!(
            out,
            "<tr id=\"grant-{id}\"><td data-label=\"Tool\"><code>{}</code>{owner}</td><td data-label=\"Covers\">{covers}</td><td data-label=\"Uses left\">{}</td><td data-label=\"Until\">{}</td><td data-label=\"Granted by\">{}</td><td><form method=\"post\" action=\"/approvals/grants/{id}/revoke\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\" class=\"revoke\">Revoke</button></form></td></tr>",
            shown(text(grant, "tool")),
            escape(&left),
            escape(text(grant, "expires_at")),
            shown(
                grant
                    .get("granted_by")
                    .and_then(Value::as_str)
                    .unwrap_or("(not recorded)")
            ),
            escape(csrf)
        );
    }
    out.push_str("</tbody></table></section>");
}

/// The fields of a definition in the order a reviewer reads them (others follow, sorted).
const DEFINITION_FIELDS: [&str; 7] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "arguments",
];

/// The tool and prompt definitions withheld because they are not their pin, each with what
/// changed and Approve / Reject.
// Long: one HTML section written top to bottom.
fn changes_section(out: &mut String, changes: &[Value], csrf: &str) {
    let _ = write!(
        out,
        "<section aria-labelledby=\"changes\"><h2 id=\"changes\">Tool changes ({})</h2>",
        changes.len()
    );
    if changes.is_empty() {
        out.push_str("<p class=\"empty\">No tool definition waits for review.</p></section>");
        return;
    }
    for change in changes {
        let id = escape(text(change, "id"));
        let pinned = change.get("pinned").filter(|p| !p.is_null());
        let what = if pinned.is_some() { "changed" } else { "new" };
        let _ = write!(
            out,
            "<article class=\"change\" id=\"change-{id}\"><h3><code>{}</code> from module <code>{}</code> <span class=\"kind\">({} {what})</span></h3><p class=\"when\">Seen {}</p>",
            shown(text(change, "name")),
            shown(text(change, "module")),
            shown(text(change, "kind")),
            escape(text(change, "seen_at")),
        );
        let reasons: Vec<&str> = change
            .get("reasons")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !reasons.is_empty() {
            out.push_str("<ul class=\"reasons\">");
            for reason in reasons {
                let _ = write!(out, "<li>{}</li>", shown(reason));
            }
            out.push_str("</ul>");
        }
        let proposed = change.get("proposed");
        let field = |definition: Option<&Value>, key: &str| {
            definition
                .and_then(|d| d.get(key))
                .filter(|v| !v.is_null())
                .cloned()
        };
        let mut keys: Vec<String> = DEFINITION_FIELDS.iter().map(|k| (*k).to_owned()).collect();
        let mut others: Vec<String> = [pinned, proposed]
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .flat_map(|o| o.keys().cloned())
            .filter(|k| !DEFINITION_FIELDS.contains(&k.as_str()))
            .collect();
        others.sort();
        others.dedup();
        keys.extend(others);
        let mut unchanged = Vec::new();
        for key in &keys {
            let (old, new) = (field(pinned, key), field(proposed, key));
            if old.is_none() && new.is_none() {
                continue;
            }
            if old == new {
                unchanged.push(key.as_str());
                continue;
            }
            let (old_lines, new_lines) = (field_lines(old.as_ref()), field_lines(new.as_ref()));
            let old_refs: Vec<&str> = old_lines.iter().map(|(l, _)| l.as_str()).collect();
            let new_refs: Vec<&str> = new_lines.iter().map(|(l, _)| l.as_str()).collect();
            // Each side's lines are shown as their kind says: text made visible, or JSON
            // whose strings' deceptive characters are escapes.
            let json_old = old_lines.first().is_some_and(|(_, json)| *json);
            let json_new = new_lines.first().is_some_and(|(_, json)| *json);
            let _ = write!(out, "<h4>{}</h4><pre class=\"diff\">", shown(key));
            for line in crate::diff::lines(&old_refs, &new_refs) {
                let (class, mark, line, json) = match line {
                    crate::diff::Line::Kept(l) => ("kept", ' ', l, json_new),
                    crate::diff::Line::Removed(l) => ("removed", '-', l, json_old),
                    crate::diff::Line::Added(l) => ("added", '+', l, json_new),
                };
                let line = if json {
                    escape(&gating_core::visible_json(line))
                } else {
                    shown(line)
                };
                let _ = writeln!(out, "<span class=\"{class}\">{mark} {line}</span>");
            }
            out.push_str("</pre>");
        }
        if !unchanged.is_empty() {
            let _ = write!(
                out,
                "<p class=\"unchanged\">Unchanged: {}</p>",
                shown(&unchanged.join(", "))
            );
        }
        let digests = match change.get("pinned_digest").and_then(Value::as_str) {
            Some(pinned) => format!(
                "pinned <code>{}</code> (version {}), proposed <code>{}</code>",
                escape(pinned),
                change
                    .get("pinned_version")
                    .and_then(Value::as_u64)
                    .unwrap_or_default(),
                escape(text(change, "proposed_digest"))
            ),
            None => format!(
                "proposed <code>{}</code>",
                escape(text(change, "proposed_digest"))
            ),
        };
        let _ = write!(
            out,
            "<p class=\"digests\">Definition digests: {digests}</p><div class=\"controls\"><form method=\"post\" action=\"/approvals/catalog/{id}/approve\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button type=\"submit\" class=\"approve\">Approve change</button></form><form method=\"post\" action=\"/approvals/catalog/{id}/reject\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button type=\"submit\" class=\"decline\">Reject</button></form></div></article>",
            csrf = escape(csrf)
        );
    }
    out.push_str("</section>");
}

/// One field of a definition as lines, each marked whether it is JSON: a string as its
/// text lines, anything else as pretty-printed JSON.
fn field_lines(value: Option<&Value>) -> Vec<(String, bool)> {
    match value {
        None => Vec::new(),
        Some(Value::String(text)) => text.lines().map(|l| (l.to_owned(), false)).collect(),
        Some(other) => serde_json::to_string_pretty(other)
            .unwrap_or_default()
            .lines()
            .map(|l| (l.to_owned(), true))
            .collect(),
    }
}

/// A text field with the schema's length bounds.
fn string_controls(out: &mut String, id: &str, schema: Option<&Value>) {
    let field = schema.and_then(|p| p.get("value"));
    let bound = |key: &str| field.and_then(|f| f.get(key)).and_then(Value::as_u64);
    let mut attrs = String::new();
    if let Some(min) = bound("minLength") {
        let _ = write!(attrs, " minlength=\"{min}\"");
    }
    if let Some(max) = bound("maxLength") {
        let _ = write!(attrs, " maxlength=\"{max}\"");
    }
    let _ = write!(
        out,
        "<label for=\"v-{id}\">Your answer</label> <input id=\"v-{id}\" name=\"value\" type=\"text\"{attrs}> <button type=\"submit\">Submit</button>"
    );
}

/// Radio buttons (one choice) or checkboxes (several, with the schema's bounds as legend).
fn choice_controls(out: &mut String, id: &str, schema: Option<&Value>, multi: bool) {
    let key = if multi { "choices" } else { "choice" };
    let field = schema.and_then(|p| p.get(key));
    let options = if multi {
        field
            .and_then(|f| f.get("items"))
            .and_then(|i| i.get("enum"))
    } else {
        field.and_then(|f| f.get("enum"))
    };
    let legend = if multi {
        let bound = |k: &str| field.and_then(|f| f.get(k)).and_then(Value::as_u64);
        match (bound("minItems"), bound("maxItems")) {
            (Some(min), Some(max)) => format!("Choose {min} to {max}"),
            (Some(min), None) => format!("Choose at least {min}"),
            (None, Some(max)) => format!("Choose at most {max}"),
            (None, None) => "Choose any".into(),
        }
    } else {
        String::from("Choose")
    };
    let _ = write!(out, "<fieldset><legend>{}</legend>", escape(&legend));
    let input = if multi { "checkbox" } else { "radio" };
    for (n, option) in options
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let option = option.as_str().unwrap_or_default();
        let _ = write!(
            out,
            "<label><input type=\"{input}\" name=\"{key}\" value=\"{}\" id=\"o-{id}-{n}\"> {}</label>",
            escape(option),
            shown(option)
        );
    }
    out.push_str("</fieldset><button type=\"submit\">Submit</button>");
}

/// A file picker with the spec's type and size limits, uploaded by the page's script.
fn file_controls(out: &mut String, id: &str, max_bytes: Option<u64>, content_types: &[String]) {
    let types: Vec<&str> = content_types.iter().map(String::as_str).collect();
    let mut limits = Vec::new();
    let mut attrs = String::new();
    if !types.is_empty() {
        limits.push(format!("of type {}", types.join(", ")));
        let _ = write!(attrs, " accept=\"{}\"", escape(&types.join(",")));
    }
    if let Some(max) = max_bytes {
        limits.push(format!("at most {max} bytes"));
        let _ = write!(attrs, " data-max-bytes=\"{max}\"");
    }
    if !limits.is_empty() {
        let _ = write!(
            out,
            "<p class=\"limits\">A file {}.</p>",
            escape(&limits.join(", "))
        );
    }
    let _ = write!(
        out,
        "<label for=\"f-{id}\">Your file</label> <input id=\"f-{id}\" type=\"file\"{attrs} data-upload=\"/approvals/{id}/upload\"> <button type=\"button\" class=\"upload\" data-for=\"f-{id}\">Upload</button><noscript> Uploading needs JavaScript.</noscript><span class=\"upload-status\" role=\"status\"></span>"
    );
}

fn history_row(view: &ElicitationView) -> String {
    let status = view.status;
    let outcome = match (status, &view.response) {
        (ElicitationStatus::Responded, Some(response))
            if view.kind == ElicitationType::Confirmation =>
        {
            if response.get("confirmed") == Some(&Value::Bool(true)) {
                "approved".to_owned()
            } else {
                "declined".to_owned()
            }
        }
        (ElicitationStatus::Responded, Some(response)) => format!(
            "answered {}",
            serde_json::to_string(response).unwrap_or_default()
        ),
        (ElicitationStatus::Cancelled, _) => match view.cancel_reason {
            Some(CancelReason::Declined) => "declined".to_owned(),
            _ => "cancelled".to_owned(),
        },
        (other, _) => other.to_string(),
    };
    let when = [&view.responded_at, &view.cancelled_at, &view.expires_at]
        .into_iter()
        .find_map(|t| t.as_deref())
        .unwrap_or_default();
    let what = match &view.tool {
        Some(tool) => format!("<code>{}</code>", shown(tool)),
        None => shown(&view.message),
    };
    // Who: recorded with an answer; a cancellation says whose it was; expiry is nobody's.
    let who = match (status, view.cancel_reason) {
        (ElicitationStatus::Responded, _) => view
            .answered_by
            .as_deref()
            .unwrap_or("(not recorded)")
            .to_owned(),
        (ElicitationStatus::Cancelled, Some(CancelReason::CancelledByCaller)) => {
            "whoever asked".to_owned()
        }
        (ElicitationStatus::Cancelled, _) => "a person".to_owned(),
        _ => "—".to_owned(),
    };
    format!(
        "<tr><td>{}</td><td>{what}</td><td>{}</td><td>{}</td></tr>",
        escape(when),
        shown(&outcome),
        shown(&who)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_agents_never_becomes_markup_and_deceptive_characters_show() {
        let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&\u{202e}gnp.exe";
        let out = shown(hostile);
        assert!(
            !out.contains('<') && !out.contains('>') && !out.contains('"'),
            "{out}"
        );
        assert!(!out.contains('\u{202e}'), "{out}");
        assert!(out.contains("&lt;script&gt;"), "{out}");
    }

    /// A held call, as the page's typed view of it.
    fn held(tool: &str, message: &str, arguments: Value, group: Option<&str>) -> ElicitationView {
        ElicitationView {
            id: elicitation_core::ElicitationId::v7(time::OffsetDateTime::now_utc(), [7; 10]),
            kind: ElicitationType::Confirmation,
            status: ElicitationStatus::Pending,
            message: message.to_owned(),
            response_spec: ResponseSpec::Confirmation,
            response_schema: serde_json::json!({"type": "object"}),
            response: None,
            retries: 0,
            created_at: Some("2026-12-04T10:00:00Z".into()),
            expires_at: Some("2999-01-01T00:00:00Z".into()),
            responded_at: None,
            answered_by: None,
            note: None,
            cancelled_at: None,
            cancel_reason: None,
            consumed_at: None,
            tool: Some(tool.to_owned()),
            server: None,
            arguments: Some(arguments),
            approval: group.map(|group| {
                mcp_http_kit::views::ApprovalView::of(
                    &elicitation_store::Approval::of_group(
                        group,
                        elicitation_store::ApprovalMode::Must,
                    ),
                    &[],
                )
            }),
        }
    }

    fn frame(grant_for: &[String]) -> Frame<'_> {
        Frame {
            signed_in_as: Some("carol"),
            csrf: "t",
            notice: None,
            seen: None,
            grant_for,
            respond: true,
            changes: None,
            audit: false,
            accounts: false,
        }
    }

    #[test]
    fn a_held_call_shows_its_tool_owner_and_arguments_as_inert_text_with_its_answers() {
        let hostile = "<img src=x onerror=alert(1)>\u{202e}exe";
        let mut view = held(hostile, hostile, serde_json::json!({"path": hostile}), None);
        view.server = Some("finance".into());
        let item = Item {
            view,
            owner: Some(hostile.to_owned()),
            answerable: true,
            voted: false,
            for_someone_away: false,
            suggested_when: None,
            last_approved: None,
        };
        let grant_for = vec!["15m".to_owned()];
        let page = page(
            &frame(&grant_for),
            &[item],
            &[],
            &[],
            &Away::NONE,
            None,
            time::OffsetDateTime::now_utc(),
        );
        let body = &page[page.find("<body>").unwrap()..];
        for raw in ["<img", "\u{202e}"] {
            assert!(!body.contains(raw), "{raw} in {body}");
        }
        for shown in [
            "value=\"approve\"",
            "value=\"decline\"",
            "value=\"grant_tool\"",
            "Edit arguments",
            "for &lt;img",
            "on server finance",
        ] {
            assert!(body.contains(shown), "{shown} missing from {body}");
        }
    }

    #[test]
    fn what_changed_since_the_last_approved_call_is_an_inert_diff() {
        let hostile = "<img src=x onerror=alert(1)>\u{202e}exe";
        let now = serde_json::json!({"path": "/srv/a", "content": hostile});
        let render = |before: serde_json::Value| {
            let item = Item {
                view: held("fs__write_file", "Write?", now.clone(), None),
                owner: None,
                answerable: true,
                voted: false,
                for_someone_away: false,
                suggested_when: None,
                last_approved: Some(("2026-12-05T10:00:00Z".to_owned(), before)),
            };
            let grant_for = vec!["15m".to_owned()];
            let page = page(
                &frame(&grant_for),
                &[item],
                &[],
                &[],
                &Away::NONE,
                None,
                time::OffsetDateTime::now_utc(),
            );
            page[page.find("<body>").unwrap()..].to_owned()
        };
        let body = render(serde_json::json!({"path": "/srv/a", "content": "plain"}));
        for raw in ["<img", "\u{202e}"] {
            assert!(!body.contains(raw), "{raw} in {body}");
        }
        assert!(
            body.contains(
                "Changed since the last call of this tool a person approved (2026-12-05T10:00:00Z)"
            ),
            "{body}"
        );
        assert!(
            body.contains(
                "<span class=\"removed\">-   &quot;content&quot;: &quot;plain&quot;</span>"
            ),
            "{body}"
        );
        assert!(
            body.contains("<span class=\"added\">+   &quot;content&quot;: &quot;&lt;img"),
            "{body}"
        );
        assert!(
            body.contains("<span class=\"kept\">    &quot;path&quot;: &quot;/srv/a&quot;,</span>"),
            "{body}"
        );
        let same = render(now.clone());
        assert!(
            same.contains("The same arguments as the last call of this tool a person approved"),
            "{same}"
        );
        assert!(!same.contains("class=\"diff\""), "{same}");
    }

    #[test]
    fn a_call_another_group_approves_shows_whom_it_waits_for_and_no_answers() {
        let item = Item {
            view: held(
                "fs__write",
                "Write?",
                serde_json::json!({}),
                Some("security"),
            ),
            owner: None,
            answerable: false,
            voted: false,
            for_someone_away: false,
            suggested_when: None,
            last_approved: None,
        };
        let page = page(
            &frame(&[]),
            &[item],
            &[],
            &[],
            &Away::NONE,
            None,
            time::OffsetDateTime::now_utc(),
        );
        assert!(
            page.contains("Waits for a member of <strong>security</strong>"),
            "{page}"
        );
        assert!(!page.contains("value=\"approve\""), "{page}");
    }

    #[test]
    fn history_says_how_each_ended_and_who_answered() {
        let mut approved = held("fs__write", "Write?", serde_json::json!({}), None);
        approved.status = ElicitationStatus::Responded;
        approved.response = Some(serde_json::json!({"confirmed": true}));
        approved.responded_at = Some("2026-12-04T10:01:00Z".into());
        approved.answered_by = Some("alice".into());
        let mut declined = held("fs__wipe", "Wipe?", serde_json::json!({}), None);
        declined.status = ElicitationStatus::Cancelled;
        declined.cancel_reason = Some(CancelReason::Declined);
        declined.cancelled_at = Some("2026-12-04T10:02:00Z".into());
        let approved_row = history_row(&approved);
        assert!(
            approved_row.contains("approved") && approved_row.contains("alice"),
            "{approved_row}"
        );
        assert!(
            approved_row.contains("2026-12-04T10:01:00Z"),
            "{approved_row}"
        );
        let declined_row = history_row(&declined);
        assert!(
            declined_row.contains("declined") && declined_row.contains("a person"),
            "{declined_row}"
        );
    }

    #[test]
    fn every_value_of_an_audit_event_is_inert_text() {
        let hostile = "<img src=x onerror=alert(1)>\u{202e}exe";
        let event = serde_json::json!({
            "id": 7, "at": "2026-12-03T10:00:00Z", "event": "tool_call_rejected",
            "caller": hostile, "tenant": hostile, "elicitation_id": hostile, "tool": hostile,
            "detail": {hostile: hostile, "rule": 2}, "sealed": false
        });
        let filters = vec![("tool".to_owned(), format!("\"><script>{hostile}"))];
        let view = AuditView {
            signed_in_as: Some(hostile),
            csrf: "t",
            filters: &filters,
            events: std::slice::from_ref(&event),
            older: Some("?cursor=7&tool=%22%3E".into()),
            download: "?tool=\"><b>".into(),
            holds: Some(serde_json::json!({"store": "memory", "capacity": 10, "dropped": 3})),
            problem: Some("<b>bad</b>"),
            outcomes: &["rejected", "<i>"],
            download_limit: 5,
        };
        let page = audit_page(&view);
        let body = &page[page.find("<body>").unwrap()..];
        for raw in ["<img", "<script", "<b>", "<i>", "\u{202e}"] {
            assert!(!body.contains(raw), "{raw} in {body}");
        }
        assert!(body.contains("rule: 2"), "{body}");
        assert!(body.contains("3 older ones were dropped"), "{body}");
    }

    #[test]
    fn a_changed_definition_is_shown_as_an_inert_diff_with_its_decisions() {
        let change = serde_json::json!({
            "id": "7d0c3a52-8f1e-4c61-9d2b-4d9a51f0a001",
            "module": "fs",
            "kind": "tool",
            "name": "write_file",
            "status": "pending",
            "reasons": ["description changed", "inputSchema changed"],
            "pinned": {
                "name": "write_file",
                "description": "Writes a file.\nOverwrites it.",
                "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}
            },
            "pinned_digest": "aa",
            "pinned_version": 1,
            "proposed": {
                "name": "write_file",
                "description": "Writes a file.\n<script>alert(1)</script>\u{202e}txt.exe\nOverwrites it.",
                "inputSchema": {"type": "object", "properties": {
                    "path": {"type": "string"},
                    "note\u{200b}": {"type": "string", "description": "</pre><b>x</b>"}
                }}
            },
            "proposed_digest": "bb",
            "seen_at": "2026-12-02T10:00:00Z"
        });
        let mut out = String::new();
        changes_section(&mut out, &[change], "token-1");
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("<b>"), "{out}");
        assert!(
            !out.contains('\u{202e}') && !out.contains('\u{200b}'),
            "{out}"
        );
        assert!(
            out.contains(
                "<span class=\"added\">+ &lt;script&gt;alert(1)&lt;/script&gt;\\u202etxt.exe</span>"
            ),
            "{out}"
        );
        assert!(
            out.contains("<span class=\"kept\">  Writes a file.</span>"),
            "{out}"
        );
        assert!(
            out.contains("\\u200b"),
            "the schema's invisible character shows: {out}"
        );
        assert!(out.contains("Unchanged: name"), "{out}");
        assert!(
            out.contains(
                "action=\"/approvals/catalog/7d0c3a52-8f1e-4c61-9d2b-4d9a51f0a001/approve\""
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "action=\"/approvals/catalog/7d0c3a52-8f1e-4c61-9d2b-4d9a51f0a001/reject\""
            ),
            "{out}"
        );
        assert!(out.contains("value=\"token-1\""), "{out}");
    }
}
