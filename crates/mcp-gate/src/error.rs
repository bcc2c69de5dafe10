//! The gate's own error: the handful of ways a call or a catalog request fails in the gate
//! itself. The server maps it to its request error (`mcp_http_kit::error::McpError`, which
//! is `From` it) and so to JSON-RPC and HTTP.

use elicitation_store::StoreError;
use mcp_upstream::ModuleError;
use serde_json::Value;

/// What can go wrong in the gate.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// A call names a tool the gateway does not list.
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// The request's params are not what the method takes (or name nothing listed).
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// A store failure.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The caller is over a rate limit, or the module is busy; it may try again after this
    /// many seconds.
    #[error("too many requests: {what}; try again in {retry_after} s")]
    RateLimited {
        /// Which limit.
        what: &'static str,
        /// Seconds until it may try again (`Retry-After`).
        retry_after: u64,
    },
    /// A module's own JSON-RPC error, passed on with its code and `data`.
    #[error("{message}")]
    Upstream {
        /// The module's code.
        code: i64,
        /// The module's message.
        message: String,
        /// The module's `data`.
        data: Option<Value>,
    },
    /// A bug or an unexpected failure; details go to the log only.
    #[error("internal error")]
    Internal(String),
}

/// A fresh id for one failure, given to the client and written in the log line that holds
/// the details (16 hex digits).
pub fn new_error_id() -> String {
    // A failed random source yields a per-process sequence number instead (marked as such):
    // still unique here, never the zeros every failure would share.
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    mcp_random::hex_token::<8>().unwrap_or_else(|_| {
        format!(
            "seq-{}",
            SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        )
    })
}

/// A module's failure at a request other than `tools/call` (`what`), as the client's error:
/// its own JSON-RPC error passed on, busy as a retry, anything else internal.
pub(crate) fn module_failure(what: &str, err: ModuleError) -> GateError {
    match err {
        ModuleError::Rpc {
            code,
            message,
            data,
            ..
        } => GateError::Upstream {
            code,
            message,
            data: data.map(|d| *d),
        },
        // Every instance of the module is in use (another caller's load): try again.
        ModuleError::Busy { .. } => GateError::RateLimited {
            what: "the module is busy serving other callers",
            retry_after: 1,
        },
        err => GateError::Internal(format!("{what}: {err}")),
    }
}
