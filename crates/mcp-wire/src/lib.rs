//! The MCP wire, both eras, and nothing else: JSON-RPC envelopes (batches included), typed
//! params and results for the messages the gateway reads or writes, protocol versions and
//! eras, the 2026-07-28 header rules, SSE framing and parsing, and error codes.
//!
//! Pure: no IO, no async runtime. Every MCP or JSON-RPC shape the gateway writes is written
//! here; the server side (`mcp-http`) and the client side (`mcp-upstream`) both build on it.
//!
//! # Example
//!
//! ```
//! use mcp_wire::jsonrpc::{Incoming, Message, parse_incoming};
//!
//! let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_order"}}"#;
//! let Ok(Incoming::Single(Message::Request(request))) = parse_incoming(body) else {
//!     panic!("one request")
//! };
//! assert_eq!(request.method, "tools/call");
//! let answer = mcp_wire::tools::text_result("deleted order 1042", None, false);
//! assert_eq!(answer["isError"], false);
//! ```

pub mod codes;
pub mod denial;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod headers;
pub mod jsonrpc;
mod literal;
pub mod mcp;
pub mod result;
pub mod sse;
pub mod tasks;
pub mod tools;

pub use headers::{ParamHeader, decode_header_value, encode_header_value};
pub use jsonrpc::{ErrorId, ErrorObject, Incoming, Message, Request, RequestId};
pub use mcp::{Era, EraSignals, LEGACY_VERSIONS, MODERN_VERSION};
pub use result::ResultBody;
pub use tools::{CallToolParams, FromClient};
