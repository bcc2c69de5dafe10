//! Typed params and results of the messages the gateway reads or writes itself: `tools/call`,
//! list requests, `elicitation/create` and its answer, and the multi round-trip
//! `input_required` result. Fields the gateway does not know are kept (`rest`), so what it
//! passes on is what it got.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::jsonrpc::RawJson;

use crate::result::Key;

use crate::mcp::{META_CONFIRMATION_ID, META_PROTOCOL_PREFIX};

pub(crate) mod client_call;
pub use client_call::{ClientCall, Routing};

/// A call's arguments: a JSON object, kept as the client sent it until something needs to
/// read it (the gate, for a gated call; a tool whose schema mirrors parameters into
/// headers; an in-process module). Forwarded, it is written out as it came.
#[derive(Debug, Clone, PartialEq)]
pub struct Arguments(RawJson);

impl Arguments {
    /// The arguments as a map; an error for text the tree reading refuses though the
    /// pass-through reading took it (a lone surrogate, nesting deeper than 128, a number
    /// out of range) — never silently `{}`.
    pub fn to_map(&self) -> Result<Map<String, Value>, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The arguments as a JSON value (an object); see [`Arguments::to_map`].
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        self.to_map().map(Value::Object)
    }

    /// Arguments from a map.
    pub fn from_map(map: &Map<String, Value>) -> Arguments {
        let raw = serde_json::value::to_raw_value(map)
            .unwrap_or_else(|_| RawValue::from_string("{}".into()).expect("{} is JSON"));
        Arguments(RawJson(raw))
    }
}

impl Serialize for Arguments {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Arguments {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        if !raw.get().trim_start().starts_with('{') {
            return Err(de::Error::invalid_type(
                de::Unexpected::Other("a non-object value"),
                &"an object of arguments",
            ));
        }
        Ok(Arguments(RawJson(raw)))
    }
}

/// `tools/call` params, both eras. Read in one pass (unknown fields into `rest`, without
/// the buffering a `#[serde(flatten)]` reading costs); written with `rest` flattened and
/// the hop's protocol `_meta` (see [`WithMeta::add_meta`]) merged in as it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct CallToolParams {
    /// The tool's name.
    pub name: String,
    /// Its arguments (absent and `null` are the same).
    pub arguments: Option<Arguments>,
    /// `_meta`.
    pub meta: Option<Map<String, Value>>,
    /// 2026-07-28 retry: the sealed state of the exchange.
    pub request_state: Option<String>,
    /// 2026-07-28 retry: the answers to the input requests.
    pub input_responses: Option<Map<String, Value>>,
    /// Every other field, passed on as it came.
    pub rest: Map<String, Value>,
    /// `_meta` maps of the next hop, in the order added: their keys are written where
    /// `meta` and the maps before lack them.
    hop_meta: HopMaps,
    /// The call's client takes a task of the 2026-07-28 tasks extension for it (declared in
    /// its capabilities there, not in the params: never written).
    modern_task: bool,
}

/// The hop's `_meta` maps a call carries as references (a modern hop adds two or three:
/// the client's capabilities, the protocol's keys, a log level); a further one moves the
/// recorded ones' keys into the call's own `meta`.
const HOP_MAPS: usize = 3;
type HopMaps = [Option<&'static Map<String, Value>>; HOP_MAPS];

/// `_meta` as written: the call's own keys, then each hop map's that none before has.
struct MergedMeta<'a> {
    own: Option<&'a Map<String, Value>>,
    hop: &'a HopMaps,
}

impl MergedMeta<'_> {
    fn is_empty(&self) -> bool {
        self.own.is_none_or(Map::is_empty) && self.hop.iter().flatten().all(|m| m.is_empty())
    }

    /// The hop maps' entries in the order written: each key where no map before has it.
    fn hop_entries(&self) -> impl Iterator<Item = (&String, &Value)> + '_ {
        let maps = self.hop.iter().flatten().copied();
        maps.enumerate().flat_map(move |(i, map)| {
            map.iter().filter(move |(key, _)| {
                !self.own.is_some_and(|own| own.contains_key(*key))
                    && !self
                        .hop
                        .iter()
                        .flatten()
                        .take(i)
                        .any(|m| m.contains_key(*key))
            })
        })
    }
}

