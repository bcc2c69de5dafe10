//! The operator's gate policy and the decision whether a call is gated.
//!
//! The policy is an ordered table of rules. A rule names tools (a qualified name, or a prefix
//! ending in `*`), optionally narrowed by a `when` (a CEL expression over the call, see
//! [`crate::When`]), and says what becomes of a call it matches. The first rule that
//! matches decides; a call no rule matches is decided by its hints (`auto`).
//!
//! A `when` that cannot be evaluated never opens the gate: the call gets the stricter of what
//! its rule would decide and what the rules after it decide ([`GatePolicy::decide`]).

use serde::{Deserialize, Serialize};
use serde_json::json;
use time::Duration;

use crate::findings::ContentPolicy;
use crate::flow::{FlowLabel, FlowPolicy, TrifectaMode};
pub use crate::pattern::ToolPattern;
use crate::{CallDigest, CallFacts, EffectiveHints, ToolAnnotations, When};

/// How long a confirmation waits for a person unless policy says otherwise.
pub const DEFAULT_CONFIRMATION_TTL: Duration = Duration::minutes(10);

/// What the operator decided for the calls a rule matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateMode {
    /// Gate by the tool's effective hints.
    #[default]
    Auto,
    /// Always ask a person first.
    Confirm,
    /// Never ask.
    Allow,
    /// Never forward.
    Deny,
    /// Forward without asking, recording that the call would have been held.
    Shadow,
}

impl GateMode {
    /// The mode's configuration label.
    pub const fn label(self) -> &'static str {
        match self {
            GateMode::Auto => "auto",
            GateMode::Confirm => "confirm",
            GateMode::Allow => "allow",
            GateMode::Deny => "deny",
            GateMode::Shadow => "shadow",
        }
    }
}

/// Where a tool's hints come from.
#[derive(Debug, Clone, Copy)]
pub enum HintSource<'a> {
    /// The module is trusted (`trust_annotations = true`) and annotated the tool.
    Trusted(&'a ToolAnnotations),
    /// The module is not trusted, or gave no annotations: the MCP defaults apply.
    Untrusted,
}

impl HintSource<'_> {
    /// The hints this source means.
    pub fn effective(&self) -> EffectiveHints {
        match self {
            HintSource::Trusted(annotations) => annotations.effective(),
            HintSource::Untrusted => EffectiveHints::DEFAULTS,
        }
    }
}

/// What to do with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateDecision {
    /// Forward it without asking.
    Forward,
    /// Forward it only with a person's confirmation, for this reason.
    Confirm(HoldReason),
    /// Never forward it.
    Deny,
    /// Forward it without asking, recording that a `shadow` rule would have held it.
    Shadow,
}

/// Why a call is held for a person: what the person (and the agent) are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldReason {
    /// The operator's policy says `confirm` for the call, whatever its hints.
    Policy,
    /// The tool may change or delete data: its trusted module says it is destructive
    /// (`declared`), or nothing trusted says it is not (the MCP defaults).
    Destructive {
        /// A trusted module annotated the tool `destructiveHint: true`.
        declared: bool,
    },
    /// The tool reaches outside systems and open-world tools are gated.
    OpenWorld,
    /// The tool sends data out from a flow that holds untrusted content and private data
    /// (the lethal-trifecta rule: `crate::flow`).
    Flow,
    /// The call would pass a quota that asks a person to allow a call beyond it.
    Quota,
}

/// How closed a decision keeps the gate: forward, shadow (forwarded, recorded), held with
/// grants, held without, deny.
fn strictness(d: &Decided) -> u8 {
    match d.decision {
        GateDecision::Forward => 0,
        GateDecision::Shadow => 1,
        GateDecision::Confirm(_) if d.grants => 2,
        GateDecision::Confirm(_) => 3,
        GateDecision::Deny => 4,
    }
}

/// The stricter of a failed rule's decision (kept on a tie) and a later one.
fn stricter(floor: Option<Decided>, later: Decided) -> Decided {
    match floor {
        Some(floor) if strictness(&floor) >= strictness(&later) => floor,
        _ => later,
    }
}

/// One rule of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRule {
    /// The tools it names.
    pub tool: ToolPattern,
    /// What the call must satisfy besides (none: every call of those tools).
    pub when: Option<When>,
    /// What becomes of a call it matches.
    pub mode: GateMode,
    /// How long its confirmations wait; the policy default when `None`.
    pub ttl: Option<Duration>,
    /// Why (recorded; for `deny`, told to the agent).
    pub reason: Option<String>,
    /// Whether a person approving a call it holds may also grant later calls (`grants =
    /// false` in the configuration: every call is asked).
    pub grants: bool,
}

