//! Turning a checked configuration into running parts: the store, the modules, the gate
//! policy and the HTTP service.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use elicitation_store::{
    ElicitationStore, KeyRing, MemoryLimits, MemoryStore, PostgresOptions, PostgresStore,
    SEAL_KEYS_ENV, SystemClock,
};
use gating_core::{GatePolicy, ToolRule};
use http::{HeaderName, HeaderValue};
use mcp_http::auth::{Auth, TokenGrant};
use mcp_http::gateway::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_http::state::{RequestStates, STATE_KEY_INFO};
use mcp_upstream::Module;
use mcp_upstream::demo::demo_module;
use mcp_upstream::http::{HttpConfig as HttpModuleConfig, HttpModule};
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_upstream::stdio::{StdioConfig, StdioModule};

use crate::config::{AuthMode, Config, ModuleConfig, StoreKind, Transport};

/// Everything `serve` needs.
pub(crate) struct App {
    pub(crate) service: Arc<McpService>,
    pub(crate) store: Arc<dyn ElicitationStore>,
    pub(crate) registry: Arc<Registry>,
}

fn seal_keys(config: &Config) -> Result<KeyRing> {
    let store = &config.store;
    let keys = if !store.seal_keys.is_empty() {
        KeyRing::parse_entries(store.seal_keys.iter().map(String::as_str))?
    } else if let Some(path) = &store.seal_keys_file {
        KeyRing::from_file(path)?
    } else {
        KeyRing::from_env()?
    };
    Ok(keys)
}

