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
//! Whatever the path, the answer is recorded in the store, and the call the gate classified
//! once ([`GatedCall`]) is then resolved with the confirmation's id (`Gateway::resolve`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elicitation_core::{Elicitation, ElicitationId, response_schema};
use elicitation_store::Clock;
use http::Response;
use http_body_util::BodyExt;
use mcp_wire::jsonrpc::{self, RequestId};
use mcp_wire::mcp::elicitation_has_mode;
use mcp_wire::sse;
use mcp_wire::tools::{ElicitFormParams, ElicitUrlParams, InputRequest, InputRequiredResult};
use mcp_wire::{CallToolParams, ResultBody};
use serde_json::Value;

use crate::PageBase;
use crate::answers::PendingAnswers;
use crate::state::{RequestStates, StateClaims};
use mcp_auth::{Principal, SCOPE_RESPOND};
use mcp_gate::streams::StreamSlot;
use mcp_gate::{CallOutcome, Classified, ClientAnswer, GatedCall, Gateway};
use mcp_http_kit::body::{Body, ChannelBody};
use mcp_http_kit::error::McpError;

/// The key of the gateway's one input request.
pub const CONFIRM_KEY: &str = "confirm";
/// Most times one stream asks before giving up with the held result.
const MAX_ROUNDS: usize = 5;
/// Most times a 2026-07-28 client that says it sent the person to the page is sent there
/// again while the person has not answered; then it gets the held result (a client that
/// retries at once, as Claude Code's headless mode does, would otherwise spend its rounds
/// in a second and end with an error instead of the held result).
const MAX_URL_ROUNDS: u8 = 3;
/// How long writing one event may wait for a client that stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the principal may answer confirmations natively: only with the scope
/// `elicitations:respond`, the same the REST API requires, so an agent holding only
/// `tools:call` cannot approve its own call by declaring elicitation and answering itself.
/// Such a client gets the held result, answered by a person elsewhere.
pub fn may_answer(principal: &Principal) -> bool {
    principal.scopes.contains(SCOPE_RESPOND)
}

/// How the gateway may ask the person natively (`[gate] native`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NativeMode {
    /// A form when the client can show one and the message shows every argument; else the
    /// approvals page's URL when the client takes URLs; else the held result.
    #[default]
    Auto,
    /// Forms only.
    Form,
    /// The approvals page's URL only.
    Url,
    /// Never: every gated call gets the held result.
    Off,
}

/// How one confirmation is asked natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AskBy {
    /// A form the client shows (its answer is the person's).
    Form,
    /// The approvals page's URL for this one confirmation (the person answers there).
    Url,
}

impl NativeMode {
    /// How to ask, given what the client can do (`form`: shows forms and may answer;
    /// `url`: opens URLs) and whether the message shows every argument.
    pub(crate) fn choose(self, form: bool, url: bool, shows_all: bool) -> Option<AskBy> {
        let by_form = (form && shows_all).then_some(AskBy::Form);
        let by_url = url.then_some(AskBy::Url);
        match self {
            NativeMode::Off => None,
            NativeMode::Form => by_form,
            NativeMode::Url => by_url,
            NativeMode::Auto => by_form.or(by_url),
        }
    }
}

pub(crate) use crate::reply::{page_url, reply};

/// The answer to a call not sent because its module runs as the caller's own account and
/// theirs is not connected: for a client that takes URL elicitations and may be answered
/// with `-32042` (2025-11-25), that error with the Connect link; for any other, the tool
/// error result naming the link (or the page, when the gateway does not know its address).
pub(crate) fn account_needed(
    module: &str,
    page: Option<&str>,
    url_error: bool,
    surfaces: &gating_core::Surfaces,
) -> Result<ResultBody, McpError> {
    let link = page.map(|page| mcp_approvals::connect_url(page, module));
    match link {
        Some(url) if url_error => {
            // Only an id to tell elicitations apart (the gateway never hears of it again).
            let bytes = mcp_random::bytes::<16>().map_err(|e| McpError::Internal(e.to_string()))?;
            let id = uuid::Builder::from_random_bytes(bytes)
                .into_uuid()
                .to_string();
            let message = format!(
                "Module {} runs as your own account there: connect it on the gateway's page, then the call can be made again.",
                gating_core::visible(module)
            );
            Err(McpError::Upstream {
                code: mcp_wire::codes::URL_ELICITATION_REQUIRED,
                message: "This request requires your account to be connected first.".into(),
                data: Some(serde_json::json!({"elicitations": [{
                    "mode": "url",
                    "elicitationId": id,
                    "url": url,
                    "message": message,
                }]})),
            })
        }
        link => Ok(ResultBody::Value(gating_core::account_required_result(
            module,
            link.as_deref(),
            false,
            surfaces,
        ))),
    }
}

