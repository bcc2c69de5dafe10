//! What a client can answer, and where its answers arrive: what a legacy session's client
//! declared it can be asked ([`ClientAnswers`]), and the waiters for its answers to the
//! server's own requests ([`PendingAnswers`]): the gate's `elicitation/create` (`ask`) and
//! the module requests relayed to it (`relay`), by (session, request id).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use elicitation_core::ElicitationId;
use mcp_wire::jsonrpc::RequestId;
use serde_json::Value;
use tokio::sync::oneshot;

/// What a legacy session client declared it can answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientAnswers {
    /// `elicitation` (form).
    pub elicitation: bool,
    /// `elicitation.url`.
    pub elicitation_url: bool,
    /// `sampling`.
    pub sampling: bool,
    /// `roots`.
    pub roots: bool,
}

impl ClientAnswers {
    /// From `initialize`'s `capabilities`.
    pub fn declared(capabilities: Option<&Value>) -> ClientAnswers {
        let has = |name: &str| {
            capabilities
                .and_then(|c| c.get(name))
                .is_some_and(Value::is_object)
        };
        ClientAnswers {
            elicitation: can_elicit_form(capabilities),
            elicitation_url: can_elicit_url(capabilities),
            sampling: has("sampling"),
            roots: has("roots"),
        }
    }

    /// Whether the client can answer any of a module's requests.
    pub(crate) fn any(&self) -> bool {
        self.elicitation || self.sampling || self.roots
    }

    pub(crate) fn can(&self, method: &str) -> bool {
        match method {
            "elicitation/create" => self.elicitation,
            "sampling/createMessage" => self.sampling,
            "roots/list" => self.roots,
            _ => false,
        }
    }
}

/// Whether declared client capabilities include URL-mode elicitation.
pub fn can_elicit_url(capabilities: Option<&Value>) -> bool {
    matches!(capabilities.and_then(|c| c.get("elicitation")), Some(Value::Object(modes)) if modes.contains_key("url"))
}

/// Whether declared client capabilities include form elicitation (`{}` counts as form).
pub fn can_elicit_form(capabilities: Option<&Value>) -> bool {
    match capabilities.and_then(|c| c.get("elicitation")) {
        Some(Value::Object(modes)) => modes.is_empty() || modes.contains_key("form"),
        _ => false,
    }
}

/// Where a client's answer to one of the gateway's requests is delivered, by (session, id),
/// and whether it answers a gate confirmation (which only a person's client may answer).
type Waiters = HashMap<(String, RequestId), (oneshot::Sender<Result<Value, Value>>, bool)>;

/// A client's answer, as [`PendingAnswers::deliver`] took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Delivered to the request waiting for it.
    Delivered,
    /// Nothing waits for it (late, or unknown).
    Unexpected,
    /// It answers a gate confirmation and the client may not (`may_answer`).
    Forbidden,
}

/// The prefix of the ids of the gate's `elicitation/create` requests that ask for the
/// person's answer in a form.
const FORM_ID_PREFIX: &str = "mcp-gateway-confirm-";
/// The prefix of those that send the client to the approvals page.
const URL_ID_PREFIX: &str = "mcp-gateway-url-";

/// The confirmation a client's answer to a form `elicitation/create` (by its request id)
/// answers: for an answer that reached an instance other than the one whose stream asked.
pub(crate) fn form_answer_to(id: &RequestId) -> Option<ElicitationId> {
    let RequestId::String(id) = id else {
        return None;
    };
    id.strip_prefix(FORM_ID_PREFIX)?.get(..36)?.parse().ok()
}

/// Answers to the server's own requests that wait on a legacy session: the gate's
/// `elicitation/create`, and the module requests relayed to the client (`relay`).
#[derive(Default)]
pub struct PendingAnswers {
    waiting: Mutex<Waiters>,
    next: std::sync::atomic::AtomicU64,
}

impl PendingAnswers {
    fn next(&self) -> u64 {
        self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// A request id no other waiting request uses. It names the confirmation, and whether
    /// the client was asked for the person's answer (a form) or only sent to the page (URL
    /// mode), so any instance that receives the answer can record it.
    pub(crate) fn fresh_id(&self, confirmation: ElicitationId, by_url: bool) -> RequestId {
        let kind = if by_url {
            URL_ID_PREFIX
        } else {
            FORM_ID_PREFIX
        };
        RequestId::String(format!("{kind}{confirmation}-{}", self.next()))
    }

    pub(crate) fn insert(
        &self,
        session: &str,
        id: &RequestId,
        confirmation: bool,
    ) -> oneshot::Receiver<Result<Value, Value>> {
        let (tx, rx) = oneshot::channel();
        self.lock()
            .insert((session.to_owned(), id.clone()), (tx, confirmation));
        rx
    }

    /// A fresh id for a module's request relayed to `session`'s client, and where its
    /// answer arrives.
    pub(crate) fn register_relayed(
        &self,
        session: &str,
    ) -> (RequestId, oneshot::Receiver<Result<Value, Value>>) {
        let id = RequestId::String(format!("mcp-gateway-relay-{}", self.next()));
        let rx = self.insert(session, &id, false);
        (id, rx)
    }

    pub(crate) fn forget(&self, session: &str, id: &RequestId) {
        self.lock().remove(&(session.to_owned(), id.clone()));
    }

    /// Delivers a client's response. A client that may not confirm (`may_answer`) may answer
    /// only a module's relayed request; anything else from it is refused, and a gate
    /// confirmation it tried to answer keeps waiting.
    pub fn deliver(
        &self,
        session: &str,
        id: &RequestId,
        outcome: Result<Value, Value>,
        may_confirm: bool,
    ) -> Delivery {
        let mut waiting = self.lock();
        let key = (session.to_owned(), id.clone());
        match waiting.get(&key) {
            // Only a relayed request may be answered without the scope.
            None if !may_confirm => return Delivery::Forbidden,
            None => return Delivery::Unexpected,
            Some((_, true)) if !may_confirm => return Delivery::Forbidden,
            Some(_) => {}
        }
        match waiting.remove(&key) {
            Some((waiter, _)) => match waiter.send(outcome) {
                Ok(()) => Delivery::Delivered,
                Err(_) => Delivery::Unexpected,
            },
            None => Delivery::Unexpected,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
