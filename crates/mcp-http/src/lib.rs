//! The MCP server surface: a hyper service that speaks MCP Streamable HTTP to clients
//! (2026-07-28 and 2025-11-25 eras on one endpoint) and serves the REST API for answering
//! elicitations, routing `/approvals` to the page.
//!
//! It is routing (one snapshot of the reloadable state per request), the two eras, legacy
//! sessions and their streams, asking the person natively (`ask`, `bridge`, `relay`), the
//! REST API and serving connections. It does not decide what a call may do (`mcp-gate`, over
//! `gating-core`), who is calling (`mcp-auth`), what the page shows (`mcp-approvals`), how an
//! error looks on HTTP or what a body is (`mcp-http-kit`), the wire's shapes (`mcp-wire`),
//! how modules are reached (`mcp-upstream`), nor how elicitations change or persist
//! (`elicitation-core`, `elicitation-store`).

pub mod answers;
pub mod ask;
mod bridge;
pub mod channel;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod held_task;
mod hosted;
mod legacy;
pub mod listen;
mod modern;
pub mod mount;
mod page_base;
mod relay;
mod reply;
pub mod rest;
pub mod service;
pub mod sessions;
pub mod state;
mod tasks;

mod serve;

pub use answers::ClientAnswers;
pub use page_base::PageBase;
pub use serve::{LISTEN_BACKLOG, ServeConfig, bind, serve, serve_operations};
pub use service::embed::GatewayService;
