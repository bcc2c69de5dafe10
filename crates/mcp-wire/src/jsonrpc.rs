//! JSON-RPC 2.0 envelopes: parsing incoming messages (one, or a batch) and writing outgoing
//! ones. The only place that knows the envelope's field names.
//!
//! Outgoing messages are serialised from borrowed parts: a result or params value is written
//! once, never copied into a `Value` first.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::codes;
use crate::literal::{ESCAPE, Literal, literal};

/// The last segment of the `_meta` key of a 2026-07-28 body's protocol version.
static PROTOCOL_VERSION: Literal = literal!("protocolVersion");

/// A request id: a string or an integer, never null.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

/// The id as text: the number, or the string as it is.
impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => f.write_str(s),
        }
    }
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
        /// The params, if any, as sent.
        params: Option<RawJson>,
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
    /// The params, if any (an object or array), as sent: read into the type the method
    /// takes, once, by [`Request::params_as`].
    pub params: Option<RawJson>,
}

/// JSON text as a peer sent it (valid, unparsed); equal when the JSON values are.
#[derive(Debug, Clone)]
pub struct RawJson(pub Box<RawValue>);

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
            || serde_json::from_str::<Value>(self.0.get()).ok()
                == serde_json::from_str::<Value>(other.0.get()).ok()
    }
}

impl std::ops::Deref for RawJson {
    type Target = RawValue;
    fn deref(&self) -> &RawValue {
        &self.0
    }
}

impl Request {
    /// The params as an object (absent params are an empty object).
    pub fn take_params(&mut self) -> Result<Map<String, Value>, ParamsError> {
        self.params_as()
    }

    /// The params read straight into `T` (absent params read as `{}`); params that are not
    /// an object are refused.
    pub fn params_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, ParamsError> {
        let text = self.params.as_deref().map_or("{}", RawValue::get);
        if !text.trim_start().starts_with('{') {
            return Err(ParamsError("params must be an object".into()));
        }
        serde_json::from_str(text).map_err(|e| ParamsError(e.to_string()))
    }

    /// What routing needs of the params (read without copying them).
    pub fn head(&self) -> ParamsHead<'_> {
        ParamsHead::of(self.params.as_deref())
    }

    /// Whether the params may name a protocol version in `_meta` (a 2026-07-28 body):
    /// `false` only where their text holds neither `protocolVersion` nor a `\u` escape
    /// (which could spell it), so [`Request::head`] would find none. Tells a 2025-11-25
    /// request's era without reading its params.
    pub fn may_name_version(&self) -> bool {
        self.params
            .as_deref()
            .is_some_and(|p| PROTOCOL_VERSION.is_in(p.get()) || ESCAPE.is_in(p.get()))
    }
}

/// What the gateway routes on, read from params without copying them: `name`, `uri` and
/// the modern `_meta` keys. Fields of the wrong type read as absent (the method's own
/// reading of the params then says what is wrong).
#[derive(Debug, Default, Deserialize)]
pub struct ParamsHead<'a> {
    /// `name` (`tools/call`, `prompts/get`).
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// `uri` (`resources/read`).
    #[serde(borrow, default)]
    pub uri: Option<Cow<'a, str>>,
    /// `_meta`.
    #[serde(rename = "_meta", borrow, default)]
    pub meta: Option<MetaHead<'a>>,
}

/// The modern keys of `_meta`.
#[derive(Debug, Default, Deserialize)]
pub struct MetaHead<'a> {
    /// `io.modelcontextprotocol/protocolVersion`.
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    pub protocol_version: Option<Cow<'a, str>>,
    /// `io.modelcontextprotocol/clientCapabilities`, unparsed.
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow, default)]
    pub client_capabilities: Option<&'a RawValue>,
    /// `io.modelcontextprotocol/logLevel`.
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow, default)]
    pub log_level: Option<Cow<'a, str>>,
}

