//! The aggregated tool catalog: every module's tools under `{prefix}__{tool}`, kept
//! losslessly (only `name` is rewritten), refreshed when a module says its list changed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use gating_core::ToolAnnotations;
use mcp_clock::{Clock, SystemClock};
use mcp_wire::tools::ForwardParams;
use mcp_wire::{CallToolParams, ParamHeader};
use serde_json::{Value, json};

use crate::{Module, ModuleError, ToolCall};

/// How long listing one module may take before it is treated as down.
mod instances;
mod listing;
mod resources;

const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a module whose listing failed is tried again when tools are listed.
const RETRY_LIST_AFTER: Duration = Duration::from_secs(5);

/// A configured module.
pub struct ModuleSpec {
    /// Its name (unique).
    pub name: String,
    /// Prefix of its tools' names; `""` lists them unchanged.
    pub prefix: String,
    /// Whether its tool annotations are believed.
    pub trust_annotations: bool,
    /// The module: its shared instance, which lists the catalog.
    pub module: Arc<dyn Module>,
    /// Per-caller instances, for a module whose state must not be shared between callers;
    /// `None`: every caller uses the shared instance.
    pub isolation: Option<crate::isolation::Isolation>,
}

/// The module index of an embedder's own tools: no module's.
const OWN: usize = usize::MAX;

/// A tool as the gateway lists it.
#[derive(Debug, Clone)]
pub struct ToolEntry {
    /// The name the gateway lists.
    pub qualified: String,
    /// The module's own name for it.
    pub original: String,
    /// The module's name.
    pub module_name: String,
    /// Index of the module.
    module: usize,
    /// The tool object as listed (the module's, with `name` rewritten).
    pub tool: Value,
    /// The module's annotations, when they parse.
    pub annotations: Option<ToolAnnotations>,
    /// Whether the module's annotations are trusted.
    pub trusted: bool,
    /// The parameters its `inputSchema` mirrors into `Mcp-Param-*` headers.
    pub mirrored: Vec<ParamHeader>,
    /// What of it is pinned ([`pinned_definition`]) and that definition's digest: a person's
    /// trust is bound to it.
    pub definition: Value,
    /// The digest of `definition`'s canonical JSON.
    pub digest: gating_core::CallDigest,
    /// Whether its module runs it as a 2025-11-25 task (`execution.taskSupport`).
    pub task_support: TaskSupport,
    /// What the gate keeps of this tool, made on its first call (its metric series), so that
    /// a call does not look it up: opaque here, the gate's own type.
    pub gate_state: GateState,
}

/// What the gate keeps of a catalog entry ([`ToolEntry::gate_state`]); a new entry (a
/// refreshed catalog's) starts empty.
pub type GateState = std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>;

/// Whether a tool runs as a task (`execution.taskSupport` of 2025-11-25).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// Never (the default): a call asking for a task runs to its result.
    #[default]
    Forbidden,
    /// Either way: as the call asks.
    Optional,
    /// Only as a task: a client that cannot ask for one cannot call it.
    Required,
}

impl TaskSupport {
    /// What a tool object says.
    pub fn of(tool: &Value) -> TaskSupport {
        match tool
            .pointer("/execution/taskSupport")
            .and_then(Value::as_str)
        {
            Some("optional") => TaskSupport::Optional,
            Some("required") => TaskSupport::Required,
            _ => TaskSupport::Forbidden,
        }
    }
}

impl ToolEntry {
    /// The entry of a tool an embedder serves itself (no module of the gateway's runs it):
    /// listed under its own name, its annotations believed (they are the embedder's own), of
    /// no module in any registry (no account, no credentials). `module` names where it comes
    /// from in metrics and the audit trail. `None` when `tool` has no valid name.
    pub fn own(module: &str, mut tool: Value) -> Option<ToolEntry> {
        let name = tool.get("name")?.as_str()?.to_owned();
        if !is_valid_tool_name(&name) {
            return None;
        }
        let annotations = tool
            .get("annotations")
            .and_then(|a| serde_json::from_value::<ToolAnnotations>(a.clone()).ok());
        // The embedder runs it to its result: it is gated and run as a plain tool.
        without_task_support(&mut tool);
        let definition = pinned_definition(&tool);
        Some(ToolEntry {
            qualified: name.clone(),
            original: name,
            module_name: module.to_owned(),
            module: OWN,
            annotations,
            trusted: true,
            mirrored: Vec::new(),
            digest: gating_core::CallDigest::of(&definition),
            definition,
            tool,
            task_support: TaskSupport::Forbidden,
            gate_state: GateState::new(),
        })
    }

