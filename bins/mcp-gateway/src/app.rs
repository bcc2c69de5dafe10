//! Turning a checked configuration into running parts: the store, the modules, the gate
//! policy and the HTTP service.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use elicitation_store::{
    KeyRing, MemoryLimits, MemoryStore, PostgresOptions, PostgresStore, SEAL_KEYS_ENV, Store,
    SystemClock,
};
use gating_core::GatePolicy;
use http::{HeaderName, HeaderValue};
use mcp_auth::{Auth, TokenGrant};
use mcp_gate::Gateway;
use mcp_http::service::{McpService, ServiceConfig};
use mcp_http::state::{RequestStates, STATE_KEY_INFO};
use mcp_upstream::Module;
use mcp_upstream::demo::demo_module;
use mcp_upstream::http::{HttpConfig as HttpModuleConfig, HttpModule};
use mcp_upstream::registry::{ModuleSpec, Registry};
use mcp_upstream::stdio::{StdioConfig, StdioModule};

use crate::config::{AuthMode, Config, ModuleConfig, StoreKind, Transport};
use crate::users;

/// Everything `serve` needs.
pub(crate) struct App {
    pub(crate) service: Arc<McpService>,
    pub(crate) store: Arc<dyn Store>,
    /// The `[[notify]]` sinks (a restart changes them).
    pub(crate) sinks: Vec<mcp_notify::Sink>,
    /// What a reload builds on; one reload at a time.
    running: tokio::sync::Mutex<Running>,
}

/// What the running configuration built, kept for the next reload.
struct Running {
    /// The settings only a restart changes, as text to compare.
    restart_only: String,
    /// The auth mode and `[auth.jwt]` running (they take a restart), as text to compare.
    auth_identity: String,
    /// The `[[auth.tokens]]` running, as text to compare.
    tokens: String,
    /// Each module's configuration (as text to compare), name and instance.
    modules: Vec<RunningModule>,
    metrics: Arc<mcp_gate::metrics::Metrics>,
    durable: bool,
    /// `[limits]`' rates and the buckets kept for them.
    rates: (String, Arc<mcp_gate::limits::Limits>),
}

#[derive(Clone)]
struct RunningModule {
    config: String,
    name: String,
    module: Arc<dyn Module>,
}

/// What a reload changed.
#[derive(Debug, Default)]
pub(crate) struct Reloaded {
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
    pub(crate) changed: Vec<String>,
    /// Sections that differ but take a restart; their old values stay in force.
    pub(crate) needs_restart: bool,
    /// The `[[auth.tokens]]` changed and are in force now.
    pub(crate) tokens_reloaded: bool,
}

/// The auth mode and `[auth.jwt]`, as text to compare.
fn auth_identity(config: &Config) -> String {
    format!("{:?}|{:?}", config.auth.mode, config.auth.jwt)
}

/// The settings a reload cannot change (listeners, the store, HTTP limits, uploads, the auth
/// mode and the OAuth issuers), as text.
fn restart_only(config: &Config) -> String {
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        config.listen,
        config.store,
        config.http,
        config.uploads,
        config.metrics,
        config.auth.mode,
        config.auth.jwt,
        config.gate.native,
        config.notify
    )
}

impl App {
    /// The gateway's metrics.
    pub(crate) fn metrics(&self) -> Arc<mcp_gate::metrics::Metrics> {
        self.service.gateway().metrics().clone()
    }

