//! The MCP wire, both eras, and nothing else: JSON-RPC envelopes (batches included), typed
//! params and results for the messages the gateway reads or writes, protocol versions and
//! eras, the 2026-07-28 header rules, SSE framing and parsing, and error codes.
//!
//! Pure: no IO, no async runtime. Every MCP or JSON-RPC shape the gateway writes is written
//! here; the server side (`mcp-http`) and the client side (`mcp-upstream`) both build on it.

pub mod codes;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod headers;
pub mod jsonrpc;
pub mod mcp;
pub mod result;
pub mod sse;
pub mod tools;

pub use headers::{ParamHeader, decode_header_value, encode_header_value};
pub use jsonrpc::{ErrorId, ErrorObject, Incoming, Message, Request, RequestId};
pub use mcp::{Era, EraSignals, LEGACY_VERSIONS, MODERN_VERSION};
pub use result::ResultBody;
pub use tools::CallToolParams;
