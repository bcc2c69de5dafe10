//! Results on their way to the client. A module's `CallToolResult` is kept as the JSON text
//! it sent ([`RawValue`]): it is never parsed into a tree and written out again. Only its
//! top-level keys are read, to drop the module's `resultType` and, for a 2026-07-28 client,
//! to add the gateway's `resultType` and `_meta` server identity. For such a client the
//! common result (no `_meta` of its own at the top, `resultType` absent or `"complete"`) is
//! found so in one pass over the text and spliced: the gateway's members written first, the
//! module's text after them as it came.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::literal::{ESCAPE, Literal, literal};
use crate::mcp::{GATEWAY, META_SERVER_INFO};

/// A result as the gateway answers it.
#[derive(Debug, Clone)]
pub enum ResultBody {
    /// A result the gateway built.
    Value(Value),
    /// A module's result, as the module wrote it.
    Raw(Box<RawValue>),
    /// A module's result rewritten by [`ResultBody::for_client`] (valid JSON text).
    Json(Vec<u8>),
}

impl From<Value> for ResultBody {
    fn from(value: Value) -> Self {
        ResultBody::Value(value)
    }
}

impl ResultBody {
    /// The result as a JSON tree (for tests and the paths that inspect it; the hot path
    /// never calls this).
    pub fn into_value(self) -> Value {
        match self {
            ResultBody::Value(value) => value,
            ResultBody::Raw(raw) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
            ResultBody::Json(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    /// The length of the result's JSON text where it is at hand (a value's is not: 0).
    pub fn len_hint(&self) -> usize {
        match self {
            ResultBody::Value(_) => 0,
            ResultBody::Raw(raw) => raw.get().len(),
            ResultBody::Json(bytes) => bytes.len(),
        }
    }

    /// The JSON text of the result.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            ResultBody::Value(value) => {
                // Writing a Value into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, value);
            }
            ResultBody::Raw(raw) => out.extend_from_slice(raw.get().as_bytes()),
            ResultBody::Json(bytes) => out.extend_from_slice(bytes),
        }
    }

    /// A module's result as the client is to see it: without the module's own
    /// `resultType` (the module's era is the module's business) and, for a modern client
    /// (`modern`), marked complete with the gateway's identity in `_meta`. A result that is
    /// not an object is passed on as it is.
    pub fn for_client(self, modern: bool) -> ResultBody {
        self.rewritten(modern, false)
    }

    /// Like [`ResultBody::for_client`] for a modern client, for a result the spec wants
    /// caching hints on (`resources/read`): `ttlMs: 0` and `cacheScope: "private"` unless
    /// the module gave its own.
    pub fn for_modern_client_cacheable(self) -> ResultBody {
        self.rewritten(true, true)
    }

    fn rewritten(self, modern: bool, cacheable: bool) -> ResultBody {
        let ResultBody::Raw(raw) = self else {
            return match self {
                ResultBody::Value(value) if modern => {
                    ResultBody::Value(crate::mcp::modern_result(value, cacheable))
                }
                other => other,
            };
        };
        // No key can read `resultType` without those letters or a `\u` escape.
        let text = raw.get();
        if !modern && !RESULT_TYPE.is_in(text) && !SERVER_INFO.is_in(text) && !ESCAPE.is_in(text) {
            return ResultBody::Raw(raw);
        }
        if modern
            && !cacheable
            && let Some(bytes) = spliced(text)
        {
            return ResultBody::Json(bytes);
        }
        match rewrite(&raw, modern, cacheable) {
            Some(bytes) => ResultBody::Json(bytes),
            None => ResultBody::Raw(raw),
        }
    }
}

/// Reads what the gateway must know of a module's result before passing it on: that it is
/// an object whose top-level keys can all be read (so the rewrite for the client cannot be
/// skipped), and the `resultType` it declares, if any. `Err` says what is wrong.
pub fn inspect(raw: &RawValue) -> Result<Option<String>, &'static str> {
    result_type(raw).map(|kind| kind.map(Cow::into_owned))
}

