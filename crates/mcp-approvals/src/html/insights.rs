//! The Insights view, `/approvals/insights`: what people were asked per tool and caller,
//! and the rules that would have asked them less (`mcp_http_kit::insights`).

use serde_json::Value;
use std::fmt::Write as _;

use super::*;

/// The periods the view offers, in days.
const PERIODS: [i64; 4] = [1, 7, 30, 90];

/// The Insights view (`GET /approvals/insights`, scope `audit:read`): `insights` is the
/// body `GET /v1/insights` answers with (`None` with `problem`: it could not be read).
/// Every value is text.
pub(crate) fn insights_page(
    signed_in_as: Option<&str>,
    csrf: &str,
    days: i64,
    insights: Option<&Value>,
    problem: Option<&str>,
) -> String {
    let mut body = String::from("<header><h1>Insights</h1>");
    if let Some(who) = signed_in_as {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"/approvals/sign-out\" class=\"who\">Signed in as <strong>{}</strong> <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form>",
            shown(who),
            escape(csrf)
        );
    }
    body.push_str("</header><main><p><a href=\"/approvals\">Back to approvals</a> · <a href=\"/approvals/audit\">Audit</a></p>");
    body.push_str("<form method=\"get\" action=\"/approvals/insights\" class=\"filters\"><label>Over the last <select name=\"days\">");
    for period in PERIODS {
        let selected = if period == days { " selected" } else { "" };
        let _ = write!(
            body,
            "<option value=\"{period}\"{selected}>{period} day{}</option>",
            if period == 1 { "" } else { "s" }
        );
    }
    body.push_str("</select></label> <button type=\"submit\">Show</button></form>");
    if let Some(problem) = problem {
        let _ = write!(
            body,
            "<p class=\"error\" role=\"alert\">{}</p>",
            escape(problem)
        );
    }
    let Some(insights) = insights else {
        body.push_str("</main>");
        return document("Insights", &body);
    };
    if insights["complete"] == false {
        body.push_str("<p class=\"holds\">More events than one reading goes through: these count the oldest 50,000.</p>");
    }
    let rows = insights["tools"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    asked_section(&mut body, rows);
    match insights["suggestions"].as_array() {
        Some(suggestions) => suggestions_section(&mut body, suggestions),
        None => body.push_str("<section aria-labelledby=\"suggested\"><h2 id=\"suggested\">Rules that would have asked less</h2><p class=\"empty\">Suggested rules carry what approved calls' arguments share (a folder, a few values): they are shown to a person who also holds the scope catalog:approve.</p></section>"),
    }
    body.push_str("</main>");
    document("Insights", &body)
}

/// The table of what people were asked, per tool and caller.
fn asked_section(body: &mut String, rows: &[Value]) {
    body.push_str(
        "<section aria-labelledby=\"asked\"><h2 id=\"asked\">What people were asked</h2>",
    );
    if rows.is_empty() {
        body.push_str("<p class=\"empty\">No call was held in this period.</p>");
    } else {
        body.push_str("<table class=\"insights\"><thead><tr><th>Tool</th><th>Caller</th><th>Asked</th><th>Approved</th><th>Declined</th><th>Expired</th><th>Approval rate</th><th>Time to answer (p50 / p90)</th><th>Identical repeats</th></tr></thead><tbody>");
        for row in rows {
            let number = |key: &str| row[key].as_u64().unwrap_or(0);
            let rate = row["approval_rate"]
                .as_f64()
                .map_or_else(|| "–".to_owned(), |r| format!("{:.0}%", r * 100.0));
            let seconds = |q: &str| {
                row["answer_seconds"][q]
                    .as_f64()
                    .map_or_else(|| "–".to_owned(), |s| format!("{s:.0} s"))
            };
            let _ = write!(
                *body,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{rate}</td><td>{} / {}</td><td>{}</td></tr>",
                shown(row["tool"].as_str().unwrap_or_default()),
                shown(row["caller"].as_str().unwrap_or_default()),
                number("asked"),
                number("approved"),
                number("declined"),
                number("expired"),
                seconds("p50"),
                seconds("p90"),
                number("identical_repeats"),
            );
        }
        body.push_str("</tbody></table>");
    }
    body.push_str("</section>");
}

