//! What reaches a legacy session outside its calls, on its `GET /mcp` stream: the catalog's
//! `notifications/{tools,prompts,resources}/list_changed` and
//! `notifications/resources/updated` for the URIs it subscribed to.
//!
//! Each session keeps its last [`BUFFER`] events, numbered; the stream starts with a priming
//! event (the last id, `retry:`), and a client that reconnects with `Last-Event-ID` gets
//! what it missed that is still buffered. A session has at most one stream: a new one takes
//! over and the old one ends (each event goes out on one stream only, as the spec asks).
//! The stream ends with its session (DELETE, expiry) and keeps the session alive while open.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use elicitation_store::Caller;
use http::Response;
use http_body_util::BodyExt;
use mcp_wire::jsonrpc::RequestId;
use mcp_wire::sse;
use tokio::sync::{oneshot, watch};

use crate::body::{Body, ChannelBody};
use crate::error::McpError;
use crate::sessions::Sessions;

/// Events a session keeps for a client that reconnects.
pub const BUFFER: usize = 64;
/// Most resources one session may subscribe to.
pub const MAX_SUBSCRIPTIONS: usize = 256;
/// The reconnection delay the stream suggests.
const RETRY_MS: u64 = 3_000;
/// How often an idle stream sends an SSE comment (and keeps its session alive).
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long writing one event may wait for a client that stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// One session's events, subscriptions and stream, and its calls in flight (which the
/// client may cancel).
#[derive(Debug)]
pub struct SessionChannel {
    /// The session's `tools/call`s in flight, by the client's request id.
    calls: Mutex<HashMap<RequestId, oneshot::Sender<()>>>,
    events: Mutex<VecDeque<(u64, Bytes)>>,
    /// The id of the last event (0: none yet); streams wait on it.
    last: watch::Sender<u64>,
    /// The resource URIs the session subscribed to.
    subscriptions: Mutex<BTreeSet<String>>,
    /// Which stream is the session's current one.
    generation: AtomicU64,
    closed: AtomicBool,
}

impl Default for SessionChannel {
    fn default() -> Self {
        SessionChannel {
            calls: Mutex::default(),
            events: Mutex::default(),
            last: watch::channel(0).0,
            subscriptions: Mutex::default(),
            generation: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }
}

impl SessionChannel {
    /// Queues a JSON-RPC notification for the session's stream.
    pub fn push(&self, message: &[u8]) {
        // Numbered and published under the lock: two pushes never share an id.
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let id = *self.last.borrow() + 1;
        if events.len() == BUFFER {
            events.pop_front();
        }
        events.push_back((id, sse::event_with_id(id, message)));
        self.last.send_replace(id);
    }

    /// The buffered events after `last`, with their ids.
    fn after(&self, last: u64) -> Vec<(u64, Bytes)> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(id, _)| *id > last)
            .cloned()
            .collect()
    }

    /// Runs `call`, the session's request `id`, until it ends or the client cancels it
    /// (`notifications/cancelled`): then the call is dropped, which cancels it at its
    /// module, and the answer is `Cancelled`.
    pub async fn cancellable<T>(
        &self,
        id: &RequestId,
        call: impl Future<Output = Result<T, McpError>>,
    ) -> Result<T, McpError> {
        let (tx, rx) = oneshot::channel();
        // A second call under an id already in flight is not cancellable by it (the id
        // names the first).
        let registered = match self.calls().entry(id.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(tx);
                true
            }
        };
        if !registered {
            return call.await;
        }
        let outcome = tokio::select! {
            outcome = call => outcome,
            Ok(()) = rx => Err(McpError::Cancelled),
        };
        self.calls().remove(id);
        outcome
    }

    /// Cancels the session's call `id`, if it is in flight.
    pub fn cancel(&self, id: &RequestId) {
        if let Some(call) = self.calls().remove(id) {
            let _ = call.send(());
        }
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, oneshot::Sender<()>>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the session's stream (the session ended).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.last.send_modify(|_| {});
    }

    /// Whether the session subscribed to `uri`.
    pub fn subscribed(&self, uri: &str) -> bool {
        self.subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(uri)
    }

    /// Adds (or removes) a subscription; whether that changed anything. `Err` at the cap.
    pub fn set_subscription(&self, uri: &str, subscribe: bool) -> Result<bool, usize> {
        let mut subscriptions = self
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !subscribe {
            return Ok(subscriptions.remove(uri));
        }
        if subscriptions.contains(uri) {
            return Ok(false);
        }
        if subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(MAX_SUBSCRIPTIONS);
        }
        subscriptions.insert(uri.to_owned());
        Ok(true)
    }
}

