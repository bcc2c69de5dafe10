//! What the stdio and HTTP module clients share: request ids and waiting for answers, the
//! handshake they send, and turning an answer into a result or a [`ModuleError`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use mcp_wire::jsonrpc::{ErrorObject, RequestId};
use mcp_wire::mcp;
use mcp_wire::tools::ListParams;

use crate::ModuleError;

/// The legacy version the gateway asks modules for.
pub(crate) const UPSTREAM_LEGACY_VERSION: &str = "2025-11-25";

/// The `initialize` params the gateway sends to a module.
pub(crate) fn initialize_params() -> Value {
    mcp::initialize_params(UPSTREAM_LEGACY_VERSION)
}

/// `logging/setLevel`'s params.
pub(crate) fn level_params(level: &str) -> serde_json::Map<String, Value> {
    let mut params = serde_json::Map::new();
    params.insert("level".into(), Value::String(level.to_owned()));
    params
}

/// An answer: the result as sent, or why there is none.
pub(crate) type Answer = Result<Box<RawValue>, ModuleError>;

type Waiter = oneshot::Sender<Answer>;

/// Requests in flight on one connection.
#[derive(Default)]
pub(crate) struct Pending {
    next_id: AtomicI64,
    waiters: Mutex<HashMap<i64, Waiter>>,
}

impl Pending {
    /// A fresh id and the receiver its answer will arrive on.
    pub(crate) fn register(&self) -> (RequestId, oneshot::Receiver<Answer>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        (RequestId::Number(id), rx)
    }

    /// Delivers the answer to request `id` (answers to unknown ids are ignored).
    pub(crate) fn resolve(&self, id: &RequestId, answer: Answer) {
        let RequestId::Number(id) = id else { return };
        let waiter = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        if let Some(waiter) = waiter {
            let _ = waiter.send(answer);
        }
    }

    /// Forgets request `id` (its caller gave up).
    pub(crate) fn forget(&self, id: &RequestId) {
        if let RequestId::Number(id) = id {
            self.waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
        }
    }

    /// Fails every request in flight with `error`.
    pub(crate) fn fail_all(&self, error: &ModuleError) {
        let waiters: Vec<Waiter> = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, w)| w)
            .collect();
        for waiter in waiters {
            let _ = waiter.send(Err(error.clone()));
        }
    }
}

/// A JSON-RPC response's outcome as a module result.
pub(crate) fn answer(module: &str, outcome: Result<Box<RawValue>, ErrorObject>) -> Answer {
    match outcome {
        Ok(result) => Ok(result),
        Err(error) => Err(ModuleError::Rpc {
            module: module.to_owned(),
            code: error.code,
            message: error.message,
            data: error.data.map(Box::new),
        }),
    }
}

/// What a module said it offers (its `capabilities`, from `initialize` or
/// `server/discover`), once known.
#[derive(Default)]
pub(crate) struct Offers(Mutex<Option<Value>>);

impl Offers {
    /// Records the capabilities of a handshake's result.
    pub(crate) fn record(&self, result: &Value) {
        if let Some(capabilities) = result.get("capabilities") {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(capabilities.clone());
        }
    }

    /// Whether the module offers `what` (`prompts`, `resources`): said so, or not known yet
    /// (then asking is how to find out). A module that does not offer it is not asked, so
    /// one that never answers unknown methods cannot hold up the listing.
    pub(crate) fn includes(&self, what: &str) -> bool {
        match &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(capabilities) => capabilities.get(what).is_some(),
            None => true,
        }
    }

    /// Whether the module said it offers the extension `id` (`capabilities.extensions`);
    /// not known yet is no.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn extends(&self, id: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(id))
            .is_some()
    }
}

/// A list a module does not offer (`-32601`) is an empty one.
pub(crate) fn none_if_unoffered(
    listed: Result<Vec<Value>, ModuleError>,
) -> Result<Vec<Value>, ModuleError> {
    match listed {
        Err(ModuleError::Rpc { code: -32601, .. }) => Ok(Vec::new()),
        other => other,
    }
}

/// A result the gateway reads itself (a list, a handshake), as a tree.
pub(crate) fn parse_result(module: &str, raw: &RawValue) -> Result<Value, ModuleError> {
    serde_json::from_str(raw.get()).map_err(|e| ModuleError::Protocol {
        module: module.to_owned(),
        reason: format!("an answer that is not JSON: {e}"),
    })
}

/// The `key` items (`tools`, `prompts`) of a list result, those with a string `name`
/// (following `nextCursor` is the caller's job).
pub(crate) fn items_of(
    module: &str,
    key: &str,
    result: &Value,
) -> Result<(Vec<Value>, Option<String>), ModuleError> {
    let tools = result
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| ModuleError::Protocol {
            module: module.to_owned(),
            reason: format!("the list result has no {key} array"),
        })?
        .iter()
        .filter(|t| t.get("name").and_then(Value::as_str).is_some())
        .cloned()
        .collect();
    let cursor = result
        .get("nextCursor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok((tools, cursor))
}

/// Most pages of `tools/list` followed before giving up on a module that never ends.
const MAX_LIST_PAGES: usize = 100;

/// A request to a module in flight.
pub(crate) type InFlight<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Answer> + Send + 'a>>;

/// Every page of a list method whose items are under `key`, through `request(params)`.
pub(crate) async fn list_all<'a>(
    module: &str,
    key: &str,
    mut request: impl FnMut(ListParams) -> InFlight<'a> + Send,
) -> Result<Vec<Value>, ModuleError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = ListParams {
            cursor: cursor.clone().map(Value::String),
            meta: None,
        };
        let result = parse_result(module, &request(params).await?)?;
        let (page, next) = items_of(module, key, &result)?;
        tools.extend(page);
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_module_is_asked_for_what_it_offers_or_while_that_is_not_known() {
        let offers = Offers::default();
        assert!(offers.includes("prompts"), "not known yet: ask");
        offers.record(&json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "resources": {}}}));
        assert!(!offers.includes("prompts"), "said it has none: not asked");
        assert!(offers.includes("resources"));
        offers.record(&json!({"serverInfo": {}}));
        assert!(
            offers.includes("resources"),
            "a result without capabilities changes nothing"
        );
        assert!(!offers.extends("io.modelcontextprotocol/tasks"));
        offers.record(
            &json!({"capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}),
        );
        assert!(offers.extends("io.modelcontextprotocol/tasks"));
    }
}
