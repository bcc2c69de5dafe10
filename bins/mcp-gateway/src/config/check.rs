//! What is refused before anything starts: every section's consistency and the secrets a
//! module must not see.

use std::path::PathBuf;
use std::time::Duration;

use crate::users;
use anyhow::{Result, bail};

use super::*;

impl Config {
    /// The gateway's own secret values, with what each is: the database URL and the seal
    /// keys' material, from the file or the environment.
    pub(super) fn gateway_secrets(&self) -> Vec<(&'static str, String)> {
        let mut secrets = Vec::new();
        if let Some(url) = self.store.database_url().ok().flatten() {
            if let Some(password) = url.parse::<tokio_postgres::Config>().ok().and_then(|c| {
                c.get_password()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
            }) {
                secrets.push(("database password", password));
            }
            secrets.push(("database URL", url));
        }
        let mut entries = self.store.seal_keys.clone();
        if let Some(path) = &self.store.seal_keys_file {
            entries.extend(
                std::fs::read_to_string(path)
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_owned),
            );
        }
        if let Ok(env) = std::env::var(elicitation_store::SEAL_KEYS_ENV) {
            entries.extend(env.split(',').map(str::to_owned));
        }
        for entry in entries {
            let material = entry.split_once(':').map_or(entry.as_str(), |(_, m)| m);
            secrets.push(("seal key", material.trim().to_owned()));
        }
        if let Ok(secret) = std::env::var(OIDC_SECRET_ENV) {
            secrets.push(("OpenID Connect client secret", secret));
        }
        for name in crate::notify::secret_envs(&self.notify) {
            if let Ok(value) = std::env::var(name) {
                secrets.push(("notification signing secret", value));
            }
        }
        for auth in self.modules.iter().filter_map(|m| m.auth.as_ref()) {
            for name in auth.secret_envs() {
                if let Ok(value) = std::env::var(name)
                    && !value.trim().is_empty()
                {
                    secrets.push(("module credentials", value));
                }
            }
        }
        if self.uploads.s3.is_some() {
            for name in ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] {
                if let Ok(value) = std::env::var(name) {
                    secrets.push(("upload store credentials", value));
                }
            }
        }
        secrets
    }

    /// The files that hold a secret module `me` must not read, with what each holds: the
    /// secret files configured, and the configuration itself when a secret is written in it
    /// (the gateway's, or another module's `env`, `headers` or URL credentials).
    fn secret_files(&self, me: &str) -> Vec<(PathBuf, String)> {
        let mut files = Vec::new();
        if let Some(source) = &self.source {
            let password_inline = self.store.database_url.as_ref().is_some_and(|url| {
                url.parse::<tokio_postgres::Config>()
                    .map_or(true, |c| c.get_password().is_some())
            });
            let other = self.modules.iter().find(|m| {
                m.name != me
                    && (!m.env.is_empty()
                        || !m.headers.is_empty()
                        || m.url.as_ref().is_some_and(|u| {
                            u.split_once("://").is_some_and(|(_, rest)| {
                                rest.split('/').next().unwrap_or_default().contains('@')
                            })
                        }))
            });
            if !self.store.seal_keys.is_empty() {
                files.push((source.clone(), "seal keys (store.seal_keys)".to_owned()));
            } else if password_inline {
                files.push((
                    source.clone(),
                    "database password (store.database_url)".to_owned(),
                ));
            } else if let Some(other) = other {
                files.push((
                    source.clone(),
                    format!(
                        "credentials of module {:?} (its env, headers or URL)",
                        other.name
                    ),
                ));
            }
        }
        if let Some(path) = &self.store.seal_keys_file {
            files.push((path.clone(), "seal keys (store.seal_keys_file)".to_owned()));
        }
        if let Some(path) = &self.store.database_url_file {
            files.push((
                path.clone(),
                "database URL (store.database_url_file)".to_owned(),
            ));
        }
        files
    }

    /// No stdio module's user can read a file holding a secret of the gateway's.
    fn check_module_users(&self) -> Result<()> {
        for m in &self.modules {
            if m.transport != Transport::Stdio {
                if m.user.is_some() || m.home.is_some() {
                    bail!(
                        "module {:?}: user and home are for stdio modules (processes the gateway starts)",
                        m.name
                    );
                }
                continue;
            }
            let files = self.secret_files(&m.name);
            let user = users::module_user(&m.name, m.user.as_deref())?;
            let (uid, gid, who) = match &user {
                Some(user) => (
                    user.uid,
                    user.gid,
                    format!("user {} (uid {})", user.name, user.uid),
                ),
                None => (
                    users::gateway_uid(),
                    users::gateway_gid(),
                    format!("the gateway's own user (uid {})", users::gateway_uid()),
                ),
            };
            for (file, what) in &files {
                // A module run as the gateway's own user has every group the gateway has:
                // whatever the gateway reads, it can.
                if user.is_none() || users::readable_by(file, uid, gid) {
                    let remedy = if user.is_some() {
                        format!(
                            "make it readable by the gateway's user only (chmod 600 {})",
                            file.display()
                        )
                    } else {
                        "give the secret in the environment instead (MCP_GATEWAY_SEAL_KEYS, DATABASE_URL), where modules cannot read it, or run the gateway as root so that modules run as another user".to_owned()
                    };
                    bail!(
                        "module {:?} runs as {who}, which can read {}, holding the gateway's {what}: {remedy}",
                        m.name,
                        file.display()
                    );
                }
            }
        }
        Ok(())
    }

    // Long: one check of the configuration after another, each a few lines; their order is the
    // order errors are reported in.
    pub(super) fn check(&self) -> Result<()> {
        self.uploads.resolve()?;
        crate::notify::sinks(&self.notify)?;
        crate::notify::slack_actions(&self.notify)?;
        self.slack_users_are_callers()?;
        if self.store.database_url.is_some() && self.store.database_url_file.is_some() {
            bail!("[store] give at most one of database_url and database_url_file");
        }
        self.check_module_users()?;
        if self.store.operation_timeout < Duration::from_millis(100)
            || self.store.operation_timeout > Duration::from_secs(10)
        {
            bail!(
                "[store] operation_timeout must be between 100ms and 10s, not {}ms",
                self.store.operation_timeout.as_millis()
            );
        }
        if let Some(retention) = self.store.retention
            && retention < Duration::from_secs(60)
        {
            bail!(
                "[store] retention must be at least 1 minute (finished elicitations older than it are erased), not {}s",
                retention.as_secs()
            );
        }
        if self.limits.module_concurrency > 0 && self.limits.module_queue_timeout.is_zero() {
            bail!(
                "[limits] module_queue_timeout must be more than 0 when module_concurrency is set"
            );
        }
        self.gate.max_grant()?;
        for rule in &self.approvers {
            rule.resolve(&self.auth)?;
        }
        self.chases_reach_someone()?;
        quotas(self)?;
        self.servers()?;
        if !self.approvers.is_empty() && self.auth.mode == AuthMode::None {
            bail!(
                "[[approvers]] needs auth mode \"tokens\" or \"jwt\": with \"none\" everyone is the one local caller"
            );
        }
        if self.auth.mode == AuthMode::None && !self.listen.ip().is_loopback() {
            bail!(
                "auth mode \"none\" is only allowed on a loopback address, but listen = {}; configure [auth] mode = \"tokens\"",
                self.listen
            );
        }
        match (&self.auth.mode, &self.auth.jwt) {
            (AuthMode::Jwt, None) => bail!("auth mode \"jwt\" needs an [auth.jwt] section"),
            (AuthMode::Jwt, Some(jwt)) => {
                jwt.resolve()?;
                jwt.sso()?;
            }
            (_, Some(_)) => bail!("[auth.jwt] is set but auth mode is not \"jwt\""),
            (_, None) => {}
        }
        // Read once: the secrets come from files too.
        let secrets = self.gateway_secrets();
        for (i, m) in self.modules.iter().enumerate() {
            if self.modules[..i].iter().any(|o| o.name == m.name) {
                bail!("two modules are named {:?}", m.name);
            }
            if m.name.is_empty()
                || !m
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                bail!(
                    "module name {:?} must be letters, digits, '_' or '-'",
                    m.name
                );
            }
            if let Some(prefix) = &m.prefix
                && !prefix.is_empty()
                && !mcp_upstream::registry::is_valid_tool_name(prefix)
            {
                bail!(
                    "module {:?}: prefix {prefix:?} must be letters, digits, '_', '.' or '-' (tool names are 1 to 128 of those)",
                    m.name
                );
            }
            if m.transport == Transport::PermissionPrompt
                && (m.command.is_some() || m.url.is_some() || !m.args.is_empty())
            {
                bail!(
                    "module {:?}: transport \"permission_prompt\" is built in; it takes no command, args or url",
                    m.name
                );
            }
            if matches!(m.transport, Transport::Demo | Transport::PermissionPrompt)
                && m.isolation() == Isolation::PerCaller
            {
                bail!(
                    "module {:?}: a built-in module (demo, permission_prompt) is shared; isolation \"per_caller\" is for stdio and http modules",
                    m.name
                );
            }
            if m.max_instances == 0 {
                bail!("module {:?}: max_instances must be at least 1", m.name);
            }
            match m.transport {
                Transport::Stdio if m.command.is_none() => {
                    bail!("module {:?}: transport \"stdio\" needs command", m.name)
                }
                Transport::Http if m.url.is_none() => {
                    bail!("module {:?}: transport \"http\" needs url", m.name)
                }
                Transport::Http => {
                    let (url, _) = m.tls()?;
                    if let Some(auth) = &m.auth {
                        for name in auth.secret_envs() {
                            if is_gateway_secret_env(name, self.uploads.s3.is_some())
                                || crate::notify::secret_envs(&self.notify).contains(&name)
                            {
                                bail!(
                                    "module {:?}: auth names {name}, a secret of the gateway's own; a module's credentials must be its own variable",
                                    m.name
                                );
                            }
                        }
                        if auth.per_person() && m.isolation() != Isolation::PerCaller {
                            bail!(
                                "module {:?}: auth kind \"user\" or \"token_exchange\" sends each caller's own credentials, so each caller has its own instance: isolation must be \"per_caller\"",
                                m.name
                            );
                        }
                        if matches!(auth, ModuleAuth::TokenExchange { .. })
                            && self.auth.mode != AuthMode::Jwt
                        {
                            bail!(
                                "module {:?}: auth kind \"token_exchange\" exchanges each caller's own access token, which only [auth] mode = \"jwt\" has",
                                m.name
                            );
                        }
                        if m.headers
                            .keys()
                            .any(|h| h.eq_ignore_ascii_case("authorization"))
                        {
                            bail!(
                                "module {:?}: auth and an Authorization header both say what to send; keep one",
                                m.name
                            );
                        }
                        auth.credentials(&m.name, &url)?;
                        auth.user_oauth(&m.name, &url)?;
                        auth.token_exchange(&m.name, &url)?;
                    }
                }
                _ if m.ca_file.is_some()
                    || m.client_cert.is_some()
                    || m.client_key.is_some()
                    || m.allow_insecure
                    || m.auth.is_some()
                    || m.era != ModuleEra::Auto =>
                {
                    bail!(
                        "module {:?}: ca_file, client_cert, client_key, allow_insecure, auth and era are for transport \"http\" (a stdio module always speaks the 2025 handshake)",
                        m.name
                    )
                }
                _ => {}
            }
            for name in &m.inherit_env {
                if is_gateway_secret_env(name, self.uploads.s3.is_some())
                    || crate::notify::secret_envs(&self.notify).contains(&name.as_str())
                    || self
                        .modules
                        .iter()
                        .filter_map(|o| o.auth.as_ref())
                        .any(|a| a.secret_envs().contains(&name.as_str()))
                {
                    bail!(
                        "module {:?}: inherit_env lists {name}, a secret of the gateway's; modules never receive it (give the module its own credentials in env)",
                        m.name
                    );
                }
            }
            let leaks = |value: &str| {
                secrets
                    .iter()
                    .find(|(_, secret)| reveals(value, secret))
                    .map(|(what, _)| *what)
            };
            for (name, value) in &m.env {
                if let Some(what) = leaks(value) {
                    bail!(
                        "module {:?}: env {name} contains the gateway's {what}; modules never receive the gateway's secrets",
                        m.name
                    );
                }
            }
            for arg in &m.args {
                if let Some(what) = leaks(arg) {
                    bail!(
                        "module {:?}: an argument contains the gateway's {what}; modules never receive the gateway's secrets (and arguments are visible to every local user)",
                        m.name
                    );
                }
            }
        }
        if self.http.header_read_timeout < Duration::from_secs(1)
            || self.http.body_read_timeout < Duration::from_secs(1)
            || self.http.idle_timeout < Duration::from_secs(1)
        {
            bail!(
                "[http] header_read_timeout, body_read_timeout and idle_timeout must be at least 1s"
            );
        }
        let store = &self.store;
        if store.records_per_caller() == 0
            || store.records_per_caller() > store.max_records
            || store.bytes_per_caller() == 0
            || store.bytes_per_caller() > store.max_bytes
        {
            bail!(
                "[store] max_records_per_caller and max_bytes_per_caller must be at least 1 and at most max_records and max_bytes"
            );
        }
        self.tracing.resolve()?;
        if let Some(url) = &self.http.public_url
            && (!(url.starts_with("http://") || url.starts_with("https://"))
                || url.parse::<http::Uri>().is_err())
        {
            bail!(
                "[http] public_url must be an http:// or https:// URL, like https://gateway.example.com; got {url:?}"
            );
        }
        if self.http.max_connections == 0 || self.http.max_streams_per_caller == 0 {
            bail!("[http] max_connections and max_streams_per_caller must be at least 1");
        }
        let upload = self
            .uploads
            .max_bytes
            .unwrap_or(mcp_uploads::DEFAULT_MAX_BYTES);
        let (per_caller, in_flight) = self.http.body_bytes(upload);
        let largest = self
            .http
            .body_limit
            .max(usize::try_from(upload).unwrap_or(usize::MAX));
        if per_caller < largest || in_flight < per_caller {
            bail!(
                "[http] body_bytes_per_caller ({per_caller}) must be at least body_limit ({}) and [uploads] max_bytes ({upload}), and body_bytes_in_flight ({in_flight}) at least body_bytes_per_caller: a body that fits its limit must fit the shares",
                self.http.body_limit
            );
        }
        for (index, rule) in self.policy.iter().enumerate() {
            rule.resolve(index)?;
        }
        // What start-up refuses, `check-config` refuses too.
        self.flow.resolve()?;
        self.content.resolve()?;
        Ok(())
    }
}