impl<'a> ParamsHead<'a> {
    /// The head of these params (absent, or not an object: empty).
    pub fn of(params: Option<&'a RawValue>) -> ParamsHead<'a> {
        params
            .filter(|p| p.get().trim_start().starts_with('{'))
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default()
    }

    /// The protocol version `_meta` names.
    pub fn meta_version(&self) -> Option<&str> {
        self.meta.as_ref()?.protocol_version.as_deref()
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
///
/// A well-formed request or notification is read in one pass, its params kept as sent;
/// anything else is read into a tree first, so each mistake gets its precise error.
pub fn parse(bytes: &[u8]) -> Result<Message, Unreadable> {
    if let Some(message) = parse_plain(bytes) {
        return Ok(message);
    }
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| (None, EnvelopeError::Parse(e.to_string())))?;
    parse_value(value)
}

/// Parses a body that may be one message or a batch. An empty batch is `-32600`.
pub fn parse_incoming(bytes: &[u8]) -> Result<Incoming, Unreadable> {
    let is_batch = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    if !is_batch {
        return parse(bytes).map(Incoming::Single);
    }
    let items: Vec<&RawValue> =
        serde_json::from_slice(bytes).map_err(|e| (None, EnvelopeError::Parse(e.to_string())))?;
    if items.is_empty() {
        return Err((
            None,
            EnvelopeError::Invalid("an empty batch is not a request".into()),
        ));
    }
    Ok(Incoming::Batch(
        items
            .into_iter()
            .map(|item| parse(item.get().as_bytes()))
            .collect(),
    ))
}

/// Reads a field that is present, `null` included (`Option` alone reads `null` as absent).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The one-pass reading of a plain request or notification; `None` for anything else.
fn parse_plain(bytes: &[u8]) -> Option<Message> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow, default)]
        jsonrpc: Option<Cow<'a, str>>,
        #[serde(borrow, default, deserialize_with = "present")]
        id: Option<&'a RawValue>,
        #[serde(borrow, default)]
        method: Option<Cow<'a, str>>,
        #[serde(borrow, default, deserialize_with = "present")]
        params: Option<&'a RawValue>,
        #[serde(borrow, default, deserialize_with = "present")]
        result: Option<&'a RawValue>,
        #[serde(borrow, default, deserialize_with = "present")]
        error: Option<&'a RawValue>,
    }
    let envelope: Envelope<'_> = serde_json::from_slice(bytes).ok()?;
    if envelope.jsonrpc.as_deref() != Some("2.0")
        || envelope.result.is_some()
        || envelope.error.is_some()
    {
        return None;
    }
    let method = envelope.method?.into_owned();
    let params = match envelope.params {
        None => None,
        Some(raw) => match raw.get().trim_start().as_bytes().first() {
            Some(b'{' | b'[') => Some(RawJson(raw.to_owned())),
            Some(b'n') => None,
            _ => return None,
        },
    };
    Some(match envelope.id {
        None => Message::Notification { method, params },
        Some(raw) => {
            let text = raw.get();
            let id = match text.as_bytes().first() {
                Some(b'"') => RequestId::String(serde_json::from_str(text).ok()?),
                Some(b'-' | b'0'..=b'9') => RequestId::Number(text.parse().ok()?),
                _ => return None,
            };
            Message::Request(Request { id, method, params })
        }
    })
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
    let params = match object.remove("params") {
        None | Some(Value::Null) => None,
        Some(p @ (Value::Object(_) | Value::Array(_))) => {
            serde_json::value::to_raw_value(&p).ok().map(RawJson)
        }
        Some(_) => return invalid(id, "params must be an object"),
    };
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

/// The bytes of a successful response carrying `result` as it is.
pub fn result_body_bytes(id: &RequestId, result: &crate::ResultBody) -> Vec<u8> {
    // The envelope and the id in 64 bytes, the result written once into room for it.
    let mut out = Vec::with_capacity(64 + result.len_hint().max(192));
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    // An id is a string or an integer: writing it cannot fail.
    let _ = serde_json::to_writer(&mut out, id);
    out.extend_from_slice(b",\"result\":");
    result.write(&mut out);
    out.push(b'}');
    out
}

/// A response a peer sent, its result left unparsed.
#[derive(Debug)]
pub struct RawResponse {
    /// The id of our request.
    pub id: RequestId,
    /// The result as sent, or the error.
    pub outcome: Result<Box<serde_json::value::RawValue>, ErrorObject>,
}

