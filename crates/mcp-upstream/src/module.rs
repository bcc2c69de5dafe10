//! The [`Module`] trait every upstream MCP server is reached through, and [`ModuleError`].

use std::sync::Arc;

use async_trait::async_trait;
use mcp_wire::jsonrpc::ErrorObject;
use mcp_wire::tools::ForwardParams;
use mcp_wire::{CallToolParams, ParamHeader};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::broadcast;

/// Why a module could not answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModuleError {
    /// The module is not running or cannot be reached.
    #[error("module {module} is unavailable: {reason}")]
    Unavailable {
        /// The module.
        module: String,
        /// Why.
        reason: String,
    },
    /// The module stopped or the connection broke while the call was in flight.
    #[error("module {module} failed during the call: {reason}")]
    Failed {
        /// The module.
        module: String,
        /// Why.
        reason: String,
    },
    /// The module answered with a JSON-RPC error.
    #[error("module {module} returned error {code}: {message}")]
    Rpc {
        /// The module.
        module: String,
        /// The error code.
        code: i64,
        /// The error message.
        message: String,
        /// The error's `data`, passed on to the client as it came.
        data: Option<Box<Value>>,
    },
    /// The module did not answer in time.
    #[error("module {module} did not answer within {seconds} s")]
    Timeout {
        /// The module.
        module: String,
        /// The limit.
        seconds: u64,
    },
    /// The module already runs as many calls as it may at once, and none ended in time.
    #[error("module {module} is busy: it already runs {running} calls at once")]
    Busy {
        /// The module.
        module: String,
        /// Its limit.
        running: usize,
    },
    /// The module runs as each caller's own account (`auth.kind = "user"`), and the
    /// caller's is not connected or no longer works: the person connects it (again) on the
    /// approvals page.
    #[error(
        "module {module} runs as your own account there, which is not connected: connect it on the approvals page (Accounts), then call again"
    )]
    NotConnected {
        /// The module.
        module: String,
    },
    /// The module answered with something that is not MCP.
    #[error("module {module} sent an invalid answer: {reason}")]
    Protocol {
        /// The module.
        module: String,
        /// What was wrong.
        reason: String,
    },
}

impl ModuleError {
    /// What a client is told: a short stable text per kind, with `error_id`, the id of the
    /// log line that has the details (a start-up error's command line, a protocol error's
    /// text). A module's own JSON-RPC error is passed on as it is: it is the module's answer.
    pub fn public_message(&self, error_id: &str) -> String {
        let text = match self {
            ModuleError::Unavailable { module, .. } => format!("module {module} is unavailable"),
            ModuleError::Failed { module, .. } => {
                format!("module {module} failed during the call")
            }
            ModuleError::Timeout { .. }
            | ModuleError::Rpc { .. }
            | ModuleError::Busy { .. }
            | ModuleError::NotConnected { .. } => self.to_string(),
            ModuleError::Protocol { module, .. } => {
                format!("module {module} sent an invalid answer")
            }
        };
        format!("{text} (error id {error_id})")
    }
}

