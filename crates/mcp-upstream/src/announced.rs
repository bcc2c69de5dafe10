//! The resource URIs a module named to one caller in its tool results (`resource_link`
//! items, embedded resources) that no module lists: a read of one goes back to that module,
//! for that caller only — a session resource the caller's own instance made is never in the
//! catalog the shared instance lists.
//!
//! Who keeps a URI: the first module that named it to that caller (a later module naming
//! the same URI does not take it over), and never a URI the catalog gives to a module (the
//! registry filters those out before recording, and looks here only after the catalog and
//! the templates). Bounded per caller ([`PER_CALLER`] URIs, each at most [`MAX_URI`] bytes,
//! the oldest forgotten first) and in callers ([`MAX_CALLERS`], the one that recorded least
//! recently forgotten first), so one caller's results never push out another's.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use serde_json::value::RawValue;

/// URIs remembered per caller.
const PER_CALLER: usize = 128;
/// Callers remembered.
const MAX_CALLERS: usize = 512;
/// URIs taken from one result.
const PER_RESULT: usize = 64;
/// The longest URI remembered, in bytes.
const MAX_URI: usize = 512;

/// Which module named which URI to whom.
#[derive(Default)]
pub(crate) struct Announced {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Each caller's URIs and the module that named each, oldest first.
    callers: HashMap<Arc<str>, VecDeque<(String, usize)>>,
    /// The callers, the one that recorded least recently first.
    recent: VecDeque<Arc<str>>,
}

/// The URIs a `CallToolResult` names: its `resource_link` items and embedded resources.
fn named_uris(result: &RawValue) -> Vec<String> {
    // Most results name no resource: those are not parsed again.
    if !result.get().contains("\"uri\"") {
        return Vec::new();
    }
    let Ok(result) = serde_json::from_str::<Value>(result.get()) else {
        return Vec::new();
    };
    result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| match item.get("type").and_then(Value::as_str)? {
            "resource_link" => item.get("uri")?.as_str(),
            "resource" => item.get("resource")?.get("uri")?.as_str(),
            _ => None,
        })
        .filter(|uri| !uri.is_empty() && uri.len() <= MAX_URI)
        .take(PER_RESULT)
        .map(str::to_owned)
        .collect()
}

