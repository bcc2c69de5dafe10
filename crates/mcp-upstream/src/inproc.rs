//! In-process modules: tools implemented by Rust closures, behind the same [`Module`] trait.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::{Module, ModuleError, ToolCall};
use mcp_wire::CallToolParams;
use mcp_wire::tools::ForwardParams;

type Handler = Arc<dyn Fn(&Value) -> Result<Value, String> + Send + Sync>;

/// One tool of an in-process module.
#[derive(Clone)]
pub struct InProcessTool {
    /// The MCP `Tool` object (name, description, inputSchema, annotations, …).
    pub tool: Value,
    handler: Handler,
}

impl InProcessTool {
    /// A tool whose handler maps the call's arguments to its `CallToolResult` ([`text_result`]
    /// makes one of text), or to an error message, which becomes an `isError` result.
    pub fn new(
        tool: Value,
        handler: impl Fn(&Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        InProcessTool {
            tool,
            handler: Arc::new(handler),
        }
    }
}

/// A module whose tools (and prompts) run in the gateway's process.
pub struct InProcessModule {
    name: String,
    tools: Vec<InProcessTool>,
    prompts: Vec<InProcessTool>,
    resources: Vec<(Value, String)>,
    completer: Option<Handler>,
}

impl InProcessModule {
    /// A module named `name` with these tools.
    pub fn new(name: impl Into<String>, tools: Vec<InProcessTool>) -> Self {
        InProcessModule {
            name: name.into(),
            tools,
            prompts: Vec::new(),
            resources: Vec::new(),
            completer: None,
        }
    }

    /// The module with a `completion/complete` handler: from the request's params to its
    /// `CompleteResult` (an error message becomes a JSON-RPC error).
    pub fn with_completions(
        mut self,
        handler: impl Fn(&Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        self.completer = Some(Arc::new(handler));
        self
    }

    /// The module with these text resources: each an MCP `Resource` object (with its
    /// `uri`) and its text.
    pub fn with_resources(mut self, resources: Vec<(Value, String)>) -> Self {
        self.resources = resources;
        self
    }

    /// The module with these prompts: each an MCP `Prompt` object and a handler from the
    /// `prompts/get` arguments to its `GetPromptResult` (an error message becomes a
    /// JSON-RPC error).
    pub fn with_prompts(mut self, prompts: Vec<InProcessTool>) -> Self {
        self.prompts = prompts;
        self
    }
}

/// A `CallToolResult` carrying `text`.
pub fn text_result(text: &str, is_error: bool) -> Value {
    mcp_wire::tools::text_result(text, None, is_error)
}

#[async_trait]
impl Module for InProcessModule {
    async fn complete(&self, params: ForwardParams) -> Result<Box<RawValue>, ModuleError> {
        let rpc_error = |code: i64, message: String| ModuleError::Rpc {
            module: self.name.clone(),
            code,
            message,
            data: None,
        };
        let Some(completer) = &self.completer else {
            return Err(rpc_error(-32601, "no completions".into()));
        };
        let result =
            completer(&Value::Object(params.0)).map_err(|message| rpc_error(-32602, message))?;
        serde_json::value::to_raw_value(&result).map_err(|e| ModuleError::Protocol {
            module: self.name.clone(),
            reason: e.to_string(),
        })
    }

    async fn list_resources(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(self.resources.iter().map(|(r, _)| r.clone()).collect())
    }

    async fn read_resource(&self, params: ForwardParams) -> Result<Box<RawValue>, ModuleError> {
        let uri = params.str("uri").unwrap_or_default();
        let Some((_, text)) = self
            .resources
            .iter()
            .find(|(r, _)| r.get("uri").and_then(Value::as_str) == Some(uri))
        else {
            return Err(ModuleError::Rpc {
                module: self.name.clone(),
                code: -32602,
                message: format!("unknown resource {uri}"),
                data: None,
            });
        };
        let result = json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]});
        serde_json::value::to_raw_value(&result).map_err(|e| ModuleError::Protocol {
            module: self.name.clone(),
            reason: e.to_string(),
        })
    }

    async fn list_prompts(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(self.prompts.iter().map(|p| p.tool.clone()).collect())
    }

    async fn get_prompt(&self, params: CallToolParams) -> Result<Box<RawValue>, ModuleError> {
        let rpc_error = |code: i64, message: String| ModuleError::Rpc {
            module: self.name.clone(),
            code,
            message,
            data: None,
        };
        let Some(prompt) = self
            .prompts
            .iter()
            .find(|p| p.tool.get("name").and_then(Value::as_str) == Some(params.name.as_str()))
        else {
            return Err(rpc_error(-32602, format!("unknown prompt {}", params.name)));
        };
        let arguments = match &params.arguments {
            None => Value::Object(serde_json::Map::new()),
            Some(arguments) => arguments
                .to_value()
                .map_err(|e| rpc_error(-32602, format!("unreadable arguments: {e}")))?,
        };
        let result = (prompt.handler)(&arguments).map_err(|message| rpc_error(-32602, message))?;
        serde_json::value::to_raw_value(&result).map_err(|e| ModuleError::Protocol {
            module: self.name.clone(),
            reason: e.to_string(),
        })
    }

    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(self.tools.iter().map(|t| t.tool.clone()).collect())
    }

    async fn call_tool(&self, call: ToolCall<'_>) -> Result<Box<RawValue>, ModuleError> {
        let name = call.params.name.as_str();
        let Some(tool) = self
            .tools
            .iter()
            .find(|t| t.tool.get("name").and_then(Value::as_str) == Some(name))
        else {
            return Err(ModuleError::Rpc {
                module: self.name.clone(),
                code: -32602,
                message: format!("unknown tool {name}"),
                data: None,
            });
        };
        let arguments = match &call.params.arguments {
            None => Value::Object(serde_json::Map::new()),
            Some(arguments) => arguments.to_value().map_err(|e| ModuleError::Protocol {
                module: self.name.clone(),
                reason: format!("unreadable arguments: {e}"),
            })?,
        };
        let result = match (tool.handler)(&arguments) {
            Ok(result) => result,
            Err(message) => text_result(&message, true),
        };
        serde_json::value::to_raw_value(&result).map_err(|e| ModuleError::Protocol {
            module: self.name.clone(),
            reason: e.to_string(),
        })
    }
}
