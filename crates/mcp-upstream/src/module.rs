//! The [`Module`] trait every upstream MCP server is reached through, and [`ModuleError`].

use async_trait::async_trait;
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
        data: Option<Value>,
    },
    /// The module did not answer in time.
    #[error("module {module} did not answer within {seconds} s")]
    Timeout {
        /// The module.
        module: String,
        /// The limit.
        seconds: u64,
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
            ModuleError::Timeout { .. } | ModuleError::Rpc { .. } => self.to_string(),
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

    /// Fires when the module's tool list may have changed (a `list_changed` notification,
    /// or a restart).
    fn tools_changed(&self) -> Option<broadcast::Receiver<()>> {
        None
    }

    /// Stops the module (a child process is terminated).
    async fn shutdown(&self) {}
}

/// One `tools/call` for a module.
#[derive(Debug)]
pub struct ToolCall<'a> {
    /// The params to send, with the module's own tool name.
    pub params: CallToolParams,
    /// The parameters the tool's schema mirrors into `Mcp-Param-*` headers (sent to
    /// 2026-07-28 modules over HTTP).
    pub mirrored: &'a [ParamHeader],
}
