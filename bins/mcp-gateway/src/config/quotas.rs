//! `[[quotas]]` and `[[tool_costs]]`: how many calls, or cost units, the calls of a tool
//! pattern may take per caller or for everyone over a UTC minute, hour or day (counted in
//! the store: on PostgreSQL shared by every instance).

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// One `[[quotas]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QuotaConfig {
    /// A qualified tool name, or a prefix ending in `*`.
    pub(crate) tools: String,
    /// `"caller"` (each caller's calls apart, the default) or `"everyone"` (all together).
    #[serde(default = "default_per")]
    pub(crate) per: String,
    /// `"minute"`, `"hour"` or `"day"` (UTC).
    pub(crate) window: String,
    /// At most this many calls per window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) calls: Option<i64>,
    /// At most this many cost units per window (each call its tool's `[[tool_costs]]`, or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost: Option<i64>,
}

fn default_per() -> String {
    "caller".into()
}

/// One `[[tool_costs]]` entry: the cost of one call of the tools a pattern matches.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolCostConfig {
    /// A qualified tool name, or a prefix ending in `*` (the first matching decides).
    pub(crate) tools: String,
    /// Cost units per call (1 to 1,000,000).
    pub(crate) units: i64,
}

/// Most cost units or calls a quota allows per window.
const MAX_LIMIT: i64 = 1_000_000_000;

/// Checks `tools` is a tool pattern as rules write them (`what` names the entry, for errors).
pub(crate) fn pattern(what: &str, tools: &str) -> Result<()> {
    if tools.is_empty()
        || tools.len() > 512
        || tools[..tools.len() - 1].contains('*')
        || tools.chars().any(char::is_control)
    {
        bail!("{what}: tools {tools:?} must be a tool name, or a prefix ending in one '*'");
    }
    Ok(())
}

/// The quotas and costs, checked.
pub(crate) fn quotas(
    quotas: &[QuotaConfig],
    costs: &[ToolCostConfig],
) -> Result<mcp_gate::quotas::Quotas> {
    use mcp_gate::quotas::{QuotaPer, QuotaRule, QuotaUnit, ToolCost};
    let mut rules = Vec::new();
    for q in quotas {
        let what = format!("[[quotas]] for {:?}", q.tools);
        pattern(&what, &q.tools)?;
        let per = match q.per.as_str() {
            "caller" => QuotaPer::Caller,
            "everyone" => QuotaPer::Everyone,
            other => bail!("{what}: per {other:?} must be \"caller\" or \"everyone\""),
        };
        let Some(window) = elicitation_store::QuotaWindow::from_label(&q.window) else {
            bail!(
                "{what}: window {:?} must be \"minute\", \"hour\" or \"day\"",
                q.window
            );
        };
        let (unit, limit) = match (q.calls, q.cost) {
            (Some(calls), None) => (QuotaUnit::Calls, calls),
            (None, Some(cost)) => (QuotaUnit::Cost, cost),
            _ => bail!("{what}: give exactly one of calls and cost"),
        };
        if !(0..=MAX_LIMIT).contains(&limit) {
            bail!("{what}: the limit must be 0 to {MAX_LIMIT}");
        }
        rules.push(QuotaRule {
            tools: q.tools.clone(),
            per,
            window,
            unit,
            limit,
        });
    }
    let mut tool_costs = Vec::new();
    for c in costs {
        let what = format!("[[tool_costs]] for {:?}", c.tools);
        pattern(&what, &c.tools)?;
        if !(1..=1_000_000).contains(&c.units) {
            bail!("{what}: units must be 1 to 1000000");
        }
        tool_costs.push(ToolCost {
            tools: c.tools.clone(),
            units: c.units,
        });
    }
    Ok(mcp_gate::quotas::Quotas {
        rules,
        costs: tool_costs,
    })
}