    /// The modules' catalog now.
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.service.gateway().registry().clone()
    }

    /// Applies `config` (already loaded and checked) without a restart: tokens, policy,
    /// approvers, limits and modules — added, removed or changed. Calls in flight finish on
    /// what they started with; a module that went away is stopped once they have. On an
    /// error nothing changes.
    pub(crate) async fn reload(&self, config: &Config) -> Result<Reloaded> {
        let mut running = self.running.lock().await;
        let mut report = Reloaded {
            needs_restart: restart_only(config) != running.restart_only,
            ..Reloaded::default()
        };
        // Tokens are reloaded whatever else changed; the mode and the OAuth issuers take a
        // restart (and then the running tokens stay too).
        let tokens = format!("{:?}", config.auth.tokens);
        let same_mode = auth_identity(config) == running.auth_identity;
        let auth = if same_mode && config.auth.mode == AuthMode::Tokens && tokens != running.tokens
        {
            report.tokens_reloaded = true;
            auth(config).await?
        } else {
            (*self.service.auth()).clone()
        };
        // The rate buckets carry over unless the rates changed (a reload must not hand every
        // caller a fresh burst).
        let rates = if rates_text(config) == running.rates.0 {
            running.rates.1.clone()
        } else {
            rates(config)
        };
        let (gateway, modules) = build_gateway(
            config,
            self.store.clone(),
            running.metrics.clone(),
            running.durable,
            &running.modules,
            Carried {
                rates: rates.clone(),
                // The tasks handed to clients stay reachable across the reload.
                tasks: self.service.gateway().tasks().clone(),
                // The callers' flows are the store's: a reload does not forget what an
                // agent read.
            },
        )
        .await?;
        for m in &modules {
            match running.modules.iter().find(|o| o.name == m.name) {
                None => report.added.push(m.name.clone()),
                Some(old) if old.config != m.config => report.changed.push(m.name.clone()),
                Some(_) => {}
            }
        }
        let retired: Vec<RunningModule> = running
            .modules
            .iter()
            .filter(|old| !modules.iter().any(|m| Arc::ptr_eq(&m.module, &old.module)))
            .cloned()
            .collect();
        report.removed = running
            .modules
            .iter()
            .filter(|old| !modules.iter().any(|m| m.name == old.name))
            .map(|old| old.name.clone())
            .collect();
        let old_registry = self.registry();
        self.service.reload(gateway, auth);
        running.modules = modules;
        running.rates = (rates_text(config), rates);
        if report.tokens_reloaded {
            running.tokens = tokens;
        }
        stop_when_idle(old_registry, retired);
        Ok(report)
    }
}

/// Stops `retired` modules once no call holds the old catalog any more (or after the longest
/// a call may take).
fn stop_when_idle(old_registry: Arc<Registry>, retired: Vec<RunningModule>) {
    if retired.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(600);
        while Arc::strong_count(&old_registry) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        drop(old_registry);
        for m in retired {
            m.module.shutdown().await;
            tracing::info!(module = %m.name, "stopped a module the reloaded configuration no longer runs");
        }
    });
}

