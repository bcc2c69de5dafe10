//! Quotas and budgets (issue 51, `[[quotas]]`): how many calls, or how many cost units,
//! the calls of a tool pattern may take per caller, per group or for everyone — on every
//! endpoint or on one virtual server — over a UTC minute, hour or day. Counted in the store
//! when a call is about to run (a held call when it runs, not when it is asked about), every
//! matching quota at once: on PostgreSQL every instance counts against the same limit,
//! exactly. A call that would pass one runs nothing and counts against none: it gets an
//! in-band result saying which quota and when it starts afresh, or, where the quota says
//! so, a person is asked to allow this one call beyond it (`past_quota`).

use elicitation_store::{QuotaTake, QuotaWindow, StoreError};
use mcp_auth::Principal;
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::groups::GroupsFrom;

/// Whose calls a quota counts together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaPer {
    /// Each caller's apart.
    Caller,
    /// Every caller's together.
    Everyone,
    /// The calls of every member of a group together (of each tenant apart); a caller not in
    /// the group is not counted by it.
    Group {
        /// The group, as configured.
        group: String,
        /// Whose word that someone is in it counts.
        from: GroupsFrom,
    },
}

/// What becomes of a call that would pass a quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuotaPast {
    /// Refused, saying when the window starts afresh (`Retry-After`).
    #[default]
    Refuse,
    /// Held for a person, who may allow this one call beyond the quota.
    Ask,
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
    /// Only the calls made on this virtual server (`None`: on every endpoint).
    pub server: Option<String>,
    /// What becomes of a call that would pass it.
    pub past: QuotaPast,
}

impl QuotaRule {
    /// A quota of `limit` `unit`s of the calls of `tools` per `window`, counted `per`, on
    /// every endpoint, refusing a call past it.
    pub fn new(
        tools: &str,
        per: QuotaPer,
        window: QuotaWindow,
        unit: QuotaUnit,
        limit: i64,
    ) -> Self {
        QuotaRule {
            tools: tools.to_owned(),
            per,
            window,
            unit,
            limit,
            server: None,
            past: QuotaPast::Refuse,
        }
    }

    /// Whose count `principal`'s call on `server` is in, if the rule counts it: the
    /// caller's subject and tenant, nobody's (everyone's), or the group's as qualified for
    /// the caller's tenant.
    fn counts(&self, principal: &Principal, server: Option<&str>) -> Option<[String; 2]> {
        if self.server.is_some() && self.server.as_deref() != server {
            return None;
        }
        self.whose(principal)
    }

    /// Whose count `principal`'s calls are in under this rule, wherever made.
    fn whose(&self, principal: &Principal) -> Option<[String; 2]> {
        let caller = &principal.caller;
        match &self.per {
            QuotaPer::Caller => Some([
                caller.subject_id().to_owned(),
                caller.tenant_id().unwrap_or("").to_owned(),
            ]),
            QuotaPer::Everyone => Some([String::new(), String::new()]),
            QuotaPer::Group { group, from } => {
                let qualified = from.qualify(group, caller);
                principal
                    .groups
                    .contains(&qualified)
                    .then(|| ["group".to_owned(), qualified])
            }
        }
    }
}

/// The cost of one call of the tools a pattern matches (`[[tool_costs]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCost {
    /// A qualified tool name, or a prefix ending in `*` (the first matching decides).
    pub tools: String,
    /// Cost units per call.
    pub units: i64,
}

use gating_core::covers;

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
    /// Whether a person may allow the call beyond it ([`QuotaPast::Ask`]).
    pub ask: bool,
    /// The counter it is (what a person's leave to pass it is bound to).
    pub key: String,
    /// The quota, as data.
    pub quota: Value,
    /// When its window starts afresh.
    pub until: OffsetDateTime,
}

/// Why a call does not run now for its quotas.
#[derive(Debug)]
pub(crate) enum QuotaStop {
    /// Refused (a quota passed, or the counters unreadable): the result that says so.
    Refused(Value),
    /// Past quotas that ask a person to allow the call beyond them, and within every other:
    /// what it took from those (given back unless it runs), and what it would pass.
    Ask(Taken, Passed),
}

