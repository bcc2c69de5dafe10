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
    /// `webhook`, `slack`: send the call's arguments too (in Slack, only then can a person
    /// approve there).
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
    /// A waiting elicitation reaches this sink only once it has waited this long (a
    /// reminder, or an escalation to others): 1m to 24h.
    #[serde(
        default,
        with = "crate::config::duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) after: Option<std::time::Duration>,
    /// `email`: the SMTP server.
    #[serde(default)]
    pub(crate) smtp_host: Option<String>,
    /// `email`: its port (default by `tls`: 587, 465, 25).
    #[serde(default)]
    pub(crate) smtp_port: Option<u16>,
    /// `email`: `starttls` (default), `tls`, `none` (loopback only).
    #[serde(default)]
    pub(crate) tls: Option<String>,
    /// `email`: the environment variables holding the SMTP user name and password.
    #[serde(default)]
    pub(crate) smtp_username_env: Option<String>,
    #[serde(default)]
    pub(crate) smtp_password_env: Option<String>,
    /// `email`: the sender and the recipients.
    #[serde(default)]
    pub(crate) from: Option<String>,
    #[serde(default)]
    pub(crate) to: Vec<String>,
    /// `slack`: the environment variable holding the incoming-webhook URL.
    #[serde(default)]
    pub(crate) webhook_url_env: Option<String>,
    /// `slack`: the environment variable holding the app's signing secret (Approve and
    /// Decline buttons).
    #[serde(default)]
    pub(crate) signing_secret_env: Option<String>,
    /// `slack`: who each Slack user answers as.
    #[serde(default)]
    pub(crate) users: std::collections::BTreeMap<String, SlackUserConfig>,
}

/// A Slack user's gateway identity.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct SlackUserConfig {
    pub(crate) subject: String,
    #[serde(default)]
    pub(crate) tenant: Option<String>,
    #[serde(default)]
    pub(crate) groups: Vec<String>,
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
        .flat_map(|s| {
            [
                &s.secret_env,
                &s.smtp_username_env,
                &s.smtp_password_env,
                &s.webhook_url_env,
                &s.signing_secret_env,
            ]
        })
        .filter_map(|e| e.as_deref())
        .collect()
}

