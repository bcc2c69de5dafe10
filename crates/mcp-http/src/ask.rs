//! Asking the person natively, inside their MCP client.
//!
//! - 2026-07-28 clients that declare form elicitation: the gated `tools/call` answers
//!   `input_required` with one `elicitation/create` and a sealed `requestState`; the retry
//!   carries the answer ([`Mrtr`]).
//! - 2025-11-25 sessions that declared elicitation: the gated `tools/call` answers with an SSE
//!   stream carrying `elicitation/create`; the client POSTs its answer; the result follows on
//!   the same stream ([`stream_confirmation`]). An answer through the REST API completes it
//!   too.
//!
//! Whatever the path, the answer is recorded in the store, and the call is then decided by
//! the same gate as any other (`Gateway::call_tool` with the confirmation's id).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use elicitation_core::{
    Answer, ElicitAction, Elicitation, ElicitationId, ElicitationType, response_schema,
};
use gating_core::CallDigest;
use http::{Response, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::auth::{Principal, SCOPE_RESPOND};
use crate::body::ChannelBody;
use crate::error::McpError;
use crate::gateway::{CallOutcome, Gateway};
use crate::jsonrpc::{self, RequestId};
use crate::service::Body;
use crate::sse;
use crate::state::{RequestStates, StateClaims};
use crate::streams::StreamSlot;
use crate::wire::META_CONFIRMATION_ID;

/// The key of the gateway's one input request.
pub const CONFIRM_KEY: &str = "confirm";
/// How often a waiting stream sends an SSE comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Most times one stream asks before giving up with the held result.
const MAX_ROUNDS: usize = 5;
/// How long one store operation may take here.
const STORE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long writing one event may wait for a client that stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the principal may answer confirmations natively: only with the scope
/// `elicitations:respond`, the same the REST API requires, so an agent holding only
/// `tools:call` cannot approve its own call by declaring elicitation and answering itself.
/// Such a client gets the held result, answered by a person elsewhere.
pub fn may_answer(principal: &Principal) -> bool {
    principal.scopes.contains(SCOPE_RESPOND)
}

/// Whether declared client capabilities include form elicitation (`{}` counts as form).
pub fn can_elicit_form(capabilities: Option<&Value>) -> bool {
    match capabilities.and_then(|c| c.get("elicitation")) {
        Some(Value::Object(modes)) => modes.is_empty() || modes.contains_key("form"),
        _ => false,
    }
}

/// The params of an `elicitation/create` form request for a confirmation. `with_mode` adds
/// `"mode": "form"` (2025-11-25 and later; older clients do not know the field).
pub fn elicit_params(confirmation: &Elicitation, with_mode: bool) -> Value {
    let mut params = json!({
        "message": confirmation.spec.message(),
        "requestedSchema": response_schema(confirmation.spec.response()),
    });
    if with_mode {
        params["mode"] = json!("form");
    }
    params
}

/// Records an `ElicitResult` (the client's answer) in the store. Refusals (already answered
/// elsewhere, expired) are not errors here: the gate reads the record next.
async fn record(gateway: &Gateway, principal: &Principal, id: ElicitationId, result: &Value) {
    let Some(action) = result
        .get("action")
        .and_then(|a| serde_json::from_value::<ElicitAction>(a.clone()).ok())
    else {
        tracing::warn!(elicitation_id = %id, "an elicitation answer without a valid action; ignored");
        return;
    };
    let answer = Answer::from_action(
        ElicitationType::Confirmation,
        action,
        result.get("content").cloned(),
    );
    let applied = tokio::time::timeout(
        STORE_TIMEOUT,
        gateway.store().apply(&principal.caller, id, answer),
    )
    .await;
    match applied {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::info!(elicitation_id = %id, error = %e, "the client's answer was not recorded")
        }
        Err(_) => {
            tracing::warn!(elicitation_id = %id, "the store did not record the client's answer in time")
        }
    }
}

/// `params` with `_meta.confirmation_id = id`.
fn with_confirmation(mut params: Map<String, Value>, id: ElicitationId) -> Map<String, Value> {
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_CONFIRMATION_ID.into(), json!(id.to_string()));
    }
    params
}

/// The modern (multi round-trip) path.
pub struct Mrtr<'a> {
    /// The gateway.
    pub gateway: &'a Gateway,
    /// Seals and opens states.
    pub states: &'a RequestStates,
}

