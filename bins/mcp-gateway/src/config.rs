//! The TOML configuration file, parsed into typed values and checked before anything
//! starts. Every key is documented in docs/configuration.md.

mod auth;
mod check;
mod limits;
mod modules;
mod observability;
mod policy;
mod quotas;
mod servers;
mod serving;
mod store;
#[cfg(test)]
mod tests;
mod units;
mod uploads;

pub(crate) use auth::*;
pub(crate) use limits::*;
pub(crate) use modules::*;
pub(crate) use observability::*;
pub(crate) use policy::*;
pub(crate) use quotas::*;
pub(crate) use servers::*;
pub(crate) use serving::*;
pub(crate) use store::*;
pub(crate) use units::duration;
use units::{bytes, redact};
pub(crate) use uploads::*;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::users;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The whole file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Where to listen.
    #[serde(default = "default_listen")]
    pub(crate) listen: SocketAddr,
    #[serde(default)]
    pub(crate) store: StoreConfig,
    #[serde(default)]
    pub(crate) auth: AuthConfig,
    #[serde(default)]
    pub(crate) http: HttpConfig,
    #[serde(default)]
    pub(crate) gate: GateConfig,
    #[serde(default)]
    pub(crate) modules: Vec<ModuleConfig>,
    #[serde(default)]
    pub(crate) policy: Vec<PolicyConfig>,
    /// `[flow]`: flow labels and the lethal-trifecta rule (docs/guardrails.md).
    #[serde(default)]
    pub(crate) flow: FlowConfig,
    /// `[content]`: secrets, personal data and hidden instructions in results.
    #[serde(default)]
    pub(crate) content: ContentConfig,
    #[serde(default)]
    pub(crate) uploads: UploadsConfig,
    #[serde(default)]
    pub(crate) approvers: Vec<ApproverConfig>,
    /// `[[quotas]]`: calls or cost units per tool pattern, caller or everyone, per window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) quotas: Vec<QuotaConfig>,
    /// `[[tool_costs]]`: the cost units of one call, per tool pattern (1 otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_costs: Vec<ToolCostConfig>,
    /// `[[servers]]`: virtual servers, a team's tools each at `/mcp/{name}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) servers: Vec<ServerConfig>,
    #[serde(default)]
    pub(crate) metrics: MetricsConfig,
    #[serde(default)]
    pub(crate) limits: LimitsConfig,
    /// `[[notify]]`: who is told that an elicitation waits.
    #[serde(default)]
    pub(crate) notify: Vec<crate::notify::NotifyConfig>,
    /// `[tracing]`: OpenTelemetry traces (off without `otlp_endpoint`).
    #[serde(default)]
    pub(crate) tracing: TracingConfig,
    /// The file this configuration was read from.
    #[serde(skip)]
    pub(crate) source: Option<PathBuf>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

impl Config {
    /// The demo: no file, memory store, no auth, the demo module.
    pub(crate) fn demo() -> Config {
        let mut config: Config = toml::from_str("").expect("the empty configuration is valid");
        config.modules.push(ModuleConfig {
            name: "demo".into(),
            transport: Transport::Demo,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            inherit_env: Vec::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            ca_file: None,
            client_cert: None,
            client_key: None,
            allow_insecure: false,
            auth: None,
            trust_annotations: true,
            prefix: None,
            call_timeout: default_call_timeout(),
            required: false,
            isolation: None,
            max_instances: default_max_instances(),
            instance_idle: default_instance_idle(),
            user: None,
            home: None,
            pin: Pin::default(),
            era: ModuleEra::default(),
        });
        config
    }

    /// The configuration as the gateway uses it — every default filled in — in TOML, with
    /// secrets redacted (database passwords, seal keys, module environments and headers).
    pub(crate) fn effective(&self) -> Result<String> {
        let mut text =
            toml::to_string_pretty(self).context("the configuration cannot be written out")?;
        // Whatever form a secret took (a keyword connection string, a percent-encoded
        // password), it is not printed.
        for (_, secret) in self.gateway_secrets() {
            if secret.len() >= 4 {
                text = text.replace(&secret, "<redacted>");
            }
        }
        Ok(text)
    }

    /// Reads and checks a configuration file.
    pub(crate) fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        let mut config: Config = toml::from_str(&text)
            .with_context(|| format!("invalid configuration in {}", path.display()))?;
        config.source = Some(path.to_owned());
        config.check()?;
        // Every default filled in, as `check-config` prints it.
        config.store.max_records_per_caller = Some(config.store.records_per_caller());
        config.store.max_bytes_per_caller = Some(config.store.bytes_per_caller());
        // Each issuer's name as its callers are named (sub@name), so an operator sees that
        // two issuers are apart.
        if let Some(jwt) = &mut config.auth.jwt {
            for issuer in &mut jwt.issuers {
                issuer.name = Some(issuer.name());
            }
        }
        for module in &mut config.modules {
            module.isolation = Some(module.isolation());
            // The default filled in; a given `user` (a uid:gid, say) stays as given, as it runs.
            if module.transport == Transport::Stdio
                && module.user.is_none()
                && let Some(user) = users::module_user(&module.name, None)?
            {
                module.user = Some(user.name);
            }
        }
        Ok(config)
    }
}
