//! Modules as child processes speaking newline-delimited JSON-RPC on stdin/stdout.
//!
//! A supervisor task spawns the command, does the `initialize` handshake, and restarts the
//! process with exponential backoff when it dies. Calls in flight when it dies fail with
//! [`ModuleError::Failed`]; calls while it is down fail with [`ModuleError::Unavailable`].
//! stderr goes to the log, line by line.
//!
//! A module is third-party code: it starts from an empty environment plus the variables a
//! program needs to run ([`BASE_ENV`], `LC_*`), the names the operator lists in
//! [`StdioConfig::inherit_env`], and the module's own configured variables. Its working
//! directory is `/` unless configured, and it inherits no file descriptor besides stdio.
//! With [`StdioConfig::run_as`] (the gateway decides: its own user is root) the process runs
//! as another user, with no supplementary groups and a `HOME` of its own, so it can neither
//! read the gateway's `/proc` entries or files nor signal or trace it.
//!
//! # A module's messages during calls
//!
//! Nothing on a stdio connection says which call a module's request or log message is
//! about. The gateway sends each call's `progressToken` as its own
//! (`mcp-gateway-progress-{request id}`) and gives progress back to the call it names, with
//! the client's token. A request (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`) or a log message goes to the call in flight when it is the only request
//! in flight (of any method); otherwise it cannot be told apart, so a request is answered
//! with an error and a log message goes to the gateway's log only — never to a guessed
//! client, which could be another caller's. A request the gateway gives up on (its client
//! went away, or the call timed out) is cancelled with `notifications/cancelled`, followed by
//! a `ping`: it counts as in flight until the module answers that ping (stdin is one
//! ordered stream, so the module has read the cancellation by then, and a module that
//! follows the spec has stopped that work; one that answers nothing keeps it counted for its
//! call timeout). Before, a cancelled request counted for the whole call timeout, and
//! meanwhile no caller's question from the module could be relayed. At most 16 of the
//! module's own requests are answered at once; more are refused at once.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{broadcast, mpsc, watch};

use mcp_wire::codes;
use mcp_wire::jsonrpc::{self, ErrorId, ErrorObject, Message};

use std::collections::HashMap;

use crate::module::CallLink;
use crate::rpc::{self, Pending};
use crate::{Module, ModuleError, ToolCall, refuse_ask};

/// The `progressToken` a call with request id `id` is sent with.
fn progress_token(id: &jsonrpc::RequestId) -> Value {
    json!(format!("mcp-gateway-progress-{id}"))
}
use mcp_wire::CallToolParams;
use mcp_wire::tools::ForwardParams;

/// The gateway's environment variables every module gets, when they are set: what a program
/// needs to run and find its tools. `LC_*` are passed on too.
pub const BASE_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "TZ", "TMPDIR", "USER"];

/// The environment a module starts with, from the gateway's environment `parent`: only
/// [`BASE_ENV`], `LC_*` and `config.inherit_env`, then `config.env` on top.
pub fn child_environment(
    config: &StdioConfig,
    parent: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = parent
        .into_iter()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            BASE_ENV.contains(&name.as_ref())
                || name.starts_with("LC_")
                || config.inherit_env.iter().any(|n| *n == name)
        })
        .collect();
    for (name, value) in &config.env {
        env.retain(|(n, _)| n.as_os_str() != name.as_str());
        env.push((name.into(), value.into()));
    }
    env
}

/// Longest line accepted from a module (a longer one means it is misbehaving).
const MAX_LINE: usize = 64 * 1024 * 1024;

/// How to run a stdio module.
#[derive(Debug, Clone)]
pub struct StdioConfig {
    /// The module's name (for logs and errors).
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The module's own environment variables (set after the inherited ones).
    pub env: Vec<(String, String)>,
    /// Names of the gateway's environment variables passed on to the module, besides
    /// [`BASE_ENV`] and `LC_*`. The caller checks that none is a secret of the gateway's.
    pub inherit_env: Vec<String>,
    /// Working directory (default `/`, so the module sees nothing of the gateway's).
    pub cwd: Option<PathBuf>,
    /// How long one call may take.
    pub call_timeout: Duration,
    /// The user the process runs as, when not the gateway's own.
    pub run_as: Option<RunAs>,
}

