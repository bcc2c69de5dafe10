//! Quotas and budgets (issue 51, `[[quotas]]`): how many calls, or how many cost units,
//! the calls of a tool pattern may take per caller or for everyone over a UTC minute, hour
//! or day. Counted in the store when a call is about to run (a held call when it runs, not
//! when it is asked about), every matching quota at once: on PostgreSQL every instance
//! counts against the same limit, exactly. A call that would pass one runs nothing, counts
//! against none, and gets an in-band result saying which quota and when it starts afresh.

use elicitation_store::{Caller, QuotaTake, QuotaWindow, StoreError};
use serde_json::{Value, json};
use time::OffsetDateTime;

/// Whose calls a quota counts together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaPer {
    /// Each caller's apart.
    Caller,
    /// Every caller's together.
    Everyone,
}

/// What a quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaUnit {
    /// Calls.
    Calls,
    /// Cost units: each call its tool's cost ([`ToolCost`]; 1 where none is configured).
    Cost,
}

/// One `[[quotas]]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRule {
    /// A qualified tool name, or a prefix ending in `*`.
    pub tools: String,
    /// Whose calls count together.
    pub per: QuotaPer,
    /// The window.
    pub window: QuotaWindow,
    /// What it counts.
    pub unit: QuotaUnit,
    /// How much of it, per window.
    pub limit: i64,
}

/// The cost of one call of the tools a pattern matches (`[[tool_costs]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCost {
    /// A qualified tool name, or a prefix ending in `*` (the first matching decides).
    pub tools: String,
    /// Cost units per call.
    pub units: i64,
}

fn covers(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

/// The configured quotas and costs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    /// The rules, in order (each matching one counts).
    pub rules: Vec<QuotaRule>,
    /// The tools' costs (the first matching decides; 1 otherwise).
    pub costs: Vec<ToolCost>,
}

/// A quota a call would pass: the rule, its window's end, and what the agent is told.
#[derive(Debug, Clone, PartialEq)]
pub struct Passed {
    /// What it says: "the quota of 100 calls per day of fs__* for this caller".
    pub what: String,
    /// The quota, as data.
    pub quota: Value,
    /// When its window starts afresh.
    pub until: OffsetDateTime,
}

impl Quotas {
    /// The cost of one call of `tool`.
    pub fn cost_of(&self, tool: &str) -> i64 {
        self.costs
            .iter()
            .find(|c| covers(&c.tools, tool))
            .map_or(1, |c| c.units)
    }

    /// The counters a call of `tool` by `caller` at `now` takes from: each matching rule's
    /// key, window, amount and rule.
    fn takes(
        &self,
        tool: &str,
        caller: &Caller,
        now: OffsetDateTime,
    ) -> Vec<(String, (OffsetDateTime, OffsetDateTime), i64, usize)> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| covers(&rule.tools, tool))
            .map(|(index, rule)| {
                let whose = match rule.per {
                    QuotaPer::Caller => format!(
                        "caller:{}@{}",
                        caller.subject_id(),
                        caller.tenant_id().unwrap_or("")
                    ),
                    QuotaPer::Everyone => "everyone".to_owned(),
                };
                let unit = match rule.unit {
                    QuotaUnit::Calls => "calls",
                    QuotaUnit::Cost => "cost",
                };
                // The rule's terms are in its key: a changed rule counts afresh.
                let key = format!(
                    "{index}|{}|{}|{unit}|{}|{whose}",
                    rule.tools,
                    rule.window.label(),
                    rule.limit
                );
                let amount = match rule.unit {
                    QuotaUnit::Calls => 1,
                    QuotaUnit::Cost => self.cost_of(tool),
                };
                (key, rule.window.around(now), amount, index)
            })
            .collect()
    }

    /// Takes a call of `tool` by `caller` at `now` from every matching quota, or from none:
    /// `Ok(None)` when it fits them all (counted), `Ok(Some(passed))` when it would pass
    /// one (what it took from the others is given back). A store failing is an error (the
    /// gate fails closed).
    pub async fn take(
        &self,
        store: &dyn elicitation_store::QuotaStore,
        tool: &str,
        caller: &Caller,
        now: OffsetDateTime,
    ) -> Result<Option<Passed>, StoreError> {
        let takes = self.takes(tool, caller, now);
        let mut taken: Vec<(&str, OffsetDateTime, i64)> = Vec::new();
        for (key, window, amount, index) in &takes {
            let rule = &self.rules[*index];
            let outcome = store.take_quota(key, *window, *amount, rule.limit).await;
            match outcome {
                Ok(QuotaTake::Taken { .. }) => taken.push((key, window.0, *amount)),
                Ok(QuotaTake::Over { .. }) | Err(_) => {
                    for (key, start, amount) in taken {
                        if let Err(e) = store.give_back_quota(key, start, amount).await {
                            tracing::warn!(error = %e, "a quota take could not be given back; the counter stays over by it until its window ends");
                        }
                    }
                    outcome?;
                    return Ok(Some(passed(rule, window.1)));
                }
            }
        }
        Ok(None)
    }
}