impl Config {
    /// In mode `jwt` a caller is `sub@issuer`: a Slack user mapped to a subject of no
    /// configured issuer would be a person apart from their own tokens' — approving their
    /// own four-eyes calls from Slack, or counted twice toward a quorum.
    pub(super) fn slack_users_are_callers(&self) -> Result<()> {
        let (AuthMode::Jwt, Some(jwt)) = (&self.auth.mode, &self.auth.jwt) else {
            return Ok(());
        };
        let names: Vec<String> = jwt.issuers.iter().map(|i| i.name()).collect();
        for (position, sink) in self.notify.iter().enumerate() {
            for (id, user) in &sink.users {
                let issuer = mcp_auth::issuer_of(&user.subject);
                if !issuer.is_some_and(|issuer| names.iter().any(|n| n == issuer)) {
                    bail!(
                        "[[notify]] {:?}: users.{id}: subject {:?} is no caller of auth mode \"jwt\": write it as the gateway names that person, `sub@issuer` with one of [[auth.jwt.issuers]]'s names ({}), so that Slack and their tokens are the same person",
                        sink.name_at(position),
                        user.subject,
                        names.join(", ")
                    );
                }
            }
        }
        Ok(())
    }
}

impl Config {
    /// An approver rule's reminder goes to sinks that take what waits, and its escalation
    /// to sinks of the groups escalated to: a chase nobody would hear is refused at start,
    /// not dropped when a call has waited.
    pub(super) fn chases_reach_someone(&self) -> Result<()> {
        let takes_waiting = |sink: &crate::notify::NotifyConfig| {
            sink.events.iter().any(|e| e == "waiting") && sink.after.is_none()
        };
        for rule in &self.approvers {
            let route = rule.route()?;
            if route.remind_after.is_some() && !self.notify.iter().any(takes_waiting) {
                bail!(
                    "[[approvers]] for {:?}: remind_after, but no [[notify]] sink is told of what waits (events with \"waiting\", no after): nobody would be reminded",
                    rule.tools
                );
            }
            for group in &route.escalate_to {
                let heard = self.notify.iter().any(|sink| {
                    sink.events.iter().any(|e| e == "waiting") && sink.groups.contains(group)
                });
                if !heard {
                    bail!(
                        "[[approvers]] for {:?}: escalate_to names {group:?}, but no [[notify]] sink with events \"waiting\" has it in its groups: nobody would hear the escalation",
                        rule.tools
                    );
                }
            }
        }
        Ok(())
    }
}
