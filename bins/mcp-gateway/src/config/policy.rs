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