/// Why a call does not fit its quotas.
#[derive(Debug)]
pub enum Over {
    /// Past a quota that refuses: nothing is taken.
    Refused(Passed),
    /// Past only quotas that ask a person (every one of them, together): what the call took
    /// from the others (give it back unless it runs), and what a person is to allow.
    Ask(Taken, Passed),
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

    /// The counters a call of `tool` by `principal` on `server` takes from: each matching
    /// rule's key, amount and rule. A key is the rule's terms (not its place in the file,
    /// nor its limit: a reordered file, a reload or a rolling restart with a changed limit
    /// counts on) and whose count it is (the caller's subject and tenant, or the group
    /// qualified by tenant) — hashed, so no subject can spell another's key.
    fn takes(
        &self,
        tool: &str,
        principal: &Principal,
        server: Option<&str>,
    ) -> Vec<(String, i64, &QuotaRule)> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| covers(&rule.tools, tool))
            .filter_map(|(index, rule)| {
                let whose = rule.counts(principal, server)?;
                let amount = match rule.unit {
                    QuotaUnit::Calls => 1,
                    QuotaUnit::Cost => self.cost_of(tool),
                };
                Some((self.key(index, &whose), amount, rule))
            })
            .collect()
    }

    /// The counter key of rule `index` for the count of `whose`.
    fn key(&self, index: usize, whose: &[String; 2]) -> String {
        let rule = &self.rules[index];
        let terms = |r: &QuotaRule| {
            (
                r.tools.clone(),
                r.per.clone(),
                r.window,
                r.unit,
                r.server.clone(),
            )
        };
        // The same terms twice (two limits on one count) are two counters.
        let twin = self.rules[..index]
            .iter()
            .filter(|r| terms(r) == terms(rule))
            .count()
            .to_string();
        let per = match &rule.per {
            QuotaPer::Caller => "Caller",
            QuotaPer::Everyone => "Everyone",
            QuotaPer::Group { .. } => "Group",
        };
        let unit = format!("{:?}", rule.unit);
        let mut fields = vec![
            rule.tools.as_str(),
            per,
            rule.window.label(),
            &unit,
            &twin,
            &whose[0],
            &whose[1],
        ];
        // A quota of one server counts apart from the same terms everywhere (and keys
        // made before servers existed stay what they were).
        if let Some(server) = &rule.server {
            fields.push("server");
            fields.push(server);
        }
        format!("q1:{}", digest(&fields))
    }

    /// Where `principal` stands against every quota that counts its calls: each rule with
    /// what is used of it (the caller's own count, its group's, or everyone's) and what
    /// remains in the current window.
    pub async fn standing(
        &self,
        store: &dyn elicitation_store::QuotaStore,
        principal: &Principal,
    ) -> Result<Vec<Value>, StoreError> {
        let mut out = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            let Some(whose) = rule.whose(principal) else {
                continue;
            };
            let used = bounded(store.quota_used(&self.key(index, &whose), rule.window)).await?;
            let mut quota = describe(rule);
            quota["used"] = json!(used);
            quota["remaining"] = json!((rule.limit - used).max(0));
            out.push(quota);
        }
        Ok(out)
    }

    /// Takes a call of `tool` by `principal` on `server` from every matching quota:
    /// `Ok(Ok(taken))` when it fits them all (counted; give it back if the call does not
    /// run); `Ok(Err(Over::Refused))` when it would pass one that refuses (what it took from
    /// the others is given back); `Ok(Err(Over::Ask))` when it would pass only quotas that
    /// ask a person, every one of which is named (it stays counted in the others: give it
    /// back unless it runs). A store failing or not answering in time is an error (the gate
    /// fails closed); each store step is bounded on its own, so a give-back is never cut
    /// off.
    pub async fn take(
        &self,
        store: &dyn elicitation_store::QuotaStore,
        tool: &str,
        (principal, server): (&Principal, Option<&str>),
        remaining: &(dyn Fn(&QuotaRule, i64) + Sync),
    ) -> Result<Result<Taken, Over>, StoreError> {
        let mut taken = Taken::default();
        let mut asking = Vec::new();
        for (key, amount, rule) in self.takes(tool, principal, server) {
            let outcome = bounded(store.take_quota(&key, rule.window, amount, rule.limit)).await;
            match outcome {
                Ok(QuotaTake::Taken { used, window_start }) => {
                    if rule.per == QuotaPer::Everyone {
                        remaining(rule, rule.limit - used);
                    }
                    taken.0.push((key, window_start, amount));
                }
                // A person may allow it past this one; the others still count it.
                Ok(QuotaTake::Over { until }) if rule.past == QuotaPast::Ask => {
                    asking.push(passed(rule, key, until));
                }
                Ok(QuotaTake::Over { until }) => {
                    self.give_back(store, taken).await;
                    return Ok(Err(Over::Refused(passed(rule, key, until))));
                }
                Err(e) => {
                    self.give_back(store, taken).await;
                    return Err(e);
                }
            }
        }
        Ok(match together(asking) {
            None => Ok(taken),
            Some(asked) => Err(Over::Ask(taken, asked)),
        })
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

/// The quotas a call would pass that ask a person, as one: what each says, and a key naming
/// each counter in its window (a leave to pass them in this window is none in the next).
fn together(asked: Vec<Passed>) -> Option<Passed> {
    let first = asked.first()?.clone();
    let what = asked
        .iter()
        .map(|p| p.what.as_str())
        .collect::<Vec<_>>()
        .join("; and ");
    let key = asked
        .iter()
        .map(|p| format!("{}@{}", p.key, p.until.unix_timestamp()))
        .collect::<Vec<_>>()
        .join(",");
    let until = asked.iter().map(|p| p.until).min().unwrap_or(first.until);
    Some(Passed {
        what,
        key,
        until,
        ..first
    })
}

fn passed(rule: &QuotaRule, key: String, until: OffsetDateTime) -> Passed {
    let unit = match rule.unit {
        QuotaUnit::Calls => "calls",
        QuotaUnit::Cost => "cost units",
    };
    let whose = match &rule.per {
        QuotaPer::Caller => "for this caller".to_owned(),
        QuotaPer::Everyone => "for every caller together".to_owned(),
        QuotaPer::Group { group, .. } => {
            format!("for group {} together", gating_core::visible(group))
        }
    };
    let on = rule
        .server
        .as_deref()
        .map(|s| format!(" on server {s}"))
        .unwrap_or_default();
    Passed {
        what: format!(
            "this call would pass the quota of {} {unit} per {} of {}{on} {whose}",
            rule.limit,
            rule.window.label(),
            rule.tools
        ),
        ask: rule.past == QuotaPast::Ask,
        key,
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
    let mut quota = json!({
        "tools": rule.tools,
        "window": rule.window.label(),
        "limit": rule.limit,
        "unit": rule.unit_label(),
        "per": match rule.per {
            QuotaPer::Caller => "caller",
            QuotaPer::Everyone => "everyone",
            QuotaPer::Group { .. } => "group",
        },
        "past": match rule.past { QuotaPast::Refuse => "refuse", QuotaPast::Ask => "ask" },
    });
    if let QuotaPer::Group { group, .. } = &rule.per {
        quota["group"] = json!(group);
    }
    if let Some(server) = &rule.server {
        quota["server"] = json!(server);
    }
    quota
}

#[cfg(test)]
mod tests {
    use super::*;
    use elicitation_store::{Caller, MemoryStore};

    fn rule(tools: &str, per: QuotaPer, unit: QuotaUnit, limit: i64) -> QuotaRule {
        QuotaRule::new(tools, per, QuotaWindow::Day, unit, limit)
    }

    fn principal(subject: &str, groups: &[&str]) -> Principal {
        let mut p = Principal::authenticated(Caller::new(subject, None).unwrap(), &[]);
        p.groups = groups.iter().map(|g| (*g).to_owned()).collect();
        p
    }

    /// Takes a call of `tool` by `who` on `server` from `quotas`: the quota it would pass.
    async fn take(
        quotas: &Quotas,
        store: &MemoryStore,
        tool: &str,
        who: &Principal,
        server: Option<&str>,
    ) -> Option<Passed> {
        quotas
            .take(store, tool, (who, server), &|_, _| {})
            .await
            .unwrap()
            .err()
            .map(passed_of)
    }

    /// What an over-quota take says it would pass.
    fn passed_of(over: Over) -> Passed {
        match over {
            Over::Refused(passed) | Over::Ask(_, passed) => passed,
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
        let alice = principal("alice", &[]);
        let bob = principal("bob", &[]);
        let now = OffsetDateTime::now_utc();
        let seen = std::sync::Mutex::new(Vec::new());
        let take = |tool: &'static str, who: &Principal| {
            let (quotas, store, who, seen) = (&quotas, &store, who.clone(), &seen);
            async move {
                quotas
                    .take(store, tool, (&who, None), &|rule, left| {
                        seen.lock().unwrap().push((rule.tools.clone(), left));
                    })
                    .await
                    .unwrap()
                    .err()
                    .map(passed_of)
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
        assert!(!passed.ask, "a quota refuses unless it says to ask");
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

    #[tokio::test]
    async fn a_group_quota_counts_its_members_together_and_a_server_quota_only_its_calls() {
        let store = MemoryStore::default();
        let mut on_finance = rule("ledger__*", QuotaPer::Everyone, QuotaUnit::Calls, 1);
        on_finance.server = Some("finance".into());
        on_finance.past = QuotaPast::Ask;
        let quotas = Quotas {
            rules: vec![
                rule(
                    "fs__*",
                    QuotaPer::Group {
                        group: "interns".into(),
                        from: GroupsFrom::Configured,
                    },
                    QuotaUnit::Calls,
                    2,
                ),
                on_finance,
            ],
            costs: Vec::new(),
        };
        let (ann, ben, sue) = (
            principal("ann", &["interns"]),
            principal("ben", &["interns"]),
            principal("sue", &["sre"]),
        );
        // Two interns share two calls; the third, by either, would pass it.
        assert_eq!(take(&quotas, &store, "fs__read", &ann, None).await, None);
        assert_eq!(take(&quotas, &store, "fs__read", &ben, None).await, None);
        let passed = take(&quotas, &store, "fs__read", &ann, Some("eng"))
            .await
            .unwrap();
        assert!(
            passed.what.contains("for group interns together"),
            "{}",
            passed.what
        );
        // Someone not in the group is not counted by it.
        for _ in 0..3 {
            assert_eq!(take(&quotas, &store, "fs__read", &sue, None).await, None);
        }
        // The finance quota counts calls on finance only, and asks past it.
        for _ in 0..3 {
            assert_eq!(
                take(&quotas, &store, "ledger__post", &sue, None).await,
                None
            );
        }
        assert_eq!(
            take(&quotas, &store, "ledger__post", &sue, Some("finance")).await,
            None
        );
        let passed = take(&quotas, &store, "ledger__post", &ann, Some("finance"))
            .await
            .unwrap();
        assert!(passed.ask);
        assert!(
            passed.what.contains("ledger__* on server finance"),
            "{}",
            passed.what
        );
        // The standing of a caller lists the quotas that count it.
        let standing = quotas.standing(&store, &sue).await.unwrap();
        assert_eq!(standing.len(), 1, "{standing:?}");
        assert_eq!(standing[0]["server"], "finance");
        assert_eq!(standing[0]["remaining"], 0);
        let standing = quotas.standing(&store, &ben).await.unwrap();
        assert_eq!(standing.len(), 2, "{standing:?}");
        assert_eq!(
            (&standing[0]["group"], &standing[0]["remaining"]),
            (&json!("interns"), &json!(0))
        );
    }

    /// A call past a quota that asks, and past one that refuses, is refused: a person's leave
    /// to pass one quota never passes another. Past two that ask, both are named; within the
    /// others, it stays counted there until it runs (or is given back).
    #[tokio::test]
    async fn a_quota_that_refuses_is_never_passed_by_a_leave_to_pass_one_that_asks() {
        let store = MemoryStore::default();
        let ask = |tools: &str| QuotaRule {
            past: QuotaPast::Ask,
            ..rule(tools, QuotaPer::Caller, QuotaUnit::Calls, 1)
        };
        let quotas = Quotas {
            rules: vec![
                ask("fs__*"),
                rule("fs__write", QuotaPer::Everyone, QuotaUnit::Calls, 1),
                ask("fs__w*"),
                rule("fs__*", QuotaPer::Everyone, QuotaUnit::Calls, 10),
            ],
            costs: Vec::new(),
        };
        let (ann, ben) = (principal("ann", &[]), principal("ben", &[]));
        let take = |tool: &'static str, who: &Principal| {
            let (quotas, store, who) = (&quotas, &store, who.clone());
            async move {
                quotas
                    .take(store, tool, (&who, None), &|_, _| {})
                    .await
                    .unwrap()
            }
        };
        assert!(take("fs__write", &ann).await.is_ok());
        // ben's write is within his own asking quotas but past the everyone-together one
        // that refuses.
        assert!(matches!(take("fs__write", &ben).await, Err(Over::Refused(p)) if !p.ask));
        // ann's read is past her first asking quota only: asked about, and counted in the
        // everyone-together ten meanwhile.
        let Err(Over::Ask(taken, asked)) = take("fs__read", &ann).await else {
            panic!("a read past one asking quota is asked about");
        };
        assert!(
            asked
                .what
                .contains("1 calls per day of fs__* for this caller"),
            "{}",
            asked.what
        );
        let standing = quotas.standing(&store, &ann).await.unwrap();
        assert_eq!(standing[3]["used"], 2, "{standing:?}");
        quotas.give_back(&store, taken).await;
        let standing = quotas.standing(&store, &ann).await.unwrap();
        assert_eq!(standing[3]["used"], 1, "given back: {standing:?}");
        // Past both of hers that ask (and within the refusing ones? not the write's): a
        // write by ann is refused by the everyone-together write quota before any asking.
        assert!(matches!(
            take("fs__write", &ann).await,
            Err(Over::Refused(_))
        ));
        // A wipe is past both asking quotas: both are named, in one leave.
        let Err(Over::Ask(taken, asked)) = take("fs__wipe", &ann).await else {
            panic!("past two asking quotas");
        };
        assert!(
            asked.what.contains("fs__*") && asked.what.contains("fs__w*"),
            "{}",
            asked.what
        );
        assert_eq!(asked.key.matches('@').count(), 2, "{}", asked.key);
        quotas.give_back(&store, taken).await;
    }

    #[test]
    fn a_subject_cannot_spell_another_callers_key_nor_a_group_a_callers() {
        let quotas = Quotas {
            rules: vec![
                rule("fs__*", QuotaPer::Caller, QuotaUnit::Calls, 1),
                rule(
                    "fs__*",
                    QuotaPer::Group {
                        group: "a".into(),
                        from: GroupsFrom::Configured,
                    },
                    QuotaUnit::Calls,
                    1,
                ),
            ],
            costs: Vec::new(),
        };
        let key = |who: &Principal| quotas.takes("fs__read", who, None)[0].0.clone();
        let a = Principal::authenticated(Caller::new("a", Some("b@c".into())).unwrap(), &[]);
        let b = Principal::authenticated(Caller::new("a@b", Some("c".into())).unwrap(), &[]);
        assert_ne!(key(&a), key(&b));
        assert!(key(&a).len() < 100, "a key is short whatever the ids");
        // A caller named "group" with tenant "a" is not group a's count.
        let spelled =
            Principal::authenticated(Caller::new("group", Some("a".into())).unwrap(), &[]);
        let mut member = principal("m", &["a"]);
        member.groups.insert("a".into());
        let group_key = quotas.takes("fs__read", &member, None)[1].0.clone();
        assert_ne!(key(&spelled), group_key);
    }
}