/// The message a URL-mode elicitation shows.
pub(crate) fn url_message(confirmation: &Elicitation) -> String {
    format!(
        "A person must approve or decline this call on the gateway's approvals page. {}",
        confirmation.spec.message()
    )
}

/// Asks `elicitation/create` for a confirmation: calls `write` with the form params (with
/// `"mode": "form"` when `with_mode`: 2025-11-25 and later; older clients do not know it).
fn with_elicit_params<R>(
    confirmation: &Elicitation,
    with_mode: bool,
    write: impl FnOnce(ElicitFormParams<'_>) -> R,
) -> R {
    let schema = response_schema(confirmation.spec.response());
    write(ElicitFormParams {
        mode: with_mode.then_some("form"),
        message: confirmation.spec.message(),
        requested_schema: &schema,
    })
}

/// What a 2026-07-28 client can be asked with, and how the gateway may ask.
#[derive(Debug, Clone, Default)]
pub struct ClientAsks {
    /// It declared form elicitation.
    pub form: bool,
    /// It declared URL-mode elicitation.
    pub url: bool,
    /// `[gate] native`.
    pub native: NativeMode,
    /// The approvals page's base URL, made only where a reply names the page (none: URL
    /// mode is not offered).
    pub page: PageBase,
    /// It declared the 2026-07-28 tasks extension: a call it cannot be asked about is
    /// answered with a task it polls (`hosted`) instead of the held result.
    pub tasks: bool,
}

/// The modern (multi round-trip) path.
pub struct Mrtr {
    /// The gateway.
    pub gateway: Arc<Gateway>,
    /// Seals and opens states.
    pub states: Arc<RequestStates>,
    /// Where a state's lifetime is read.
    pub clock: Arc<dyn Clock>,
    /// The caller's share of long-lived requests: a permission prompt holds one while it
    /// waits for a person.
    pub waits: mcp_gate::streams::StreamSlots,
}

impl Mrtr {
    /// Runs a modern `tools/call`: a retry's state is verified against the call and its
    /// answer recorded, then the gated call is resolved with the state's confirmation. The
    /// module's messages about the call go to `relay`.
    pub async fn call(
        &self,
        principal: &Principal,
        mut params: CallToolParams,
        asks: ClientAsks,
        relay: Option<Arc<dyn mcp_upstream::Relay>>,
    ) -> Result<ResultBody, McpError> {
        let responses = params.input_responses.take();
        let state = params.request_state.take();
        let call = match self.gateway.classify(principal, params).await? {
            Classified::Gated(call) => call,
            // Not gated (any more): a state has nothing to resume.
            other => {
                let _waiting = match &other {
                    Classified::PermissionPrompt(..) => {
                        match self.waits.try_open(&principal.caller) {
                            Some(slot) => Some(slot),
                            None => {
                                return Gateway::too_many_waiting(self.waits.max_per_caller())
                                    .into_reply()
                                    .map_err(McpError::from);
                            }
                        }
                    }
                    _ => None,
                };
                return match self.gateway.run(principal, other, relay).await {
                    // 2026-07-28 retired -32042: the link is in the result.
                    CallOutcome::NeedsAccount { module, surfaces } => {
                        account_needed(&module, asks.page.url().as_deref(), false, &surfaces)
                    }
                    outcome => outcome.into_reply().map_err(McpError::from),
                };
            }
        };
        let mut dismissed = false;
        // A retry that says the person went to the page (URL mode): the how-manieth.
        let mut url_round = 0u8;
        let confirmation = match state {
            Some(state) => {
                let answer = responses.and_then(|mut r| r.remove(CONFIRM_KEY));
                let claims = self.verify(principal, &call, &state, answer.is_some())?;
                let id: ElicitationId = claims.eid.parse().map_err(|_| invalid_state())?;
                if claims.url && answer.is_some() {
                    url_round = claims.round.saturating_add(1);
                }
                // A URL-mode answer says only that the person went to the page; the person's
                // answer is the one given there.
                if let Some(answer) = answer.filter(|_| !claims.url) {
                    dismissed = self
                        .gateway
                        .record_client_answer(principal, id, answer)
                        .await
                        == ClientAnswer::Dismissed;
                }
                Some(id)
            }
            None => call.params.confirmation_id().and_then(|id| id.parse().ok()),
        };
        // Boxed: a held call's resolve would make the future of every call through here
        // (the forwarded ones too) as large as its own.
        match Box::pin(self.gateway.resolve(principal, &call, confirmation, relay)).await {
            // Dismissed in the client: not asked there again; it waits for a person elsewhere.
            // So does a call whose client sent the person to the page again and again.
            CallOutcome::NeedsConfirmation(pending) if dismissed || url_round >= MAX_URL_ROUNDS => {
                self.held(principal, pending, &asks)
            }
            CallOutcome::NeedsConfirmation(pending) => {
                // A confirmation an approver group must answer is not asked of the caller.
                let caller_answers = self.gateway.caller_answers(&call.entry.qualified);
                let form = caller_answers && asks.form && may_answer(principal);
                let page = asks.page.url().filter(|_| caller_answers && asks.url);
                let url = page.is_some();
                match asks.native.choose(form, url, pending.askable_natively) {
                    Some(by) => Ok(self
                        .input_required(
                            principal,
                            &pending.confirmation,
                            &call,
                            (by, url_round),
                            page.as_deref(),
                        )
                        .into()),
                    None => self.held(principal, pending, &asks),
                }
            }
            outcome => reply(outcome, &asks.page),
        }
    }

    /// A call that waits for a person elsewhere: a task the client polls when it declared
    /// the tasks extension, else the held result.
    fn held(
        &self,
        principal: &Principal,
        pending: Box<mcp_gate::PendingConfirmation>,
        asks: &ClientAsks,
    ) -> Result<ResultBody, McpError> {
        if asks.tasks {
            return crate::held_task::modern_held(
                &self.states,
                self.clock.now(),
                principal,
                pending,
                &asks.page,
            );
        }
        reply(CallOutcome::NeedsConfirmation(pending), &asks.page)
    }

    fn verify(
        &self,
        principal: &Principal,
        call: &GatedCall,
        token: &str,
        answered: bool,
    ) -> Result<StateClaims, McpError> {
        let now = self.clock.now();
        let opened = self.states.open(token, now).map_err(|e| {
            McpError::InvalidParams(format!("Invalid or expired requestState ({e})"))
        })?;
        let claims = &opened.claims;
        let same_caller = claims.sub == principal.caller.subject_id()
            && claims.ten.as_deref() == principal.caller.tenant_id();
        let same_call =
            claims.tool == call.binding.tool && claims.dig == call.binding.digest.to_string();
        if !(same_caller && same_call) {
            return Err(McpError::InvalidParams(
                "requestState does not belong to this caller and call".into(),
            ));
        }
        // Only a person's client may answer a form (see `may_answer`): checked before the
        // state is spent.
        if answered && !claims.url {
            principal.require(SCOPE_RESPOND)?;
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
        call: &GatedCall,
        (by, round): (AskBy, u8),
        page: Option<&str>,
    ) -> Value {
        let claims = StateClaims {
            sub: principal.caller.subject_id().to_owned(),
            ten: principal.caller.tenant_id().map(str::to_owned),
            tool: call.binding.tool.clone(),
            dig: call.binding.digest.to_string(),
            eid: confirmation.id.to_string(),
            exp: confirmation.expires_at.unix_timestamp(),
            url: by == AskBy::Url,
            round: if by == AskBy::Url { round } else { 0 },
        };
        let Some(state) = self.states.seal(&claims) else {
            return gating_core::held_result(confirmation, self.gateway.surfaces());
        };
        if let (AskBy::Url, Some(page)) = (by, page) {
            let url = page_url(page, confirmation.id);
            let message = url_message(confirmation);
            let id = confirmation.id.to_string();
            let params = ElicitUrlParams {
                mode: "url",
                message: &message,
                elicitation_id: &id,
                url: &url,
            };
            let result = InputRequiredResult::one(
                CONFIRM_KEY,
                InputRequest {
                    method: "elicitation/create".into(),
                    params,
                },
                state,
            );
            return serde_json::to_value(result).unwrap_or_else(|_| {
                gating_core::held_result(confirmation, self.gateway.surfaces())
            });
        }
        with_elicit_params(confirmation, true, |params| {
            let result = InputRequiredResult::one(
                CONFIRM_KEY,
                InputRequest {
                    method: "elicitation/create".into(),
                    params,
                },
                state,
            );
            serde_json::to_value(result)
                .unwrap_or_else(|_| gating_core::held_result(confirmation, self.gateway.surfaces()))
        })
    }
}

fn invalid_state() -> McpError {
    McpError::InvalidParams("Invalid or expired requestState".into())
}

/// Records a client's answer to the gate's form question `id` that arrived where nothing
/// waits for it (another instance asked; it waits on the store and resumes the call once
/// the answer is recorded).
pub(crate) async fn record_from_elsewhere(
    gateway: &Gateway,
    principal: &Principal,
    id: ElicitationId,
    result: Value,
) {
    gateway.record_client_answer(principal, id, result).await;
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
    pub principal: Arc<Principal>,
    /// The client's `tools/call` id.
    pub request_id: RequestId,
    /// The gated call, as classified.
    pub call: Box<GatedCall>,
    /// What the session's client can answer (its module's questions, once the call runs).
    pub client: crate::answers::ClientAnswers,
    /// The session's log level (a rank).
    pub log_level: u8,
    /// How the person is asked.
    pub(crate) by: AskBy,
    /// The approvals page's base URL (URL mode).
    pub(crate) page: Option<String>,
    /// Where the time left to answer is read.
    pub(crate) clock: Arc<dyn Clock>,
    /// How often the stream tells the client it still waits.
    pub(crate) keep_alive: Duration,
    /// How many times the stream told the client it still waits (a `progressToken`'s
    /// progress: it rises across every question of the stream).
    pub(crate) beats: std::sync::atomic::AtomicU64,
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
    tokio::spawn(tracing::Instrument::in_current_span(async move {
        let _slot = slot;
        let final_message = converse(&context, first, &tx).await;
        if let Some(message) = final_message {
            deliver(&tx, sse::event_bytes(&message)).await;
        }
    }));
    mcp_http_kit::response::sse_response(body.boxed())
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
) -> Option<Vec<u8>> {
    let answer_with = |result: Result<ResultBody, McpError>| {
        crate::relay::final_message(&c.request_id, result, false)
    };
    let held = |current: &Elicitation| {
        let url = c.page.as_deref().map(|page| page_url(page, current.id));
        answer_with(Ok(gating_core::held_result_at(
            current,
            c.gateway.surfaces(),
            url.as_deref(),
        )
        .into()))
    };
    let by_url = c.by == AskBy::Url;
    let mut current = first;
    for _ in 0..MAX_ROUNDS {
        let answered = match ask_and_wait(c, &current, tx).await {
            Waited::Answer(answered) => answered,
            Waited::Held => return held(&current),
            Waited::Gone => return None,
        };
        let dismissed = match answered {
            Some(Ok(result)) if !by_url => {
                c.gateway
                    .record_client_answer(&c.principal, current.id, result)
                    .await
                    == ClientAnswer::Dismissed
            }
            Some(Ok(_)) | None => false,
            // The client refused to ask (it errored): leave the question to the REST API.
            Some(Err(error)) => {
                tracing::info!(elicitation_id = %current.id, ?error, "the client did not elicit; answering with the held result");
                return held(&current);
            }
        };
        if dismissed {
            return held(&current);
        }
        match run_answered(c, &current, tx).await? {
            CallOutcome::NeedsConfirmation(next) if next.askable_natively || by_url => {
                current = next.confirmation;
            }
            outcome => return answer_with(outcome.into_reply().map_err(McpError::from)),
        }
    }
    held(&current)
}

/// How one question on the stream ended.
enum Waited {
    /// The client's answer (`None`: the store says the elicitation changed, answered
    /// elsewhere or expired).
    Answer(Option<Result<Value, Value>>),
    /// The person did not go to the page (URL mode): the held result.
    Held,
    /// The client went away.
    Gone,
}

/// What keeps the stream alive while a person decides: for a client that sent a
/// `progressToken` with its call, `notifications/progress` (rising; a client that resets its
/// request timeout on progress keeps waiting as long as the person takes), else an SSE
/// comment.
fn still_waiting(c: &StreamContext) -> Bytes {
    const WAITING: &str = "waiting for a person to confirm";
    let token = c
        .call
        .params
        .meta
        .as_ref()
        .and_then(|meta| meta.get("progressToken"));
    match token {
        Some(token) => {
            let told = c.beats.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let params = mcp_wire::mcp::progress_params(token, told, WAITING);
            sse::event_bytes(&jsonrpc::notification_bytes(
                "notifications/progress",
                Some(&params),
            ))
        }
        None => sse::comment(WAITING),
    }
}

/// Asks the client about `current` on the stream and waits for its answer, the store's
/// word that it changed, or the client to go away; keeps the stream alive meanwhile.
async fn ask_and_wait(
    c: &StreamContext,
    current: &Elicitation,
    tx: &tokio::sync::mpsc::Sender<Bytes>,
) -> Waited {
    let by_url = c.by == AskBy::Url;
    let with_mode = elicitation_has_mode(c.version);
    let server_id = c.answers.fresh_id(current.id, by_url);
    // A URL-mode answer is not the person's (they answer on the page), so any client may
    // give it; a form's answer only a client that may confirm.
    let answer = c.answers.insert(&c.session, &server_id, !by_url);
    let forget = || c.answers.forget(&c.session, &server_id);
    let ask = match (c.by, c.page.as_deref()) {
        (AskBy::Url, Some(page)) => {
            let url = page_url(page, current.id);
            let message = url_message(current);
            let id = current.id.to_string();
            let params = ElicitUrlParams {
                mode: "url",
                message: &message,
                elicitation_id: &id,
                url: &url,
            };
            jsonrpc::request_bytes(&server_id, "elicitation/create", &params)
        }
        _ => with_elicit_params(current, with_mode, |params| {
            jsonrpc::request_bytes(&server_id, "elicitation/create", &params)
        }),
    };
    if !deliver(tx, sse::event_bytes(&ask)).await {
        forget();
        return Waited::Gone;
    }
    let remaining = (current.expires_at - c.clock.now()).max(time::Duration::ZERO);
    let deadline = tokio::time::Instant::now() + Duration::try_from(remaining).unwrap_or_default();
    let changed = c
        .gateway
        .store()
        .wait_for_change(&c.principal.caller, current.id, deadline);
    tokio::pin!(changed, answer);
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + c.keep_alive, c.keep_alive);
    let mut went = false;
    let answered = loop {
        tokio::select! {
            answered = &mut answer, if !went => match answered.ok() {
                // URL mode: the person went to the page (accept) — wait for their answer
                // there; anything else, they did not: the held result.
                Some(Ok(result)) if by_url => {
                    if result.get("action").and_then(Value::as_str) == Some("accept") {
                        went = true;
                    } else {
                        forget();
                        return Waited::Held;
                    }
                }
                other => break other,
            },
            _ = &mut changed => break None,
            // The client went away: stop asking (the confirmation stays pending, for the
            // REST API or a retry) and free the stream.
            () = tx.closed() => {
                forget();
                return Waited::Gone;
            }
            _ = keep_alive.tick() => match tx.try_send(still_waiting(c)) {
                // A full buffer means the client is slow to read: a keep-alive is not needed.
                Ok(()) | Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {}
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                    forget();
                    return Waited::Gone;
                }
            },
        }
    };
    forget();
    if by_url && with_mode {
        // The page's answer is in: the client may close what it opened.
        let params = serde_json::json!({"elicitationId": current.id.to_string()});
        let done = jsonrpc::notification_bytes("notifications/elicitation/complete", Some(&params));
        if !deliver(tx, sse::event_bytes(&done)).await {
            return Waited::Gone;
        }
    }
    Waited::Answer(answered)
}

