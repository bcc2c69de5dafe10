//! JSON-RPC and MCP error codes the gateway reads or writes.

/// Not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON, but not a valid request.
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Params that are not what the method takes.
pub const INVALID_PARAMS: i64 = -32602;
/// A failure of the server's own.
pub const INTERNAL_ERROR: i64 = -32603;
/// Not authenticated or not allowed (implementation-defined range).
pub const UNAUTHORIZED: i64 = -32001;
/// 2026-07-28: headers that disagree with the body (`HeaderMismatchError`).
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: a protocol version the server does not speak.
pub const UNSUPPORTED_VERSION: i64 = -32022;
/// 2025-11-25: the request needs a URL-mode elicitation first (`URLElicitationRequiredError`).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;
