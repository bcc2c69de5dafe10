//! The TOML configuration file, parsed into typed values and checked before anything
//! starts. Every key is documented in docs/configuration.md.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::users;
use anyhow::{Context, Result, bail};
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
    #[serde(default)]
    pub(crate) uploads: UploadsConfig,
    #[serde(default)]
    pub(crate) approvers: Vec<ApproverConfig>,
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

/// `[metrics]`: where the operations endpoints are served besides the main listener.
#[derive(Debug, Serialize, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsConfig {
    /// A separate listener for `/metrics`, `/readyz` and `/healthz`, without
    /// authentication; when set, `/metrics` is not served on the main listener.
    pub(crate) listen: Option<SocketAddr>,
}

/// `[tracing]`: OpenTelemetry traces of the gateway's requests, exported over OTLP/HTTP
/// (docs/operations.md). Read at start-up (a reload keeps the running exporter).
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct TracingConfig {
    /// The collector's OTLP/HTTP traces URL, `http://host:4318/v1/traces`; unset: off.
    pub(crate) otlp_endpoint: Option<String>,
    /// The share of requests traced, 0 to 1, spread evenly (a client's own sampled flag
    /// does not decide: a client cannot have all its calls traced).
    #[serde(default = "default_sample_ratio")]
    pub(crate) sample_ratio: f64,
    /// `service.name`.
    #[serde(default = "default_service_name")]
    pub(crate) service_name: String,
    /// More resource attributes (`deployment.environment = "prod"`, say).
    #[serde(default)]
    pub(crate) resource: std::collections::BTreeMap<String, String>,
    /// At most this many finished spans wait for the collector; more are dropped (counted
    /// in `/metrics`).
    #[serde(default = "default_trace_queue")]
    pub(crate) max_queue: usize,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            otlp_endpoint: None,
            sample_ratio: default_sample_ratio(),
            service_name: default_service_name(),
            resource: std::collections::BTreeMap::new(),
            max_queue: default_trace_queue(),
        }
    }
}

fn default_sample_ratio() -> f64 {
    1.0
}

fn default_service_name() -> String {
    "mcp-gateway".into()
}

fn default_trace_queue() -> usize {
    2048
}

impl TracingConfig {
    /// The exporter's configuration, if tracing is on; a bad value is an error naming it.
    pub(crate) fn resolve(&self) -> Result<Option<mcp_trace::TraceConfig>> {
        let Some(endpoint) = &self.otlp_endpoint else {
            return Ok(None);
        };
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            bail!(
                "[tracing] sample_ratio must be between 0 and 1, not {}",
                self.sample_ratio
            );
        }
        let uri: http::Uri = endpoint
            .parse()
            .ok()
            .filter(|u: &http::Uri| u.scheme_str() == Some("http") && u.host().is_some())
            .with_context(|| {
                format!("[tracing] otlp_endpoint must be an http:// URL like http://127.0.0.1:4318/v1/traces, not {endpoint:?}")
            })?;
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            bail!("[tracing] otlp_endpoint must not carry user information (user:password@)");
        }
        if uri.path() == "/" {
            bail!(
                "[tracing] otlp_endpoint {endpoint:?} has no path: the OTLP/HTTP traces path is /v1/traces"
            );
        }
        if !(1..=65_536).contains(&self.max_queue) {
            bail!(
                "[tracing] max_queue must be between 1 and 65536, not {}",
                self.max_queue
            );
        }
        Ok(Some(mcp_trace::TraceConfig {
            endpoint: uri.to_string(),
            sample_ratio: self.sample_ratio,
            service_name: self.service_name.clone(),
            resource: self
                .resource
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            max_queue: self.max_queue,
        }))
    }
}

/// `[limits]`: per-caller rates and per-module concurrency.
#[derive(Debug, Serialize, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsConfig {
    /// Tool calls per minute per caller (a token bucket; 0: no limit).
    #[serde(default = "default_calls_per_minute")]
    pub(crate) calls_per_minute: u32,
    /// Calls a caller may make at once above the rate.
    #[serde(default = "default_calls_burst")]
    pub(crate) calls_burst: u32,
    /// Elicitations (confirmations among them) a caller may create per minute (0: no limit).
    #[serde(default = "default_confirmations_per_minute")]
    pub(crate) confirmations_per_minute: u32,
    /// Confirmations a caller may create at once above the rate.
    #[serde(default = "default_confirmations_burst")]
    pub(crate) confirmations_burst: u32,
    /// Calls one module runs at once (0: no limit); more wait up to `module_queue_timeout`.
    #[serde(default = "default_module_concurrency")]
    pub(crate) module_concurrency: u32,
    #[serde(default = "default_module_queue_timeout", with = "duration")]
    pub(crate) module_queue_timeout: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            calls_per_minute: default_calls_per_minute(),
            calls_burst: default_calls_burst(),
            confirmations_per_minute: default_confirmations_per_minute(),
            confirmations_burst: default_confirmations_burst(),
            module_concurrency: default_module_concurrency(),
            module_queue_timeout: default_module_queue_timeout(),
        }
    }
}

