//! The one error of a request, its JSON-RPC error object and what is logged and hidden of
//! it; and its mapping to HTTP: its status on either surface and, for the REST API, its RFC
//! 9457 problem details. `response` turns both into a response. The gate's own error,
//! [`GateError`], becomes one of these (`From`).

use elicitation_core::{TransitionError, Violation};
use elicitation_store::StoreError;
use http::StatusCode;
use mcp_wire::codes;
use mcp_wire::jsonrpc::{EnvelopeError, ErrorObject, ParamsError};
use serde_json::{Value, json};

pub use mcp_gate::error::{GateError, new_error_id};
pub use mcp_wire::Era;

/// Everything that can go wrong serving a request.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The body is not JSON.
    #[error("parse error: {0}")]
    Parse(String),
    /// The body is JSON but not a valid request.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No such method.
    #[error("method not found: {0}")]
    MethodNotFound(String),
    /// Bad params.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// `tools/call` named a tool the gateway does not list.
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// A modern request whose headers disagree with its body.
    #[error("header mismatch: {0}")]
    HeaderMismatch(String),
    /// A protocol version the gateway does not speak.
    #[error("unsupported protocol version {requested:?}")]
    UnsupportedVersion {
        /// What the client asked for.
        requested: String,
        /// What the gateway supports in that era.
        supported: Vec<&'static str>,
    },
    /// A legacy request without `MCP-Session-Id`.
    #[error("missing MCP-Session-Id: send initialize first")]
    MissingSession,
    /// A legacy session that does not exist (or no longer does).
    #[error("session not found: it ended or expired; initialize a new one")]
    SessionNotFound,
    /// No credentials, or unknown ones.
    #[error("authentication required")]
    Unauthorized {
        /// Credentials were sent but are not valid.
        invalid_token: bool,
    },
    /// Authenticated, but without the scope this needs.
    #[error("this needs the scope {scope}")]
    Forbidden {
        /// The scope required.
        scope: &'static str,
    },
    /// Authenticated, but not one of those a virtual server (`[[servers]]`) admits.
    #[error("this caller may not connect to server {server}: {why}")]
    NotAdmitted {
        /// The server.
        server: String,
        /// What it wants that the caller lacks.
        why: String,
    },
    /// The request came from an origin that may not call the gateway.
    #[error("origin not allowed")]
    BadOrigin,
    /// The request names a host the gateway does not serve (DNS-rebinding protection).
    #[error("host not allowed: this gateway answers only to its configured host names")]
    BadHost,
    /// The body is over the limit.
    #[error("request body over {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request body did not arrive in time.
    #[error("the request body did not arrive in time")]
    BodyTimeout,
    /// The HTTP method is not served on this path.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// No route.
    #[error("not found")]
    NotFound,
    /// The client does not take what the request is answered with.
    #[error("not acceptable: {0}")]
    NotAcceptable(String),
    /// A POST whose body is not declared JSON where credentials ride along by themselves
    /// (auth `none`, or an embedder's cookie): a browser sends such a body cross-site
    /// without asking first.
    #[error(
        "a POST here must be Content-Type: application/json (a browser page of another site cannot send that without asking first)"
    )]
    UnsupportedMediaType,
    /// A REST body that is not what the endpoint takes.
    #[error("bad request body: {0}")]
    BadBody(String),
    /// A REST answer that failed validation.
    #[error("the response is invalid")]
    InvalidResponse {
        /// Every violation.
        errors: Vec<Violation>,
        /// Answers still accepted (0 once the elicitation failed).
        retries_left: u8,
    },
    /// A store failure.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A module's own JSON-RPC error, passed on with its code and `data` (for example
    /// `-32042`, URL elicitation required): it is the module's answer to the call.
    #[error("{message}")]
    Upstream {
        /// The module's code.
        code: i64,
        /// The module's message.
        message: String,
        /// The module's `data`.
        data: Option<Value>,
    },
    /// The caller holds as many long-lived streams as it may.
    #[error("this caller already holds {0} open streams; close one first")]
    TooManyStreams(usize),
    /// The caller is over a rate limit; it may try again after this many seconds.
    #[error("too many requests: {what}; try again in {retry_after} s")]
    RateLimited {
        /// Which limit.
        what: &'static str,
        /// Seconds until it may try again (`Retry-After`).
        retry_after: u64,
    },
    /// The client cancelled the request (`notifications/cancelled`).
    #[error("request cancelled")]
    Cancelled,
    /// The upload blob store failed; details go to the log only.
    #[error("the upload store failed: {0}")]
    BlobStore(String),
    /// A bug or an unexpected failure; details go to the log only.
    #[error("internal error")]
    Internal(String),
}

