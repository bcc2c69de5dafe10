//! The methods both eras serve alike: the catalogs and what is routed by name, URI or
//! reference.

use mcp_wire::ResultBody;
use mcp_wire::jsonrpc::{self};
use serde_json::Value;

use super::McpService;
use mcp_auth::{Principal, SCOPE_TOOLS_CALL};
use mcp_http_kit::error::McpError;
use mcp_http_kit::live::Snapshot;
use mcp_wire::CallToolParams;
use mcp_wire::tools::{ForwardParams, ListParams, list_page};

impl McpService {
    /// The methods both eras serve alike — the catalogs and what is routed by name, URI or
    /// reference: the result and whether it is a cacheable one (lists, `resources/read`);
    /// `None` for any other method.
    ///
    /// Boxed where it is answered: its future is kilobytes, and every request of both eras,
    /// most of them `tools/call`, would carry (and move) it otherwise.
    pub(crate) async fn catalog_method(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        request: &jsonrpc::Request,
        legacy: bool,
    ) -> Option<Result<(ResultBody, bool), McpError>> {
        if !matches!(
            request.method.as_str(),
            "tools/list"
                | "prompts/list"
                | "prompts/get"
                | "resources/list"
                | "resources/templates/list"
                | "resources/read"
                | "completion/complete"
        ) {
            return None;
        }
        Some(Box::pin(self.catalog_answer(snap, principal, request, legacy)).await)
    }

    /// [`McpService::catalog_method`]'s answer to a method that is one of them.
    async fn catalog_answer(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        request: &jsonrpc::Request,
        legacy: bool,
    ) -> Result<(ResultBody, bool), McpError> {
        let list = |key: &str, items: Vec<Value>| -> Result<(ResultBody, bool), McpError> {
            let params: ListParams = request.params_as()?;
            let page = list_page(key, items, params.cursor.as_ref())
                .map_err(|e| McpError::InvalidParams(e.to_string()))?;
            Ok((page.into(), true))
        };
        let method = request.method.as_str();
        principal.require(SCOPE_TOOLS_CALL)?;
        // What is forwarded to a module counts against the caller's call rate, as
        // `tools/call` does (the lists are answered from the catalog).
        if matches!(
            method,
            "prompts/get" | "resources/read" | "completion/complete"
        ) {
            snap.gateway.take_call(
                &principal.caller,
                "this caller is sending requests faster than the gateway allows",
            )?;
        }
        match method {
            "tools/list" => list("tools", snap.gateway.list_tools(legacy).await),
            "prompts/list" => list("prompts", snap.gateway.list_prompts().await),
            "resources/list" => list("resources", snap.gateway.list_resources()),
            "resources/templates/list" => {
                list("resourceTemplates", snap.gateway.list_resource_templates())
            }
            "prompts/get" => match request.params_as::<CallToolParams>() {
                Ok(params) => snap
                    .gateway
                    .get_prompt(principal, params)
                    .await
                    .map(|r| (r, false))
                    .map_err(McpError::from),
                Err(e) => Err(e.into()),
            },
            "resources/read" => match request.params_as::<ForwardParams>() {
                Ok(params) => snap
                    .gateway
                    .read_resource(principal, params)
                    .await
                    .map(|r| (r, true))
                    .map_err(McpError::from),
                Err(e) => Err(e.into()),
            },
            _ => match request.params_as::<ForwardParams>() {
                Ok(params) => snap
                    .gateway
                    .complete(principal, params)
                    .await
                    .map(|r| (r, false))
                    .map_err(McpError::from),
                Err(e) => Err(e.into()),
            },
        }
    }
}