/// Each suggested rule, as text to copy.
fn suggestions_section(body: &mut String, suggestions: &[Value]) {
    body.push_str("<section aria-labelledby=\"suggested\"><h2 id=\"suggested\">Rules that would have asked less</h2>");
    if suggestions.is_empty() {
        body.push_str("<p class=\"empty\">None: no tool had many approved calls of one shape.</p>");
    }
    for suggestion in suggestions {
        let refused = suggestion["also_allows_refused"].as_u64().unwrap_or(0);
        let _ = write!(
            *body,
            "<article class=\"item suggestion\"><h3><code>{}</code>: covers {} of {} approved calls</h3>",
            shown(suggestion["tool"].as_str().unwrap_or_default()),
            suggestion["covers_approved"].as_u64().unwrap_or(0),
            suggestion["approved"].as_u64().unwrap_or(0),
        );
        let open: Vec<String> = suggestion["unconstrained"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .map(|name| format!("<code>{}</code>", shown(name)))
            .collect();
        if !open.is_empty() {
            let _ = write!(
                *body,
                "<p class=\"stale\">It allows any value of {}: the rule does not narrow {}.</p>",
                open.join(", "),
                if open.len() == 1 { "it" } else { "them" }
            );
        }
        if refused > 0 {
            let _ = write!(
                *body,
                "<p class=\"error\">It would also have let {refused} call{} through that a person declined or left unanswered.</p>",
                if refused == 1 { "" } else { "s" }
            );
        }
        let lines: Vec<String> = suggestion["policy"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .map(shown)
            .collect();
        let _ = write!(
            *body,
            "<pre>{}</pre><p class=\"when\">Copy it into the configuration to use it (<code>mcp-gateway policy explain</code> tries it first); nothing here applies it.</p></article>",
            lines.join("\n")
        );
    }
    body.push_str("</section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn insights_and_suggestions_are_inert_text() {
        let hostile = "<img src=x onerror=alert(1)>\u{202e}";
        let insights = json!({
            "complete": true,
            "tools": [{"tool": hostile, "caller": hostile, "asked": 41, "approved": 40,
                       "declined": 1, "expired": 0, "approval_rate": 0.975,
                       "answer_seconds": {"p50": 12.4, "p90": null}, "identical_repeats": 3}],
            "suggestions": [{"tool": "fs__write_file", "approved": 40, "covers_approved": 40,
                             "also_allows_refused": 2, "unconstrained": ["content"],
                             "policy": format!("[[policy]]\ntool = \"fs__write_file\"\nwhen = \"args.path.startsWith('{hostile}')\"\ngate = \"allow\"\n")}],
        });
        let page = insights_page(Some("sam"), "t", 7, Some(&insights), None);
        let body = &page[page.find("<body>").unwrap()..];
        for raw in ["<img", "\u{202e}"] {
            assert!(!body.contains(raw), "{raw} in {body}");
        }
        for shown in [
            "<td>41</td><td>40</td><td>1</td><td>0</td><td>98%</td><td>12 s / –</td><td>3</td>",
            "<option value=\"7\" selected>7 days</option>",
            "would also have let 2 calls through",
            "covers 40 of 40 approved calls",
            "It allows any value of <code>content</code>",
            "[[policy]]\ntool = &quot;fs__write_file&quot;",
            "nothing here applies it",
        ] {
            assert!(body.contains(shown), "{shown:?} in {body}");
        }
        let empty = insights_page(
            None,
            "t",
            1,
            Some(&json!({"tools": [], "suggestions": []})),
            None,
        );
        assert!(empty.contains("No call was held in this period."));
    }
}
