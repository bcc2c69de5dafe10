//! `[[modules]]`: each upstream server, its transport, credentials, pin and isolation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Transport {
    Stdio,
    Http,
    /// The built-in demo module.
    Demo,
    /// The built-in permission prompt: the agent host's own tools, gated
    /// (docs/permission-prompt.md).
    #[serde(rename = "permission_prompt")]
    PermissionPrompt,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModuleConfig {
    pub(crate) name: String,
    pub(crate) transport: Transport,
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    #[serde(default, serialize_with = "redact::values")]
    pub(crate) env: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) inherit_env: Vec<String>,
    pub(crate) cwd: Option<PathBuf>,
    #[serde(serialize_with = "redact::url")]
    pub(crate) url: Option<String>,
    #[serde(default, serialize_with = "redact::values")]
    pub(crate) headers: BTreeMap<String, String>,
    /// https: the CA (PEM) that alone vouches for the module's certificate (default: the
    /// platform's roots).
    pub(crate) ca_file: Option<PathBuf>,
    /// https: the gateway's client certificate for the module (mTLS), with `client_key`.
    pub(crate) client_cert: Option<PathBuf>,
    /// https: `client_cert`'s private key (PEM).
    pub(crate) client_key: Option<PathBuf>,
    /// http: allow `http://` to a host that is not this machine (the traffic, its
    /// credentials included, can be read and changed on the way).
    #[serde(default)]
    pub(crate) allow_insecure: bool,
    /// http: the module's credentials (secrets from the environment only).
    pub(crate) auth: Option<ModuleAuth>,
    #[serde(default)]
    pub(crate) trust_annotations: bool,
    pub(crate) prefix: Option<String>,
    #[serde(default = "default_call_timeout", with = "duration")]
    pub(crate) call_timeout: Duration,
    /// `/readyz` answers 503 while this module is down.
    #[serde(default)]
    pub(crate) required: bool,
    /// Whether callers share one instance of the module or each has its own (its own
    /// upstream session, its own process); by default an HTTP module's state is kept apart
    /// per caller and a stdio module is shared (see [`ModuleConfig::isolation`]).
    pub(crate) isolation: Option<Isolation>,
    /// `per_caller`: at most this many instances at once.
    #[serde(default = "default_max_instances")]
    pub(crate) max_instances: u32,
    /// `per_caller`: an instance unused this long is stopped.
    #[serde(default = "default_instance_idle", with = "duration")]
    pub(crate) instance_idle: Duration,
    /// stdio: the user the process runs as. A gateway run as root runs each module as
    /// another user, by default `nobody`, and never as root; any other gateway runs modules
    /// as itself (see `users`).
    pub(crate) user: Option<String>,
    /// stdio, run as another user: its `HOME` (default: a fresh private directory per
    /// process life).
    pub(crate) home: Option<PathBuf>,
    /// How the module's tool definitions are pinned (docs/security.md).
    #[serde(default)]
    pub(crate) pin: Pin,
    /// http: which era the gateway speaks with it (docs/modules.md).
    #[serde(default)]
    pub(crate) era: ModuleEra,
}

/// `[[modules]] era`: which era the gateway speaks with an HTTP module.
#[derive(Debug, Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ModuleEra {
    /// 2026-07-28 when the module offers it, else the 2025 handshake.
    #[default]
    Auto,
    /// 2026-07-28 only.
    Modern,
    /// The 2025 handshake, even with a module that offers 2026-07-28.
    Legacy,
}

impl ModuleEra {
    /// The module client's setting.
    pub(crate) fn upstream(self) -> mcp_upstream::http::ModuleEra {
        match self {
            ModuleEra::Auto => mcp_upstream::http::ModuleEra::Auto,
            ModuleEra::Modern => mcp_upstream::http::ModuleEra::Modern,
            ModuleEra::Legacy => mcp_upstream::http::ModuleEra::Legacy,
        }
    }
}