/// Another user to run a module's process as (only a gateway run as root can).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// The user's name (the module's `USER` and `LOGNAME`).
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its group id: the process's only group.
    pub gid: u32,
    /// The module's `HOME`. Without one, each process life gets a fresh private directory
    /// (mode 0700, owned by the user), removed when the process ends.
    pub home: Option<PathBuf>,
}

/// A module process's own `HOME`, removed when dropped.
struct PrivateHome(PathBuf);

impl PrivateHome {
    /// A new directory under the system's temporary directory, owned by `uid:gid` and closed
    /// to everyone else. The name is random and created exclusively, so nothing prepared in
    /// the shared directory beforehand is used.
    fn create(module: &str, uid: u32, gid: u32) -> std::io::Result<PrivateHome> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let safe: String = module
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(32)
            .collect();
        let mut attempts = 0;
        loop {
            let path =
                std::env::temp_dir().join(format!("mcp-gateway-home-{safe}-{:016x}", random_u64()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let home = PrivateHome(path);
                    // Its mode is set while it is still root's: once it is the user's, a
                    // process of that user could put a symlink in its place (the temporary
                    // directory is sticky, not closed), and a chmod would follow it.
                    std::fs::set_permissions(&home.0, std::fs::Permissions::from_mode(0o700))?;
                    std::os::unix::fs::lchown(&home.0, Some(uid), Some(gid))?;
                    return Ok(home);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 8 => {
                    attempts += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for PrivateHome {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.0.display(), error = %e, "cannot remove a module's home directory");
        }
    }
}

/// A random number for a directory name, from the standard library's per-process random
/// hash keys and the clock (unpredictable enough for a name that is created exclusively).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

struct Shared {
    name: String,
    pending: Pending,
    /// The running process's stdin queue, when it is up and initialised.
    stdin: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    /// Why it is down, when it is.
    down_reason: Mutex<String>,
    changed: broadcast::Sender<()>,
    /// What the running process said it offers.
    offers: rpc::Offers,
    /// Every request in flight, by request id: a `tools/call`'s link to its client, `None`
    /// for any other request; and, until the module's call timeout has passed, the
    /// requests the gateway gave up on (the module may still be working on them).
    calls: Mutex<HashMap<String, InFlightEntry>>,
    /// `notifications/resources/updated`, by URI.
    updated: broadcast::Sender<String>,
    /// Log messages with no call in flight.
    logs: broadcast::Sender<Value>,
    /// Bounds the module's own requests being answered at once.
    asking: Arc<tokio::sync::Semaphore>,
    /// Times the process was started again after it ended.
    restarts: std::sync::atomic::AtomicU64,
}

/// One request in the table of [`Shared::calls`].
struct InFlightEntry {
    link: Option<Arc<CallLink>>,
    /// For a request given up on: until when it still counts.
    until: Option<Instant>,
}

/// Most of a module's own requests answered at once (beyond: answered with an error).
const MAX_MODULE_REQUESTS: usize = 16;

impl Shared {
    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlightEntry>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The call a message without a reference belongs to: the only request in flight (a
    /// `tools/call` with a client); `Err` with how many are in flight otherwise. Requests
    /// the gateway gave up on still count for a while, so a late message of a cancelled
    /// call never reaches the next caller's client.
    fn only_call(&self) -> Result<Option<Arc<CallLink>>, usize> {
        let mut calls = self.calls();
        let now = Instant::now();
        calls.retain(|_, entry| entry.until.is_none_or(|until| until > now));
        match calls.len() {
            1 => Ok(calls.values().next().and_then(|entry| entry.link.clone())),
            n => Err(n),
        }
    }
}

/// Cancels a request the gateway stops waiting for before its answer came (the future was
/// dropped, or timed out): the module gets `notifications/cancelled`.
struct InFlight {
    shared: Arc<Shared>,
    stdin: mpsc::Sender<Vec<u8>>,
    id: jsonrpc::RequestId,
    answered: bool,
    /// How long a request given up on still counts as in flight.
    grace: Duration,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let key = self.id.to_string();
        let mut calls = self.shared.calls();
        let link = if self.answered {
            calls.remove(&key).and_then(|entry| entry.link)
        } else {
            calls.get_mut(&key).and_then(|entry| {
                entry.until = Some(Instant::now() + self.grace);
                entry.link.take()
            })
        };
        drop(calls);
        if let Some(link) = link {
            link.end();
        }
        if self.answered {
            return;
        }
        self.shared.pending.forget(&self.id);
        let params = json!({"requestId": self.id, "reason": "the gateway's caller went away or the call timed out"});
        let line = jsonrpc::into_line(jsonrpc::notification_bytes(
            "notifications/cancelled",
            Some(&params),
        ));
        // Best effort: a full queue means the module is not reading anyway.
        if self.stdin.try_send(line).is_err() {
            return;
        }
        // Then a ping: its answer says the module read the cancellation (in order), and the
        // request stops counting as in flight.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, stdin, grace) = (self.shared.clone(), self.stdin.clone(), self.grace);
        runtime.spawn(async move {
            let (ping, answer) = shared.pending.register();
            let line = jsonrpc::into_line(jsonrpc::request_bytes(&ping, "ping", &json!({})));
            if stdin.try_send(line).is_err() {
                shared.pending.forget(&ping);
                return;
            }
            // Any answer will do (an error too): it came after the cancellation was read.
            match tokio::time::timeout(grace, answer).await {
                Ok(Ok(_)) => {
                    shared.calls().remove(&key);
                }
                _ => shared.pending.forget(&ping),
            }
        });
    }
}

/// A stdio module.
pub struct StdioModule {
    shared: Arc<Shared>,
    call_timeout: Duration,
    stop: watch::Sender<bool>,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl StdioModule {
    /// Starts the supervisor; the first spawn happens in the background, and `ready` waits
    /// for it.
    pub fn start(config: StdioConfig) -> Self {
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            pending: Pending::default(),
            stdin: Mutex::new(None),
            down_reason: Mutex::new("starting".into()),
            changed: broadcast::channel(16).0,
            offers: rpc::Offers::default(),
            calls: Mutex::default(),
            updated: broadcast::channel(64).0,
            logs: broadcast::channel(64).0,
            asking: Arc::new(tokio::sync::Semaphore::new(MAX_MODULE_REQUESTS)),
            restarts: std::sync::atomic::AtomicU64::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        let call_timeout = config.call_timeout;
        let supervisor = tokio::spawn(supervise(config, shared.clone(), stopped));
        StdioModule {
            shared,
            call_timeout,
            stop,
            supervisor: Mutex::new(Some(supervisor)),
        }
    }

    /// Waits until the module is up (or `timeout` passes); true if it is.
    pub async fn ready(&self, timeout: Duration) -> bool {
        let mut changed = self.shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self
                .shared
                .stdin
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
            {
                return true;
            }
            match tokio::time::timeout_at(deadline, changed.recv()).await {
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    }

    async fn request<P: serde::Serialize + Sync>(&self, method: &str, params: &P) -> rpc::Answer {
        self.send(method, |_| (params, None)).await
    }

    /// Sends a request whose params (and, for a `tools/call`, link to its client) are made
    /// once its id is known, and waits for the answer (or cancels).
    async fn send<P: serde::Serialize + Sync>(
        &self,
        method: &str,
        params: impl FnOnce(&jsonrpc::RequestId) -> (P, Option<Arc<CallLink>>),
    ) -> rpc::Answer {
        let name = &self.shared.name;
        let stdin = self
            .shared
            .stdin
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(stdin) = stdin else {
            let reason = self
                .shared
                .down_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            return Err(ModuleError::Unavailable {
                module: name.clone(),
                reason,
            });
        };
        let (id, answer) = self.shared.pending.register();
        let (params, call) = params(&id);
        let line = jsonrpc::into_line(jsonrpc::request_bytes(&id, method, &params));
        let mut in_flight = InFlight {
            shared: self.shared.clone(),
            stdin: stdin.clone(),
            id: id.clone(),
            answered: false,
            grace: self.call_timeout,
        };
        self.shared.calls().insert(
            id.to_string(),
            InFlightEntry {
                link: call,
                until: None,
            },
        );
        let sent = tokio::time::timeout(self.call_timeout, stdin.send(line)).await;
        if !matches!(sent, Ok(Ok(()))) {
            in_flight.answered = true;
            self.shared.pending.forget(&id);
            return Err(ModuleError::Unavailable {
                module: name.clone(),
                reason: "the process is stopping or does not read its input".into(),
            });
        }
        match tokio::time::timeout(self.call_timeout, answer).await {
            Ok(Ok(answer)) => {
                in_flight.answered = true;
                answer
            }
            Ok(Err(_)) => {
                in_flight.answered = true;
                Err(ModuleError::Failed {
                    module: name.clone(),
                    reason: "the connection closed".into(),
                })
            }
            Err(_) => Err(ModuleError::Timeout {
                module: name.clone(),
                seconds: self.call_timeout.as_secs(),
            }),
        }
    }
}

#[async_trait]
impl Module for StdioModule {
    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError> {
        rpc::list_all(&self.shared.name, "tools", |params| {
            Box::pin(async move { self.request("tools/list", &params).await })
        })
        .await
    }

    async fn call_tool(&self, call: ToolCall<'_>) -> Result<Box<RawValue>, ModuleError> {
        let ToolCall {
            mut params, relay, ..
        } = call;
        // The trace context, where the MCP convention puts it for a transport without
        // headers: `_meta.traceparent` (when tracing is on).
        if let Some(traceparent) = mcp_trace::traceparent() {
            params
                .meta
                .get_or_insert_with(Default::default)
                .insert("traceparent".into(), Value::String(traceparent));
        }
        self.send("tools/call", |id| {
            let link = relay
                .map(|relay| Arc::new(CallLink::new(relay, &mut params, Some(progress_token(id)))));
            (params, link)
        })
        .await
    }

    async fn list_prompts(&self) -> Result<Vec<Value>, ModuleError> {
        if !self.shared.offers.includes("prompts") {
            return Ok(Vec::new());
        }
        rpc::none_if_unoffered(
            rpc::list_all(&self.shared.name, "prompts", |params| {
                Box::pin(async move { self.request("prompts/list", &params).await })
            })
            .await,
        )
    }

    async fn get_prompt(&self, params: CallToolParams) -> Result<Box<RawValue>, ModuleError> {
        self.request("prompts/get", &params).await
    }

    async fn list_resources(&self) -> Result<Vec<Value>, ModuleError> {
        if !self.shared.offers.includes("resources") {
            return Ok(Vec::new());
        }
        rpc::none_if_unoffered(
            rpc::list_all(&self.shared.name, "resources", |params| {
                Box::pin(async move { self.request("resources/list", &params).await })
            })
            .await,
        )
    }

    async fn list_resource_templates(&self) -> Result<Vec<Value>, ModuleError> {
        if !self.shared.offers.includes("resources") {
            return Ok(Vec::new());
        }
        rpc::none_if_unoffered(
            rpc::list_all(&self.shared.name, "resourceTemplates", |params| {
                Box::pin(async move { self.request("resources/templates/list", &params).await })
            })
            .await,
        )
    }

    async fn read_resource(&self, params: ForwardParams) -> Result<Box<RawValue>, ModuleError> {
        self.request("resources/read", &params).await
    }

    async fn set_log_level(&self, level: &str) -> Result<(), ModuleError> {
        if !self.shared.offers.includes("logging") {
            return Ok(());
        }
        self.request("logging/setLevel", &rpc::level_params(level))
            .await
            .map(drop)
    }

    async fn complete(&self, params: ForwardParams) -> Result<Box<RawValue>, ModuleError> {
        self.request("completion/complete", &params).await
    }

    async fn subscribe_resource(&self, uri: &str, subscribe: bool) -> Result<(), ModuleError> {
        let method = if subscribe {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        self.request(method, &json!({"uri": uri})).await.map(drop)
    }

    fn tools_changed(&self) -> Option<broadcast::Receiver<()>> {
        Some(self.shared.changed.subscribe())
    }

    fn resource_updates(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.shared.updated.subscribe())
    }

    fn log_messages(&self) -> Option<broadcast::Receiver<Value>> {
        Some(self.shared.logs.subscribe())
    }

    fn health(&self) -> crate::module::ModuleHealth {
        crate::module::ModuleHealth {
            up: self
                .shared
                .stdin
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some(),
            restarts: self
                .shared
                .restarts
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let handle = self
            .supervisor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }
}

impl Drop for StdioModule {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn set_down(shared: &Shared, reason: String) {
    *shared.stdin.lock().unwrap_or_else(PoisonError::into_inner) = None;
    *shared
        .down_reason
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = reason;
}

async fn supervise(config: StdioConfig, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if *stop.borrow() {
            return;
        }
        let started = Instant::now();
        let reason = run_once(&config, &shared, &mut stop).await;
        set_down(&shared, reason.clone());
        shared.pending.fail_all(&ModuleError::Failed {
            module: shared.name.clone(),
            reason: reason.clone(),
        });
        if *stop.borrow() {
            return;
        }
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_millis(100);
        }
        tracing::warn!(module = %shared.name, %reason, retry_in = ?backoff, "stdio module is down; restarting");
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
        shared
            .restarts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One process life; returns why it ended.
async fn run_once(
    config: &StdioConfig,
    shared: &Arc<Shared>,
    stop: &mut watch::Receiver<bool>,
) -> String {
    let mut command = Command::new(&config.command);
    command
        .args(&config.args)
        .env_clear()
        .envs(child_environment(config, std::env::vars_os()))
        .current_dir(config.cwd.as_deref().unwrap_or(Path::new("/")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Dropped (and removed) when this process life ends.
    let mut _home = None;
    let mut as_user = String::new();
    if let Some(user) = &config.run_as {
        let home = match &user.home {
            Some(home) => home.clone(),
            None => match PrivateHome::create(&config.name, user.uid, user.gid) {
                Ok(home) => _home.insert(home).0.clone(),
                Err(e) => {
                    return format!("cannot create a home directory for user {}: {e}", user.name);
                }
            },
        };
        // No supplementary groups: the standard library drops them when it sets the user.
        command
            .uid(user.uid)
            .gid(user.gid)
            .env("HOME", home)
            .env("USER", &user.name)
            .env("LOGNAME", &user.name);
        as_user = format!(" as user {} (uid {})", user.name, user.uid);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && !as_user.is_empty() => {
            return format!(
                "cannot start `{}`{as_user}: {e} (the program, and every file it needs, must be readable by that user; see [[modules]] user)",
                config.command
            );
        }
        Err(e) => return format!("cannot start `{}`{as_user}: {e}", config.command),
    };
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return "the process has no stdio pipes".into();
    };
    tokio::spawn(log_stderr(shared.name.clone(), stderr));
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
    });
    let mut reader = tokio::spawn(read_messages(shared.clone(), tx.clone(), stdout));

    // The handshake, sent directly (calls are not accepted until it is done).
    let handshake = async {
        let (id, answer) = shared.pending.register();
        let mut line = jsonrpc::request_bytes(&id, "initialize", &rpc::initialize_params());
        line.push(b'\n');
        tx.send(line).await.map_err(|_| "stdin closed".to_owned())?;
        let result = tokio::time::timeout(Duration::from_secs(30), answer)
            .await
            .map_err(|_| "no answer to initialize within 30 s".to_owned())?
            .map_err(|_| "the process closed during initialize".to_owned())?
            .map_err(|e| e.to_string())?;
        let result = rpc::parse_result(&shared.name, &result).map_err(|e| e.to_string())?;
        let mut line = jsonrpc::notification_bytes::<Value>("notifications/initialized", None);
        line.push(b'\n');
        tx.send(line).await.map_err(|_| "stdin closed".to_owned())?;
        Ok::<Value, String>(result)
    };
    let reason = tokio::select! {
        handshake = handshake => match handshake {
            Ok(result) => {
                tracing::info!(module = %shared.name, server = %result.get("serverInfo").cloned().unwrap_or_default(), "stdio module is up");
                shared.offers.record(&result);
                *shared.stdin.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx.clone());
                let _ = shared.changed.send(());
                None
            }
            Err(reason) => Some(format!("handshake failed: {reason}")),
        },
        status = child.wait() => Some(exited(status)),
        _ = stop.changed() => Some("stopped".to_owned()),
    };
    let reason = match reason {
        Some(reason) => reason,
        None => tokio::select! {
            status = child.wait() => exited(status),
            // A process that closes stdout can no longer answer: treat it as down.
            _ = &mut reader => "the process closed its stdout".to_owned(),
            _ = stop.changed() => "stopped".to_owned(),
        },
    };
    drop(tx);
    set_down(shared, reason.clone());
    stop_child(&mut child).await;
    reader.abort();
    writer.abort();
    reason
}

fn exited(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => format!("the process exited ({status})"),
        Err(e) => format!("waiting for the process failed: {e}"),
    }
}

/// Closes stdin's queue, gives the process a moment to exit, then kills it.
async fn stop_child(child: &mut Child) {
    if tokio::time::timeout(Duration::from_secs(2), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

/// Longest stderr line logged whole; the rest of a longer one is counted, not kept.
const MAX_STDERR_LINE: usize = 8 * 1024;
/// How much of a stdout line that is not JSON-RPC is logged.
const LOGGED_PREFIX: usize = 64;

/// One line read with [`read_bounded_line`].
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    /// A whole line (without its newline) is in the buffer.
    Line,
    /// The line was longer than the limit: the buffer holds its first `limit` bytes, the
    /// rest was read and dropped; `len` is its whole length.
    Truncated { len: usize },
    /// The stream ended (or failed) before any byte of a new line.
    End,
}

/// Reads one line into `line`, holding at most `limit` bytes of it whatever its length.
async fn read_bounded_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    limit: usize,
) -> LineRead {
    line.clear();
    let mut len = 0usize;
    loop {
        let available = match reader.fill_buf().await {
            Ok(available) => available,
            Err(_) => &[],
        };
        if available.is_empty() {
            return match len {
                0 => LineRead::End,
                n if n > limit => LineRead::Truncated { len: n },
                _ => LineRead::Line,
            };
        }
        let (chunk, newline) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (&available[..at], true),
            None => (available, false),
        };
        let room = limit.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        len += chunk.len();
        let used = chunk.len() + usize::from(newline);
        reader.consume(used);
        if newline {
            return if len > limit {
                LineRead::Truncated { len }
            } else {
                LineRead::Line
            };
        }
    }
}

/// A short, printable excerpt of bytes from a module, for a log line.
fn excerpt(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(LOGGED_PREFIX)];
    gating_core::visible(&String::from_utf8_lossy(head))
}

async fn log_stderr(module: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        match read_bounded_line(&mut reader, &mut line, MAX_STDERR_LINE).await {
            LineRead::End => return,
            LineRead::Line => {
                let text = gating_core::visible(&String::from_utf8_lossy(&line));
                tracing::info!(target: "module", %module, "{text}");
            }
            LineRead::Truncated { len } => {
                let text = gating_core::visible(&String::from_utf8_lossy(&line));
                tracing::info!(target: "module", %module, bytes = len, "{text}… (line cut at {MAX_STDERR_LINE} bytes)");
            }
        }
    }
}

