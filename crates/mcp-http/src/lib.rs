//! The MCP gateway's HTTP layer: a hyper service that speaks MCP Streamable HTTP to clients
//! (2026-07-28 and 2025-11-25 eras on one endpoint), serves the REST API for answering
//! elicitations, authenticates callers, and forwards tool calls to upstream modules through
//! the destructive-tool gate.
//!
//! It owns the wire (JSON-RPC envelopes, MCP shapes, headers, status codes, SSE framing,
//! session ids) and the upstream clients. It does not decide what is gated (that is
//! `gating-core`) nor how elicitations change or persist (`elicitation-core`,
//! `elicitation-store`).

pub mod ask;
pub mod auth;
pub mod body;
pub mod error;
pub mod gateway;
pub mod jsonrpc;
pub mod modules;
pub mod registry;
pub mod rest;
pub mod service;
pub mod sessions;
pub mod sse;
pub mod state;
pub mod streams;
pub mod wire;

mod serve;

pub use serve::{ServeConfig, serve};
