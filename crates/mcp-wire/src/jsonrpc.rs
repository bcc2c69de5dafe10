//! JSON-RPC 2.0 envelopes: parsing incoming messages (one, or a batch) and writing outgoing
//! ones. The only place that knows the envelope's field names.
//!
//! Outgoing messages are serialised from borrowed parts: a result or params value is written
//! once, never copied into a `Value` first.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::codes;

/// A request id: a string or an integer, never null.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

/// One message a peer sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request, which expects a response.
    Request(Request),
    /// A notification, which does not.
    Notification {
        /// The method.
        method: String,
        /// The params, if any.
        params: Option<Value>,
    },
    /// A response to a request we sent.
    Response {
        /// The id of our request.
        id: RequestId,
        /// The result, or the error object.
        outcome: Result<Value, Value>,
    },
}

/// A JSON-RPC request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Its id.
    pub id: RequestId,
    /// The method.
    pub method: String,
    /// The params, if any (an object or array).
    pub params: Option<Value>,
}

impl Request {
    /// Takes the params out as an object (absent params are an empty object). Afterwards
    /// the request has no params.
    pub fn take_params(&mut self) -> Result<Map<String, Value>, ParamsError> {
        match self.params.take() {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(map)) => Ok(map),
            Some(_) => Err(ParamsError("params must be an object".into())),
        }
    }

    /// The params as a typed value (absent params read as `{}`).
    pub fn params_as<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, ParamsError> {
        let params = Value::Object(self.take_params()?);
        serde_json::from_value(params).map_err(|e| ParamsError(e.to_string()))
    }

    /// A string field of the params, if the params are an object that has it.
    pub fn param_str(&self, key: &str) -> Option<&str> {
        self.params.as_ref()?.get(key)?.as_str()
    }
}

/// Params that are not what the method takes (`-32602`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamsError(pub String);

/// A message that is not a valid JSON-RPC 2.0 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Not JSON at all (`-32700`).
    #[error("parse error: {0}")]
    Parse(String),
    /// JSON, but not a JSON-RPC message (`-32600`).
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl EnvelopeError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            EnvelopeError::Parse(_) => codes::PARSE_ERROR,
            EnvelopeError::Invalid(_) => codes::INVALID_REQUEST,
        }
    }
}

/// A message that could not be read, with its id when that much could be read.
pub type Unreadable = (Option<RequestId>, EnvelopeError);

/// What one POST body held.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// One message.
    Single(Message),
    /// A JSON-RPC batch (2025-03-26 sessions only): each element read on its own.
    Batch(Vec<Result<Message, Unreadable>>),
}

fn parse_id(value: &Value) -> Option<RequestId> {
    match value {
        Value::String(s) => Some(RequestId::String(s.clone())),
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        _ => None,
    }
}

/// Parses one message: `-32700` for text that is not JSON, `-32600` for JSON that is not one
/// JSON-RPC 2.0 message (a batch included).
pub fn parse(bytes: &[u8]) -> Result<Message, Unreadable> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| (None, EnvelopeError::Parse(e.to_string())))?;
    parse_value(value)
}

/// Parses a body that may be one message or a batch. An empty batch is `-32600`.
pub fn parse_incoming(bytes: &[u8]) -> Result<Incoming, Unreadable> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| (None, EnvelopeError::Parse(e.to_string())))?;
    match value {
        Value::Array(items) if items.is_empty() => Err((
            None,
            EnvelopeError::Invalid("an empty batch is not a request".into()),
        )),
        Value::Array(items) => Ok(Incoming::Batch(
            items.into_iter().map(parse_value).collect(),
        )),
        other => parse_value(other).map(Incoming::Single),
    }
}

