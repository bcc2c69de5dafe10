//! What a held call changed since the last call of its tool by its caller that a person
//! approved, as an event tells it (`since_last_approved`) and as a person reads it.

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Adds to an event what changed since the last approved call of its tool (answered at
/// `at`, with `before`): `"since_last_approved": {"approved_at", "changed"}`, the names of
/// the arguments added, removed or changed (names only: an argument's value leaves only
/// for a sink that asks for arguments, which also gets `"before"`, their earlier values).
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
    let mut since =
        json!({"approved_at": at.format(&Rfc3339).unwrap_or_default(), "changed": changed});
    if include_arguments {
        let earlier: serde_json::Map<String, Value> = changed
            .iter()
            .map(|k| ((*k).clone(), old.get(*k).cloned().unwrap_or(Value::Null)))
            .collect();
        since["before"] = Value::Object(earlier);
    }
    body["since_last_approved"] = since;
}

/// What changed since the last approved call, as a line for a person (`None`: the event
/// says nothing of it).
pub(crate) fn since_line(event: &Value) -> Option<String> {
    let since = event.get("since_last_approved")?;
    let at = since.get("approved_at").and_then(Value::as_str)?;
    let changed: Vec<&str> = since
        .get("changed")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    Some(if changed.is_empty() {
        format!("The same arguments as the last call of this tool a person approved ({at}).")
    } else {
        format!(
            "Changed since the last call of this tool a person approved ({at}): {}.",
            changed.join(", ")
        )
    })
}