pub(crate) fn seal_keys(config: &Config) -> Result<KeyRing> {
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

pub(crate) async fn build_store(config: &Config) -> Result<(Arc<dyn Store>, bool)> {
    // The outbox records the events some sink wants, and nothing without sinks.
    let events = mcp_notify::events_of(&crate::notify::sinks(&config.notify)?);
    match config.store.kind {
        StoreKind::Memory => {
            let limits = MemoryLimits {
                max_pending_per_caller: config.store.max_pending_per_caller,
                max_records: config.store.max_records,
                max_records_per_caller: config.store.records_per_caller(),
                max_bytes: config.store.max_bytes,
                max_bytes_per_caller: config.store.bytes_per_caller(),
            };
            Ok((
                Arc::new(MemoryStore::new(Arc::new(SystemClock), limits).notify_on(&events)),
                false,
            ))
        }
        StoreKind::Postgres => {
            let url = config
                .store
                .database_url()?
                .context("store.kind = \"postgres\" needs store.database_url, store.database_url_file or the DATABASE_URL environment variable")?;
            let keys = seal_keys(config).with_context(|| format!("the postgres store seals payloads; configure store.seal_keys, store.seal_keys_file or {SEAL_KEYS_ENV}"))?;
            let mut options = PostgresOptions::new(&url, keys)?;
            options.pool_size = config.store.pool_size;
            options.operation_timeout = config.store.operation_timeout;
            options.max_pending_per_caller = config.store.max_pending_per_caller;
            options.notify_events = events;
            options.allow_rls_bypass = config.store.allow_rls_bypass;
            options.tls = store_tls(&config.store)?;
            let store = PostgresStore::connect(options)
                .await
                .context("cannot use the postgres store")?;
            Ok((Arc::new(store), true))
        }
    }
}

/// TLS to the store's database, as `[store] tls` and `ca_file` say (`None`: none).
pub(crate) fn store_tls(
    store: &crate::config::StoreConfig,
) -> anyhow::Result<Option<elicitation_store::TlsRoots>> {
    if !store.tls && store.ca_file.is_none() {
        return Ok(None);
    }
    let files = mcp_upstream::tls::TlsFiles {
        ca_file: store.ca_file.clone(),
        ..mcp_upstream::tls::TlsFiles::default()
    };
    let roots = mcp_upstream::tls::client_config(&files)
        .map_err(|e| anyhow::anyhow!("[store] TLS: {e}"))?;
    Ok(Some(roots))
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
    module_as(config, None).await
}

/// A module of the configuration: running already (unchanged), or starting in the
/// background ([`module`]).
enum Instance {
    Running(Arc<dyn Module>),
    Starting(tokio::task::JoinHandle<Result<Arc<dyn Module>>>),
}

/// The module, an http one sending `person`'s credentials when given (a caller's instance
/// of a module run as its callers) instead of the gateway's own.
async fn module_as(
    config: &ModuleConfig,
    person: Option<mcp_upstream::credentials::SharedCredentials>,
) -> Result<Arc<dyn Module>> {
    Ok(match config.transport {
        Transport::Demo => Arc::new(demo_module()),
        Transport::PermissionPrompt => Arc::new(
            mcp_upstream::permission_prompt::PermissionPromptModule::new(config.name.clone()),
        ),
        Transport::Stdio => {
            let user = users::module_user(&config.name, config.user.as_deref())?;
            let mut env: Vec<(String, String)> = config
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if user.is_none()
                && let Some(home) = &config.home
            {
                env.push(("HOME".into(), home.display().to_string()));
            }
            let module = StdioModule::start(StdioConfig {
                name: config.name.clone(),
                command: program_path(config.command.as_deref().unwrap_or_default()),
                args: config.args.clone(),
                env,
                inherit_env: config.inherit_env.clone(),
                cwd: config.cwd.clone(),
                call_timeout: config.call_timeout,
                run_as: user.map(|u| u.run_as(config.home.as_deref())),
            });
            if !module.ready(STDIO_STARTUP_WAIT).await {
                tracing::warn!(module = %config.name, "the stdio module is not up yet; serving without its tools until it is");
            }
            Arc::new(module)
        }
        Transport::Http => {
            let (url, tls) = config.tls()?;
            if url.scheme_str() == Some("http")
                && !crate::notify::is_loopback(url.host().unwrap_or_default())
            {
                tracing::warn!(module = %config.name, host = url.host().unwrap_or_default(), "allow_insecure: the module is reached over plain http:// across the network; its calls and credentials can be read and changed on the way");
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
            let credentials = match (person, &config.auth) {
                (Some(person), _) => Some(person),
                (None, Some(auth)) => auth.credentials(&config.name, &url)?,
                (None, None) => None,
            };
            Arc::new(
                HttpModule::new(HttpModuleConfig {
                    name: config.name.clone(),
                    url,
                    headers,
                    tls,
                    credentials,
                    call_timeout: config.call_timeout,
                    era: config.era.upstream(),
                })
                .map_err(|e| anyhow::anyhow!("module {:?}: {e}", config.name))?,
            )
        }
    })
}

/// Where a module run as its callers gets each caller's credentials.
#[derive(Clone)]
enum Person {
    /// Their connected account (`auth.kind = "user"`).
    Account(Arc<mcp_upstream::accounts::UserOAuth>),
    /// Their own token, exchanged (`auth.kind = "token_exchange"`).
    Exchange(Arc<mcp_upstream::credentials::TokenExchange>),
}

impl Person {
    /// The person's credentials where `config` says, if it runs as its callers.
    fn of(config: &ModuleConfig) -> Result<Option<Person>> {
        let Some(auth) = config.auth.as_ref().filter(|auth| auth.per_person()) else {
            return Ok(None);
        };
        let (url, _) = config.tls()?;
        if let Some(oauth) = auth.user_oauth(&config.name, &url)? {
            return Ok(Some(Person::Account(oauth)));
        }
        Ok(auth
            .token_exchange(&config.name, &url)?
            .map(Person::Exchange))
    }
}

/// A `per_caller` module's instances: each started as the module itself is, from its
/// configuration; for a module run as its callers (`person`), each with its caller's own
/// credentials (their account from `store`, or their token exchanged).
fn isolation(
    config: &ModuleConfig,
    person: Option<Person>,
    store: &Arc<dyn Store>,
) -> Option<mcp_upstream::isolation::Isolation> {
    if config.isolation() != crate::config::Isolation::PerCaller {
        return None;
    }
    let template = Arc::new(config.clone());
    let vault: Arc<dyn mcp_upstream::accounts::Vault> =
        Arc::new(crate::accounts::StoreVault::new(store.clone()));
    let per_person = person.as_ref().map(|p| match p {
        Person::Account(_) => "user",
        Person::Exchange(_) => "token_exchange",
    });
    let start: mcp_upstream::isolation::StartInstance = Arc::new(move |who: &str| {
        let config = template.clone();
        let person = person.as_ref().map(|person| {
            let credentials: mcp_upstream::credentials::SharedCredentials = match person {
                Person::Account(oauth) => Arc::new(mcp_upstream::accounts::PersonCredentials::new(
                    oauth.clone(),
                    vault.clone(),
                    who.to_owned(),
                )),
                Person::Exchange(exchange) => {
                    Arc::new(mcp_upstream::credentials::PersonExchange::new(
                        exchange.clone(),
                        who.to_owned(),
                    ))
                }
            };
            credentials
        });
        Box::pin(async move {
            module_as(&config, person)
                .await
                .map_err(|e| mcp_upstream::ModuleError::Unavailable {
                    module: config.name.clone(),
                    reason: format!("{e:#}"),
                })
        })
    });
    Some(mcp_upstream::isolation::Isolation {
        start,
        max_instances: config.max_instances as usize,
        idle: config.instance_idle,
        per_person,
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
            let jwt = Arc::new(mcp_auth::jwt::JwtAuth::new(jwt.resolve()?)?);
            // Keys are fetched now and kept fresh in the background; an issuer that cannot
            // be reached now is retried (its tokens are refused until it can).
            jwt.refresh_all().await;
            drop(jwt.spawn_refresh());
            Auth::Jwt(jwt)
        }
    })
}

pub(crate) fn policy(config: &Config) -> Result<GatePolicy> {
    let mut policy = GatePolicy::default().with_default_ttl(ttl(config.gate.default_ttl));
    if config.gate.gate_open_world {
        policy = policy.with_open_world_gating();
    }
    for (index, rule) in config.policy.iter().enumerate() {
        policy = policy.with_rule(rule.resolve(index)?);
    }
    Ok(policy
        .with_flow(config.flow.resolve()?)
        .with_content(config.content.resolve()?))
}

/// What makes a module a different one (everything but `required`, which only readiness
/// reads), as text to compare.
fn module_fingerprint(m: &ModuleConfig) -> String {
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        m.transport,
        m.command,
        m.args,
        m.env,
        m.inherit_env,
        m.cwd,
        m.url,
        m.headers,
        (
            &m.ca_file,
            &m.client_cert,
            &m.client_key,
            m.allow_insecure,
            &m.auth
        ),
        m.trust_annotations,
        m.prefix,
        m.call_timeout,
        m.user,
        m.home
    )
}

