//! The gateway's client side: upstream MCP servers ("modules") behind one trait — child
//! processes over stdio, remote Streamable HTTP servers (either era), in-process modules
//! (the demo, test modules) — and the [`registry::Registry`], the catalog of their tools
//! under `{prefix}__{tool}`.
//!
//! It knows nothing of the server side (`mcp-http`): no client sessions, no auth, no gate.
//! Wire shapes come from `mcp-wire`.

pub mod accounts;
mod announced;
pub mod credentials;
pub mod demo;
#[cfg(feature = "http")]
pub mod http;
pub mod inproc;
pub mod isolation;
mod module;
pub mod permission_prompt;
pub mod registry;
mod rpc;
pub mod stdio;
#[cfg(feature = "http")]
pub mod tls;

pub use module::{
    Module, ModuleError, ModuleHealth, RELAYED_REQUESTS, Relay, ToolCall, refuse_ask,
};
