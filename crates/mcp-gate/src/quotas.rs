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

/// How long one counter step may take before the gate gives up on it (and fails closed).
const STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `op`, failed as the store's unavailability unless it ends within [`STEP_TIMEOUT`].
async fn bounded<T>(
    op: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(STEP_TIMEOUT, op)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the store did not answer in time".into(),
            ))
        })
}

/// What a call took from its quotas: given back if it does not run after all.
#[derive(Debug, Default)]
#[must_use = "a take not given back stays counted"]
pub struct Taken(Vec<(String, OffsetDateTime, i64)>);

/// SHA-256 of `fields`, each length-prefixed (no field can run into the next), in hex.
fn digest(fields: &[&str]) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for field in fields {
        context.update(&(field.len() as u64).to_be_bytes());
        context.update(field.as_bytes());
    }
    mcp_random::hex(context.finish().as_ref())
}

impl Quotas {
    /// The cost of one call of `tool`.
    pub fn cost_of(&self, tool: &str) -> i64 {
        self.costs
            .iter()
            .find(|c| covers(&c.tools, tool))
            .map_or(1, |c| c.units)
    }

    /// The counters a call of `tool` by `caller` takes from: each matching rule's key,
    /// amount and rule. A key is the rule's terms (not its place in the file, nor its
    /// limit: a reordered file, a reload or a rolling restart with a changed limit counts
    /// on) and, per caller, the caller's subject and tenant — hashed, so no subject can
    /// spell another caller's key.
    fn takes(&self, tool: &str, caller: &Caller) -> Vec<(String, i64, &QuotaRule)> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| covers(&rule.tools, tool))
            .map(|(index, rule)| {
                let amount = match rule.unit {
                    QuotaUnit::Calls => 1,
                    QuotaUnit::Cost => self.cost_of(tool),
                };
                (self.key(index, caller), amount, rule)
            })
            .collect()
    }

    /// The counter key of rule `index` for `caller`.
    fn key(&self, index: usize, caller: &Caller) -> String {
        let rule = &self.rules[index];
        let terms = |r: &QuotaRule| (r.tools.clone(), r.per, r.window, r.unit);
        // The same terms twice (two limits on one count) are two counters.
        let twin = self.rules[..index]
            .iter()
            .filter(|r| terms(r) == terms(rule))
            .count()
            .to_string();
        let (per, unit) = (format!("{:?}", rule.per), format!("{:?}", rule.unit));
        let (subject, tenant) = match rule.per {
            QuotaPer::Caller => (caller.subject_id(), caller.tenant_id().unwrap_or("")),
            QuotaPer::Everyone => ("", ""),
        };
        format!(
            "q1:{}",
            digest(&[
                &rule.tools,
                &per,
                rule.window.label(),
                &unit,
                &twin,
                subject,
                tenant,
            ])
        )
    }

    /// Where `caller` stands against every quota now: each rule with what is used of it
    /// (the caller's own count, or everyone's) and what remains in the current window.
    pub async fn standing(
        &self,
        store: &dyn elicitation_store::QuotaStore,
        caller: &Caller,
    ) -> Result<Vec<Value>, StoreError> {
        let mut out = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            let used = bounded(store.quota_used(&self.key(index, caller), rule.window)).await?;
            let mut quota = describe(rule);
            quota["used"] = json!(used);
            quota["remaining"] = json!((rule.limit - used).max(0));
            out.push(quota);
        }
        Ok(out)
    }

    /// Takes a call of `tool` by `caller` from every matching quota, or from none:
    /// `Ok(Ok(taken))` when it fits them all (counted; give it back if the call does not
    /// run), `Ok(Err(passed))` when it would pass one (what it took from the others is
    /// given back). A store failing or not answering in time is an error (the gate fails
    /// closed); each store step is bounded on its own, so a give-back is never cut off.
    pub async fn take(
        &self,
        store: &dyn elicitation_store::QuotaStore,
        tool: &str,
        caller: &Caller,
        remaining: &(dyn Fn(&QuotaRule, i64) + Sync),
    ) -> Result<Result<Taken, Passed>, StoreError> {
        let mut taken = Taken::default();
        for (key, amount, rule) in self.takes(tool, caller) {
            let outcome = bounded(store.take_quota(&key, rule.window, amount, rule.limit)).await;
            match outcome {
                Ok(QuotaTake::Taken { used, window_start }) => {
                    if rule.per == QuotaPer::Everyone {
                        remaining(rule, rule.limit - used);
                    }
                    taken.0.push((key, window_start, amount));
                }
                Ok(QuotaTake::Over { until }) => {
                    self.give_back(store, taken).await;
                    return Ok(Err(passed(rule, until)));
                }
                Err(e) => {
                    self.give_back(store, taken).await;
                    return Err(e);
                }
            }
        }
        Ok(Ok(taken))
    }

    /// Gives back what a call took (it did not run after all).
    pub async fn give_back(&self, store: &dyn elicitation_store::QuotaStore, taken: Taken) {
        for (key, start, amount) in taken.0 {
            if let Err(e) = bounded(store.give_back_quota(&key, start, amount)).await {
                tracing::warn!(error = %e, "a quota take could not be given back; the counter stays over by it until its window ends");
            }
        }
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
        quota: describe(rule),
        until,
    }
}

impl QuotaRule {
    /// Its unit's label (`calls`, `cost`).
    pub fn unit_label(&self) -> &'static str {
        match self.unit {
            QuotaUnit::Calls => "calls",
            QuotaUnit::Cost => "cost",
        }
    }
}

/// A quota as data: its tools, window, limit, unit and whose calls it counts.
fn describe(rule: &QuotaRule) -> Value {
    json!({
        "tools": rule.tools,
        "window": rule.window.label(),
        "limit": rule.limit,
        "unit": rule.unit_label(),
        "per": match rule.per { QuotaPer::Caller => "caller", QuotaPer::Everyone => "everyone" },
    })
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
        let seen = std::sync::Mutex::new(Vec::new());
        let take = |tool: &'static str, who: &Caller| {
            let (quotas, store, who, seen) = (&quotas, &store, who.clone(), &seen);
            async move {
                quotas
                    .take(store, tool, &who, &|rule, left| {
                        seen.lock().unwrap().push((rule.tools.clone(), left));
                    })
                    .await
                    .unwrap()
                    .err()
            }
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
        // What remains of the everyone-together budget is told after each take (for the
        // metrics); a per-caller quota's is not.
        assert_eq!(
            *seen.lock().unwrap(),
            [
                ("fs__write_file".to_owned(), 6),
                ("fs__write_file".to_owned(), 2)
            ]
        );
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

#[test]
fn a_subject_cannot_spell_another_callers_key() {
    let quotas = Quotas {
        rules: vec![QuotaRule {
            tools: "fs__*".into(),
            per: QuotaPer::Caller,
            window: QuotaWindow::Day,
            unit: QuotaUnit::Calls,
            limit: 1,
        }],
        costs: Vec::new(),
    };
    let a = Caller::new("a", Some("b@c".into())).unwrap();
    let b = Caller::new("a@b", Some("c".into())).unwrap();
    let key = |who: &Caller| quotas.takes("fs__read", who)[0].0.clone();
    assert_ne!(key(&a), key(&b));
    assert!(key(&a).len() < 100, "a key is short whatever the ids");
}