    /// Whether it is an embedder's own tool ([`ToolEntry::own`]), which no module runs.
    pub fn is_own(&self) -> bool {
        self.module == OWN
    }

    /// The entry the gate decides on for a tool of the agent host's own that a
    /// permission-prompt module's `approve` asks about ([`crate::permission_prompt`]):
    /// `qualified` (`<prefix>__<tool>`), `tool` its module's name for it, of this entry's
    /// module. Its annotations are nobody's to trust — the host said nothing — so it is as
    /// destructive as an unknown tool; its definition is its name.
    pub fn host_tool(&self, qualified: String, tool: &str) -> ToolEntry {
        let definition = json!({"name": tool});
        ToolEntry {
            qualified,
            original: tool.to_owned(),
            module_name: self.module_name.clone(),
            module: self.module,
            tool: json!({"name": tool, "inputSchema": {"type": "object"}}),
            annotations: None,
            trusted: false,
            mirrored: Vec::new(),
            digest: gating_core::CallDigest::of(&definition),
            definition,
            task_support: TaskSupport::Forbidden,
            gate_state: GateState::new(),
        }
    }
}

/// What a pin of a prompt covers: all of it, as its module lists it under its own name.
pub fn pinned_prompt(prompt: &Value) -> Value {
    pinned_whole(prompt)
}

/// What a pin of a tool covers: all of it, as its module lists it under its own name (less
/// `execution.taskSupport`, which says how it runs, not what it does) — name, title, description,
/// schemas and annotations, and `icons`, `_meta` and any other key — so nothing a client is
/// shown (an icon URL that tracks the user, instructions in `_meta`) changes without a
/// change to the pin. A tool of only the fields pinned before issue 44 (name, title,
/// description, `inputSchema`, `outputSchema`, annotations) has the digest it had then.
pub fn pinned_definition(tool: &Value) -> Value {
    let mut pinned = pinned_whole(tool);
    without_task_support(&mut pinned);
    pinned
}

fn pinned_whole(definition: &Value) -> Value {
    match definition {
        Value::Object(_) => definition.clone(),
        _ => Value::Object(serde_json::Map::new()),
    }
}

/// A prompt as the gateway lists it.
#[derive(Debug, Clone)]
pub struct PromptEntry {
    /// The name the gateway lists: `{prefix}__{name}`.
    pub qualified: String,
    /// The module's own name for it.
    pub original: String,
    /// The module's name.
    pub module_name: String,
    /// Index of the module.
    module: usize,
    /// The prompt object as listed (the module's, with `name` rewritten).
    pub prompt: Value,
    /// What of it is pinned: `name`, `title`, `description`, `arguments`.
    pub definition: Value,
    /// The digest of `definition`'s canonical JSON.
    pub digest: gating_core::CallDigest,
}

/// What one module lists.
struct Listing {
    tools: Vec<Value>,
    prompts: Vec<Value>,
    resources: Vec<Value>,
    templates: Vec<Value>,
}

/// Every module's resources and templates, and which module each URI belongs to.
#[derive(Default)]
struct Resources {
    /// (module, resource object), in module order.
    listed: Vec<(usize, Value)>,
    /// (module, template object, its `uriTemplate`).
    templates: Vec<(usize, Value, String)>,
}

impl Resources {
    fn module_of_uri(&self, uri: &str) -> Option<usize> {
        self.listed
            .iter()
            .find(|(_, r)| r.get("uri").and_then(Value::as_str) == Some(uri))
            .map(|(m, _)| *m)
    }

    /// Adds a module's listing. A URI or template another module listed first stays that
    /// module's: this module's entry is left out (two copies of one server side by side
    /// share their static URIs) and returned with the module that keeps it, so the caller
    /// warns; the module's other entries are listed.
    fn add(
        &mut self,
        index: usize,
        resources: Vec<Value>,
        templates: Vec<Value>,
    ) -> Vec<(String, usize)> {
        let mut left_out = Vec::new();
        for resource in resources {
            let Some(uri) = resource.get("uri").and_then(Value::as_str) else {
                continue;
            };
            if let Some(other) = self.module_of_uri(uri).filter(|m| *m != index) {
                left_out.push((uri.to_owned(), other));
                continue;
            }
            self.listed.push((index, resource));
        }
        for template in templates {
            let Some(pattern) = template.get("uriTemplate").and_then(Value::as_str) else {
                continue;
            };
            let pattern = pattern.to_owned();
            if let Some((other, _, _)) = self
                .templates
                .iter()
                .find(|(m, _, p)| *p == pattern && *m != index)
            {
                left_out.push((pattern, *other));
                continue;
            }
            self.templates.push((index, template, pattern));
        }
        left_out
    }

