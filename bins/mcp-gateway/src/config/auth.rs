//! `[auth]`, `[auth.jwt]` (issuers, scopes, single sign-on), `[[auth.tokens]]` and
//! `[[approvers]]`.
use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Serialize, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AuthMode {
    #[default]
    None,
    Tokens,
    Jwt,
}

#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthConfig {
    #[serde(default)]
    pub(crate) mode: AuthMode,
    #[serde(default)]
    pub(crate) tokens: Vec<TokenConfig>,
    /// Mode `jwt`: `[auth.jwt]`.
    pub(crate) jwt: Option<JwtConfig>,
}

/// `[auth.jwt]`: the gateway as an OAuth resource server.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JwtConfig {
    /// The gateway's resource URL (the audience tokens must carry).
    pub(crate) resource: String,
    /// A claim naming the caller's tenant.
    pub(crate) tenant_claim: Option<String>,
    /// The claim listing the caller's groups.
    #[serde(default = "default_groups_claim")]
    pub(crate) groups_claim: String,
    #[serde(default = "default_leeway", with = "duration")]
    pub(crate) leeway: Duration,
    #[serde(default)]
    pub(crate) scopes: JwtScopes,
    #[serde(default)]
    pub(crate) issuers: Vec<JwtIssuer>,
    /// Single sign-on for the approvals page.
    pub(crate) sso: Option<SsoConfig>,
}

/// `[auth.jwt.sso]`: the approvals page signs people in at an issuer (OpenID Connect,
/// authorization code with PKCE). The client secret, if any, comes from the environment
/// (`MCP_GATEWAY_OIDC_CLIENT_SECRET`), never this file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SsoConfig {
    /// One of the issuers (default: the first).
    pub(crate) issuer: Option<String>,
    pub(crate) client_id: String,
    /// The gateway's URL as people reach it (default: the resource's origin).
    pub(crate) base_url: Option<String>,
}

/// Where the approvals page's OpenID Connect client secret is read from.
pub(crate) const OIDC_SECRET_ENV: &str = "MCP_GATEWAY_OIDC_CLIENT_SECRET";

impl JwtConfig {
    /// The page's single sign-on, if configured.
    pub(crate) fn sso(&self) -> Result<Option<mcp_approvals::oidc::SsoConfig>> {
        let Some(sso) = &self.sso else {
            return Ok(None);
        };
        let issuer = match &sso.issuer {
            Some(issuer) => {
                if !self.issuers.iter().any(|i| &i.issuer == issuer) {
                    bail!("[auth.jwt.sso] issuer {issuer:?} is not one of [[auth.jwt.issuers]]");
                }
                issuer.clone()
            }
            None => match self.issuers.first() {
                Some(first) => first.issuer.clone(),
                None => bail!("[auth.jwt.sso] needs an issuer in [[auth.jwt.issuers]]"),
            },
        };
        if sso.client_id.trim().is_empty() {
            bail!("[auth.jwt.sso] client_id is empty");
        }
        let base = match &sso.base_url {
            Some(base) => base.trim_end_matches('/').to_owned(),
            None => {
                let (scheme, rest) = self.resource.split_once("://").unwrap_or(("https", ""));
                format!("{scheme}://{}", rest.split('/').next().unwrap_or_default())
            }
        };
        if !mcp_fetch::secure_or_loopback(&base) {
            bail!("[auth.jwt.sso] base_url {base:?} must be https:// (http:// only on loopback)");
        }
        Ok(Some(mcp_approvals::oidc::SsoConfig {
            issuer,
            client_id: sso.client_id.clone(),
            client_secret: std::env::var(OIDC_SECRET_ENV)
                .ok()
                .filter(|s| !s.is_empty()),
            redirect_url: format!("{base}/approvals/oidc/callback"),
            after_sign_out_url: format!("{base}/approvals"),
        }))
    }
}

/// `[auth.jwt.scopes]`: the token scope names that grant the gateway's scopes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JwtScopes {
    #[serde(default = "scope_tools_call")]
    pub(crate) tools_call: String,
    #[serde(default = "scope_respond")]
    pub(crate) respond: String,
    #[serde(default = "scope_create")]
    pub(crate) create: String,
    #[serde(default = "scope_metrics")]
    pub(crate) metrics: String,
    #[serde(default = "scope_catalog")]
    pub(crate) catalog: String,
    #[serde(default = "scope_audit")]
    pub(crate) audit: String,
}