/// Whether `host` is this machine (a name or an address).
pub(crate) fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Checks every sink and reads its secret: the sinks to run.
// Long: one arm per sink kind, each checking its own fields.
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
        if let Some(after) = config.after {
            if !(std::time::Duration::from_secs(60)..=std::time::Duration::from_secs(86_400))
                .contains(&after)
            {
                bail!("{what}: after must be between 1m and 24h");
            }
            if !events.contains(&NoticeEvent::Waiting) {
                bail!(
                    "{what}: after tells of what still waits; its events must include \"waiting\""
                );
            }
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
        let foreign = |keys: &[(&str, bool)]| -> Result<()> {
            if let Some((key, _)) = keys.iter().find(|(_, set)| *set) {
                bail!(
                    "{what}: {key} is not a key of kind {:?}",
                    config.kind.label()
                );
            }
            Ok(())
        };
        let kind = match config.kind {
            NotifyKind::Webhook => {
                foreign(&[
                    ("smtp_host", config.smtp_host.is_some()),
                    ("smtp_port", config.smtp_port.is_some()),
                    ("tls", config.tls.is_some()),
                    ("smtp_username_env", config.smtp_username_env.is_some()),
                    ("smtp_password_env", config.smtp_password_env.is_some()),
                    ("from", config.from.is_some()),
                    ("to", !config.to.is_empty()),
                    ("webhook_url_env", config.webhook_url_env.is_some()),
                    ("signing_secret_env", config.signing_secret_env.is_some()),
                    ("users", !config.users.is_empty()),
                ])?;
                mcp_notify::SinkKind::Webhook(webhook(&what, config)?)
            }
            NotifyKind::Email => {
                foreign(&[
                    ("url", config.url.is_some()),
                    ("secret_env", config.secret_env.is_some()),
                    ("include_arguments", config.include_arguments),
                    ("webhook_url_env", config.webhook_url_env.is_some()),
                    ("signing_secret_env", config.signing_secret_env.is_some()),
                    ("users", !config.users.is_empty()),
                ])?;
                mcp_notify::SinkKind::Email(Box::new(email(&what, config)?))
            }
            NotifyKind::Slack => {
                foreign(&[
                    ("url", config.url.is_some()),
                    ("secret_env", config.secret_env.is_some()),
                    ("smtp_host", config.smtp_host.is_some()),
                    ("from", config.from.is_some()),
                    ("to", !config.to.is_empty()),
                ])?;
                mcp_notify::SinkKind::Slack(slack(&what, config)?)
            }
        };
        sinks.push(mcp_notify::Sink {
            name,
            filter: mcp_notify::Filter {
                tools: config.tools.clone(),
                groups: config.groups.clone(),
                events,
                after: config.after,
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
    let loopback = is_loopback(host);
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

fn email(what: &str, config: &NotifyConfig) -> Result<mcp_notify::Email> {
    let Some(host) = config.smtp_host.as_deref().filter(|h| !h.is_empty()) else {
        bail!("{what}: kind \"email\" needs smtp_host (the SMTP server to send through)");
    };
    let tls = match config.tls.as_deref().unwrap_or("starttls") {
        "starttls" => mcp_notify::SmtpTls::StartTls,
        "tls" => mcp_notify::SmtpTls::Tls,
        "none" if is_loopback(host) => mcp_notify::SmtpTls::None,
        "none" => bail!(
            "{what}: tls = \"none\" sends mail in clear, which is for a loopback SMTP server only (smtp_host {host:?}); use \"starttls\" or \"tls\""
        ),
        other => bail!("{what}: tls is \"starttls\", \"tls\" or \"none\", not {other:?}"),
    };
    let port = config.smtp_port.unwrap_or(match tls {
        mcp_notify::SmtpTls::StartTls => 587,
        mcp_notify::SmtpTls::Tls => 465,
        mcp_notify::SmtpTls::None => 25,
    });
    let read = |key: &str, env: &Option<String>| -> Result<Option<String>> {
        let Some(env) = env else { return Ok(None) };
        match std::env::var(env) {
            Ok(value) if !value.is_empty() => Ok(Some(value)),
            _ => bail!("{what}: the environment variable {env} ({key}) is not set or empty"),
        }
    };
    let user = read("smtp_username_env", &config.smtp_username_env)?;
    let password = read("smtp_password_env", &config.smtp_password_env)?;
    let credentials = match (user, password) {
        (Some(user), Some(password)) => Some((user, password)),
        (None, None) => None,
        _ => bail!("{what}: give both smtp_username_env and smtp_password_env, or neither"),
    };
    if credentials.is_some() && tls == mcp_notify::SmtpTls::None {
        bail!("{what}: a password is never sent without TLS; use tls = \"starttls\" or \"tls\"");
    }
    let Some(from) = &config.from else {
        bail!("{what}: kind \"email\" needs from (the sender's address)");
    };
    if config.to.is_empty() {
        bail!("{what}: kind \"email\" needs to (the recipients' addresses)");
    }
    mcp_notify::Email::new(host, port, tls, credentials, from, &config.to)
        .map_err(|e| anyhow::anyhow!("{what}: {e}"))
}

fn slack(what: &str, config: &NotifyConfig) -> Result<mcp_notify::Slack> {
    let Some(env) = &config.webhook_url_env else {
        bail!(
            "{what}: kind \"slack\" needs webhook_url_env, the environment variable holding the channel's incoming-webhook URL"
        );
    };
    let url = std::env::var(env).unwrap_or_default();
    let parsed: http::Uri = url.parse().map_err(|_| {
        anyhow::anyhow!(
            "{what}: the environment variable {env} (webhook_url_env) does not hold a URL"
        )
    })?;
    let host = parsed.host().unwrap_or_default();
    match parsed.scheme_str() {
        Some("https") if !host.is_empty() => {}
        Some("http") if is_loopback(host) => {}
        _ => bail!(
            "{what}: the environment variable {env} (webhook_url_env) must hold the https:// incoming-webhook URL (like https://hooks.slack.com/services/…)"
        ),
    }
    let buttons = config.signing_secret_env.is_some();
    if buttons && config.users.is_empty() {
        bail!(
            "{what}: signing_secret_env turns on Approve and Decline buttons, which need users (which Slack user answers as whom)"
        );
    }
    if !buttons && !config.users.is_empty() {
        bail!("{what}: users map who answers from Slack, which needs signing_secret_env");
    }
    Ok(mcp_notify::Slack {
        webhook_url: url,
        buttons,
        include_arguments: config.include_arguments,
    })
}

/// The verifier of Slack's button clicks, when a Slack sink takes answers (at most one may).
pub(crate) fn slack_actions(configs: &[NotifyConfig]) -> Result<Option<mcp_notify::SlackActions>> {
    let mut answering = configs
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == NotifyKind::Slack && c.signing_secret_env.is_some());
    let Some((position, config)) = answering.next() else {
        return Ok(None);
    };
    if answering.next().is_some() {
        bail!(
            "[[notify]]: only one kind \"slack\" sink may take answers (signing_secret_env); Slack posts every click to one endpoint"
        );
    }
    let what = format!("[[notify]] {:?}", config.name_at(position));
    let env = config.signing_secret_env.as_deref().unwrap_or_default();
    let secret = std::env::var(env).unwrap_or_default();
    if secret.len() < 16 {
        bail!(
            "{what}: the environment variable {env} (signing_secret_env) must hold the Slack app's signing secret"
        );
    }
    let mut users = std::collections::BTreeMap::new();
    for (id, user) in &config.users {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
            bail!("{what}: users has {id:?}, which is not a Slack user id (like U024BE7LH)");
        }
        if elicitation_store::Caller::new(user.subject.clone(), user.tenant.clone()).is_err() {
            bail!(
                "{what}: users.{id}: subject and tenant must be 1 to 512 characters without control characters"
            );
        }
        users.insert(
            id.clone(),
            mcp_notify::SlackUser {
                subject: user.subject.clone(),
                tenant: user.tenant.clone(),
                groups: user.groups.clone(),
            },
        );
    }
    Ok(Some(mcp_notify::SlackActions::new(
        secret.as_bytes(),
        users,
        config.include_arguments,
    )))
}