thread_local! {
    /// The hop maps' merges written so far on this thread, as JSON text, by their
    /// addresses (they are `'static` and never change).
    static WRITTEN: std::cell::RefCell<Vec<([usize; HOP_MAPS], std::rc::Rc<serde_json::value::RawValue>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// At most this many merges are kept per thread (there are a few dozen at most: the
/// capability maps times the log levels).
const WRITTEN_KEPT: usize = 256;

/// The hop maps merged, as JSON text, written once per thread: a call with no `_meta` of
/// its own (most) sends the hop's maps as they are, so they are not serialized anew for
/// every call.
fn written(meta: &MergedMeta<'_>) -> Option<std::rc::Rc<serde_json::value::RawValue>> {
    let key = meta
        .hop
        .map(|m| m.map_or(0, |m| std::ptr::from_ref(m) as usize));
    WRITTEN.with(|written| {
        let mut written = written.borrow_mut();
        if let Some((_, raw)) = written.iter().find(|(k, _)| *k == key) {
            return Some(raw.clone());
        }
        let text = serde_json::to_string(&Entries(meta)).ok()?;
        let raw: std::rc::Rc<serde_json::value::RawValue> =
            serde_json::value::RawValue::from_string(text).ok()?.into();
        if written.len() < WRITTEN_KEPT {
            written.push((key, raw.clone()));
        }
        Some(raw)
    })
}

/// The merged entries, written as one map.
struct Entries<'a, 'b>(&'a MergedMeta<'b>);

impl Serialize for Entries<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let own = self.0.own.into_iter().flatten();
        serializer.collect_map(own.chain(self.0.hop_entries()))
    }
}

impl Serialize for MergedMeta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.own.is_none_or(Map::is_empty)
            && let Some(raw) = written(self)
        {
            return raw.serialize(serializer);
        }
        Entries(self).serialize(serializer)
    }
}

impl Serialize for CallToolParams {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("name", &self.name)?;
        if let Some(arguments) = &self.arguments {
            map.serialize_entry("arguments", arguments)?;
        }
        let meta = MergedMeta {
            own: self.meta.as_ref(),
            hop: &self.hop_meta,
        };
        if !meta.is_empty() {
            map.serialize_entry("_meta", &meta)?;
        }
        if let Some(state) = &self.request_state {
            map.serialize_entry("requestState", state)?;
        }
        if let Some(responses) = &self.input_responses {
            map.serialize_entry("inputResponses", responses)?;
        }
        for (key, value) in &self.rest {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for CallToolParams {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ParamsVisitor { from_client: false })
    }
}

/// `tools/call` params as a client sent them to the gateway: [`CallToolParams`], less the
/// hop's own `_meta` keys (the protocol version, the client's capabilities and info, its log
/// level). The gateway reads those from the request's routing head and never passes them
/// on ([`CallToolParams::into_upstream`] drops every protocol key), so they are not read
/// into the call's `meta` at all: a 2026-07-28 call, which always carries two of them, is
/// read without building a map for them.
#[derive(Debug)]
pub struct FromClient(pub CallToolParams);

impl<'de> Deserialize<'de> for FromClient {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_map(ParamsVisitor { from_client: true })
            .map(FromClient)
    }
}

/// The hop's own `_meta` keys, which [`FromClient`] leaves out.
const HOP_KEYS: [&str; 4] = [
    crate::mcp::META_PROTOCOL_VERSION,
    crate::mcp::META_CLIENT_CAPABILITIES,
    crate::mcp::META_CLIENT_INFO,
    crate::mcp::META_LOG_LEVEL,
];

struct ParamsVisitor {
    /// Read as [`FromClient`]: the hop's keys left out of `_meta`.
    from_client: bool,
}

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = CallToolParams;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tools/call params (an object with a string `name`)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CallToolParams, A::Error> {
        let mut name: Option<String> = None;
        let mut params = CallToolParams::new(String::new(), None);
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "name" if name.is_some() => return Err(de::Error::duplicate_field("name")),
                "name" => name = Some(map.next_value()?),
                "_meta" if self.from_client => params.meta = map.next_value_seed(ClientMeta)?,
                "_meta" => params.meta = map.next_value()?,
                _ => params.read_member(key, &mut map)?,
            }
        }
        params.name = name.ok_or_else(|| de::Error::missing_field("name"))?;
        Ok(params)
    }
}

