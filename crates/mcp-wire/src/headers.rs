//! The 2026-07-28 header rules: `Mcp-Method`, `Mcp-Name` and `Mcp-Param-{Name}` mirror the
//! body so intermediaries can route without parsing it; whoever reads the body checks that
//! they agree (400 / `-32020` when they do not). Values that are not plain visible ASCII
//! travel as `=?base64?…?=`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

/// `MCP-Protocol-Version`.
pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Mcp-Method`.
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name`.
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// `Mcp-Session-Id`.
pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// The schema keyword that mirrors a parameter into a header.
pub const X_MCP_HEADER: &str = "x-mcp-header";
/// The prefix of a mirrored parameter's header name.
pub const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// A header value for `text`: as is when it is plain visible ASCII without surrounding
/// whitespace, else `=?base64?…?=`.
pub fn encode_header_value(text: &str) -> HeaderValue {
    let plain = !text.is_empty()
        && text.trim() == text
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !text.starts_with("=?base64?");
    if plain && let Ok(value) = HeaderValue::from_str(text) {
        return value;
    }
    HeaderValue::from_str(&format!("=?base64?{}?=", STANDARD.encode(text)))
        .expect("base64 is a valid header value")
}

/// The text of a header value, decoding `=?base64?…?=`; `None` if it is not valid.
pub fn decode_header_value(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(b64) => String::from_utf8(STANDARD.decode(b64).ok()?).ok(),
        None => Some(text.to_owned()),
    }
}

/// One tool parameter mirrored into a header (`x-mcp-header` on an `inputSchema` property).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The header's name, `mcp-param-{name}` lower-cased.
    pub header: HeaderName,
    /// The property path through `properties`, from the arguments object.
    pub path: Vec<String>,
}

fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The parameters a tool's `inputSchema` mirrors into headers. Only annotations the spec
/// allows count: reachable through `properties` alone, on a string, integer or boolean
/// (or number) property, with a token name used once (case-insensitively). An invalid
/// annotation is not enforced: clients drop such a tool.
pub fn param_headers(input_schema: &Value) -> Vec<ParamHeader> {
    let mut found = Vec::new();
    collect(input_schema, &mut Vec::new(), &mut found);
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<_> = found
        .iter()
        .filter(|p| !seen.insert(p.header.clone()))
        .map(|p| p.header.clone())
        .collect();
    found.retain(|p| !unique.contains(&p.header));
    found
}

fn collect(schema: &Value, path: &mut Vec<String>, found: &mut Vec<ParamHeader>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get(X_MCP_HEADER).and_then(Value::as_str) {
            let primitive = matches!(
                property.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "boolean" | "number")
            );
            let header = HeaderName::from_bytes(
                format!("{PARAM_HEADER_PREFIX}{}", name.to_ascii_lowercase()).as_bytes(),
            );
            if let (true, true, Ok(header)) = (primitive, is_token(name), header) {
                found.push(ParamHeader {
                    header,
                    path: path.clone(),
                });
            }
        }
        collect(property, path, found);
        path.pop();
    }
}

fn lookup<'a>(arguments: Option<&'a Map<String, Value>>, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let mut value = arguments?.get(first)?;
    for key in rest {
        value = value.get(key)?;
    }
    (!value.is_null()).then_some(value)
}

fn header_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The `Mcp-Param-*` headers a `tools/call` with these arguments carries (null and absent
/// arguments have none).
pub fn param_header_values(
    params: &[ParamHeader],
    arguments: Option<&Map<String, Value>>,
) -> Vec<(HeaderName, HeaderValue)> {
    params
        .iter()
        .filter_map(|p| {
            let text = header_text(lookup(arguments, &p.path)?)?;
            Some((p.header.clone(), encode_header_value(&text)))
        })
        .collect()
}

fn agrees(header: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => header == s,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        // Integers exactly (no rounding through f64 beyond 2^53); other numbers as numbers.
        Value::Number(n) => {
            if let Some(body) = n.as_i64() {
                header.parse::<i64>().is_ok_and(|sent| sent == body)
            } else if let Some(body) = n.as_u64() {
                header.parse::<u64>().is_ok_and(|sent| sent == body)
            } else {
                match (n.as_f64(), header.parse::<f64>()) {
                    (Some(body), Ok(sent)) => body == sent,
                    _ => false,
                }
            }
        }
        _ => false,
    }
}

