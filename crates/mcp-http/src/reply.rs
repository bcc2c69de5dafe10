//! The answer to a call for a client that is not asked natively (the held result, naming the
//! page where a person answers it), shared by every path that makes one.

use elicitation_core::ElicitationId;
use mcp_gate::CallOutcome;
use mcp_http_kit::error::McpError;
use mcp_wire::ResultBody;

/// The approvals page of one confirmation.
pub(crate) fn page_url(base: &str, id: ElicitationId) -> String {
    format!("{}/approvals/e/{id}", base.trim_end_matches('/'))
}

/// The answer for a client that is not asked natively: a held result names the page where
/// a person approves it when the gateway knows its address (`page`).
pub(crate) fn reply(outcome: CallOutcome, page: Option<&str>) -> Result<ResultBody, McpError> {
    outcome
        .into_reply_with(|confirmation| page.map(|page| page_url(page, confirmation.id)))
        .map_err(McpError::from)
}
