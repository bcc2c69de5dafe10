//! The Audit view, `/approvals/audit`: the filters, a page of events, the way on.

use serde_json::Value;
use std::fmt::Write as _;

use super::*;

/// What the Audit view shows: the filters as given, a page of events (newest first), the
/// cursor of the older ones, what the trail holds, and a problem with the filters.
pub(crate) struct AuditView<'a> {
    pub(crate) signed_in_as: Option<&'a str>,
    pub(crate) csrf: &'a str,
    /// The filters, as typed (`since`, `until`, `tool`, `caller`, `outcome`).
    pub(crate) filters: &'a [(String, String)],
    /// `AuditEntry::to_json` of each event shown.
    pub(crate) events: &'a [Value],
    /// The query string of the next (older) page, if there is one.
    pub(crate) older: Option<String>,
    /// The query string of the download (the same filters).
    pub(crate) download: String,
    /// `AuditHolds::to_json`.
    pub(crate) holds: Option<Value>,
    /// Why the filters were refused.
    pub(crate) problem: Option<&'a str>,
    /// The outcomes the filter offers.
    pub(crate) outcomes: &'a [&'a str],
    /// Most events a download holds.
    pub(crate) download_limit: usize,
}

/// The Audit view (`GET /approvals/audit`, scope `audit:read`): every value is text.
pub(crate) fn audit_page(view: &AuditView<'_>) -> String {
    let mut body = String::from("<header><h1>Audit</h1>");
    if let Some(who) = view.signed_in_as {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"/approvals/sign-out\" class=\"who\">Signed in as <strong>{}</strong> <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form>",
            shown(who),
            escape(view.csrf)
        );
    }
    body.push_str("</header><main><p><a href=\"/approvals\">Back to approvals</a> · <a href=\"/approvals/insights\">Insights</a></p>");
    let given = |name: &str| {
        view.filters
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    };
    body.push_str("<form method=\"get\" action=\"/approvals/audit\" class=\"filters\" aria-label=\"Filter the audit trail\">");
    for (name, label, hint) in [
        ("since", "Since", "2026-12-01T00:00:00Z"),
        ("until", "Until", "2026-12-02T00:00:00Z"),
        ("tool", "Tool", "fs__* or fs__delete"),
        ("caller", "Caller", "alice"),
    ] {
        let _ = write!(
            body,
            "<label>{label} <input name=\"{name}\" value=\"{}\" placeholder=\"{}\"></label> ",
            // A link may carry any filter: shown like everything else that came from outside.
            shown(given(name)),
            escape(hint)
        );
    }
    body.push_str("<label>Outcome <select name=\"outcome\"><option value=\"\">any</option>");
    for outcome in view.outcomes {
        let selected = if given("outcome") == *outcome {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            body,
            "<option value=\"{0}\"{selected}>{0}</option>",
            escape(outcome)
        );
    }
    body.push_str("</select></label> <button type=\"submit\">Filter</button></form>");
    if let Some(problem) = view.problem {
        let _ = write!(
            body,
            "<p class=\"error\" role=\"alert\">{}</p>",
            escape(problem)
        );
    }
    match view.holds.as_ref().and_then(|h| h.get("store")).and_then(Value::as_str) {
        Some("memory") => {
            let holds = view.holds.as_ref().unwrap_or(&Value::Null);
            let _ = write!(
                body,
                "<p class=\"holds\">The gateway keeps its audit trail in memory: these are the most recent {} events at most ({} older ones were dropped); the log (target <code>audit</code>) has every one.</p>",
                holds.get("capacity").and_then(Value::as_u64).unwrap_or(0),
                holds.get("dropped").and_then(Value::as_u64).unwrap_or(0),
            );
        }
        Some(_) => body.push_str("<p class=\"holds\">The whole trail, from PostgreSQL; <code>mcp-gateway audit verify</code> checks its chain.</p>"),
        None => {}
    }
    let _ = write!(
        body,
        "<p><a class=\"download\" href=\"/approvals/audit/download{}\" download>Download these events as JSON lines</a> <span class=\"when\">(oldest first, at most {})</span></p>",
        escape(&view.download),
        view.download_limit
    );
    if view.events.is_empty() {
        body.push_str("<p class=\"empty\">No event matches.</p>");
    } else {
        body.push_str("<table class=\"audit\"><thead><tr><th>When</th><th>Event</th><th>Caller</th><th>Tool</th><th>Detail</th></tr></thead><tbody>");
        for event in view.events {
            body.push_str(&audit_row(event));
        }
        body.push_str("</tbody></table>");
    }
    if let Some(older) = &view.older {
        let _ = write!(
            body,
            "<p><a class=\"older\" href=\"/approvals/audit{}\">Older events</a></p>",
            escape(older)
        );
    }
    body.push_str("</main>");
    document("Audit — mcp-gateway", &body)
}

fn audit_row(event: &Value) -> String {
    let caller = match event.get("tenant").and_then(Value::as_str) {
        Some(tenant) => format!("{} ({tenant})", text(event, "caller")),
        None => text(event, "caller").to_owned(),
    };
    let tool = match event.get("tool").and_then(Value::as_str) {
        Some(tool) => format!("<code>{}</code>", shown(tool)),
        None => "—".to_owned(),
    };
    let mut detail = String::new();
    if let Some(id) = event.get("elicitation_id").and_then(Value::as_str) {
        let _ = write!(detail, "elicitation {}", shown(id));
    }
    if let Some(fields) = event.get("detail").and_then(Value::as_object) {
        for (key, value) in fields {
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if !detail.is_empty() {
                detail.push_str("; ");
            }
            let _ = write!(detail, "{}: {}", shown(key), shown(&value));
        }
    }
    format!(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{tool}</td><td>{detail}</td></tr>",
        escape(text(event, "at")),
        shown(text(event, "event")),
        shown(&caller),
    )
}