    fn remove(&mut self, index: usize) {
        self.listed.retain(|(m, _)| *m != index);
        self.templates.retain(|(m, _, _)| *m != index);
    }
}

/// Whether `uri` matches an RFC 6570 `template`: literal text must match; `{var}` matches one
/// or more characters other than `/`, `{+var}` and the other operators any one or more.
pub fn template_matches(template: &str, uri: &str) -> bool {
    match template.find('{') {
        None => template == uri,
        Some(open) => {
            let (literal, rest) = template.split_at(open);
            let Some(rest_uri) = uri.strip_prefix(literal) else {
                return false;
            };
            let Some(close) = rest.find('}') else {
                return false;
            };
            let expression = &rest[1..close];
            let after = &rest[close + 1..];
            let slash_ok = expression.starts_with(['+', '#', '/', '.', ';', '?', '&']);
            (1..=rest_uri.len()).any(|taken| {
                rest_uri.is_char_boundary(taken)
                    && (slash_ok || !rest_uri[..taken].contains('/'))
                    && template_matches(after, &rest_uri[taken..])
            })
        }
    }
}

/// The configuration cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two modules with one name.
    #[error("two modules are named {0:?}")]
    DuplicateModule(String),
}

/// Whether `name` is a tool name as MCP defines one: 1 to 128 characters of `A-Z a-z 0-9 _
/// . -`. The gateway lists no other (clients may refuse a whole list over one bad name), and
/// a module prefix must be one too.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Removes a tool's `execution.taskSupport` (and `execution` when nothing else is in it);
/// returns what it said.
pub fn without_task_support(tool: &mut Value) -> Option<String> {
    let execution = tool.get_mut("execution")?.as_object_mut()?;
    let support = execution.remove("taskSupport")?;
    if execution.is_empty()
        && let Some(map) = tool.as_object_mut()
    {
        map.remove("execution");
    }
    Some(support.as_str().unwrap_or_default().to_owned())
}

/// `{prefix}__{tool}`, or the tool's own name for an empty prefix.
pub fn qualify(prefix: &str, tool: &str) -> String {
    if prefix.is_empty() {
        tool.to_owned()
    } else {
        format!("{prefix}__{tool}")
    }
}

/// Hands every message of `feed` to `each` until the feed closes (what a slow reader
/// missed is skipped, with a warning).
fn forward<T: Clone + Send + 'static>(
    mut feed: tokio::sync::broadcast::Receiver<T>,
    mut each: impl FnMut(T) + Send + 'static,
) {
    tokio::spawn(async move {
        loop {
            match feed.recv().await {
                Ok(message) => each(message),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "a module's notices were dropped");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// Lists module `index` anew whenever `changes` fires, for as long as the registry lives.
fn refresh_on_change(
    mut changes: tokio::sync::broadcast::Receiver<()>,
    registry: Weak<Registry>,
    index: usize,
) {
    tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
            let Some(registry) = registry.upgrade() else {
                return;
            };
            registry.refresh(index).await;
        }
    });
}

/// Stops idle per-caller instances and 2025-era sessions, every [`INSTANCE_SWEEP`], for as
/// long as the registry lives.
fn sweep_idle(registry: &Arc<Registry>) {
    let weak = Arc::downgrade(registry);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(INSTANCE_SWEEP).await;
            let Some(registry) = weak.upgrade() else {
                return;
            };
            for instances in registry.instances.iter().flatten() {
                instances.sweep().await;
            }
            for twins in &registry.legacy_twins {
                twins.instances.sweep().await;
            }
        }
    });
}

/// A module's `notifications/resources/updated`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceUpdate {
    /// The resource.
    pub uri: String,
    /// The caller whose own module instance changed it (the `who` of its requests); `None`
    /// for a shared instance, whose resources every subscriber shares.
    pub who: Option<Arc<str>>,
}