fn default_calls_per_minute() -> u32 {
    600
}
fn default_calls_burst() -> u32 {
    60
}
fn default_confirmations_per_minute() -> u32 {
    60
}
fn default_confirmations_burst() -> u32 {
    20
}
fn default_module_concurrency() -> u32 {
    64
}
fn default_module_queue_timeout() -> Duration {
    Duration::from_secs(10)
}

/// `[uploads]`: where files answering `file_upload` elicitations are kept.
#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct UploadsConfig {
    /// A directory (default: `mcp-gateway-uploads-<uid>` in the system's temporary
    /// directory: each user's own).
    pub(crate) dir: Option<std::path::PathBuf>,
    /// An S3-compatible bucket instead of a directory (`[uploads.s3]`).
    pub(crate) s3: Option<S3Config>,
    /// A key prefix inside the directory or bucket (default `uploads`).
    pub(crate) prefix: Option<String>,
    /// The largest file taken, in bytes (default 25 MiB), whatever an elicitation allows.
    pub(crate) max_bytes: Option<u64>,
}

/// `[uploads.s3]`: an S3-compatible bucket. Credentials come from the environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), never this file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct S3Config {
    pub(crate) bucket: String,
    /// The service's URL when it is not AWS (MinIO, Ceph, …).
    pub(crate) endpoint: Option<String>,
    pub(crate) region: Option<String>,
}

impl UploadsConfig {
    /// The blob store this section configures.
    pub(crate) fn resolve(&self) -> Result<mcp_http_kit::uploads::UploadsConfig> {
        let location = match (&self.dir, &self.s3) {
            (Some(_), Some(_)) => {
                bail!("[uploads] has both dir and s3: files are kept in one place; remove one")
            }
            (_, Some(s3)) => {
                if s3.bucket.trim().is_empty() {
                    bail!("[uploads.s3] bucket is empty");
                }
                if let Some(endpoint) = &s3.endpoint
                    && !(endpoint.starts_with("https://") || endpoint.starts_with("http://"))
                {
                    bail!("[uploads.s3] endpoint {endpoint:?} must be an http:// or https:// URL");
                }
                mcp_http_kit::uploads::BlobLocation::S3 {
                    bucket: s3.bucket.clone(),
                    endpoint: s3.endpoint.clone(),
                    region: s3.region.clone(),
                }
            }
            (dir, None) => {
                mcp_http_kit::uploads::BlobLocation::Dir(dir.clone().unwrap_or_else(|| {
                    std::env::temp_dir()
                        .join(format!("mcp-gateway-uploads-{}", users::gateway_uid()))
                }))
            }
        };
        let prefix = self.prefix.clone().unwrap_or_else(|| "uploads".into());
        if prefix.is_empty()
            || !prefix.split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            })
        {
            bail!(
                "[uploads] prefix {prefix:?} must be path segments of letters, digits, '-', '_' or '.' separated by '/'"
            );
        }
        let max_bytes = self
            .max_bytes
            .unwrap_or(mcp_http_kit::uploads::DEFAULT_MAX_BYTES);
        if max_bytes == 0 {
            bail!("[uploads] max_bytes must be at least 1");
        }
        Ok(mcp_http_kit::uploads::UploadsConfig {
            location,
            prefix,
            max_bytes,
        })
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

#[derive(Debug, Serialize, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoreKind {
    #[default]
    Memory,
    Postgres,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreConfig {
    #[serde(default)]
    pub(crate) kind: StoreKind,
    #[serde(serialize_with = "redact::url")]
    pub(crate) database_url: Option<String>,
    /// A file holding the database URL (its first line), for a URL kept out of the
    /// configuration and the environment.
    pub(crate) database_url_file: Option<PathBuf>,
    #[serde(default)]
    #[serde(serialize_with = "redact::keys")]
    pub(crate) seal_keys: Vec<String>,
    pub(crate) seal_keys_file: Option<PathBuf>,
    #[serde(default = "default_pool_size")]
    pub(crate) pool_size: usize,
    /// The longest one database operation may take before it fails as unavailable.
    #[serde(default = "default_operation_timeout", with = "duration")]
    pub(crate) operation_timeout: Duration,
    #[serde(default = "default_max_pending")]
    pub(crate) max_pending_per_caller: usize,
    #[serde(default = "default_max_records")]
    pub(crate) max_records: usize,
    /// Default: see [`StoreConfig::records_per_caller`].
    #[serde(default)]
    pub(crate) max_records_per_caller: Option<usize>,
    #[serde(default = "default_max_bytes", with = "bytes")]
    pub(crate) max_bytes: usize,
    /// Default: see [`StoreConfig::bytes_per_caller`].
    #[serde(default, with = "bytes::option")]
    pub(crate) max_bytes_per_caller: Option<usize>,
    #[serde(default = "default_sweep", with = "duration")]
    pub(crate) sweep_interval: Duration,
    /// Finished elicitations older than this are erased (their audit trail stays).
    #[serde(default, with = "duration::option")]
    pub(crate) retention: Option<Duration>,
}