/// The session's GET stream: priming event, what it missed after `last_event_id`, then
/// events as they come.
pub fn stream(
    channel: Arc<SessionChannel>,
    sessions: Arc<Sessions>,
    session: String,
    caller: Caller,
    last_event_id: Option<u64>,
    slot: crate::streams::StreamSlot,
) -> Response<Body> {
    let generation = channel.generation.fetch_add(1, Ordering::AcqRel) + 1;
    // Waking the previous stream makes it notice it was taken over.
    channel.last.send_modify(|_| {});
    let (tx, body) = ChannelBody::new(16);
    tokio::spawn(async move {
        let _slot = slot;
        let mut last = channel.last.subscribe();
        let current = *last.borrow_and_update();
        let mut sent = last_event_id.unwrap_or(current).min(current);
        if !send(&tx, sse::priming(current, RETRY_MS)).await {
            return;
        }
        let mut keep_alive =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        loop {
            if channel.closed.load(Ordering::Acquire)
                || channel.generation.load(Ordering::Acquire) != generation
            {
                return;
            }
            last.borrow_and_update();
            for (id, event) in channel.after(sent) {
                if !send(&tx, event).await {
                    return;
                }
                sent = id;
            }
            tokio::select! {
                changed = last.changed() => if changed.is_err() { return },
                _ = keep_alive.tick() => {
                    if sessions.touch(&session, &caller).is_err()
                        || !send(&tx, sse::comment("keep-alive")).await
                    {
                        return;
                    }
                }
                () = tx.closed() => return,
            }
        }
    });
    crate::response::sse_response(body.boxed())
}