/// Like [`parse`], for an already parsed value.
pub fn parse_value(value: Value) -> Result<Message, Unreadable> {
    let invalid = |id, why: &str| Err((id, EnvelopeError::Invalid(why.to_owned())));
    let Value::Object(mut object) = value else {
        return invalid(
            None,
            "a message must be one JSON-RPC object (batches are only accepted in 2025-03-26 sessions)",
        );
    };
    let id_value = object.remove("id");
    let id = id_value.as_ref().and_then(parse_id);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id, "jsonrpc must be \"2.0\"");
    }
    let params = object.remove("params");
    if params
        .as_ref()
        .is_some_and(|p| !(p.is_object() || p.is_array() || p.is_null()))
    {
        return invalid(id, "params must be an object");
    }
    match (object.remove("method"), id_value) {
        (Some(Value::String(method)), None) => Ok(Message::Notification { method, params }),
        (Some(Value::String(method)), Some(raw)) => match id {
            Some(id) => Ok(Message::Request(Request { id, method, params })),
            None => invalid(
                None,
                if raw.is_null() {
                    "id must not be null"
                } else {
                    "id must be a string or an integer"
                },
            ),
        },
        (Some(_), _) => invalid(id, "method must be a string"),
        (None, _) => {
            let Some(id) = id else {
                return invalid(
                    None,
                    "a message needs a method, or an id with a result or error",
                );
            };
            match (object.remove("result"), object.remove("error")) {
                (Some(result), None) => Ok(Message::Response {
                    id,
                    outcome: Ok(result),
                }),
                (None, Some(error)) => Ok(Message::Response {
                    id,
                    outcome: Err(error),
                }),
                _ => invalid(Some(id), "a response has exactly one of result and error"),
            }
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The code.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// More, when there is more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// Reads an error object a peer sent; anything malformed becomes an internal error that
    /// says so.
    pub fn from_value(value: Value) -> ErrorObject {
        serde_json::from_value(value).unwrap_or_else(|_| ErrorObject {
            code: codes::INTERNAL_ERROR,
            message: "a malformed JSON-RPC error object".into(),
            data: None,
        })
    }
}

/// The id of an error response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorId<'a> {
    /// The request's id.
    Known(&'a RequestId),
    /// The id could not be read, written as `"id": null` (JSON-RPC 2.0; MCP before
    /// 2025-11-25).
    Null,
    /// The id could not be read, and the field is left out (MCP 2025-11-25 and later).
    Omitted,
}

impl<'a> ErrorId<'a> {
    /// `Known(id)`, or for an unreadable id `Null` or `Omitted` as `null_id` says.
    pub fn new(id: Option<&'a RequestId>, null_id: bool) -> Self {
        match id {
            Some(id) => ErrorId::Known(id),
            None if null_id => ErrorId::Null,
            None => ErrorId::Omitted,
        }
    }

    fn is_omitted(&self) -> bool {
        matches!(self, ErrorId::Omitted)
    }
}

impl Serialize for ErrorId<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ErrorId::Known(id) => id.serialize(serializer),
            ErrorId::Null | ErrorId::Omitted => serializer.serialize_none(),
        }
    }
}

#[derive(Serialize)]
struct ResultResponse<'a, T: Serialize> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: &'a T,
}

#[derive(Serialize)]
struct ErrorResponse<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "ErrorId::is_omitted")]
    id: ErrorId<'a>,
    error: &'a ErrorObject,
}

/// The bytes of a successful response, serialised from the borrowed result.
pub fn result_bytes<T: Serialize>(id: &RequestId, result: &T) -> Vec<u8> {
    to_bytes(&ResultResponse {
        jsonrpc: "2.0",
        id,
        result,
    })
}

/// The bytes of an error response.
pub fn error_bytes(id: ErrorId<'_>, error: &ErrorObject) -> Vec<u8> {
    to_bytes(&ErrorResponse {
        jsonrpc: "2.0",
        id,
        error,
    })
}

#[derive(Serialize)]
struct OutgoingRequest<'a, P: Serialize> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    method: &'a str,
    params: &'a P,
}

