//! The audit trail as HTTP reads it (`GET /v1/audit`, the approvals page's Audit view): the
//! query, checked, and the page's JSON body.

use serde_json::{Value, json};

use crate::error::McpError;

/// Default page of the trail.
pub const DEFAULT_LIMIT: usize = 100;

/// How `GET /v1/audit` writes its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditFormat {
    /// `{"events": [...], "next": cursor|null, "holds": {...}}`.
    Json,
    /// One event per line, as `mcp-gateway audit export` writes them; the next page's
    /// cursor in the `Mcp-Audit-Next` header.
    JsonLines,
}

/// A page as `GET /v1/audit`'s JSON body.
pub fn body(page: &elicitation_store::AuditPage) -> Value {
    json!({
        "events": page.entries.iter().map(elicitation_store::AuditEntry::to_json).collect::<Vec<_>>(),
        "next": page.next.map(|n| n.to_string()),
        "holds": page.holds.to_json(),
    })
}

/// `GET /v1/audit`'s query: every parameter percent-decoded, checked, and at most once.
pub fn parse_query(
    query: Option<&str>,
) -> Result<(elicitation_store::AuditQuery, AuditFormat), McpError> {
    use elicitation_store::{AuditOrder, AuditQuery};
    let bad = |why: String| McpError::BadBody(why);
    let time = |key: &str, value: &str| {
        time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc3339).map_err(
            |_| {
                bad(format!(
                    "{key} must be an RFC 3339 time, as 2026-12-01T00:00:00Z"
                ))
            },
        )
    };
    let mut audit = AuditQuery {
        limit: DEFAULT_LIMIT,
        ..AuditQuery::default()
    };
    let mut format = AuditFormat::Json;
    let mut seen = std::collections::BTreeSet::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if !seen.insert(key.to_string()) {
            return Err(bad(format!("{key} is given twice")));
        }
        let text = || -> Result<String, McpError> {
            if value.is_empty() || value.len() > 512 || value.chars().any(char::is_control) {
                return Err(bad(format!("{key} must be 1 to 512 printable characters")));
            }
            Ok(value.to_string())
        };
        match &*key {
            "since" => audit.since = Some(time("since", &value)?),
            "until" => audit.until = Some(time("until", &value)?),
            "tool" => audit.tool = Some(text()?),
            "caller" => audit.caller = Some(text()?),
            "outcome" => {
                let known: Vec<&str> = elicitation_store::audit_outcomes().collect();
                if !known.contains(&&*value) {
                    return Err(bad(format!(
                        "outcome must be one of {}, not {value:?}",
                        known.join(", ")
                    )));
                }
                audit.outcome = Some(value.to_string());
            }
            "order" => {
                audit.order = match &*value {
                    "oldest" => AuditOrder::Oldest,
                    "newest" => AuditOrder::Newest,
                    other => {
                        return Err(bad(format!(
                            "order must be oldest or newest, not {other:?}"
                        )));
                    }
                }
            }
            "cursor" => {
                audit.cursor = Some(
                    value
                        .parse::<i64>()
                        .ok()
                        .filter(|c| *c >= 0)
                        .ok_or_else(|| bad("cursor must be a page's next".into()))?,
                );
            }
            "limit" => {
                audit.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=elicitation_store::MAX_LIST_LIMIT).contains(n))
                    .ok_or_else(|| {
                        bad(format!(
                            "limit must be 1 to {}",
                            elicitation_store::MAX_LIST_LIMIT
                        ))
                    })?;
            }
            "format" => {
                format = match &*value {
                    "json" => AuditFormat::Json,
                    "jsonl" => AuditFormat::JsonLines,
                    other => {
                        return Err(bad(format!("format must be json or jsonl, not {other:?}")));
                    }
                }
            }
            other => return Err(bad(format!("unknown query parameter {other:?}"))),
        }
    }
    if let (Some(since), Some(until)) = (audit.since, audit.until)
        && until <= since
    {
        return Err(bad("until must be after since".into()));
    }
    Ok((audit, format))
}

/// Entries as JSON lines (`application/jsonl`), with what the trail holds in the
/// `Mcp-Audit-Holds` header and, when there is more, the next page's cursor in
/// `Mcp-Audit-Next`.
pub fn lines(
    entries: &[elicitation_store::AuditEntry],
    next: Option<i64>,
    holds: elicitation_store::AuditHolds,
) -> http::Response<crate::body::Body> {
    let lines: Vec<Value> = entries.iter().map(|e| e.to_json()).collect();
    let mut reply = crate::response::json_lines(&lines);
    let headers = reply.headers_mut();
    if let Ok(value) = http::HeaderValue::from_str(&holds.to_json().to_string()) {
        headers.insert("mcp-audit-holds", value);
    }
    if let Some(next) = next {
        headers.insert("mcp-audit-next", http::HeaderValue::from(next));
    }
    reply
}