impl StoreConfig {
    /// Records one caller may keep: as configured, else 25,000 or the total when that is
    /// lower (lowering `max_records` alone is a valid configuration).
    pub(crate) fn records_per_caller(&self) -> usize {
        self.max_records_per_caller
            .unwrap_or_else(|| self.max_records.min(25_000))
    }

    /// Bytes one caller may keep: as configured, else 64 MiB or the total when that is
    /// lower.
    pub(crate) fn bytes_per_caller(&self) -> usize {
        self.max_bytes_per_caller
            .unwrap_or_else(|| self.max_bytes.min(64 * 1024 * 1024))
    }

    /// The database URL: `database_url`, else the first line of `database_url_file`, else
    /// the `DATABASE_URL` environment variable.
    pub(crate) fn database_url(&self) -> Result<Option<String>> {
        if let Some(url) = &self.database_url {
            return Ok(Some(url.clone()));
        }
        if let Some(path) = &self.database_url_file {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!("cannot read store.database_url_file {}", path.display())
            })?;
            let url = text.lines().next().unwrap_or_default().trim();
            if url.is_empty() {
                bail!(
                    "store.database_url_file {} is empty; it holds the database URL on its first line",
                    path.display()
                );
            }
            return Ok(Some(url.to_owned()));
        }
        Ok(std::env::var("DATABASE_URL").ok())
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Memory,
            database_url: None,
            database_url_file: None,
            seal_keys: Vec::new(),
            seal_keys_file: None,
            pool_size: default_pool_size(),
            operation_timeout: default_operation_timeout(),
            max_pending_per_caller: default_max_pending(),
            max_records: default_max_records(),
            max_records_per_caller: None,
            max_bytes: default_max_bytes(),
            max_bytes_per_caller: None,
            sweep_interval: default_sweep(),
            retention: None,
        }
    }
}

fn default_pool_size() -> usize {
    16
}
fn default_max_pending() -> usize {
    100
}
fn default_max_records() -> usize {
    100_000
}

fn default_max_bytes() -> usize {
    256 * 1024 * 1024
}

