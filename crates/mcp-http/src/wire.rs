//! MCP message shapes and header conventions the gateway owns (beyond the JSON-RPC envelope):
//! protocol versions, `_meta` keys, the results of `initialize` and `server/discover`, and
//! the encoding of `Mcp-Name`-style header values.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;
use serde_json::{Map, Value, json};

/// The modern (stateless) protocol version.
pub const MODERN_VERSION: &str = "2026-07-28";
/// Legacy versions served with the `initialize` handshake, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Every protocol version the gateway serves, newest first: what a `-32022` error's
/// `data.supported` and `server/discover`'s `supportedVersions` list.
pub fn supported_versions() -> Vec<&'static str> {
    std::iter::once(MODERN_VERSION)
        .chain(LEGACY_VERSIONS.iter().copied())
        .collect()
}

/// `_meta` key: the modern request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the modern request's client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the server's identity on modern results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key on `tools/call`: the id of the confirmation that approves this call.
pub const META_CONFIRMATION_ID: &str = "confirmation_id";

/// The gateway's `Implementation` object.
pub fn server_info() -> Value {
    json!({"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")})
}

fn capabilities() -> Value {
    json!({"tools": {"listChanged": false}})
}

const INSTRUCTIONS: &str = "Tools are listed as {module}__{tool}. Calls to destructive tools are held until a person confirms them: a held call returns structuredContent.elicitation_required with an elicitation id; once a person approves it, call the tool again with the same arguments and _meta.confirmation_id set to that id.";

/// The `initialize` result for a legacy session at `version`.
pub fn initialize_result(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    })
}

/// The `server/discover` result.
pub fn discover_result() -> Value {
    json!({
        "supportedVersions": supported_versions(),
        "capabilities": capabilities(),
        "instructions": INSTRUCTIONS,
        "ttlMs": 0,
        "cacheScope": "private",
    })
}

/// The `_meta` the gateway puts on modern requests to modules.
pub fn modern_meta() -> &'static Map<String, Value> {
    static META: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(|| {
        let meta = json!({
            META_PROTOCOL_VERSION: MODERN_VERSION,
            META_CLIENT_CAPABILITIES: {},
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")},
        });
        match meta {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    });
    &META
}

/// Marks a modern result complete and adds the server's identity; list results also get
/// caching hints (`ttlMs: 0`, `cacheScope: "private"`: tool lists depend on authorization).
pub fn modern_result(mut result: Value, cacheable: bool) -> Value {
    static SERVER_INFO: std::sync::LazyLock<Value> = std::sync::LazyLock::new(server_info);
    if let Some(map) = result.as_object_mut() {
        map.entry("resultType").or_insert_with(|| json!("complete"));
        let meta = map.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(META_SERVER_INFO.into(), SERVER_INFO.clone());
        }
        if cacheable {
            map.entry("ttlMs").or_insert_with(|| json!(0));
            map.entry("cacheScope").or_insert_with(|| json!("private"));
        }
    }
    result
}

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

#[cfg(test)]
mod tests {
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
}
