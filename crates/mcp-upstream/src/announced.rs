//! The resource URIs a module named to one caller in its tool results (`resource_link`
//! items, embedded resources) that no module lists: a read of one goes back to that module,
//! for that caller only — a session resource the caller's own instance made is never in the
//! catalog the shared instance lists.
//!
//! Bounded: at most [`PER_RESULT`] URIs from one result, none longer than [`MAX_URI`], and
//! [`CAPACITY`] in all (the oldest forgotten first). A URI is only ever looked up here after
//! the catalog and the templates: a module cannot take over a URI another module claims.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use serde_json::value::RawValue;

/// URIs remembered in all, over every caller.
const CAPACITY: usize = 8192;
/// URIs taken from one result.
const PER_RESULT: usize = 64;
/// The longest URI remembered, in bytes.
const MAX_URI: usize = 2048;

/// Which module named which URI to whom.
#[derive(Default)]
pub(crate) struct Announced {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    modules: HashMap<(Arc<str>, String), usize>,
    /// Oldest first.
    order: VecDeque<(Arc<str>, String)>,
}

impl Announced {
    /// Remembers the URIs module `module` named to caller `who` in `result` (a
    /// `CallToolResult` as the module sent it).
    pub(crate) fn record(&self, who: &str, module: usize, result: &RawValue) {
        // Most results name no resource: those are not parsed again.
        if !result.get().contains("\"uri\"") {
            return;
        }
        let Ok(result) = serde_json::from_str::<Value>(result.get()) else {
            return;
        };
        let uris: Vec<&str> = result
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
            .collect();
        if uris.is_empty() {
            return;
        }
        let who: Arc<str> = Arc::from(who);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for uri in uris {
            let key = (who.clone(), uri.to_owned());
            if inner.modules.insert(key.clone(), module).is_none() {
                inner.order.push_back(key);
            }
        }
        while inner.order.len() > CAPACITY {
            if let Some(oldest) = inner.order.pop_front() {
                inner.modules.remove(&oldest);
            }
        }
    }

    /// The module that named `uri` to `who`, if one did.
    pub(crate) fn module_of(&self, who: &str, uri: &str) -> Option<usize> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .modules
            .get(&(Arc::from(who), uri.to_owned()))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(value: Value) -> Box<RawValue> {
        RawValue::from_string(value.to_string()).unwrap()
    }

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
        );
        assert_eq!(announced.module_of("alice", "demo://session/a"), Some(2));
        assert_eq!(announced.module_of("alice", "demo://session/b"), Some(2));
        assert_eq!(announced.module_of("bob", "demo://session/a"), None);
        assert_eq!(
            announced.module_of("alice", "not://an-item-of-this-kind"),
            None
        );
    }

    #[test]
    fn it_stays_bounded() {
        let announced = Announced::default();
        let long = format!("demo://{}", "x".repeat(MAX_URI));
        let links: Vec<Value> = (0..PER_RESULT + 10)
            .map(|i| serde_json::json!({"type": "resource_link", "uri": format!("demo://{i}")}))
            .chain([serde_json::json!({"type": "resource_link", "uri": long})])
            .collect();
        announced.record("alice", 0, &raw(serde_json::json!({ "content": links })));
        assert_eq!(announced.module_of("alice", "demo://0"), Some(0));
        assert_eq!(
            announced.module_of("alice", &format!("demo://{PER_RESULT}")),
            None
        );
        assert_eq!(announced.module_of("alice", &long), None);
        for caller in 0..=CAPACITY / PER_RESULT {
            let links: Vec<Value> = (0..PER_RESULT)
                .map(|i| serde_json::json!({"type": "resource_link", "uri": format!("demo://{i}")}))
                .collect();
            announced.record(
                &format!("c{caller}"),
                1,
                &raw(serde_json::json!({ "content": links })),
            );
        }
        let inner = announced.inner.lock().unwrap();
        assert_eq!(inner.order.len(), CAPACITY);
        assert_eq!(inner.modules.len(), CAPACITY);
        drop(inner);
        assert_eq!(
            announced.module_of("alice", "demo://0"),
            None,
            "the oldest went first"
        );
    }
}
