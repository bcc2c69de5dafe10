//! What a person asks for when they approve a call and grant later ones: the `grant` of an
//! answer (`{"scope": "call" | "tool", "for": "30m", "max_uses": 20, "when": "…"}`), read
//! and checked before anything is stored.

use serde_json::Value;
use time::Duration;

use crate::When;

/// Most uses one grant may allow.
pub const MAX_GRANT_USES: u32 = 1_000_000;

/// Which later calls a grant covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantScope {
    /// The same call: the same tool with the same argument digest.
    Call,
    /// The tool, with any arguments (narrowed by the grant's `when`, if it has one).
    Tool,
}

impl GrantScope {
    /// The stored and wire label.
    pub const fn label(self) -> &'static str {
        match self {
            GrantScope::Call => "call",
            GrantScope::Tool => "tool",
        }
    }

    /// The scope of a label.
    pub fn from_label(label: &str) -> Option<GrantScope> {
        match label {
            "call" => Some(GrantScope::Call),
            "tool" => Some(GrantScope::Tool),
            _ => None,
        }
    }
}

/// A grant as a person asked for it, checked: its scope, how long it lasts, how many calls
/// it may forward, and (scope `tool` only) the expression later calls must satisfy.
#[derive(Debug, Clone)]
pub struct GrantTerms {
    /// Which calls it covers.
    pub scope: GrantScope,
    /// How long it lasts from the answer.
    pub lasts: Duration,
    /// How many calls it may forward (`None`: any number until it ends).
    pub max_uses: Option<u32>,
    /// Scope `tool`: what a later call must satisfy, over the same facts as a rule's `when`.
    pub when: Option<When>,
}

impl GrantTerms {
    /// Reads the `grant` of an answer; `max` is the longest grant the gateway allows. The
    /// error says what is wrong, for the person (a 422).
    pub fn parse(value: &Value, max: Duration) -> Result<GrantTerms, String> {
        let object = value.as_object().ok_or(
            "`grant` must be an object: {\"scope\": \"call\" | \"tool\", \"for\": \"30m\"}",
        )?;
        if let Some(unknown) = object
            .keys()
            .find(|k| !["scope", "for", "max_uses", "when"].contains(&k.as_str()))
        {
            return Err(format!(
                "`grant` has an unknown field {unknown:?} (it takes scope, for, max_uses and when)"
            ));
        }
        let scope = object
            .get("scope")
            .and_then(Value::as_str)
            .and_then(GrantScope::from_label)
            .ok_or("`grant.scope` must be \"call\" (this call again) or \"tool\" (any call of the tool)")?;
        let lasts = object
            .get("for")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                "`grant.for` must say how long it lasts, as \"30m\" or \"8h\"".to_owned()
            })
            .and_then(parse_duration)?;
        if lasts > max {
            return Err(format!(
                "`grant.for` is longer than this gateway allows ({}); ask for at most that",
                format_duration(max)
            ));
        }
        let max_uses = match object.get("max_uses") {
            None | Some(Value::Null) => None,
            Some(uses) => Some(
                uses.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (1..=MAX_GRANT_USES).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "`grant.max_uses` must be a whole number from 1 to {MAX_GRANT_USES}"
                        )
                    })?,
            ),
        };
        let when = match object.get("when") {
            None | Some(Value::Null) => None,
            Some(_) if scope == GrantScope::Call => {
                return Err(
                    "`grant.when` narrows a grant of the tool; a grant of the call covers exactly this call"
                        .into(),
                );
            }
            Some(Value::String(source)) if source.trim().is_empty() => None,
            Some(Value::String(source)) => Some(
                When::compile(source).map_err(|e| format!("`grant.when` cannot be used: {e}"))?,
            ),
            Some(_) => return Err("`grant.when` must be a CEL expression, as a string".into()),
        };
        Ok(GrantTerms {
            scope,
            lasts,
            max_uses,
            when,
        })
    }
}

/// `"90s"`, `"30m"`, `"8h"`, `"1d"`: a positive whole number with a unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad =
        || format!("{text:?} is not a duration; write it as \"90s\", \"30m\", \"8h\" or \"1d\"");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| bad())?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let seconds = number
        .checked_mul(unit)
        .filter(|s| *s > 0)
        .ok_or_else(bad)?;
    Ok(Duration::seconds(seconds))
}

/// A duration as [`parse_duration`] reads it, in the largest whole unit.
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.whole_seconds();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if seconds % size == 0 && seconds >= size {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MAX: Duration = Duration::hours(8);

    #[test]
    fn a_grant_is_read_with_its_scope_length_uses_and_when() {
        let terms = GrantTerms::parse(
            &json!({"scope": "tool", "for": "30m", "max_uses": 20, "when": "args.path.startsWith('/tmp/')"}),
            MAX,
        )
        .unwrap();
        assert_eq!(terms.scope, GrantScope::Tool);
        assert_eq!(terms.lasts, Duration::minutes(30));
        assert_eq!(terms.max_uses, Some(20));
        assert_eq!(
            terms.when.unwrap().source(),
            "args.path.startsWith('/tmp/')"
        );
        let call = GrantTerms::parse(&json!({"scope": "call", "for": "8h"}), MAX).unwrap();
        assert_eq!((call.scope, call.max_uses), (GrantScope::Call, None));
    }

    #[test]
    fn a_grant_past_the_cap_or_malformed_is_refused_saying_why() {
        let cases = [
            (
                json!({"scope": "call", "for": "9h"}),
                "longer than this gateway allows (8h)",
            ),
            (json!({"scope": "call", "for": "0m"}), "not a duration"),
            (
                json!({"scope": "call", "for": "30 minutes"}),
                "not a duration",
            ),
            (json!({"scope": "call"}), "`grant.for`"),
            (json!({"scope": "everything", "for": "1h"}), "`grant.scope`"),
            (
                json!({"scope": "call", "for": "1h", "max_uses": 0}),
                "`grant.max_uses`",
            ),
            (
                json!({"scope": "call", "for": "1h", "max_uses": -1}),
                "`grant.max_uses`",
            ),
            (
                json!({"scope": "call", "for": "1h", "max_uses": 1.5}),
                "`grant.max_uses`",
            ),
            (
                json!({"scope": "call", "for": "1h", "when": "true"}),
                "grant of the call",
            ),
            (
                json!({"scope": "tool", "for": "1h", "when": "args.path.("}),
                "cannot be used",
            ),
            (
                json!({"scope": "tool", "for": "1h", "when": 1}),
                "as a string",
            ),
            (
                json!({"scope": "tool", "for": "1h", "forever": true}),
                "unknown field",
            ),
            (json!("tool"), "must be an object"),
        ];
        for (grant, want) in cases {
            let err = GrantTerms::parse(&grant, MAX).unwrap_err();
            assert!(err.contains(want), "{grant}: {err}");
        }
    }

    #[test]
    fn durations_read_and_print_in_whole_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::seconds(90)));
        assert_eq!(parse_duration("1d"), Ok(Duration::days(1)));
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_duration("-5m").is_err());
        assert_eq!(format_duration(Duration::hours(8)), "8h");
        assert_eq!(format_duration(Duration::seconds(90)), "90s");
        assert_eq!(format_duration(Duration::minutes(30)), "30m");
    }
}