impl Default for JwtScopes {
    fn default() -> Self {
        JwtScopes {
            tools_call: scope_tools_call(),
            respond: scope_respond(),
            create: scope_create(),
            metrics: scope_metrics(),
            catalog: scope_catalog(),
            audit: scope_audit(),
        }
    }
}

fn scope_tools_call() -> String {
    mcp_auth::SCOPE_TOOLS_CALL.into()
}
fn scope_respond() -> String {
    mcp_auth::SCOPE_RESPOND.into()
}
fn scope_create() -> String {
    mcp_auth::SCOPE_CREATE.into()
}
fn scope_metrics() -> String {
    mcp_auth::SCOPE_METRICS.into()
}
fn scope_catalog() -> String {
    mcp_auth::SCOPE_CATALOG.into()
}
fn scope_audit() -> String {
    mcp_auth::SCOPE_AUDIT.into()
}
fn default_groups_claim() -> String {
    "groups".into()
}
pub(super) fn default_session_max_age() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

/// `[[auth.jwt.issuers]]`: one trusted issuer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JwtIssuer {
    pub(crate) issuer: String,
    /// A short name for its subjects, unique among the issuers (default: the issuer URL
    /// without its scheme).
    pub(crate) name: Option<String>,
    pub(crate) jwks_url: Option<String>,
    pub(crate) jwks_file: Option<std::path::PathBuf>,
    #[serde(default = "default_algorithms")]
    pub(crate) algorithms: Vec<String>,
    #[serde(default = "default_grace", with = "duration")]
    pub(crate) grace: Duration,
    #[serde(default = "default_jwks_refresh", with = "duration")]
    pub(crate) refresh_interval: Duration,
    #[serde(default = "default_jwks_min_refresh", with = "duration")]
    pub(crate) min_refresh_interval: Duration,
}

impl JwtIssuer {
    /// Its name: as configured, else [`mcp_auth::jwt::default_issuer_name`].
    pub(crate) fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| mcp_auth::jwt::default_issuer_name(&self.issuer))
    }
}

fn default_algorithms() -> Vec<String> {
    vec!["RS256".into()]
}
fn default_grace() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_jwks_refresh() -> Duration {
    Duration::from_secs(300)
}
fn default_jwks_min_refresh() -> Duration {
    Duration::from_secs(30)
}