impl ResourceUpdate {
    /// Whether the subscriber `who` is to hear of it.
    pub fn for_caller(&self, who: &str) -> bool {
        self.who.as_deref().is_none_or(|w| w == who)
    }
}

/// How often idle per-caller instances are looked for.
const INSTANCE_SWEEP: Duration = Duration::from_secs(15);

/// The catalog of all modules' tools.
pub struct Registry {
    modules: Vec<ModuleSpec>,
    catalog: RwLock<BTreeMap<String, Arc<ToolEntry>>>,
    prompts: RwLock<BTreeMap<String, Arc<PromptEntry>>>,
    resources: RwLock<Resources>,
    /// When each module's listing last failed.
    failed_at: Mutex<Vec<Option<(Instant, String)>>>,
    /// What of each module's latest listing is left out, and why (a name it lists twice,
    /// a name another module has).
    left_out: Mutex<Vec<Vec<String>>>,
    /// Fires after each refresh of a module's tools.
    refreshed: tokio::sync::broadcast::Sender<()>,
    /// Where the time since a failed listing is read.
    clock: Arc<dyn Clock>,
    /// The rank of the most verbose log level clients asked for (`u8::MAX`: none yet).
    log_level: std::sync::atomic::AtomicU8,
    /// Every module's `notifications/resources/updated` URIs, with the caller whose own
    /// instance sent it (`None`: a shared instance, for every subscriber).
    updated: tokio::sync::broadcast::Sender<ResourceUpdate>,
    /// Per-caller instances' log messages outside any call, with the caller they serve.
    instance_logs: tokio::sync::broadcast::Sender<(Arc<str>, Value)>,
    /// Each module's call slots, and how long a call waits for one.
    call_slots: Vec<Option<Arc<tokio::sync::Semaphore>>>,
    call_limit: CallLimit,
    /// Each isolated module's per-caller instances.
    instances: Vec<Option<crate::isolation::Instances>>,
    /// Each module's 2025-era sessions, per caller, for clients of that era
    /// ([`Registry::in_client_era`]).
    legacy_twins: Vec<LegacyTwins>,
    /// The unlisted resource URIs modules named to each caller in their results.
    announced: crate::announced::Announced,
    /// The registry itself, for the tasks that follow a per-caller instance.
    this: std::sync::OnceLock<Weak<Registry>>,
}

/// A module's 2025-era sessions for 2025-era clients, per caller.
struct LegacyTwins {
    instances: crate::isolation::Instances,
    /// The module answered the 2025 handshake as no 2025 server would: none is tried again.
    unavailable: std::sync::atomic::AtomicBool,
}

/// Most 2025-era sessions kept with one module that is not isolated (an isolated module
/// keeps as many as its instances).
const MAX_LEGACY_TWINS: usize = 256;
/// How long a 2025-era session with a module that is not isolated is kept unused.
const LEGACY_TWIN_IDLE: Duration = Duration::from_secs(600);

/// How many tool calls one module runs at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallLimit {
    /// At most this many calls per module at once (0: no limit).
    pub max_per_module: usize,
    /// How long a call waits for a slot before it fails with [`ModuleError::Busy`].
    pub wait: std::time::Duration,
}

impl Registry {
    /// Lists every module's tools and watches for changes. A module that cannot be listed
    /// now is tried again later; what a module lists wrong is left out (see `install`).
    pub async fn start(modules: Vec<ModuleSpec>) -> Result<Arc<Registry>, RegistryError> {
        Self::start_with(modules, CallLimit::default(), Arc::new(SystemClock)).await
    }

