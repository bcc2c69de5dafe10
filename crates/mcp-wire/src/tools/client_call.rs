//! A client's `tools/call` read in one pass: the request's routing head (the name and the
//! hop's `_meta` keys, which the era, the header checks and the call's client are told by)
//! and the typed params ([`super::FromClient`]), where the gateway made three passes over
//! the same text: the head, the params, and the client's capabilities again.
//!
//! It is a shortcut that keeps both readings' meaning. It gives a call only where each of
//! them would have read the params without an error, and then exactly what each would have
//! given. Anywhere else (a duplicate key the head refuses, a `uri` that is not a string, a
//! capability nested deeper than the typed reading allows) it gives nothing, and the caller
//! reads the head and the params each its own way, their errors included.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use super::CallToolParams;
use crate::jsonrpc::{MetaHead, ParamsHead, Request};
use crate::mcp::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION,
};
use crate::result::Key;

/// A client's `tools/call` params, read with the request's routing head
/// ([`ClientCall::read`]).
#[derive(Debug)]
pub struct ClientCall {
    /// The params as [`super::FromClient`] reads them: the hop's `_meta` keys left out.
    pub params: CallToolParams,
    /// The client's capabilities (`_meta["io.modelcontextprotocol/clientCapabilities"]`),
    /// read into a tree once.
    pub capabilities: Option<Value>,
}

/// A request's routing head, and a client's `tools/call` read with it where it could be
/// ([`Routing::of`]).
#[derive(Debug)]
pub struct Routing<'a> {
    /// What routing needs.
    pub head: ParamsHead<'a>,
    /// The call, where the request is a `tools/call` read in the head's pass; `None` for
    /// other methods, and where the call's params must be read on their own (which then
    /// says what is wrong with them).
    pub call: Option<ClientCall>,
}

impl<'a> Routing<'a> {
    /// What routing needs of `request`'s params and, for a `tools/call` whose params both
    /// readings take, the call itself, read in the same pass ([`ClientCall::read`]).
    pub fn of(request: &'a Request) -> Routing<'a> {
        if request.method == "tools/call"
            && let Some((head, call)) = request
                .params
                .as_deref()
                .and_then(|p| ClientCall::read(p.get()))
        {
            return Routing {
                head,
                call: Some(call),
            };
        }
        Routing::head_of(request)
    }

    /// What routing needs of `request`'s params, alone.
    pub fn head_of(request: &'a Request) -> Routing<'a> {
        Routing {
            head: request.head(),
            call: None,
        }
    }
}

/// How deep the capabilities may nest, counting their own object: the typed reading reads
/// them two levels in (the params, `_meta`), under serde_json's limit on nesting, where
/// this reading reads them on their own.
const CAPABILITIES_NESTING: usize = 125;

impl ClientCall {
    /// The routing head and the call of a `tools/call`'s params (their text); `None` where
    /// either reading would refuse them (see the module's documentation).
    pub fn read(text: &str) -> Option<(ParamsHead<'_>, ClientCall)> {
        if !text.trim_start().starts_with('{') {
            return None;
        }
        let Both { head, params } = serde_json::from_str(text).ok()?;
        let capabilities = match head.meta.as_ref().and_then(|m| m.client_capabilities) {
            None => None,
            Some(raw) => {
                // The typed reading reads them as a tree, refusing what it cannot hold (a
                // lone surrogate, a number out of range, nesting past the limit); the head
                // took them as text.
                let tree: Value = serde_json::from_str(raw.get()).ok()?;
                if nesting(&tree) > CAPABILITIES_NESTING {
                    return None;
                }
                Some(tree)
            }
        };
        Some((
            head,
            ClientCall {
                params,
                capabilities,
            },
        ))
    }
}

/// How many arrays and objects deep a value is.
fn nesting(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
        Value::Object(members) => 1 + members.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// The two readings' results from the one pass.
struct Both<'a> {
    head: ParamsHead<'a>,
    params: CallToolParams,
}

impl<'de> Deserialize<'de> for Both<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(BothVisitor)
    }
}

struct BothVisitor;