impl McpError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            McpError::Parse(_) => codes::PARSE_ERROR,
            McpError::InvalidRequest(_) | McpError::MissingSession | McpError::SessionNotFound => {
                -32600
            }
            McpError::MethodNotFound(_) | McpError::MethodNotAllowed | McpError::NotFound => -32601,
            McpError::TooManyStreams(_) | McpError::RateLimited { .. } => -32600,
            McpError::InvalidParams(_) | McpError::UnknownTool(_) | McpError::BadBody(_) => -32602,
            McpError::InvalidResponse { .. } => -32602,
            McpError::HeaderMismatch(_) => -32020,
            McpError::UnsupportedVersion { .. } => -32022,
            McpError::Unauthorized { .. }
            | McpError::Forbidden { .. }
            | McpError::NotAdmitted { .. }
            | McpError::BadOrigin
            | McpError::BadHost => -32001,
            McpError::PayloadTooLarge { .. }
            | McpError::BodyTimeout
            | McpError::NotAcceptable(_)
            | McpError::UnsupportedMediaType => -32600,
            McpError::Store(e) if e.is_caller_error() => -32602,
            McpError::Store(_) | McpError::Internal(_) | McpError::BlobStore(_) => -32603,
            // What LSP uses; MCP names no code (the client no longer waits for the answer).
            McpError::Cancelled => -32800,
            McpError::Upstream { code, .. } => *code,
        }
    }

    /// Extra data for the JSON-RPC error object.
    fn data(&self) -> Option<Value> {
        match self {
            McpError::UnsupportedVersion {
                requested,
                supported,
            } => Some(json!(mcp_wire::mcp::UnsupportedVersionData {
                supported,
                requested,
            })),
            McpError::InvalidResponse {
                errors,
                retries_left,
            } => Some(json!({"errors": errors, "retries_left": retries_left})),
            McpError::Upstream { data, .. } => data.clone(),
            _ => None,
        }
    }

    /// Whether the failure is the gateway's (its store, a module, a bug) rather than the
    /// client's: its details stay in the log, under an error id the client is given.
    fn is_ours(&self) -> bool {
        match self {
            McpError::Internal(_) | McpError::BlobStore(_) => true,
            McpError::Store(e) => !e.is_caller_error(),
            _ => false,
        }
    }

    /// For a failure of ours: logs the details under a fresh error id and returns the id.
    pub fn report(&self) -> Option<String> {
        if !self.is_ours() {
            return None;
        }
        let error_id = new_error_id();
        match self {
            McpError::Store(e) => {
                tracing::error!(%error_id, error = %e, source = ?std::error::Error::source(e), "store failure");
            }
            other => tracing::error!(%error_id, detail = %other.detail(), "internal error"),
        }
        Some(error_id)
    }

    fn detail(&self) -> String {
        match self {
            McpError::Internal(detail) => detail.clone(),
            other => other.to_string(),
        }
    }

    /// The message shown to the client: the error's own text, except for failures of ours,
    /// which get a stable short text and the error id of the log line with the details.
    pub fn public_message(&self, error_id: Option<&str>) -> String {
        let Some(error_id) = error_id else {
            return self.to_string();
        };
        let text = match self {
            McpError::Store(StoreError::Unavailable(_)) => "the store is unavailable; try again",
            McpError::Store(_) => "the store failed",
            McpError::BlobStore(_) => "the upload store is unavailable; try again",
            _ => "internal error",
        };
        format!("{text} (error id {error_id})")
    }

    /// The JSON-RPC error object. A failure of ours is logged here, with its error id.
    pub fn to_error_object(&self) -> ErrorObject {
        let error_id = self.report();
        let message = self.public_message(error_id.as_deref());
        let data = match error_id {
            None => self.data(),
            Some(error_id) => Some(json!({"error_id": error_id})),
        };
        ErrorObject {
            code: self.code(),
            message,
            data,
        }
    }
}

