//! Decision insights (`GET /v1/insights`): what people were asked about each tool and caller
//! over a period, read from the audit trail — how many questions, how many approved,
//! declined or left to expire, how long people took to answer, and how many calls were
//! identical to one asked about before (approval fatigue: the same question asked again).
//! Computed from the trail alone: counts, times and digests, never an argument.

use std::collections::{BTreeMap, HashMap, HashSet};

use elicitation_store::{
    AuditEntry, AuditHolds, AuditOrder, AuditQuery, AuditSink, Caller, StoreError,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Most events one reading of the trail goes through (pages of the store's largest); past
/// it the insights say they are partial.
pub const MAX_EVENTS: usize = 50_000;

/// What one tool and caller saw over the period.
#[derive(Debug, Default)]
struct Row {
    /// The questions asked (confirmations held), by id.
    asked: HashSet<String>,
    approved: u64,
    declined: u64,
    expired: u64,
    /// Seconds from each question to its answer.
    answer_seconds: Vec<f64>,
    /// The questions asked per call digest (an identical call asked about again).
    by_digest: HashMap<String, HashSet<String>>,
}

/// The trail's events of `reader`'s tenant from `since` to `until`, oldest first (at most
/// [`MAX_EVENTS`]: `false` when there were more), and what the trail holds.
pub async fn read(
    trail: &dyn AuditSink,
    reader: &Caller,
    since: OffsetDateTime,
    until: OffsetDateTime,
) -> Result<(Vec<AuditEntry>, bool, AuditHolds), StoreError> {
    let mut entries = Vec::new();
    let mut cursor = None;
    loop {
        let query = AuditQuery {
            since: Some(since),
            until: Some(until),
            order: AuditOrder::Oldest,
            cursor,
            limit: elicitation_store::MAX_LIST_LIMIT,
            ..AuditQuery::default()
        };
        let page = trail.audit_events(reader, &query).await?;
        entries.extend(page.entries);
        match page.next {
            Some(next) if entries.len() < MAX_EVENTS => cursor = Some(next),
            Some(_) => return Ok((entries, false, page.holds)),
            None => return Ok((entries, true, page.holds)),
        }
    }
}

/// The days `GET /v1/insights?days=N` looks back (1 to 90; 7 when not given).
pub fn parse_days(query: Option<&str>) -> Result<i64, crate::error::McpError> {
    let bad = |why: String| crate::error::McpError::BadBody(why);
    let mut days = None;
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*key {
            "days" if days.is_none() => {
                days = Some(
                    value
                        .parse::<i64>()
                        .ok()
                        .filter(|d| (1..=90).contains(d))
                        .ok_or_else(|| bad("days must be a whole number from 1 to 90".into()))?,
                );
            }
            "days" => return Err(bad("days is given twice".into())),
            other => {
                return Err(bad(format!(
                    "unknown query parameter {other:?} (only days)"
                )));
            }
        }
    }
    Ok(days.unwrap_or(7))
}

/// The value at `q` (0 to 1) of `sorted`, by nearest rank.
fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    // The rank is at most the length: a count of events, far below f64's exact integers.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// The insights of `entries` (one tenant's trail, oldest first): per tool and caller, most
/// asked first.
pub fn of(entries: &[AuditEntry]) -> Vec<Value> {
    let mut rows: BTreeMap<(String, String), Row> = BTreeMap::new();
    // When each question was asked, and whose it is.
    let mut asked_at: HashMap<String, (OffsetDateTime, (String, String))> = HashMap::new();
    for entry in entries {
        let Some(id) = entry.elicitation_id.clone() else {
            continue;
        };
        match entry.event.as_str() {
            "tool_call_held" => {
                let Some(tool) = entry.tool.clone() else {
                    continue;
                };
                let key = (tool, entry.caller.clone());
                asked_at
                    .entry(id.clone())
                    .or_insert((entry.at, key.clone()));
                let row = rows.entry(key).or_default();
                row.asked.insert(id.clone());
                if let Some(digest) = entry.detail.get("call_digest").and_then(Value::as_str) {
                    row.by_digest
                        .entry(digest.to_owned())
                        .or_default()
                        .insert(id);
                }
            }
            "elicitation_responded" => {
                // Only a held call's question counts (a module's question or a service's is
                // not a decision about a call).
                let Some((at, key)) = asked_at.get(&id) else {
                    continue;
                };
                let Some(row) = rows.get_mut(key) else {
                    continue;
                };
                match entry.detail.get("confirmed").and_then(Value::as_bool) {
                    Some(true) => row.approved += 1,
                    Some(false) => row.declined += 1,
                    None => continue,
                }
                row.answer_seconds
                    .push((entry.at - *at).as_seconds_f64().max(0.0));
            }
            "elicitation_timeout" => {
                if let Some(row) = asked_at.get(&id).and_then(|(_, key)| rows.get_mut(key)) {
                    row.expired += 1;
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<(usize, Value)> = rows
        .into_iter()
        .map(|((tool, caller), mut row)| {
            let asked = row.asked.len();
            let answered = row.approved + row.declined;
            row.answer_seconds.sort_by(f64::total_cmp);
            let repeats: usize = row
                .by_digest
                .values()
                .map(|ids| ids.len().saturating_sub(1))
                .sum();
            // Counts of events: far below f64's exact integers.
            #[allow(clippy::cast_precision_loss)]
            let rate = (answered > 0).then(|| row.approved as f64 / answered as f64);
            let value = json!({
                "tool": tool,
                "caller": caller,
                "asked": asked,
                "approved": row.approved,
                "declined": row.declined,
                "expired": row.expired,
                "approval_rate": rate,
                "answer_seconds": {
                    "p50": percentile(&row.answer_seconds, 0.5),
                    "p90": percentile(&row.answer_seconds, 0.9),
                },
                "identical_repeats": repeats,
            });
            (asked, value)
        })
        .collect();
    out.sort_by_key(|(asked, _)| std::cmp::Reverse(*asked));
    out.into_iter().map(|(_, v)| v).collect()
}

/// Most callers whose answered calls one reading looks through for suggestions.
const MAX_CALLERS_SUGGESTED: usize = 16;

/// The rules that would have let the approved calls of the period run
/// ([`crate::suggest`]): from the answered confirmations (at most the latest 500 each) of
/// the callers of `rows` (insights of the tenant `tenant`) who had at least
/// [`crate::suggest::MIN_APPROVED`] calls of a tool approved since `since`. A caller whose
/// calls cannot be read is left out.
pub async fn suggestions(
    store: &dyn elicitation_store::ElicitationStore,
    tenant: Option<&str>,
    rows: &[Value],
    since: OffsetDateTime,
) -> Vec<Value> {
    // The callers with the most approvals first.
    let mut by_approvals: Vec<(u64, &str)> = rows
        .iter()
        .filter_map(|r| Some((r["approved"].as_u64()?, r["caller"].as_str()?)))
        .filter(|(n, _)| usize::try_from(*n).is_ok_and(|n| n >= crate::suggest::MIN_APPROVED))
        .collect();
    by_approvals.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let mut callers: Vec<&str> = Vec::new();
    for (_, subject) in by_approvals {
        if !callers.contains(&subject) {
            callers.push(subject);
        }
    }
    let mut answered = Vec::new();
    for subject in callers.into_iter().take(MAX_CALLERS_SUGGESTED) {
        let Ok(caller) = Caller::new(subject, tenant.map(str::to_owned)) else {
            continue;
        };
        let query = elicitation_store::ListQuery {
            status: None,
            limit: elicitation_store::MAX_LIST_LIMIT,
        };
        let listed = match store.list(&caller, query).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(error = %e, "a caller's answered calls could not be read for suggestions");
                continue;
            }
        };
        for stored in listed.into_iter().filter_map(Result::ok) {
            let e = &stored.elicitation;
            let Some(call) = stored.call else { continue };
            if e.created_at < since {
                continue;
            }
            let approved = match e.status {
                elicitation_core::ElicitationStatus::Responded => {
                    e.confirmation_state() == Some(true)
                }
                elicitation_core::ElicitationStatus::Expired
                | elicitation_core::ElicitationStatus::Cancelled => false,
                _ => continue,
            };
            answered.push(crate::suggest::Answered {
                tool: call.tool,
                arguments: call.arguments,
                approved,
            });
        }
    }
    crate::suggest::suggestions(&answered)
}

/// The insights of `reader`'s tenant over the last `days`: the body of `GET /v1/insights`
/// (and what the page's Insights view shows). With `suggest` (the reader also holds
/// `catalog:approve`, the scope of who decides what runs), the suggested rules too: they
/// carry what approved arguments share (a folder, a few values), which `audit:read` alone
/// never sees; without, `"suggestions": null`.
pub async fn gather(
    trail: &dyn AuditSink,
    store: &dyn elicitation_store::ElicitationStore,
    reader: &Caller,
    days: i64,
    suggest: bool,
) -> Result<Value, StoreError> {
    let until = OffsetDateTime::now_utc();
    let since = until - time::Duration::days(days);
    let (entries, complete, holds) = read(trail, reader, since, until).await?;
    let mut insights = body(since, until, &entries, complete, holds);
    if suggest {
        let rows = insights["tools"].as_array().cloned().unwrap_or_default();
        insights["suggestions"] =
            Value::from(suggestions(store, reader.tenant_id(), &rows, since).await);
    } else {
        insights["suggestions"] = Value::Null;
    }
    Ok(insights)
}

/// The body of `GET /v1/insights`, without suggestions.
pub fn body(
    since: OffsetDateTime,
    until: OffsetDateTime,
    entries: &[AuditEntry],
    complete: bool,
    holds: AuditHolds,
) -> Value {
    json!({
        "since": since.format(&Rfc3339).unwrap_or_default(),
        "until": until.format(&Rfc3339).unwrap_or_default(),
        "events_read": entries.len(),
        "complete": complete,
        "holds": holds.to_json(),
        "tools": of(entries),
        "suggestions": [],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: i64, at: i64, event: &str, id: &str, detail: Value) -> AuditEntry {
        AuditEntry {
            id: n,
            at: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(at),
            event: event.to_owned(),
            caller: "alice".to_owned(),
            tenant: None,
            elicitation_id: Some(id.to_owned()),
            tool: Some("fs__write_file".to_owned()),
            detail,
            sealed: false,
        }
    }

    #[test]
    fn questions_answers_times_and_repeats_per_tool_and_caller() {
        let held = |digest: &str| json!({"call_digest": digest});
        let entries = vec![
            entry(1, 0, "tool_call_held", "a", held("d1")),
            entry(
                2,
                10,
                "elicitation_responded",
                "a",
                json!({"confirmed": true}),
            ),
            // The same call asked about again, held twice while it waited (one question).
            entry(3, 20, "tool_call_held", "b", held("d1")),
            entry(4, 25, "tool_call_held", "b", held("d1")),
            entry(
                5,
                80,
                "elicitation_responded",
                "b",
                json!({"confirmed": true}),
            ),
            entry(6, 100, "tool_call_held", "c", held("d2")),
            entry(
                7,
                130,
                "elicitation_responded",
                "c",
                json!({"confirmed": false}),
            ),
            entry(8, 200, "tool_call_held", "d", held("d3")),
            entry(9, 800, "elicitation_timeout", "d", json!({})),
            // A question that holds no call is not counted.
            entry(10, 900, "elicitation_responded", "q", json!({})),
        ];
        let rows = of(&entries);
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!(row["asked"], 4, "{row}");
        assert_eq!(row["approved"], 2, "{row}");
        assert_eq!(row["declined"], 1, "{row}");
        assert_eq!(row["expired"], 1, "{row}");
        assert_eq!(row["identical_repeats"], 1, "{row}");
        let rate = row["approval_rate"].as_f64().unwrap();
        assert!((rate - 2.0 / 3.0).abs() < 1e-9, "{row}");
        // Answered after 10, 60 and 30 seconds.
        assert_eq!(row["answer_seconds"]["p50"], 30.0, "{row}");
        assert_eq!(row["answer_seconds"]["p90"], 60.0, "{row}");
    }

    #[test]
    fn the_period_is_checked() {
        assert_eq!(parse_days(None).unwrap(), 7);
        assert_eq!(parse_days(Some("days=30")).unwrap(), 30);
        for bad in [
            "days=0",
            "days=91",
            "days=x",
            "days=1&days=2",
            "since=2026-01-01",
        ] {
            assert!(parse_days(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn nothing_asked_is_nothing_to_say() {
        assert!(of(&[]).is_empty());
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[4.0], 0.9), Some(4.0));
    }
}