/// A module's notification: `list_changed` fires the change feed; progress goes to the call
/// its token names, a log message to the only call in flight (else to the gateway's log).
fn notification(shared: &Shared, method: &str, params: Option<Value>) {
    match method {
        "notifications/tools/list_changed"
        | "notifications/prompts/list_changed"
        | "notifications/resources/list_changed" => {
            let _ = shared.changed.send(());
        }
        "notifications/resources/updated" => {
            if let Some(uri) = params
                .as_ref()
                .and_then(|p| p.get("uri"))
                .and_then(Value::as_str)
            {
                let _ = shared.updated.send(uri.to_owned());
            }
        }
        "notifications/progress" => {
            let token = params.as_ref().and_then(|p| p.get("progressToken"));
            let link = token
                .and_then(Value::as_str)
                .and_then(|t| t.strip_prefix("mcp-gateway-progress-"))
                .and_then(|id| shared.calls().get(id).and_then(|e| e.link.clone()));
            if let Some(link) = link {
                link.notification(method, params);
            }
        }
        "notifications/message" => match shared.only_call() {
            Ok(Some(link)) => link.notification(method, params),
            // No call in flight: for whoever this process serves (a per-caller instance's
            // caller; nobody for a shared one).
            Err(0) if shared.logs.receiver_count() > 0 => {
                if let Some(params @ Value::Object(_)) = params {
                    let _ = shared.logs.send(params);
                }
            }
            _ => {
                let level = params
                    .as_ref()
                    .and_then(|p| p.get("level"))
                    .and_then(Value::as_str);
                tracing::info!(module = %shared.name, level, "a log message from the module outside a single call (not relayed)");
            }
        },
        _ => {}
    }
}

