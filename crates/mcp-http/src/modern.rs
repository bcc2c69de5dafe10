//! Modern requests (2026-07-28): self-describing `_meta`, and headers that must agree with
//! the body — `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and, for a tool whose schema
//! mirrors parameters, `Mcp-Param-*` (400 / `-32020` when they do not).

use http::HeaderMap;
use mcp_wire::CallToolParams;
use mcp_wire::headers::{check_param_headers, decode_header_value};
use mcp_wire::jsonrpc::Request;
use mcp_wire::mcp::{self, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSION};
use mcp_wire::tools::{ListParams, list_tools_result};
use serde_json::{Map, Value};

use crate::ask;
use crate::auth::{Principal, SCOPE_TOOLS_CALL};
use crate::error::McpError;
use crate::service::{McpService, Reply, header_text, refuse_cursor};

impl McpService {
    /// A modern request.
    pub(crate) async fn modern(
        &self,
        headers: &HeaderMap,
        principal: &Principal,
        request: &mut Request,
    ) -> Result<Reply, McpError> {
        let meta = request
            .params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(Value::as_object);
        let version = modern_version(meta)?;
        let can_elicit = ask::can_elicit_form(meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)))
            && ask::may_answer(principal);
        check_modern_headers(headers, request, &version)?;
        let (result, cacheable) = match request.method.as_str() {
            "server/discover" => (mcp::discover_result(), true),
            "tools/list" => {
                principal.require(SCOPE_TOOLS_CALL)?;
                let params: ListParams = request.params_as()?;
                refuse_cursor(params.cursor.as_ref())?;
                (list_tools_result(self.gateway.list_tools().await), true)
            }
            "tools/call" => {
                principal.require(SCOPE_TOOLS_CALL)?;
                let params: CallToolParams = request.params_as()?;
                let entry = self.gateway.tool(&params.name)?;
                check_param_headers(&entry.mirrored, params.arguments.as_ref(), headers)
                    .map_err(McpError::HeaderMismatch)?;
                let mrtr = ask::Mrtr {
                    gateway: &self.gateway,
                    states: &self.states,
                };
                (mrtr.call(principal, params, can_elicit).await?, false)
            }
            other => return Err(McpError::MethodNotFound(other.to_owned())),
        };
        Ok(Reply::Result(mcp::modern_result(result, cacheable), None))
    }
}

/// The protocol version `_meta` names; both it and the client capabilities are required,
/// and only 2026-07-28 is served in this era (`-32022` lists every version served).
fn modern_version(meta: Option<&Map<String, Value>>) -> Result<String, McpError> {
    let version = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            McpError::InvalidParams(format!("_meta[\"{META_PROTOCOL_VERSION}\"] is required"))
        })?;
    if !meta
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .is_some_and(Value::is_object)
    {
        return Err(McpError::InvalidParams(format!(
            "_meta[\"{META_CLIENT_CAPABILITIES}\"] is required"
        )));
    }
    if version != MODERN_VERSION {
        return Err(McpError::UnsupportedVersion {
            requested: version,
            supported: mcp::supported_versions(),
        });
    }
    Ok(version)
}

/// The 2026-07-28 header rules: `MCP-Protocol-Version`, `Mcp-Method` and (for the methods
/// that name something) `Mcp-Name` must be present and equal to the body's values.
fn check_modern_headers(
    headers: &HeaderMap,
    request: &Request,
    version: &str,
) -> Result<(), McpError> {
    let mismatch = |what: String| Err(McpError::HeaderMismatch(what));
    match header_text(headers, "mcp-protocol-version") {
        Some(v) if v == version => {}
        Some(v) => {
            return mismatch(format!(
                "MCP-Protocol-Version {v:?} differs from _meta's {version:?}"
            ));
        }
        None => return mismatch("MCP-Protocol-Version is required".into()),
    }
    match headers.get("mcp-method").and_then(decode_header_value) {
        Some(m) if m == request.method => {}
        Some(m) => {
            return mismatch(format!(
                "Mcp-Method {m:?} differs from the body's {:?}",
                request.method
            ));
        }
        None => return mismatch("Mcp-Method is required".into()),
    }
    let named = match request.method.as_str() {
        "tools/call" | "prompts/get" => request.param_str("name"),
        "resources/read" => request.param_str("uri"),
        _ => return Ok(()),
    };
    let body_name = named.unwrap_or_default();
    match headers.get("mcp-name").map(decode_header_value) {
        Some(Some(n)) if n == body_name => Ok(()),
        Some(Some(n)) => mismatch(format!(
            "Mcp-Name {n:?} differs from the body's {body_name:?}"
        )),
        Some(None) => mismatch("Mcp-Name is not a valid header value".into()),
        None => mismatch("Mcp-Name is required".into()),
    }
}