impl PolicyRule {
    /// A rule for the tools `tool` names (`fs__*`: a prefix), of every call.
    pub fn new(tool: &str, mode: GateMode) -> PolicyRule {
        PolicyRule {
            tool: ToolPattern::parse(tool),
            when: None,
            mode,
            ttl: None,
            reason: None,
            grants: true,
        }
    }

    /// A person approving a call it holds may not grant later calls.
    #[must_use]
    pub fn without_grants(mut self) -> PolicyRule {
        self.grants = false;
        self
    }

    /// Only the calls `when` matches.
    #[must_use]
    pub fn when(mut self, when: When) -> PolicyRule {
        self.when = Some(when);
        self
    }

    /// Its confirmations wait `ttl`.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> PolicyRule {
        self.ttl = Some(ttl);
        self
    }

    /// Records (and, for `deny`, tells the agent) why.
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> PolicyRule {
        self.reason = Some(reason.into());
        self
    }
}

/// What the policy decided for one call, and which rule decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// What becomes of the call.
    pub decision: GateDecision,
    /// The index (from 0, in the order of the configuration) of the rule that decided, if
    /// one did; `None`: no rule matched and the hints decided.
    pub rule: Option<usize>,
    /// That rule's reason.
    pub reason: Option<String>,
    /// How long a confirmation of the call waits.
    pub ttl: Duration,
    /// The `when`s that could not be evaluated on the way (rule index, why), for the log.
    pub failures: Vec<(usize, String)>,
    /// Whether a standing grant may stand in for a person's answer (a held call only; the
    /// deciding rule's `grants`, true when the hints decided).
    pub grants: bool,
    /// Whether the lethal-trifecta rule matched the call (it sends data out from a flow
    /// that holds untrusted content and private data): the person is told the trail.
    pub trifecta: bool,
}

/// How a tool is listed to clients, whatever a call's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Not listed: every call of it is denied.
    Hidden,
    /// Listed as it is.
    Plain,
    /// Listed, and some calls of it are held (so its result may be the gateway's).
    Gated,
}

/// The gate policy of a gateway: the ordered rules over a default of `auto`, and whether
/// open-world tools are gated too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatePolicy {
    rules: Vec<PolicyRule>,
    gate_open_world: bool,
    default_ttl: Duration,
    flow: FlowPolicy,
    content: ContentPolicy,
}

impl Default for GatePolicy {
    fn default() -> Self {
        GatePolicy {
            rules: Vec::new(),
            gate_open_world: false,
            default_ttl: DEFAULT_CONFIRMATION_TTL,
            flow: FlowPolicy::default(),
            content: ContentPolicy::default(),
        }
    }
}

