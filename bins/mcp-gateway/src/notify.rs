//! `[[notify]]`: the notification sinks, as configured, checked, and built into
//! `mcp_notify` sinks with their secrets read from the environment.

use anyhow::{Result, bail};
use elicitation_store::NoticeEvent;
use serde::{Deserialize, Serialize};

/// One `[[notify]]` table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotifyConfig {
    /// Its name (unique; default `<kind>-<position>`).
    #[serde(default)]
    pub(crate) name: Option<String>,
    pub(crate) kind: NotifyKind,
    /// `webhook`: where to `POST`.
    #[serde(default)]
    pub(crate) url: Option<String>,
    /// `webhook`: the environment variable holding the signing secret.
    #[serde(default)]
    pub(crate) secret_env: Option<String>,
    /// `webhook`: send the call's arguments too.
    #[serde(default)]
    pub(crate) include_arguments: bool,
    /// Only these tools (exact, or a prefix ending in `*`).
    #[serde(default)]
    pub(crate) tools: Vec<String>,
    /// Only confirmations these approver groups answer.
    #[serde(default)]
    pub(crate) groups: Vec<String>,
    /// `waiting`, `answered`, `expired`.
    #[serde(default = "default_events")]
    pub(crate) events: Vec<String>,
}

/// What a sink is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NotifyKind {
    Webhook,
    Slack,
    Email,
}

impl NotifyKind {
    fn label(self) -> &'static str {
        match self {
            NotifyKind::Webhook => "webhook",
            NotifyKind::Slack => "slack",
            NotifyKind::Email => "email",
        }
    }
}

fn default_events() -> Vec<String> {
    vec!["waiting".to_owned()]
}

impl NotifyConfig {
    /// Its name.
    pub(crate) fn name_at(&self, position: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}-{}", self.kind.label(), position + 1))
    }
}

/// The environment variables that hold the sinks' secrets: no module may inherit them.
pub(crate) fn secret_envs(sinks: &[NotifyConfig]) -> Vec<&str> {
    sinks
        .iter()
        .filter_map(|s| s.secret_env.as_deref())
        .collect()
}

/// Checks every sink and reads its secret: the sinks to run.
pub(crate) fn sinks(configs: &[NotifyConfig]) -> Result<Vec<mcp_notify::Sink>> {
    let mut sinks: Vec<mcp_notify::Sink> = Vec::with_capacity(configs.len());
    for (position, config) in configs.iter().enumerate() {
        let name = config.name_at(position);
        let what = format!("[[notify]] {name:?}");
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            bail!("{what}: name must be 1 to 64 letters, digits, '-', '_' or '.'");
        }
        if sinks.iter().any(|s| s.name == name) {
            bail!("{what}: another [[notify]] has this name; give each its own");
        }
        let mut events = Vec::new();
        for label in &config.events {
            let Some(event) = NoticeEvent::from_label(label) else {
                bail!(
                    "{what}: events lists {label:?}; the events are \"waiting\", \"answered\" and \"expired\""
                );
            };
            if !events.contains(&event) {
                events.push(event);
            }
        }
        if events.is_empty() {
            bail!(
                "{what}: events is empty; name at least one (\"waiting\", \"answered\", \"expired\")"
            );
        }
        for tool in &config.tools {
            let stem = tool.strip_suffix('*').unwrap_or(tool);
            if stem.is_empty() || stem.contains('*') {
                bail!(
                    "{what}: tools lists {tool:?}; give a qualified tool name or a prefix ending in '*' (like \"fs__*\")"
                );
            }
        }
        if config.groups.iter().any(String::is_empty) {
            bail!("{what}: groups lists an empty group");
        }
        let kind = match config.kind {
            NotifyKind::Webhook => mcp_notify::SinkKind::Webhook(webhook(&what, config)?),
            NotifyKind::Slack | NotifyKind::Email => bail!(
                "{what}: kind {:?} is not supported by this version of the gateway yet; use kind = \"webhook\" (docs/notifications.md)",
                config.kind.label()
            ),
        };
        sinks.push(mcp_notify::Sink {
            name,
            filter: mcp_notify::Filter {
                tools: config.tools.clone(),
                groups: config.groups.clone(),
                events,
            },
            kind,
        });
    }
    Ok(sinks)
}

fn webhook(what: &str, config: &NotifyConfig) -> Result<mcp_notify::Webhook> {
    let Some(url) = &config.url else {
        bail!("{what}: kind \"webhook\" needs url (where to POST its events)");
    };
    let parsed: http::Uri = url
        .parse()
        .map_err(|_| anyhow::anyhow!("{what}: url is not a URL: {url:?}"))?;
    let host = parsed.host().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme_str() {
        Some("https") if !host.is_empty() => {}
        Some("http") if loopback => {}
        Some("http") => bail!(
            "{what}: url must be https:// (an event leaves the gateway with the message shown to the person); plain http:// is for a loopback receiver only"
        ),
        _ => bail!("{what}: url must be an https:// URL, got {url:?}"),
    }
    let Some(env) = &config.secret_env else {
        bail!(
            "{what}: kind \"webhook\" needs secret_env, the environment variable that holds its signing secret (every event is signed; receivers check it)"
        );
    };
    let secret = std::env::var(env).unwrap_or_default();
    if secret.len() < 16 {
        bail!(
            "{what}: the environment variable {env} (secret_env) must hold the signing secret, at least 16 characters; it is {}",
            if secret.is_empty() {
                "not set or empty".to_owned()
            } else {
                format!("{} characters", secret.len())
            }
        );
    }
    Ok(mcp_notify::Webhook {
        url: url.clone(),
        secret: secret.into_bytes(),
        include_arguments: config.include_arguments,
    })
}