impl CallToolParams {
    /// Reads a member other than `name` and `_meta` (whose readings differ by who sent the
    /// params): the arguments as they came, the 2026-07-28 retry's two, the rest kept.
    fn read_member<'de, A: MapAccess<'de>>(
        &mut self,
        key: std::borrow::Cow<'de, str>,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match key.as_ref() {
            "arguments" => self.arguments = map.next_value()?,
            "requestState" => self.request_state = map.next_value()?,
            "inputResponses" => self.input_responses = map.next_value()?,
            _ => {
                let value: Value = map.next_value()?;
                self.rest.insert(key.into_owned(), value);
            }
        }
        Ok(())
    }
}

/// A client's `_meta` without the hop's keys: `null` is none, anything but an object is an
/// error, as for the plain reading.
struct ClientMeta;

impl<'de> de::DeserializeSeed<'de> for ClientMeta {
    type Value = Option<Map<String, Value>>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ClientMeta {
    type Value = Option<Map<String, Value>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut meta = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if HOP_KEYS.contains(&key.as_ref()) {
                // Read as the plain reading reads it, and dropped: a value it refuses (a
                // number out of range, a lone surrogate, nesting past the limit) is refused
                // here too, where skipping it would let the call through.
                map.next_value::<Value>()?;
            } else {
                let value: Value = map.next_value()?;
                meta.insert(key.into_owned(), value);
            }
        }
        Ok(Some(meta))
    }
}

impl CallToolParams {
    /// Params calling `name` with `arguments`, nothing else.
    pub fn new(name: String, arguments: Option<Arguments>) -> Self {
        CallToolParams {
            name,
            arguments,
            meta: None,
            request_state: None,
            input_responses: None,
            rest: Map::new(),
            hop_meta: [None; HOP_MAPS],
            modern_task: false,
        }
    }

    /// Whether the call's client takes a task of the 2026-07-28 tasks extension for it
    /// ([`CallToolParams::with_modern_task`]).
    pub fn takes_modern_task(&self) -> bool {
        self.modern_task
    }

    /// The call of a 2026-07-28 client that declared the tasks extension: the module may
    /// answer it with a task (`false`: the client cannot take one).
    #[must_use]
    pub fn with_modern_task(mut self, takes: bool) -> CallToolParams {
        self.modern_task = takes;
        self
    }

    /// The confirmation the caller names, as text: its `_meta.confirmation_id`, else the
    /// SEP-2643 context id it echoes from a held result
    /// (`_meta["io.modelcontextprotocol/authorization-context-id"]`).
    pub fn confirmation_id(&self) -> Option<&str> {
        let meta = self.meta.as_ref()?;
        meta.get(META_CONFIRMATION_ID)
            .or_else(|| meta.get(crate::denial::META_AUTHORIZATION_CONTEXT_ID))?
            .as_str()
    }

    /// The call's `task` (a 2025-11-25 task-augmented call: `{"ttl"?: ms}`).
    pub fn task(&self) -> Option<&Value> {
        self.rest.get("task")
    }

    /// The call asking for a task (`{"ttl"?: ms}`).
    pub fn with_task(mut self, task: Value) -> CallToolParams {
        self.rest.insert("task".into(), task);
        self
    }

    /// The call naming the confirmation `id` (`_meta.confirmation_id`).
    pub fn naming_confirmation(mut self, id: &str) -> CallToolParams {
        self.meta
            .get_or_insert_with(Map::new)
            .insert(META_CONFIRMATION_ID.into(), Value::String(id.to_owned()));
        self
    }

    /// The call without its `task`: it runs to its result.
    pub fn without_task(mut self) -> CallToolParams {
        self.rest.remove("task");
        self
    }

    /// The params for the module that owns the tool: its own tool `name`, without the
    /// exchange between client and gateway (`requestState`, `inputResponses`, the
    /// gateway's `confirmation_id`, the hop's protocol `_meta`). A `task` stays: whether it
    /// goes on is the gate's to say ([`CallToolParams::without_task`]).
    pub fn into_upstream(mut self, name: &str) -> CallToolParams {
        self.name = name.to_owned();
        self.request_state = None;
        self.input_responses = None;
        if let Some(meta) = &mut self.meta {
            meta.remove(META_CONFIRMATION_ID);
            meta.retain(|k, _| !k.starts_with(META_PROTOCOL_PREFIX));
            if meta.is_empty() {
                self.meta = None;
            }
        }
        self
    }
}

/// Params of the list methods, as the gateway reads and sends them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListParams {
    /// The page to continue from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Value>,
    /// `_meta`.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// Params of a request the gateway routes without reading more than one field