/// The bytes of a request we send, serialised from borrowed params (no copy of them).
pub fn request_bytes<P: Serialize>(id: &RequestId, method: &str, params: &P) -> Vec<u8> {
    to_bytes(&OutgoingRequest {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
}

#[derive(Serialize)]
struct OutgoingNotification<'a, P: Serialize> {
    jsonrpc: &'static str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
}

/// The bytes of a notification we send.
pub fn notification_bytes<P: Serialize>(method: &str, params: Option<&P>) -> Vec<u8> {
    to_bytes(&OutgoingNotification {
        jsonrpc: "2.0",
        method,
        params,
    })
}

/// Serialises a message. Our shapes have string keys and finite numbers (serde_json cannot
/// produce a non-finite one), so this cannot fail; if it ever did, the empty body is refused
/// by the peer rather than a panic here.
fn to_bytes<T: Serialize>(message: &T) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_requests_notifications_and_responses() {
        let cases = [
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
                Message::Request(Request {
                    id: RequestId::Number(1),
                    method: "ping".into(),
                    params: None,
                }),
            ),
            (
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                Message::Notification {
                    method: "notifications/initialized".into(),
                    params: None,
                },
            ),
            (
                json!({"jsonrpc": "2.0", "id": "a", "result": {}}),
                Message::Response {
                    id: RequestId::String("a".into()),
                    outcome: Ok(json!({})),
                },
            ),
        ];
        for (value, want) in cases {
            assert_eq!(parse_value(value).unwrap(), want);
        }
    }

    #[test]
    fn rejects_what_is_not_json_rpc_with_the_right_code() {
        assert_eq!(parse(b"{not json").unwrap_err().1.code(), -32700);
        let invalid = [
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
            json!({"id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": 7}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": "str"}),
            json!({"jsonrpc": "2.0"}),
        ];
        for value in invalid {
            let (_, err) = parse_value(value.clone()).unwrap_err();
            assert_eq!(err.code(), -32600, "{value}");
        }
        let (id, _) = parse_value(json!({"jsonrpc": "1.0", "id": 7, "method": "x"})).unwrap_err();
        assert_eq!(
            id,
            Some(RequestId::Number(7)),
            "the id is kept for the error response"
        );
    }

    #[test]
    fn a_batch_is_read_element_by_element_and_an_empty_one_is_invalid() {
        let body =
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"},7]"#;
        let Ok(Incoming::Batch(items)) = parse_incoming(body) else {
            panic!("a batch")
        };
        assert_eq!(items.len(), 3);
        assert!(matches!(items[0], Ok(Message::Request(_))));
        assert!(matches!(items[1], Ok(Message::Notification { .. })));
        assert_eq!(items[2].as_ref().unwrap_err().1.code(), -32600);
        assert_eq!(parse_incoming(b"[]").unwrap_err().1.code(), -32600);
        assert!(matches!(
            parse_incoming(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(Incoming::Single(_))
        ));
    }

    #[test]
    fn responses_are_written_with_their_id_or_null_or_without_one() {
        let id = RequestId::String("a".into());
        let result = json!({"x": [1, 2]});
        let written: Value = serde_json::from_slice(&result_bytes(&id, &result)).unwrap();
        assert_eq!(
            written,
            json!({"jsonrpc": "2.0", "id": "a", "result": {"x": [1, 2]}})
        );
        let error = ErrorObject {
            code: -32600,
            message: "no".into(),
            data: None,
        };
        let known: Value =
            serde_json::from_slice(&error_bytes(ErrorId::Known(&id), &error)).unwrap();
        assert_eq!(known["id"], "a");
        let null: Value = serde_json::from_slice(&error_bytes(ErrorId::Null, &error)).unwrap();
        assert_eq!(
            null,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "no"}})
        );
        let omitted: Value =
            serde_json::from_slice(&error_bytes(ErrorId::Omitted, &error)).unwrap();
        assert_eq!(
            omitted,
            json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "no"}})
        );
    }

    #[test]
    fn requests_and_notifications_are_written_from_borrowed_params() {
        let id = RequestId::Number(3);
        let params = json!({"name": "t"});
        let written: Value =
            serde_json::from_slice(&request_bytes(&id, "tools/call", &params)).unwrap();
        assert_eq!(
            written,
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}})
        );
        let bare: Value = serde_json::from_slice(&notification_bytes::<Value>(
            "notifications/initialized",
            None,
        ))
        .unwrap();
        assert_eq!(
            bare,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        );
    }
}