    /// [`Registry::start`], running at most `limit` calls per module at once, and reading
    /// when to list a module again from `clock` (tests move it instead of sleeping).
    pub async fn start_with(
        modules: Vec<ModuleSpec>,
        limit: CallLimit,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Registry>, RegistryError> {
        for (i, m) in modules.iter().enumerate() {
            if modules[..i].iter().any(|other| other.name == m.name) {
                return Err(RegistryError::DuplicateModule(m.name.clone()));
            }
        }
        let count = modules.len();
        let call_slots = (0..count)
            .map(|_| {
                (limit.max_per_module > 0)
                    .then(|| Arc::new(tokio::sync::Semaphore::new(limit.max_per_module)))
            })
            .collect();
        let instances = modules
            .iter()
            .map(|m| {
                m.isolation
                    .clone()
                    .map(|i| crate::isolation::Instances::new(m.name.clone(), &i))
            })
            .collect();
        let legacy_twins = modules
            .iter()
            .map(|m| {
                let (max, idle) = m
                    .isolation
                    .as_ref()
                    .map_or((MAX_LEGACY_TWINS, LEGACY_TWIN_IDLE), |i| {
                        (i.max_instances, i.idle)
                    });
                LegacyTwins {
                    instances: crate::isolation::Instances::bounded(m.name.clone(), max, idle),
                    unavailable: std::sync::atomic::AtomicBool::new(false),
                }
            })
            .collect();
        let registry = Arc::new(Registry {
            legacy_twins,
            call_slots,
            call_limit: limit,
            instances,
            announced: crate::announced::Announced::default(),
            this: std::sync::OnceLock::new(),
            modules,
            catalog: RwLock::new(BTreeMap::new()),
            prompts: RwLock::new(BTreeMap::new()),
            resources: RwLock::new(Resources::default()),
            log_level: std::sync::atomic::AtomicU8::new(u8::MAX),
            updated: tokio::sync::broadcast::channel(256).0,
            instance_logs: tokio::sync::broadcast::channel(256).0,
            failed_at: Mutex::new(vec![None; count]),
            left_out: Mutex::new(vec![Vec::new(); count]),
            refreshed: tokio::sync::broadcast::channel(16).0,
            clock,
        });
        let _ = registry.this.set(Arc::downgrade(&registry));
        sweep_idle(&registry);
        // Subscribe before listing, so a change (or a module coming up) between the two is
        // not missed.
        let feeds: Vec<_> = registry
            .modules
            .iter()
            .map(|spec| spec.module.tools_changed())
            .collect();
        let listed = futures_join_all(&registry).await;
        for (index, listing) in listed.into_iter().enumerate() {
            if let Some(listing) = listing {
                registry.install(index, listing);
            }
        }
        for spec in &registry.modules {
            if let Some(updates) = spec.module.resource_updates() {
                let out = registry.updated.clone();
                forward(updates, move |uri| {
                    let _ = out.send(ResourceUpdate { uri, who: None });
                });
            }
        }
        for (index, feed) in feeds.into_iter().enumerate() {
            if let Some(changes) = feed {
                refresh_on_change(changes, Arc::downgrade(&registry), index);
            }
        }
        Ok(registry)
    }

    /// Every listed tool object, ordered by name. Modules whose listing failed a while ago
    /// are tried again first.
    pub async fn tools(&self) -> Vec<Arc<ToolEntry>> {
        self.retry_failed().await;
        self.catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The tool listed as `name`; when there is none, modules whose listing failed a while
    /// ago are tried again first, so a module that was down at start-up serves its tools
    /// once it is up, without waiting for someone to list.
    pub async fn find(&self, name: &str) -> Option<Arc<ToolEntry>> {
        if let Some(entry) = self.lookup(name) {
            return Some(entry);
        }
        self.retry_failed().await;
        self.lookup(name)
    }

    /// Whether some tool listed now has a name `matches` accepts.
    pub fn lists_any(&self, matches: impl Fn(&str) -> bool) -> bool {
        self.catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .any(|name| matches(name))
    }

    /// The tool listed as `name`.
    pub fn lookup(&self, name: &str) -> Option<Arc<ToolEntry>> {
        self.catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Calls the tool's module with `params` (already carrying the module's tool name).
    pub async fn call(
        &self,
        entry: &ToolEntry,
        params: CallToolParams,
        relay: Option<std::sync::Arc<dyn crate::Relay>>,
        who: Option<&str>,
    ) -> Result<Box<serde_json::value::RawValue>, ModuleError> {
        self.call_served(entry, params, relay, who)
            .await
            .map(|(result, _)| result)
    }

    /// [`Registry::call`], with the module client that served the call (the one a task it
    /// created lives at: [`Registry::task_request`]).
    pub async fn call_served(
        &self,
        entry: &ToolEntry,
        params: CallToolParams,
        relay: Option<std::sync::Arc<dyn crate::Relay>>,
        who: Option<&str>,
    ) -> Result<(Box<serde_json::value::RawValue>, Arc<dyn Module>), ModuleError> {
        // A task of 2025-11-25 is asked of the module in that era.
        let in_2025 = relay.as_ref().is_some_and(|r| r.asks_mid_call()) || params.task().is_some();
        let call = ToolCall {
            params,
            mirrored: &entry.mirrored,
            relay,
        };
        let _slot = match self.call_slots.get(entry.module).and_then(Option::as_ref) {
            None => None,
            Some(slots) => {
                match tokio::time::timeout(self.call_limit.wait, slots.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(permit)) => Some(permit),
                    _ => {
                        return Err(ModuleError::Busy {
                            module: entry.module_name.clone(),
                            running: self.call_limit.max_per_module,
                        });
                    }
                }
            }
        };
        let mut module = self.instance(entry.module, who).await?;
        if in_2025 {
            module = self.in_client_era(entry.module, who, module).await;
        }
        let result = module.call_tool(call).await?;
        if let Some(who) = who {
            // Only URIs no module is given by the catalog (listed, or a template's).
            let claimed = |uri: &str| !matches!(self.module_of(uri, None), Ok(None));
            self.announced.record(who, entry.module, &result, claimed);
        }
        Ok((result, module))
    }

    /// Sends `method` (one of `mcp_wire::tasks::TASK_METHODS` but `tasks/list`) about a task
    /// to the module client that created it ([`Registry::call_served`]); what the module asks
    /// meanwhile (while `tasks/result` waits) goes to `relay`.
    pub async fn task_request(
        &self,
        module: &Arc<dyn Module>,
        method: &'static str,
        params: Value,
        relay: Option<Arc<dyn crate::Relay>>,
    ) -> Result<Box<serde_json::value::RawValue>, ModuleError> {
        module.task_request(method, params, relay).await
    }

    /// A client asked for log messages at `level` (a name from `LOG_LEVELS`): the modules
    /// that offer logging are set to the most verbose level any client asked for (they are
    /// shared; each client's own level is applied as their messages are relayed).
    pub async fn set_log_level(&self, level: &str) {
        let Some(rank) = mcp_wire::mcp::log_level_rank(level) else {
            return;
        };
        let lowered = self
            .log_level
            .fetch_min(rank, std::sync::atomic::Ordering::AcqRel)
            > rank;
        if !lowered {
            return;
        }
        for ((spec, instances), twins) in self
            .modules
            .iter()
            .zip(&self.instances)
            .zip(&self.legacy_twins)
        {
            let mut all = vec![spec.module.clone()];
            if let Some(instances) = instances {
                all.extend(instances.all().await);
            }
            all.extend(twins.instances.all().await);
            for module in all {
                if let Err(e) = module.set_log_level(level).await {
                    tracing::info!(module = %spec.name, error = %e, "the module did not take the log level");
                }
            }
        }
    }

    /// Stops every module, with every per-caller instance.
    pub async fn shutdown(&self) {
        for ((spec, instances), twins) in self
            .modules
            .iter()
            .zip(&self.instances)
            .zip(&self.legacy_twins)
        {
            twins.instances.shutdown().await;
            if let Some(instances) = instances {
                instances.shutdown().await;
            }
            spec.module.shutdown().await;
        }
    }
}

/// A catalog entry: listed under a name, owned by one module.
trait Owned {
    /// What an entry is, for messages: "tool" or "prompt".
    const KIND: &'static str;
    fn listed_name(&self) -> &str;
    fn module(&self) -> usize;
    fn module_name(&self) -> &str;
}

impl Owned for ToolEntry {
    const KIND: &'static str = "tool";
    fn listed_name(&self) -> &str {
        &self.qualified
    }
    fn module(&self) -> usize {
        self.module
    }
    fn module_name(&self) -> &str {
        &self.module_name
    }
}

impl Owned for PromptEntry {
    const KIND: &'static str = "prompt";
    fn listed_name(&self) -> &str {
        &self.qualified
    }
    fn module(&self) -> usize {
        self.module
    }
    fn module_name(&self) -> &str {
        &self.module_name
    }
}

/// Most problems kept (and logged) per listing: a module cannot flood the log.
const MAX_PROBLEMS: usize = 16;

/// Replaces module `index`'s entries in `catalog` with `entries`, and says what it left
/// out: every entry of a name the module lists more than once, and each name a module
/// earlier in the configuration lists too (the earlier module's, whichever listed it first:
/// a module that comes up first cannot take a name from one that comes up later). Returns
/// this module's problems, and the names it took back from later modules (theirs to report).
fn merge<E: Owned>(
    catalog: &mut BTreeMap<String, Arc<E>>,
    index: usize,
    entries: Vec<E>,
) -> (Vec<String>, Vec<(usize, String)>) {
    catalog.retain(|_, e| e.module() != index);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &entries {
        *seen.entry(entry.listed_name().to_owned()).or_default() += 1;
    }
    let mut problems: Vec<String> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(name, n)| {
            format!(
                "it lists {} {:?} {n} times; none of them is listed",
                E::KIND,
                gating_core::visible(name)
            )
        })
        .collect();
    let mut taken = Vec::new();
    for entry in entries {
        if seen.get(entry.listed_name()).is_some_and(|n| *n > 1) {
            continue;
        }
        if let Some(existing) = catalog.get(entry.listed_name()) {
            if existing.module() < index {
                problems.push(format!(
                    "{} {:?} is module {:?}'s (earlier in the configuration); give one of them another prefix",
                    E::KIND,
                    gating_core::visible(entry.listed_name()),
                    existing.module_name()
                ));
                continue;
            }
            taken.push((
                existing.module(),
                format!(
                    "{} {:?} is module {:?}'s (earlier in the configuration); give one of them another prefix",
                    E::KIND,
                    gating_core::visible(entry.listed_name()),
                    entry.module_name()
                ),
            ));
        }
        catalog.insert(entry.listed_name().to_owned(), Arc::new(entry));
    }
    if problems.len() > MAX_PROBLEMS {
        let more = problems.len() - MAX_PROBLEMS;
        problems.truncate(MAX_PROBLEMS);
        problems.push(format!("and {more} more"));
    }
    (problems, taken)
}