impl Mrtr<'_> {
    /// Runs a modern `tools/call`: a retry's state is verified and its answer recorded first.
    pub async fn call(
        &self,
        principal: &Principal,
        mut params: Map<String, Value>,
        can_elicit: bool,
    ) -> Result<Value, McpError> {
        let responses = params.remove("inputResponses");
        let tool = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if let Some(state) = params.remove("requestState") {
            // Only a person's client may answer (see `may_answer`); checked before the state
            // is spent.
            if responses
                .as_ref()
                .is_some_and(|r| r.get(CONFIRM_KEY).is_some())
            {
                principal.require(SCOPE_RESPOND)?;
            }
            let claims = self.verify(principal, &params, &state)?;
            let id: ElicitationId = claims.eid.parse().map_err(|_| invalid_state())?;
            if let Some(answer) = responses.as_ref().and_then(|r| r.get(CONFIRM_KEY)) {
                record(self.gateway, principal, id, answer).await;
            }
            params = with_confirmation(params, id);
        }
        match self.gateway.call_tool(principal, params).await? {
            CallOutcome::Done(result) => Ok(result),
            CallOutcome::NeedsConfirmation(pending) if can_elicit && pending.askable_natively => {
                let binding = (tool, pending.digest.to_string());
                Ok(self.input_required(principal, &pending.confirmation, &binding))
            }
            CallOutcome::NeedsConfirmation(pending) => {
                Ok(gating_core::held_result(&pending.confirmation))
            }
        }
    }

    fn verify(
        &self,
        principal: &Principal,
        params: &Map<String, Value>,
        state: &Value,
    ) -> Result<StateClaims, McpError> {
        let token = state.as_str().ok_or_else(invalid_state)?;
        let now = time::OffsetDateTime::now_utc();
        let opened = self.states.open(token, now).map_err(|e| {
            McpError::InvalidParams(format!("Invalid or expired requestState ({e})"))
        })?;
        let claims = &opened.claims;
        let same_caller = claims.sub == principal.caller.subject_id()
            && claims.ten.as_deref() == principal.caller.tenant_id();
        let same_call = (claims.tool.clone(), claims.dig.clone()) == call_binding(params);
        if !(same_caller && same_call) {
            return Err(McpError::InvalidParams(
                "requestState does not belong to this caller and call".into(),
            ));
        }
        // Only now is the state spent: a stolen state sent with other arguments does not
        // burn it for its owner.
        if !self.states.mark_used(&opened, now) {
            return Err(McpError::InvalidParams(
                "Invalid or expired requestState (requestState was already used)".into(),
            ));
        }
        Ok(opened.claims)
    }

    fn input_required(
        &self,
        principal: &Principal,
        confirmation: &Elicitation,
        binding: &(String, String),
    ) -> Value {
        let claims = StateClaims {
            sub: principal.caller.subject_id().to_owned(),
            ten: principal.caller.tenant_id().map(str::to_owned),
            tool: binding.0.clone(),
            dig: binding.1.clone(),
            eid: confirmation.id.to_string(),
            exp: confirmation.expires_at.unix_timestamp(),
        };
        let Some(state) = self.states.seal(&claims) else {
            return gating_core::held_result(confirmation);
        };
        json!({
            "resultType": "input_required",
            "inputRequests": {CONFIRM_KEY: {"method": "elicitation/create", "params": elicit_params(confirmation, true)}},
            "requestState": state,
        })
    }
}

/// The (tool, digest hex) of a `tools/call`, as a state binds them.
fn call_binding(params: &Map<String, Value>) -> (String, String) {
    let arguments = params.get("arguments").filter(|a| !a.is_null());
    let tool = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    (tool, CallDigest::of_arguments(arguments).to_string())
}

fn invalid_state() -> McpError {
    McpError::InvalidParams("Invalid or expired requestState".into())
}

/// Where a client's answer to one of the gateway's requests is delivered, by (session, id).
type Waiters = HashMap<(String, RequestId), oneshot::Sender<Result<Value, Value>>>;

/// Answers the server's own requests (`elicitation/create`) that wait on a legacy session.
#[derive(Default)]
pub struct PendingAnswers {
    waiting: Mutex<Waiters>,
    next: std::sync::atomic::AtomicU64,
}

impl PendingAnswers {
    /// A request id no other waiting request uses.
    fn fresh_id(&self, confirmation: ElicitationId) -> RequestId {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        RequestId::String(format!("mcp-gateway-confirm-{confirmation}-{n}"))
    }

