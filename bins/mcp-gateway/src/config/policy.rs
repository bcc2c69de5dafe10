//! `[[policy]]`: a rule of the gate.
use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyConfig {
    pub(crate) tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) when: Option<String>,
    #[serde(default)]
    pub(crate) gate: gating_core::GateMode,
    #[serde(default, with = "duration::option")]
    pub(crate) ttl: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// Whether a person approving a call this rule holds may grant later ones too.
    #[serde(default = "yes")]
    pub(crate) grants: bool,
}

fn yes() -> bool {
    true
}

impl PolicyConfig {
    /// The rule, checked: its tool a name or a prefix, its `when` compiled, its reason short
    /// plain text. `index` is its place among the `[[policy]]` rules (from 0), for errors.
    pub(crate) fn resolve(&self, index: usize) -> Result<gating_core::PolicyRule> {
        let name = format!("[[policy]] rule {index} (tool = {:?})", self.tool);
        if self.tool.is_empty() || self.tool[..self.tool.len() - 1].contains('*') {
            bail!("{name}: tool must be a tool name, or a prefix ending in one '*'");
        }
        if self.ttl.is_some_and(|t| t < Duration::from_secs(1)) {
            bail!("{name}: ttl must be at least 1s");
        }
        let mut rule = gating_core::PolicyRule::new(&self.tool, self.gate);
        if let Some(ttl) = self.ttl {
            rule = rule.ttl(time::Duration::try_from(ttl).unwrap_or(time::Duration::DAY));
        }
        if let Some(when) = &self.when {
            let compiled = gating_core::When::compile(when)
                .map_err(|e| anyhow::anyhow!("{name}: when: {e}"))?;
            rule = rule.when(compiled);
        }
        if let Some(reason) = &self.reason {
            if reason.trim().is_empty()
                || reason.chars().count() > 500
                || reason.chars().any(char::is_control)
            {
                bail!(
                    "{name}: reason must be 1 to 500 characters of plain text (it is told to the agent)"
                );
            }
            rule = rule.reason(reason.trim());
        }
        if !self.grants {
            rule = rule.without_grants();
        }
        Ok(rule)
    }
}

/// `[flow]`: how tools are labelled and flows judged (docs/guardrails.md).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlowConfig {
    /// What the lethal-trifecta rule does: `hold`, `shadow` or `off`.
    #[serde(default = "default_trifecta")]
    pub(crate) trifecta: String,
    /// How long a call's touch stays in its caller's flow.
    #[serde(default = "default_window", with = "duration")]
    pub(crate) window: Duration,
    /// `[[flow.tools]]`: the labels of the tools a pattern names (the first that matches).
    #[serde(default)]
    pub(crate) tools: Vec<FlowToolConfig>,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            trifecta: default_trifecta(),
            window: default_window(),
            tools: Vec::new(),
        }
    }
}

fn default_trifecta() -> String {
    gating_core::TrifectaMode::Hold.label().to_owned()
}

fn default_window() -> Duration {
    gating_core::flow::DEFAULT_FLOW_WINDOW
}

/// `[[flow.tools]]`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlowToolConfig {
    pub(crate) tool: String,
    pub(crate) labels: Vec<String>,
}

impl FlowConfig {
    /// The flow policy, checked: the mode known, the window between a minute and a week,
    /// each entry's tool a name or a prefix and its labels known ones.
    pub(crate) fn resolve(&self) -> Result<gating_core::FlowPolicy> {
        let Some(trifecta) = gating_core::TrifectaMode::from_label(&self.trifecta) else {
            bail!(
                "[flow] trifecta must be \"hold\", \"shadow\" or \"off\", not {:?}",
                self.trifecta
            );
        };
        if self.window < Duration::from_secs(60) || self.window > Duration::from_secs(7 * 86_400) {
            bail!("[flow] window must be between 1m and 7d");
        }
        let mut rules = Vec::with_capacity(self.tools.len());
        for (index, entry) in self.tools.iter().enumerate() {
            let name = format!("[[flow.tools]] entry {index} (tool = {:?})", entry.tool);
            if entry.tool.is_empty() || entry.tool[..entry.tool.len() - 1].contains('*') {
                bail!("{name}: tool must be a tool name, or a prefix ending in one '*'");
            }
            let mut labels = Vec::with_capacity(entry.labels.len());
            for label in &entry.labels {
                let Some(known) = gating_core::FlowLabel::from_label(label) else {
                    bail!(
                        "{name}: unknown label {label:?} (the labels are \"untrusted\", \"private\" and \"sends_out\")"
                    );
                };
                labels.push(known);
            }
            rules.push(gating_core::FlowRule {
                tool: gating_core::ToolPattern::parse(&entry.tool),
                labels: gating_core::FlowLabels::of(labels),
            });
        }
        Ok(gating_core::FlowPolicy {
            rules,
            trifecta,
            window: self.window,
        })
    }
}

/// `[content]`: what results are scanned for, and done with (docs/guardrails.md). Unknown
/// keys are refused by [`ContentConfig::resolve`] (serde's own check cannot go with the
/// flattened map).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ContentConfig {
    /// Results larger than this are not scanned (a `too_large` finding).
    #[serde(
        default,
        with = "bytes::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) max_scan_bytes: Option<usize>,
    /// How long a result held for a person waits before it is withheld (default 10m).
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) hold_for: Option<Duration>,
    /// The action per kind (`secret = "redact"`); a kind not named keeps its default.
    #[serde(flatten)]
    pub(crate) actions: std::collections::BTreeMap<String, String>,
}

impl ContentConfig {
    /// The content policy, checked: every key a kind, every value an action.
    pub(crate) fn resolve(&self) -> Result<gating_core::ContentPolicy> {
        let mut policy = gating_core::ContentPolicy::default();
        for (kind, action) in &self.actions {
            let Some(kind) = gating_core::FindingKind::from_label(kind) else {
                let known: Vec<&str> = gating_core::FindingKind::ALL
                    .iter()
                    .map(|k| k.label())
                    .collect();
                bail!(
                    "[content] {kind:?} is not a kind of finding (the kinds are {})",
                    known.join(", ")
                );
            };
            let Some(action) = gating_core::FindingAction::from_label(action) else {
                bail!(
                    "[content] {}: the action must be \"off\", \"redact\", \"label\", \"hold\" or \"block\", not {action:?}",
                    kind.label()
                );
            };
            policy = policy.with(kind, action);
        }
        if let Some(max) = self.max_scan_bytes {
            if max < 1024 {
                bail!("[content] max_scan_bytes must be at least 1KiB");
            }
            policy.max_scan_bytes = max;
        }
        if let Some(hold_for) = self.hold_for {
            if !(Duration::from_secs(10)..=Duration::from_secs(24 * 3600)).contains(&hold_for) {
                bail!("[content] hold_for must be between 10s and 24h");
            }
            policy.hold_for = hold_for;
        }
        Ok(policy)
    }
}