impl ModuleConfig {
    /// An http module's URL, checked: `https://`, or `http://` to this machine (elsewhere
    /// only with `allow_insecure`, warned about); and its TLS client for `https://` (`None`
    /// for `http://`), its files read. Every error names the module.
    pub(crate) fn tls(&self) -> Result<(http::Uri, Option<std::sync::Arc<rustls::ClientConfig>>)> {
        let text = self.url.clone().unwrap_or_default();
        let url: http::Uri = text
            .parse()
            .ok()
            .filter(|u: &http::Uri| u.host().is_some())
            .with_context(|| {
                format!(
                    "module {:?}: url must be an http:// or https:// URL",
                    self.name
                )
            })?;
        let files = mcp_upstream::tls::TlsFiles {
            ca_file: self.ca_file.clone(),
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
        };
        match url.scheme_str() {
            Some("https") => {
                let tls = mcp_upstream::tls::client_config(&files)
                    .map_err(|e| anyhow::anyhow!("module {:?}: {e}", self.name))?;
                Ok((url, Some(tls)))
            }
            Some("http") => {
                if files != mcp_upstream::tls::TlsFiles::default() {
                    bail!(
                        "module {:?}: ca_file, client_cert and client_key are for an https:// url",
                        self.name
                    );
                }
                let host = url.host().unwrap_or_default();
                if !crate::notify::is_loopback(host) && !self.allow_insecure {
                    bail!(
                        "module {:?}: http:// to {host} sends its calls and credentials in clear over the network; use https://, or say allow_insecure = true",
                        self.name
                    );
                }
                Ok((url, None))
            }
            _ => bail!(
                "module {:?}: url must be an http:// or https:// URL, not {text:?}",
                self.name
            ),
        }
    }
}

/// `[[modules]] auth`: what an http module's requests carry as `Authorization`.
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum ModuleAuth {
    /// A static token, from the environment.
    Bearer { token_env: String },
    /// The gateway's own OAuth client at the module's authorization server.
    ClientCredentials {
        client_id: String,
        client_secret_env: String,
        #[serde(default)]
        scopes: Vec<String>,
        /// The authorization server's issuer (default: the one the module names, when it
        /// is on the module's own host).
        issuer: Option<String>,
        /// The CA the authorization server's certificate is checked against (default: the
        /// platform's roots).
        ca_file: Option<PathBuf>,
    },
    /// Each caller's own account at the module's authorization server, connected by the
    /// person on the approvals page.
    User {
        /// The gateway's client there (default: one it registers, RFC 7591).
        client_id: Option<String>,
        /// That client's secret (a confidential client; only with a configured issuer).
        client_secret_env: Option<String>,
        #[serde(default)]
        scopes: Vec<String>,
        /// The authorization server's issuer (default: the one the module's protected
        /// resource metadata names).
        issuer: Option<String>,
        /// The CA the authorization server's certificate is checked against.
        ca_file: Option<PathBuf>,
        /// A token the gateway lists the module's tools with (default: it lists without).
        list_token_env: Option<String>,
    },
    /// Each caller's own access token (mode `jwt`) exchanged at the identity provider for
    /// one whose audience is the module (RFC 8693), by the gateway's client there.
    TokenExchange {
        client_id: String,
        client_secret_env: String,
        /// The identity provider that exchanges the callers' tokens.
        issuer: String,
        /// The CA the identity provider's certificate is checked against.
        ca_file: Option<PathBuf>,
        #[serde(default)]
        scopes: Vec<String>,
        /// A token the gateway lists the module's tools with (default: it lists without).
        list_token_env: Option<String>,
    },
}

impl ModuleAuth {
    /// The environment variables holding its secrets.
    pub(crate) fn secret_envs(&self) -> Vec<&str> {
        match self {
            ModuleAuth::Bearer { token_env } => vec![token_env],
            ModuleAuth::ClientCredentials {
                client_secret_env, ..
            } => vec![client_secret_env],
            ModuleAuth::User {
                client_secret_env,
                list_token_env,
                ..
            } => client_secret_env
                .iter()
                .chain(list_token_env)
                .map(String::as_str)
                .collect(),
            ModuleAuth::TokenExchange {
                client_secret_env,
                list_token_env,
                ..
            } => std::iter::once(client_secret_env)
                .chain(list_token_env)
                .map(String::as_str)
                .collect(),
        }
    }

    /// Whether each caller's calls carry credentials of their own (`user`,
    /// `token_exchange`): each caller then has an instance of its own.
    pub(crate) fn per_person(&self) -> bool {
        matches!(
            self,
            ModuleAuth::User { .. } | ModuleAuth::TokenExchange { .. }
        )
    }