/// Reads stdout: answers go to their waiters, notifications to [`notification`], and
/// requests to the call they are about (see the module docs), `ping` answered here.
async fn read_messages(
    shared: Arc<Shared>,
    stdin: mpsc::Sender<Vec<u8>>,
    stdout: impl AsyncRead + Unpin,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        match read_bounded_line(&mut reader, &mut line, MAX_LINE).await {
            LineRead::End => return,
            LineRead::Truncated { len } => {
                tracing::error!(module = %shared.name, bytes = len, "a line over {MAX_LINE} bytes; dropping the connection");
                return;
            }
            LineRead::Line => {}
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        // Answers first, their results left unparsed; anything else is read whole.
        if let Some(response) = jsonrpc::parse_response(text) {
            // A request given up on is over once the module answers it after all.
            let mut calls = shared.calls();
            let key = response.id.to_string();
            if calls.get(&key).is_some_and(|entry| entry.until.is_some()) {
                calls.remove(&key);
            }
            drop(calls);
            let answer = rpc::answer(&shared.name, response.outcome);
            shared.pending.resolve(&response.id, answer);
            continue;
        }
        match jsonrpc::parse(text) {
            // A response without a usable result or error (`"result": null`, say).
            Ok(Message::Response { id, .. }) => shared.pending.resolve(
                &id,
                Err(ModuleError::Protocol {
                    module: shared.name.clone(),
                    reason: "a response with neither a result nor an error object".into(),
                }),
            ),
            Ok(Message::Notification { method, params }) => {
                let params = params.and_then(|p| serde_json::from_str::<Value>(p.0.get()).ok());
                notification(&shared, &method, params);
            }
            Ok(Message::Request(request)) => {
                let link = match request.method.as_str() {
                    "ping" => Ok(None),
                    _ => shared.only_call(),
                };
                let params = request
                    .params
                    .and_then(|p| serde_json::from_str::<Value>(p.0.get()).ok());
                let stdin = stdin.clone();
                let (id, method) = (request.id, request.method);
                // A module that asks more at once than anyone answers is refused at once.
                let Ok(permit) = shared.asking.clone().try_acquire_owned() else {
                    let error = ErrorObject {
                        code: codes::INTERNAL_ERROR,
                        message: format!(
                            "{method} refused: the module has {MAX_MODULE_REQUESTS} requests waiting for answers already"
                        ),
                        data: None,
                    };
                    let _ = stdin.try_send(jsonrpc::into_line(jsonrpc::error_bytes(
                        ErrorId::Known(&id),
                        &error,
                    )));
                    continue;
                };
                let answer_timeout = Duration::from_secs(30);
                // Answered on its own task: the client may take a while, and other calls'
                // answers keep arriving meanwhile.
                tokio::spawn(async move {
                    let _permit = permit;
                    let answer = match link {
                        Ok(Some(link)) => link.ask(&method, params).await,
                        Ok(None) => refuse_ask(&method),
                        Err(in_flight) => Err(ErrorObject {
                            code: codes::INTERNAL_ERROR,
                            message: format!(
                                "{method} cannot be relayed: {in_flight} requests are in flight on this stdio connection and nothing tells which one it is about"
                            ),
                            data: None,
                        }),
                    };
                    let out = match answer {
                        Ok(result) => jsonrpc::result_bytes(&id, &result),
                        Err(error) => jsonrpc::error_bytes(ErrorId::Known(&id), &error),
                    };
                    let _ =
                        tokio::time::timeout(answer_timeout, stdin.send(jsonrpc::into_line(out)))
                            .await;
                });
            }
            // Never logged whole: it may carry a payload.
            Err(_) => {
                tracing::warn!(module = %shared.name, bytes = text.len(), starts = %excerpt(text), "ignoring a line that is not JSON-RPC");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(env: &[(&str, &str)], inherit: &[&str]) -> StdioConfig {
        StdioConfig {
            name: "m".into(),
            command: "true".into(),
            args: Vec::new(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            inherit_env: inherit.iter().map(|n| (*n).to_owned()).collect(),
            cwd: None,
            call_timeout: Duration::from_secs(1),
            run_as: None,
        }
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        let mut names: Vec<String> = env
            .iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_module_gets_only_the_base_variables_the_listed_ones_and_its_own() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/gw"),
            ("LC_ALL", "C"),
            ("MCP_GATEWAY_SEAL_KEYS", "k1:secret"),
            ("DATABASE_URL", "postgres://secret"),
            ("AWS_PROFILE", "ops"),
            ("AWS_SECRET_ACCESS_KEY", "not for modules"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = child_environment(
            &config(&[("OWN", "1"), ("HOME", "/srv/module")], &["AWS_PROFILE"]),
            parent,
        );
        assert_eq!(
            names(&env),
            ["AWS_PROFILE", "HOME", "LC_ALL", "OWN", "PATH"]
        );
        let home = env.iter().find(|(n, _)| n == "HOME").map(|(_, v)| v);
        assert_eq!(
            home,
            Some(&OsString::from("/srv/module")),
            "configured env wins"
        );
    }

    /// A reader of `size` bytes of `x` with no newline, then `"ok\n"`, in small chunks.
    fn flood(size: usize) -> impl AsyncBufRead + Unpin {
        let bytes: Vec<u8> = std::iter::repeat_n(b'x', size).chain(*b"\nok\n").collect();
        BufReader::with_capacity(4096, std::io::Cursor::new(bytes))
    }

    #[tokio::test]
    async fn a_line_without_end_is_held_to_the_limit_and_the_next_line_still_reads() {
        let mut reader = flood(20 * 1024 * 1024);
        let mut line = Vec::new();
        let first = read_bounded_line(&mut reader, &mut line, 1024).await;
        assert_eq!(
            first,
            LineRead::Truncated {
                len: 20 * 1024 * 1024
            }
        );
        assert_eq!(line.len(), 1024, "only the limit is kept");
        assert!(
            line.capacity() < 64 * 1024,
            "the buffer never grew with the line"
        );
        assert_eq!(
            read_bounded_line(&mut reader, &mut line, 1024).await,
            LineRead::Line
        );
        assert_eq!(line, b"ok");
        assert_eq!(
            read_bounded_line(&mut reader, &mut line, 1024).await,
            LineRead::End
        );
    }

    #[test]
    fn a_non_json_line_is_logged_as_a_short_visible_excerpt() {
        let secret = format!("{}\u{202e}", "p".repeat(1000));
        let shown = excerpt(secret.as_bytes());
        assert_eq!(shown, "p".repeat(LOGGED_PREFIX));
        assert_eq!(excerpt("a\u{202e}b".as_bytes()), "a\\u202eb");
    }
}