/// [`inspect`], borrowing the common answers (`"complete"`, none) instead of copying them.
fn result_type(raw: &RawValue) -> Result<Option<Cow<'static, str>>, &'static str> {
    const KEY: &str = "\"resultType\"";
    let text = raw.get();
    if !text.trim_start().starts_with('{') {
        return Err("the result is not a JSON object");
    }
    // Without `\u` escapes every key is plain text: the common cases are read without
    // parsing. One literal followed by `:"complete"` reads as complete: a top-level key, a
    // nested one (the top level then has none, which reads the same), or the end of a key
    // after an escaped quote (`"x\"resultType":"complete"`: none at the top level either).
    // Any other value, or a second literal, is read member by member.
    if !ESCAPE.is_in(text) {
        let mut found = RESULT_TYPE_KEY.positions(text);
        let Some(first) = found.next() else {
            return Ok(None);
        };
        if found.next().is_none() && text[first + KEY.len()..].starts_with(":\"complete\"") {
            return Ok(Some(Cow::Borrowed("complete")));
        }
    }
    let fields = Fields::of(raw).ok_or("the result's top-level keys cannot be read")?;
    match fields.0.iter().find(|(k, _)| k == "resultType") {
        None => Ok(None),
        Some((_, value)) => serde_json::from_str::<String>(value.get())
            .map(|kind| Some(Cow::Owned(kind)))
            .map_err(|_| "resultType is not a string"),
    }
}

/// Whether the gateway can pass a module's result on as it is: an object, complete (no
/// `resultType`, or `"complete"`); else why not.
pub fn usable(raw: &RawValue) -> Result<(), String> {
    match result_type(raw) {
        Ok(None) => Ok(()),
        Ok(Some(kind)) if kind == "complete" => Ok(()),
        Ok(Some(kind)) => Err(format!(
            "the module answered with resultType {kind:?}, which the gateway could not complete with its client"
        )),
        Err(why) => Err(why.to_owned()),
    }
}

/// Whether a tool result says the tool failed: its top-level `isError` is `true` (a nested
/// one is the tool's own data). Anything unreadable is not a result that says so.
pub fn is_error(raw: &RawValue) -> bool {
    // Without `\u` escapes a key `isError` can only be written as that literal.
    if lacks_keys(raw.get(), &[&IS_ERROR_KEY]) {
        return false;
    }
    Fields::of(raw).is_some_and(|fields| {
        fields
            .0
            .iter()
            .any(|(k, v)| k == "isError" && v.get().trim() == "true")
    })
}

/// A JSON object's top-level members, in order, values unparsed.
struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Fields<'a> {
    fn of(raw: &'a RawValue) -> Option<Fields<'a>> {
        let text = raw.get().trim_start();
        if !text.starts_with('{') {
            return None;
        }
        serde_json::from_str(raw.get()).ok()
    }
}

/// An object key, borrowed unless it had escapes.
pub(crate) struct Key<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    fields.push((key, value));
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

fn write_key(out: &mut Vec<u8>, key: &str) {
    // Writing a string into a Vec cannot fail; it escapes what needs escaping.
    let _ = serde_json::to_writer(&mut *out, key);
}

/// The result object without the module's `resultType`; for a modern client with
/// `resultType: "complete"` and the gateway's identity added to `_meta`, for a legacy one
/// without a 2026-07-28 module's identity in `_meta` (it says who answered at an era the
/// client does not speak, and names the module behind the gateway).
/// The gateway's identity as JSON text, written once (every modern result carries it).
static GATEWAY_JSON: std::sync::LazyLock<Vec<u8>> =
    std::sync::LazyLock::new(|| serde_json::to_vec(&GATEWAY).unwrap_or_else(|_| b"{}".to_vec()));

/// Whether no key of the JSON `text` (at any depth) can be one of `keys` (each given with
/// its quotes): without a `\u` escape a key is written as its letters, and none of the
/// gateway's keys has a character with a shorter escape, so a key that is absent as a
/// literal is absent. (A literal that is there, anywhere, answers `false`.)
fn lacks_keys(text: &str, keys: &[&Literal]) -> bool {
    !ESCAPE.is_in(text) && keys.iter().all(|key| !key.is_in(text))
}

static RESULT_TYPE: Literal = literal!("resultType");
static RESULT_TYPE_KEY: Literal = literal!("\"resultType\"");
static SERVER_INFO: Literal = literal!("serverInfo");
static IS_ERROR_KEY: Literal = literal!("\"isError\"");