impl GatePolicy {
    /// Adds a rule after the others (an earlier rule that matches a call decides first).
    #[must_use]
    pub fn with_rule(mut self, rule: PolicyRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Puts `rules` before the others (a virtual server's own rules, decided before the
    /// gateway's).
    #[must_use]
    pub fn with_rules_first(mut self, rules: Vec<PolicyRule>) -> Self {
        self.rules.splice(0..0, rules);
        self
    }

    /// The confirmation TTL of the calls no rule gives one.
    pub fn default_ttl(&self) -> Duration {
        self.default_ttl
    }

    /// Also gates every tool whose effective `openWorldHint` is true, read-only or not.
    #[must_use]
    pub fn with_open_world_gating(mut self) -> Self {
        self.gate_open_world = true;
        self
    }

    /// Sets the confirmation TTL for rules without their own.
    #[must_use]
    pub fn with_default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Labels tools and judges flows with `flow` (the default: labels from the hints, the
    /// lethal-trifecta rule holding).
    #[must_use]
    pub fn with_flow(mut self, flow: FlowPolicy) -> Self {
        self.flow = flow;
        self
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[PolicyRule] {
        &self.rules
    }

    /// How tools are labelled and flows judged.
    pub fn flow(&self) -> &FlowPolicy {
        &self.flow
    }

    /// Scans results with `content` (the default: `ContentPolicy::default`).
    #[must_use]
    pub fn with_content(mut self, content: ContentPolicy) -> Self {
        self.content = content;
        self
    }

    /// What is looked for in results, and done with it.
    pub fn content(&self) -> &ContentPolicy {
        &self.content
    }

    /// Whether a call of `tool` (whose effective hints are `hints`) is judged on its
    /// caller's flow: it may send data out while the lethal-trifecta rule is on, or some
    /// rule naming it reads `flow` in its `when`.
    pub fn reads_flow(&self, tool: &str, hints: EffectiveHints) -> bool {
        (self.flow.trifecta != TrifectaMode::Off
            && self.flow.labels(tool, hints).0.has(FlowLabel::SendsOut))
            || self
                .rules
                .iter()
                .any(|r| r.tool.matches(tool) && r.when.as_ref().is_some_and(When::reads_flow))
    }

    /// SHA-256 (hex) of the policy as configured — every rule in order, the default TTL and
    /// open-world gating — recorded with each decision so a record says which policy made it.
    pub fn digest(&self) -> String {
        let rules: Vec<_> = self
            .rules
            .iter()
            .map(|r| {
                json!({
                    "tool": r.tool.text(),
                    "when": r.when.as_ref().map(When::source),
                    "gate": r.mode.label(),
                    "ttl": r.ttl.map(|t| t.whole_seconds()),
                    "reason": r.reason,
                    "grants": r.grants,
                })
            })
            .collect();
        let flow: Vec<_> = self
            .flow
            .rules
            .iter()
            .map(|r| json!({"tool": r.tool.text(), "labels": r.labels.names()}))
            .collect();
        CallDigest::of(&json!({
            "rules": rules,
            "default_ttl": self.default_ttl.whole_seconds(),
            "gate_open_world": self.gate_open_world,
            "findings": {
                "actions": crate::findings::FindingKind::ALL
                    .iter()
                    .map(|k| (k.label(), self.content.action(*k).label()))
                    .collect::<std::collections::BTreeMap<_, _>>(),
                "max_scan_bytes": self.content.max_scan_bytes,
            },
            "flow": {
                "tools": flow,
                "trifecta": self.flow.trifecta.label(),
                "window": self.flow.window.as_secs(),
            },
        }))
        .to_string()
    }

    /// Whether some rule naming `tool` reads its calls (has a `when`): only then does a call
    /// of it need its facts read.
    pub fn reads_calls(&self, tool: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.when.is_some() && r.tool.matches(tool))
    }

    /// Decides what happens to a call with these facts, whose tool's hints come from
    /// `hints`: the first rule that matches decides, else the hints (`auto`).
    ///
    /// A rule whose `when` cannot be evaluated neither matches nor is passed over: the call
    /// gets the stricter of what that rule would decide and what the rules after it decide
    /// (deny, then held without grants, held, shadow, forward), so a failure never opens the
    /// gate wider than either reading. A failing `confirm` or `deny` therefore holds or denies;
    /// a failing `auto` holds what the hints hold; a failing `shadow` at least records; a
    /// failing `allow` leaves the call to the rules after it.
    pub fn decide(&self, facts: &CallFacts<'_>, hints: HintSource<'_>) -> Decided {
        let mut failures = Vec::new();
        // The strictest decision of the rules that failed on the way.
        let mut floor: Option<Decided> = None;
        let mut decided = None;
        for (index, rule) in self.rules.iter().enumerate() {
            if !rule.tool.matches(facts.tool) {
                continue;
            }
            match rule.when.as_ref().map(|when| when.matches(facts)) {
                None | Some(Ok(true)) => {
                    decided = Some(self.by_rule(index, rule, hints));
                    break;
                }
                Some(Ok(false)) => {}
                Some(Err(why)) => {
                    failures.push((index, why));
                    floor = Some(stricter(floor, self.by_rule(index, rule, hints)));
                }
            }
        }
        let decided = decided.unwrap_or_else(|| Decided {
            decision: self.apply(GateMode::Auto, hints),
            rule: None,
            reason: None,
            ttl: self.default_ttl,
            failures: Vec::new(),
            grants: true,
            trifecta: false,
        });
        self.judge_flow(
            facts,
            Decided {
                failures,
                ..stricter(floor, decided)
            },
        )
    }

    /// The lethal-trifecta rule over what the rules decided: a call that sends data out from
    /// a flow holding untrusted content and private data is held (no grant stands in for
    /// the person), or recorded as such in shadow mode; a held or denied call stays so.
    fn judge_flow(&self, facts: &CallFacts<'_>, decided: Decided) -> Decided {
        let Some(flow) = facts.flow else {
            return decided;
        };
        let labels = self.flow.labels(facts.tool, facts.hints).0;
        if !flow.trifecta(labels) {
            return decided;
        }
        self.held_for_flow(decided)
    }

    /// `decided` as a flow rule that matched the call makes it (the lethal trifecta, or a
    /// secret the agent read now sent out): held with no grant standing in, or recorded as
    /// such in shadow mode; a held or denied call stays so, and is told why.
    pub fn held_for_flow(&self, mut decided: Decided) -> Decided {
        if self.flow.trifecta == TrifectaMode::Off {
            return decided;
        }
        decided.trifecta = true;
        // Whatever else holds the call, no grant stands in for the person here.
        if self.flow.trifecta == TrifectaMode::Hold {
            decided.grants = false;
        }
        match (decided.decision, self.flow.trifecta) {
            (GateDecision::Forward | GateDecision::Shadow, TrifectaMode::Hold) => {
                decided.decision = GateDecision::Confirm(HoldReason::Flow);
                decided.grants = false;
            }
            (GateDecision::Forward, _) => decided.decision = GateDecision::Shadow,
            _ => {}
        }
        decided
    }

    /// What `rule` (at `index`) decides for a call it matches.
    fn by_rule(&self, index: usize, rule: &PolicyRule, hints: HintSource<'_>) -> Decided {
        Decided {
            decision: self.apply(rule.mode, hints),
            rule: Some(index),
            reason: rule.reason.clone(),
            ttl: rule.ttl.unwrap_or(self.default_ttl),
            failures: Vec::new(),
            grants: rule.grants,
            trifecta: false,
        }
    }

    /// How `tool` is listed: hidden when every call of it is denied (the first rule naming
    /// it without a `when` denies, and only `deny` rules come before it), gated when some call
    /// of it may be held, else plain.
    pub fn listing(&self, tool: &str, hints: HintSource<'_>) -> Listing {
        let mut gated = false;
        let mut all_denied = true;
        for rule in self.rules.iter().filter(|r| r.tool.matches(tool)) {
            let decision = self.apply(rule.mode, hints);
            if rule.when.is_none() {
                return match decision {
                    GateDecision::Deny if all_denied => Listing::Hidden,
                    GateDecision::Confirm(_) => Listing::Gated,
                    _ if gated => Listing::Gated,
                    _ => Listing::Plain,
                };
            }
            gated |= matches!(decision, GateDecision::Confirm(_));
            all_denied &= decision == GateDecision::Deny;
        }
        match self.apply(GateMode::Auto, hints) {
            GateDecision::Confirm(_) => Listing::Gated,
            _ if gated => Listing::Gated,
            _ => Listing::Plain,
        }
    }

    /// What `mode` means for a tool whose hints come from `hints`: under `auto` a call is
    /// gated when, effectively, the tool is not read-only and destructive, or (with
    /// open-world gating on) open-world.
    fn apply(&self, mode: GateMode, hints: HintSource<'_>) -> GateDecision {
        match mode {
            GateMode::Allow => GateDecision::Forward,
            GateMode::Confirm => GateDecision::Confirm(HoldReason::Policy),
            GateMode::Deny => GateDecision::Deny,
            GateMode::Shadow => GateDecision::Shadow,
            GateMode::Auto => {
                let h = hints.effective();
                if !h.read_only && h.destructive {
                    let declared =
                        matches!(hints, HintSource::Trusted(a) if a.destructive_hint == Some(true));
                    GateDecision::Confirm(HoldReason::Destructive { declared })
                } else if self.gate_open_world && h.open_world {
                    GateDecision::Confirm(HoldReason::OpenWorld)
                } else {
                    GateDecision::Forward
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const NO_ARGS: &Value = &Value::Null;

    fn facts<'a>(tool: &'a str, args: &'a Value) -> CallFacts<'a> {
        CallFacts {
            tool,
            module: tool.split("__").next().unwrap_or_default(),
            args,
            caller: "alice",
            groups: &[],
            hints: EffectiveHints::DEFAULTS,
            flow: None,
        }
    }

    /// The decision for a call of `tool` without arguments.
    fn decide(policy: &GatePolicy, tool: &str, hints: HintSource<'_>) -> GateDecision {
        policy.decide(&facts(tool, NO_ARGS), hints).decision
    }

    #[test]
    fn an_unannotated_tool_is_gated() {
        let policy = GatePolicy::default();
        assert_eq!(
            decide(&policy, "fs__write", HintSource::Untrusted),
            GateDecision::Confirm(HoldReason::Destructive { declared: false })
        );
        let empty = ToolAnnotations::default();
        assert_eq!(
            decide(&policy, "fs__write", HintSource::Trusted(&empty)),
            GateDecision::Confirm(HoldReason::Destructive { declared: false })
        );
        let destructive = ToolAnnotations::destructive();
        assert_eq!(
            decide(&policy, "fs__write", HintSource::Trusted(&destructive)),
            GateDecision::Confirm(HoldReason::Destructive { declared: true }),
            "a trusted module's own destructiveHint is what the person is told"
        );
    }

    #[test]
    fn trusted_read_only_hints_ungate_a_tool() {
        let policy = GatePolicy::default();
        let ro = ToolAnnotations::read_only_idempotent();
        assert_eq!(
            decide(&policy, "fs__read", HintSource::Trusted(&ro)),
            GateDecision::Forward
        );
        let not_destructive = ToolAnnotations {
            read_only_hint: Some(false),
            destructive_hint: Some(false),
            ..ToolAnnotations::default()
        };
        assert_eq!(
            decide(&policy, "fs__append", HintSource::Trusted(&not_destructive)),
            GateDecision::Forward
        );
    }

    /// The module says read-only, but the operator does not trust its annotations, so the
    /// MCP defaults apply and the tool is gated.
    #[test]
    fn an_untrusted_modules_read_only_hint_does_not_ungate_a_tool() {
        let policy = GatePolicy::default();
        // What the mcp-http layer passes for a module with trust_annotations = false,
        // whatever the module claimed.
        assert_eq!(
            decide(&policy, "evil__read", HintSource::Untrusted),
            GateDecision::Confirm(HoldReason::Destructive { declared: false })
        );
    }

    #[test]
    fn policy_allow_confirm_and_deny_override_hints() {
        let ro = ToolAnnotations::read_only_idempotent();
        let destructive = ToolAnnotations::destructive();
        let policy = GatePolicy::default()
            .with_rule(PolicyRule::new("a__rm", GateMode::Allow))
            .with_rule(PolicyRule::new("a__read", GateMode::Confirm))
            .with_rule(PolicyRule::new("a__list", GateMode::Deny));
        let cases = [
            (
                "a__rm",
                HintSource::Trusted(&destructive),
                GateDecision::Forward,
            ),
            ("a__rm", HintSource::Untrusted, GateDecision::Forward),
            (
                "a__read",
                HintSource::Trusted(&ro),
                GateDecision::Confirm(HoldReason::Policy),
            ),
            ("a__list", HintSource::Trusted(&ro), GateDecision::Deny),
            ("a__other", HintSource::Trusted(&ro), GateDecision::Forward),
        ];
        for (tool, hints, want) in cases {
            assert_eq!(decide(&policy, tool, hints), want, "{tool}");
        }
    }

    #[test]
    fn open_world_gating_is_off_by_default_and_gates_open_world_tools_when_on() {
        let search = ToolAnnotations {
            open_world_hint: Some(true),
            ..ToolAnnotations::read_only_idempotent()
        };
        let closed = ToolAnnotations {
            open_world_hint: Some(false),
            ..ToolAnnotations::read_only_idempotent()
        };
        let off = GatePolicy::default();
        let on = GatePolicy::default().with_open_world_gating();
        assert_eq!(
            decide(&off, "web__search", HintSource::Trusted(&search)),
            GateDecision::Forward
        );
        assert_eq!(
            decide(&on, "web__search", HintSource::Trusted(&search)),
            GateDecision::Confirm(HoldReason::OpenWorld)
        );
        assert_eq!(
            decide(&on, "db__read", HintSource::Trusted(&closed)),
            GateDecision::Forward
        );
    }

    #[test]
    fn ttl_comes_from_the_tools_rule_else_the_default() {
        let policy = GatePolicy::default()
            .with_default_ttl(Duration::minutes(5))
            .with_rule(PolicyRule::new("a__rm", GateMode::Confirm).ttl(Duration::seconds(30)));
        let ttl = |policy: &GatePolicy, tool| {
            policy
                .decide(&facts(tool, NO_ARGS), HintSource::Untrusted)
                .ttl
        };
        assert_eq!(ttl(&policy, "a__rm"), Duration::seconds(30));
        assert_eq!(ttl(&policy, "a__other"), Duration::minutes(5));
        assert_eq!(ttl(&GatePolicy::default(), "x"), DEFAULT_CONFIRMATION_TTL);
    }

    #[test]
    fn gate_modes_use_lowercase_config_labels() {
        let modes: Vec<GateMode> =
            serde_json::from_str(r#"["auto","confirm","allow","deny","shadow"]"#).unwrap();
        assert_eq!(
            modes,
            [
                GateMode::Auto,
                GateMode::Confirm,
                GateMode::Allow,
                GateMode::Deny,
                GateMode::Shadow
            ]
        );
        for mode in modes {
            assert_eq!(serde_json::to_value(mode).unwrap(), mode.label());
        }
    }

    fn when(source: &str) -> When {
        When::compile(source).unwrap()
    }

    /// The issue's example: writes under the scratch directory run, `..` is refused, other
    /// writes ask; the first rule that matches decides.
    #[test]
    fn the_first_matching_rule_decides_and_prefixes_name_every_tool_they_start() {
        let policy = GatePolicy::default()
            .with_rule(
                PolicyRule::new("fs__*", GateMode::Deny)
                    .when(when("args.path.contains('..')"))
                    .reason("no parent directories"),
            )
            .with_rule(
                PolicyRule::new("fs__write_file", GateMode::Allow)
                    .when(when("args.path.startsWith('/srv/shared/tmp/')")),
            )
            .with_rule(PolicyRule::new("fs__write_file", GateMode::Confirm));
        let case = |path: &str| {
            let args = json!({ "path": path });
            let d = policy.decide(&facts("fs__write_file", &args), HintSource::Untrusted);
            (d.decision, d.rule, d.reason)
        };
        assert_eq!(
            case("/srv/shared/tmp/a"),
            (GateDecision::Forward, Some(1), None)
        );
        assert_eq!(
            case("/srv/shared/tmp/../../etc/passwd"),
            (
                GateDecision::Deny,
                Some(0),
                Some("no parent directories".into())
            )
        );
        assert_eq!(
            case("/home/a"),
            (GateDecision::Confirm(HoldReason::Policy), Some(2), None)
        );
        // The prefix names the module's other tools too; a tool no rule names is `auto`.
        let args = json!({"path": "/a/../b"});
        let read = policy.decide(&facts("fs__read_file", &args), HintSource::Untrusted);
        assert_eq!((read.decision, read.rule), (GateDecision::Deny, Some(0)));
        let other = policy.decide(&facts("git__push", &args), HintSource::Untrusted);
        assert_eq!(other.rule, None);
        assert_eq!(
            other.decision,
            GateDecision::Confirm(HoldReason::Destructive { declared: false })
        );
    }

    /// A `when` that cannot be evaluated never opens the gate: the call gets the stricter of
    /// what its rule decides and what the rules after it decide.
    #[test]
    fn a_when_that_cannot_be_evaluated_never_opens_the_gate() {
        let ro = ToolAnnotations::read_only_idempotent();
        let broken = "args.path.startsWith('/tmp/')";
        // `path` is a number: a type error. Missing: no such key.
        for args in [json!({"path": 7}), json!({})] {
            for (mode, fallback, want, rule) in [
                (
                    GateMode::Allow,
                    GateMode::Confirm,
                    GateDecision::Confirm(HoldReason::Policy),
                    Some(1),
                ),
                (
                    GateMode::Shadow,
                    GateMode::Confirm,
                    GateDecision::Confirm(HoldReason::Policy),
                    Some(1),
                ),
                (GateMode::Auto, GateMode::Deny, GateDecision::Deny, Some(1)),
                (
                    GateMode::Confirm,
                    GateMode::Allow,
                    GateDecision::Confirm(HoldReason::Policy),
                    Some(0),
                ),
                (GateMode::Deny, GateMode::Allow, GateDecision::Deny, Some(0)),
            ] {
                let policy = GatePolicy::default()
                    .with_rule(PolicyRule::new("t__x", mode).when(when(broken)))
                    .with_rule(PolicyRule::new("t__x", fallback));
                let d = policy.decide(&facts("t__x", &args), HintSource::Trusted(&ro));
                assert_eq!((d.decision, d.rule), (want, rule), "{mode:?} with {args}");
                assert_eq!(d.failures.len(), 1, "the failure is reported: {mode:?}");
                assert_eq!(d.failures[0].0, 0);
            }
        }
        // A result that is not a boolean is a failure too.
        let policy = GatePolicy::default()
            .with_rule(PolicyRule::new("t__x", GateMode::Allow).when(when("args.path")));
        let args = json!({"path": "/tmp/a"});
        let d = policy.decide(&facts("t__x", &args), HintSource::Untrusted);
        assert_eq!(
            d.decision,
            GateDecision::Confirm(HoldReason::Destructive { declared: false })
        );
        assert_eq!(d.rule, None);
    }

    /// The attacker's reading: `auto when args.amount > 100` then `allow`, and an amount sent
    /// as a string. The failing `auto` used to be passed over, and `allow` paid 5000.
    #[test]
    fn a_failing_auto_or_shadow_rule_does_not_let_a_later_rule_open_the_gate() {
        let ro = ToolAnnotations::read_only_idempotent();
        let pay = |mode| {
            GatePolicy::default()
                .with_rule(PolicyRule::new("bank__pay", mode).when(when("args.amount > 100")))
                .with_rule(PolicyRule::new("bank__pay", GateMode::Allow))
        };
        let args = json!({"amount": "5000"});
        let f = facts("bank__pay", &args);
        let d = pay(GateMode::Auto).decide(&f, HintSource::Untrusted);
        assert_eq!(
            (d.decision, d.rule),
            (
                GateDecision::Confirm(HoldReason::Destructive { declared: false }),
                Some(0)
            ),
            "held by the hints, as if auto had matched"
        );
        assert_eq!(d.failures.len(), 1);
        // Hints that forward forward either way (the later allow is not stricter).
        let d = pay(GateMode::Auto).decide(&f, HintSource::Trusted(&ro));
        assert_eq!(d.decision, GateDecision::Forward);
        // A failing shadow records what it would have held.
        let d = pay(GateMode::Shadow).decide(&f, HintSource::Untrusted);
        assert_eq!((d.decision, d.rule), (GateDecision::Shadow, Some(0)));
        // A number still compares and decides as written.
        let small = json!({"amount": 5});
        let d = pay(GateMode::Auto).decide(&facts("bank__pay", &small), HintSource::Untrusted);
        assert_eq!((d.decision, d.rule), (GateDecision::Forward, Some(1)));
        // A failing confirm before a deny: the deny, not a hold a person could approve.
        let policy = GatePolicy::default()
            .with_rule(
                PolicyRule::new("bank__pay", GateMode::Confirm).when(when("args.amount > 100")),
            )
            .with_rule(PolicyRule::new("bank__pay", GateMode::Deny));
        let d = policy.decide(&f, HintSource::Untrusted);
        assert_eq!((d.decision, d.rule), (GateDecision::Deny, Some(1)));
        // Two holds: the one without grants.
        let policy = GatePolicy::default()
            .with_rule(PolicyRule::new("bank__pay", GateMode::Auto).when(when("args.amount > 100")))
            .with_rule(PolicyRule::new("bank__pay", GateMode::Confirm).without_grants());
        let d = policy.decide(&f, HintSource::Untrusted);
        assert_eq!((d.rule, d.grants), (Some(1), false));
    }

    /// The attacker's reading of item 1: a `deny` compared with `true` is talked past by the
    /// string form, a number, or a word a lax module reads as true; a `deny` compared with a
    /// string by a list holding it.
    #[test]
    fn a_deny_rule_is_not_talked_past_by_changing_a_json_type() {
        let policy = GatePolicy::default()
            .with_rule(
                PolicyRule::new("fs__rm", GateMode::Deny)
                    .when(when("has(args.force) && args.force == true")),
            )
            .with_rule(
                PolicyRule::new("fs__rm", GateMode::Deny).when(when("args.target == 'prod'")),
            )
            .with_rule(
                PolicyRule::new("fs__rm", GateMode::Deny)
                    .when(when("has(args.env) && args.env in ['prod', 'production']")),
            )
            .with_rule(PolicyRule::new("fs__rm", GateMode::Allow));
        let ro = ToolAnnotations::read_only_idempotent();
        let decide = |args: Value| {
            policy
                .decide(&facts("fs__rm", &args), HintSource::Trusted(&ro))
                .decision
        };
        for args in [
            json!({"force": true, "target": "dev"}),
            json!({"force": "true", "target": "dev"}),
            json!({"force": 1, "target": "dev"}),
            json!({"force": "yes", "target": "dev"}),
            json!({"force": [true], "target": "dev"}),
            json!({"target": ["prod"]}),
            json!({"target": {"name": "prod"}}),
            json!({"target": "prod"}),
            json!({"target": "dev", "env": ["prod"]}),
            json!({"target": "dev", "env": 1}),
        ] {
            assert_eq!(decide(args.clone()), GateDecision::Deny, "{args}");
        }
        for args in [
            json!({"force": false, "target": "dev"}),
            json!({"target": "dev"}),
            json!({"target": "dev", "env": "staging"}),
        ] {
            assert_eq!(decide(args.clone()), GateDecision::Forward, "{args}");
        }
        // null is another type too: a module may read it as its default.
        for args in [
            json!({"target": "dev", "force": null}),
            json!({"target": null}),
            json!({"target": "dev", "env": null}),
        ] {
            assert_eq!(decide(args.clone()), GateDecision::Deny, "{args}");
        }
    }

    #[test]
    fn shadow_forwards_and_says_so() {
        let policy = GatePolicy::default().with_rule(PolicyRule::new("t__*", GateMode::Shadow));
        let d = policy.decide(&facts("t__rm", NO_ARGS), HintSource::Untrusted);
        assert_eq!((d.decision, d.rule), (GateDecision::Shadow, Some(0)));
        assert_eq!(
            policy.listing("t__rm", HintSource::Untrusted),
            Listing::Plain,
            "a shadowed tool's results are its own"
        );
    }

    #[test]
    fn a_tool_is_hidden_only_when_every_call_of_it_is_denied() {
        let ro = ToolAnnotations::read_only_idempotent();
        let ro = HintSource::Trusted(&ro);
        let deny = |tool| PolicyRule::new(tool, GateMode::Deny);
        let only_deny = GatePolicy::default()
            .with_rule(deny("a__x").when(when("args.n > 1")))
            .with_rule(deny("a__*"));
        assert_eq!(only_deny.listing("a__x", ro), Listing::Hidden);
        let some_allowed = GatePolicy::default()
            .with_rule(PolicyRule::new("a__x", GateMode::Allow).when(when("args.n > 1")))
            .with_rule(deny("a__*"));
        assert_eq!(some_allowed.listing("a__x", ro), Listing::Plain);
        let some_held = GatePolicy::default()
            .with_rule(PolicyRule::new("a__x", GateMode::Confirm).when(when("args.n > 1")))
            .with_rule(PolicyRule::new("a__x", GateMode::Allow));
        assert_eq!(some_held.listing("a__x", ro), Listing::Gated);
        assert_eq!(some_held.listing("b__y", ro), Listing::Plain);
        assert_eq!(
            GatePolicy::default().listing("b__y", HintSource::Untrusted),
            Listing::Gated
        );
    }

    #[test]
    fn the_digest_names_the_policy_in_force() {
        let a = GatePolicy::default().with_rule(PolicyRule::new("a__x", GateMode::Confirm));
        let b = GatePolicy::default().with_rule(PolicyRule::new("a__x", GateMode::Allow));
        let c = GatePolicy::default()
            .with_rule(PolicyRule::new("a__x", GateMode::Confirm).when(when("true")));
        assert_eq!(a.digest(), a.clone().digest());
        assert_eq!(a.digest().len(), 64);
        assert_ne!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
        assert_ne!(a.digest(), GatePolicy::default().digest());
    }

    #[test]
    fn the_lethal_trifecta_holds_a_send_from_a_flow_with_untrusted_and_private_data() {
        use crate::flow::{Flow, FlowLabels, FlowRule};
        let label = |tool: &str, labels: &[FlowLabel]| FlowRule {
            tool: ToolPattern::parse(tool),
            labels: FlowLabels::of(labels.iter().copied()),
        };
        let flow_policy = |trifecta| FlowPolicy {
            rules: vec![
                label("db__*", &[FlowLabel::Private]),
                label("mail__send", &[FlowLabel::SendsOut]),
                label("web__fetch", &[FlowLabel::Untrusted]),
            ],
            trifecta,
            ..FlowPolicy::default()
        };
        let at = time::macros::datetime!(2026-12-05 10:00 UTC);
        let mut poisoned = Flow::default();
        poisoned.record("web__fetch", FlowLabels::of([FlowLabel::Untrusted]), at);
        poisoned.record("db__query", FlowLabels::of([FlowLabel::Private]), at);
        let mut clean = Flow::default();
        clean.record("db__query", FlowLabels::of([FlowLabel::Private]), at);
        let read_only = ToolAnnotations {
            read_only_hint: Some(true),
            ..Default::default()
        };
        let ro = HintSource::Trusted(&read_only);
        let decide_in = |policy: &GatePolicy, tool: &str, flow: &Flow| {
            policy.decide(
                &CallFacts {
                    flow: Some(flow),
                    hints: ro.effective(),
                    ..facts(tool, NO_ARGS)
                },
                ro,
            )
        };
        let hold = GatePolicy::default()
            .with_rule(PolicyRule::new("mail__send", GateMode::Allow))
            .with_flow(flow_policy(TrifectaMode::Hold));
        let held = decide_in(&hold, "mail__send", &poisoned);
        assert_eq!(
            held.decision,
            GateDecision::Confirm(HoldReason::Flow),
            "even allowed"
        );
        assert!(held.trifecta && !held.grants, "no grant stands in");
        assert_eq!(
            decide_in(&hold, "mail__send", &clean).decision,
            GateDecision::Forward,
            "private data alone"
        );
        assert_eq!(
            decide_in(&hold, "db__query", &poisoned).decision,
            GateDecision::Forward,
            "a tool that sends nothing out"
        );
        // A call held or denied for another reason stays so, and is told the trail.
        let deny = GatePolicy::default()
            .with_rule(PolicyRule::new("mail__send", GateMode::Deny))
            .with_flow(flow_policy(TrifectaMode::Hold));
        assert_eq!(
            decide_in(&deny, "mail__send", &poisoned).decision,
            GateDecision::Deny
        );
        let confirm = GatePolicy::default()
            .with_rule(PolicyRule::new("mail__send", GateMode::Confirm))
            .with_flow(flow_policy(TrifectaMode::Hold));
        let confirmed = decide_in(&confirm, "mail__send", &poisoned);
        assert_eq!(
            confirmed.decision,
            GateDecision::Confirm(HoldReason::Policy)
        );
        assert!(
            confirmed.trifecta && !confirmed.grants,
            "no grant stands in either"
        );
        // Shadow records it; off does nothing.
        let shadow = GatePolicy::default().with_flow(flow_policy(TrifectaMode::Shadow));
        assert_eq!(
            decide_in(&shadow, "mail__send", &poisoned).decision,
            GateDecision::Shadow
        );
        let off = GatePolicy::default().with_flow(flow_policy(TrifectaMode::Off));
        assert_eq!(
            decide_in(&off, "mail__send", &poisoned).decision,
            GateDecision::Forward
        );
        assert!(hold.reads_flow("mail__send", ro.effective()));
        assert!(!off.reads_flow("mail__send", ro.effective()));
        assert_ne!(hold.digest(), off.digest());
    }
}