impl From<mcp_auth::AuthError> for McpError {
    fn from(error: mcp_auth::AuthError) -> Self {
        match error {
            mcp_auth::AuthError::Unauthorized { invalid_token } => {
                McpError::Unauthorized { invalid_token }
            }
            mcp_auth::AuthError::Forbidden { scope } => McpError::Forbidden { scope },
        }
    }
}

impl From<EnvelopeError> for McpError {
    fn from(error: EnvelopeError) -> Self {
        match error {
            EnvelopeError::Parse(why) => McpError::Parse(why),
            EnvelopeError::Invalid(why) => McpError::InvalidRequest(why),
        }
    }
}

impl From<ParamsError> for McpError {
    fn from(error: ParamsError) -> Self {
        McpError::InvalidParams(error.0)
    }
}

impl From<GateError> for McpError {
    fn from(error: GateError) -> Self {
        match error {
            GateError::UnknownTool(name) => McpError::UnknownTool(name),
            GateError::InvalidParams(why) => McpError::InvalidParams(why),
            GateError::Store(e) => McpError::Store(e),
            GateError::RateLimited { what, retry_after } => {
                McpError::RateLimited { what, retry_after }
            }
            GateError::Upstream {
                code,
                message,
                data,
            } => McpError::Upstream {
                code,
                message,
                data,
            },
            GateError::Internal(detail) => McpError::Internal(detail),
        }
    }
}

/// What an [`McpError`] is on HTTP.
pub trait HttpError {
    /// The HTTP status. JSON-RPC errors about a well-formed request in a legacy session
    /// travel in a 200 response, as MCP servers do; modern errors use the statuses the
    /// 2026-07-28 transport names.
    fn status(&self, era: Option<Era>) -> StatusCode;

    /// RFC 9457 problem details for the REST API. A failure of ours is logged here, with
    /// its error id.
    fn problem(&self) -> Value;
}

