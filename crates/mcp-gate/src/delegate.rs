//! Handing one's approvals to someone else for a while, as the page and the REST API ask
//! for it: the terms read from JSON, the person's own approver groups handed over.

use elicitation_store::{Caller, DelegationRequest, Until};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Reads a delegation's terms: `{"to": "carol", "until": "2026-12-08T09:00:00Z"}` or
/// `{"to": "carol", "for": "3d"}`, optionally `"from"` (RFC 3339; default now). The delegate
/// is of the delegator's own tenant; "now" is the store's.
pub fn delegation_terms(terms: &Value, from: &Caller) -> Result<DelegationRequest, String> {
    let Some(terms) = terms.as_object() else {
        return Err("the body must be a JSON object: {\"to\": \"carol\", \"until\": \"…\"} or {\"to\": \"carol\", \"for\": \"3d\"}".into());
    };
    if let Some(key) = terms
        .keys()
        .find(|k| !["to", "until", "for", "from"].contains(&k.as_str()))
    {
        return Err(format!(
            "unknown key {key:?}: a delegation takes to, until or for, and from"
        ));
    }
    let to = terms
        .get("to")
        .and_then(Value::as_str)
        .map(str::trim)
        .ok_or("to must name the person who answers for you (their subject)")?;
    let to = Caller::new(to, from.tenant_id().map(str::to_owned))
        .map_err(|_| "to must be 1 to 512 characters without control characters".to_owned())?;
    let time = |key: &str| -> Result<Option<OffsetDateTime>, String> {
        terms
            .get(key)
            .map(|v| {
                v.as_str()
                    .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
                    .ok_or_else(|| format!("{key} must be an RFC 3339 time"))
            })
            .transpose()
    };
    let until = match (time("until")?, terms.get("for")) {
        (Some(until), None) => Until::At(until),
        (None, Some(span)) => Until::For(gating_core::parse_duration(
            span.as_str().ok_or("for must be a duration like \"3d\"")?,
        )?),
        _ => return Err("give either until (an RFC 3339 time) or for (like \"3d\")".into()),
    };
    Ok(DelegationRequest {
        to,
        starts_at: time("from")?,
        until,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terms_read_a_window_and_refuse_what_is_unclear() {
        let alice = Caller::new("alice", Some("acme".into())).unwrap();
        let three_days = delegation_terms(&json!({"to": "carol", "for": "3d"}), &alice).unwrap();
        assert_eq!(
            three_days.to,
            Caller::new("carol", Some("acme".into())).unwrap()
        );
        assert_eq!(three_days.until, Until::For(time::Duration::days(3)));
        assert_eq!(three_days.starts_at, None);
        let until = delegation_terms(
            &json!({"to": "carol", "from": "2026-12-05T00:00:00Z", "until": "2026-12-07T09:00:00Z"}),
            &alice,
        )
        .unwrap();
        let at = |t: &str| OffsetDateTime::parse(t, &Rfc3339).unwrap();
        assert_eq!(until.starts_at, Some(at("2026-12-05T00:00:00Z")));
        assert_eq!(until.until, Until::At(at("2026-12-07T09:00:00Z")));
        for (bad, says) in [
            (json!("carol"), "JSON object"),
            (json!({"to": "carol"}), "either until"),
            (
                json!({"to": "carol", "for": "3d", "until": "2026-12-07T09:00:00Z"}),
                "either until",
            ),
            (json!({"to": "carol", "for": "soon"}), "not a duration"),
            (json!({"to": "carol", "until": "Monday"}), "RFC 3339"),
            (json!({"for": "3d"}), "to must name"),
            (json!({"to": "", "for": "3d"}), "1 to 512"),
            (
                json!({"to": "carol", "for": "3d", "groups": ["admin"]}),
                "unknown key",
            ),
        ] {
            let refused = delegation_terms(&bad, &alice).unwrap_err();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
    }
}
