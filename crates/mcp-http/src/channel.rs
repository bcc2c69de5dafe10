//! One legacy session's channel: its numbered events (what its `GET /mcp` stream sends,
//! see `listen`), the resources it subscribed to, which stream is its current one, and its
//! calls in flight (which the client may cancel). It is session state: `sessions` keeps one
//! per session.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use mcp_wire::jsonrpc::RequestId;
use mcp_wire::sse;
use tokio::sync::{oneshot, watch};

use mcp_http_kit::error::McpError;

/// Events a session keeps for a client that reconnects.
pub const BUFFER: usize = 64;
/// Most resources one session may subscribe to.
pub const MAX_SUBSCRIPTIONS: usize = 256;
/// One session's events, subscriptions and stream, and its calls in flight (which the
/// client may cancel).
#[derive(Debug)]
pub struct SessionChannel {
    /// The session's `tools/call`s in flight, by the client's request id: each one's
    /// registration number and how to cancel it.
    calls: Mutex<HashMap<RequestId, (u64, oneshot::Sender<()>)>>,
    /// The last registration number given.
    registered: AtomicU64,
    events: Mutex<VecDeque<(u64, Bytes)>>,
    /// The id of the last event (0: none yet); streams wait on it.
    pub(crate) last: watch::Sender<u64>,
    /// The resource URIs the session subscribed to.
    subscriptions: Mutex<BTreeSet<String>>,
    /// Which stream is the session's current one.
    pub(crate) generation: AtomicU64,
    pub(crate) closed: AtomicBool,
}

impl Default for SessionChannel {
    fn default() -> Self {
        SessionChannel {
            calls: Mutex::default(),
            registered: AtomicU64::new(0),
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
    pub(crate) fn after(&self, last: u64) -> Vec<(u64, Bytes)> {
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
        let number = self.registered.fetch_add(1, Ordering::Relaxed) + 1;
        // A second call under an id already in flight is not cancellable by it (the id
        // names the first).
        let registered = match self.calls().entry(id.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert((number, tx));
                true
            }
        };
        if !registered {
            return call.await;
        }
        // Forgotten however this ends: answered, cancelled, or dropped with the request
        // (a client that went away), which used to leave it until the session ended.
        let _forget = Forget {
            channel: self,
            id,
            number,
        };
        tokio::select! {
            outcome = call => outcome,
            Ok(()) = rx => Err(McpError::Cancelled),
        }
    }

    /// Cancels the session's call `id`, if it is in flight.
    pub fn cancel(&self, id: &RequestId) {
        if let Some((_, call)) = self.calls().remove(id) {
            let _ = call.send(());
        }
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, (u64, oneshot::Sender<()>)>> {
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

/// Removes a call's registration when dropped, unless another call took its id since.
struct Forget<'a> {
    channel: &'a SessionChannel,
    id: &'a RequestId,
    number: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let mut calls = self.channel.calls();
        if calls.get(self.id).is_some_and(|(n, _)| *n == self.number) {
            calls.remove(self.id);
        }
    }
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

    /// A call dropped with its request (the client went away) is forgotten at once, and a
    /// later call under the same id is cancellable again.
    #[tokio::test]
    async fn a_call_dropped_with_its_request_is_forgotten() {
        let channel = SessionChannel::default();
        let id = RequestId::Number(7);
        {
            let pending = channel.cancellable(&id, std::future::pending::<Result<(), McpError>>());
            let _ = tokio::time::timeout(std::time::Duration::from_millis(10), pending).await;
        }
        assert!(channel.calls().is_empty(), "the dropped call is forgotten");
        let answered = channel
            .cancellable(&id, async { Ok::<_, McpError>(1) })
            .await;
        assert_eq!(answered.unwrap(), 1);
        assert!(channel.calls().is_empty());
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