/// An upstream MCP server.
#[async_trait]
pub trait Module: Send + Sync + 'static {
    /// The module's tools, as the raw MCP `Tool` objects it sent.
    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError>;

    /// Calls a tool; the result is the module's `CallToolResult` as the JSON text it sent
    /// (passed on to the client without being parsed into a tree).
    async fn call_tool(&self, call: ToolCall<'_>) -> Result<Box<RawValue>, ModuleError>;

    /// The log messages (`notifications/message` params) the module sends outside any call
    /// — on an HTTP module's own stream, or on a stdio module's stdout with no call in
    /// flight — for whoever the module instance serves; `None` for a module that sends none.
    fn log_messages(&self) -> Option<broadcast::Receiver<Value>> {
        None
    }

    /// Whether the module keeps no state between requests (a 2026-07-28 HTTP module), so
    /// one instance serves every caller even when the module is isolated.
    fn stateless(&self) -> bool {
        false
    }

    /// The module's prompts, as the raw MCP `Prompt` objects it sent; none for a module that
    /// offers none.
    async fn list_prompts(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(Vec::new())
    }

    /// `prompts/get` with these params (`name` is the module's own prompt name); the result
    /// as the module sent it.
    async fn get_prompt(&self, params: CallToolParams) -> Result<Box<RawValue>, ModuleError> {
        let _ = params;
        Err(ModuleError::Rpc {
            module: String::new(),
            code: mcp_wire::codes::METHOD_NOT_FOUND,
            message: "this module offers no prompts".into(),
            data: None,
        })
    }

    /// The module's resources (raw MCP `Resource` objects); none for a module without.
    async fn list_resources(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(Vec::new())
    }

    /// The module's resource templates (raw `ResourceTemplate` objects); none for a module
    /// without.
    async fn list_resource_templates(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(Vec::new())
    }

    /// `resources/read` with these params; the result as the module sent it.
    async fn read_resource(&self, params: ForwardParams) -> Result<Box<RawValue>, ModuleError> {
        let _ = params;
        Err(ModuleError::Rpc {
            module: String::new(),
            code: mcp_wire::codes::METHOD_NOT_FOUND,
            message: "this module offers no resources".into(),
            data: None,
        })
    }

    /// `completion/complete` with these params (a prompt reference carries the module's
    /// own prompt name); the result as the module sent it.
    async fn complete(&self, params: ForwardParams) -> Result<Box<RawValue>, ModuleError> {
        let _ = params;
        Err(ModuleError::Rpc {
            module: String::new(),
            code: mcp_wire::codes::METHOD_NOT_FOUND,
            message: "this module offers no completions".into(),
            data: None,
        })
    }

    /// `logging/setLevel` for a module that offers logging (others are not asked).
    async fn set_log_level(&self, level: &str) -> Result<(), ModuleError> {
        let _ = level;
        Ok(())
    }

    /// `resources/subscribe` (or, `subscribe` false, `resources/unsubscribe`) for `uri`.
    async fn subscribe_resource(&self, uri: &str, subscribe: bool) -> Result<(), ModuleError> {
        let _ = (uri, subscribe);
        Err(ModuleError::Rpc {
            module: String::new(),
            code: mcp_wire::codes::METHOD_NOT_FOUND,
            message: "this module offers no resource subscriptions".into(),
            data: None,
        })
    }

    /// Fires when the module's tools, prompts or resources may have changed (a
    /// `list_changed` notification, or a restart).
    fn tools_changed(&self) -> Option<broadcast::Receiver<()>> {
        None
    }

    /// The URIs of `notifications/resources/updated` the module sends.
    fn resource_updates(&self) -> Option<broadcast::Receiver<String>> {
        None
    }

    /// The kind of credentials its requests carry (`bearer`, `client_credentials`), for
    /// the audit record; `None`: none.
    fn credential_kind(&self) -> Option<&'static str> {
        None
    }

    /// Whether the module is up now, and how often it was restarted (for metrics and
    /// readiness). A module without a process of its own is up.
    fn health(&self) -> ModuleHealth {
        ModuleHealth {
            up: true,
            restarts: 0,
        }
    }

    /// Stops the module (a child process is terminated).
    async fn shutdown(&self) {}

    /// Sends a request about one of its tasks (`tasks/get`, `tasks/result`, `tasks/cancel`
    /// with its `taskId`), in the era the task was created in; what the module asks while
    /// `tasks/result` waits goes to `relay`. A module that runs no tasks answers `-32601`.
    async fn task_request(
        &self,
        method: &'static str,
        params: Value,
        relay: Option<Arc<dyn Relay>>,
    ) -> Result<Box<RawValue>, ModuleError> {
        let _ = (params, relay);
        Err(ModuleError::Rpc {
            module: String::new(),
            code: mcp_wire::codes::METHOD_NOT_FOUND,
            message: format!("{method}: the module runs no tasks"),
            data: None,
        })
    }

    /// Whether what the module sends about a request (its questions, its notifications) comes
    /// on that request's own channel (an HTTP module: the request's response stream), not on
    /// a connection every request shares (a stdio module, where it is told apart only while
    /// one request is in flight). Tasks pass through only where nothing a task sends later
    /// can reach another caller's request.
    fn routes_by_request(&self) -> bool {
        false
    }

    /// Whether the module runs tasks of the 2026-07-28 tasks extension (reached at
    /// 2026-07-28, it offers `io.modelcontextprotocol/tasks`): a call whose client takes a
    /// task declares it, and the module may answer with one.
    fn runs_modern_tasks(&self) -> bool {
        false
    }

    /// Which life of the module this is: changes when the module forgets what it kept (a
    /// stdio process restarted, an HTTP session established anew), so a task id from an
    /// earlier life is not taken for one of this life's.
    fn generation(&self) -> u64 {
        0
    }

    /// Whether the module speaks both eras and is reached at 2026-07-28 now, so a client of
    /// the 2025 era is better served by a 2025-era session with it ([`Module::legacy_twin`]).
    fn speaks_both(&self) -> bool {
        false
    }

    /// A new client of this module that speaks 2025-11-25 with it (its own session, the same
    /// address and credentials), connected; for a module that [`Module::speaks_both`].
    async fn legacy_twin(&self) -> Result<Arc<dyn Module>, ModuleError> {
        Err(ModuleError::Unavailable {
            module: String::new(),
            reason: "the module speaks one era".into(),
        })
    }
}

