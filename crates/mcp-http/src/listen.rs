//! What reaches a legacy session outside its calls, on its `GET /mcp` stream: the catalog's
//! `notifications/{tools,prompts,resources}/list_changed` and
//! `notifications/resources/updated` for the URIs it subscribed to.
//!
//! Each session keeps its last `channel::BUFFER` events, numbered; the stream starts with a priming
//! event (the last id, `retry:`), and a client that reconnects with `Last-Event-ID` gets
//! what it missed that is still buffered. A session has at most one stream: a new one takes
//! over and the old one ends (each event goes out on one stream only, as the spec asks).
//! The stream ends with its session (DELETE, expiry) and keeps the session alive while open.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use elicitation_store::Caller;
use http::Response;
use http_body_util::BodyExt;
use mcp_wire::jsonrpc::RequestId;
use mcp_wire::sse;
use tokio::sync::watch;

use crate::channel::SessionChannel;
use crate::sessions::Sessions;
use mcp_http_kit::body::{Body, ChannelBody};

/// The reconnection delay the stream suggests.
const RETRY_MS: u64 = 3_000;
/// How often an idle stream sends an SSE comment (and keeps its session alive).
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long writing one event may wait for a client that stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The session's GET stream: priming event (for a session at 2025-11-25 or later, whose
/// clients expect one: an empty `data` is no JSON-RPC message to an earlier client, and
/// Gemini CLI's parses it and hangs up), what it missed after `last_event_id`, then events
/// as they come.
pub fn stream(
    channel: Arc<SessionChannel>,
    sessions: Arc<Sessions>,
    session: String,
    (caller, server): (Caller, Option<String>),
    last_event_id: Option<u64>,
    slot: mcp_gate::streams::StreamSlot,
    prime: bool,
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
        if prime && !send(&tx, sse::priming(current, RETRY_MS)).await {
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
                    if sessions.touch(&session, &caller, server.as_deref()).is_err()
                        || !send(&tx, sse::comment("keep-alive")).await
                    {
                        return;
                    }
                }
                () = tx.closed() => return,
            }
        }
    });
    mcp_http_kit::response::sse_response(body.boxed())
}

async fn send(tx: &tokio::sync::mpsc::Sender<Bytes>, event: Bytes) -> bool {
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, tx.send(event)).await,
        Ok(Ok(()))
    )
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
    slot: mcp_gate::streams::StreamSlot,
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
                        let done = mcp_wire::mcp::complete_result(meta.clone());
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
    mcp_http_kit::response::sse_response(body.boxed())
}