/// Lists all modules concurrently.
async fn futures_join_all(registry: &Arc<Registry>) -> Vec<Option<Listing>> {
    let mut tasks = Vec::new();
    for index in 0..registry.modules.len() {
        let registry = registry.clone();
        tasks.push(tokio::spawn(
            async move { registry.list_module(index).await },
        ));
    }
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.unwrap_or(None));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(module: usize, name: &str) -> PromptEntry {
        PromptEntry {
            qualified: name.into(),
            original: name.into(),
            module_name: format!("m{module}"),
            module,
            prompt: serde_json::json!({"name": name}),
            definition: serde_json::json!({"name": name}),
            digest: gating_core::CallDigest::of(&serde_json::json!({"name": name})),
        }
    }

    fn owner(catalog: &BTreeMap<String, Arc<PromptEntry>>, name: &str) -> Option<usize> {
        catalog.get(name).map(|e| e.module)
    }

    /// A module that comes up first cannot keep a name from a module earlier in the
    /// configuration: when that one lists it, it takes it back.
    #[test]
    fn a_name_belongs_to_the_earlier_module_whichever_lists_it_first() {
        let mut catalog = BTreeMap::new();
        let (problems, taken) = merge(&mut catalog, 1, vec![prompt(1, "write")]);
        assert!(problems.is_empty() && taken.is_empty());
        assert_eq!(owner(&catalog, "write"), Some(1), "the only one listing it");
        let (problems, taken) = merge(&mut catalog, 0, vec![prompt(0, "write")]);
        assert!(problems.is_empty());
        assert_eq!(owner(&catalog, "write"), Some(0), "taken back");
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].0, 1, "module 1 is told");
        let (problems, _) = merge(&mut catalog, 1, vec![prompt(1, "write")]);
        assert_eq!(
            owner(&catalog, "write"),
            Some(0),
            "and keeps it on a refresh"
        );
        assert!(problems[0].contains("module \"m0\"'s"), "{problems:?}");
    }

    #[test]
    fn a_name_listed_twice_is_left_out_and_problems_are_bounded() {
        let mut catalog = BTreeMap::new();
        let mut entries: Vec<PromptEntry> = (0..40)
            .flat_map(|i| [prompt(0, &format!("p{i}")), prompt(0, &format!("p{i}"))])
            .collect();
        entries.push(prompt(0, "fine"));
        let (problems, _) = merge(&mut catalog, 0, entries);
        assert_eq!(catalog.keys().collect::<Vec<_>>(), ["fine"]);
        assert_eq!(problems.len(), MAX_PROBLEMS + 1);
        assert_eq!(problems.last().unwrap(), "and 24 more");
    }
}