fn default_operation_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_sweep() -> Duration {
    Duration::from_secs(30)
}

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
        if !mcp_auth::jwt::is_secure_or_loopback(&base) {
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
fn default_session_max_age() -> Duration {
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
        use mcp_auth::jwt::{IssuerConfig, JwksSource, ScopeNames, is_secure_or_loopback};
        let mut issuers = Vec::new();
        for i in &self.issuers {
            let jwks = match (&i.jwks_url, &i.jwks_file) {
                (Some(url), None) => {
                    if !is_secure_or_loopback(url) {
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
    /// (only the group, never the caller itself).
    #[serde(default = "default_approval_mode")]
    pub(crate) mode: String,
    /// Mode `jwt`: the issuer (its name or its URL) whose members of `group` answer, for
    /// every caller. Without it, a group counts only as asserted by the held call's
    /// caller's own issuer.
    pub(crate) issuer: Option<String>,
}

fn default_approval_mode() -> String {
    "must".into()
}

impl ApproverConfig {
    pub(crate) fn resolve(&self, auth: &AuthConfig) -> Result<mcp_gate::ApproverRule> {
        use mcp_gate::GroupsFrom;
        let Some(mode) = elicitation_store::ApprovalMode::from_label(&self.mode) else {
            bail!(
                "[[approvers]] for {:?}: mode {:?} must be \"may\", \"must\" or \"four_eyes\"",
                self.tools,
                self.mode
            );
        };
        if self.tools.is_empty() || self.tools[..self.tools.len() - 1].contains('*') {
            bail!(
                "[[approvers]] tools {:?} must be a tool name, or a prefix ending in one '*'",
                self.tools
            );
        }
        let group = self.group.trim();
        if group.is_empty() || group.len() > 256 || group.chars().any(char::is_control) {
            bail!(
                "[[approvers]] for {:?}: group must be 1 to 256 characters",
                self.tools
            );
        }
        let groups_from = match (&auth.mode, &auth.jwt, &self.issuer) {
            (AuthMode::Jwt, Some(jwt), Some(wanted)) => {
                match jwt
                    .issuers
                    .iter()
                    .find(|i| i.name() == *wanted || i.issuer == *wanted)
                {
                    Some(issuer) => GroupsFrom::Issuer(issuer.name()),
                    None => bail!(
                        "[[approvers]] for {:?}: issuer {wanted:?} is not one of [[auth.jwt.issuers]] (give its name or its URL)",
                        self.tools
                    ),
                }
            }
            (AuthMode::Jwt, _, None) => GroupsFrom::CallersIssuer,
            (_, _, Some(_)) => bail!(
                "[[approvers]] for {:?}: issuer is for auth mode \"jwt\"",
                self.tools
            ),
            (_, _, None) => {
                if group.contains('#') {
                    bail!(
                        "[[approvers]] for {:?}: group {group:?} may not contain '#' (it qualifies a group by its tenant)",
                        self.tools
                    );
                }
                GroupsFrom::Configured
            }
        };
        Ok(mcp_gate::ApproverRule {
            tools: self.tools.clone(),
            approval: elicitation_store::Approval {
                group: group.to_owned(),
                mode,
            },
            groups_from,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpConfig {
    #[serde(default = "default_body_limit")]
    pub(crate) body_limit: usize,
    #[serde(default)]
    pub(crate) allowed_origins: Vec<String>,
    #[serde(default)]
    pub(crate) allowed_hosts: Vec<String>,
    #[serde(default = "default_session_idle", with = "duration")]
    pub(crate) session_idle_timeout: Duration,
    #[serde(default = "default_session_max_age", with = "duration")]
    pub(crate) session_max_age: Duration,
    #[serde(default = "default_header_read_timeout", with = "duration")]
    pub(crate) header_read_timeout: Duration,
    #[serde(default = "default_body_read_timeout", with = "duration")]
    pub(crate) body_read_timeout: Duration,
    #[serde(default = "default_idle_timeout", with = "duration")]
    pub(crate) idle_timeout: Duration,
    #[serde(default = "default_max_connections")]
    pub(crate) max_connections: usize,
    #[serde(default = "default_max_streams_per_caller")]
    pub(crate) max_streams_per_caller: usize,
    /// Most bytes of request bodies one caller (or everyone unauthenticated, together) may be
    /// sending at once (default: four bodies of `body_limit`, and at least one upload).
    #[serde(default)]
    pub(crate) body_bytes_per_caller: Option<usize>,
    /// Most bytes of request bodies being received at once, of all senders (default: four
    /// callers' shares).
    #[serde(default)]
    pub(crate) body_bytes_in_flight: Option<usize>,
    /// The approvals page's cookie is `Secure` (set when clients reach the gateway over TLS).
    #[serde(default)]
    pub(crate) secure_cookies: bool,
    /// The gateway's address as people reach it, for the approvals page's URLs.
    #[serde(default)]
    pub(crate) public_url: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            body_limit: default_body_limit(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            session_idle_timeout: default_session_idle(),
            session_max_age: default_session_max_age(),
            header_read_timeout: default_header_read_timeout(),
            body_read_timeout: default_body_read_timeout(),
            idle_timeout: default_idle_timeout(),
            max_connections: default_max_connections(),
            max_streams_per_caller: default_max_streams_per_caller(),
            body_bytes_per_caller: None,
            body_bytes_in_flight: None,
            secure_cookies: false,
            public_url: None,
        }
    }
}

impl HttpConfig {
    /// `body_bytes_per_caller` and `body_bytes_in_flight`, their defaults filled in, for a
    /// gateway whose uploads are at most `upload_max` bytes.
    pub(crate) fn body_bytes(&self, upload_max: u64) -> (usize, usize) {
        let upload = usize::try_from(upload_max).unwrap_or(usize::MAX);
        let per_caller = self
            .body_bytes_per_caller
            .unwrap_or_else(|| self.body_limit.saturating_mul(4).max(upload));
        let in_flight = self
            .body_bytes_in_flight
            .unwrap_or_else(|| per_caller.saturating_mul(4));
        (per_caller, in_flight)
    }
}

fn default_body_limit() -> usize {
    4 * 1024 * 1024
}
fn default_session_idle() -> Duration {
    Duration::from_secs(30 * 60)
}
fn default_header_read_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_body_read_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_idle_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_max_connections() -> usize {
    1024
}
fn default_max_streams_per_caller() -> usize {
    16
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GateConfig {
    #[serde(default = "default_ttl", with = "duration")]
    pub(crate) default_ttl: Duration,
    #[serde(default)]
    pub(crate) gate_open_world: bool,
    /// How a client is asked natively: `auto`, `form`, `url` or `off`.
    #[serde(default)]
    pub(crate) native: mcp_http::ask::NativeMode,
    /// The longest standing grant a person may make when approving a call.
    #[serde(default = "default_max_grant", with = "duration")]
    pub(crate) max_grant: Duration,
}

/// Longest `[gate] max_grant` an operator may configure.
pub(crate) const MAX_MAX_GRANT: Duration = Duration::from_secs(30 * 86_400);

impl GateConfig {
    /// `max_grant`, checked: 1s to 30d.
    pub(crate) fn max_grant(&self) -> Result<time::Duration> {
        if self.max_grant < Duration::from_secs(1) || self.max_grant > MAX_MAX_GRANT {
            bail!(
                "[gate] max_grant must be 1s to 30d (it bounds how long a person's standing grant may last)"
            );
        }
        Ok(time::Duration::try_from(self.max_grant).unwrap_or(time::Duration::DAY))
    }
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            default_ttl: default_ttl(),
            gate_open_world: false,
            native: mcp_http::ask::NativeMode::Auto,
            max_grant: default_max_grant(),
        }
    }
}

fn default_ttl() -> Duration {
    Duration::from_secs(600)
}

fn default_max_grant() -> Duration {
    Duration::from_secs(8 * 3600)
}

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

fn default_max_instances() -> u32 {
    64
}

fn default_instance_idle() -> Duration {
    Duration::from_secs(600)
}

/// Whether `value` gives away `secret`: contains it, or (a secret too short to search for
/// without false alarms) is it.
fn reveals(value: &str, secret: &str) -> bool {
    if secret.len() >= 8 {
        value.contains(secret)
    } else {
        !secret.is_empty() && value == secret
    }
}

/// Whether `name` is one of the gateway's own secret variables, which no module may inherit:
/// its seal keys and configuration (`MCP_GATEWAY_*`) and its database credentials.
/// With an S3 upload store, its credentials (`AWS_*` from the environment) are too.
fn is_gateway_secret_env(name: &str, s3_uploads: bool) -> bool {
    name.starts_with("MCP_GATEWAY_")
        || matches!(
            name,
            "DATABASE_URL" | "PGPASSWORD" | "PGPASSFILE" | "PGSERVICEFILE"
        )
        || (s3_uploads && name.starts_with("AWS_"))
}

fn default_call_timeout() -> Duration {
    Duration::from_secs(120)
}

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

/// A number with an optional unit, as `"30s"` or `"64MiB"`, or a bare number (the unit
/// that `units` lists first with factor 1 is implied).
mod quantity {
    use serde::{Deserialize, Deserializer, de::Error};

    /// `n` in the largest unit that divides it (`0` and odd amounts in the smallest).
    pub(super) fn format(n: u64, units: &[(&str, u64)]) -> String {
        units
            .iter()
            .rev()
            .find(|(_, factor)| n > 0 && n.is_multiple_of(*factor))
            .map_or_else(
                || format!("{n}{}", units.first().map_or("", |(u, _)| *u)),
                |(unit, factor)| format!("{}{unit}", n / factor),
            )
    }

    /// Parses `text` against `units` (suffix, factor); `example` is named in errors.
    pub(super) fn parse(text: &str, units: &[(&str, u64)], example: &str) -> Result<u64, String> {
        let text = text.trim();
        let (number, unit) = text.split_at(
            text.find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len()),
        );
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a value like {example}"))?;
        let unit = unit.trim();
        let factor = match units.iter().find(|(suffix, _)| *suffix == unit) {
            Some((_, factor)) => *factor,
            None if unit.is_empty() => 1,
            None => {
                let names: Vec<&str> = units.iter().map(|(s, _)| *s).collect();
                return Err(format!(
                    "{text:?}: the unit must be one of {}",
                    names.join(", ")
                ));
            }
        };
        Ok(n.saturating_mul(factor))
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }

    /// A TOML integer as is, or a string through [`parse`].
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
        units: &[(&str, u64)],
        example: &str,
    ) -> Result<u64, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(n),
            Raw::Text(text) => parse(&text, units, example).map_err(D::Error::custom),
        }
    }
}

/// Sizes as a number of bytes or `"512KiB"`, `"64MiB"`, `"1GiB"`.
mod bytes {
    use serde::Deserializer;

    const UNITS: [(&str, u64); 4] = [
        ("B", 1),
        ("KiB", 1 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
    ];
    const EXAMPLE: &str = "\"64MiB\"";

    #[cfg(test)]
    pub(super) fn parse(text: &str) -> Result<usize, String> {
        super::quantity::parse(text, &UNITS, EXAMPLE).map(saturate)
    }

    fn saturate(n: u64) -> usize {
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        super::quantity::deserialize(d, &UNITS, EXAMPLE).map(saturate)
    }

    pub(super) fn serialize<S: serde::Serializer>(n: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::quantity::format(*n as u64, &UNITS))
    }

    pub(super) mod option {
        use serde::Deserializer;

        pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<usize>, D::Error> {
            super::deserialize(d).map(Some)
        }

        pub(in super::super) fn serialize<S: serde::Serializer>(
            n: &Option<usize>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match n {
                Some(n) => super::serialize(n, s),
                None => s.serialize_none(),
            }
        }
    }
}

/// Secrets in the effective configuration `check-config` prints.
mod redact {
    use std::collections::BTreeMap;

    use serde::Serializer;

    const HIDDEN: &str = "<redacted>";

    /// A URL without its password (`postgres://user:<redacted>@host/db`).
    pub(super) fn url<S: Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        match url {
            None => s.serialize_none(),
            Some(url) => {
                let shown = match (url.find("://"), url.rfind('@')) {
                    (Some(scheme), Some(at)) if at > scheme => {
                        let userinfo = &url[scheme + 3..at];
                        match userinfo.split_once(':') {
                            Some((user, _)) => {
                                format!("{}{user}:{HIDDEN}{}", &url[..scheme + 3], &url[at..])
                            }
                            None => url.clone(),
                        }
                    }
                    _ => url.clone(),
                };
                // A password may also be a query parameter.
                let shown = match shown.split_once("password=") {
                    Some((before, _)) => format!("{before}password={HIDDEN}"),
                    None => shown,
                };
                s.serialize_some(&shown)
            }
        }
    }

    /// Seal keys by id only.
    pub(super) fn keys<S: Serializer>(keys: &[String], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(keys.iter().map(|k| match k.split_once(':') {
            Some((id, _)) => format!("{id}:{HIDDEN}"),
            None => HIDDEN.to_owned(),
        }))
    }

    /// Names kept, values hidden (module environments and headers).
    pub(super) fn values<S: Serializer>(
        map: &BTreeMap<String, String>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(map.keys().map(|k| (k, HIDDEN)))
    }
}

/// Durations as `"30s"`, `"10m"`, `"2h"` or a number of seconds.
mod duration {
    use std::time::Duration;

    use serde::Deserializer;

    const UNITS: [(&str, u64); 4] = [("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)];
    const EXAMPLE: &str = "\"30s\", \"10m\", \"2h\" or \"30d\"";

    #[cfg(test)]
    pub(super) fn parse(text: &str) -> Result<Duration, String> {
        super::quantity::parse(text, &UNITS, EXAMPLE).map(Duration::from_secs)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        super::quantity::deserialize(d, &UNITS, EXAMPLE).map(Duration::from_secs)
    }

    pub(super) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::quantity::format(d.as_secs(), &UNITS))
    }

    pub(super) mod option {
        use super::*;

        pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Duration>, D::Error> {
            super::deserialize(d).map(Some)
        }

        pub(in super::super) fn serialize<S: serde::Serializer>(
            d: &Option<Duration>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }
    }
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

    /// The gateway's own secret values, with what each is: the database URL and the seal
    /// keys' material, from the file or the environment.
    fn gateway_secrets(&self) -> Vec<(&'static str, String)> {
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

    fn check(&self) -> Result<()> {
        self.uploads.resolve()?;
        crate::notify::sinks(&self.notify)?;
        crate::notify::slack_actions(&self.notify)?;
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
                    || m.auth.is_some() =>
                {
                    bail!(
                        "module {:?}: ca_file, client_cert, client_key, allow_insecure and auth are for transport \"http\"",
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
            .unwrap_or(mcp_http_kit::uploads::DEFAULT_MAX_BYTES);
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config loader, fuzzed (docs/reliability.md): any text is read or refused with a
    /// reason, never a panic; a configuration that passes its checks is written out
    /// (`check-config`) and read back to the same configuration.
    #[test]
    fn fuzz_config() {
        mcp_fuzz::explore("config", |data| {
            let Ok(text) = std::str::from_utf8(data) else {
                return;
            };
            let Ok(config) = toml::from_str::<Config>(text) else {
                return;
            };
            if config.check().is_err() {
                return;
            }
            let written = toml::to_string_pretty(&config).expect("a checked configuration writes");
            let again: Config = toml::from_str(&written)
                .unwrap_or_else(|e| panic!("a written configuration reads back: {e}\n{written}"));
            assert_eq!(
                toml::to_string_pretty(&again).expect("writes"),
                written,
                "a configuration changed in a round trip"
            );
        });
    }

    /// On today's main, lowering `max_records` alone failed start-up: the per-caller limit
    /// kept its default of 25,000, above the new total.
    #[test]
    fn lowering_a_store_total_alone_lowers_the_per_caller_default_with_it() {
        let config: Config =
            toml::from_str("[store]\nmax_records = 100\nmax_bytes = \"1MiB\"").unwrap();
        config.check().unwrap();
        assert_eq!(config.store.records_per_caller(), 100);
        assert_eq!(config.store.bytes_per_caller(), 1 << 20);
        let defaults: Config = toml::from_str("").unwrap();
        assert_eq!(defaults.store.records_per_caller(), 25_000);
        assert_eq!(defaults.store.bytes_per_caller(), 64 << 20);
        let explicit: Config =
            toml::from_str("[store]\nmax_records = 100\nmax_records_per_caller = 101").unwrap();
        assert!(
            explicit.check().is_err(),
            "an explicit per-caller limit above the total"
        );
    }

    #[test]
    fn the_example_file_parses_and_checks() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mcp-gateway.example.toml");
        let config = Config::load(&path).unwrap();
        assert_eq!(config.auth.mode, AuthMode::Tokens);
        assert!(!config.modules.is_empty());
    }

    /// The commented-out [auth] alternative of the example file, as an operator would enable
    /// it.
    fn example_jwt_section() -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mcp-gateway.example.toml");
        let text = std::fs::read_to_string(path).unwrap();
        text.lines()
            .skip_while(|l| *l != "# [auth]")
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.trim_start_matches('#').trim_start()))
            .collect()
    }

    #[test]
    fn the_example_files_jwt_section_parses_and_checks() {
        let jwt = example_jwt_section();
        assert!(jwt.contains("mode = \"jwt\""), "{jwt}");
        let config: Config = toml::from_str(&jwt).unwrap();
        config.check().unwrap();
        let resolved = config.auth.jwt.unwrap().resolve().unwrap();
        assert_eq!(resolved.issuers[0].name, "login.example.com/realms/acme");
        assert_eq!(resolved.scopes.tools_call, "mcp.tools");
    }

    /// `check-config` shows the name each issuer's callers are named by (`sub@name`), so an
    /// operator can see that two issuers are apart.
    #[test]
    fn check_config_shows_each_issuers_name() {
        let jwt = example_jwt_section();
        let file =
            std::env::temp_dir().join(format!("mcp-issuer-name-{}.toml", std::process::id()));
        std::fs::write(&file, &jwt).unwrap();
        let effective = Config::load(&file).unwrap().effective().unwrap();
        let _ = std::fs::remove_file(&file);
        assert!(
            effective.contains("name = \"login.example.com/realms/acme\""),
            "{effective}"
        );
    }

    #[test]
    fn sizes_take_binary_units_or_bytes() {
        assert_eq!(bytes::parse("512"), Ok(512));
        assert_eq!(bytes::parse("2KiB"), Ok(2048));
        assert_eq!(bytes::parse("64MiB"), Ok(64 << 20));
        assert_eq!(bytes::parse("1GiB"), Ok(1 << 30));
        assert!(bytes::parse("64MB").is_err());
        assert!(bytes::parse("lots").is_err());
    }

    #[test]
    fn durations_take_units_or_seconds() {
        assert_eq!(duration::parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration::parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(duration::parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(duration::parse("45"), Ok(Duration::from_secs(45)));
        assert!(duration::parse("ten minutes").is_err());
        assert_eq!(duration::parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert!(duration::parse("5w").is_err());
    }

    #[test]
    fn unsafe_or_incomplete_configurations_are_refused_with_a_reason() {
        let cases = [
            ("listen = \"0.0.0.0:8080\"", "loopback"),
            ("[store]\nretention = \"30s\"", "at least 1 minute"),
            (
                "[store]\noperation_timeout = \"0s\"",
                "between 100ms and 10s",
            ),
            (
                "[store]\noperation_timeout = \"11s\"",
                "between 100ms and 10s",
            ),
            (
                "[limits]\nmodule_queue_timeout = \"0s\"",
                "module_queue_timeout must be more than 0",
            ),
            ("[auth]\nmode = \"jwt\"", "needs an [auth.jwt] section"),
            (
                "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"https://gw/mcp\"",
                "at least one [[auth.jwt.issuers]]",
            ),
            (
                "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"https://gw/mcp\"\n[[auth.jwt.issuers]]\nissuer = \"https://idp/\"\njwks_url = \"https://idp/jwks\"\nalgorithms = [\"HS256\"]",
                "not accepted",
            ),
            (
                "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"https://gw/mcp\"\n[[auth.jwt.issuers]]\nissuer = \"https://idp/\"\njwks_url = \"http://idp/jwks\"",
                "must be https://",
            ),
            (
                "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"https://gw/mcp\"\n[[auth.jwt.issuers]]\nissuer = \"https://idp/\"",
                "exactly one of jwks_url and jwks_file",
            ),
            (
                "[[modules]]\nname = \"fs\"\ntransport = \"stdio\"",
                "needs command",
            ),
            (
                "[[modules]]\nname = \"w\"\ntransport = \"http\"",
                "needs url",
            ),
            (
                "[[modules]]\nname = \"a b\"\ntransport = \"demo\"",
                "letters",
            ),
            ("[[policy]]\ntool = \"x\"\nttl = \"0s\"", "at least 1s"),
            ("[gate]\nmax_grant = \"31d\"", "max_grant must be 1s to 30d"),
            ("[gate]\nmax_grant = \"0s\"", "max_grant must be 1s to 30d"),
            (
                "[[modules]]\nname = \"m\"\ntransport = \"demo\"\nprefix = \"a b\"",
                "prefix",
            ),
            (
                "[uploads]\ndir = \"/tmp/u\"\n[uploads.s3]\nbucket = \"b\"",
                "both dir and s3",
            ),
            ("[uploads]\nprefix = \"../up\"", "prefix"),
            ("[uploads]\nmax_bytes = 0", "at least 1"),
            (
                "[uploads.s3]\nbucket = \"b\"\nendpoint = \"s3.internal\"",
                "http:// or https://",
            ),
            (
                "[uploads.s3]\nbucket = \"b\"\n[[modules]]\nname = \"m\"\ntransport = \"stdio\"\ncommand = \"x\"\ninherit_env = [\"AWS_SECRET_ACCESS_KEY\"]",
                "a secret of the gateway's",
            ),
            ("[[notify]]\nkind = \"slack\"", "needs webhook_url_env"),
            ("[[notify]]\nkind = \"email\"", "needs smtp_host"),
            (
                "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\ntls = \"none\"",
                "loopback SMTP server only",
            ),
            (
                "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nto = [\"a@example.com\"]",
                "needs from",
            ),
            (
                "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nfrom = \"g@example.com\"",
                "needs to",
            ),
            (
                "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nsmtp_username_env = \"CARGO_MANIFEST_DIR\"",
                "or neither",
            ),
            (
                "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nurl = \"https://x.example.com\"",
                "url is not a key of kind \"email\"",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\nto = [\"a@example.com\"]",
                "to is not a key of kind \"webhook\"",
            ),
            ("[[notify]]\nkind = \"webhook\"", "needs url"),
            (
                "[[notify]]\nkind = \"webhook\"\nurl = \"http://hooks.example.com/x\"",
                "must be https://",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\nurl = \"https://hooks.example.com/x\"",
                "needs secret_env",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\nurl = \"https://hooks.example.com/x\"\nsecret_env = \"MCP_TEST_SURELY_UNSET_SECRET\"",
                "not set or empty",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\nevents = [\"approved\"]",
                "the events are",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\ntools = [\"*\"]",
                "a prefix ending in '*'",
            ),
            // (`cargo test` sets CARGO_MANIFEST_DIR, long enough to stand for a secret.)
            (
                "[[notify]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"https://h.example.com/\"\nsecret_env = \"CARGO_MANIFEST_DIR\"\n[[notify]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"https://h.example.com/\"\nsecret_env = \"CARGO_MANIFEST_DIR\"",
                "another [[notify]] has this name",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\nurl = \"https://h.example.com/\"\nsecret_env = \"CARGO_MANIFEST_DIR\"\n[[modules]]\nname = \"m\"\ntransport = \"stdio\"\ncommand = \"x\"\ninherit_env = [\"CARGO_MANIFEST_DIR\"]",
                "a secret of the gateway's",
            ),
        ];
        for (text, expected) in cases {
            let config: Config = toml::from_str(text).unwrap();
            let err = config.check().unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        assert!(
            toml::from_str::<Config>("lisen = \"127.0.0.1:1\"").is_err(),
            "unknown keys are errors"
        );
        assert!(
            toml::from_str::<Config>("[metrics]\nlisten = \"nowhere\"").is_err(),
            "an operations listener is an address"
        );
    }
}