impl JwtConfig {
    /// The checked configuration of mode `jwt`.
    pub(crate) fn resolve(&self) -> Result<mcp_auth::jwt::JwtConfig> {
        use mcp_auth::jwt::{IssuerConfig, JwksSource, ScopeNames};
        let mut issuers = Vec::new();
        for i in &self.issuers {
            let jwks = match (&i.jwks_url, &i.jwks_file) {
                (Some(url), None) => {
                    if !mcp_fetch::secure_or_loopback(url) {
                        bail!(
                            "issuer {:?}: jwks_url {url:?} must be https:// (http:// only on loopback)",
                            i.issuer
                        );
                    }
                    JwksSource::Url(url.clone())
                }
                (None, Some(file)) => JwksSource::File(file.clone()),
                _ => bail!(
                    "issuer {:?}: give exactly one of jwks_url and jwks_file",
                    i.issuer
                ),
            };
            let mut algorithms = Vec::new();
            for name in &i.algorithms {
                let algorithm: mcp_auth::jwt::Algorithm = name.parse().map_err(|_| {
                    anyhow::anyhow!("issuer {:?}: unknown algorithm {name:?}", i.issuer)
                })?;
                algorithms.push(algorithm);
            }
            let name = i.name();
            if i.grace < i.refresh_interval {
                bail!(
                    "issuer {:?}: grace must be at least refresh_interval (keys are trusted for grace after each fetch)",
                    i.issuer
                );
            }
            issuers.push(IssuerConfig {
                issuer: i.issuer.clone(),
                name,
                jwks,
                algorithms,
                grace: i.grace,
                refresh_interval: i.refresh_interval,
                min_refresh_interval: i.min_refresh_interval,
            });
        }
        let config = mcp_auth::jwt::JwtConfig {
            resource: self.resource.clone(),
            issuers,
            scopes: ScopeNames {
                tools_call: self.scopes.tools_call.clone(),
                respond: self.scopes.respond.clone(),
                create: self.scopes.create.clone(),
                metrics: self.scopes.metrics.clone(),
                catalog: self.scopes.catalog.clone(),
                audit: self.scopes.audit.clone(),
            },
            tenant_claim: self.tenant_claim.clone(),
            groups_claim: self.groups_claim.clone(),
            leeway: self.leeway,
        };
        // The same checks the gateway makes when it starts.
        mcp_auth::jwt::JwtAuth::new(config.clone())?;
        Ok(config)
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenConfig {
    pub(crate) subject: String,
    pub(crate) tenant: Option<String>,
    pub token_sha256: String,
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
    /// Approver groups the token's holder is a member of (`[[approvers]]`).
    #[serde(default)]
    pub(crate) groups: Vec<String>,
}

/// `[[approvers]]`: confirmations of matching tools are answered by a group.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApproverConfig {
    /// A qualified tool name, or a prefix ending in `*`.
    pub(crate) tools: String,
    /// The group (a value of the groups claim, or of a token's `groups`).
    pub(crate) group: String,
    /// `"may"` (the group besides the caller), `"must"` (only the group) or `"four_eyes"`
    /// (only the group, never the caller itself). Default `"must"`, or `"four_eyes"` with a
    /// quorum (the only mode a quorum takes).
    #[serde(default)]
    pub(crate) mode: Option<String>,
    /// A quorum: how many distinct people must approve (2 to 16; default 1, or one per
    /// group of `also_from` and `group`).
    #[serde(default)]
    pub(crate) approvers: Option<u8>,
    /// A quorum: further groups, besides `group`, of each of which one approver must count
    /// ("one from sre and one from security").
    #[serde(default)]
    pub(crate) also_from: Vec<String>,
    /// A call it holds that still waits this long is told again to the `[[notify]]` sinks
    /// told at once (1m to 24h).
    #[serde(
        default,
        with = "crate::config::duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) remind_after: Option<std::time::Duration>,
    /// ... and, this long, to the sinks of `escalate_to` (1m to 24h, after `remind_after`).
    #[serde(
        default,
        with = "crate::config::duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) escalate_after: Option<std::time::Duration>,
    /// The groups escalated to: the `[[notify]]` sinks whose `groups` name one of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) escalate_to: Vec<String>,
    /// Mode `jwt`: the issuer (its name or its URL) whose members of `group` answer, for
    /// every caller. Without it, a group counts only as asserted by the held call's
    /// caller's own issuer.
    pub(crate) issuer: Option<String>,
}

/// Whose word that someone is in `groups` counts (`what` names the entry, for errors): in
/// mode `jwt`, the issuer named (by name or URL) or else the caller's own; otherwise the
/// groups as configured, of the caller's tenant (so a group may not name a tenant itself).
pub(crate) fn groups_from(
    auth: &AuthConfig,
    issuer: Option<&str>,
    groups: &[&str],
    what: &str,
) -> Result<mcp_gate::GroupsFrom> {
    use mcp_gate::GroupsFrom;
    Ok(match (&auth.mode, &auth.jwt, issuer) {
        (AuthMode::Jwt, Some(jwt), Some(wanted)) => {
            match jwt
                .issuers
                .iter()
                .find(|i| i.name() == wanted || i.issuer == wanted)
            {
                Some(issuer) => GroupsFrom::Issuer(issuer.name()),
                None => bail!(
                    "{what}: issuer {wanted:?} is not one of [[auth.jwt.issuers]] (give its name or its URL)"
                ),
            }
        }
        (AuthMode::Jwt, _, None) => GroupsFrom::CallersIssuer,
        (_, _, Some(_)) => bail!("{what}: issuer is for auth mode \"jwt\""),
        (_, _, None) => {
            if let Some(g) = groups.iter().find(|g| g.contains('#')) {
                bail!(
                    "{what}: group {g:?} may not contain '#' (it qualifies a group by its tenant)"
                );
            }
            GroupsFrom::Configured
        }
    })
}

impl ApproverConfig {
    pub(crate) fn resolve(&self, auth: &AuthConfig) -> Result<mcp_gate::ApproverRule> {
        let quorum = self.quorum()?;
        let default_mode = if quorum.is_plural() {
            "four_eyes"
        } else {
            "must"
        };
        let label = self.mode.as_deref().unwrap_or(default_mode);
        let Some(mode) = elicitation_store::ApprovalMode::from_label(label) else {
            bail!(
                "[[approvers]] for {:?}: mode {label:?} must be \"may\", \"must\" or \"four_eyes\"",
                self.tools,
            );
        };
        if quorum.is_plural() && mode != elicitation_store::ApprovalMode::FourEyes {
            bail!(
                "[[approvers]] for {:?}: with approvers or also_from, the requester never counts: mode must be \"four_eyes\" (the default), not {label:?}",
                self.tools,
            );
        }
        if self.tools.is_empty() || self.tools[..self.tools.len() - 1].contains('*') {
            bail!(
                "[[approvers]] tools {:?} must be a tool name, or a prefix ending in one '*'",
                self.tools
            );
        }
        let group = self.group.trim();
        for g in std::iter::once(group).chain(quorum.also.iter().map(String::as_str)) {
            if g.is_empty() || g.len() > 256 || g.chars().any(char::is_control) {
                bail!(
                    "[[approvers]] for {:?}: a group must be 1 to 256 characters",
                    self.tools
                );
            }
        }
        let groups: Vec<&str> = std::iter::once(group)
            .chain(quorum.also.iter().map(String::as_str))
            .collect();
        let groups_from = groups_from(
            auth,
            self.issuer.as_deref(),
            &groups,
            &format!("[[approvers]] for {:?}", self.tools),
        )?;
        Ok(mcp_gate::ApproverRule {
            tools: self.tools.clone(),
            approval: elicitation_store::Approval {
                group: group.to_owned(),
                mode,
                quorum,
            },
            groups_from,
        })
    }

