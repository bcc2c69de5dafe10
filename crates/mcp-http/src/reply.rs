//! The answer to a call for a client that is not asked natively (the held result, naming the
//! page where a person answers it), shared by every path that makes one.

use elicitation_core::ElicitationId;
use mcp_gate::CallOutcome;
use mcp_http_kit::error::McpError;
use mcp_wire::ResultBody;

use crate::PageBase;

/// The approvals page of one confirmation.
pub(crate) fn page_url(base: &str, id: ElicitationId) -> String {
    format!("{}/approvals/e/{id}", base.trim_end_matches('/'))
}

/// The answer for a client that is not asked natively: a held result names the page where
/// a person approves it when the gateway knows its address (`page`, made only then).
pub(crate) fn reply(outcome: CallOutcome, page: &PageBase) -> Result<ResultBody, McpError> {
    outcome
        .into_reply_with(|confirmation| page.url().map(|base| page_url(&base, confirmation.id)))
        .map_err(McpError::from)
}
