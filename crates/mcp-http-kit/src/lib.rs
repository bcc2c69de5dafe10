//! The HTTP plumbing the MCP server (`mcp-http`) and the approvals page (`mcp-approvals`)
//! both stand on: response bodies ([`body`]), the one mapping of an error to a response on
//! either surface ([`response`], [`error::HttpError`]), the cap on the request bodies in
//! flight ([`inflight`]; the cap on a caller's open streams is `mcp_gate::streams`), the
//! reloadable state and the snapshot a request is served with ([`live`]), the tokens that
//! ended early ([`ended`]), and the REST view of an elicitation ([`views`]).
//!
//! No routing and no decisions: which path is served how is `mcp-http`'s and the page's;
//! what a call may do is `mcp-gate`'s.

pub mod audit;
pub mod body;
pub mod ended;
pub mod error;
pub mod inflight;
pub mod insights;
pub mod live;
pub mod response;
pub mod suggest;
pub mod views;