async fn send(tx: &tokio::sync::mpsc::Sender<Bytes>, event: Bytes) -> bool {
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, tx.send(event)).await,
        Ok(Ok(()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_keeps_its_last_events_numbered_and_drops_the_oldest() {
        let channel = SessionChannel::default();
        for i in 0..(BUFFER + 3) {
            channel.push(format!("{{\"n\":{i}}}").as_bytes());
        }
        let all = channel.after(0);
        assert_eq!(all.len(), BUFFER);
        let first = String::from_utf8(all[0].1.to_vec()).unwrap();
        assert!(first.starts_with("id: 4\n"), "{first}");
        let missed = channel.after(u64::try_from(BUFFER).unwrap() + 1);
        assert_eq!(missed.len(), 2);
        assert_eq!(missed[1].0, 67);
        assert!(
            String::from_utf8(missed[1].1.to_vec())
                .unwrap()
                .contains("\"n\":66")
        );
    }

    #[test]
    fn subscriptions_are_a_set_with_a_cap() {
        let channel = SessionChannel::default();
        assert_eq!(channel.set_subscription("a://1", true), Ok(true));
        assert_eq!(channel.set_subscription("a://1", true), Ok(false));
        assert!(channel.subscribed("a://1"));
        assert_eq!(channel.set_subscription("a://1", false), Ok(true));
        assert_eq!(channel.set_subscription("a://1", false), Ok(false));
        for i in 0..MAX_SUBSCRIPTIONS {
            channel.set_subscription(&format!("a://{i}"), true).unwrap();
        }
        assert_eq!(
            channel.set_subscription("a://more", true),
            Err(MAX_SUBSCRIPTIONS)
        );
    }
}

/// The 2026-07-28 `subscriptions/listen` streams open now, and the resources each
/// subscribed to (so a module is unsubscribed only when nobody listens any more).
#[derive(Debug, Default)]
pub struct Listeners {
    next: AtomicU64,
    uris: Mutex<HashMap<u64, BTreeSet<String>>>,
}

impl Listeners {
    /// A new listener of `uris`; its id.
    pub fn register(&self, uris: BTreeSet<String>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, uris);
        id
    }

    /// Ends listener `id`; the resources it subscribed to.
    pub fn remove(&self, id: u64) -> BTreeSet<String> {
        self.lock().remove(&id).unwrap_or_default()
    }

    /// Whether any listener subscribed to `uri`.
    pub fn subscribed(&self, uri: &str) -> bool {
        self.lock().values().any(|uris| uris.contains(uri))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, BTreeSet<String>>> {
        self.uris.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a `subscriptions/listen` asks for (`notifications`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenFor {
    /// `notifications/tools/list_changed`.
    #[serde(default)]
    pub tools_list_changed: bool,
    /// `notifications/prompts/list_changed`.
    #[serde(default)]
    pub prompts_list_changed: bool,
    /// `notifications/resources/list_changed`.
    #[serde(default)]
    pub resources_list_changed: bool,
    /// `notifications/resources/updated` for these URIs.
    #[serde(default)]
    pub resource_subscriptions: Vec<String>,
}

/// `subscriptions/listen`'s params.
#[derive(Debug, serde::Deserialize)]
pub struct ListenParams {
    /// What to listen for.
    #[serde(default)]
    pub notifications: ListenFor,
}

/// The resource updates a caller's listen stream hears: every shared module's, and its own
/// module instances' (never another caller's).
pub struct CallerUpdates {
    /// The registry's feed.
    pub feed: tokio::sync::broadcast::Receiver<mcp_upstream::registry::ResourceUpdate>,
    /// The caller (`gateway::instance_key`).
    pub who: String,
}

/// A `subscriptions/listen` stream: the acknowledgement (what is honoured), then the
/// catalog's changes and the subscribed resources' updates, each with
/// `_meta["io.modelcontextprotocol/subscriptionId"]`; at shutdown the graceful close (the
/// request's result). `on_end` runs when the stream ends, whatever the reason.
pub fn modern_stream(
    id: RequestId,
    honoured: ListenFor,
    mut changes: tokio::sync::broadcast::Receiver<()>,
    updates: CallerUpdates,
    mut closing: watch::Receiver<bool>,
    slot: crate::streams::StreamSlot,
    on_end: impl FnOnce() + Send + 'static,
) -> Response<Body> {
    use tokio::sync::broadcast::error::RecvError;
    let CallerUpdates {
        feed: mut updates,
        who,
    } = updates;
    let (tx, body) = ChannelBody::new(16);
    tokio::spawn(async move {
        let _slot = slot;
        let meta = serde_json::json!({"io.modelcontextprotocol/subscriptionId": id});
        let notice = |method: &str, mut params: serde_json::Value| {
            params["_meta"] = meta.clone();
            sse::event_bytes(&mcp_wire::jsonrpc::notification_bytes(
                method,
                Some(&params),
            ))
        };
        let acknowledged = notice(
            "notifications/subscriptions/acknowledged",
            serde_json::json!({"notifications": {
                "toolsListChanged": honoured.tools_list_changed,
                "promptsListChanged": honoured.prompts_list_changed,
                "resourcesListChanged": honoured.resources_list_changed,
                "resourceSubscriptions": honoured.resource_subscriptions,
            }}),
        );
        if send(&tx, acknowledged).await {
            let mut keep_alive =
                tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
            loop {
                let mut finished = false;
                let events = tokio::select! {
                    changed = changes.recv() => match changed {
                        Ok(()) | Err(RecvError::Lagged(_)) => [
                            ("tools", honoured.tools_list_changed),
                            ("prompts", honoured.prompts_list_changed),
                            ("resources", honoured.resources_list_changed),
                        ]
                        .into_iter()
                        .filter(|(_, on)| *on)
                        .map(|(list, _)| notice(&format!("notifications/{list}/list_changed"), serde_json::json!({})))
                        .collect(),
                        Err(RecvError::Closed) => break,
                    },
                    updated = updates.recv() => match updated {
                        Ok(update) if honoured.resource_subscriptions.contains(&update.uri)
                            && update.for_caller(&who) => {
                            vec![notice("notifications/resources/updated", serde_json::json!({"uri": update.uri}))]
                        }
                        Ok(_) | Err(RecvError::Lagged(_)) => Vec::new(),
                        Err(RecvError::Closed) => break,
                    },
                    _ = keep_alive.tick() => vec![sse::comment("keep-alive")],
                    closed = closing.wait_for(|closing| *closing) => {
                        drop(closed);
                        finished = true;
                        let done = serde_json::json!({"resultType": "complete", "_meta": meta});
                        vec![sse::event_bytes(&mcp_wire::jsonrpc::result_bytes(&id, &done))]
                    }
                    () = tx.closed() => break,
                };
                let mut open = true;
                for event in events {
                    open = open && send(&tx, event).await;
                }
                if !open || finished {
                    break;
                }
            }
        }
        on_end();
    });
    crate::response::sse_response(body.boxed())
}
