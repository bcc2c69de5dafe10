//! The one mapping of an [`McpError`] to HTTP: its status on either surface and, for the
//! REST API, its RFC 9457 problem details. The error itself, its JSON-RPC code and what is
//! logged of it are `mcp_gate::error`'s; `response` turns both into a response.

use elicitation_core::TransitionError;
use elicitation_store::StoreError;
use http::StatusCode;
use serde_json::{Value, json};

pub use mcp_gate::error::{Era, McpError, new_error_id};

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
            McpError::Forbidden { .. } | McpError::BadOrigin => StatusCode::FORBIDDEN,
            McpError::BadHost => StatusCode::MISDIRECTED_REQUEST,
            McpError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            McpError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            McpError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            McpError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
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