/// Checks the `Mcp-Param-*` headers of a request against its arguments: a header for every
/// mirrored argument that has a value, equal to it (after base64 decoding; numbers compare
/// as numbers), and none for an argument that has no value. `Err` says what disagrees.
pub fn check_param_headers(
    params: &[ParamHeader],
    arguments: Option<&Map<String, Value>>,
    headers: &HeaderMap,
) -> Result<(), String> {
    for p in params {
        let body = lookup(arguments, &p.path);
        let name = p.header.as_str();
        if headers.get_all(&p.header).iter().nth(1).is_some() {
            return Err(format!("{name} is sent more than once"));
        }
        let sent = headers.get(&p.header);
        match (body, sent) {
            // Found by fuzzing: no header can carry an object or array, so such a value
            // is refused for what it is rather than as a missing header.
            (Some(value), _) if header_text(value).is_none() => {
                return Err(format!(
                    "{name} mirrors an argument that must be a string, number or boolean"
                ));
            }
            (None, None) => {}
            (None, Some(_)) => {
                return Err(format!("{name} is sent but the argument has no value"));
            }
            (Some(_), None) => return Err(format!("{name} is required: the argument has a value")),
            (Some(value), Some(sent)) => match decode_header_value(sent) {
                Some(text) if agrees(&text, value) => {}
                Some(_) => return Err(format!("{name} differs from the argument's value")),
                None => return Err(format!("{name} is not a valid header value")),
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn header_values_round_trip_with_base64_for_unsafe_text() {
        for text in [
            "fs__read_file",
            "héllo",
            " padded",
            "line\nbreak",
            "=?base64?x?=",
        ] {
            let encoded = encode_header_value(text);
            assert_eq!(decode_header_value(&encoded).as_deref(), Some(text));
        }
        assert_eq!(
            encode_header_value("demo__list_notes").to_str().unwrap(),
            "demo__list_notes"
        );
        assert_eq!(
            encode_header_value("é").to_str().unwrap(),
            "=?base64?w6k=?="
        );
        assert_eq!(
            decode_header_value(&HeaderValue::from_static("=?base64?!!?=")),
            None
        );
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "dry": {"type": "boolean", "x-mcp-header": "Dry"},
            "target": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
            "list": {"type": "array", "x-mcp-header": "List"},
            "bad": {"type": "string", "x-mcp-header": "a b"},
            "twice": {"type": "string", "x-mcp-header": "region"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"hidden": {"type": "string", "x-mcp-header": "Hidden"}}}}
        }})
    }

    #[test]
    fn only_valid_annotations_reachable_through_properties_are_mirrored() {
        let mut names: Vec<_> = param_headers(&schema())
            .into_iter()
            .map(|p| (p.header.as_str().to_owned(), p.path.join(".")))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                ("mcp-param-count".to_owned(), "count".to_owned()),
                ("mcp-param-dry".to_owned(), "dry".to_owned()),
                ("mcp-param-zone".to_owned(), "target.zone".to_owned()),
            ],
            "a name used twice (Region/region), a non-primitive, a non-token and one under items are dropped"
        );
    }

    #[test]
    fn mirrored_values_are_written_and_checked_against_the_body() {
        let params = param_headers(&schema());
        let arguments =
            json!({"count": 42, "dry": false, "target": {"zone": "é 1"}, "region": null});
        let arguments = arguments.as_object();
        let mut headers = HeaderMap::new();
        for (name, value) in param_header_values(&params, arguments) {
            headers.insert(name, value);
        }
        assert_eq!(headers.get("mcp-param-count").unwrap(), "42");
        assert_eq!(
            headers.get("mcp-param-zone").unwrap(),
            "=?base64?w6kgMQ==?="
        );
        assert_eq!(check_param_headers(&params, arguments, &headers), Ok(()));

        for loose in ["42.0", " 42", "4.2e1", "42.0000000000000001"] {
            let mut numeric = headers.clone();
            numeric.insert("mcp-param-count", HeaderValue::from_str(loose).unwrap());
            assert!(
                check_param_headers(&params, arguments, &numeric).is_err(),
                "an integer is compared exactly: {loose:?}"
            );
        }
        let mut twice = headers.clone();
        twice.append("mcp-param-count", HeaderValue::from_static("43"));
        assert!(
            check_param_headers(&params, arguments, &twice).is_err(),
            "a repeated header is refused"
        );

        let mut wrong = headers.clone();
        wrong.insert("mcp-param-dry", HeaderValue::from_static("true"));
        assert!(check_param_headers(&params, arguments, &wrong).is_err());

        let mut missing = headers.clone();
        missing.remove("mcp-param-zone");
        assert!(check_param_headers(&params, arguments, &missing).is_err());

        let mut extra = headers.clone();
        let no_dry = json!({"count": 42, "target": {"zone": "é 1"}});
        extra.insert("mcp-param-dry", HeaderValue::from_static("false"));
        assert!(check_param_headers(&params, no_dry.as_object(), &extra).is_err());

        let mut broken = headers;
        broken.insert("mcp-param-zone", HeaderValue::from_static("=?base64?!!?="));
        assert!(check_param_headers(&params, arguments, &broken).is_err());
    }
}
