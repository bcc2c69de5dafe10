//! The MCP gateway's HTTP layer: a hyper service that speaks MCP Streamable HTTP to clients
//! (2026-07-28 and 2025-11-25 eras on one endpoint), serves the REST API for answering
//! elicitations, authenticates callers, and forwards tool calls to upstream modules through
//! the destructive-tool gate.
//!
//! It is the server side: routing, the two eras, sessions, the REST API, asking the
//! person, and the gate's pipeline. Wire shapes come from `mcp-wire`; modules and their tool
//! catalog (the client side) from `mcp-upstream`. It does not decide what is gated (that is
//! `gating-core`), who is calling (`mcp-auth`), nor how elicitations change or persist
//! (`elicitation-core`,
//! `elicitation-store`).

pub mod answers;
pub mod ask;
mod bridge;
pub mod channel;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod legacy;
pub mod listen;
mod modern;
mod relay;
pub mod rest;
pub mod service;
pub mod sessions;
pub mod state;

mod serve;

pub use answers::ClientAnswers;
pub use serve::{ServeConfig, serve, serve_operations};