/// The catalog and the gateway over it: modules whose configuration is unchanged in
/// `running` are reused, others started (and stopped again if building fails). A module that
/// cannot be started is left out, logged and named in `/readyz` when it is required: one
/// module's trouble never keeps the rest of a configuration (its tokens, policy and
/// approvers) from applying.
async fn build_gateway(
    config: &Config,
    store: Arc<dyn Store>,
    metrics: Arc<mcp_gate::metrics::Metrics>,
    durable: bool,
    running: &[RunningModule],
    carried: Carried,
) -> Result<(Arc<Gateway>, Vec<RunningModule>)> {
    let mut modules = Vec::new();
    let mut started = Vec::new();
    let mut specs = Vec::new();
    let mut unbuilt = Vec::new();
    let mut connectable: Vec<Arc<dyn mcp_upstream::accounts::Connect>> = Vec::new();
    let mut exchanges: Vec<Arc<dyn mcp_upstream::credentials::SubjectTokens>> = Vec::new();
    // The modules not running yet start side by side: one that does not come up waits for
    // its handshake's timeout, and one after another those waits added up (two broken
    // servers held the port closed for 30-44 s). Each module's person is read once.
    let prepared: Vec<_> = config
        .modules
        .iter()
        .map(|m| {
            let text = module_fingerprint(m);
            let prepared = Person::of(m).map(|person| {
                let instance = match running
                    .iter()
                    .find(|r| r.name == m.name && r.config == text)
                {
                    Some(r) => Instance::Running(r.module.clone()),
                    None => {
                        let m = m.clone();
                        Instance::Starting(tokio::spawn(async move { module(&m).await }))
                    }
                };
                (person, instance)
            });
            (text, prepared)
        })
        .collect();
    for (m, (text, prepared)) in config.modules.iter().zip(prepared) {
        let cannot_start = |e: anyhow::Error| {
            tracing::error!(module = %m.name, error = %format!("{e:#}"), "cannot start the module; serving without it");
            (m.name.clone(), format!("{e:#}"))
        };
        let (person, instance) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                unbuilt.push(cannot_start(e));
                continue;
            }
        };
        let instance = match instance {
            Instance::Running(module) => module,
            Instance::Starting(start) => match start
                .await
                .map_err(|e| anyhow::anyhow!("its start failed: {e}"))
                .and_then(|module| module)
            {
                Ok(new) => {
                    started.push(new.clone());
                    new
                }
                Err(e) => {
                    unbuilt.push(cannot_start(e));
                    continue;
                }
            },
        };
        modules.push(RunningModule {
            config: text,
            name: m.name.clone(),
            module: instance.clone(),
        });
        match &person {
            Some(Person::Account(oauth)) => connectable.push(oauth.clone()),
            Some(Person::Exchange(exchange)) => exchanges.push(exchange.clone()),
            None => {}
        }
        specs.push(ModuleSpec {
            isolation: isolation(m, person, &store),
            name: m.name.clone(),
            prefix: m.prefix.clone().unwrap_or_else(|| m.name.clone()),
            trust_annotations: m.trust_annotations,
            module: instance,
        });
    }
    let built = Built {
        unbuilt,
        connectable,
        exchanges,
    };
    match gateway_over(config, specs, store, metrics, durable, carried, built).await {
        Ok(gateway) => Ok((gateway, modules)),
        Err(e) => {
            for m in started {
                m.shutdown().await;
            }
            Err(e)
        }
    }
}