    /// The secret in `name`, read from the environment; an error names the module and the
    /// variable, never a value.
    fn secret(module: &str, name: &str, what: &str) -> Result<String> {
        match std::env::var(name) {
            Ok(value) if !value.trim().is_empty() => Ok(value),
            _ => bail!(
                "module {module:?}: auth needs the environment variable {name} (set it to the {what}); it is a gateway secret, never passed to a module"
            ),
        }
    }

    /// The TLS roots of the authorization server, from `ca_file` (`None`: the platform's).
    fn roots(&self, name: &str) -> Result<Option<std::sync::Arc<rustls::ClientConfig>>> {
        let ca_file = match self {
            ModuleAuth::Bearer { .. } => None,
            ModuleAuth::ClientCredentials { ca_file, .. }
            | ModuleAuth::User { ca_file, .. }
            | ModuleAuth::TokenExchange { ca_file, .. } => ca_file.as_ref(),
        };
        ca_file
            .map(|file| {
                mcp_upstream::tls::client_config(&mcp_upstream::tls::TlsFiles {
                    ca_file: Some(file.clone()),
                    ..Default::default()
                })
                .map_err(|e| anyhow::anyhow!("module {name:?}: auth.{e}"))
            })
            .transpose()
    }

    /// The credentials the module `name` at `url` is sent with by the gateway itself (for a
    /// `user` module: only when it lists its tools, and only with `list_token_env`).
    pub(crate) fn credentials(
        &self,
        name: &str,
        url: &http::Uri,
    ) -> Result<Option<mcp_upstream::credentials::SharedCredentials>> {
        let bearer = |env: &str| -> Result<mcp_upstream::credentials::SharedCredentials> {
            let secret = Self::secret(name, env, "token")?;
            Ok(std::sync::Arc::new(
                mcp_upstream::credentials::StaticBearer::new(&secret)
                    .map_err(|e| anyhow::anyhow!("module {name:?}: {env} {e}"))?,
            ))
        };
        Ok(Some(match self {
            ModuleAuth::Bearer { token_env } => bearer(token_env)?,
            ModuleAuth::ClientCredentials {
                client_id,
                client_secret_env,
                scopes,
                issuer,
                ..
            } => std::sync::Arc::new(
                mcp_upstream::credentials::ClientCredentials::new(
                    mcp_upstream::credentials::ClientCredentialsConfig {
                        module: name.to_owned(),
                        resource: resource_of(url),
                        client_id: client_id.clone(),
                        client_secret: Self::secret(name, client_secret_env, "client secret")?,
                        scopes: scopes.clone(),
                        issuer: issuer.clone(),
                        roots: self.roots(name)?,
                    },
                )
                .map_err(|e| anyhow::anyhow!("module {name:?}: {e}"))?,
            ),
            ModuleAuth::User { list_token_env, .. }
            | ModuleAuth::TokenExchange { list_token_env, .. } => match list_token_env {
                Some(env) => bearer(env)?,
                None => return Ok(None),
            },
        }))
    }

    /// For a `token_exchange` module: the exchange of its callers' tokens.
    pub(crate) fn token_exchange(
        &self,
        name: &str,
        url: &http::Uri,
    ) -> Result<Option<std::sync::Arc<mcp_upstream::credentials::TokenExchange>>> {
        let ModuleAuth::TokenExchange {
            client_id,
            client_secret_env,
            issuer,
            scopes,
            ..
        } = self
        else {
            return Ok(None);
        };
        let exchange = mcp_upstream::credentials::TokenExchange::new(
            mcp_upstream::credentials::ClientCredentialsConfig {
                module: name.to_owned(),
                resource: resource_of(url),
                client_id: client_id.clone(),
                client_secret: Self::secret(name, client_secret_env, "client secret")?,
                scopes: scopes.clone(),
                issuer: Some(issuer.clone()),
                roots: self.roots(name)?,
            },
        )
        .map_err(|e| anyhow::anyhow!("module {name:?}: {e}"))?;
        Ok(Some(std::sync::Arc::new(exchange)))
    }

