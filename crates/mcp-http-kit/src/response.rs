//! Building responses: JSON-RPC results (as JSON or a one-event SSE stream), and the one
//! mapping of an [`McpError`] to a response on either surface — a JSON-RPC error on `/mcp`,
//! RFC 9457 problem details on the REST API — with the same status and auth challenge.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use mcp_wire::jsonrpc::{self, ErrorId, RequestId};
use mcp_wire::{Era, sse};
use serde::Serialize;

use crate::body::{Body, full};
use crate::error::{HttpError as _, McpError};

/// Where an error is answered.
#[derive(Debug, Clone, Copy)]
pub enum Surface<'a> {
    /// `/mcp`: a JSON-RPC error response.
    JsonRpc {
        /// The request's id, or how to write an unreadable one.
        id: ErrorId<'a>,
        /// The era the request was served in, when known.
        era: Option<Era>,
    },
    /// The REST API: problem details.
    Problem,
}

/// The response for `error` on `surface`.
pub fn error(error: &McpError, surface: Surface<'_>) -> Response<Body> {
    let (status, content_type, body) = match surface {
        Surface::JsonRpc { id, era } => (
            error.status(era),
            "application/json",
            jsonrpc::error_bytes(id, &error.to_error_object()),
        ),
        Surface::Problem => (
            error.status(None),
            "application/problem+json",
            serde_json::to_vec(&error.problem()).unwrap_or_default(),
        ),
    };
    let mut response = bytes_response(status, content_type, body);
    let challenge = match error {
        McpError::Unauthorized {
            invalid_token: true,
        } => Some("Bearer realm=\"mcp-gateway\", error=\"invalid_token\"".to_owned()),
        McpError::Unauthorized {
            invalid_token: false,
        } => Some("Bearer realm=\"mcp-gateway\"".to_owned()),
        McpError::Forbidden { scope } => Some(format!(
            "Bearer realm=\"mcp-gateway\", error=\"insufficient_scope\", scope=\"{scope}\""
        )),
        _ => None,
    };
    if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    if let McpError::RateLimited { retry_after, .. } = error {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
    }
    if matches!(error, McpError::MethodNotAllowed) {
        let allow = match surface {
            // GET is served only as a session's stream (with its Mcp-Session-Id): to a GET
            // without one, the endpoint takes POST and DELETE.
            Surface::JsonRpc { .. } => "POST, DELETE",
            Surface::Problem => "GET, POST",
        };
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    response
}

/// A JSON-RPC error for request `id` (known) in `era`.
pub fn rpc_error(
    error_value: &McpError,
    id: Option<&RequestId>,
    era: Option<Era>,
) -> Response<Body> {
    error(
        error_value,
        Surface::JsonRpc {
            id: ErrorId::new(id, false),
            era,
        },
    )
}

fn bytes_response(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The Prometheus text exposition.
pub fn metrics(text: String) -> Response<Body> {
    bytes_response(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        text.into_bytes(),
    )
}

/// A JSON body.
pub fn json<T: Serialize>(status: StatusCode, body: &T) -> Response<Body> {
    bytes_response(
        status,
        "application/json",
        serde_json::to_vec(body).unwrap_or_default(),
    )
}

/// JSON lines (`application/jsonl`): one JSON value per line, each ended by `\n`.
pub fn json_lines<'a>(lines: impl IntoIterator<Item = &'a serde_json::Value>) -> Response<Body> {
    let mut body = Vec::new();
    for line in lines {
        // A `Value` always serialises, and never with a raw newline.
        if serde_json::to_writer(&mut body, line).is_ok() {
            body.push(b'\n');
        }
    }
    bytes_response(StatusCode::OK, "application/jsonl", body)
}

/// Marks `response` as a file to save, not to show: `Content-Disposition` (`disposition`),
/// never cached, and never sniffed into something a browser would render. Every download
/// the gateway serves (an uploaded answer, the audit trail) is marked here.
pub fn as_download(response: &mut Response<Body>, disposition: &'static str) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static(disposition),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
}

/// An empty body.
pub fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// Whether the client takes JSON (else it gets a one-event SSE stream).
pub fn wants_json(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    accept.is_empty()
        || accept.contains("application/json")
        || accept.contains("*/*")
        || !accept.contains("text/event-stream")
}

/// Whether the client takes an SSE stream (`Accept` names `text/event-stream`).
pub fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// The headers of an SSE response.
pub fn sse_response(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// A JSON-RPC message (already serialised) as JSON or as SSE according to `Accept`.
pub fn rpc_message(headers: &HeaderMap, message: Vec<u8>) -> Response<Body> {
    if wants_json(headers) {
        return bytes_response(StatusCode::OK, "application/json", message);
    }
    sse_response(full(sse::event_bytes(&message)))
}