/// The per-caller rate buckets `[limits]` asks for.
fn rates(config: &Config) -> Arc<mcp_gate::limits::Limits> {
    let limits = &config.limits;
    Arc::new(mcp_gate::limits::Limits::new(
        mcp_gate::limits::Rate {
            per_minute: limits.calls_per_minute,
            burst: limits.calls_burst,
        },
        mcp_gate::limits::Rate {
            per_minute: limits.confirmations_per_minute,
            burst: limits.confirmations_burst,
        },
    ))
}

/// `[limits]`' rates, as text to compare.
fn rates_text(config: &Config) -> String {
    let l = &config.limits;
    format!(
        "{}|{}|{}|{}",
        l.calls_per_minute, l.calls_burst, l.confirmations_per_minute, l.confirmations_burst
    )
}

/// What a gateway built anew keeps of the one it replaces: the per-caller rate buckets
/// (unless the rates changed) and the tasks handed to clients.
struct Carried {
    rates: Arc<mcp_gate::limits::Limits>,
    tasks: Arc<mcp_gate::tasks::TaskRoutes>,
}

/// What building the modules found beside them: those that could not be started (and why),
/// the OAuth clients of the modules run as their callers' accounts, and the exchanges of
/// those run with their callers' own tokens.
struct Built {
    unbuilt: Vec<(String, String)>,
    connectable: Vec<Arc<dyn mcp_upstream::accounts::Connect>>,
    exchanges: Vec<Arc<dyn mcp_upstream::credentials::SubjectTokens>>,
}

async fn gateway_over(
    config: &Config,
    specs: Vec<ModuleSpec>,
    store: Arc<dyn Store>,
    metrics: Arc<mcp_gate::metrics::Metrics>,
    durable: bool,
    carried: Carried,
    built: Built,
) -> Result<Arc<Gateway>> {
    let limits = &config.limits;
    let registry = Registry::start_with(
        specs,
        mcp_upstream::registry::CallLimit {
            max_per_module: limits.module_concurrency as usize,
            wait: limits.module_queue_timeout,
        },
        Arc::new(elicitation_store::SystemClock),
    )
    .await?;
    for m in config
        .modules
        .iter()
        .filter(|m| m.pin == crate::config::Pin::Off && m.trust_annotations)
    {
        tracing::warn!(module = %m.name, "pin = \"off\" with trust_annotations = true: the module can change a tool's annotations (say, destructiveHint to false) and the gate believes it at once; pin its definitions instead");
    }
    let approvers = config
        .approvers
        .iter()
        .map(|rule| rule.resolve(&config.auth))
        .collect::<Result<Vec<_>>>()?;
    let gateway = Arc::new(
        Gateway::new(registry, store, policy(config)?, durable)
            .with_approvers(approvers)
            .with_quotas(crate::config::quotas(config)?)
            .with_max_grant(config.gate.max_grant()?)
            .with_permission_prompts(
                config
                    .modules
                    .iter()
                    .filter(|m| m.transport == Transport::PermissionPrompt)
                    .map(|m| m.name.clone())
                    .collect(),
            )
            .with_pin_modes(
                config
                    .modules
                    .iter()
                    .map(|m| (m.name.clone(), m.pin.mode()))
                    .collect(),
            )
            .with_unbuilt_modules(built.unbuilt)
            .with_connectable(built.connectable)
            .with_exchanges(built.exchanges)
            .with_required_modules(
                config
                    .modules
                    .iter()
                    .filter(|m| m.required)
                    .map(|m| m.name.clone())
                    .collect(),
            )
            .with_metrics(metrics)
            .with_limits(carried.rates)
            .with_tasks(carried.tasks)
            .with_servers(config.servers()?),
    );
    gateway.watch_policy_rules();
    gateway.watch_pins().await;
    Ok(gateway)
}

