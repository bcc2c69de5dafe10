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
    /// With `per = "group"`: the group whose members' calls count together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<String>,
    /// Mode `jwt`, with `per = "group"`: the issuer (name or URL) whose word on the group
    /// counts; without it, each caller's own issuer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) issuer: Option<String>,
    /// Only the calls made on this virtual server (its name, as in `/mcp/{name}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) server: Option<String>,
    /// `"refuse"` (the default: the call is refused, saying when to try again) or `"ask"` (a
    /// person is asked to allow the one call beyond the quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) past: Option<String>,
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

/// The quotas and costs of `config`, checked.
pub(crate) fn quotas(config: &super::Config) -> Result<mcp_gate::quotas::Quotas> {
    use mcp_gate::quotas::{QuotaPast, QuotaPer, QuotaRule, QuotaUnit, ToolCost};
    let mut rules = Vec::new();
    for q in &config.quotas {
        let what = format!("[[quotas]] for {:?}", q.tools);
        pattern(&what, &q.tools)?;
        let per = match (q.per.as_str(), &q.group) {
            ("caller", None) => QuotaPer::Caller,
            ("everyone", None) => QuotaPer::Everyone,
            ("group", Some(group)) => {
                if group.is_empty() || group.len() > 256 || group.chars().any(char::is_control) {
                    bail!("{what}: group must be 1 to 256 characters");
                }
                if config.auth.mode == super::AuthMode::None {
                    bail!("{what}: a group quota needs auth mode \"tokens\" or \"jwt\"");
                }
                let from = super::groups_from(&config.auth, q.issuer.as_deref(), &[group], &what)?;
                QuotaPer::Group {
                    group: group.clone(),
                    from,
                }
            }
            ("group", None) => bail!("{what}: per = \"group\" needs the group"),
            (_, Some(_)) => bail!("{what}: group is for per = \"group\""),
            (other, None) => {
                bail!("{what}: per {other:?} must be \"caller\", \"group\" or \"everyone\"")
            }
        };
        if q.issuer.is_some() && q.group.is_none() {
            bail!("{what}: issuer is for per = \"group\"");
        }
        if let Some(server) = &q.server
            && !config
                .servers
                .iter()
                .any(|s| s.path.strip_prefix("/mcp/") == Some(server.as_str()))
        {
            bail!(
                "{what}: server {server:?} is not one of [[servers]] (give its name, as in /mcp/{{name}})"
            );
        }
        let past = match q.past.as_deref() {
            None | Some("refuse") => QuotaPast::Refuse,
            Some("ask") => QuotaPast::Ask,
            Some(other) => bail!("{what}: past {other:?} must be \"refuse\" or \"ask\""),
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
            server: q.server.clone(),
            past,
            ..QuotaRule::new(&q.tools, per, window, unit, limit)
        });
    }
    let mut tool_costs = Vec::new();
    for c in &config.tool_costs {
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
