//! JSON-RPC 2.0 envelopes: parsing incoming messages and building outgoing ones. The only
//! place that knows the envelope's field names.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::McpError;

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
    /// Takes the params out as an object (absent params are an empty object); `-32602`
    /// otherwise. Afterwards the request has no params.
    pub fn take_params(&mut self) -> Result<Map<String, Value>, McpError> {
        match self.params.take() {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(map)) => Ok(map),
            Some(_) => Err(McpError::InvalidParams("params must be an object".into())),
        }
    }

    /// The params as an object (absent params are an empty object); `-32602` otherwise.
    pub fn params_object(&self) -> Result<Map<String, Value>, McpError> {
        match &self.params {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(map)) => Ok(map.clone()),
            Some(_) => Err(McpError::InvalidParams("params must be an object".into())),
        }
    }
}

fn parse_id(value: &Value) -> Option<RequestId> {
    match value {
        Value::String(s) => Some(RequestId::String(s.clone())),
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        _ => None,
    }
}

/// The id of a message that may be malformed, for the error response.
pub fn salvage_id(value: &Value) -> Option<RequestId> {
    value.get("id").and_then(parse_id)
}

/// Parses one message: `-32700` for text that is not JSON, `-32600` for JSON that is not a
/// JSON-RPC 2.0 message (batches included: they were removed from MCP).
pub fn parse(bytes: &[u8]) -> Result<Message, (Option<RequestId>, McpError)> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| (None, McpError::Parse(e.to_string())))?;
    parse_value(value)
}

/// Like [`parse`], for an already parsed value.
pub fn parse_value(value: Value) -> Result<Message, (Option<RequestId>, McpError)> {
    let invalid = |id, why: &str| Err((id, McpError::InvalidRequest(why.to_owned())));
    let Value::Object(mut object) = value else {
        return invalid(
            None,
            "a message must be one JSON-RPC object (batches are not supported)",
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

/// A successful response.
pub fn result(id: &RequestId, result: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response; `id` is omitted when the request's id could not be read.
pub fn error(id: Option<&RequestId>, error: &McpError) -> Value {
    let mut object = serde_json::json!({"jsonrpc": "2.0", "error": error.to_json()});
    if let (Some(id), Some(map)) = (id, object.as_object_mut()) {
        map.insert("id".into(), serde_json::to_value(id).unwrap_or(Value::Null));
    }
    object
}

/// A request we send (to a module).
pub fn request(id: &RequestId, method: &str, params: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[derive(Serialize)]
struct OutgoingRequest<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    method: &'a str,
    params: &'a Value,
}

/// The bytes of a request we send, serialised from borrowed params (no copy of them).
pub fn request_bytes(id: &RequestId, method: &str, params: &Value) -> Vec<u8> {
    serde_json::to_vec(&OutgoingRequest {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
    .unwrap_or_default()
}

/// A notification we send.
pub fn notification(method: &str, params: Option<Value>) -> Value {
    let mut object = serde_json::json!({"jsonrpc": "2.0", "method": method});
    if let (Some(params), Some(map)) = (params, object.as_object_mut()) {
        map.insert("params".into(), params);
    }
    object
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
}