impl Announced {
    /// Remembers the URIs module `module` named to caller `who` in `result` (a
    /// `CallToolResult` as the module sent it), but those `claimed` says the catalog gives
    /// to a module, and those this caller was already told of by a module.
    pub(crate) fn record(
        &self,
        who: &str,
        module: usize,
        result: &RawValue,
        claimed: impl Fn(&str) -> bool,
    ) {
        let uris: Vec<String> = named_uris(result)
            .into_iter()
            .filter(|uri| !claimed(uri))
            .collect();
        if uris.is_empty() {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let inner = &mut *inner;
        let who: Arc<str> = match inner.recent.iter().position(|c| &**c == who) {
            Some(at) => inner.recent.remove(at).unwrap_or_else(|| Arc::from(who)),
            None => Arc::from(who),
        };
        inner.recent.push_back(who.clone());
        let known = inner.callers.entry(who).or_default();
        for uri in uris {
            if known.iter().any(|(u, _)| *u == uri) {
                continue;
            }
            known.push_back((uri, module));
            if known.len() > PER_CALLER {
                known.pop_front();
            }
        }
        while inner.recent.len() > MAX_CALLERS {
            if let Some(oldest) = inner.recent.pop_front() {
                inner.callers.remove(&oldest);
            }
        }
    }

    /// The module that named `uri` to `who`, if one did.
    pub(crate) fn module_of(&self, who: &str, uri: &str) -> Option<usize> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .callers
            .get(who)?
            .iter()
            .find(|(u, _)| u == uri)
            .map(|(_, module)| *module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(value: Value) -> Box<RawValue> {
        RawValue::from_string(value.to_string()).unwrap()
    }

    fn links(uris: impl IntoIterator<Item = String>) -> Box<RawValue> {
        let items: Vec<Value> = uris
            .into_iter()
            .map(|uri| serde_json::json!({"type": "resource_link", "uri": uri}))
            .collect();
        raw(serde_json::json!({ "content": items }))
    }

    const NONE_CLAIMED: fn(&str) -> bool = |_| false;

    #[test]
    fn links_and_embedded_resources_are_remembered_for_their_caller_only() {
        let announced = Announced::default();
        announced.record(
            "alice",
            2,
            &raw(serde_json::json!({"content": [
                {"type": "text", "text": "made it", "uri": "not://an-item-of-this-kind"},
                {"type": "resource_link", "uri": "demo://session/a", "name": "a"},
                {"type": "resource", "resource": {"uri": "demo://session/b", "text": "b"}},
            ]})),
            NONE_CLAIMED,
        );
        assert_eq!(announced.module_of("alice", "demo://session/a"), Some(2));
        assert_eq!(announced.module_of("alice", "demo://session/b"), Some(2));
        assert_eq!(announced.module_of("bob", "demo://session/a"), None);
        assert_eq!(
            announced.module_of("alice", "not://an-item-of-this-kind"),
            None
        );
    }

    /// A module cannot take over a URI another module named first, nor one the catalog
    /// gives to a module.
    #[test]
    fn the_first_module_keeps_a_uri_and_a_claimed_one_is_nobodys_here() {
        let announced = Announced::default();
        announced.record("alice", 1, &links(["s://report".to_owned()]), NONE_CLAIMED);
        announced.record(
            "alice",
            2,
            &links(["s://report".to_owned(), "s://listed".to_owned()]),
            |uri| uri == "s://listed",
        );
        assert_eq!(announced.module_of("alice", "s://report"), Some(1));
        assert_eq!(announced.module_of("alice", "s://listed"), None);
    }

    /// One caller's results (or one module's) push out only that caller's oldest URIs.
    #[test]
    fn it_stays_bounded_per_caller_and_in_callers() {
        let announced = Announced::default();
        let long = format!("demo://{}", "x".repeat(MAX_URI));
        announced.record(
            "alice",
            0,
            &links(
                (0..PER_RESULT + 10)
                    .map(|i| format!("demo://{i}"))
                    .chain([long.clone()]),
            ),
            NONE_CLAIMED,
        );
        assert_eq!(announced.module_of("alice", "demo://0"), Some(0));
        assert_eq!(
            announced.module_of("alice", &format!("demo://{PER_RESULT}")),
            None
        );
        assert_eq!(announced.module_of("alice", &long), None);
        // Mallory fills her own list many times over: alice's stays.
        for round in 0..4 {
            announced.record(
                "mallory",
                1,
                &links((0..PER_RESULT).map(|i| format!("m://{round}/{i}"))),
                NONE_CLAIMED,
            );
        }
        assert_eq!(announced.module_of("alice", "demo://0"), Some(0));
        assert_eq!(
            announced.module_of("mallory", "m://0/0"),
            None,
            "her oldest went"
        );
        assert_eq!(announced.module_of("mallory", "m://3/0"), Some(1));
        let inner = announced.inner.lock().unwrap();
        assert!(inner.callers.values().all(|u| u.len() <= PER_CALLER));
        drop(inner);
        // Callers beyond the cap: the one that recorded least recently goes.
        for caller in 0..MAX_CALLERS {
            announced.record(
                &format!("c{caller}"),
                3,
                &links(["c://x".to_owned()]),
                NONE_CLAIMED,
            );
        }
        assert_eq!(announced.module_of("alice", "demo://0"), None);
        assert_eq!(announced.module_of("c0", "c://x"), Some(3));
        assert!(announced.inner.lock().unwrap().callers.len() <= MAX_CALLERS);
    }
}