impl HttpError for McpError {
    fn status(&self, era: Option<Era>) -> StatusCode {
        match self {
            McpError::Parse(_)
            | McpError::InvalidRequest(_)
            | McpError::MissingSession
            | McpError::BadBody(_) => StatusCode::BAD_REQUEST,
            McpError::HeaderMismatch(_) | McpError::UnsupportedVersion { .. } => {
                StatusCode::BAD_REQUEST
            }
            McpError::SessionNotFound | McpError::NotFound => StatusCode::NOT_FOUND,
            McpError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            McpError::Forbidden { .. } | McpError::NotAdmitted { .. } | McpError::BadOrigin => {
                StatusCode::FORBIDDEN
            }
            McpError::BadHost => StatusCode::MISDIRECTED_REQUEST,
            McpError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            McpError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            McpError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            McpError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            McpError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            McpError::TooManyStreams(_) | McpError::RateLimited { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            McpError::InvalidResponse { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            McpError::MethodNotFound(_) if era == Some(Era::Modern) => StatusCode::NOT_FOUND,
            McpError::InvalidParams(_) if era == Some(Era::Modern) => StatusCode::BAD_REQUEST,
            McpError::MethodNotFound(_) | McpError::InvalidParams(_) | McpError::UnknownTool(_) => {
                if era.is_some() {
                    StatusCode::OK
                } else {
                    StatusCode::BAD_REQUEST
                }
            }
            McpError::Store(e) => store_status(e, era),
            McpError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            McpError::BlobStore(_) => StatusCode::SERVICE_UNAVAILABLE,
            // The request was fine; the module answered it with an error.
            McpError::Upstream { .. } | McpError::Cancelled => StatusCode::OK,
        }
    }

    fn problem(&self) -> Value {
        let status = self.status(None);
        let error_id = self.report();
        let mut problem = json!({
            "type": "about:blank",
            "title": status.canonical_reason().unwrap_or("Error"),
            "status": status.as_u16(),
            "detail": self.public_message(error_id.as_deref()),
        });
        let map = problem.as_object_mut().expect("a JSON object literal");
        if let Some(error_id) = error_id {
            map.insert("error_id".into(), Value::String(error_id));
        }
        match self {
            McpError::InvalidResponse {
                errors,
                retries_left,
            } => {
                let errors: Vec<Value> = errors
                    .iter()
                    .map(|v| json!({"field": v.field, "problem": v.problem, "message": v.to_string()}))
                    .collect();
                map.insert("errors".into(), Value::Array(errors));
                map.insert("retries_left".into(), json!(retries_left));
            }
            McpError::Store(StoreError::Transition(TransitionError::NotPending {
                status, ..
            })) => {
                map.insert("elicitation_status".into(), json!(status));
            }
            _ => {}
        }
        problem
    }
}

fn store_status(e: &StoreError, era: Option<Era>) -> StatusCode {
    match e {
        StoreError::NotFound { .. }
        | StoreError::GrantNotFound { .. }
        | StoreError::DelegationNotFound { .. }
        | StoreError::ChangeNotFound { .. } => StatusCode::NOT_FOUND,
        StoreError::ApproverRequired { .. } | StoreError::FourEyes { .. } => StatusCode::FORBIDDEN,
        StoreError::Transition(_) => StatusCode::CONFLICT,
        StoreError::AnswerRefused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        StoreError::PendingLimit { .. }
        | StoreError::CallerFull { .. }
        | StoreError::Full { .. } => StatusCode::TOO_MANY_REQUESTS,
        StoreError::InvalidCaller | StoreError::InvalidTtl | StoreError::Spec(_) => {
            if era == Some(Era::Legacy) {
                StatusCode::OK
            } else {
                StatusCode::BAD_REQUEST
            }
        }
        StoreError::Conflict(_) => StatusCode::CONFLICT,
        StoreError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of the gate's errors is the request error it always was: the same JSON-RPC code,
    /// and a failure of ours hidden behind an error id.
    #[test]
    fn the_gates_errors_keep_their_codes_and_hide_what_is_ours() {
        let cases = [
            (GateError::UnknownTool("x__y".into()), -32602, false),
            (GateError::InvalidParams("no uri".into()), -32602, false),
            (
                GateError::RateLimited {
                    what: "calls",
                    retry_after: 2,
                },
                -32600,
                false,
            ),
            (
                GateError::Upstream {
                    code: -32042,
                    message: "connect first".into(),
                    data: Some(json!({"url": "https://x.example"})),
                },
                -32042,
                false,
            ),
            (
                GateError::Store(StoreError::Unavailable("down".into())),
                -32603,
                true,
            ),
            (GateError::Internal("a bug".into()), -32603, true),
        ];
        for (gate, code, ours) in cases {
            let shown = McpError::from(gate).to_error_object();
            assert_eq!(shown.code, code, "{shown:?}");
            let hidden = shown
                .data
                .as_ref()
                .is_some_and(|d| d.get("error_id").is_some());
            assert_eq!(hidden, ours, "{shown:?}");
            if ours {
                assert!(!shown.message.contains("down") && !shown.message.contains("bug"));
            }
        }
    }
}