fn passed(rule: &QuotaRule, until: OffsetDateTime) -> Passed {
    let unit = match rule.unit {
        QuotaUnit::Calls => "calls",
        QuotaUnit::Cost => "cost units",
    };
    let whose = match rule.per {
        QuotaPer::Caller => "for this caller",
        QuotaPer::Everyone => "for every caller together",
    };
    Passed {
        what: format!(
            "this call would pass the quota of {} {unit} per {} of {} {whose}",
            rule.limit,
            rule.window.label(),
            rule.tools
        ),
        quota: json!({
            "tools": rule.tools,
            "window": rule.window.label(),
            "limit": rule.limit,
            "unit": match rule.unit { QuotaUnit::Calls => "calls", QuotaUnit::Cost => "cost" },
            "per": match rule.per { QuotaPer::Caller => "caller", QuotaPer::Everyone => "everyone" },
        }),
        until,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elicitation_store::MemoryStore;

    fn rule(tools: &str, per: QuotaPer, unit: QuotaUnit, limit: i64) -> QuotaRule {
        QuotaRule {
            tools: tools.into(),
            per,
            window: QuotaWindow::Day,
            unit,
            limit,
        }
    }

    #[tokio::test]
    async fn a_call_counts_against_every_matching_quota_or_none() {
        let store = MemoryStore::default();
        let quotas = Quotas {
            rules: vec![
                rule("fs__*", QuotaPer::Caller, QuotaUnit::Calls, 3),
                rule("fs__write_file", QuotaPer::Everyone, QuotaUnit::Cost, 10),
            ],
            costs: vec![ToolCost {
                tools: "fs__write_file".into(),
                units: 4,
            }],
        };
        let alice = Caller::new("alice", None).unwrap();
        let bob = Caller::new("bob", None).unwrap();
        let now = OffsetDateTime::now_utc();
        let take = |tool: &'static str, who: &Caller| {
            let (quotas, store, who) = (&quotas, &store, who.clone());
            async move { quotas.take(store, tool, &who, now).await.unwrap() }
        };
        // Two writes of alice's (8 units of 10), then bob's would make 12: refused, and his
        // per-caller count is given back.
        assert_eq!(take("fs__write_file", &alice).await, None);
        assert_eq!(take("fs__write_file", &alice).await, None);
        let passed = take("fs__write_file", &bob).await.unwrap();
        assert!(
            passed
                .what
                .contains("10 cost units per day of fs__write_file for every caller together"),
            "{}",
            passed.what
        );
        assert_eq!(passed.quota["unit"], "cost");
        // Bob's per-caller quota was not spent by the refused call: three reads run.
        for _ in 0..3 {
            assert_eq!(take("fs__read_file", &bob).await, None);
        }
        let passed = take("fs__read_file", &bob).await.unwrap();
        assert!(
            passed
                .what
                .contains("3 calls per day of fs__* for this caller")
        );
        assert!(passed.until > now);
        // Another tool no quota names runs unhindered.
        assert_eq!(take("git__log", &bob).await, None);
    }
}
