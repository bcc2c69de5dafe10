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

mod home;
mod process;
mod reader;

use process::supervise;
use reader::{log_stderr, read_messages};

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use mcp_wire::jsonrpc::{self};

use std::collections::HashMap;

use crate::module::CallLink;
use crate::rpc::{self, Pending};
use crate::{Module, ModuleError, ToolCall};

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
    /// (mode 0700, owned by the user), removed when the process ends (or, where the gateway
    /// was killed, by the next gateway to start a module: `stdio/home.rs`).
    pub home: Option<PathBuf>,
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
    fn generation(&self) -> u64 {
        self.shared
            .restarts
            .load(std::sync::atomic::Ordering::Relaxed)
    }

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

    async fn task_request(
        &self,
        method: &'static str,
        params: Value,
        relay: Option<Arc<dyn crate::Relay>>,
    ) -> Result<Box<RawValue>, ModuleError> {
        // The link ends with the request, as a call's does.
        let link = relay.map(|relay| Arc::new(CallLink::plain(relay)));
        self.send(method, |_| (params, link)).await
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

/// Longest stderr line logged whole; the rest of a longer one is counted, not kept.
const MAX_STDERR_LINE: usize = 8 * 1024;
/// How much of a stdout line that is not JSON-RPC is logged.
const LOGGED_PREFIX: usize = 64;

#[cfg(test)]
mod tests {
    use super::reader::{LineRead, excerpt, read_bounded_line};
    use super::*;
    use tokio::io::{AsyncBufRead, BufReader};

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