/// Converts a std duration to a time one (saturating).
fn ttl(d: std::time::Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

pub(crate) async fn build_store(config: &Config) -> Result<(Arc<dyn ElicitationStore>, bool)> {
    match config.store.kind {
        StoreKind::Memory => {
            let limits = MemoryLimits {
                max_pending_per_caller: config.store.max_pending_per_caller,
                max_records: config.store.max_records,
                max_records_per_caller: config.store.max_records_per_caller,
                max_bytes: config.store.max_bytes,
                max_bytes_per_caller: config.store.max_bytes_per_caller,
            };
            Ok((
                Arc::new(MemoryStore::new(Arc::new(SystemClock), limits)),
                false,
            ))
        }
        StoreKind::Postgres => {
            let url = config
                .store
                .database_url
                .clone()
                .or_else(|| std::env::var("DATABASE_URL").ok())
                .context("store.kind = \"postgres\" needs store.database_url or the DATABASE_URL environment variable")?;
            let keys = seal_keys(config).with_context(|| format!("the postgres store seals payloads; configure store.seal_keys, store.seal_keys_file or {SEAL_KEYS_ENV}"))?;
            let mut options = PostgresOptions::new(&url, keys)?;
            options.pool_size = config.store.pool_size;
            options.max_pending_per_caller = config.store.max_pending_per_caller;
            let store = PostgresStore::connect(options)
                .await
                .context("cannot use the postgres store")?;
            Ok((Arc::new(store), true))
        }
    }
}

/// How long start-up waits for a stdio module's first handshake before serving without it
/// (it keeps being restarted, and its tools appear when it comes up).
const STDIO_STARTUP_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// A module's program: a relative path with a `/` (`./server`) is taken from the gateway's
/// working directory, since the module itself starts in its own (`/` by default).
fn program_path(command: &str) -> String {
    let path = std::path::Path::new(command);
    if path.is_relative()
        && command.contains('/')
        && let Ok(cwd) = std::env::current_dir()
    {
        return cwd.join(path).display().to_string();
    }
    command.to_owned()
}

async fn module(config: &ModuleConfig) -> Result<Arc<dyn Module>> {
    Ok(match config.transport {
        Transport::Demo => Arc::new(demo_module()),
        Transport::Stdio => {
            let module = StdioModule::start(StdioConfig {
                name: config.name.clone(),
                command: program_path(config.command.as_deref().unwrap_or_default()),
                args: config.args.clone(),
                env: config
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                inherit_env: config.inherit_env.clone(),
                cwd: config.cwd.clone(),
                call_timeout: config.call_timeout,
            });
            if !module.ready(STDIO_STARTUP_WAIT).await {
                tracing::warn!(module = %config.name, "the stdio module is not up yet; serving without its tools until it is");
            }
            Arc::new(module)
        }
        Transport::Http => {
            let url_text = config.url.clone().unwrap_or_default();
            let url: http::Uri = url_text
                .parse()
                .with_context(|| format!("module {:?}: invalid url {url_text:?}", config.name))?;
            if url.scheme_str() != Some("http") {
                bail!(
                    "module {:?}: only http:// URLs are supported (put TLS in front of the module, or use a local proxy)",
                    config.name
                );
            }
            let mut headers = Vec::new();
            for (name, value) in &config.headers {
                headers.push((
                    HeaderName::try_from(name.as_str()).with_context(|| {
                        format!("module {:?}: bad header name {name:?}", config.name)
                    })?,
                    HeaderValue::try_from(value.as_str()).with_context(|| {
                        format!("module {:?}: bad value for header {name:?}", config.name)
                    })?,
                ));
            }
            Arc::new(HttpModule::new(HttpModuleConfig {
                name: config.name.clone(),
                url,
                headers,
                call_timeout: config.call_timeout,
            }))
        }
    })
}

async fn auth(config: &Config) -> Result<Auth> {
    Ok(match config.auth.mode {
        AuthMode::None => Auth::none(),
        AuthMode::Tokens => Auth::tokens(
            config
                .auth
                .tokens
                .iter()
                .map(|t| TokenGrant {
                    subject: t.subject.clone(),
                    tenant: t.tenant.clone(),
                    token_sha256: t.token_sha256.clone(),
                    scopes: t.scopes.clone(),
                    groups: t.groups.clone(),
                })
                .collect(),
        )?,
        AuthMode::Jwt => {
            let Some(jwt) = &config.auth.jwt else {
                bail!("auth mode \"jwt\" needs an [auth.jwt] section");
            };
            let jwt = Arc::new(mcp_http::auth::jwt::JwtAuth::new(jwt.resolve()?)?);
            // Keys are fetched now and kept fresh in the background; an issuer that cannot
            // be reached now is retried (its tokens are refused until it can).
            jwt.refresh_all().await;
            drop(jwt.spawn_refresh());
            Auth::Jwt(jwt)
        }
    })
}

fn policy(config: &Config) -> GatePolicy {
    let mut policy = GatePolicy::default().with_default_ttl(ttl(config.gate.default_ttl));
    if config.gate.gate_open_world {
        policy = policy.with_open_world_gating();
    }
    for rule in &config.policy {
        policy = policy.with_rule(
            rule.tool.clone(),
            ToolRule {
                mode: rule.gate,
                ttl: rule.ttl.map(ttl),
            },
        );
    }
    policy
}

pub(crate) async fn build(config: &Config) -> Result<App> {
    let auth = auth(config).await?;
    if config.auth.mode == AuthMode::None
        && let Some(m) = config
            .modules
            .iter()
            .find(|m| m.transport != Transport::Demo)
    {
        tracing::warn!(
            module = %m.name,
            "auth is \"none\": every local process is the person, so a module running on this host can approve its own held calls through the REST API; use [auth] mode = \"tokens\" with modules you do not fully trust"
        );
    }
    let metrics = Arc::new(mcp_http::metrics::Metrics::new());
    let (store, durable) = build_store(config).await?;
    let store: Arc<dyn ElicitationStore> =
        Arc::new(mcp_http::metrics::MeteredStore::new(store, metrics.clone()));
    let mut specs = Vec::new();
    for m in &config.modules {
        specs.push(ModuleSpec {
            name: m.name.clone(),
            prefix: m.prefix.clone().unwrap_or_else(|| m.name.clone()),
            trust_annotations: m.trust_annotations,
            module: module(m).await?,
        });
    }
    let limits = &config.limits;
    let registry = Registry::start_with(
        specs,
        mcp_upstream::registry::CallLimit {
            max_per_module: limits.module_concurrency as usize,
            wait: limits.module_queue_timeout,
        },
    )
    .await?;
    let approvers = config
        .approvers
        .iter()
        .map(crate::config::ApproverConfig::resolve)
        .collect::<Result<Vec<_>>>()?;
    let gateway = Arc::new(
        Gateway::new(registry.clone(), store.clone(), policy(config), durable)
            .with_approvers(approvers)
            .with_metrics(metrics)
            .with_limits(mcp_http::limits::Limits::new(
                mcp_http::limits::Rate {
                    per_minute: limits.calls_per_minute,
                    burst: limits.calls_burst,
                },
                mcp_http::limits::Rate {
                    per_minute: limits.confirmations_per_minute,
                    burst: limits.confirmations_burst,
                },
            )),
    );
    gateway.watch_policy_rules();
    let service_config = ServiceConfig {
        body_limit: config.http.body_limit,
        body_read_timeout: config.http.body_read_timeout,
        allowed_origins: config.http.allowed_origins.clone(),
        allowed_hosts: config.http.allowed_hosts.clone(),
        max_streams_per_caller: config.http.max_streams_per_caller,
        session_idle_timeout: config.http.session_idle_timeout,
        secure_cookies: config.http.secure_cookies,
        native: config.gate.native,
        public_url: config.http.public_url.clone(),
        required_modules: config
            .modules
            .iter()
            .filter(|m| m.required)
            .map(|m| m.name.clone())
            .collect(),
        metrics_on_main: config.metrics.listen.is_none(),
        ..ServiceConfig::default()
    };
    // MRTR requestStates: keyed from the seal keys when there are any (every instance sharing
    // them accepts each other's states), else a per-process key.
    let states = match seal_keys(config) {
        Ok(keys) => RequestStates::new(keys.derive_key(STATE_KEY_INFO)),
        Err(_) => RequestStates::ephemeral(),
    };
    let uploads = mcp_http::uploads::Uploads::open(&config.uploads.resolve()?)?;
    let sso = match (&auth, &config.auth.jwt) {
        (Auth::Jwt(jwt), Some(section)) => section
            .sso()?
            .map(|sso| mcp_http::approvals::oidc::Sso::new(sso, jwt.clone())),
        _ => None,
    };
    let mut service = McpService::new(gateway, auth, service_config)
        .with_request_states(states)
        .with_uploads(uploads);
    if let Some(sso) = sso {
        service = service.with_sso(sso);
    }
    Ok(App {
        service: Arc::new(service),
        store,
        registry,
    })
}