/// How a modern client's result begins, after its `{`: complete (or a module's task), and
/// the gateway's `_meta` opened for its identity.
const COMPLETE_META: &[u8] = b"\"resultType\":\"complete\",\"_meta\":{";
const TASK_META: &[u8] = b"\"resultType\":\"task\",\"_meta\":{";

/// What every spliced result starts with: `{"resultType":"complete","_meta":{…}` with the
/// gateway's identity (written once).
static SPLICED_HEAD: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let mut head = b"{".to_vec();
    head.extend_from_slice(COMPLETE_META);
    write_key(&mut head, META_SERVER_INFO);
    head.push(b':');
    head.extend_from_slice(&GATEWAY_JSON);
    head.push(b'}');
    head
});

/// [`rewrite`] for a modern client, without reading the members one by one, where the
/// result has no top-level `_meta` and no top-level `resultType` other than `"complete"`
/// (the common cases): the gateway's two members written first, then the module's object
/// as it wrote it, less that `resultType`. `None` where it cannot be sure (or the text is
/// not an object).
fn spliced(text: &str) -> Option<Vec<u8>> {
    let body = text.trim_start().strip_prefix('{')?;
    let (before, after) = match result_type_key(body)? {
        None => (body, ""),
        Some(at) => without_complete(body, at)?,
    };
    let rest = before.trim_start();
    let rest = if rest.is_empty() {
        after.trim_start()
    } else {
        rest
    };
    let mut out = Vec::with_capacity(SPLICED_HEAD.len() + text.len() + 1);
    out.extend_from_slice(&SPLICED_HEAD);
    if !rest.starts_with('}') {
        out.push(b',');
    }
    out.extend_from_slice(before.as_bytes());
    out.extend_from_slice(after.as_bytes());
    Some(out)
}

/// One pass over `body`, an object's valid JSON text after its `{`: where its top-level
/// `resultType` key starts (`Some(None)` for none). `None` where the splice cannot be sure:
/// a top-level `_meta`, two `resultType`s, or a top-level key written with an escape (which
/// could spell either).
fn result_type_key(body: &str) -> Option<Option<usize>> {
    let bytes = body.as_bytes();
    let (mut depth, mut key_next, mut found) = (0usize, true, None);
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                // The string's end: the next quote that no backslash escapes.
                let (mut end, mut escaped) = (i + 1, false);
                loop {
                    end += memchr::memchr2(b'"', b'\\', bytes.get(end..)?)?;
                    if bytes[end] == b'"' {
                        break;
                    }
                    escaped = true;
                    end += 2;
                }
                if depth == 0 && key_next {
                    match &bytes[i + 1..end] {
                        _ if escaped => return None,
                        b"_meta" => return None,
                        b"resultType" if found.replace(i).is_some() => return None,
                        _ => {}
                    }
                    key_next = false;
                }
                i = end;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => break,
            b'}' | b']' => depth -= 1,
            b',' if depth == 0 => key_next = true,
            _ => {}
        }
        i += 1;
    }
    Some(found)
}

/// `body` cut around its top-level member whose key starts at `at`, where its value is
/// `"complete"`: the text before and after it, one comma beside it dropped. `None` for
/// another value.
fn without_complete(body: &str, at: usize) -> Option<(&str, &str)> {
    let rest = body[at + "\"resultType\"".len()..].trim_start();
    let rest = rest
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix("\"complete\"")?;
    let rest = rest.trim_start();
    if let Some(after) = rest.strip_prefix(',') {
        return Some((&body[..at], after));
    }
    // The last member: the comma before it goes (or it was the only one).
    rest.starts_with('}').then_some(())?;
    let before = body[..at].trim_end();
    Some((before.strip_suffix(',').unwrap_or(before), rest))
}

