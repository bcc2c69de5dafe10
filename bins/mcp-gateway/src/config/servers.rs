//! `[[servers]]`: virtual servers, each a team's bundle of tools at an endpoint of its own
//! (`/mcp/{name}`), with who may connect and rules of its own (docs/configuration.md).

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use super::*;

/// One `[[servers]]` entry.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerConfig {
    /// Where it is served: `/mcp/{name}`, the name lowercase letters, digits, `-` and `_`.
    pub(crate) path: String,
    /// The modules it offers whole (their tools, prompts and resources), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) modules: Vec<String>,
    /// The tools (and prompts) it offers besides, as rules name them: a qualified name, or a
    /// prefix ending in `*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<String>,
    /// Who may connect: callers with every one of these scopes …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) scopes: Vec<String>,
    /// … and in at least one of these groups (when any are named).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) groups: Vec<String>,
    /// Mode `jwt`: the issuer (its name or URL) whose word on `groups` counts; without it,
    /// each caller's own issuer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) issuer: Option<String>,
    /// Rules that apply only here, decided before the `[[policy]]` rules (same shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) policy: Vec<PolicyConfig>,
}

/// Most virtual servers.
const MAX_SERVERS: usize = 256;

impl Config {
    /// The virtual servers with their own rules, checked: names unique path segments, each
    /// offering something, of modules that are configured.
    pub(crate) fn servers(
        &self,
    ) -> Result<
        Vec<(
            mcp_gate::servers::VirtualServer,
            Vec<gating_core::PolicyRule>,
        )>,
    > {
        if self.servers.len() > MAX_SERVERS {
            bail!("[[servers]]: at most {MAX_SERVERS}");
        }
        let mut resolved: Vec<(mcp_gate::servers::VirtualServer, _)> = Vec::new();
        for server in &self.servers {
            let what = format!("[[servers]] {:?}", server.path);
            let Some(name) = server.path.strip_prefix("/mcp/") else {
                bail!("{what}: path must be /mcp/ and a name, like \"/mcp/finance\"");
            };
            mcp_gate::servers::check_name(name).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
            if resolved.iter().any(|(s, _)| s.name == name) {
                bail!("{what}: two servers have this path");
            }
            if server.modules.is_empty() && server.tools.is_empty() {
                bail!("{what}: it offers nothing: name modules, tools, or both");
            }
            if let Some(unknown) = server
                .modules
                .iter()
                .find(|m| !self.modules.iter().any(|c| c.name == **m))
            {
                bail!("{what}: module {unknown:?} is not one of [[modules]]");
            }
            for tools in &server.tools {
                pattern(&what, tools)?;
            }
            if let Some(bad) = server
                .scopes
                .iter()
                .chain(&server.groups)
                .find(|s| s.is_empty() || s.len() > 256 || s.chars().any(char::is_control))
            {
                bail!("{what}: scope or group {bad:?} must be 1 to 256 characters");
            }
            if !server.groups.is_empty() && self.auth.mode == AuthMode::None {
                bail!(
                    "{what}: groups need auth mode \"tokens\" or \"jwt\": with \"none\" everyone is the one local caller"
                );
            }
            let groups: Vec<&str> = server.groups.iter().map(String::as_str).collect();
            let groups_from = groups_from(&self.auth, server.issuer.as_deref(), &groups, &what)?;
            let rules = server
                .policy
                .iter()
                .enumerate()
                .map(|(index, rule)| {
                    rule.resolve(index)
                        .map_err(|e| anyhow::anyhow!("{what}: {e}"))
                })
                .collect::<Result<Vec<_>>>()?;
            resolved.push((
                mcp_gate::servers::VirtualServer {
                    name: name.to_owned(),
                    tools: server.tools.clone(),
                    modules: server.modules.clone(),
                    scopes: server.scopes.clone(),
                    groups: server.groups.clone(),
                    groups_from,
                },
                rules,
            ));
        }
        Ok(resolved)
    }
}