    /// Its reminder and escalation (none, for a rule that chases nothing: the first rule
    /// covering a tool decides, as it decides who answers), for the notifier; checked: each
    /// 1m to 24h, the escalation after the reminder, `escalate_after` and `escalate_to`
    /// together.
    pub(crate) fn route(&self) -> Result<mcp_notify::Route> {
        let day = std::time::Duration::from_secs(86_400);
        let minute = std::time::Duration::from_secs(60);
        for (key, after) in [
            ("remind_after", self.remind_after),
            ("escalate_after", self.escalate_after),
        ] {
            if after.is_some_and(|a| !(minute..=day).contains(&a)) {
                bail!(
                    "[[approvers]] for {:?}: {key} must be between 1m and 24h",
                    self.tools
                );
            }
        }
        if self.escalate_after.is_some() == self.escalate_to.is_empty() {
            bail!(
                "[[approvers]] for {:?}: escalate_after and escalate_to go together (when, and to which groups' [[notify]] sinks)",
                self.tools
            );
        }
        if let (Some(remind), Some(escalate)) = (self.remind_after, self.escalate_after)
            && escalate <= remind
        {
            bail!(
                "[[approvers]] for {:?}: escalate_after must come after remind_after",
                self.tools
            );
        }
        Ok(mcp_notify::Route {
            tools: self.tools.clone(),
            remind_after: self.remind_after,
            escalate_after: self.escalate_after,
            escalate_to: self
                .escalate_to
                .iter()
                .map(|g| g.trim().to_owned())
                .collect(),
        })
    }

    /// The quorum `approvers` and `also_from` ask for.
    fn quorum(&self) -> Result<elicitation_store::Quorum> {
        use elicitation_store::{MAX_QUORUM, MAX_QUORUM_GROUPS};
        let also: Vec<String> = self.also_from.iter().map(|g| g.trim().to_owned()).collect();
        if also.len() + 1 > MAX_QUORUM_GROUPS {
            bail!(
                "[[approvers]] for {:?}: at most {MAX_QUORUM_GROUPS} groups in all (group and also_from)",
                self.tools
            );
        }
        let mut seen = std::collections::HashSet::from([self.group.trim()]);
        if let Some(g) = also.iter().find(|g| !seen.insert(g.as_str())) {
            bail!(
                "[[approvers]] for {:?}: group {g:?} is named twice (one approver of each group counts)",
                self.tools
            );
        }
        let approvers = self.approvers.unwrap_or(1);
        if !(1..=MAX_QUORUM).contains(&approvers) {
            bail!(
                "[[approvers]] for {:?}: approvers must be 1 to {MAX_QUORUM}",
                self.tools
            );
        }
        if usize::from(approvers) < 1 + also.len() && self.approvers.is_some() {
            bail!(
                "[[approvers]] for {:?}: approvers = {approvers} is fewer than the {} groups it needs one of each of",
                self.tools,
                1 + also.len()
            );
        }
        Ok(elicitation_store::Quorum { approvers, also })
    }
}
