//! The built-in permission-prompt module (`transport = "permission_prompt"`): the agent
//! host's own tools — Claude Code's `Bash`, `Edit`, `WebFetch` — gated like any other.
//!
//! Claude Code (and hosts built on the Claude Agent SDK) in `-p` mode can hand every
//! permission decision to an MCP tool (`--permission-prompt-tool mcp__<server>__<tool>`):
//! the tool gets `{"tool_name", "input", "tool_use_id"?}` and answers a text content
//! holding `{"behavior": "allow", "updatedInput": {…}}` or `{"behavior": "deny",
//! "message": "…"}`. This module lists that one tool, [`APPROVE`]. The gate answers it
//! (`mcp_gate::Gateway` classifies a call of it as the question it asks: a gated call of
//! `<prefix>__<tool_name>` with `input` as its arguments); when the gate lets such a call
//! through, it is forwarded here under the host tool's own name, and this module's answer
//! is `allow` with the arguments it was given — the agent's, or those a person approved
//! instead. So nothing here decides: what reaches this module is what the gate allowed.

use async_trait::async_trait;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::{Module, ModuleError, ToolCall};

/// The module's one listed tool.
pub const APPROVE: &str = "approve";

/// The permission-prompt module named `name`.
#[derive(Debug, Clone)]
pub struct PermissionPromptModule {
    name: String,
}

impl PermissionPromptModule {
    /// The module, as `[[modules]] name` calls it.
    pub fn new(name: impl Into<String>) -> Self {
        PermissionPromptModule { name: name.into() }
    }
}

/// The tool's listing.
pub fn approve_tool() -> Value {
    json!({
        "name": APPROVE,
        "title": "Ask the gateway whether the agent host may use one of its tools",
        "description": "Claude Code's permission prompt: the gateway holds the host's tool use until a person confirms it (or its policy decides), then answers allow (with the input to run) or deny (with why).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "tool_name": {"type": "string", "description": "The host's tool, like Bash or Edit."},
                "input": {"type": "object", "description": "The input the host would run the tool with."},
                "tool_use_id": {"type": "string"}
            },
            "required": ["tool_name", "input"]
        },
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "openWorldHint": false}
    })
}

/// The answer a host reads: a text content holding `decision`'s JSON.
pub fn decision_result(decision: &Value) -> Value {
    mcp_wire::tools::text_result(&decision.to_string(), None, false)
}

#[async_trait]
impl Module for PermissionPromptModule {
    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError> {
        Ok(vec![approve_tool()])
    }

    async fn call_tool(&self, call: ToolCall<'_>) -> Result<Box<RawValue>, ModuleError> {
        let decision = if call.params.name == APPROVE {
            // The gate answers the question itself; reaching here means it did not.
            json!({"behavior": "deny", "message": "the gateway did not decide this permission request; nothing may run"})
        } else {
            match call.params.arguments.as_ref().map(|a| a.to_value()) {
                None => json!({"behavior": "allow", "updatedInput": {}}),
                Some(Ok(input)) => json!({"behavior": "allow", "updatedInput": input}),
                // What cannot be read is not allowed to run.
                Some(Err(e)) => {
                    json!({"behavior": "deny", "message": format!("the input could not be read: {e}")})
                }
            }
        };
        serde_json::value::to_raw_value(&decision_result(&decision)).map_err(|e| {
            ModuleError::Protocol {
                module: self.name.clone(),
                reason: e.to_string(),
            }
        })
    }
}