/// A module's state as the operator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleHealth {
    /// Up and answering (a stdio module: its process runs and finished its handshake).
    pub up: bool,
    /// Restarts since the gateway started it.
    pub restarts: u64,
}

/// One `tools/call` for a module.
pub struct ToolCall<'a> {
    /// The params to send, with the module's own tool name.
    pub params: CallToolParams,
    /// The parameters the tool's schema mirrors into `Mcp-Param-*` headers (sent to
    /// 2026-07-28 modules over HTTP).
    pub mirrored: &'a [ParamHeader],
    /// Where the module's messages about this call go (its progress, log messages and own
    /// requests); `None` when nobody listens (they are then answered as in [`refuse_ask`]).
    pub relay: Option<Arc<dyn Relay>>,
}

/// Where a module's messages about one call go: towards the client that made the call.
///
/// The module clients ([`crate::http::HttpModule`], [`crate::stdio::StdioModule`]) decide which messages
/// belong to the call and give the client's own `progressToken` back; the server side
/// decides what the client may see (its log level) and how it is asked.
#[async_trait]
pub trait Relay: Send + Sync {
    /// A notification for the client: `notifications/progress` (with the client's own
    /// token) or `notifications/message`. Never waits: a client that does not read loses
    /// what does not fit in its buffer, the call goes on.
    fn notify(&self, method: &str, params: Value);

    /// A request the module sent while handling the call (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`): the client's answer, or the error the
    /// module gets.
    async fn ask(&self, method: &str, params: Option<Value>) -> Result<Value, ErrorObject>;

    /// The rank (in `mcp_wire::mcp::LOG_LEVELS`) of the least severe log message the client
    /// wants, told to a 2026-07-28 module with the call; `None`: it wants none.
    fn log_level(&self) -> Option<u8>;

    /// Whether a module's request `method` (one of [`RELAYED_REQUESTS`]) can be answered
    /// during this call — by the client, or (a form elicitation) by a person through the
    /// gateway — so the module is told only of what can be answered.
    fn answers(&self, method: &str) -> bool;

    /// Whether the client is asked a module's requests while the call runs, on the call's
    /// own stream (a 2025-11-25 session): a module that speaks both eras is then spoken to
    /// in the 2025 era for this call, so it asks the way the client can answer.
    fn asks_mid_call(&self) -> bool {
        false
    }

    /// A module's `notifications/tasks/status` on the request's stream: passed on only by a
    /// relay that follows one task and tells it to its client by the client's own handle
    /// (anything else could name another task of the module's, even another caller's);
    /// dropped by default.
    fn task_status(&self, params: Value) {
        let _ = params;
    }
}

/// The methods a module may ask its client during a call.
pub const RELAYED_REQUESTS: [&str; 3] =
    ["elicitation/create", "sampling/createMessage", "roots/list"];