pub(crate) async fn build(config: &Config) -> Result<App> {
    let auth = auth(config).await?;
    if config.auth.mode == AuthMode::None
        && let Some(m) = config
            .modules
            .iter()
            .find(|m| !matches!(m.transport, Transport::Demo | Transport::PermissionPrompt))
    {
        tracing::warn!(
            module = %m.name,
            "auth is \"none\": every local process is the person, so a module running on this host can approve its own held calls through the REST API; use [auth] mode = \"tokens\" with modules you do not fully trust"
        );
    }
    let metrics = Arc::new(mcp_gate::metrics::Metrics::new());
    let (store, durable) = build_store(config).await?;
    let store: Arc<dyn Store> = Arc::new(elicitation_store::Metered::new(store, metrics.clone()));
    let buckets = rates(config);
    let (gateway, modules) = build_gateway(
        config,
        store.clone(),
        metrics.clone(),
        durable,
        &[],
        Carried {
            rates: buckets.clone(),
            tasks: Arc::default(),
        },
    )
    .await?;
    let body_bytes = config.http.body_bytes(
        config
            .uploads
            .max_bytes
            .unwrap_or(mcp_uploads::DEFAULT_MAX_BYTES),
    );
    let service_config = ServiceConfig {
        body_limit: config.http.body_limit,
        body_read_timeout: config.http.body_read_timeout,
        allowed_origins: config.http.allowed_origins.clone(),
        allowed_hosts: config.http.allowed_hosts.clone(),
        max_streams_per_caller: config.http.max_streams_per_caller,
        body_bytes_per_caller: body_bytes.0,
        body_bytes_in_flight: body_bytes.1,
        session_idle_timeout: config.http.session_idle_timeout,
        session_max_age: config.http.session_max_age,
        // Session ids and page sign-ins sealed under a key of the seal keys: every
        // instance sharing them and the store serves every session. Without a durable
        // store, a random key: an ended session is remembered only in memory, so a restart
        // must not bring it back.
        session_key: seal_keys(config).ok().filter(|_| durable).map(|keys| {
            mcp_http::sessions::SessionKey(keys.derive_keys(mcp_http::sessions::SESSION_KEY_INFO))
        }),
        secure_cookies: config.http.secure_cookies,
        native: config.gate.native,
        public_url: config.http.public_url.clone(),
        metrics_on_main: config.metrics.listen.is_none(),
        ..ServiceConfig::default()
    };
    // MRTR requestStates: keyed from the seal keys when there are any (every instance sharing
    // them accepts each other's states), else a per-process key.
    let states = match seal_keys(config) {
        Ok(keys) => RequestStates::with_keys(&keys.derive_keys(STATE_KEY_INFO)),
        Err(_) => RequestStates::ephemeral(),
    };
    let uploads = mcp_uploads::Uploads::open(&config.uploads.resolve()?)?;
    let sso = match (&auth, &config.auth.jwt) {
        (Auth::Jwt(jwt), Some(section)) => section
            .sso()?
            .map(|sso| mcp_approvals::oidc::Sso::new(sso, jwt.clone()))
            .transpose()
            .map_err(|e| anyhow::anyhow!("[auth.jwt.sso]: {e}"))?,
        _ => None,
    };
    let mut service = McpService::new(gateway, auth, service_config)
        .with_request_states(states)
        .with_uploads(uploads);
    if let Some(sso) = sso {
        service = service.with_sso(sso);
    }
    if let Some(slack) = crate::notify::slack_actions(&config.notify)? {
        service = service.with_slack_actions(slack);
    }
    Ok(App {
        service: Arc::new(service),
        store,
        sinks: crate::notify::sinks(&config.notify)?,
        running: tokio::sync::Mutex::new(Running {
            restart_only: restart_only(config),
            auth_identity: auth_identity(config),
            tokens: format!("{:?}", config.auth.tokens),
            modules,
            metrics,
            durable,
            rates: (rates_text(config), buckets),
        }),
    })
}