    /// For a `user` module: the OAuth client its people connect their accounts with.
    pub(crate) fn user_oauth(
        &self,
        name: &str,
        url: &http::Uri,
    ) -> Result<Option<std::sync::Arc<mcp_upstream::accounts::UserOAuth>>> {
        let ModuleAuth::User {
            client_id,
            client_secret_env,
            scopes,
            issuer,
            ..
        } = self
        else {
            return Ok(None);
        };
        let client = match (client_id, client_secret_env) {
            (Some(id), secret) => Some(mcp_upstream::accounts::RegisteredClient {
                id: id.clone(),
                secret: secret
                    .as_deref()
                    .map(|env| Self::secret(name, env, "client secret"))
                    .transpose()?,
            }),
            (None, Some(_)) => {
                bail!("module {name:?}: auth.client_secret_env needs auth.client_id")
            }
            (None, None) => None,
        };
        let oauth =
            mcp_upstream::accounts::UserOAuth::new(mcp_upstream::accounts::UserOAuthConfig {
                module: name.to_owned(),
                resource: resource_of(url),
                client,
                scopes: scopes.clone(),
                issuer: issuer.clone(),
                roots: self.roots(name)?,
            })
            .map_err(|e| anyhow::anyhow!("module {name:?}: {e}"))?;
        Ok(Some(std::sync::Arc::new(oauth)))
    }
}

/// The module's URL without any user information: a token's audience (RFC 8707), which its
/// server logs.
fn resource_of(url: &http::Uri) -> String {
    match (url.scheme_str(), url.host()) {
        (Some(scheme), Some(host)) => format!(
            "{scheme}://{host}{}{}",
            url.port().map(|p| format!(":{p}")).unwrap_or_default(),
            url.path_and_query().map_or("/", |p| p.as_str())
        ),
        _ => url.to_string(),
    }
}

/// `[[modules]] pin`.
#[derive(Debug, Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Pin {
    /// Trust what the module lists the first time; hold every change for review.
    #[default]
    FirstUse,
    /// Hold new tools for review too.
    Approve,
    /// No pinning.
    Off,
}

impl Pin {
    pub(crate) fn mode(self) -> mcp_gate::pins::PinMode {
        match self {
            Pin::FirstUse => mcp_gate::pins::PinMode::FirstUse,
            Pin::Approve => mcp_gate::pins::PinMode::Approve,
            Pin::Off => mcp_gate::pins::PinMode::Off,
        }
    }
}

/// `[[modules]] isolation`.
#[derive(Debug, Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Isolation {
    /// One instance serves every caller: for servers that keep no state per client.
    Shared,
    /// Each caller gets its own instance.
    PerCaller,
}

impl ModuleConfig {
    /// The module's isolation: as configured, else `per_caller` for an HTTP module (its
    /// upstream session is the caller's) and `shared` for the others.
    pub(crate) fn isolation(&self) -> Isolation {
        self.isolation.unwrap_or(match self.transport {
            Transport::Http => Isolation::PerCaller,
            Transport::Stdio | Transport::Demo | Transport::PermissionPrompt => Isolation::Shared,
        })
    }
}

pub(super) fn default_max_instances() -> u32 {
    64
}

pub(super) fn default_instance_idle() -> Duration {
    Duration::from_secs(600)
}

/// Whether `value` gives away `secret`: contains it, or (a secret too short to search for
/// without false alarms) is it.
pub(super) fn reveals(value: &str, secret: &str) -> bool {
    if secret.len() >= 8 {
        value.contains(secret)
    } else {
        !secret.is_empty() && value == secret
    }
}

/// Whether `name` is one of the gateway's own secret variables, which no module may inherit:
/// its seal keys and configuration (`MCP_GATEWAY_*`) and its database credentials.
/// With an S3 upload store, its credentials (`AWS_*` from the environment) are too.
pub(super) fn is_gateway_secret_env(name: &str, s3_uploads: bool) -> bool {
    name.starts_with("MCP_GATEWAY_")
        || matches!(
            name,
            "DATABASE_URL" | "PGPASSWORD" | "PGPASSFILE" | "PGSERVICEFILE"
        )
        || (s3_uploads && name.starts_with("AWS_"))
}

pub(super) fn default_call_timeout() -> Duration {
    Duration::from_secs(120)
}
