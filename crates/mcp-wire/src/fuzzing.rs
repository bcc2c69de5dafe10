//! Fuzz targets for the wire's parsers (docs/reliability.md): each takes any bytes, must
//! not panic, and asserts the invariants that make its parser trustworthy. Run by the
//! stable engine in this crate's tests (`mcp-fuzz`) and, with the `fuzzing` feature, by
//! cargo-fuzz (`fuzz/`).

use http::{HeaderMap, HeaderValue};
use serde_json::{Map, Value};

use crate::headers::{
    check_param_headers, decode_header_value, encode_header_value, param_header_values,
    param_headers,
};
use crate::jsonrpc::{
    self, ErrorId, ErrorObject, Incoming, Message, RequestId, notification_bytes, parse_response,
    parse_value, request_bytes, result_bytes,
};
use crate::sse;
use crate::tools::CallToolParams;
use crate::tools::client_call::one_pass_agrees;

/// The bytes a message is written as (the gateway's own writers).
fn write(message: &Message) -> Vec<u8> {
    match message {
        Message::Request(r) => request_bytes(&r.id, &r.method, &r.params.as_ref().map(|p| &p.0)),
        Message::Notification { method, params } => {
            notification_bytes(method, params.as_ref().map(|p| &p.0))
        }
        Message::Response { id, outcome } => match outcome {
            Ok(result) => result_bytes(id, result),
            Err(error) => jsonrpc::error_bytes(
                ErrorId::new(Some(id), false),
                &ErrorObject::from_value(error.clone()),
            ),
        },
    }
}

/// JSON-RPC and MCP parsing: the one-pass and the tree readings agree; a message read is
/// written and read back the same; a response read leniently agrees with the strict one;
/// `tools/call` params read and written back read the same.
pub fn jsonrpc(data: &[u8]) {
    let parsed = jsonrpc::parse(data);
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        let tree = parse_value(value);
        match (&parsed, &tree) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "the two readings disagree"),
            (Err((a, _)), Err((b, _))) => assert_eq!(a, b, "the two readings disagree on the id"),
            _ => panic!("one reading accepts what the other refuses: {parsed:?} vs {tree:?}"),
        }
    }
    if let Ok(message) = &parsed {
        let written = write(message);
        let again = jsonrpc::parse(&written).expect("what the gateway writes, it reads");
        // An error object is normalised when written (code and message kept); compare the
        // rest exactly.
        match (message, &again) {
            (
                Message::Response {
                    id: a,
                    outcome: Err(_),
                },
                Message::Response {
                    id: b,
                    outcome: Err(_),
                },
            ) => {
                assert_eq!(a, b)
            }
            _ => assert_eq!(message, &again, "a round trip changed the message"),
        }
        let line = jsonrpc::into_line(written);
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1, "one line");
        if let Message::Request(request) = message
            && let Ok(params) = request.params_as::<CallToolParams>()
        {
            let text = serde_json::to_vec(&params).expect("params serialise");
            let back: CallToolParams =
                serde_json::from_slice(&text).expect("written params read back");
            assert_eq!(
                serde_json::to_value(&back).ok(),
                serde_json::to_value(&params).ok(),
                "tools/call params changed in a round trip"
            );
        }
    }
    if let Ok(Message::Request(request)) = &parsed
        && let Some(params) = &request.params
    {
        one_pass_agrees(params.get());
    }
    if let Ok(Incoming::Batch(items)) = jsonrpc::parse_incoming(data) {
        assert!(!items.is_empty(), "an empty batch is refused");
    }
    if let Some(response) = parse_response(data) {
        let strict = jsonrpc::parse(data);
        if let Ok(Message::Response { id, .. }) = strict {
            assert_eq!(
                id, response.id,
                "the two response readings disagree on the id"
            );
        }
    }
    let _: Option<RequestId> = serde_json::from_slice(data).ok();
}

/// The SSE parser: the same events however the stream is cut into reads, each event's
/// data bounded.
pub fn sse(data: &[u8]) {
    let whole = sse::Parser::default().feed(data);
    // Cut at every position derived from the input's first bytes, and byte by byte.
    let cut = usize::from(data.first().copied().unwrap_or(0)) % (data.len() + 1);
    let mut parser = sse::Parser::default();
    let mut pieces = Vec::new();
    let mut failed = false;
    for part in [&data[..cut], &data[cut..]] {
        match parser.feed(part) {
            Ok(events) => pieces.extend(events),
            Err(_) => failed = true,
        }
    }
    if let (Ok(events), false) = (&whole, failed) {
        assert_eq!(events, &pieces, "cutting the stream changed its events");
    }
    if data.len() <= 4096 {
        let mut parser = sse::Parser::default();
        let mut bytewise = Vec::new();
        for byte in data {
            bytewise.extend(parser.feed(std::slice::from_ref(byte)).unwrap_or_default());
        }
        if let Ok(events) = &whole {
            assert_eq!(events, &bytewise, "byte-by-byte reads changed the events");
        }
    }
    if let Ok(events) = whole {
        for event in events {
            assert!(event.len() <= sse::MAX_EVENT_BYTES);
            // What the gateway writes as an event reads back as that event's data (one
            // line: the writer replaces line breaks).
            let framed = sse::event(&event);
            let back = sse::Parser::default()
                .feed(&framed)
                .expect("a written event reads");
            let expected: String = event
                .chars()
                .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
                .collect();
            assert_eq!(
                back,
                vec![expected],
                "a written event read back differently"
            );
        }
    }
}

/// The 2026-07-28 header rules: any text survives a header round trip; the headers the
/// gateway writes for a call agree with that call; a header value never decodes to
/// something a different value would.
pub fn headers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let encoded = encode_header_value(&text);
    assert_eq!(
        decode_header_value(&encoded).as_deref(),
        Some(text.as_ref()),
        "a header value did not round-trip"
    );
    if let Ok(value) = HeaderValue::from_bytes(data) {
        let _ = decode_header_value(&value);
    }
    let Ok(Value::Object(input)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let schema = input.get("inputSchema").cloned().unwrap_or(Value::Null);
    let arguments: Option<&Map<String, Value>> = input.get("arguments").and_then(Value::as_object);
    let params = param_headers(&schema);
    let mut headers = HeaderMap::new();
    for (name, value) in param_header_values(&params, arguments) {
        headers.append(name, value);
    }
    match check_param_headers(&params, arguments, &headers) {
        Ok(()) => {}
        // A mirrored argument that is an object or array has no header value: the call
        // itself is refused, for that reason.
        Err(why) if why.contains("must be a string, number or boolean") => {}
        Err(why) => panic!("the headers written for a call disagree with it: {why}"),
    }
    // Whatever headers the input carries besides are checked without panicking.
    if let Some(Value::Object(extra)) = input.get("headers") {
        let mut given = HeaderMap::new();
        for (name, value) in extra {
            if let (Ok(name), Some(Ok(value))) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                value.as_str().map(HeaderValue::from_str),
            ) {
                given.append(name, value);
            }
        }
        let _ = check_param_headers(&params, arguments, &given);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fuzz_jsonrpc() {
        mcp_fuzz::explore("jsonrpc", super::jsonrpc);
    }

    #[test]
    fn fuzz_sse() {
        mcp_fuzz::explore("sse", super::sse);
    }

    #[test]
    fn fuzz_headers() {
        mcp_fuzz::explore("headers", super::headers);
    }
}