/// (`resources/read` by its `uri`): every field kept, the client's protocol `_meta` keys
/// dropped for the next hop ([`ForwardParams::for_upstream`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ForwardParams(pub Map<String, Value>);

impl ForwardParams {
    /// A string field.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.as_str()
    }

    /// The params for a module: without the client's hop-specific `_meta` keys.
    pub fn for_upstream(mut self) -> ForwardParams {
        if let Some(Value::Object(meta)) = self.0.get_mut("_meta") {
            meta.retain(|k, _| !k.starts_with(META_PROTOCOL_PREFIX));
            if meta.is_empty() {
                self.0.remove("_meta");
            }
        }
        self
    }
}

impl WithMeta for ForwardParams {
    fn add_meta(&mut self, extra: &'static Map<String, Value>) {
        let meta = self
            .0
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            for (key, value) in extra {
                if !meta.contains_key(key) {
                    meta.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

/// Params that carry a `_meta` object (a modern hop adds its protocol keys there).
pub trait WithMeta: Serialize {
    /// Adds the keys of `extra` that `_meta` does not have yet (idempotent).
    fn add_meta(&mut self, extra: &'static Map<String, Value>);

    /// Whether the request is sent declaring the 2026-07-28 tasks extension (a call whose
    /// client takes a task: [`CallToolParams::with_modern_task`]).
    fn declares_tasks(&self) -> bool {
        false
    }
}

impl WithMeta for ListParams {
    fn add_meta(&mut self, extra: &'static Map<String, Value>) {
        let meta = self.meta.get_or_insert_with(Map::new);
        for (key, value) in extra {
            if !meta.contains_key(key) {
                meta.insert(key.clone(), value.clone());
            }
        }
    }
}

impl WithMeta for CallToolParams {
    /// Recorded, and merged in when the params are written: nothing is copied for the
    /// maps a modern hop adds (up to three). A fourth first moves the recorded ones' keys
    /// into `meta` (where missing), so every map added is written; one added again is
    /// recorded once.
    fn add_meta(&mut self, extra: &'static Map<String, Value>) {
        if self
            .hop_meta
            .iter()
            .flatten()
            .any(|m| std::ptr::eq(*m, extra))
        {
            return;
        }
        if let Some(free) = self.hop_meta.iter_mut().find(|m| m.is_none()) {
            *free = Some(extra);
            return;
        }
        let merged = MergedMeta {
            own: None,
            hop: &self.hop_meta,
        };
        let moved: Vec<(String, Value)> = merged
            .hop_entries()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let meta = self.meta.get_or_insert_with(Map::new);
        for (key, value) in moved {
            meta.entry(key).or_insert(value);
        }
        self.hop_meta = [Some(extra), None, None];
    }

    fn declares_tasks(&self) -> bool {
        self.modern_task
    }
}

/// Most items on one page of an aggregated list.
///
/// The catalog can change between pages (a module restarts): a page is then read from the
/// catalog as it is, and a cursor past its end is refused, so the client lists again.
pub const PAGE_SIZE: usize = 100;

/// Why a list's `cursor` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor: not one this gateway gave out for {key}")]
pub struct BadCursor {
    /// The list.
    pub key: String,
}

/// One page of the list of `items` under `key` (`tools`, `prompts`, …): the page `cursor`
/// names (the first without one), with `nextCursor` when more follow. A cursor is the list's
/// name and the offset of its page (`prompts:100`); one for another list, past the end, or
/// not the gateway's, is refused. The items are moved in.
pub fn list_page(key: &str, items: Vec<Value>, cursor: Option<&Value>) -> Result<Value, BadCursor> {
    let bad = || BadCursor {
        key: key.to_owned(),
    };
    let start = match cursor {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => cursor
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(':'))
            .and_then(|offset| offset.parse::<usize>().ok())
            .filter(|offset| *offset > 0 && *offset < items.len() && offset % PAGE_SIZE == 0)
            .ok_or_else(bad)?,
        Some(_) => return Err(bad()),
    };
    let total = items.len();
    let end = (start + PAGE_SIZE).min(total);
    let mut result = Map::new();
    let page: Vec<Value> = items.into_iter().skip(start).take(end - start).collect();
    result.insert(key.into(), Value::Array(page));
    if end < total {
        result.insert("nextCursor".into(), Value::String(format!("{key}:{end}")));
    }
    Ok(Value::Object(result))
}

/// `elicitation/create` params in form mode.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitFormParams<'a> {
    /// `"form"`, for clients at 2025-11-25 or later; older ones do not know the field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    /// What the person is asked.
    pub message: &'a str,
    /// The schema of the answer.
    pub requested_schema: &'a Value,
}

/// `elicitation/create` params in URL mode: the person is sent to `url`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitUrlParams<'a> {
    /// `"url"`.
    pub mode: &'static str,
    /// What the person is asked.
    pub message: &'a str,
    /// The elicitation's id (for `notifications/elicitation/complete`).
    pub elicitation_id: &'a str,
    /// Where the person answers.
    pub url: &'a str,
}

/// An answer to `elicitation/create`: a client's, as read, or the gateway's own to a
/// module (its person's answer from the inbox, or `cancel` when nobody can answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitResult {
    /// `accept`, `decline` or `cancel`.
    pub action: Value,
    /// The form's content (with `accept`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

impl ElicitResult {
    /// `accept` with the form's `content`.
    pub fn accept(content: Value) -> Self {
        ElicitResult {
            action: Value::String("accept".into()),
            content: Some(content),
        }
    }

    /// `decline`: the person said no.
    pub fn decline() -> Self {
        ElicitResult {
            action: Value::String("decline".into()),
            content: None,
        }
    }

    /// `cancel`: nobody answered.
    pub fn cancel() -> Self {
        ElicitResult {
            action: Value::String("cancel".into()),
            content: None,
        }
    }

    /// As JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// One request inside an `input_required` result.
#[derive(Debug, Clone, Serialize)]
pub struct InputRequest<P: Serialize> {
    /// The method the client is to run, e.g. `elicitation/create`.
    pub method: std::borrow::Cow<'static, str>,
    /// Its params.
    pub params: P,
}

/// The 2026-07-28 multi round-trip result: the client answers the requests and retries with
/// `requestState`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequiredResult<P: Serialize> {
    /// Always `input_required`.
    pub result_type: &'static str,
    /// The requests, by key.
    pub input_requests: std::collections::BTreeMap<&'static str, InputRequest<P>>,
    /// The sealed state to send back.
    pub request_state: String,
}

impl<P: Serialize> InputRequiredResult<P> {
    /// A result asking one request under `key`.
    pub fn one(key: &'static str, request: InputRequest<P>, request_state: String) -> Self {
        InputRequiredResult {
            result_type: "input_required",
            input_requests: [(key, request)].into_iter().collect(),
            request_state,
        }
    }
}

/// A `CallToolResult` the gateway writes itself: one text item, its `structuredContent` when
/// there is one, and `isError`. The one writer of that shape (the gate's holds and
/// refusals, the in-process modules, a permission prompt's decision).
pub fn text_result(text: &str, structured: Option<&Value>, is_error: bool) -> Value {
    let mut item = Map::new();
    item.insert("type".into(), Value::String("text".into()));
    item.insert("text".into(), Value::String(text.to_owned()));
    let mut result = Map::new();
    result.insert("content".into(), Value::Array(vec![Value::Object(item)]));
    if let Some(structured) = structured {
        result.insert("structuredContent".into(), structured.clone());
    }
    result.insert("isError".into(), Value::Bool(is_error));
    Value::Object(result)
}

/// The `_meta` key of a refusal the gateway wrote that says when the call may be tried
/// again, in seconds (a server also puts it in `Retry-After`).
pub const META_RETRY_AFTER: &str = "mcp-gateway/retryAfterSecs";

/// `result` (one [`text_result`] of a refusal) saying the call may be tried again in `secs`.
pub fn with_retry_after(mut result: Value, secs: u64) -> Value {
    if let Some(map) = result.as_object_mut() {
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(META_RETRY_AFTER.into(), Value::from(secs));
        }
    }
    result
}

/// When a refusal the gateway wrote says the call may be tried again ([`with_retry_after`]).
pub fn retry_after(result: &Value) -> Option<u64> {
    result.get("_meta")?.get(META_RETRY_AFTER)?.as_u64()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Read as a client's call, the hop's `_meta` keys are left out and nothing else
    /// changes: what goes upstream is what the plain reading sends, and the keys the
    /// gateway reads from `_meta` (a confirmation named either way, a progress token) stay.
    #[test]
    fn a_clients_call_is_read_without_the_hops_meta_and_goes_upstream_the_same() {
        let cases = [
            json!({"name": "t", "arguments": {"a": 1}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
                "io.modelcontextprotocol/logLevel": "debug",
                "io.modelcontextprotocol/authorization-context-id": "ctx",
                "confirmation_id": "c1", "progressToken": 7, "vendor/x": {"y": [1]}}}),
            json!({"name": "t", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
            json!({"name": "t", "_meta": {}}),
            json!({"name": "t", "_meta": null, "task": {"ttl": 5}}),
            json!({"name": "t"}),
        ];
        for case in cases {
            let text = case.to_string();
            let plain: CallToolParams = serde_json::from_str(&text).unwrap();
            let FromClient(client) = serde_json::from_str(&text).unwrap();
            assert_eq!(client.confirmation_id(), plain.confirmation_id(), "{text}");
            assert_eq!(client.name, plain.name);
            assert_eq!(client.rest, plain.rest);
            let hop = |m: &Option<Map<String, Value>>| {
                m.as_ref().map(|m| {
                    m.iter()
                        .filter(|(k, _)| !HOP_KEYS.contains(&k.as_str()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect::<Map<String, Value>>()
                })
            };
            assert_eq!(client.meta, hop(&plain.meta), "{text}");
            assert_eq!(
                serde_json::to_value(client.into_upstream("u")).unwrap(),
                serde_json::to_value(plain.into_upstream("u")).unwrap(),
                "{text}"
            );
        }
        let deep = format!(
            r#"{{"name": "t", "_meta": {{"io.modelcontextprotocol/clientCapabilities": {}1{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for bad in [
            r#"{"name": "t", "_meta": "x"}"#,
            r#"{"name": "t", "_meta": [1]}"#,
            r#"{"name": "t", "_meta": {"io.modelcontextprotocol/clientInfo": 1e400}}"#,
            r#"{"name": "t", "_meta": {"io.modelcontextprotocol/logLevel": "\ud800"}}"#,
            &deep,
            r#"{"_meta": {}}"#,
            r#"{"name": "t", "name": "u"}"#,
        ] {
            assert!(serde_json::from_str::<FromClient>(bad).is_err(), "{bad}");
            assert!(
                serde_json::from_str::<CallToolParams>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_refusal_says_when_to_try_again_in_its_meta_beside_any_other() {
        let refused = with_retry_after(text_result("no", None, true), 30);
        assert_eq!(retry_after(&refused), Some(30));
        let modern = crate::mcp::modern_result(refused, false);
        assert_eq!(
            retry_after(&modern),
            Some(30),
            "kept beside the server's info"
        );
        assert_eq!(retry_after(&text_result("ok", None, false)), None);
    }

    #[test]
    fn a_text_result_is_one_text_item_with_its_structured_content_if_any() {
        assert_eq!(
            text_result("ok", None, false),
            serde_json::json!({"content": [{"type": "text", "text": "ok"}], "isError": false})
        );
        let structured = serde_json::json!({"user_rejected": true});
        assert_eq!(
            text_result("no", Some(&structured), true),
            serde_json::json!({"content": [{"type": "text", "text": "no"}],
                               "structuredContent": {"user_rejected": true}, "isError": true})
        );
    }

    #[test]
    fn a_long_list_comes_in_pages_each_naming_the_next_and_only_its_own_cursors_are_taken() {
        let items = |n: usize| (0..n).map(|i| json!(i)).collect::<Vec<_>>();
        let first = list_page("prompts", items(250), None).unwrap();
        assert_eq!(first["prompts"].as_array().unwrap().len(), PAGE_SIZE);
        assert_eq!(first["nextCursor"], "prompts:100");
        let second = list_page("prompts", items(250), Some(&first["nextCursor"])).unwrap();
        assert_eq!(second["prompts"][0], 100);
        let last = list_page("prompts", items(250), Some(&second["nextCursor"])).unwrap();
        assert_eq!(last["prompts"].as_array().unwrap().len(), 50);
        assert!(last.get("nextCursor").is_none());
        let exact = list_page("tools", items(100), None).unwrap();
        assert!(
            exact.get("nextCursor").is_none(),
            "a full single page has no next"
        );
        for bad in [
            json!("tools:100"),
            json!("prompts:300"),
            json!("prompts:0"),
            json!("prompts:50"),
            json!("bogus"),
            json!(100),
        ] {
            assert!(
                list_page("prompts", items(250), Some(&bad)).is_err(),
                "{bad}"
            );
        }
        assert!(list_page("prompts", items(3), Some(&Value::Null)).is_ok());
    }

    #[test]
    fn call_params_keep_unknown_fields_and_drop_the_exchange_upstream() {
        let params: CallToolParams = serde_json::from_value(json!({
            "name": "fs__delete",
            "arguments": {"path": "/x"},
            "_meta": {"confirmation_id": "c", "io.modelcontextprotocol/protocolVersion": "2026-07-28", "progressToken": 7},
            "requestState": "s",
            "inputResponses": {"confirm": {}},
            "task": {"ttl": 1}
        }))
        .unwrap();
        assert_eq!(params.confirmation_id(), Some("c"));
        assert_eq!(params.task(), Some(&json!({"ttl": 1})));
        let upstream = params.into_upstream("delete");
        assert_eq!(
            serde_json::to_value(&upstream).unwrap(),
            json!({"name": "delete", "arguments": {"path": "/x"}, "_meta": {"progressToken": 7}, "task": {"ttl": 1}}),
            "the task goes on, if the gate lets it"
        );
        assert_eq!(
            serde_json::to_value(upstream.without_task()).unwrap(),
            json!({"name": "delete", "arguments": {"path": "/x"}, "_meta": {"progressToken": 7}}),
            "a call without its task runs to its result"
        );
    }

    #[test]
    fn a_call_declares_what_its_client_can_answer_before_the_envelopes_defaults() {
        for (elicitation, sampling, roots, tasks, want) in [
            (false, false, false, false, json!({})),
            (
                true,
                false,
                false,
                false,
                json!({"elicitation": {"form": {}}}),
            ),
            (
                true,
                true,
                true,
                false,
                json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}}),
            ),
            (
                false,
                false,
                false,
                true,
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
            ),
        ] {
            let mut params = CallToolParams::new("t".into(), None);
            params.add_meta(crate::mcp::capabilities_meta(crate::mcp::ClientCan {
                elicitation,
                sampling,
                roots,
                tasks,
            }));
            params.add_meta(crate::mcp::modern_meta());
            let written: Value = serde_json::to_value(&params).unwrap();
            assert_eq!(
                written["_meta"]["io.modelcontextprotocol/clientCapabilities"], want,
                "{written}"
            );
            assert_eq!(
                written["_meta"]["io.modelcontextprotocol/protocolVersion"],
                "2026-07-28"
            );
        }
    }

    #[test]
    fn every_hop_meta_added_is_written_not_only_the_last() {
        // A 2025-era client with a log level: the hop's protocol keys and the level are both
        // added; the level once replaced the envelope, and a 2026-07-28 module refused the call.
        static ENVELOPE: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(|| {
            let mut hop = Map::new();
            hop.insert(
                "io.modelcontextprotocol/protocolVersion".into(),
                json!("2026-07-28"),
            );
            hop.insert(
                "io.modelcontextprotocol/clientCapabilities".into(),
                json!({}),
            );
            hop
        });
        static LEVEL: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(|| {
            let mut hop = Map::new();
            hop.insert("io.modelcontextprotocol/logLevel".into(), json!("info"));
            hop
        });
        let mut params: CallToolParams =
            serde_json::from_str(r#"{"name":"t","_meta":{"progressToken":7}}"#).unwrap();
        for _retry in 0..2 {
            params.add_meta(&ENVELOPE);
            params.add_meta(&LEVEL);
        }
        let written: Value = serde_json::to_value(&params).unwrap();
        assert_eq!(
            written["_meta"],
            json!({
                "progressToken": 7,
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/logLevel": "info",
            })
        );
        let mut bare = CallToolParams::new("t".into(), None);
        bare.add_meta(&ENVELOPE);
        bare.add_meta(&LEVEL);
        let written: Value = serde_json::to_value(&bare).unwrap();
        assert_eq!(
            written["_meta"].as_object().map(Map::len),
            Some(3),
            "{written}"
        );
    }

    #[test]
    fn hop_maps_merge_in_the_order_added_the_first_keeping_a_shared_key() {
        fn map(pairs: &[(&str, Value)]) -> Map<String, Value> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect()
        }
        static A: std::sync::LazyLock<Map<String, Value>> =
            std::sync::LazyLock::new(|| map(&[("a", json!(1)), ("shared", json!("a"))]));
        static B: std::sync::LazyLock<Map<String, Value>> =
            std::sync::LazyLock::new(|| map(&[("b", json!(2)), ("shared", json!("b"))]));
        static C: std::sync::LazyLock<Map<String, Value>> =
            std::sync::LazyLock::new(|| map(&[("c", json!(3))]));
        static D: std::sync::LazyLock<Map<String, Value>> =
            std::sync::LazyLock::new(|| map(&[("d", json!(4)), ("shared", json!("d"))]));
        let write = |maps: &[&'static Map<String, Value>], own: Option<&str>| {
            let mut params = CallToolParams::new("t".into(), None);
            if let Some(own) = own {
                params.meta = Some(map(&[("shared", json!(own))]));
            }
            for m in maps {
                params.add_meta(m);
                params.add_meta(m);
            }
            serde_json::to_value(&params).unwrap()["_meta"].clone()
        };
        // Written twice each way: the second comes from the thread's cache of merges.
        for _ in 0..2 {
            assert_eq!(
                write(&[&A, &B, &C], None),
                json!({"a": 1, "shared": "a", "b": 2, "c": 3})
            );
            assert_eq!(
                write(&[&B, &A], None),
                json!({"b": 2, "shared": "b", "a": 1})
            );
            assert_eq!(
                write(&[&A, &B, &C, &D], None),
                json!({"a": 1, "shared": "a", "b": 2, "c": 3, "d": 4})
            );
            assert_eq!(
                write(&[&A, &B], Some("own")),
                json!({"shared": "own", "a": 1, "b": 2})
            );
        }
    }

    #[test]
    fn arguments_go_upstream_as_sent_and_the_hops_meta_is_merged_in_as_written() {
        static HOP: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(|| {
            let mut hop = Map::new();
            hop.insert(
                "io.modelcontextprotocol/protocolVersion".into(),
                json!("2026-07-28"),
            );
            hop.insert("progressToken".into(), json!("hop"));
            hop
        });
        let mut params: CallToolParams = serde_json::from_str(
            r#"{"name":"t","arguments":{"b":1.50,"a":[2]},"_meta":{"progressToken":7}}"#,
        )
        .unwrap();
        params.add_meta(&HOP);
        params.add_meta(&HOP);
        let written = serde_json::to_string(&params).unwrap();
        assert!(
            written.contains(r#""arguments":{"b":1.50,"a":[2]}"#),
            "{written}"
        );
        let value: Value = serde_json::from_str(&written).unwrap();
        assert_eq!(
            value["_meta"],
            json!({"progressToken": 7, "io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
            "the call's own keys win"
        );
        assert_eq!(
            params.arguments.unwrap().to_value().unwrap(),
            json!({"b": 1.5, "a": [2]})
        );
        let unreadable: CallToolParams =
            serde_json::from_str(r#"{"name":"t","arguments":{"region":"eu","z":"\ud800"}}"#)
                .unwrap();
        assert!(
            unreadable.arguments.unwrap().to_map().is_err(),
            "never silently {{}}"
        );
    }

    #[test]
    fn call_params_refuse_a_missing_name_and_non_object_arguments() {
        assert!(serde_json::from_value::<CallToolParams>(json!({"arguments": {}})).is_err());
        assert!(
            serde_json::from_value::<CallToolParams>(json!({"name": "t", "arguments": [1]}))
                .is_err()
        );
        let null: CallToolParams =
            serde_json::from_value(json!({"name": "t", "arguments": null})).unwrap();
        assert_eq!(null.arguments, None);
        assert!(serde_json::from_str::<CallToolParams>(r#"{"name":"a","name":"b"}"#).is_err());
        assert!(serde_json::from_str::<CallToolParams>(r#"{"name":7}"#).is_err());
        let escaped: CallToolParams =
            serde_json::from_str(r#"{"n\u0061me":"t","x\ty":1}"#).unwrap();
        assert_eq!(escaped.name, "t");
        assert_eq!(escaped.rest["x\ty"], 1);
    }

    #[test]
    fn input_required_has_the_spec_shape() {
        let schema = json!({"type": "object"});
        let result = InputRequiredResult::one(
            "confirm",
            InputRequest {
                method: "elicitation/create".into(),
                params: ElicitFormParams {
                    mode: Some("form"),
                    message: "ok?",
                    requested_schema: &schema,
                },
            },
            "state".into(),
        );
        assert_eq!(
            serde_json::to_value(&result).unwrap(),
            json!({"resultType": "input_required", "requestState": "state", "inputRequests": {"confirm": {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "ok?", "requestedSchema": {"type": "object"}}}}})
        );
    }
}