/// Reads `bytes` as a response to one of our requests, leaving the result unparsed; `None`
/// for anything else (a request or notification from the peer, or not JSON-RPC).
pub fn parse_response(bytes: &[u8]) -> Option<RawResponse> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        jsonrpc: Option<&'a str>,
        id: Option<RequestId>,
        method: Option<serde::de::IgnoredAny>,
        #[serde(borrow)]
        result: Option<&'a serde_json::value::RawValue>,
        error: Option<ErrorObject>,
    }
    let envelope: Envelope<'_> = serde_json::from_slice(bytes).ok()?;
    if envelope.jsonrpc != Some("2.0") || envelope.method.is_some() {
        return None;
    }
    let outcome = match (envelope.result, envelope.error) {
        (Some(result), None) => Ok(result.to_owned()),
        (None, Some(error)) => Err(error),
        _ => return None,
    };
    Some(RawResponse {
        id: envelope.id?,
        outcome,
    })
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
struct OutgoingRequestHead<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    method: &'a str,
}

/// The bytes of a request we send, serialised from borrowed params (no copy of them).
/// Params that are `null` (a relayed request whose sender left them out) are left out:
/// JSON-RPC allows `params` to be absent, never `null`, and the TypeScript SDK drops such a
/// message unanswered.
pub fn request_bytes<P: Serialize>(id: &RequestId, method: &str, params: &P) -> Vec<u8> {
    // Room for the params of most calls: a larger one grows the buffer.
    let mut out = Vec::with_capacity(512);
    if serde_json::to_writer(
        &mut out,
        &OutgoingRequestHead {
            jsonrpc: "2.0",
            id,
            method,
        },
    )
    .is_err()
    {
        return Vec::new();
    }
    // `{…}` without its closing brace, then the params written into the same buffer.
    if out.pop() != Some(b'}') {
        return Vec::new();
    }
    let without_params = out.len();
    out.extend_from_slice(b",\"params\":");
    let start = out.len();
    if serde_json::to_writer(&mut out, params).is_err() {
        return Vec::new();
    }
    if out[start..] == *b"null" {
        out.truncate(without_params);
    }
    out.push(b'}');
    out
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

/// A serialised message as one line of a line-framed transport (stdio): every CR and LF
/// byte becomes a space, then one `\n` ends it. In JSON text those bytes can only be
/// whitespace between tokens (inside strings they are escaped), so the message means the
/// same — and a peer's text passed through unparsed (a client's arguments) cannot end the
/// line early and smuggle a second message in.
pub fn into_line(mut message: Vec<u8>) -> Vec<u8> {
    for byte in &mut message {
        if matches!(*byte, b'\n' | b'\r') {
            *byte = b' ';
        }
    }
    message.push(b'\n');
    message
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

    /// A body that cannot name a version is told so without reading it; every body that
    /// names one, however it spells the key, may.
    #[test]
    fn only_a_body_that_cannot_name_a_version_skips_the_head() {
        let request = |params: &str| {
            let text =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
            let Message::Request(request) = parse(text.as_bytes()).unwrap() else {
                panic!("a request");
            };
            request
        };
        for (params, names) in [
            (r#"{"name":"a","arguments":{}}"#, false),
            (r#"{"name":"a","_meta":{"progressToken":1}}"#, false),
            (
                r#"{"name":"a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
                true,
            ),
            (
                r#"{"name":"a","_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}}"#,
                true,
            ),
            (
                r#"{"name":"a","_meta":{"io.modelcontextprotocol/protocol\u0056ersion":"2026-07-28"}}"#,
                true,
            ),
        ] {
            let request = request(params);
            assert_eq!(request.head().meta_version().is_some(), names, "{params}");
            assert!(request.may_name_version() || !names, "{params}");
            if !params.contains("protocol") && !params.contains("\\u") {
                assert!(!request.may_name_version(), "{params}");
            }
        }
        let bare = parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        let Message::Request(bare) = bare else {
            panic!("a request")
        };
        assert!(!bare.may_name_version());
    }

    #[test]
    fn a_request_whose_params_were_left_out_is_written_without_them_never_with_null() {
        let id = RequestId::Number(3);
        let none: Option<Value> = None;
        let written = request_bytes(&id, "roots/list", &none);
        assert_eq!(
            serde_json::from_slice::<Value>(&written).unwrap(),
            json!({"jsonrpc": "2.0", "id": 3, "method": "roots/list"})
        );
        let given = Some(json!({"_meta": {"k": 1}}));
        let written = request_bytes(
            &RequestId::String("a".into()),
            "sampling/createMessage",
            &given,
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&written).unwrap(),
            json!({"jsonrpc": "2.0", "id": "a", "method": "sampling/createMessage", "params": {"_meta": {"k": 1}}})
        );
        let empty = json!({});
        let written = request_bytes(&id, "ping", &empty);
        assert_eq!(
            std::str::from_utf8(&written).unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{}}"#
        );
    }

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
    fn the_one_pass_reading_agrees_with_the_tree_reading() {
        let bodies: [&[u8]; 8] = [
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a","_meta":{"x":1}}}"#,
            br#"{"method":"m","id":"s\u0041","jsonrpc":"2.0","params":null}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/x","params":[1]}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"pong"}"#,
            br#"{"jsonrpc":"2.0","id":-3,"method":"ping","extra":{"deep":[1,2]}}"#,
        ];
        for body in bodies {
            let tree = parse_value(serde_json::from_slice(body).unwrap());
            let read = parse(body);
            match (read, tree) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(body)),
                (Err((ia, ea)), Err((ib, eb))) => {
                    assert_eq!(
                        (ia, ea.code()),
                        (ib, eb.code()),
                        "{}",
                        String::from_utf8_lossy(body)
                    )
                }
                (a, b) => panic!("{}: {a:?} vs {b:?}", String::from_utf8_lossy(body)),
            }
        }
        let Ok(Message::Request(request)) = parse(bodies[0]) else {
            panic!("a request")
        };
        assert_eq!(
            request.params.as_deref().map(RawValue::get),
            Some(r#"{"name":"a","_meta":{"x":1}}"#)
        );
        assert_eq!(request.head().name.as_deref(), Some("a"));
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
    fn a_response_is_read_with_its_result_unparsed_and_written_back_as_it_came() {
        let bytes = br#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"ok"}],"b":1.50}}"#;
        let response = parse_response(bytes).unwrap();
        assert_eq!(response.id, RequestId::Number(4));
        let raw = response.outcome.unwrap();
        assert_eq!(
            raw.get(),
            r#"{"content":[{"type":"text","text":"ok"}],"b":1.50}"#
        );
        let written =
            result_body_bytes(&RequestId::String("x".into()), &crate::ResultBody::Raw(raw));
        assert_eq!(
            std::str::from_utf8(&written).unwrap(),
            r#"{"jsonrpc":"2.0","id":"x","result":{"content":[{"type":"text","text":"ok"}],"b":1.50}}"#
        );
        let error = parse_response(
            br#"{"jsonrpc":"2.0","id":"a","error":{"code":-32042,"message":"m","data":{"u":1}}}"#,
        )
        .unwrap();
        assert_eq!(error.outcome.unwrap_err().data, Some(json!({"u": 1})));
        assert!(parse_response(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_none());
        assert!(parse_response(br#"{"jsonrpc":"2.0","method":"notifications/x"}"#).is_none());
        assert!(parse_response(b"{nope").is_none());
    }

    #[test]
    fn a_line_holds_one_message_whatever_whitespace_the_passed_through_text_had() {
        let params: Box<RawValue> =
            serde_json::from_str("{\"a\":\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x\"}\r\n}")
                .unwrap();
        let line = into_line(request_bytes(&RequestId::Number(1), "tools/call", &params));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        assert!(!line.contains(&b'\r'));
        assert_eq!(line.last(), Some(&b'\n'));
        let Ok(Message::Request(request)) = parse(&line[..line.len() - 1]) else {
            panic!("one request")
        };
        assert_eq!(request.method, "tools/call");
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