fn rewrite(raw: &RawValue, modern: bool, cacheable: bool) -> Option<Vec<u8>> {
    let fields = Fields::of(raw)?;
    let mut out = Vec::with_capacity(raw.get().len() + 128);
    out.push(b'{');
    let mut first = true;
    let mut comma = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    if modern {
        comma(&mut out);
        // A module's task (of the tasks extension, passed on only where its client took
        // one) stays a task; anything else the gateway passes on is complete.
        let task = fields
            .0
            .iter()
            .any(|(k, v)| k == "resultType" && v.get().trim() == "\"task\"");
        out.extend_from_slice(if task { TASK_META } else { COMPLETE_META });
        let meta = fields
            .0
            .iter()
            .find(|(k, _)| k == "_meta")
            .and_then(|(_, v)| Fields::of(v));
        for (key, value) in meta.iter().flat_map(|m| m.0.iter()) {
            if key == META_SERVER_INFO {
                continue;
            }
            write_key(&mut out, key);
            out.push(b':');
            out.extend_from_slice(value.get().as_bytes());
            out.push(b',');
        }
        write_key(&mut out, META_SERVER_INFO);
        out.push(b':');
        out.extend_from_slice(&GATEWAY_JSON);
        out.push(b'}');
        if cacheable {
            if !fields.0.iter().any(|(k, _)| k == "ttlMs") {
                out.extend_from_slice(b",\"ttlMs\":0");
            }
            if !fields.0.iter().any(|(k, _)| k == "cacheScope") {
                out.extend_from_slice(b",\"cacheScope\":\"private\"");
            }
        }
    }
    for (key, value) in &fields.0 {
        if key == "resultType" || (modern && key == "_meta") {
            continue;
        }
        if key == "_meta"
            && let Some(meta) = Fields::of(value)
            && meta.0.iter().any(|(k, _)| k == META_SERVER_INFO)
        {
            let kept: Vec<_> = meta
                .0
                .iter()
                .filter(|(k, _)| k != META_SERVER_INFO)
                .collect();
            if kept.is_empty() {
                continue;
            }
            comma(&mut out);
            write_key(&mut out, key);
            out.extend_from_slice(b":{");
            for (i, (k, v)) in kept.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_key(&mut out, k);
                out.push(b':');
                out.extend_from_slice(v.get().as_bytes());
            }
            out.push(b'}');
            continue;
        }
        comma(&mut out);
        write_key(&mut out, key);
        out.push(b':');
        out.extend_from_slice(value.get().as_bytes());
    }
    out.push(b'}');
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_top_level_is_error_true_says_the_tool_failed() {
        let raw = |v: serde_json::Value| serde_json::value::to_raw_value(&v).unwrap();
        assert!(is_error(&raw(json!({"content": [], "isError": true}))));
        assert!(!is_error(&raw(json!({"content": [], "isError": false}))));
        assert!(!is_error(&raw(json!({"content": []}))));
        assert!(!is_error(&raw(
            json!({"structuredContent": {"isError": true}})
        )));
        assert!(!is_error(&raw(json!([1, 2]))));
    }

    fn raw(value: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&value).unwrap()
    }

    fn client_sees(result: Value, modern: bool) -> Value {
        ResultBody::Raw(raw(result)).for_client(modern).into_value()
    }

    #[test]
    fn a_legacy_client_gets_the_modules_result_untouched_but_for_result_type() {
        let result = json!({"content": [{"type": "text", "text": "ok"}], "isError": false, "_meta": {"m": 1}});
        let body = ResultBody::Raw(raw(result.clone())).for_client(false);
        assert!(
            matches!(body, ResultBody::Raw(_)),
            "passed through as it came"
        );
        assert_eq!(body.into_value(), result);
        let mut typed = result.clone();
        typed["resultType"] = json!("complete");
        assert_eq!(client_sees(typed, false), result);
        let escaped: Box<RawValue> =
            serde_json::from_str(r#"{"content":[],"result\u0054ype":"complete"}"#).unwrap();
        assert_eq!(
            ResultBody::Raw(escaped).for_client(false).into_value(),
            json!({"content": []}),
            "an escaped resultType is dropped for a legacy client too"
        );
    }

    #[test]
    fn a_modules_task_reaches_a_modern_client_as_a_task() {
        let task =
            json!({"resultType": "task", "taskId": "gw-1", "status": "working", "ttlMs": 1000});
        let seen = client_sees(task, true);
        assert_eq!(seen["resultType"], "task");
        assert_eq!(seen["taskId"], "gw-1");
        assert_eq!(seen["_meta"][META_SERVER_INFO]["name"], GATEWAY.name);
        // Anything else the gateway passes on is complete.
        let other = client_sees(json!({"resultType": "tasks", "content": []}), true);
        assert_eq!(other["resultType"], "complete");
    }

    /// Issue 45, item 7: a 2026-07-28 module's identity in its result's `_meta` reached
    /// 2025-era clients.
    #[test]
    fn a_legacy_client_gets_no_modules_server_info() {
        let seen = client_sees(
            json!({"content": [], "resultType": "complete",
                   "_meta": {"m": 1, "io.modelcontextprotocol/serverInfo": {"name": "fastmcp"}}}),
            false,
        );
        assert_eq!(seen, json!({"content": [], "_meta": {"m": 1}}));
        let only = client_sees(
            json!({"content": [], "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "x"}}}),
            false,
        );
        assert_eq!(only, json!({"content": []}));
    }

    #[test]
    fn a_modern_client_gets_complete_and_the_gateways_identity_beside_the_modules_meta() {
        let seen = client_sees(
            json!({"content": [], "resultType": "complete", "_meta": {"m": 1, "io.modelcontextprotocol/serverInfo": "forged"}, "k\"ey": 2}),
            true,
        );
        assert_eq!(
            seen,
            json!({"content": [], "resultType": "complete", "k\"ey": 2,
                   "_meta": {"m": 1, "io.modelcontextprotocol/serverInfo": {"name": "mcp-gateway", "version": env!("CARGO_PKG_VERSION")}}})
        );
        let bare = client_sees(json!({"content": []}), true);
        assert_eq!(bare["resultType"], "complete");
        assert_eq!(bare["_meta"][META_SERVER_INFO]["name"], "mcp-gateway");
    }

    /// What a modern client is sent for the result `text` is what the member-by-member
    /// rewrite writes, key order included.
    fn sees_as_read(text: &str) {
        let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
        let read = rewrite(&raw, true, false).expect("an object");
        let ResultBody::Json(seen) = ResultBody::Raw(raw).for_client(true) else {
            panic!("a modern client's result is rewritten: {text}");
        };
        let parsed = |bytes: &[u8]| {
            serde_json::to_string(&serde_json::from_slice::<Value>(bytes).unwrap()).unwrap()
        };
        assert_eq!(parsed(&seen), parsed(&read), "{text}");
    }

    /// The splice (the module's object as written, the gateway's members first) says what
    /// reading every member says, key order included; where it cannot be sure, it steps
    /// aside and the members are read.
    #[test]
    fn a_modern_client_sees_the_same_result_spliced_or_read_member_by_member() {
        // Each text, and whether the splice is sure of it.
        let texts = [
            (r#"{"content":[{"type":"text","text":"ok"}]}"#, true),
            (" {  \"content\" : [ ] ,\n \"isError\":false } ", true),
            ("{}", true),
            ("{ \t}", true),
            (
                r#"{"content":[{"type":"text","text":"say \"_meta\" and resultType"}]}"#,
                true,
            ),
            (r#"{"resultType":"complete"}"#, true),
            (r#"{ "resultType" : "complete" , "content":[]}"#, true),
            (r#"{"content":[] , "resultType":"complete" }"#, true),
            (r#"{"a":1,"resultType":"complete","b":[{"c":"}"}]}"#, true),
            (r#"{"a":"x\"{","resultType":"complete"}"#, true),
            (r#"{"a":"\\","resultType":"complete"}"#, true),
            (r#"{"a":"x\"","resultType":"complete"}"#, true),
            (r#"{"content":[],"note":"\u00e9"}"#, true),
            (r#"{"a":"resultType","b":1}"#, true),
            (r#"{"a":["resultType","complete"]}"#, true),
            (r#"{"a":{"resultType":"complete"}}"#, true),
            (
                r#"{"resultType":"complete","x":{"resultType":"complete"}}"#,
                true,
            ),
            (
                r#"{"content":[{"type":"text","text":"ok","_meta":{"m":1}}]}"#,
                true,
            ),
            (
                r#"{"structuredContent":{"_meta":{"m":1},"resultType":"x"}}"#,
                true,
            ),
            // A top-level `_meta`, a top-level key with an escape, a top-level `resultType`
            // that is not `"complete"`, or two: the members are read.
            (r#"{"content":[],"_meta":{"m":1}}"#, false),
            (
                r#"{"content":[],"\u005fmeta":{"io.modelcontextprotocol/serverInfo":"forged"}}"#,
                false,
            ),
            (r#"{"content":[],"result\u0054ype":"task"}"#, false),
            (r#"{"k\"ey":1}"#, false),
            (r#"{"resultType":"task","taskId":"t"}"#, false),
            (r#"{"resultType":"completed"}"#, false),
            (r#"{"resultType":"complete","resultType":"task"}"#, false),
        ];
        for (text, sure) in texts {
            sees_as_read(text);
            assert_eq!(spliced(text).is_some(), sure, "{text}");
        }
        assert_eq!(spliced("[1]"), None);
    }

    /// Generated objects (keys the splice looks for at every depth, strings with quotes,
    /// backslashes and braces, compact and pretty): the splice and the member-by-member
    /// reading agree on each.
    #[test]
    fn generated_results_read_the_same_spliced_or_member_by_member() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        fn value(next: &mut dyn FnMut(usize) -> usize, depth: usize) -> Value {
            const KEYS: [&str; 5] = ["resultType", "content", "a", "_meta", "isError"];
            const STRINGS: [&str; 6] = ["complete", "task", "x\"{", "\\", "resultType", "}]"];
            match next(if depth > 2 { 3 } else { 5 }) {
                0 => json!(STRINGS[next(STRINGS.len())]),
                1 => json!(next(3) == 0),
                2 => json!(next(100)),
                3 => Value::Array((0..next(3)).map(|_| value(next, depth + 1)).collect()),
                _ => Value::Object(
                    (0..next(4))
                        .map(|_| (KEYS[next(KEYS.len())].to_owned(), value(next, depth + 1)))
                        .collect(),
                ),
            }
        }
        let mut spliced_count = 0;
        for _ in 0..3_000 {
            let Value::Object(members) = value(&mut next, 0) else {
                continue;
            };
            let object = Value::Object(members);
            let text = if next(2) == 0 {
                serde_json::to_string(&object).unwrap()
            } else {
                serde_json::to_string_pretty(&object).unwrap()
            };
            sees_as_read(&text);
            spliced_count += usize::from(spliced(&text).is_some());
        }
        assert!(spliced_count > 100, "the splice was tried: {spliced_count}");
    }

    #[test]
    fn is_error_reads_an_escaped_key_and_steps_over_a_nested_one() {
        let read = |text: &str| is_error(&serde_json::from_str::<Box<RawValue>>(text).unwrap());
        assert!(read(r#"{"content":[],"is\u0045rror":true}"#));
        assert!(read(r#"{"content":[], "isError" : true }"#));
        assert!(!read(r#"{"content":[{"text":"\"isError\":true"}]}"#));
        assert!(!read(r#"{"content":[{"isError":true}]}"#));
    }

    #[test]
    fn a_results_top_level_is_inspected_before_it_is_passed_on() {
        let read = |text: &str| inspect(&serde_json::from_str::<Box<RawValue>>(text).unwrap());
        assert_eq!(
            read(r#"{"resultType":"input_required"}"#),
            Ok(Some("input_required".into()))
        );
        assert_eq!(read(r#"{"content":[]}"#), Ok(None));
        assert_eq!(
            read(r#"{"resultType":"complete","x":1}"#),
            Ok(Some("complete".into()))
        );
        assert_eq!(
            read(r#"{"a":{"resultType":"complete"},"resultType":"input_required"}"#),
            Ok(Some("input_required".into()))
        );
        // An escaped key is still the key.
        assert_eq!(
            read(r#"{"result\u0054ype":"input_required"}"#),
            Ok(Some("input_required".into()))
        );
        // A key that cannot be read would let the result skip the rewrite: refused.
        assert!(read(r#"{"\udead":0,"resultType":"input_required"}"#).is_err());
        assert!(read("[1]").is_err());
        assert!(read(r#"{"resultType":7}"#).is_err());
    }

    #[test]
    fn an_escaped_result_type_is_dropped_for_a_legacy_client_too() {
        let escaped: Box<RawValue> =
            serde_json::from_str(r#"{"content":[],"result\u0054ype":"complete"}"#).unwrap();
        assert_eq!(
            ResultBody::Raw(escaped).for_client(false).into_value(),
            json!({"content": []})
        );
    }
}