/// The answer to a module's request nobody can take: `ping` is answered `{}`; anything else
/// gets `-32601`, an answer, never silence, so the module does not wait out its timeout.
pub fn refuse_ask(method: &str) -> Result<Value, ErrorObject> {
    if method == "ping" {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    Err(ErrorObject {
        code: mcp_wire::codes::METHOD_NOT_FOUND,
        message: format!("{method} cannot be relayed: the call has no client that can answer it"),
        data: None,
    })
}

const PROGRESS_TOKEN: &str = "progressToken";

/// One call's link to its client, as a module client holds it: the relay, and the
/// progress token the module was given (a module's progress for another token is not this
/// call's and is dropped).
pub(crate) struct CallLink {
    pub(crate) relay: Arc<dyn Relay>,
    /// The client's own `progressToken`.
    pub(crate) client_token: Option<Value>,
    /// The token the module was sent instead (the same for HTTP, whose progress arrives on
    /// the call's own stream; the gateway's own for stdio, shared by every call).
    pub(crate) upstream_token: Option<Value>,
    /// Set once the call is over: a request still asking the client gives up.
    ended: tokio::sync::watch::Sender<bool>,
}

impl CallLink {
    /// The link of a call with these params: the client's `progressToken` is replaced by
    /// `upstream` when given (a stdio module's progress is told apart by it), else sent as
    /// it is.
    pub(crate) fn new(
        relay: Arc<dyn Relay>,
        params: &mut CallToolParams,
        upstream: Option<Value>,
    ) -> CallLink {
        let meta = params.meta.as_mut();
        let client_token = meta.as_ref().and_then(|m| m.get(PROGRESS_TOKEN)).cloned();
        let upstream_token = match (meta, &client_token, upstream) {
            (Some(meta), Some(_), Some(upstream)) => {
                meta.insert(PROGRESS_TOKEN.into(), upstream.clone());
                Some(upstream)
            }
            (_, token, _) => token.clone(),
        };
        CallLink {
            relay,
            client_token,
            upstream_token,
            ended: tokio::sync::watch::channel(false).0,
        }
    }

    /// The link of a request that is not a call (`tasks/result`): what the module asks goes
    /// to `relay`; no progress is relayed.
    pub(crate) fn plain(relay: Arc<dyn Relay>) -> CallLink {
        CallLink {
            relay,
            client_token: None,
            upstream_token: None,
            ended: tokio::sync::watch::channel(false).0,
        }
    }

    /// The call is over (answered, failed, cancelled): requests still asking give up.
    pub(crate) fn end(&self) {
        self.ended.send_replace(true);
    }

    /// Passes a module's notification about this call on: progress with the client's own
    /// token, log messages as they are, a task's status to a relay that follows that task
    /// ([`Relay::task_status`]); anything else is not about a call.
    pub(crate) fn notification(&self, method: &str, params: Option<Value>) {
        match method {
            "notifications/progress" => {
                let Some(Value::Object(mut params)) = params else {
                    return;
                };
                let (Some(client), Some(upstream)) = (&self.client_token, &self.upstream_token)
                else {
                    return;
                };
                if params.get(PROGRESS_TOKEN) != Some(upstream) {
                    return;
                }
                params.insert(PROGRESS_TOKEN.into(), client.clone());
                self.relay.notify(method, Value::Object(params));
            }
            "notifications/message" => {
                if let Some(params @ Value::Object(_)) = params {
                    self.relay.notify(method, params);
                }
            }
            mcp_wire::tasks::TASK_STATUS => {
                if let Some(params @ Value::Object(_)) = params {
                    self.relay.task_status(params);
                }
            }
            _ => {}
        }
    }

    /// Asks the client (a module's request during the call); `ping` is the gateway's to
    /// answer.
    pub(crate) async fn ask(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, ErrorObject> {
        if !RELAYED_REQUESTS.contains(&method) {
            return refuse_ask(method);
        }
        let mut ended = self.ended.subscribe();
        tokio::select! {
            answer = self.relay.ask(method, params) => answer,
            _ = ended.wait_for(|ended| *ended) => Err(ErrorObject {
                code: mcp_wire::codes::INTERNAL_ERROR,
                message: format!("the call ended before the client answered {method}"),
                data: None,
            }),
        }
    }
}