    fn register(&self, session: &str, id: &RequestId) -> oneshot::Receiver<Result<Value, Value>> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert((session.to_owned(), id.clone()), tx);
        rx
    }

    fn forget(&self, session: &str, id: &RequestId) {
        self.lock().remove(&(session.to_owned(), id.clone()));
    }

    /// Delivers a client's response; false if nothing waits for it.
    pub fn deliver(&self, session: &str, id: &RequestId, outcome: Result<Value, Value>) -> bool {
        match self.lock().remove(&(session.to_owned(), id.clone())) {
            Some(waiter) => waiter.send(outcome).is_ok(),
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Everything the legacy stream needs, owned, so it can outlive the request handler.
pub struct StreamContext {
    /// The gateway.
    pub gateway: Arc<Gateway>,
    /// Where client answers arrive.
    pub answers: Arc<PendingAnswers>,
    /// The legacy session.
    pub session: String,
    /// Its negotiated version.
    pub version: &'static str,
    /// The caller.
    pub principal: Principal,
    /// The client's `tools/call` id.
    pub request_id: RequestId,
    /// The `tools/call` params.
    pub params: Map<String, Value>,
}

/// Answers a gated legacy `tools/call` with an SSE stream that asks the person, waits, and
/// then carries the call's result.
/// `slot` counts the stream against the caller's cap until the conversation ends.
pub fn stream_confirmation(
    context: StreamContext,
    first: Elicitation,
    slot: StreamSlot,
) -> Response<Body> {
    let (tx, body) = ChannelBody::new(16);
    tokio::spawn(async move {
        let _slot = slot;
        let final_message = converse(&context, first, &tx).await;
        if let Some(message) = final_message {
            deliver(&tx, sse::event(&message.to_string())).await;
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(body.boxed())
        .expect("a static response is valid")
}

/// Writes an event; false if the client is gone or stopped reading for [`SEND_TIMEOUT`].
async fn deliver(tx: &tokio::sync::mpsc::Sender<Bytes>, event: Bytes) -> bool {
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, tx.send(event)).await,
        Ok(Ok(()))
    )
}

/// The conversation on the stream; returns the final JSON-RPC response to write, or `None`
/// when the client went away (the elicitation then stays pending until answered or expired).
async fn converse(
    c: &StreamContext,
    first: Elicitation,
    tx: &tokio::sync::mpsc::Sender<Bytes>,
) -> Option<Value> {
    let with_mode = c.version >= "2025-11-25";
    let mut current = first;
    for _ in 0..MAX_ROUNDS {
        let server_id = c.answers.fresh_id(current.id);
        let answer = c.answers.register(&c.session, &server_id);
        let ask = jsonrpc::request(
            &server_id,
            "elicitation/create",
            elicit_params(&current, with_mode),
        );
        if !deliver(tx, sse::event(&ask.to_string())).await {
            c.answers.forget(&c.session, &server_id);
            return None;
        }
        let remaining =
            (current.expires_at - time::OffsetDateTime::now_utc()).max(time::Duration::ZERO);
        let deadline =
            tokio::time::Instant::now() + Duration::try_from(remaining).unwrap_or_default();
        let changed = c
            .gateway
            .store()
            .wait_for_change(&c.principal.caller, current.id, deadline);
        tokio::pin!(changed, answer);
        let mut keep_alive =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        let answered = loop {
            tokio::select! {
                answered = &mut answer => break answered.ok(),
                _ = &mut changed => break None,
                // The client went away: stop asking (the confirmation stays pending, for
                // the REST API or a retry) and free the stream.
                () = tx.closed() => {
                    c.answers.forget(&c.session, &server_id);
                    return None;
                }
                _ = keep_alive.tick() => match tx.try_send(sse::comment("waiting for a person to confirm")) {
                    // A full buffer means the client is slow to read: a keep-alive is not needed.
                    Ok(()) | Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                        c.answers.forget(&c.session, &server_id);
                        return None;
                    }
                },
            }
        };
        c.answers.forget(&c.session, &server_id);
        match answered {
            Some(Ok(result)) => record(&c.gateway, &c.principal, current.id, &result).await,
            // The client refused to ask (it errored): leave the question to the REST API.
            Some(Err(error)) => {
                tracing::info!(elicitation_id = %current.id, ?error, "the client did not elicit; answering with the held result");
                return Some(jsonrpc::result(
                    &c.request_id,
                    gating_core::held_result(&current),
                ));
            }
            None => {}
        }
        match c
            .gateway
            .call_tool(
                &c.principal,
                with_confirmation(c.params.clone(), current.id),
            )
            .await
        {
            Ok(CallOutcome::Done(result)) => return Some(jsonrpc::result(&c.request_id, result)),
            Ok(CallOutcome::NeedsConfirmation(next)) if next.askable_natively => {
                current = next.confirmation
            }
            Ok(CallOutcome::NeedsConfirmation(next)) => {
                return Some(jsonrpc::result(
                    &c.request_id,
                    gating_core::held_result(&next.confirmation),
                ));
            }
            Err(e) => return Some(jsonrpc::error(Some(&c.request_id), &e)),
        }
    }
    Some(jsonrpc::result(
        &c.request_id,
        gating_core::held_result(&current),
    ))
}