impl<'de> Visitor<'de> for BothVisitor {
    type Value = Both<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tools/call params (an object with a string `name`)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Both<'de>, A::Error> {
        let mut head = ParamsHead::default();
        let mut params = CallToolParams::new(String::new(), None);
        let mut meta_read = false;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "name" if head.name.is_some() => return Err(de::Error::duplicate_field("name")),
                "name" => head.name = Some(map.next_value::<Key<'de>>()?.0),
                "_meta" if meta_read => return Err(de::Error::duplicate_field("_meta")),
                "_meta" => {
                    meta_read = true;
                    let (meta, own) = map.next_value_seed(MetaSeed)?;
                    head.meta = meta;
                    params.meta = own;
                }
                "uri" if head.uri.is_some() => return Err(de::Error::duplicate_field("uri")),
                "uri" => {
                    // Not a `tools/call` param; the head reads it (as a string, or refuses
                    // the params), and the call keeps it with the rest.
                    let value: Value = map.next_value()?;
                    let Value::String(uri) = &value else {
                        return Err(de::Error::custom("`uri` is not a string"));
                    };
                    head.uri = Some(Cow::Owned(uri.clone()));
                    params.rest.insert(key.into_owned(), value);
                }
                _ => params.read_member(key, &mut map)?,
            }
        }
        let name = head
            .name
            .as_deref()
            .ok_or_else(|| de::Error::missing_field("name"))?;
        params.name = name.to_owned();
        Ok(Both { head, params })
    }
}

/// `_meta`, read into the head's keys and the call's own (`null` is neither).
struct MetaSeed;

type MetaRead<'a> = (Option<MetaHead<'a>>, Option<Map<String, Value>>);

impl<'de> de::DeserializeSeed<'de> for MetaSeed {
    type Value = MetaRead<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed {
    type Value = MetaRead<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((None, None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((None, None))
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut head = MetaHead::default();
        let mut own = Map::new();
        // The head's keys, each once (the head's reading refuses a second, null or not).
        let mut read = [false; 3];
        let mut once = |which: usize, key: &'static str| {
            if std::mem::replace(&mut read[which], true) {
                Err(de::Error::duplicate_field(key))
            } else {
                Ok(())
            }
        };
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                META_PROTOCOL_VERSION => {
                    once(0, META_PROTOCOL_VERSION)?;
                    head.protocol_version = map.next_value::<Option<Key<'de>>>()?.map(|k| k.0);
                }
                META_LOG_LEVEL => {
                    once(1, META_LOG_LEVEL)?;
                    head.log_level = map.next_value::<Option<Key<'de>>>()?.map(|k| k.0);
                }
                META_CLIENT_CAPABILITIES => {
                    once(2, META_CLIENT_CAPABILITIES)?;
                    head.client_capabilities = map.next_value()?;
                }
                META_CLIENT_INFO => {
                    // The typed reading reads it as a tree and drops it; the head skips it.
                    map.next_value::<Value>()?;
                }
                _ => {
                    let value: Value = map.next_value()?;
                    own.insert(key.into_owned(), value);
                }
            }
        }
        Ok((Some(head), Some(own)))
    }
}

