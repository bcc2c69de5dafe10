//! What a held call changed since the last call of its tool by its caller that a person
//! approved, as an event tells it (`since_last_approved`) and as a person reads it.

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Most changed arguments an event names.
const MAX_NAMES: usize = 10;
/// Most characters of a name (or an earlier value) shown.
const MAX_SHOWN: usize = 64;

/// `text` made visible (`gating_core::visible`) and cut to `max` characters.
pub(crate) fn short(text: &str, max: usize) -> String {
    let text = gating_core::visible(text);
    if text.chars().count() <= max {
        return text;
    }
    text.chars().take(max).collect::<String>() + "…"
}

/// Adds to an event what changed since the last approved call of its tool (answered at
/// `at`, with `before`): `"since_last_approved": {"approved_at", "changed_count"}`. The
/// names of the arguments added, removed or changed are the agent's own keys, so only a
/// sink that gets the arguments (`include_arguments`) gets them too — `"changed"` (made
/// visible, at most 10, each cut to 64 characters) and `"before"`, their earlier values.
pub fn with_since(
    body: &mut Value,
    at: OffsetDateTime,
    before: &Value,
    now: &Value,
    include_arguments: bool,
) {
    let empty = serde_json::Map::new();
    let old = before.as_object().unwrap_or(&empty);
    let new = now.as_object().unwrap_or(&empty);
    let mut changed: Vec<&String> = old
        .keys()
        .chain(new.keys())
        .filter(|k| old.get(*k) != new.get(*k))
        .collect();
    changed.sort();
    changed.dedup();
    let mut since = json!({
        "approved_at": at.format(&Rfc3339).unwrap_or_default(),
        "changed_count": changed.len(),
    });
    if include_arguments {
        let named = changed.iter().take(MAX_NAMES);
        since["changed"] = Value::from(
            named
                .clone()
                .map(|k| short(k, MAX_SHOWN))
                .collect::<Vec<String>>(),
        );
        let earlier: serde_json::Map<String, Value> = named
            .map(|k| ((*k).clone(), old.get(*k).cloned().unwrap_or(Value::Null)))
            .collect();
        since["before"] = Value::Object(earlier);
    }
    body["since_last_approved"] = since;
}

/// What changed since the last approved call, as a line for a person (`None`: the event
/// says nothing of it): the names where the event has them, else how many.
pub(crate) fn since_line(event: &Value) -> Option<String> {
    let since = event.get("since_last_approved")?;
    let at = since.get("approved_at").and_then(Value::as_str)?;
    let count = since.get("changed_count").and_then(Value::as_u64)?;
    let names: Option<Vec<&str>> = since
        .get("changed")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect());
    Some(match (count, names) {
        (0, _) => {
            format!("The same arguments as the last call of this tool a person approved ({at}).")
        }
        (_, Some(names)) if !names.is_empty() => format!(
            "Changed since the last call of this tool a person approved ({at}): {}.",
            names.join(", ")
        ),
        (1, _) => format!(
            "One argument changed since the last call of this tool a person approved ({at})."
        ),
        (n, _) => format!(
            "{n} arguments changed since the last call of this tool a person approved ({at})."
        ),
    })
}
