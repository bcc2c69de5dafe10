//! The Away section of the page: the delegations the person gave or received, each with
//! End, and — for someone in approver groups — a form to hand their approvals to another.

use std::fmt::Write as _;

use super::*;

/// How long a delegation made on the page lasts (the REST API takes any window up to 30
/// days).
const SPANS: [(&str, &str); 6] = [
    ("1d", "1 day"),
    ("2d", "2 days"),
    ("3d", "3 days"),
    ("7d", "a week"),
    ("14d", "two weeks"),
    ("30d", "30 days"),
];

/// The person's delegations (views from `delegation_view`, not ended) and, when `may_give`
/// (they are in approver groups), the form to give one.
pub(crate) fn delegations_section(
    out: &mut String,
    delegations: &[Value],
    signed_in: &str,
    may_give: bool,
    csrf: &str,
) {
    if delegations.is_empty() && !may_give {
        return;
    }
    out.push_str("<section aria-labelledby=\"away\"><h2 id=\"away\">Away</h2>");
    if !delegations.is_empty() {
        out.push_str("<ul class=\"delegations\">");
        for d in delegations {
            let id = escape(text(d, "id"));
            let from = d["from"]["subject"].as_str().unwrap_or_default();
            let to = d["to"]["subject"].as_str().unwrap_or_default();
            let who = if from == signed_in {
                format!("<strong>{}</strong> answers for you", shown(to))
            } else {
                format!("You answer for <strong>{}</strong>", shown(from))
            };
            let groups: Vec<String> = d["groups"]
                .as_array()
                .map(|g| g.iter().filter_map(Value::as_str).map(shown).collect())
                .unwrap_or_default();
            let _ = write!(
                out,
                "<li id=\"delegation-{id}\">{who} ({}), from <time>{}</time> until <time>{}</time>{} <form method=\"post\" action=\"/approvals/delegations/{id}/revoke\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\" class=\"revoke\">End</button></form></li>",
                groups.join(", "),
                escape(text(d, "starts_at")),
                escape(text(d, "ends_at")),
                if text(d, "status") == "scheduled" {
                    " (not yet)"
                } else {
                    ""
                },
                escape(csrf)
            );
        }
        out.push_str("</ul>");
    }
    if may_give {
        let options: String = SPANS
            .iter()
            .map(|(value, label)| format!("<option value=\"{value}\">{label}</option>"))
            .collect();
        let _ = write!(
            out,
            "<form method=\"post\" action=\"/approvals/delegations\" class=\"delegate\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><label for=\"delegate-to\">Away? Someone answers for you</label> <input id=\"delegate-to\" name=\"to\" required maxlength=\"512\" autocomplete=\"off\" placeholder=\"their name as they sign in\"> <label for=\"delegate-for\">for</label> <select id=\"delegate-for\" name=\"for\">{options}</select> <button type=\"submit\">Hand over</button></form>",
            escape(csrf)
        );
    }
    out.push_str("</section>");
}