/// Resolves the call with its answered confirmation `current`, the module's messages about
/// it travelling on the stream; `None` when the client went away (the call is then dropped,
/// which cancels it at its module).
async fn run_answered(
    c: &StreamContext,
    current: &Elicitation,
    tx: &tokio::sync::mpsc::Sender<Bytes>,
) -> Option<CallOutcome> {
    let asker = crate::relay::SessionAsker {
        answers: c.answers.clone(),
        session: c.session.clone(),
        can: c.client,
    };
    let (relay, mut queue) = crate::relay::ClientRelay::new(
        &c.call.entry,
        crate::relay::LogFilter::AtLeast(c.log_level),
        Some(Box::new(asker)),
        c.gateway.inbox(&c.principal),
    );
    let relay: Arc<dyn mcp_upstream::Relay> = relay;
    let resolving = c
        .gateway
        .resolve(&c.principal, &c.call, Some(current.id), Some(relay));
    tokio::pin!(resolving);
    let outcome = loop {
        tokio::select! {
            biased;
            Some(message) = queue.recv() => {
                if !deliver(tx, sse::event_bytes(&message)).await {
                    return None;
                }
            }
            outcome = &mut resolving => break outcome,
            () = tx.closed() => return None,
        }
    };
    while let Ok(message) = queue.try_recv() {
        if !deliver(tx, sse::event_bytes(&message)).await {
            return None;
        }
    }
    Some(outcome)
}
