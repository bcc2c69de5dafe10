//! The operator's gate policy and the decision whether a call is gated.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::Duration;

use crate::{EffectiveHints, ToolAnnotations};

/// How long a confirmation waits for a person unless policy says otherwise.
pub const DEFAULT_CONFIRMATION_TTL: Duration = Duration::minutes(10);

/// What the operator decided for one tool.
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
}

/// Why a call is held for a person: what the person (and the agent) are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldReason {
    /// The operator's policy says `confirm` for the tool, whatever its hints.
    Policy,
    /// The tool may change or delete data: its trusted module says it is destructive
    /// (`declared`), or nothing trusted says it is not (the MCP defaults).
    Destructive {
        /// A trusted module annotated the tool `destructiveHint: true`.
        declared: bool,
    },
    /// The tool reaches outside systems and open-world tools are gated.
    OpenWorld,
}

/// The operator's policy for one tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolRule {
    /// The gate mode.
    pub mode: GateMode,
    /// How long its confirmations wait; the policy default when `None`.
    pub ttl: Option<Duration>,
}

/// The gate policy of a gateway: per-tool rules (by qualified tool name) over a default of
/// `auto`, and whether open-world tools are gated too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatePolicy {
    rules: BTreeMap<String, ToolRule>,
    gate_open_world: bool,
    default_ttl: Duration,
}

impl Default for GatePolicy {
    fn default() -> Self {
        GatePolicy {
            rules: BTreeMap::new(),
            gate_open_world: false,
            default_ttl: DEFAULT_CONFIRMATION_TTL,
        }
    }
}

impl GatePolicy {
    /// Adds (or replaces) the rule for one qualified tool name.
    pub fn with_rule(mut self, tool: impl Into<String>, rule: ToolRule) -> Self {
        self.rules.insert(tool.into(), rule);
        self
    }

    /// Also gates every tool whose effective `openWorldHint` is true, read-only or not.
    pub fn with_open_world_gating(mut self) -> Self {
        self.gate_open_world = true;
        self
    }

    /// Sets the confirmation TTL for tools without their own.
    pub fn with_default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// The tools the rules name, with their modes (rules name tools exactly; there are no
    /// patterns, so a rule protects only the name it spells).
    pub fn rules(&self) -> impl Iterator<Item = (&str, GateMode)> {
        self.rules
            .iter()
            .map(|(tool, rule)| (tool.as_str(), rule.mode))
    }

    /// The mode for a tool: its rule's, else `auto`.
    pub fn mode_for(&self, tool: &str) -> GateMode {
        self.rules.get(tool).map(|r| r.mode).unwrap_or_default()
    }

    /// How long a confirmation for this tool waits for a person.
    pub fn ttl_for(&self, tool: &str) -> Duration {
        self.rules
            .get(tool)
            .and_then(|r| r.ttl)
            .unwrap_or(self.default_ttl)
    }

    /// Decides what happens to a call of `tool` whose hints come from `hints`.
    ///
    /// The operator's mode wins; under `auto` a call is gated when, effectively, the tool is
    /// not read-only and destructive, or (with open-world gating on) open-world.
    pub fn decide(&self, tool: &str, hints: HintSource<'_>) -> GateDecision {
        match self.mode_for(tool) {
            GateMode::Allow => GateDecision::Forward,
            GateMode::Confirm => GateDecision::Confirm(HoldReason::Policy),
            GateMode::Deny => GateDecision::Deny,
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

    fn rule(mode: GateMode) -> ToolRule {
        ToolRule { mode, ttl: None }
    }

    #[test]
    fn an_unannotated_tool_is_gated() {
        let policy = GatePolicy::default();
        assert_eq!(
            policy.decide("fs__write", HintSource::Untrusted),
            GateDecision::Confirm(HoldReason::Destructive { declared: false })
        );
        let empty = ToolAnnotations::default();
        assert_eq!(
            policy.decide("fs__write", HintSource::Trusted(&empty)),
            GateDecision::Confirm(HoldReason::Destructive { declared: false })
        );
        let destructive = ToolAnnotations::destructive();
        assert_eq!(
            policy.decide("fs__write", HintSource::Trusted(&destructive)),
            GateDecision::Confirm(HoldReason::Destructive { declared: true }),
            "a trusted module's own destructiveHint is what the person is told"
        );
    }

    #[test]
    fn trusted_read_only_hints_ungate_a_tool() {
        let policy = GatePolicy::default();
        let ro = ToolAnnotations::read_only_idempotent();
        assert_eq!(
            policy.decide("fs__read", HintSource::Trusted(&ro)),
            GateDecision::Forward
        );
        let not_destructive = ToolAnnotations {
            read_only_hint: Some(false),
            destructive_hint: Some(false),
            ..ToolAnnotations::default()
        };
        assert_eq!(
            policy.decide("fs__append", HintSource::Trusted(&not_destructive)),
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
            policy.decide("evil__read", HintSource::Untrusted),
            GateDecision::Confirm(HoldReason::Destructive { declared: false })
        );
    }

    #[test]
    fn policy_allow_confirm_and_deny_override_hints() {
        let ro = ToolAnnotations::read_only_idempotent();
        let destructive = ToolAnnotations::destructive();
        let policy = GatePolicy::default()
            .with_rule("a__rm", rule(GateMode::Allow))
            .with_rule("a__read", rule(GateMode::Confirm))
            .with_rule("a__list", rule(GateMode::Deny));
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
            assert_eq!(policy.decide(tool, hints), want, "{tool}");
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
            off.decide("web__search", HintSource::Trusted(&search)),
            GateDecision::Forward
        );
        assert_eq!(
            on.decide("web__search", HintSource::Trusted(&search)),
            GateDecision::Confirm(HoldReason::OpenWorld)
        );
        assert_eq!(
            on.decide("db__read", HintSource::Trusted(&closed)),
            GateDecision::Forward
        );
    }

    #[test]
    fn ttl_comes_from_the_tools_rule_else_the_default() {
        let policy = GatePolicy::default()
            .with_default_ttl(Duration::minutes(5))
            .with_rule(
                "a__rm",
                ToolRule {
                    mode: GateMode::Confirm,
                    ttl: Some(Duration::seconds(30)),
                },
            );
        assert_eq!(policy.ttl_for("a__rm"), Duration::seconds(30));
        assert_eq!(policy.ttl_for("a__other"), Duration::minutes(5));
        assert_eq!(GatePolicy::default().ttl_for("x"), DEFAULT_CONFIRMATION_TTL);
    }

    #[test]
    fn gate_modes_use_lowercase_config_labels() {
        let modes: Vec<GateMode> =
            serde_json::from_str(r#"["auto","confirm","allow","deny"]"#).unwrap();
        assert_eq!(
            modes,
            [
                GateMode::Auto,
                GateMode::Confirm,
                GateMode::Allow,
                GateMode::Deny
            ]
        );
    }
}