/// Where a client's `tools/call` params read in one pass ([`ClientCall::read`]), the head's
/// reading and the typed one each take them apart and give the same; whether it read them.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn one_pass_agrees(text: &str) -> bool {
    let Some((one_head, one)) = ClientCall::read(text) else {
        return false;
    };
    let head = serde_json::from_str::<ParamsHead<'_>>(text)
        .expect("the head's reading takes what the one pass takes");
    let super::FromClient(params) =
        serde_json::from_str(text).expect("the typed reading takes what the one pass takes");
    assert_eq!(one.params, params, "the call: {text}");
    assert_eq!(one_head.name, head.name, "the name: {text}");
    assert_eq!(one_head.uri, head.uri, "the uri: {text}");
    let meta = |h: &ParamsHead<'_>| {
        h.meta.as_ref().map(|m| {
            (
                m.protocol_version.as_deref().map(str::to_owned),
                m.log_level.as_deref().map(str::to_owned),
                m.client_capabilities.map(|c| c.get().to_owned()),
            )
        })
    };
    assert_eq!(meta(&one_head), meta(&head), "the hop's keys: {text}");
    // What the gateway reads the capabilities into, from the head's text of them.
    let capabilities = head
        .meta
        .as_ref()
        .and_then(|m| m.client_capabilities)
        .and_then(|c| serde_json::from_str::<Value>(c.get()).ok());
    assert_eq!(one.capabilities, capabilities, "the capabilities: {text}");
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FromClient;

    /// The head's reading and the typed reading, each on its own, as the gateway made them.
    fn apart(text: &str) -> (Option<ParamsHead<'_>>, Option<CallToolParams>) {
        let head = serde_json::from_str::<ParamsHead<'_>>(text).ok();
        let call = serde_json::from_str::<FromClient>(text).ok().map(|c| c.0);
        (head, call)
    }

    fn agree(text: &str) {
        assert!(one_pass_agrees(text), "read in one pass: {text}");
    }

    #[test]
    fn a_clients_call_read_in_one_pass_is_what_the_two_readings_give() {
        for text in [
            r#"{"name":"up__read","arguments":{"n":1},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}"#,
            r#"{"_meta":{"progressToken":7,"confirmation_id":"c1","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/logLevel":"debug","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}},"extensions":{"io.modelcontextprotocol/tasks":{}}},"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/authorization-context-id":"ctx","vendor/x":{"y":[1,2.5,null]}},"name":"t","arguments":{},"requestState":"s","inputResponses":{"a":{"action":"accept"}},"task":{"ttl":5},"other":[true]}"#,
            r#"{"na\u006de":"a\"b\u00e9","_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-\u00307-28","io.modelcontextprotocol/clientCapabilities":{"x":"\ud83d\ude00"}}}"#,
            r#"{"name":"t","_meta":null}"#,
            r#"{"name":"t"}"#,
            r#"{"name":"t","_meta":{}}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":null,"io.modelcontextprotocol/clientCapabilities":null,"io.modelcontextprotocol/logLevel":null}}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":[1,{}],"io.modelcontextprotocol/clientInfo":null}}"#,
            r#"{"name":"t","uri":"file:///x","arguments":null}"#,
            r#"  {"name":"t"}"#,
        ] {
            agree(text);
        }
    }

    #[test]
    fn params_either_reading_refuses_are_left_to_be_read_apart() {
        let refused = [
            // The typed reading refuses.
            r#"{"arguments":{}}"#,
            r#"{"name":null}"#,
            r#"{"name":1}"#,
            r#"{"name":"t","arguments":[1]}"#,
            r#"{"name":"t","_meta":"x"}"#,
            r#"{"name":"t","_meta":["2026-07-28",{},"debug"]}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/clientInfo":1e400}}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{"a":1e400}}}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{"a":"\ud800"}}}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/logLevel":"\ud800"}}"#,
            r#"{"name":"t","requestState":1}"#,
            // The head's reading refuses (and the gateway then finds no version in it).
            r#"{"name":"t","name":"u"}"#,
            r#"{"name":"t","_meta":{},"_meta":{}}"#,
            r#"{"name":"t","uri":1}"#,
            r#"{"name":"t","uri":"a","uri":"b"}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":null,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/logLevel":"info","io.modelcontextprotocol/logLevel":"debug"}}"#,
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientCapabilities":{}}}"#,
            // Not an object.
            r#"["t"]"#,
            r#""t""#,
        ];
        for text in refused {
            assert!(ClientCall::read(text).is_none(), "{text}");
            let (head, call) = apart(text);
            assert!(head.is_none() || call.is_none(), "{text}");
        }
        // Stricter than either: a `uri` of null, which both take. Read apart, as above.
        let text = r#"{"name":"t","uri":null}"#;
        assert!(ClientCall::read(text).is_none());
        assert!(matches!(apart(text), (Some(_), Some(_))));
    }

    #[test]
    fn capabilities_nested_past_what_the_typed_reading_takes_are_left_to_it() {
        let (mut taken, mut refused) = (0, 0);
        for depth in 118..=132 {
            let capabilities = format!(
                "{}{{}}{}",
                r#"{"a":"#.repeat(depth - 1),
                "}".repeat(depth - 1)
            );
            let text = format!(
                r#"{{"name":"t","_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{capabilities}}}}}"#
            );
            let (head, call) = apart(&text);
            assert!(head.is_some(), "the head takes any nesting as text");
            let one = ClientCall::read(&text);
            assert_eq!(one.is_some(), call.is_some(), "nested {depth}");
            if one.is_some() {
                agree(&text);
                taken += 1;
            } else {
                refused += 1;
            }
        }
        assert!(
            taken > 0 && refused > 0,
            "the limit lies inside the range tried"
        );
    }
}
